"""Weight layouts for fused_moe's experimental kernels (framework-free: numpy, torch and jax arrays alike).

`interleave_w13` is the layout `HPC_XLA_MOE_ACT=epilogue` expects (experiment 16, CUDA only; see the README's knob
list): w13 [E, 2I, H] with gate rows [:I] and up rows [I:] (vLLM's layout) becomes gate and up rows interleaved in
blocks of 64 -- rows [128q, 128q + 64) are gate rows [64q, 64q + 64), rows [128q + 64, 128q + 128) the matching up
rows -- so one 128-column block of the gate-up GEMM's output holds a gate column and its up column in the same
thread's accumulators, and the GEMM's epilogue can compute silu(gate) * up itself. Per-expert scales (fp8_tensor's
w13_scale [E]) are unchanged; fp8_block128 is not supported by that epilogue.
"""

ACT_EPILOGUE_BLOCK = 64


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
