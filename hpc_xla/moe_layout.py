"""fused_moe's interleaved w13 layout (framework-free: numpy, torch and jax arrays alike).

`interleave_w13` makes the layout `fused_moe(..., w13_interleaved=True)` reads: w13 [E, 2I, H] with gate rows [:I]
and up rows [I:] (vLLM's layout) becomes gate and up rows interleaved in blocks of 64 -- rows [128q, 128q + 64) are
gate rows [64q, 64q + 64), rows [128q + 64, 128q + 128) the matching up rows. Convert once, when the weights are
loaded, and pass the result with w13_interleaved=True on every call: one 128-column block of the gate-up GEMM's
output then holds a gate column and its up column in the same thread's accumulators, so the CUDA grouped path
computes silu(gate) * up in that GEMM's epilogue (no act kernel, no [pairs, 2I] intermediate round trip); every
other path (and the CPU reference) reads the rows through the layout, with the same result. Per-expert scales
(fp8_tensor's w13_scale [E]) are unchanged; fp8_block128 is not supported with it (its 128-row weight scales would
span gate and up rows). I must be a multiple of 64.
"""

ACT_EPILOGUE_BLOCK = 64


def interleavable(quant, inter):
    """Whether fused_moe takes w13_interleaved for this quant and intermediate size I (the bench and the vLLM
    adapter prepare the layout exactly there)."""
    return quant in (None, "fp8_tensor") and inter % ACT_EPILOGUE_BLOCK == 0


def _check(w13, name):
    if len(w13.shape) != 3 or w13.shape[1] % (2 * ACT_EPILOGUE_BLOCK) != 0:
        raise ValueError("%s must be [E, 2I, H] with I a multiple of %d; got shape %s" %
                         (name, ACT_EPILOGUE_BLOCK, tuple(w13.shape)))
    return w13.shape[0], w13.shape[1] // 2, w13.shape[2]


def interleave_w13(w13):
    """[E, 2I, H] gate-then-up rows -> gate / up rows interleaved in blocks of 64 (a copy)."""
    e, i, h = _check(w13, "w13")
    b = ACT_EPILOGUE_BLOCK
    return w13.reshape(e, 2, i // b, b, h).swapaxes(1, 2).reshape(e, 2 * i, h)


def deinterleave_w13(w13_interleaved):
    """The inverse of interleave_w13."""
    e, i, h = _check(w13_interleaved, "w13_interleaved")
    b = ACT_EPILOGUE_BLOCK
    return w13_interleaved.reshape(e, i // b, 2, b, h).swapaxes(1, 2).reshape(e, 2 * i, h)
