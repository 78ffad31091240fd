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

from hpc_xla import _decode, reference
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
    ok &= decode_layers_demo(device, args.reps)
    ok &= moe_layer_demo(device, args.reps)
    return 0 if ok else 1


def make_decode_step(batch_lens, hq, hkv, d, page, seed=0):
    """A mixed decode batch (one long sequence, many short, one padded empty slot) with a paged cache."""
    rng = np.random.default_rng(seed)
    lens = np.asarray(batch_lens, np.int32)
    pages = [(int(n) + page - 1) // page for n in lens]
    max_blocks = max(pages) + 1
    num_blocks = sum(pages) + 1
    table = np.zeros((len(lens), max_blocks), np.int32)
    perm, used = rng.permutation(num_blocks), 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[used:used + n]
        used += n
    shape = (num_blocks, page, hkv, d)
    return dict(lens=lens, table=table, k_cache=rng.standard_normal(shape).astype(BF16),
                v_cache=rng.standard_normal(shape).astype(BF16), rng=rng)


def decode_layers_demo(device, reps, layers=3):
    """A few layers of rope_norm -> decode_attention on one decode step, one plan shared by all layers."""
    hq, hkv, d, page = 32, 4, 128, 16
    lens = [4096 if device == "cuda" else 700] + [int(x) for x in np.linspace(17, 300, 14)] + [0]
    step = make_decode_step(lens, hq, hkv, d, page)
    rng, b = step["rng"], len(lens)
    inv = 1.0 / (10000.0 ** (np.arange(0, d, 2) / d))
    freqs = np.arange(8192)[:, None] * inv[None]
    cos_sin = np.concatenate([np.cos(freqs), np.sin(freqs)], -1).astype(np.float32)
    new = dict(q=rng.standard_normal((layers, b, hq, d)).astype(BF16),
               k=rng.standard_normal((layers, b, hkv, d)).astype(BF16),
               v=rng.standard_normal((layers, b, hkv, d)).astype(BF16))
    lens_arr = step["lens"]
    positions = np.maximum(lens_arr - 1, 0).astype(np.int32)
    slots = np.array([step["table"][i, (n - 1) // page] * page + (n - 1) % page if n > 0 else -1
                      for i, n in enumerate(lens_arr)], np.int32)

    # reference: float64 rope (no norm weights) + attention over the cache with the new token written
    ref_outs = []
    k_cache = [step["k_cache"].copy() for _ in range(layers)]
    v_cache = [step["v_cache"].copy() for _ in range(layers)]
    for layer in range(layers):
        rq, rk, rv = reference.rope_norm(new["q"][layer], new["k"][layer], new["v"][layer], positions, cos_sin)
        flat_k = k_cache[layer].reshape(-1, hkv, d)
        flat_v = v_cache[layer].reshape(-1, hkv, d)
        for i, s_ in enumerate(slots):
            if s_ >= 0:
                flat_k[s_], flat_v[s_] = rk[i].astype(BF16), rv[i].astype(BF16)
        out = np.zeros((b, hq, d))
        for i, n in enumerate(lens_arr):
            if n == 0:
                continue
            toks = np.arange(n)
            blk, off = step["table"][i, toks // page], toks % page
            kk = k_cache[layer][blk, off].astype(np.float64)
            vv = v_cache[layer][blk, off].astype(np.float64)
            for h in range(hq):
                sc = kk[:, h // (hq // hkv)] @ rq[i, h].astype(BF16).astype(np.float64) / np.sqrt(d)
                p = np.exp(sc - sc.max())
                out[i, h] = (p / p.sum()) @ vv[:, h // (hq // hkv)]
        ref_outs.append(out)

    results = {}
    import jax
    import jax.numpy as jnp

    import hpc_xla.jax as hj

    dev = jax.devices("gpu" if device == "cuda" else "cpu")[0]
    put = lambda x: jax.device_put(x, dev)  # noqa: E731

    # Under jit the plan's size is fixed at trace time, before jax knows where the call runs, so hpc_xla.jax
    # sizes it for the default backend. On a GPU machine running this demo on the CPU that is the GPU's grid:
    # pass the CPU platform's size, as torch (which sees the tensors' device) does, so both build one plan.
    jax_ctas = None if device == "cuda" else _decode.max_ctas_for(None, hkv, hq, d, 1, page, "bfloat16", "bfloat16")

    def jax_step(q, k, v, kc, vc, lens_, table, pos, slot, cs):
        plan = hj.decode_plan(lens_, num_kv_heads=hkv, num_q_heads=hq, head_dim=d, page_size=page,
                              max_ctas=jax_ctas)  # once
        outs = []
        for layer in range(layers):
            ql, kc_l, vc_l = hj.rope_norm(q[layer], k[layer], v[layer], pos, cs, slot, kc[layer], vc[layer])
            outs.append(hj.decode_attention(ql, kc_l, vc_l, table, lens_, plan))
        return jnp.stack(outs)

    args = [put(new["q"]), put(new["k"]), put(new["v"]), put(np.stack([step["k_cache"]] * layers)),
            put(np.stack([step["v_cache"]] * layers)), put(lens_arr), put(step["table"]), put(positions), put(slots),
            put(cos_sin)]
    f = jax.jit(jax_step)
    results["jax"] = np.asarray(f(*args))
    jax_us = time_us(lambda: jax.block_until_ready(f(*args)), lambda: None, reps)

    import torch

    import hpc_xla.torch as ht

    t = lambda x: to_torch(x, device)  # noqa: E731
    kc_t = [t(step["k_cache"]) for _ in range(layers)]
    vc_t = [t(step["v_cache"]) for _ in range(layers)]
    lens_t, table_t, pos_t, slot_t, cs_t = t(lens_arr), t(step["table"]), t(positions), t(slots), t(cos_sin)
    qs, ks, vs = t(new["q"]), t(new["k"]), t(new["v"])

    def torch_step():
        plan = ht.decode_plan(lens_t, num_kv_heads=hkv, num_q_heads=hq, head_dim=d, page_size=page)
        return torch.stack([ht.decode_attention(ht.rope_norm(qs[i], ks[i], vs[i], pos_t, cs_t, slot_t, kc_t[i],
                                                             vc_t[i]), kc_t[i], vc_t[i], table_t, lens_t, plan)
                            for i in range(layers)])

    results["torch"] = from_torch(torch_step())
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch_us = time_us(torch_step, sync, reps)
    errs = {k: reference.relative_error(v, np.stack(ref_outs)) for k, v in results.items()}
    same = np.array_equal(results["jax"].view(np.uint8), results["torch"].view(np.uint8))
    ok = same and all(e < 1e-2 for e in errs.values())
    print("\n%d layers of rope_norm -> decode_attention, one plan per step; batch %s (one empty slot)" % (layers, lens))
    print("%-18s %-24s %-14s %10s %10s %s" % ("", "rel. error vs float64", "jax == torch", "jax.jit us", "torch us",
                                             "check"))
    print("%-18s %-24s %-14s %10.1f %10.1f %s" % ("decode step", "%.1e / %.1e" % (errs["jax"], errs["torch"]),
                                                  "bitwise" if same else "DIFFERENT", jax_us, torch_us,
                                                  "ok" if ok else "FAILED"))
    return ok


def moe_layer_demo(device, reps):
    """One MoE layer with routing fused in (router logits -> moe_route -> fused_moe), bf16 and fp8_tensor,
    through jax.jit and torch; checked against the float64 reference with the quantization emulated. w13 is
    prepared once as a deployment loads it (hpc_xla.moe_layout.interleave_w13, w13_interleaved=True: where the
    grouped path runs 128-row tiles -- from ~64 rows per expert, larger batches than these -- it computes the
    activation in its gate-up GEMM's epilogue; here the tiled / 64-row paths read the same layout); the reference
    reads vLLM's layout."""
    from hpc_xla.moe_layout import interleave_w13

    if device == "cuda":  # Qwen3-30B-A3B's expert shapes
        tokens, experts, hidden, inter, top_k = 256, 128, 2048, 768, 8
    else:
        tokens, experts, hidden, inter, top_k = 32, 16, 256, 128, 4
    rng = np.random.default_rng(1)
    x = rng.standard_normal((tokens, hidden)).astype(BF16)
    logits = rng.standard_normal((tokens, experts)).astype(np.float32)
    w13 = rng.standard_normal((experts, 2 * inter, hidden)) / np.sqrt(hidden)
    w2 = rng.standard_normal((experts, hidden, inter)) / np.sqrt(inter)
    weights, ids, _ = reference.moe_route(logits, top_k)  # float64 routing for the reference
    import jax

    import hpc_xla.jax as hj
    import hpc_xla.torch as ht

    dev = jax.devices("gpu" if device == "cuda" else "cpu")[0]
    print("\nMoE layer, routing fused in: T=%d, E=%d, H=%d, I=%d, top-%d (w13 interleaved once at load)"
          % (tokens, experts, hidden, inter, top_k))
    print("%-18s %-24s %-14s %10s %10s %s" % ("variant", "rel. error vs float64", "jax == torch", "jax.jit us",
                                             "torch us", "check"))
    ok = True
    for quant in (None, "fp8_tensor"):
        (w13_q, w13_s), (w2_q, w2_s) = (reference.quantize_moe_weights(w, quant) for w in (w13, w2))
        tensors = dict(w13=w13_q, w2=w2_q)
        if quant is not None:
            tensors.update(w13_scale=w13_s, w2_scale=w2_s, a2_scale=np.float32(0.02),
                           a13_scale=np.float32(np.abs(x.astype(np.float32)).max() / reference.FP8_E4M3_MAX))
        ref = reference.fused_moe(x, tensors["w13"], tensors["w2"], weights, ids, quant=quant,
                                  **{k: v for k, v in tensors.items() if k not in ("w13", "w2")})
        opts = {k: v for k, v in tensors.items() if k not in ("w13", "w2")}
        tensors["w13"] = interleave_w13(tensors["w13"])  # what the ops read from here on (w13_interleaved=True)

        a = {k: jax.device_put(v, dev) for k, v in dict(x=x, logits=logits, **tensors).items()}
        f = jax.jit(lambda x_, lg, w13_, w2_, **o: hj.fused_moe(x_, w13_, w2_, router_logits=lg, top_k=top_k,
                                                                quant=quant, w13_interleaved=True, **o))
        run = lambda: f(a["x"], a["logits"], a["w13"], a["w2"], **{k: a[k] for k in opts})  # noqa: E731
        out_jax = np.asarray(run())
        jax_us = time_us(lambda: jax.block_until_ready(run()), lambda: None, reps)

        import torch

        t = {k: to_torch(v, device) for k, v in dict(x=x, logits=logits, **tensors).items()}
        call = lambda: ht.fused_moe(t["x"], t["w13"], t["w2"], router_logits=t["logits"], top_k=top_k,  # noqa: E731
                                    quant=quant, w13_interleaved=True, **{k: t[k] for k in opts})
        out_torch = from_torch(call())
        torch_us = time_us(call, torch.cuda.synchronize if device == "cuda" else (lambda: None), reps)

        errs = (reference.relative_error(out_jax, ref), reference.relative_error(out_torch, ref))
        same = np.array_equal(out_jax.view(np.uint8), out_torch.view(np.uint8))
        passed = same and max(errs) < (5e-2 if quant else 1e-2)
        ok &= passed
        print("%-18s %-24s %-14s %10.1f %10.1f %s" % (quant or "bf16", "%.1e / %.1e" % errs,
                                                      "bitwise" if same else "DIFFERENT", jax_us, torch_us,
                                                      "ok" if passed else "FAILED"))
    return ok


if __name__ == "__main__":
    sys.exit(main())
