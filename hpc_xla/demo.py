"""The main job: run hpc_xla's ops through jax.jit and through torch on the same random inputs, check both
against the float64 reference and against each other (bit for bit on the same device), and print timings.

    python -m hpc_xla.demo                 # GPU when a Hopper GPU is present, else CPU
    python -m hpc_xla.demo --device cpu
"""

import argparse
import statistics
import sys
import time

import ml_dtypes
import numpy as np

from hpc_xla import reference
from hpc_xla._arrays import from_torch, to_torch

BF16, FP8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn


def pick_device(requested):
    import torch

    hopper = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
    if requested == "auto":
        return "cuda" if hopper else "cpu"
    if requested == "cuda" and not hopper:
        sys.exit("--device cuda needs a Hopper (compute capability 9.0) GPU")
    return requested


def make_prologue_inputs(tokens, hq, hkv, d, page, fp8, seed=0):
    """One decode/prefill step's attention prologue: q/k/v, positions, a paged cache with garbage in it."""
    rng = np.random.default_rng(seed)
    max_pos = 8192
    inv = 1.0 / (10000.0 ** (np.arange(0, d, 2) / d))
    freqs = np.arange(max_pos)[:, None] * inv[None]
    blocks = tokens // page + 2
    cache_dtype = FP8 if fp8 else BF16
    return dict(
        q=rng.standard_normal((tokens, hq, d)).astype(BF16),
        k=rng.standard_normal((tokens, hkv, d)).astype(BF16),
        v=rng.standard_normal((tokens, hkv, d)).astype(BF16),
        positions=rng.integers(0, max_pos, tokens).astype(np.int32),
        cos_sin_cache=np.concatenate([np.cos(freqs), np.sin(freqs)], -1).astype(np.float32),
        slot_mapping=rng.permutation(blocks * page)[:tokens].astype(np.int32),
        k_cache=rng.standard_normal((blocks, page, hkv, d)).astype(cache_dtype),
        v_cache=rng.standard_normal((blocks, page, hkv, d)).astype(cache_dtype),
        q_norm_weight=(0.5 + rng.random(d)).astype(np.float32),
        k_norm_weight=(0.5 + rng.random(d)).astype(np.float32),
        k_scale=np.float32(0.05) if fp8 else None,
        v_scale=np.float32(0.05) if fp8 else None,
    )


POSITIONAL = ["q", "k", "v", "positions", "cos_sin_cache", "slot_mapping", "k_cache", "v_cache"]
OPTIONAL = ["q_norm_weight", "k_norm_weight", "k_scale", "v_scale"]


def time_us(fn, sync, reps):
    fn()
    sync()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def run_jax(inputs, device, q_quant, reps):
    import jax

    import hpc_xla.jax as hj

    dev = jax.devices("gpu" if device == "cuda" else "cpu")[0]
    a = {k: None if v is None else jax.device_put(v, dev) for k, v in inputs.items()}
    f = jax.jit(lambda *p: hj.rope_norm(*p, **{n: a[n] for n in OPTIONAL}, q_quant=q_quant))
    out = [np.asarray(o) for o in f(*[a[n] for n in POSITIONAL])]
    return out, time_us(lambda: jax.block_until_ready(f(*[a[n] for n in POSITIONAL])), lambda: None, reps)


def run_torch(inputs, device, q_quant, reps):
    import torch

    import hpc_xla.torch as ht

    t = {k: to_torch(v, device) for k, v in inputs.items()}
    fresh = {n: t[n].clone() for n in ("k_cache", "v_cache")}
    res = ht.rope_norm(*[t[n] for n in POSITIONAL], **{n: t[n] for n in OPTIONAL}, q_quant=q_quant)
    res = res if isinstance(res, tuple) else (res,)
    out = [from_torch(r) for r in res] + [from_torch(t["k_cache"]), from_torch(t["v_cache"])]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    call = lambda: ht.rope_norm(*[t[n] for n in POSITIONAL[:6]], fresh["k_cache"], fresh["v_cache"],  # noqa: E731
                                **{n: t[n] for n in OPTIONAL}, q_quant=q_quant)
    return out, time_us(call, sync, reps)


def check_prologue(inputs, out, fp8):
    ref_q, ref_k, ref_v = reference.rope_norm(inputs["q"], inputs["k"], inputs["v"], inputs["positions"],
                                              inputs["cos_sin_cache"], q_norm_weight=inputs["q_norm_weight"],
                                              k_norm_weight=inputs["k_norm_weight"])
    if fp8:
        q = out[0].astype(np.float64) * out[1].astype(np.float64)[..., None]
        k_cache, v_cache = out[2], out[3]
        k_scale, v_scale = float(inputs["k_scale"]), float(inputs["v_scale"])
    else:
        q, k_cache, v_cache = out[0], out[1], out[2]
        k_scale = v_scale = 1.0
    slots = inputs["slot_mapping"]
    hkv, d = inputs["k"].shape[1:]
    k = k_cache.reshape(-1, hkv, d)[slots].astype(np.float64) * k_scale
    v = v_cache.reshape(-1, hkv, d)[slots].astype(np.float64) * v_scale
    return {"q": reference.relative_error(q, ref_q), "k_cache": reference.relative_error(k, ref_k),
            "v_cache": reference.relative_error(v, ref_v)}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m hpc_xla.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--tokens", type=int, default=None, help="tokens per step (default 4096 on GPU, 256 on CPU)")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    device = pick_device(args.device)
    tokens = args.tokens or (4096 if device == "cuda" else 256)
    hq, hkv, d, page = 32, 4, 128, 16
    print("hpc_xla demo on %s: rope_norm (fused QK-RMSNorm + RoPE + paged KV write), T=%d, heads %d/%d, D=%d, "
          "page %d" % (device, tokens, hq, hkv, d, page))
    ok = True
    rows = []
    for fp8 in (False, True):
        q_quant = "fp8" if fp8 else None
        inputs = make_prologue_inputs(tokens, hq, hkv, d, page, fp8)
        jax_out, jax_us = run_jax(inputs, device, q_quant, args.reps)
        torch_out, torch_us = run_torch(inputs, device, q_quant, args.reps)
        errs = check_prologue(inputs, jax_out, fp8)
        same = all(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
                   for a, b in zip(jax_out, torch_out))
        tol = 5e-2 if fp8 else 1e-2
        passed = same and all(e < tol for e in errs.values())
        ok &= passed
        rows.append(("fp8 cache + fp8 q" if fp8 else "bf16", errs, same, jax_us, torch_us, passed))
    print("%-18s %-42s %-14s %10s %10s %s" % ("variant", "rel. error vs float64 (q, k_cache, v_cache)",
                                             "jax == torch", "jax.jit us", "torch us", "check"))
    for name, errs, same, jus, tus, passed in rows:
        print("%-18s %-42s %-14s %10.1f %10.1f %s" % (name, "%.1e, %.1e, %.1e" % tuple(errs.values()),
                                                      "bitwise" if same else "DIFFERENT", jus, tus,
                                                      "ok" if passed else "FAILED"))
    print("(timings: wall clock per call incl. dispatch and sync, median of %d; see `python -m hpc_xla.bench` for "
          "kernel timings)" % args.reps)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
