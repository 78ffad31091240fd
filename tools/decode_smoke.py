"""Quick GPU smoke test of decode_attention through JAX against a float64 numpy reference (dev tool)."""
import sys
import time

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import hpc_xla.jax as hj


def run(B, Hq, Hkv, D, P, q_len, lens, kv="bfloat16", schedule="dynamic", seed=0):
    rng = np.random.default_rng(seed)
    maxblk = max(1, (max(lens) + P - 1) // P)
    NB = B * maxblk + 3
    bt = rng.permutation(NB)[:B * maxblk].reshape(B, maxblk).astype(np.int32)
    kdt = ml_dtypes.float8_e4m3fn if kv == "fp8" else ml_dtypes.bfloat16
    kc = rng.standard_normal((NB, P, Hkv, D)).astype(kdt)
    vc = rng.standard_normal((NB, P, Hkv, D)).astype(kdt)
    q = rng.standard_normal((B * q_len, Hq, D)).astype(ml_dtypes.bfloat16)
    lens = np.asarray(lens, np.int32)
    ks = vs = None
    if kv == "fp8":
        ks, vs = np.float32(0.5), np.float32(0.25)
    g = Hq // Hkv
    ref = np.zeros((B * q_len, Hq, D))
    for b in range(B):
        L = lens[b]
        if L == 0:
            continue
        toks = np.arange(L)
        blk, off = bt[b, toks // P], toks % P
        for j in range(q_len):
            vis = L - q_len + j + 1
            for h in range(Hq):
                K = kc[blk, off, h // g].astype(np.float64)[:vis] * (ks or 1)
                V = vc[blk, off, h // g].astype(np.float64)[:vis] * (vs or 1)
                s = K @ q[b * q_len + j, h].astype(np.float64) / np.sqrt(D)
                p = np.exp(s - s.max())
                ref[b * q_len + j, h] = (p / p.sum()) @ V
    f = jax.jit(lambda *a: hj.decode_attention(*a, q_len=q_len, schedule=schedule, k_scale=ks, v_scale=vs))
    args = [jnp.asarray(x) for x in (q, kc, vc, bt, lens)]
    out = np.asarray(f(*args)).astype(np.float64)
    err = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)
    out2 = np.asarray(f(*args)).astype(np.float64)
    return err, np.array_equal(out, out2)


if __name__ == "__main__":
    cases = [
        dict(B=4, Hq=8, Hkv=1, D=128, P=16, q_len=1, lens=[100, 0, 1, 3000]),
        dict(B=3, Hq=8, Hkv=2, D=128, P=32, q_len=2, lens=[2, 700, 5000]),
        dict(B=2, Hq=64, Hkv=8, D=128, P=64, q_len=1, lens=[4096, 33]),
        dict(B=2, Hq=16, Hkv=1, D=128, P=16, q_len=4, lens=[900, 4]),
        dict(B=2, Hq=4, Hkv=1, D=64, P=16, q_len=1, lens=[777, 70]),
        dict(B=2, Hq=8, Hkv=2, D=256, P=16, q_len=1, lens=[777, 70]),
        dict(B=4, Hq=8, Hkv=1, D=128, P=16, q_len=1, lens=[100, 0, 1, 3000], kv="fp8"),
        dict(B=32, Hq=8, Hkv=1, D=128, P=64, q_len=1, lens=[131072] + [4096] * 31),
    ]
    bad = 0
    for c in cases:
        for sched in ("dynamic", "static"):
            t = time.time()
            err, det = run(**c, schedule=sched)
            tol = 5e-2 if c.get("kv") == "fp8" else 1e-2
            ok = err < tol and det
            bad += not ok
            print("%-8s %-7s err %.2e deterministic %s %s (%.1fs) %s" % (sched, c.get("kv", "bf16"), err, det,
                  "ok" if ok else "FAIL", time.time() - t, {k: v for k, v in c.items() if k != "lens"}), flush=True)
    sys.exit(1 if bad else 0)
