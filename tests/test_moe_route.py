"""moe_route against the float64 reference (both frameworks, every device), incl. grouped top-k with a
correction bias (DeepSeek-V3), sigmoid scoring, ties, and bad inputs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import devices
from hpc_xla import reference
from hpc_xla._arrays import from_torch, to_torch


def _run(framework, device, logits, bias, **kw):
    if framework == "torch":
        import hpc_xla.torch as ht

        w, ids = ht.moe_route(to_torch(logits, device), correction_bias=to_torch(bias, device), **kw)
        return from_torch(w), from_torch(ids)
    import jax

    import hpc_xla.jax as hj

    dev = jax.devices("cpu" if device == "cpu" else "gpu")[0]
    put = lambda x: None if x is None else jax.device_put(x, dev)  # noqa: E731
    top_k = kw.pop("top_k")
    w, ids = jax.jit(lambda x, b: hj.moe_route(x, top_k, correction_bias=b, **kw))(put(logits), put(bias))
    return np.asarray(w), np.asarray(ids)


def _check(logits, bias, weights, ids, **kw):
    want_w, want_ids, select = reference.moe_route(logits, correction_bias=bias, **kw)
    assert ids.dtype == np.int32 and weights.dtype == np.float32
    tokens = np.arange(len(ids))[:, None]
    got_sel = select[tokens, ids]
    # best first: the selection values of the returned ids never increase (ties within fp32 noise)
    assert (np.diff(got_sel, axis=-1) <= 1e-6).all(), "ids not ordered best first:\n%s" % ids
    # the same selection as the float64 reference, up to near-ties the fp32 kernel may resolve differently
    differs = (ids != want_ids).any(-1)
    for t in np.where(differs)[0]:
        assert np.allclose(got_sel[t], select[t][want_ids[t]], rtol=0, atol=1e-6), "token %d: ids %s, expected %s" % (
            t, ids[t], want_ids[t])
    # every weight is the reference weight of the id next to it (scoring, renormalization, routed_scaling)
    route_kw = {k: kw[k] for k in ("scoring", "renormalize", "routed_scaling") if k in kw}
    np.testing.assert_allclose(weights, reference.moe_route_weights(logits, ids, **route_kw), rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(weights[~differs], want_w[~differs], rtol=2e-5, atol=1e-6)


@st.composite
def cases(draw):
    experts = draw(st.sampled_from([8, 16, 60, 64, 128, 256, 384]))
    grouped = draw(st.booleans()) and experts % 8 == 0
    num_groups = draw(st.sampled_from([g for g in (2, 4, 8) if experts % g == 0])) if grouped else None
    topk_groups = draw(st.integers(1, num_groups)) if grouped else None
    limit = min(experts, 16) if not grouped else min(16, topk_groups * (experts // num_groups))
    return dict(tokens=draw(st.integers(1, 40)), experts=experts, top_k=draw(st.integers(1, limit)),
                scoring=draw(st.sampled_from(["softmax", "sigmoid"])), renormalize=draw(st.booleans()),
                num_groups=num_groups, topk_groups=topk_groups, bias=draw(st.booleans()),
                routed_scaling=draw(st.sampled_from([1.0, 2.5])),
                dtype=draw(st.sampled_from(["float32", "bfloat16"])), seed=draw(st.integers(0, 2**31 - 1)))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("framework", ["jax", "torch"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_random_cases(framework, device, case):
    import ml_dtypes

    rng = np.random.default_rng(case["seed"])
    dt = np.float32 if case["dtype"] == "float32" else ml_dtypes.bfloat16
    logits = (2 * rng.standard_normal((case["tokens"], case["experts"]))).astype(dt)
    bias = rng.standard_normal(case["experts"]).astype(np.float32) * 0.1 if case["bias"] else None
    kw = dict(top_k=case["top_k"], scoring=case["scoring"], renormalize=case["renormalize"],
              num_groups=case["num_groups"], topk_groups=case["topk_groups"], routed_scaling=case["routed_scaling"])
    w, ids = _run(framework, device, logits, bias, **dict(kw))
    _check(logits.astype(np.float64), bias, w, ids, **kw)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_deepseek_v3_and_ties(framework, device):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((7, 256)).astype(np.float32)
    bias = (rng.standard_normal(256) * 0.05).astype(np.float32)
    kw = dict(top_k=8, scoring="sigmoid", renormalize=True, num_groups=8, topk_groups=4, routed_scaling=2.5)
    w, ids = _run(framework, device, logits, bias, **dict(kw))
    _check(logits, bias, w, ids, **kw)
    # exact ties resolve to the lower expert index
    tie = np.zeros((2, 16), np.float32)
    w, ids = _run(framework, device, tie, None, top_k=4)
    assert ids.tolist() == [[0, 1, 2, 3]] * 2
    np.testing.assert_allclose(w, 0.25)


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_bad_inputs(framework):
    import jax

    logits = np.zeros((3, 16), np.float32)
    errors = (ValueError, jax.errors.JaxRuntimeError)
    with pytest.raises(errors, match=r"top_k must be in \[1, num_experts=16\]; got 17"):
        _run(framework, "cpu", logits, None, top_k=17)
    with pytest.raises(errors, match=r"num_groups \(3\) must divide the number of experts \(16\)"):
        _run(framework, "cpu", logits, None, top_k=2, num_groups=3, topk_groups=1)
    with pytest.raises(errors, match=r"top_k \(5\) exceeds the experts in the kept groups \(4\)"):
        _run(framework, "cpu", logits, None, top_k=5, num_groups=4, topk_groups=1)
    with pytest.raises(errors, match=r"correction_bias.shape\[0\] must be 16"):
        _run(framework, "cpu", logits, np.zeros(8, np.float32), top_k=2)
    with pytest.raises(ValueError, match=r"scoring must be 'softmax' or 'sigmoid'"):
        _run(framework, "cpu", logits, None, top_k=2, scoring="relu")
    with pytest.raises(ValueError, match=r"num_groups=4 needs topk_groups"):
        _run(framework, "cpu", logits, None, top_k=2, num_groups=4)
    with pytest.raises(TypeError, match=r"renormalize must be a bool; got 'no'"):  # not read as True
        _run(framework, "cpu", logits, None, top_k=2, renormalize="no")
    if framework == "jax":  # XLA hands any dtype over: one that no op takes is named too (not "an unsupported dtype")
        with pytest.raises(errors, match=r"router_logits must have dtype float32, bfloat16 or float16; got int8"):
            _run(framework, "cpu", logits.astype(np.int8), None, top_k=2)


def test_token_count_bound():
    """T * top_k above 2^30 is refused (the kernel counts tokens in int): stride-0 views give the shapes without
    the memory; the bound is checked before the outputs' shapes."""
    import torch

    from hpc_xla._ext import ext

    tokens = (1 << 26) + 1
    logits = torch.zeros(1, 16).expand(tokens, 16)
    weights = torch.zeros(1, 16).expand(tokens, 16)
    ids = torch.zeros(1, 16, dtype=torch.int32).expand(tokens, 16)
    with pytest.raises(ValueError, match=r"T \* top_k must be <= 2\^30; got 67108865 \* 16"):
        ext().moe_route(logits, None, weights, ids, 16, 0, True, 0, 0, 1.0)


def test_torch_empty_logits_from_numpy_route():
    """numpy gives a [0, E] array strides (0, 0); csrc's last-dimension check used to refuse that empty view
    ("must be contiguous in its last dimension ... got stride 0") where torch.zeros(0, E) passed."""
    import torch

    import hpc_xla.torch as ht

    logits = torch.from_numpy(np.zeros((0, 8), np.float32))
    assert logits.stride() == (0, 0)
    w, ids = ht.moe_route(logits, 2)
    assert w.shape == (0, 2) and ids.shape == (0, 2)
