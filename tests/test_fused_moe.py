"""fused_moe (CPU path; the CUDA pipeline is issue #4's open work) against the float64 reference with the
quantization emulated: bf16, fp8_tensor, fp8_block128, EP offsets, empty experts, fused routing, errors."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpc_xla import reference
from hpc_xla._arrays import from_torch, to_torch

FP8 = ml_dtypes.float8_e4m3fn
BF16 = ml_dtypes.bfloat16


def _quantize_weights(w, quant):
    """bf16-representable float weights [E, N, K] -> (stored weights, scales) for the scheme."""
    if quant is None:
        return w.astype(BF16), None
    if quant == "fp8_tensor":
        scale = (np.abs(w).reshape(w.shape[0], -1).max(-1) / 448.0).astype(np.float32)
        return (w / scale[:, None, None]).astype(FP8), scale
    e, n, k = w.shape
    blocks = np.abs(w.reshape(e, n // 128, 128, k // 128, 128)).max(axis=(2, 4))
    scale = (blocks / 448.0).astype(np.float32)
    full = np.repeat(np.repeat(scale, 128, 1), 128, 2)
    return (w / full).astype(FP8), scale


def make_problem(tokens, experts, hidden, inter, top_k, quant, expert_offset=0, extra_experts=0, shared=False,
                 x_fp8=False, seed=0, one_expert=False):
    rng = np.random.default_rng(seed)
    global_e = experts + expert_offset + extra_experts
    x = rng.standard_normal((tokens, hidden)).astype(BF16)
    w13, w13_scale = _quantize_weights(rng.standard_normal((experts, 2 * inter, hidden)) / np.sqrt(hidden), quant)
    w2, w2_scale = _quantize_weights(rng.standard_normal((experts, hidden, inter)) / np.sqrt(inter), quant)
    if one_expert:
        ids = np.full((tokens, top_k), expert_offset, np.int32)
        ids[:, 1:] = rng.integers(0, global_e, (tokens, top_k - 1))
    else:
        ids = np.stack([rng.permutation(global_e)[:top_k] for _ in range(tokens)]).astype(np.int32)
    weights = rng.random((tokens, top_k)).astype(np.float32)
    p = dict(x=x, w13=w13, w2=w2, topk_weights=weights, topk_ids=ids, quant=quant, w13_scale=w13_scale,
             w2_scale=w2_scale, a13_scale=None, a2_scale=None, x_scale=None, expert_offset=expert_offset,
             num_experts_global=global_e, shared_output=None)
    if quant == "fp8_tensor":
        p["a13_scale"], p["a2_scale"] = np.float32(np.abs(x.astype(np.float32)).max() / 448.0), np.float32(0.02)
        if x_fp8:
            p["x"] = (x.astype(np.float32) / p["a13_scale"]).astype(FP8)
    if quant == "fp8_block128" and x_fp8:
        xf = x.astype(np.float32).reshape(tokens, -1, 128)
        s = np.abs(xf).max(-1) / 448.0
        p["x"], p["x_scale"] = (xf / s[..., None]).reshape(tokens, hidden).astype(FP8), s.astype(np.float32)
    if shared:
        p["shared_output"] = rng.standard_normal((tokens, hidden)).astype(BF16)
    return p


def reference_out(p):
    kw = {k: p[k] for k in ("quant", "w13_scale", "w2_scale", "a13_scale", "a2_scale", "x_scale", "expert_offset",
                            "shared_output")}
    return reference.fused_moe(p["x"], p["w13"], p["w2"], p["topk_weights"], p["topk_ids"], **kw)


def run_torch(p):
    import hpc_xla.torch as ht

    t = {k: (to_torch(v, "cpu") if isinstance(v, (np.ndarray, np.generic)) else v) for k, v in p.items()}
    return from_torch(ht.fused_moe(t["x"], t["w13"], t["w2"], t["topk_weights"], t["topk_ids"], quant=p["quant"],
                                   w13_scale=t["w13_scale"], w2_scale=t["w2_scale"], a13_scale=t["a13_scale"],
                                   a2_scale=t["a2_scale"], x_scale=t["x_scale"], expert_offset=p["expert_offset"],
                                   num_experts_global=p["num_experts_global"], shared_output=t["shared_output"]))


def run_jax(p):
    import jax

    import hpc_xla.jax as hj

    cpu = jax.devices("cpu")[0]
    a = {k: (jax.device_put(v, cpu) if isinstance(v, (np.ndarray, np.generic)) else v) for k, v in p.items()}
    f = jax.jit(lambda x, w13, w2, w, ids: hj.fused_moe(
        x, w13, w2, w, ids, quant=p["quant"], w13_scale=a["w13_scale"], w2_scale=a["w2_scale"],
        a13_scale=a["a13_scale"], a2_scale=a["a2_scale"], x_scale=a["x_scale"], expert_offset=p["expert_offset"],
        num_experts_global=p["num_experts_global"], shared_output=a["shared_output"]))
    return np.asarray(f(a["x"], a["w13"], a["w2"], a["topk_weights"], a["topk_ids"]))


def _tol(p):
    return 5e-2 if p["quant"] else 1e-2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tokens=st.integers(1, 9), experts=st.integers(1, 5), top_k=st.integers(1, 4),
       quant=st.sampled_from([None, "fp8_tensor", "fp8_block128"]), hidden=st.sampled_from([128, 256]),
       inter=st.sampled_from([128, 256]), offset=st.sampled_from([0, 3]), extra=st.sampled_from([0, 4]),
       shared=st.booleans(), x_fp8=st.booleans(), one_expert=st.booleans(), seed=st.integers(0, 2**31 - 1),
       framework=st.sampled_from(["jax", "torch"]))
def test_random_problems(tokens, experts, top_k, quant, hidden, inter, offset, extra, shared, x_fp8, one_expert,
                         seed, framework):
    global_e = experts + offset + extra
    top_k = min(top_k, global_e)
    p = make_problem(tokens, experts, hidden, inter, top_k, quant, offset, extra, shared, x_fp8 and quant is not None,
                     seed, one_expert and top_k >= 1)
    out = (run_jax if framework == "jax" else run_torch)(p)
    assert out.dtype == BF16
    ref = reference_out(p)
    if np.abs(ref).max() == 0:  # every id belongs to another rank and no shared output
        assert np.all(out.astype(np.float64) == 0)
        return
    err = reference.relative_error(out, ref)
    assert err < _tol(p), "relative error %g" % err


@pytest.mark.parametrize("quant", [None, "fp8_tensor", "fp8_block128"])
def test_jax_torch_parity_and_fused_routing(quant):
    import jax

    import hpc_xla.jax as hj

    p = make_problem(6, 4, 256, 128, 2, quant, seed=1)
    a, b = run_jax(p), run_torch(p)
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    # fused routing == separate routing
    logits = np.random.default_rng(2).standard_normal((6, 4)).astype(np.float32)
    cpu = jax.devices("cpu")[0]
    put = lambda v: None if v is None else jax.device_put(v, cpu)  # noqa: E731
    kw = dict(quant=quant, w13_scale=put(p["w13_scale"]), w2_scale=put(p["w2_scale"]), a13_scale=put(p["a13_scale"]),
              a2_scale=put(p["a2_scale"]))
    fused = hj.fused_moe(put(p["x"]), put(p["w13"]), put(p["w2"]), router_logits=put(logits), top_k=2, **kw)
    w, ids = hj.moe_route(put(logits), 2)
    separate = hj.fused_moe(put(p["x"]), put(p["w13"]), put(p["w2"]), w, ids, **kw)
    assert np.array_equal(np.asarray(fused).view(np.uint16), np.asarray(separate).view(np.uint16))


def test_bad_inputs():
    import hpc_xla.torch as ht

    p = make_problem(3, 2, 256, 128, 2, "fp8_block128")
    t = {k: (to_torch(v, "cpu") if isinstance(v, (np.ndarray, np.generic)) else v) for k, v in p.items()}
    common = dict(quant="fp8_block128", w13_scale=t["w13_scale"], w2_scale=t["w2_scale"])
    with pytest.raises(ValueError, match=r"w13_scale must be \[E, 2I/128, H/128\] float32; got shape \[2, 2, 1\]"):
        ht.fused_moe(t["x"], t["w13"], t["w2"], t["topk_weights"], t["topk_ids"],
                     **dict(common, w13_scale=t["w13_scale"][:, :, :1].contiguous()))
    bad_ids = t["topk_ids"].clone()
    bad_ids[1, 0] = 7
    with pytest.raises(ValueError, match=r"topk_ids\[1, 0\] = 7 is outside \[0, num_experts_global=2\)"):
        ht.fused_moe(t["x"], t["w13"], t["w2"], t["topk_weights"], bad_ids, **common)
    q = make_problem(3, 2, 192, 128, 1, None)
    tq = {k: (to_torch(v, "cpu") if isinstance(v, (np.ndarray, np.generic)) else v) for k, v in q.items()}
    with pytest.raises(ValueError, match=r"quant='fp8_block128' needs float8_e4m3fn w13"):
        ht.fused_moe(tq["x"], tq["w13"], tq["w2"], tq["topk_weights"], tq["topk_ids"], quant="fp8_block128")
    with pytest.raises(ValueError, match=r"a13_scale \(static activation scale\) is required"):
        r = make_problem(3, 2, 256, 128, 1, "fp8_tensor")
        tr = {k: (to_torch(v, "cpu") if isinstance(v, (np.ndarray, np.generic)) else v) for k, v in r.items()}
        ht.fused_moe(tr["x"], tr["w13"], tr["w2"], tr["topk_weights"], tr["topk_ids"], quant="fp8_tensor",
                     w13_scale=tr["w13_scale"], w2_scale=tr["w2_scale"], a2_scale=tr["a2_scale"])
    with pytest.raises(ValueError, match=r"top_k must be in \[1, min\(num_experts=2, 32\)\]; got 3"):
        ht.fused_moe(t["x"], t["w13"], t["w2"], router_logits=to_torch(np.zeros((3, 2), np.float32), "cpu"),
                     top_k=3, **common)
    with pytest.raises(ValueError, match=r"pass topk_weights and topk_ids, or router_logits"):
        ht.fused_moe(t["x"], t["w13"], t["w2"], **common)


@pytest.mark.gpu
def test_cuda_path_reports_missing_pipeline():
    """Until the CUDA pipeline lands (issue #4) the GPU path must fail loudly, never compute garbage."""
    import torch

    import hpc_xla.torch as ht

    p = make_problem(3, 2, 256, 128, 2, None)
    t = {k: (to_torch(v, "cuda") if isinstance(v, (np.ndarray, np.generic)) else v) for k, v in p.items()}
    with pytest.raises(RuntimeError, match=r"fused_moe: the CUDA pipeline is not implemented yet"):
        ht.fused_moe(t["x"], t["w13"], t["w2"], t["topk_weights"], t["topk_ids"])
        torch.cuda.synchronize()
