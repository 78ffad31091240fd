"""Bad arguments found by a fuzz campaign over both faces (session 23): each raises an error naming the op and the
argument -- before, they crashed the process (decode workspace / plan views), were silently accepted (zero, NaN or
infinite scales; truncated floats; broadcast output views; empty optional arrays in jax; meta tensors mixed with
real ones) or failed with an error that named nothing (AttributeError on None, IndexError, ZeroDivisionError)."""

import contextlib
import os
import re
import dataclasses

import numpy as np
import pytest

import decode_harness
import rope_norm_harness
from test_fused_moe import make_problem

ROPE = rope_norm_harness.Case(tokens=6, num_q_heads=4, num_kv_heads=2, head_dim=64, page_size=8, num_blocks=2)
DECODE = decode_harness.DecodeCase(seq_lens=(100, 0, 3000))


def _torch(inputs):
    return {k: rope_norm_harness.to_torch(v, "cpu") for k, v in inputs.items()}


def _rope_torch(t, **kw):
    import hpc_xla.torch as ht

    args = [t[k] for k in ("q", "k", "v", "positions", "cos_sin_cache", "slot_mapping", "k_cache", "v_cache")]
    return ht.rope_norm(*args, **kw)


def _decode_torch(t, **kw):
    import hpc_xla.torch as ht

    kw.setdefault("max_ctas", 8)
    return ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"],
                               k_scale=t["k_scale"], v_scale=t["v_scale"], **kw)


# ---- crashes before: decode_attention's workspace and plan as broadcast views, a plan of the wrong size ----

def test_decode_workspace_and_plan_views_are_refused():
    import torch

    import hpc_xla.torch as ht
    from hpc_xla._ext import ext

    t = {k: decode_harness.to_torch(v, "cpu") for k, v in decode_harness.make_inputs(DECODE).items()}
    need = ext().decode_workspace_size(3, 1, 8, 128, 1, 8)
    with pytest.raises(ValueError, match=r"decode_attention: workspace must be contiguous"):
        _decode_torch(t, schedule="static", workspace=torch.zeros(1).expand(need))
    plan = ht.decode_plan(t["seq_lens"], num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, max_ctas=8)
    broadcast = ht.DecodePlan(plan.plan[:1].expand(plan.plan.numel()), plan.workspace, plan.config)
    with pytest.raises(ValueError, match=r"decode_attention: plan must be contiguous"):
        _decode_torch(t, plan=broadcast)


def test_decode_plan_cut_short_is_refused_in_jax():
    import jax.numpy as jnp

    import hpc_xla.jax as hj

    inp = decode_harness.make_inputs(DECODE)
    plan = hj.decode_plan(jnp.asarray(inp["seq_lens"]), num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16,
                          max_ctas=8)
    cut = hj.DecodePlan(plan.array[:16 + 4 + 2 * 3], plan.config)  # by its size: max_ctas 2; its header: 8
    with pytest.raises(Exception, match=r"plan holds 26 int32, which for batch 3 means max_ctas=2, but decode_plan "
                                        r"built it for max_ctas=8"):
        np.asarray(hj.decode_attention(inp["q"], inp["k_cache"], inp["v_cache"], inp["block_table"],
                                       inp["seq_lens"], cut))


# ---- silent before: values csrc did not look at ----

@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_fp8_scales_must_be_finite_and_positive(value):
    import torch

    import hpc_xla.torch as ht

    t = _torch(rope_norm_harness.make_inputs(dataclasses.replace(ROPE, cache_fp8=True)))
    with pytest.raises(ValueError, match=r"rope_norm: k_scale must be finite and > 0"):
        _rope_torch(t, k_scale=torch.tensor(value), v_scale=t["v_scale"])
    fp8 = dataclasses.replace(DECODE, kv_dtype="float8_e4m3fn")
    d = {k: decode_harness.to_torch(v, "cpu") for k, v in decode_harness.make_inputs(fp8).items()}
    d["v_scale"] = torch.tensor(value)
    with pytest.raises(ValueError, match=r"decode_attention: v_scale must be finite and > 0"):
        _decode_torch(d)
    p = make_problem(tokens=3, experts=4, hidden=128, inter=128, top_k=2, quant="fp8_tensor")
    x = lambda k: rope_norm_harness.to_torch(p[k], "cpu")  # noqa: E731
    with pytest.raises(ValueError, match=r"fused_moe: a13_scale must be finite and > 0"):
        ht.fused_moe(x("x"), x("w13"), x("w2"), x("topk_weights"), x("topk_ids"), quant="fp8_tensor",
                     w13_scale=x("w13_scale"), w2_scale=x("w2_scale"), a13_scale=torch.tensor(value),
                     a2_scale=torch.tensor(0.02))


def test_infinite_scalars_are_refused():
    import torch

    import hpc_xla.torch as ht

    d = {k: decode_harness.to_torch(v, "cpu") for k, v in decode_harness.make_inputs(DECODE).items()}
    with pytest.raises(ValueError, match=r"sm_scale must be finite and > 0; got inf"):
        _decode_torch(d, sm_scale=float("inf"))
    with pytest.raises(ValueError, match=r"routed_scaling must be finite and > 0; got inf"):
        ht.moe_route(torch.zeros(3, 8), 2, routed_scaling=float("inf"))


def test_broadcast_output_views_are_refused():
    import torch

    t = _torch(rope_norm_harness.make_inputs(ROPE))
    t["k_cache"] = t["k_cache"][:1].expand(t["k_cache"].shape)
    with pytest.raises(ValueError, match=r"k_cache is written by the op, so it cannot be a broadcast"):
        _rope_torch(t)
    d = {k: decode_harness.to_torch(v, "cpu") for k, v in decode_harness.make_inputs(DECODE).items()}
    out = torch.empty(1, 8, 128, dtype=torch.bfloat16).expand(3, 8, 128)
    with pytest.raises(ValueError, match=r"out is written by the op, so it cannot be a broadcast"):
        _decode_torch(d, out=out)


