"""Run by test_jax_sharding.py in a child process with 8 host CPU devices (XLA_FLAGS must be set before jax starts,
so it cannot share the pytest process): the ops under jax.shard_map the way a JAX serving stack runs them --
tensor parallel over heads (rope_norm, decode_attention) and over the intermediate size (fused_moe), expert
parallel over experts (fused_moe with a traced expert_offset) -- and hpc_xla.jax.partitioned's ops under plain
jax.jit with head-sharded operands, each compared with the same op unsharded.
Prints one 'ok <name> <error>' line per check and 'ALL <n>' at the end; any failure raises (non-zero exit)."""

import os
import re
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import decode_harness  # noqa: E402
import hpc_xla.jax as hj  # noqa: E402
import hpc_xla.jax.partitioned as hp  # noqa: E402
import rope_norm_harness  # noqa: E402
from test_fused_moe import make_problem, run_jax  # noqa: E402

shard_map = getattr(jax, "shard_map", None)
if shard_map is None:  # jax < 0.7
    from jax.experimental.shard_map import shard_map

CHECKS = []


def mesh(n, axis):
    return Mesh(np.array(jax.devices("cpu")[:n]), (axis,))


def rel_err(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def report(name, err, tol):
    print("ok" if err <= tol else "FAIL", name, "%.2e" % err, flush=True)
    if err > tol:
        raise AssertionError("%s: relative error %.3e > %.1e against the unsharded op" % (name, err, tol))
    CHECKS.append(name)


def rope_norm_tp(n=4):
    """Heads split over n devices; each device writes its kv heads' slice of the cache (donated)."""
    case = rope_norm_harness.Case(tokens=24, num_q_heads=16, num_kv_heads=4, page_size=16, num_blocks=4)
    inp = rope_norm_harness.make_inputs(case)
    want = rope_norm_harness.run_jax(case, inp)
    opts = {k: inp[k] for k in ("q_norm_weight", "k_norm_weight")}

    def body(q, k, v, pos, cs, slots, kc, vc):
        return hj.rope_norm(q, k, v, pos, cs, slots, kc, vc, **opts, **case.kwargs())

    heads = P(None, "tp")
    f = jax.jit(shard_map(body, mesh=mesh(n, "tp"),
                          in_specs=(heads, heads, heads, P(), P(), P(), P(None, None, "tp"), P(None, None, "tp")),
                          out_specs=(heads, P(None, None, "tp"), P(None, None, "tp"))), donate_argnums=(6, 7))
    names = ["q", "k", "v", "positions", "cos_sin_cache", "slot_mapping", "k_cache", "v_cache"]
    got = f(*[jnp.asarray(inp[k]) for k in names])
    # Per-head math and per-slot writes: the sharded op must be bitwise the unsharded one (NaN-filled untouched
    # cache slots included, compared as bytes).
    for name, g, w in zip(("q", "k_cache", "v_cache"), got, (want[0], want[2], want[3])):
        same = np.array_equal(np.asarray(g).view(np.uint8), np.asarray(w).view(np.uint8))
        report("rope_norm_tp%d_%s_bitwise" % (n, name), 0.0 if same else 1.0, 0.0)


def decode_tp(n=4):
    """kv heads split over n devices: each device plans and attends over its own heads."""
    case = decode_harness.DecodeCase(seq_lens=(100, 0, 1, 700, 65), num_q_heads=16, num_kv_heads=8, page_size=16)
    inp = decode_harness.make_inputs(case)
    want = decode_harness.run_jax(case, inp)

    def body(q, kc, vc, table, lens):
        plan = hj.decode_plan(lens, num_kv_heads=kc.shape[2], num_q_heads=q.shape[1], head_dim=q.shape[2],
                              page_size=kc.shape[1], kv_dtype=kc.dtype, q_dtype=q.dtype)
        return hj.decode_attention(q, kc, vc, table, lens, plan)

    cache = P(None, None, "tp")
    f = jax.jit(shard_map(body, mesh=mesh(n, "tp"), in_specs=(P(None, "tp"), cache, cache, P(), P()),
                          out_specs=P(None, "tp")))
    got = f(*[jnp.asarray(inp[k]) for k in ("q", "k_cache", "v_cache", "block_table", "seq_lens")])
    report("decode_tp%d" % n, rel_err(got, want), 1e-2)


def _bytes_equal(a, b):
    return np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def _all_gathers(f, *args):
    return f.lower(*args).compile().as_text().count("all-gather")


def rope_norm_jit_partitioned(n=4, fp8=False):
    """hpc_xla.jax.partitioned.rope_norm under plain jax.jit, q/k/v and the caches sharded over heads: no
    all-gather, the caches stay sharded, bitwise the unsharded op. With kv heads the mesh cannot divide (n=8 over 4
    kv heads: only q is sharded, 8 ways) it runs replicated, still right."""
    case = rope_norm_harness.Case(tokens=24, num_q_heads=16, num_kv_heads=4, page_size=16, num_blocks=4,
                                  cache_fp8=fp8, q_fp8=fp8)
    inp = rope_norm_harness.make_inputs(case)
    want = [w for w in rope_norm_harness.run_jax(case, inp) if w is not None]
    names = ["q", "k", "v", "positions", "cos_sin_cache", "slot_mapping", "k_cache", "v_cache"]
    opts = {k: inp[k] for k in ("q_norm_weight", "k_norm_weight", "k_scale", "v_scale")}
    for devices in (n, 8):
        m = mesh(devices, "tp")
        heads, cache, rep = (NamedSharding(m, P(None, "tp", None)), NamedSharding(m, P(None, None, "tp", None)),
                             NamedSharding(m, P()))
        kv, kv_cache = (heads, cache) if devices == n else (rep, rep)
        args = [jax.device_put(inp[k], sh) for k, sh in zip(names, (heads, kv, kv, rep, rep, rep, kv_cache, kv_cache))]
        f = jax.jit(lambda *a: hp.rope_norm(*a, **opts, **case.kwargs()))
        got = f(*args)
        same = all(_bytes_equal(g, w) for g, w in zip(got, want))
        name = "rope_norm_jit%d%s" % (devices, "_fp8" if fp8 else "")
        report(name + "_bitwise", 0.0 if same else 1.0, 0.0)
        if devices == n:  # heads divide: partitioned, nothing gathered, caches still sharded
            sharded = got[-1].sharding.spec == P(None, None, "tp") and _all_gathers(f, *args) == 0
            report(name + "_no_gather", 0.0 if sharded else 1.0, 0.0)
            # donated caches are updated in place: aliased to the results, never copied (plain jax.jit of the
            # unpartitioned op copies them, 6 cache-shaped copies here)
            donated = jax.jit(lambda *a: hp.rope_norm(*a, **opts, **case.kwargs()), donate_argnums=(6, 7))
            hlo = donated.lower(*args).compile().as_text()
            cache_shaped = re.compile(r"\[%d,%d,\d+,%d\]" % (case.num_blocks, case.page_size, case.head_dim))
            copies = [line for line in hlo.splitlines() if " copy(" in line and cache_shaped.search(line)]
            in_place = "input_output_alias" in hlo and not copies
            report(name + "_in_place", 0.0 if in_place else 1.0, 0.0)


def decode_jit_partitioned(n=4, fp8=False):
    """hpc_xla.jax.partitioned.decode_attention under plain jax.jit (q and the caches sharded over heads; each
    device plans its own heads) against the unsharded op; no all-gather, out sharded over heads."""
    case = decode_harness.DecodeCase(seq_lens=(100, 0, 1, 700, 65), num_q_heads=16, num_kv_heads=8, page_size=16,
                                     kv_dtype="float8_e4m3fn" if fp8 else "bfloat16")
    inp = decode_harness.make_inputs(case)
    want = decode_harness.run_jax(case, inp)
    m = mesh(n, "tp")
    heads, cache, rep = (NamedSharding(m, P(None, "tp", None)), NamedSharding(m, P(None, None, "tp", None)),
                         NamedSharding(m, P()))
    names = ("q", "k_cache", "v_cache", "block_table", "seq_lens")
    args = [jax.device_put(inp[k], sh) for k, sh in zip(names, (heads, cache, cache, rep, rep))]
    scales = {k: inp[k] for k in ("k_scale", "v_scale") if inp.get(k) is not None}

    def step(shards):  # one plan per step for a device's share of the heads, reused by two layers
        def f(q, kc, vc, table, lens):
            plan = hp.decode_plan(lens, num_kv_heads=kc.shape[2], num_q_heads=q.shape[1], head_dim=q.shape[2],
                                  page_size=kc.shape[1], kv_dtype=kc.dtype, q_dtype=q.dtype, head_shards=shards)
            return [hp.decode_attention(q, kc, vc, table, lens, plan, sm_scale=case.sm_scale, **scales)
                    for _ in range(2)]
        return jax.jit(f)

    for planned in (False, True):
        if planned:
            f = step(n)
        else:
            f = jax.jit(lambda *a: [hp.decode_attention(*a, sm_scale=case.sm_scale, **scales)])
        got = f(*args)
        name = "decode_jit%d%s%s" % (n, "_fp8" if fp8 else "", "_planned" if planned else "")
        report(name, max(rel_err(g, want) for g in got), 1e-2)
        sharded = all(g.sharding.spec == P(None, "tp") for g in got) and _all_gathers(f, *args) == 0
        report(name + "_no_gather", 0.0 if sharded else 1.0, 0.0)
    # a plan for a smaller share (split 2n ways) serves each device's heads in two groups; one for a share that
    # does not divide a device's heads (split n / 2 ways: 4 kv heads per plan, 2 per device) is refused
    got = step(2 * n)(*args)
    report(name + "_finer_plan", max(rel_err(g, want) for g in got), 1e-2)
    try:
        step(n // 2)(*args)
        report(name + "_coarser_plan_refused", 1.0, 0.0)
    except Exception as e:  # noqa: BLE001 -- raised while XLA partitions: jax wraps it (JaxRuntimeError)
        report(name + "_coarser_plan_refused", 0.0 if "not a multiple" in str(e) else 1.0, 0.0)


def moe_tp(quant, n=4):
    """The intermediate size split over n devices (gate and up rows split alike), partial outputs summed."""
    p = make_problem(tokens=12, experts=8, hidden=256, inter=512, top_k=2, quant=quant, seed=3)
    want = run_jax(p)
    E, I2, H = p["w13"].shape
    w13 = np.asarray(p["w13"]).reshape(E, 2, I2 // 2, H)  # [E, gate|up, I, H]: shard I, keep the pairs
    s13 = p["w13_scale"]
    block = quant == "fp8_block128"
    if block:
        s13 = np.asarray(s13).reshape(E, 2, I2 // 256, H // 128)

    def body(x, w13s, w2s, s13s, s2s, w, ids):
        w13l = w13s.reshape(E, -1, H)
        s13l = s13s.reshape(E, -1, H // 128) if block else s13s
        scaled = p["w13_scale"] is not None
        y = hj.fused_moe(x, w13l, w2s, w, ids, quant=quant, w13_scale=s13l if scaled else None,
                         w2_scale=s2s if scaled else None,
                         a13_scale=p["a13_scale"], a2_scale=p["a2_scale"])
        return jax.lax.psum(y.astype(jnp.float32), "tp")

    scale_spec = (P(None, None, "tp"), P(None, None, "tp")) if block else (P(), P())
    f = jax.jit(shard_map(body, mesh=mesh(n, "tp"),
                          in_specs=(P(), P(None, None, "tp"), P(None, None, "tp")) + scale_spec + (P(), P()),
                          out_specs=P()))
    got = f(p["x"], w13, p["w2"], s13 if s13 is not None else jnp.zeros((0,)),
            p["w2_scale"] if p["w2_scale"] is not None else jnp.zeros((0,)), p["topk_weights"], p["topk_ids"])
    report("fused_moe_tp%d_%s" % (n, quant), rel_err(got, want), 1e-2)


def moe_ep(quant, n=8, fused_routing=False):
    """Experts split over n devices; every device runs the same program with expert_offset = its index * E/n."""
    p = make_problem(tokens=16, experts=32, hidden=256, inter=128, top_k=4, quant=quant, seed=4)
    E = p["w13"].shape[0]
    local = E // n
    logits = np.random.default_rng(5).standard_normal((16, E)).astype(np.float32)
    if fused_routing:
        w, ids = hj.moe_route(jnp.asarray(logits), 4)
        p["topk_weights"], p["topk_ids"] = np.asarray(w), np.asarray(ids)
    want = run_jax(p)
    scales = p["w13_scale"] is not None

    def body(x, w13, w2, s13, s2, w, ids, logits):
        kw = dict(quant=quant, w13_scale=s13 if scales else None, w2_scale=s2 if scales else None,
                  a13_scale=p["a13_scale"], a2_scale=p["a2_scale"], num_experts_global=E,
                  expert_offset=jax.lax.axis_index("ep") * local)
        if fused_routing:
            y = hj.fused_moe(x, w13, w2, router_logits=logits, top_k=4, **kw)
        else:
            y = hj.fused_moe(x, w13, w2, w, ids, **kw)
        return jax.lax.psum(y.astype(jnp.float32), "ep")

    ep = P("ep")
    f = jax.jit(shard_map(body, mesh=mesh(n, "ep"), in_specs=(P(), ep, ep, ep, ep, P(), P(), P()), out_specs=P()))
    zeros = np.zeros((E,), np.float32)
    got = f(p["x"], p["w13"], p["w2"], p["w13_scale"] if scales else zeros, p["w2_scale"] if scales else zeros,
            p["topk_weights"], p["topk_ids"], logits)
    report("fused_moe_ep%d_%s%s" % (n, quant, "_routed" if fused_routing else ""), rel_err(got, want), 1e-2)


def moe_jit_partitioned(quant, n=8):
    """hpc_xla.jax.partitioned.fused_moe under plain jax.jit, experts (and their scales) sharded over n devices, a
    shared output added once: the one-device op's result (float32 sum of bfloat16 partials: 1e-2), and no
    all-gather of the weights (each device keeps its experts; only the outputs are all-reduced)."""
    p = make_problem(tokens=16, experts=32, hidden=256, inter=128, top_k=4, quant=quant, shared=True, seed=6)
    want = run_jax(p)
    m = mesh(n, "ep")
    ep, rep = NamedSharding(m, P("ep")), NamedSharding(m, P())
    put = {k: jax.device_put(p[k], ep if k in ("w13", "w2", "w13_scale", "w2_scale") else rep)
           for k in ("x", "w13", "w2", "topk_weights", "topk_ids", "w13_scale", "w2_scale", "shared_output")
           if p[k] is not None}
    kw = dict(quant=quant, a13_scale=p["a13_scale"], a2_scale=p["a2_scale"],
              **{k: put[k] for k in ("w13_scale", "w2_scale") if k in put})

    def f(x, w13, w2, w, ids, shared):
        return hp.fused_moe(x, w13, w2, w, ids, shared_output=shared, **kw)

    f = jax.jit(f)
    args = [put[k] for k in ("x", "w13", "w2", "topk_weights", "topk_ids", "shared_output")]
    name = "fused_moe_jit_ep%d_%s" % (n, quant)
    report(name, rel_err(f(*args), want), 1e-2)
    report(name + "_no_gather", 0.0 if _all_gathers(f, *args) == 0 else 1.0, 0.0)


if __name__ == "__main__":
    assert len(jax.devices("cpu")) == 8, jax.devices()
    rope_norm_tp()
    decode_tp()
    for fp8 in (False, True):
        rope_norm_jit_partitioned(fp8=fp8)
        decode_jit_partitioned(fp8=fp8)
    for q in (None, "fp8_tensor", "fp8_block128"):
        moe_tp(q, n=2 if q == "fp8_block128" else 4)
        moe_ep(q)
    moe_ep(None, fused_routing=True)
    for q in (None, "fp8_tensor", "fp8_block128"):
        moe_jit_partitioned(q)
    print("ALL", len(CHECKS))