def test_torch_output_buffers_are_named_as_passed():
    """torch rope_norm's out / out_scale and moe_route's out pair: strides and overlaps are csrc's checks, whose
    messages named q_out / q_scale / topk_weights / topk_ids, arguments the caller never passed (a helper's probe)."""
    import torch

    import hpc_xla.torch as ht

    t = _torch(rope_norm_harness.make_inputs(ROPE))
    q = t["q"]
    strided = torch.empty(q.shape[0], q.shape[1], 2 * q.shape[2], dtype=q.dtype)[..., ::2]
    with pytest.raises(ValueError, match=r"^rope_norm: out must be contiguous in its last dimension"):
        _rope_torch(t, out=strided)
    k = t["k"]
    shared = torch.empty(k.numel() + q.numel(), dtype=q.dtype)  # k, then an out that starts inside it
    shared[:k.numel()] = k.reshape(-1)
    overlapping = dict(t, k=shared[:k.numel()].view(k.shape))
    with pytest.raises(ValueError, match=r"^rope_norm: out overlaps k in memory \(the op writes out;"):
        _rope_torch(overlapping, out=shared[k.numel() // 2:k.numel() // 2 + q.numel()].view(q.shape))
    with pytest.raises(ValueError, match=r"^rope_norm: out_scale is only written with q_quant='fp8'; got q_quant=None"):
        _rope_torch(t, out_scale=torch.empty(q.shape[:2], dtype=torch.float32))
    out8 = torch.empty(q.shape, dtype=torch.float8_e4m3fn)
    scale = torch.empty(q.shape[0], 2 * q.shape[1], dtype=torch.float32)[:, ::2]
    with pytest.raises(ValueError, match=r"^rope_norm: out_scale must be"):
        _rope_torch(t, q_quant="fp8", out=out8, out_scale=scale)

    logits = torch.randn(5, 8)
    pair = torch.empty(5, 4, dtype=torch.int32)
    weights = torch.empty(5, 4, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"^moe_route: out\[0\] must be contiguous"):
        ht.moe_route(logits, 2, out=(weights[:, ::2], pair[:, :2]))
    both = torch.empty(5, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^moe_route: out\[0\] overlaps out\[1\]"):
        ht.moe_route(logits, 2, out=(both.view(torch.float32), both))


def test_decode_plan_of_too_long_a_batch_is_refused():
    import torch

    import hpc_xla.torch as ht

    lens = torch.full((64,), 2**31 - 1, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"the batch is too long to plan"):
        ht.decode_plan(lens, num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, max_ctas=8)


def test_meta_tensor_mixed_with_real_ones_is_refused():
    t = _torch(rope_norm_harness.make_inputs(ROPE))
    t["q"] = t["q"].to("meta")
    with pytest.raises(ValueError, match=r"rope_norm: all tensors must be on one device; got cpu and meta"):
        _rope_torch(t)


# ---- silent before in the python faces: converted or truncated options, jax's empty-array cases ----

def _route_torch(**kw):
    import torch

    import hpc_xla.torch as ht

    return ht.moe_route(torch.zeros(5, 16), kw.pop("top_k", 2), **kw)


@pytest.mark.parametrize("kw, error, message", [
    (dict(num_groups=-4, topk_groups=1), ValueError, r"moe_route: num_groups must be >= 0; got -4"),
    (dict(num_groups=1, topk_groups=5), ValueError, r"moe_route: topk_groups needs num_groups > 1"),
    (dict(num_groups=4.5, topk_groups=1), TypeError, r"moe_route: num_groups must be an int; got 4.5"),
    (dict(top_k=0), ValueError, r"moe_route: top_k must be in \[1, num_experts=16\]; got 0"),
    (dict(top_k=2**31), ValueError, r"moe_route: top_k must be in \[1, num_experts=16\]; got 2147483648"),
    (dict(top_k=2.0), TypeError, r"moe_route: top_k must be an int"),
    (dict(routed_scaling="x"), TypeError, r"moe_route: routed_scaling must be a number"),
    (dict(num_groups=2**31, topk_groups=1), ValueError, r"moe_route: num_groups must be <= 2147483647"),
    (dict(num_groups=4, topk_groups=2**32), ValueError, r"moe_route: topk_groups must be <= 2147483647"),
])
def test_route_options(kw, error, message):
    with pytest.raises(error, match=message):
        _route_torch(**kw)


def test_torch_options_and_types():
    import hpc_xla.torch as ht

    t = _torch(rope_norm_harness.make_inputs(ROPE))
    with pytest.raises(TypeError, match=r"rope_norm: rotary_dim must be an int; got 32.9"):
        _rope_torch(t, rotary_dim=32.9)
    with pytest.raises(TypeError, match=r"rope_norm: eps must be a number; got 'x'"):
        _rope_torch(t, eps="x")
    with pytest.raises(TypeError, match=r"rope_norm: q must be a torch.Tensor; got NoneType"):
        _rope_torch(dict(t, q=None))
    with pytest.raises(TypeError, match=r"moe_route: router_logits must be a torch.Tensor; got list"):
        ht.moe_route([[0.0, 1.0]], 1)
    d = {k: decode_harness.to_torch(v, "cpu") for k, v in decode_harness.make_inputs(DECODE).items()}
    with pytest.raises(ValueError, match=r"decode_plan: max_ctas must be <= 2048; got 67108864"):
        ht.decode_plan(d["seq_lens"], num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, max_ctas=2**26)
    with pytest.raises(ValueError, match=r"decode_plan: max_ctas must be >= 1; got -100"):
        ht.decode_plan(d["seq_lens"], num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, max_ctas=-100)
    with pytest.raises(ValueError, match=r"decode_plan: num_kv_heads must be <= 2147483647; got 8589934592"):
        ht.decode_plan(d["seq_lens"], num_kv_heads=2**33, num_q_heads=8, head_dim=128, page_size=16)
    with pytest.raises(ValueError, match=r"decode_plan: kv_dtype has dtype int8"):
        ht.decode_plan(d["seq_lens"], num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, kv_dtype="int8")
    with pytest.raises(TypeError, match=r"decode_attention: sm_scale must be a number"):
        _decode_torch(d, sm_scale="x")
    with pytest.raises(TypeError, match=r"decode_attention: plan must be a DecodePlan"):
        _decode_torch(d, plan=d["seq_lens"])
    with pytest.raises(ValueError, match=r"decode_attention: seq_lens must be \[B\] int32; got shape \(\)"):
        _decode_torch(dict(d, seq_lens=d["seq_lens"][0]))
    p = {k: rope_norm_harness.to_torch(v, "cpu") if isinstance(v, np.ndarray) else v
         for k, v in make_problem(tokens=3, experts=4, hidden=128, inter=128, top_k=2, quant=None).items()}
    args = (p["x"], p["w13"], p["w2"], p["topk_weights"], p["topk_ids"])
    with pytest.raises(ValueError, match=r"fused_moe: num_experts_global must be >= 1; got -5"):
        ht.fused_moe(*args, num_experts_global=-5)
    with pytest.raises(ValueError, match=r"fused_moe: expert_offset must be >= 0; got -1"):
        ht.fused_moe(*args, expert_offset=-1)
    with pytest.raises(ValueError, match=r"fused_moe: expert_offset must be in \[0, 2\^31\)"):
        ht.fused_moe(*args, expert_offset=2**40, num_experts_global=2**40 + 8)
    with pytest.raises(ValueError, match=r"fused_moe_workspace_size: tokens must be >= 0; got -5"):
        ht.fused_moe_workspace_size(-5, 2, 4, 128, 128)


def test_jax_empty_and_zero_sized_cases():
    """XLA skips a custom call whose results are all empty, and an empty optional array reads as 'absent'."""
    import jax
    import jax.numpy as jnp

    import hpc_xla.jax as hj

    inp = rope_norm_harness.make_inputs(ROPE)
    args = [inp[k] for k in ("q", "k", "v", "positions", "cos_sin_cache", "slot_mapping", "k_cache", "v_cache")]
    with pytest.raises(ValueError, match=r"rope_norm: q_norm_weight is empty \(shape \(0,\)\); pass None"):
        hj.rope_norm(*args, q_norm_weight=jnp.zeros((0,), jnp.float32))
    empty_d = [a[..., :0] if i in (0, 1, 2, 6, 7) else a for i, a in enumerate(args)]
    with pytest.raises(ValueError, match=r"rope_norm: head_dim \(q.shape\[2\]\) must be >= 1; got 0"):
        hj.rope_norm(*empty_d)
    with pytest.raises(ValueError, match=r"rope_norm: k_scale must be one float32 value"):
        hj.rope_norm(*args, k_scale=np.ones(2, np.float32))
    with pytest.raises(ValueError, match=r"moe_route: top_k must be in \[1, num_experts=8\]; got 0"):
        hj.moe_route(jnp.zeros((3, 8)), 0)
    d = decode_harness.make_inputs(DECODE)
    no_heads = jax.jit(lambda q, kc, vc, bt, sl: hj.decode_attention(q, kc, vc, bt, sl, schedule="static",
                                                                    max_ctas=8))
    with pytest.raises(ValueError, match=r"decode_attention: num_q_heads \(q.shape\[1\]\) must be >= 1; got 0"):
        no_heads(d["q"][:, :0], d["k_cache"], d["v_cache"], d["block_table"], d["seq_lens"])
    with pytest.raises(TypeError, match=r"decode_attention: plan must be a DecodePlan"):
        hj.decode_attention(d["q"], d["k_cache"], d["v_cache"], d["block_table"], d["seq_lens"],
                            jnp.zeros(40, jnp.int32))
    p = make_problem(tokens=3, experts=4, hidden=128, inter=128, top_k=2, quant=None)
    with pytest.raises(ValueError, match=r"fused_moe: shared_output is empty"):
        hj.fused_moe(p["x"], p["w13"], p["w2"], p["topk_weights"], p["topk_ids"],
                     shared_output=jnp.zeros((0,), jnp.bfloat16))


def test_decode_plan_buffer_must_have_the_exact_size():
    """decode_attention reads max_ctas back from the plan's size: a longer buffer would claim CTAs nobody planned."""
    import torch

    from hpc_xla._ext import ext

    seq_lens = torch.tensor([5, 70], dtype=torch.int32)
    need = ext().decode_plan_size(2, 8)
    with pytest.raises(ValueError, match=r"plan must hold exactly %d int32 for batch 2 and max_ctas 8; got %d"
                                         % (need, need + 2)):
        torch.ops.hpc_xla.decode_plan(seq_lens, torch.empty(need + 2, dtype=torch.int32), 1, 8, 128, 1, 16,
                                      ext().dtype_code("bfloat16"), 8)


def test_empty_operands_that_are_real():
    """At T=0, shared_output [0, H] and a T=0 slice of an index tensor are real (empty) operands, not 'absent'."""
    import jax.numpy as jnp
    import torch

    import hpc_xla.jax as hj
    import hpc_xla.torch as ht

    p = make_problem(tokens=1, experts=4, hidden=128, inter=128, top_k=2, quant=None)
    out = hj.fused_moe(p["x"][:0], p["w13"], p["w2"], p["topk_weights"][:0], p["topk_ids"][:0],
                       shared_output=jnp.zeros((0, 128), jnp.bfloat16))
    assert out.shape == (0, 128)
    t = _torch(rope_norm_harness.make_inputs(ROPE))
    positions = torch.stack([t["positions"], t["positions"]], 1)[:0, 0]  # T=0, stride 2: nothing to address
    empty = {k: t[k][:0] for k in ("q", "k", "v", "slot_mapping")}
    ht.rope_norm(empty["q"], empty["k"], empty["v"], positions, t["cos_sin_cache"], empty["slot_mapping"],
                 t["k_cache"], t["v_cache"])


def test_traced_negative_offset_keeps_negative_ids_out():
    """A traced expert_offset never turns a 'no expert' id (< 0) into a local one; a negative offset (where -1 - off
    would land in the local range) is refused by the binary's check of the offset (session 40)."""
    import jax
    import jax.numpy as jnp

    import hpc_xla.jax as hj

    p = make_problem(tokens=4, experts=4, hidden=128, inter=128, top_k=2, quant=None, seed=2)
    ids = np.full((4, 2), -1, np.int32)
    f = jax.jit(lambda off: hj.fused_moe(p["x"], p["w13"], p["w2"], p["topk_weights"], ids, expert_offset=off,
                                         num_experts_global=8))
    # on the CPU, where the binary always checks (the GPU checks under HPC_XLA_CHECK only: test_gpu_fused_moe.py)
    with jax.default_device(jax.devices("cpu")[0]):
        assert np.all(np.asarray(f(jnp.int32(4))).astype(np.float32) == 0)
        with pytest.raises(Exception, match=r"expert_offset \(traced\) = -2 must be in"):
            jax.block_until_ready(f(jnp.int32(-2)))


def test_torch_unsupported_dtypes_are_named():
    """A dtype no op takes is named as torch names it (it used to read 'DLPack code 2, 64 bits'), with the op and by
    the caller's name for the argument (it read "hpc_xla: argument 'q_out' ...": no op, csrc's name)."""
    import torch

    import hpc_xla.torch as ht

    w13, w2 = torch.zeros(2, 256, 128, dtype=torch.bfloat16), torch.zeros(2, 128, 128, dtype=torch.bfloat16)
    ids, w = torch.zeros(5, 1, dtype=torch.int32), torch.ones(5, 1)
    # ValueError, like the dtype errors of csrc's validation and of the JAX face (TypeError is for non-tensors)
    for dtype, name in ((torch.float64, "float64"), (torch.int16, "int16"), (torch.bool, "bool"),
                        (torch.complex64, "complex64"), (torch.float8_e5m2, "float8_e5m2"),
                        (torch.float8_e4m3fnuz, "float8_e4m3fnuz"), (torch.float8_e5m2fnuz, "float8_e5m2fnuz")):
        with pytest.raises(ValueError, match=r"^fused_moe: x has dtype %s, which hpc_xla does not take" % name):
            ht.fused_moe(torch.zeros(5, 128, dtype=dtype), w13, w2, w, ids)
    t = _torch(rope_norm_harness.make_inputs(ROPE))
    with pytest.raises(ValueError, match=r"^rope_norm: q has dtype float64, which hpc_xla does not take"):
        _rope_torch(dict(t, q=t["q"].double()))
    d = {k: decode_harness.to_torch(v, "cpu") for k, v in decode_harness.make_inputs(DECODE).items()}
    with pytest.raises(ValueError, match=r"^decode_attention: workspace \(or plan.workspace\) has dtype float64"):
        _decode_torch(d, workspace=torch.zeros(1 << 20, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^moe_route: router_logits has dtype float64"):
        ht.moe_route(torch.zeros(5, 8, dtype=torch.float64), 2)
    with pytest.raises(TypeError, match=r"fused_moe: x must be a torch.Tensor; got list"):
        ht.fused_moe([[0.0] * 128] * 5, w13, w2, w, ids)


def test_torch_takes_per_tensor_scales_as_numbers_like_jax():
    """k_scale / v_scale / a13_scale / a2_scale: the contract's "float32 scalars". JAX took Python floats, torch
    refused them; now a number gives the same bits as a one-element float32 tensor."""
    import torch

    import hpc_xla.torch as ht
    from decode_harness import DecodeCase
    from decode_harness import make_inputs as decode_inputs
    from rope_norm_harness import Case
    from rope_norm_harness import make_inputs as rope_inputs
    from test_fused_moe import make_problem, torch_problem

    from hpc_xla._arrays import to_torch

    def bits(x):
        return x.contiguous().view(torch.uint8)

    case = Case(cache_fp8=True)
    t = {k: (to_torch(v, "cpu") if v is not None else None) for k, v in rope_inputs(case).items()}
    runs = []
    for ks, vs in ((t["k_scale"], t["v_scale"]), (float(t["k_scale"]), float(t["v_scale"]))):
        kc, vc = t["k_cache"].clone(), t["v_cache"].clone()
        q = ht.rope_norm(t["q"], t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"], kc, vc,
                         q_norm_weight=t["q_norm_weight"], k_norm_weight=t["k_norm_weight"], k_scale=ks, v_scale=vs)
        runs.append((bits(q), bits(kc), bits(vc)))
    assert all(torch.equal(a, b) for a, b in zip(*runs))

    d = {k: (to_torch(v, "cpu") if v is not None else None)
         for k, v in decode_inputs(DecodeCase(kv_dtype="float8_e4m3fn")).items()}
    outs = [ht.decode_attention(d["q"], d["k_cache"], d["v_cache"], d["block_table"], d["seq_lens"], k_scale=ks,
                                v_scale=vs) for ks, vs in ((d["k_scale"], d["v_scale"]),
                                                           (float(d["k_scale"]), np.float64(d["v_scale"])))]
    assert torch.equal(bits(outs[0]), bits(outs[1]))

    p = torch_problem(make_problem(5, 4, 128, 128, 2, "fp8_tensor", seed=3))
    outs = [ht.fused_moe(p["x"], p["w13"], p["w2"], p["topk_weights"], p["topk_ids"], quant="fp8_tensor",
                         w13_scale=p["w13_scale"], w2_scale=p["w2_scale"], a13_scale=a13, a2_scale=a2)
            for a13, a2 in ((p["a13_scale"], p["a2_scale"]), (float(p["a13_scale"]), float(p["a2_scale"])))]
    assert torch.equal(bits(outs[0]), bits(outs[1]))
    with pytest.raises(TypeError, match=r"fused_moe: a2_scale must be a torch.Tensor, a number or None; got bool"):
        ht.fused_moe(p["x"], p["w13"], p["w2"], p["topk_weights"], p["topk_ids"], quant="fp8_tensor",
                     w13_scale=p["w13_scale"], w2_scale=p["w2_scale"], a13_scale=1.0, a2_scale=True)


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_a_misspelled_fused_moe_keyword_is_named(framework):
    """It used to read "['a13_scales'] only apply with router_logits" (or moe_route's own TypeError with them)."""
    import inspect

    from test_fused_moe import make_problem, torch_problem

    from hpc_xla import _options

    if framework == "jax":
        import hpc_xla.jax as face
        p = make_problem(5, 4, 128, 128, 2, None, seed=3)
    else:
        import hpc_xla.torch as face
        p = torch_problem(make_problem(5, 4, 128, 128, 2, None, seed=3))
    route = inspect.signature(face.moe_route).parameters
    assert set(_options.ROUTE_KEYWORDS) == {n for n in route if n not in ("router_logits", "out")}
    msg = r"fused_moe\(\) got an unexpected keyword argument 'a13_scales'"
    with pytest.raises(TypeError, match=msg):
        face.fused_moe(p["x"], p["w13"], p["w2"], p["topk_weights"], p["topk_ids"], a13_scales=1.0)
    logits = np.zeros((5, 4), np.float32)
    if framework == "torch":
        import torch
        logits = torch.from_numpy(logits)
    with pytest.raises(TypeError, match=msg):
        face.fused_moe(p["x"], p["w13"], p["w2"], router_logits=logits, top_k=2, a13_scales=1.0)


# ---- session 40's bad-input review: sizes from an unchecked max_ctas, a stale plan, unchecked q / x scales ----

@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_static_schedule_checks_max_ctas_before_sizing_the_workspace(framework):
    """Without a plan the static schedule sized its workspace from max_ctas before csrc saw it: 10**9 was a
    terabyte allocation in torch and a hang in eager jax; 8.9, "8" and True were taken as 8, 8 and 1."""
    d = decode_harness.make_inputs(DECODE)
    if framework == "torch":
        t = {k: decode_harness.to_torch(v, "cpu") for k, v in d.items()}
        call = lambda m: _decode_torch(t, schedule="static", max_ctas=m)  # noqa: E731
    else:
        import hpc_xla.jax as hj

        args = [d[k] for k in ("q", "k_cache", "v_cache", "block_table", "seq_lens")]
        call = lambda m: hj.decode_attention(*args, schedule="static", max_ctas=m)  # noqa: E731
    with pytest.raises(ValueError, match=r"decode_attention: max_ctas must be <= \d+; got 1000000000"):
        call(10**9)
    for bad in (8.9, "8", True):
        with pytest.raises(TypeError, match=r"decode_attention: max_ctas must be an int"):
            call(bad)


@pytest.mark.parametrize("framework", ["jax", "torch"])
@pytest.mark.parametrize("schedule", ["dynamic", "static"])
def test_decode_attention_without_a_plan_names_its_own_operands(framework, schedule):
    """Without a plan decode_attention plans itself: a q of 3 heads over a cache of 2 said "decode_plan: num_q_heads
    (3) must be a multiple of num_kv_heads (2)", a function and arguments the caller never used (a helper's probe)."""
    case = dataclasses.replace(DECODE, num_q_heads=3, num_kv_heads=2)
    d = decode_harness.make_inputs(case)
    if framework == "torch":
        t = {k: decode_harness.to_torch(v, "cpu") for k, v in d.items()}
        call = lambda: _decode_torch(t, schedule=schedule)  # noqa: E731
    else:
        import hpc_xla.jax as hj

        call = lambda: hj.decode_attention(*[d[k] for k in ("q", "k_cache", "v_cache", "block_table", "seq_lens")],  # noqa
                                           schedule=schedule)
    with pytest.raises(ValueError, match=r"^decode_attention: num_q_heads \(3\) must be a multiple of num_kv_heads "
                                         r"\(2\) \(num_q_heads = q.shape\[1\], num_kv_heads = k_cache.shape\[2\]\)$"):
        call()


def test_decode_plan_refilling_out_names_out():
    """decode_plan(out=plan) for another config said "decode_attention: plan was built for ..."; a different
    max_ctas was silently ignored (the refilled plan keeps its own grid)."""
    import torch

    import hpc_xla.torch as ht

    lens = torch.tensor([100, 0, 3000], dtype=torch.int32)
    kw = dict(num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16)
    plan = ht.decode_plan(lens, max_ctas=8, **kw)
    with pytest.raises(ValueError, match=r"^decode_plan: out was built for head_dim=128 but this call has head_dim=64$"):
        ht.decode_plan(lens, out=plan, **dict(kw, head_dim=64))
    with pytest.raises(ValueError, match=r"^decode_plan: out was built for max_ctas=8 but this call has max_ctas=16$"):
        ht.decode_plan(lens, out=plan, max_ctas=16, **kw)
    assert ht.decode_plan(lens, out=plan, max_ctas=8, **kw) is plan


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_a_plan_for_other_seq_lens_is_refused(framework):
    """A plan refilled for other lengths (same batch and heads) merged partials the call never wrote: finite garbage
    (relative error 646) or NaN. Lengths with the same tile counts are the same plan and pass."""
    built, other, same_tiles = (3000, 0, 100), (100, 0, 3000), (120, 0, 2990)
    case = dataclasses.replace(DECODE, seq_lens=other)
    d = decode_harness.make_inputs(case)
    want = r"plan does not match seq_lens: seq_lens\[0\] = 100 needs 2 tiles, the plan has 47"
    if framework == "torch":
        import torch

        import hpc_xla.torch as ht

        t = {k: decode_harness.to_torch(v, "cpu") for k, v in d.items()}
        plan_for = lambda lens: ht.decode_plan(torch.tensor(lens, dtype=torch.int32), num_kv_heads=1,  # noqa: E731
                                               num_q_heads=8, head_dim=128, page_size=16, max_ctas=8)
        call = lambda plan: ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"],  # noqa: E731
                                                t["seq_lens"], plan)
        error = ValueError
    else:
        import jax

        import hpc_xla.jax as hj

        plan_for = lambda lens: hj.decode_plan(np.array(lens, np.int32), num_kv_heads=1, num_q_heads=8,  # noqa: E731
                                               head_dim=128, page_size=16, max_ctas=8)
        call = lambda plan: jax.block_until_ready(hj.decode_attention(  # noqa: E731
            d["q"], d["k_cache"], d["v_cache"], d["block_table"], d["seq_lens"], plan))
        error = jax.errors.JaxRuntimeError
    # jax on the CPU, which always checks (the GPU checks under HPC_XLA_CHECK only: test_gpu_decode.py); numpy
    # inputs would go to jax's default device, a GPU where there is one
    on_cpu = contextlib.nullcontext() if framework == "torch" else jax.default_device(jax.devices("cpu")[0])
    with on_cpu:
        with pytest.raises(error, match=want):
            call(plan_for(built))
        call(plan_for(same_tiles))  # 2 and 47 tiles, as the call's 100 and 3000
        call(plan_for(other))


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_q_and_x_scales_must_be_finite_and_not_negative(value):
    """An fp8 q's q_scale (decode) and an fp8 x's x_scale (fp8_block128) were never checked: NaN / inf gave NaN
    rows, a negative one sign-flipped results, silently. 0 stays legal (an all-zero row or block)."""
    import torch

    import hpc_xla.torch as ht

    fp8q = dataclasses.replace(DECODE, kv_dtype="float8_e4m3fn", q_dtype="float8_e4m3fn")
    d = {k: decode_harness.to_torch(v, "cpu") for k, v in decode_harness.make_inputs(fp8q).items()}
    d["q_scale"][0, 0] = 0.0
    _decode_torch(d, q_scale=d["q_scale"])
    d["q_scale"][0, 1] = value
    with pytest.raises(ValueError, match=r"decode_attention: q_scale\[1\] \(flat index\) must be finite and >= 0"):
        _decode_torch(d, q_scale=d["q_scale"])
    p = make_problem(tokens=3, experts=4, hidden=256, inter=128, top_k=2, quant="fp8_block128", x_fp8=True)
    t = {k: (rope_norm_harness.to_torch(v, "cpu") if isinstance(v, np.ndarray) else v) for k, v in p.items()}
    kw = dict(quant="fp8_block128", w13_scale=t["w13_scale"], w2_scale=t["w2_scale"])
    t["x_scale"][0, 0] = 0.0
    ht.fused_moe(t["x"], t["w13"], t["w2"], t["topk_weights"], t["topk_ids"], x_scale=t["x_scale"], **kw)
    t["x_scale"][1, 1] = value
    with pytest.raises(ValueError, match=r"fused_moe: x_scale\[3\] \(flat index\) must be finite and >= 0"):
        ht.fused_moe(t["x"], t["w13"], t["w2"], t["topk_weights"], t["topk_ids"], x_scale=t["x_scale"], **kw)


def test_route_out_must_be_a_pair_of_tensors():
    """torch moe_route's out=: a 1-tuple was an IndexError, one tensor was split into its rows (a dtype error about
    topk_ids), (None, None) nanobind's unnamed signature error."""
    import torch

    w, i = torch.empty(5, 2), torch.empty(5, 2, dtype=torch.int32)
    with pytest.raises(TypeError, match=r"moe_route: out must be a pair .*; got 1 items"):
        _route_torch(out=(w,))
    with pytest.raises(TypeError, match=r"moe_route: out must be a pair .*; got Tensor"):
        _route_torch(out=w)
    with pytest.raises(TypeError, match=r"moe_route: out\[1\] must be a torch.Tensor; got NoneType"):
        _route_torch(out=(w, None))
    assert _route_torch(out=(w, i))[1] is i


def test_jax_fused_moe_names_a_wrong_rank():
    """hj.fused_moe read w13.shape[1] for its workspace before anything checked the rank: a 1-D w13 was an
    IndexError naming nothing. Now as the torch face says it."""
    import hpc_xla.jax as hj

    p = make_problem(tokens=2, experts=4, hidden=128, inter=128, top_k=2, quant=None)
    rest = (p["topk_weights"], p["topk_ids"])
    with pytest.raises(ValueError, match=r"fused_moe: w13 must be a 3-D array \[E, 2I, H\]; got shape \[131072\]"):
        hj.fused_moe(p["x"], p["w13"].reshape(-1), p["w2"], *rest)
    with pytest.raises(ValueError, match=r"fused_moe: x must be a 2-D array \[T, H\]; got shape \[256\]"):
        hj.fused_moe(p["x"].reshape(-1), p["w13"], p["w2"], *rest)


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_decode_plan_names_a_kv_dtype_it_cannot_run(framework):
    """decode_plan took any dtype it knew as kv_dtype (int32, float32) and the mistake surfaced only at the call,
    as "plan was built for kv_dtype=...": now the plan itself refuses it."""
    import jax

    lens = np.array([100, 0, 3000], np.int32)
    kw = dict(num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, max_ctas=8)
    with pytest.raises((ValueError, jax.errors.JaxRuntimeError), match=r"decode_plan: kv_dtype must be bfloat16, float16 or float8_e4m3fn; got "
                                         r"(int32|i32|float32|f32)"):
        if framework == "torch":
            import torch

            import hpc_xla.torch as ht

            ht.decode_plan(torch.from_numpy(lens), kv_dtype=torch.int32, **kw)
        else:
            import hpc_xla.jax as hj

            jax.block_until_ready(hj.decode_plan(lens, kv_dtype=np.float32, **kw).array)


def test_rope_norm_fp8_out_without_q_quant_names_the_cause():
    """An fp8 `out` without q_quant="fp8" was reported as "q_scale is required" (a name the torch face does not
    even use: its argument is out_scale)."""
    import torch

    t = _torch(rope_norm_harness.make_inputs(ROPE))
    with pytest.raises(ValueError, match=r"rope_norm: out is float8_e4m3fn, which needs q_quant='fp8'"):
        _rope_torch(t, out=torch.empty(t["q"].shape, dtype=torch.float8_e4m3fn))


@pytest.mark.parametrize("shape,quant,extra,want", [
    ((16, 2, 8, 100, 128), None, {}, r"H and I must be positive multiples of 16; got H=100, I=128"),
    ((16, 2, 8, 128, 96), "fp8_block128", {}, r"quant='fp8_block128' needs H and I to be multiples of 128"),
    ((16, 2, 8, 128, 128), None, {"num_experts_global": 4},
     r"num_experts_global must be in \[num_experts, 2\^31\) = \[8, 2\^31\).*got 4"),
    ((16, 9, 8, 128, 128), None, {"num_experts_global": 8},
     r"top_k \(9\) exceeds the routing's experts \(num_experts_global = 8\)"),
    ((2**28, 8, 8, 128, 128), None, {}, r"T \* top_k \(268435456 \* 8\) must be < 2\^31"),
    ((2**27 + 1, 8, 8, 128, 128), None, {}, r"T \* top_k must be <= 2\^30 on the CUDA path"),
    ((16, 2, 8, 48, 128), None, {}, r"the CUDA path needs hidden to be a multiple of 64; got 48"),
    ((16, 2, 8, 2**40, 128), None, {}, r"the CUDA path supports H and I up to 2\^24; got H=1099511627776"),
    ((16, 2, 2**31 - 1, 128, 128), None, {}, r"the CUDA path supports at most 1024 local experts"),
])
def test_fused_moe_workspace_size_refuses_what_the_op_refuses(shape, quant, extra, want):
    """fused_moe_workspace_size answered sizes for shapes fused_moe refuses (H not a multiple of 16, block128 with
    I % 128, num_experts_global below the local count, top_k above it, T * top_k past the int32 pair indices, the
    CUDA path's H % 64 / E / T * top_k limits) -- a size for a call that cannot run, 1.5e17 bytes for T = 2^40, or
    an int64 overflow for H = 2^60. It now applies the CUDA op's rules."""
    import hpc_xla.torch as ht

    with pytest.raises(ValueError, match=r"fused_moe_workspace_size: " + want):
        ht.fused_moe_workspace_size(*shape, quant, **extra)
    assert ht.fused_moe_workspace_size(16, 2, 8, 128, 128, None, num_experts_global=8) > 0  # a valid shape answers


def test_jax_fused_moe_names_bad_topk_ids_in_the_ops_words():
    """The per-call workspace size, asked before the op runs, must not answer a malformed call with its own message
    (a transposed topk_ids read as top_k = 16 "exceeds the routing's experts"): it answers 0 and the op names the
    argument (review of session 41's workspace checks)."""
    import jax

    import hpc_xla.jax as hj

    p = make_problem(tokens=16, experts=8, hidden=128, inter=128, top_k=2, quant=None, seed=0)
    for ids, want in ((p["topk_ids"].reshape(-1), r"topk_ids must be a 2-D tensor \[T, top_k\]"),
                      (p["topk_ids"].T.copy(), r"topk_ids.shape\[0\] must be 16 \(T, from x\)")):
        with pytest.raises(jax.errors.JaxRuntimeError, match=want):
            with jax.default_device(jax.devices("cpu")[0]):
                jax.block_until_ready(hj.fused_moe(p["x"], p["w13"], p["w2"], p["topk_weights"], ids,
                                                   num_experts_global=8))


def test_written_tensors_that_overlap_their_inputs_are_refused():
    """A review of session 41: nothing checked whether a tensor an op writes overlaps another operand -- rope_norm's
    `out` as q shifted by one head returned a wrong q, k_cache is v_cache wrote both into one, and moe_route's two
    outputs as views of one buffer returned ids like 1057731279. out=q (the same view) stays legal, and so do q / k /
    v as interleaved views of one qkv buffer (vLLM's)."""
    import torch

    import hpc_xla.torch as ht

    t = _torch(rope_norm_harness.make_inputs(ROPE))
    qkv = torch.cat([t["q"], t["k"], t["v"]], dim=1)  # vLLM's layout: q, k, v are views of one [T, Hq + 2Hk, D]
    hq, hk = t["q"].shape[1], t["k"].shape[1]
    views = dict(t, q=qkv[:, :hq], k=qkv[:, hq:hq + hk], v=qkv[:, hq + hk:])
    want = _rope_torch(dict(t, k_cache=t["k_cache"].clone(), v_cache=t["v_cache"].clone()))
    got = _rope_torch(views, out=views["q"])  # out=q on interleaved views: allowed, and the same result
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    big = torch.zeros(t["q"].shape[0], hq + 1, t["q"].shape[2], dtype=t["q"].dtype)
    q_in = big[:, :hq]
    q_in.copy_(t["q"])
    with pytest.raises(ValueError, match=r"rope_norm: out overlaps q in memory"):  # (csrc's q_out, as passed)
        _rope_torch(dict(t, q=q_in), out=big[:, 1:])  # the output one head past the input
    with pytest.raises(ValueError, match=r"rope_norm: k_cache and v_cache start at the same address"):
        _rope_torch(dict(t, v_cache=t["k_cache"]))
    w = torch.empty(5, 2)
    with pytest.raises(ValueError, match=r"moe_route: out\[0\] overlaps out\[1\] in memory"):
        ht.moe_route(torch.zeros(5, 16), 2, out=(w, w.view(torch.int32)))


@pytest.mark.parametrize("face", ["torch", "jax"])
def test_fused_routing_names_a_router_of_other_experts(face):
    """A router over 8 experts with a w13 of 4 and no num_experts_global: some batches routed onto ids past the
    layer's experts (an error on the CPU for those batches only; on the GPU the tokens' experts dropped silently).
    The router's width is checked against the routing's experts (a review of session 41)."""
    p = make_problem(tokens=5, experts=4, hidden=128, inter=128, top_k=2, quant=None, seed=0)
    logits = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    if face == "torch":
        import torch

        import hpc_xla.torch as ht

        t = {k: torch.from_numpy(np.asarray(p[k]).view(np.int16)).view(torch.bfloat16) for k in ("x", "w13", "w2")}
        call = lambda **kw: ht.fused_moe(t["x"], t["w13"], t["w2"], router_logits=torch.from_numpy(logits),  # noqa
                                         top_k=2, **kw)
    else:
        import jax.numpy as jnp

        import hpc_xla.jax as hj

        call = lambda **kw: hj.fused_moe(p["x"], p["w13"], p["w2"], router_logits=jnp.asarray(logits),  # noqa: E731
                                         top_k=2, **kw)
    with pytest.raises(ValueError, match=r"fused_moe: router_logits scores 8 experts \(shape\[-1\]\); without "
                                         r"num_experts_global the routing has E \+ expert_offset = 4 \+ 0"):
        call()
    with pytest.raises(ValueError, match=r"router_logits scores 8 experts \(shape\[-1\]\); the routing has "
                                         r"num_experts_global=6"):
        call(num_experts_global=6)
    assert call(num_experts_global=8, expert_offset=4).shape == (5, 128)  # this rank: experts 4-7 of 8


@pytest.mark.parametrize("face", ["torch", "jax"])
def test_fused_routing_checks_the_router_rank_and_rows(face):
    """A 0-d router_logits was a bare IndexError (its width read before its rank); one with T + 1 rows said
    "topk_ids.shape[0] must be 5", an argument the caller never passed (a helper's probe, session 42)."""
    p = make_problem(tokens=5, experts=4, hidden=128, inter=128, top_k=2, quant=None, seed=0)
    rows6 = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    scalar = np.float32(1.0)
    if face == "torch":
        import torch

        import hpc_xla.torch as ht

        t = {k: torch.from_numpy(np.asarray(p[k]).view(np.int16)).view(torch.bfloat16) for k in ("x", "w13", "w2")}
        call = lambda logits: ht.fused_moe(t["x"], t["w13"], t["w2"], router_logits=torch.tensor(logits),  # noqa
                                           top_k=1)
    else:
        import jax.numpy as jnp

        import hpc_xla.jax as hj

        call = lambda logits: hj.fused_moe(p["x"], p["w13"], p["w2"], router_logits=jnp.asarray(logits),  # noqa
                                           top_k=1)
    with pytest.raises(ValueError, match=r"fused_moe: router_logits must be \[T, num_experts\]; got shape \(\)"):
        call(scalar)
    with pytest.raises(ValueError, match=r"fused_moe: router_logits has 6 rows; x has T=5 tokens"):
        call(rows6)


def test_fused_moe_workspace_size_names_its_own_arguments():
    """fused_moe_workspace_size applies fused_moe's rules, whose words named fused_moe and its tensors ("fused_moe:
    the CUDA path needs H (x.shape[1]) ...") to a caller who passed hidden / inter / num_experts (a helper's probe)."""
    import hpc_xla.torch as ht

    size = lambda **kw: ht.fused_moe_workspace_size(**dict(dict(tokens=16, top_k=2, num_experts=8, hidden=128,  # noqa
                                                                inter=128), **kw))
    assert size() > 0
    for kw, want in ((dict(hidden=80), r"the CUDA path needs hidden to be a multiple of 64; got 80"),
                     (dict(inter=32, w13_interleaved=True), r"w13_interleaved needs inter to be a multiple of 64"),
                     (dict(num_experts=2000), r"the CUDA path supports at most 1024 local experts \(num_experts\); got 2000"),
                     (dict(quant="int4"), r"quant must be None, 'fp8_tensor' or 'fp8_block128'; got 'int4'")):
        with pytest.raises(ValueError, match=r"^fused_moe_workspace_size: " + want):
            size(**kw)


@pytest.mark.parametrize("face", ["torch", "jax"])
def test_fused_routing_errors_are_fused_moes(face):
    """fused_moe(router_logits=..., top_k=...) routes through moe_route: its errors said "moe_route: top_k ...", a
    function the caller never called (the arguments are fused_moe's own keywords)."""
    p = make_problem(tokens=5, experts=4, hidden=128, inter=128, top_k=2, quant=None, seed=0)
    logits = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    if face == "torch":
        import torch

        import hpc_xla.torch as ht

        t = {k: torch.from_numpy(np.asarray(p[k]).view(np.int16)).view(torch.bfloat16) for k in ("x", "w13", "w2")}
        call = lambda **kw: ht.fused_moe(t["x"], t["w13"], t["w2"], router_logits=torch.from_numpy(logits), **kw)  # noqa
    else:
        import jax.numpy as jnp

        import hpc_xla.jax as hj

        call = lambda **kw: hj.fused_moe(p["x"], p["w13"], p["w2"], router_logits=jnp.asarray(logits), **kw)  # noqa
    with pytest.raises(ValueError, match=r"^fused_moe: top_k must be in \[1, num_experts=4\]; got 5$"):
        call(top_k=5)
    with pytest.raises(ValueError, match=r"^fused_moe: scoring must be"):
        call(top_k=2, scoring="softplus")
    with pytest.raises(TypeError, match=r"^fused_moe: top_k must be an int"):
        call(top_k=2.5)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("max_ctas", [None, 8])
def test_decode_plan_checks_its_config_before_sizing_the_workspace(framework, max_ctas):
    """decode_plan sized (and allocated) its workspace from the arguments before the config was checked: num_q_heads
    = 2^31 - 1 asked for 141 TB ('tried to allocate ...') instead of the limit's name (a review of session 41)."""
    lens = np.array([100, 0, 3000], np.int32)
    kw = dict(num_kv_heads=1, num_q_heads=2**31 - 1, head_dim=128, page_size=16, max_ctas=max_ctas)
    want = r"decode_plan: num_q_heads / num_kv_heads must be <= 16; got 2147483647"
    if framework == "torch":
        import torch

        import hpc_xla.torch as ht

        with pytest.raises(ValueError, match=want):
            ht.decode_plan(torch.from_numpy(lens), **kw)
    else:
        import hpc_xla.jax as hj

        with pytest.raises(ValueError, match=want):
            hj.decode_plan(lens, **kw)


def test_torch_first_compiled_call_does_not_recompile_and_plan_out_is_checked():
    """Two review findings of session 41 on the torch face: the lazily bound torch.Tensor of the argument checks made
    dynamo guard on a global that the first call changed (one recompile of every first compiled function), and
    decode_plan(out=<a tensor>) read "'Tensor' object has no attribute 'config'"."""
    import subprocess
    import sys

    import torch

    import hpc_xla.torch as ht

    # in a fresh interpreter: in this one an earlier test has already bound the global
    code = ("import torch, hpc_xla.torch as ht\n"
            "route = torch.compile(lambda x: ht.moe_route(x, 2), fullgraph=True)\n"
            "route(torch.randn(5, 8))\n"
            "with torch.compiler.set_stance('fail_on_recompile'):\n"
            "    route(torch.randn(5, 8))\n"
            "print('no recompile')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0 and "no recompile" in r.stdout, r.stdout + r.stderr[-2000:]
    with pytest.raises(TypeError, match=r"decode_plan: out must be a DecodePlan to refill .*; got Tensor"):
        ht.decode_plan(torch.tensor([100], dtype=torch.int32), num_kv_heads=1, num_q_heads=8, head_dim=128,
                       page_size=16, out=torch.zeros(4, dtype=torch.int32))


def test_torch_ints_past_the_binding_are_named():
    """Integers the bindings cannot take read nanobind's / torch's unnamed errors ("incompatible function
    arguments", "Expected a value of type 'int' ... found type 'int'"): named now (a review of session 41)."""
    import torch

    import hpc_xla.torch as ht

    d = {k: decode_harness.to_torch(v, "cpu") for k, v in decode_harness.make_inputs(DECODE).items()}
    with pytest.raises(ValueError, match=r"decode_attention: q_len must be <= 4; got 1099511627776"):
        ht.decode_attention(d["q"], d["k_cache"], d["v_cache"], d["block_table"], d["seq_lens"], q_len=2**40,
                            schedule="static")
    p = make_problem(tokens=3, experts=4, hidden=128, inter=128, top_k=2, quant=None, seed=0)
    t = {k: torch.from_numpy(np.asarray(p[k]).view(np.int16)).view(torch.bfloat16) for k in ("x", "w13", "w2")}
    with pytest.raises(ValueError, match=r"fused_moe: num_experts_global must be <= 9223372036854775807"):
        ht.fused_moe(t["x"], t["w13"], t["w2"], torch.from_numpy(p["topk_weights"]),
                     torch.from_numpy(p["topk_ids"]), num_experts_global=2**64)
    with pytest.raises(ValueError, match=r"fused_moe_workspace_size: tokens must be <= 4611686018427387904"):
        ht.fused_moe_workspace_size(2**63, 2, 8, 128, 128)


def test_torch_out_arguments_are_named_as_this_face_names_them():
    """rope_norm's out / out_scale and moe_route's out pair were reported as csrc names them (q_out, q_scale,
    topk_weights): a user who passed `out` read about an argument they never saw (a review of session 41)."""
    import torch

    import hpc_xla.torch as ht

    t = _torch(rope_norm_harness.make_inputs(ROPE))
    shape = list(t["q"].shape)
    with pytest.raises(ValueError, match=r"rope_norm: out must be torch.bfloat16 %s \(q's shape, q's dtype\); got "
                                         r"torch.float16" % re.escape(str(shape))):
        _rope_torch(t, out=torch.empty(t["q"].shape, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"rope_norm: out_scale must be float32 %s \(\[T, Hq\], from q\); got "
                                         r"torch.bfloat16" % re.escape(str(shape[:2]))):
        _rope_torch(t, q_quant="fp8", out_scale=torch.empty(t["q"].shape[:2], dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"moe_route: out\[0\] must be torch.float32 \[5, 2\] \(\[T, top_k\]\); got "
                                         r"torch.float32 \[5, 3\]"):
        ht.moe_route(torch.zeros(5, 16), 2, out=(torch.empty(5, 3), torch.empty(5, 2, dtype=torch.int32)))
    with pytest.raises(ValueError, match=r"moe_route: out\[1\] must be torch.int32 \[5, 2\]"):
        ht.moe_route(torch.zeros(5, 16), 2, out=(torch.empty(5, 2), torch.empty(5, 2, dtype=torch.int64)))


# ---- a k_cache of the wrong head count or head_dim beside a right v_cache was blamed on v_cache ----

def _decode_op(framework, d):
    """decode_attention's op itself (torch.ops.hpc_xla / the jax FFI target), static schedule: the faces plan first,
    and their planning checks the head counts before csrc sees the operands."""
    if framework == "torch":
        import torch

        t = {k: decode_harness.to_torch(v, "cpu") for k, v in d.items()}
        torch.ops.hpc_xla.decode_attention(t["q"], None, t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"],
                                           None, torch.empty(1 << 20), torch.empty_like(t["q"]), None, None, 0.1, 1,
                                           1, 8)
    else:
        import jax
        import jax.numpy as jnp

        import hpc_xla.jax  # noqa: F401  (registers the FFI targets)
        from hpc_xla.jax import _ffi

        call = jax.ffi.ffi_call("hpc_xla_decode_attention", (jax.ShapeDtypeStruct(d["q"].shape, d["q"].dtype),
                                                             jax.ShapeDtypeStruct((1 << 20,), jnp.float32)),
                                vmap_method="sequential")
        jax.block_until_ready(call(d["q"], _ffi.absent(), d["k_cache"], d["v_cache"], d["block_table"], d["seq_lens"],
                                   _ffi.absent(), _ffi.absent(), _ffi.absent(), sm_scale=np.float32(0.1),
                                   q_len=np.int32(1), schedule=np.int32(1), max_ctas=np.int32(8)))


@pytest.mark.parametrize("framework", ["jax", "torch"])
@pytest.mark.parametrize("path", ["face", "op"])
@pytest.mark.parametrize("wrong", ["heads", "head_dim"])
def test_decode_attention_names_a_wrong_k_cache_not_v_cache(framework, path, wrong):
    """k_cache's own dims (head_dim against q, its head count against q's) are checked before v_cache is compared
    with k_cache: a k_cache of head_dim 64 beside q's and v_cache's 128 said "v_cache.shape[3] must be 64 (from
    k_cache)", one of 3 heads for q's 8 said "v_cache.shape[2] must be 3 (from k_cache)" (the faces' planning
    named k_cache.shape[2] already; the op now says the same)."""
    d = decode_harness.make_inputs(DECODE)
    k = d["k_cache"]
    if wrong == "heads":
        d["k_cache"] = np.concatenate([k, k, k], axis=2)
        want = ("decode_attention: num_q_heads (8) must be a multiple of num_kv_heads (3) (num_q_heads = q.shape[1], "
                "num_kv_heads = k_cache.shape[2])")
    else:
        d["k_cache"] = np.ascontiguousarray(k[..., :64])
        want = ("decode_attention: k_cache.shape[3] must be 128 (head_dim, from q); got shape [%d, 16, 1, 64]"
                % k.shape[0])
    if path == "op":
        call = lambda: _decode_op(framework, d)  # noqa: E731
    elif framework == "torch":
        call = lambda: _decode_torch({n: decode_harness.to_torch(v, "cpu") for n, v in d.items()})  # noqa: E731
    else:
        import hpc_xla.jax as hj

        call = lambda: np.asarray(hj.decode_attention(  # noqa: E731
            *[d[n] for n in ("q", "k_cache", "v_cache", "block_table", "seq_lens")]))
    import jax

    # (the whole message; XLA's GPU runtime appends the executable's name: " [executable_name='jit_ffi_call']")
    with pytest.raises((ValueError, jax.errors.JaxRuntimeError),
                       match=re.escape(want) + r"( \[executable_name='[^']*'\])?($|\n)"):
        call()
