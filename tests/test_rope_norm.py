"""rope_norm numerics (both frameworks, every device) against the float64 reference, plus the framework
integration: jit, donation, vmap, torch.compile, opcheck, strided vLLM cache views, JAX<->torch parity."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import devices
from rope_norm_harness import Case, check, make_inputs, run_jax, run_torch

RUNNERS = {"jax": run_jax, "torch": run_torch}


@st.composite
def cases(draw):
    head_dim = draw(st.sampled_from([16, 32, 64, 80, 96, 128, 192, 256]))
    kv = draw(st.integers(1, 4))
    rot_kind = draw(st.sampled_from(["full", "half", "odd"]))
    rotary_dim = {"full": None, "half": head_dim // 2,
                  "odd": 2 * draw(st.integers(1, head_dim // 2))}[rot_kind]
    page = draw(st.sampled_from([1, 8, 16, 64]))
    tokens = draw(st.integers(1, 33))
    return Case(
        tokens=tokens,
        num_q_heads=kv * draw(st.sampled_from([1, 2, 4, 8])),
        num_kv_heads=kv,
        head_dim=head_dim,
        page_size=page,
        num_blocks=(tokens + 2 * page - 1) // page + 1,
        rotary_dim=rotary_dim,
        rope_style=draw(st.sampled_from(["neox", "gptj"])),
        q_norm=draw(st.booleans()),
        k_norm=draw(st.booleans()),
        norm_before_rope=draw(st.booleans()),
        dtype=draw(st.sampled_from(["bfloat16", "float16"])),
        cache_fp8=draw(st.booleans()),
        q_fp8=draw(st.booleans()),
        weight_dtype=draw(st.sampled_from(["float32", "bfloat16"])),
        skip_every=draw(st.sampled_from([0, 2, 5])),
        eps=draw(st.sampled_from([1e-6, 1e-5])),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("framework", ["jax", "torch"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_random_cases(framework, device, case):
    inputs = make_inputs(case)
    check(case, inputs, *RUNNERS[framework](case, inputs, device))


NAMED = {
    "default": Case(),
    "gptj": Case(rope_style="gptj"),
    "partial_rotary_half": Case(rotary_dim=64),
    "partial_rotary_odd_half": Case(rotary_dim=40),
    "norm_after_rope": Case(norm_before_rope=False),
    "no_norm": Case(q_norm=False, k_norm=False),
    "q_norm_only": Case(k_norm=False),
    "fp8_cache": Case(cache_fp8=True),
    "fp8_q": Case(q_fp8=True),
    "fp8_both_fp16": Case(cache_fp8=True, q_fp8=True, dtype="float16"),
    "int64_indices": Case(index_dtype="int64"),
    "all_skipped": Case(skip_every=1),
    # a cache of no blocks (every slot -1): nothing written, q still transformed; two empty caches may share a null
    # data pointer, which the k_cache / v_cache aliasing check must not read as one cache passed twice
    "no_cache_blocks": Case(num_blocks=0, skip_every=1),
    "no_tokens": Case(tokens=0, skip_every=0, cache_fp8=True, q_fp8=True),  # a launch of nothing
    "one_token": Case(tokens=1, skip_every=0),
    "mqa_8_1": Case(num_q_heads=8, num_kv_heads=1),
    "hpcops_64_8": Case(num_q_heads=64, num_kv_heads=8, tokens=9, num_blocks=2),
    "d64": Case(head_dim=64),
    "d256": Case(head_dim=256, page_size=64, num_blocks=1),
    "bf16_weights": Case(weight_dtype="bfloat16"),
}


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("framework", ["jax", "torch"])
@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_cases(framework, device, name):
    case = NAMED[name]
    if framework == "jax" and case.index_dtype == "int64":
        pytest.skip("jax without x64 has no int64 arrays")
    inputs = make_inputs(case)
    check(case, inputs, *RUNNERS[framework](case, inputs, device))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("case", [Case(), Case(cache_fp8=True, q_fp8=True)], ids=["bf16", "fp8"])
def test_jax_torch_bitwise_parity(device, case):
    """Both frameworks call the same launcher on the same device: results must be identical bit for bit."""
    inputs = make_inputs(case)
    a, b = run_jax(case, inputs, device), run_torch(case, inputs, device)
    for x, y in zip(a, b):
        if x is None:
            assert y is None
            continue
        assert np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))


@pytest.mark.parametrize("device", devices())
def test_torch_strided_vllm_cache_views(device):
    case = Case(num_q_heads=16, num_kv_heads=4, tokens=11, page_size=16, num_blocks=3, cache_fp8=False)
    inputs = make_inputs(case)
    check(case, inputs, *run_torch(case, inputs, device, strided_cache=True))


@pytest.mark.parametrize("device", devices())
def test_torch_strided_qkv_views_and_inplace_q(device):
    """vLLM passes q/k/v as views of one [T, (Hq+2Hkv)*D] qkv tensor; q_out may be q itself."""
    import torch

    import hpc_xla.torch as ht
    from rope_norm_harness import from_torch, to_torch

    case = Case(num_q_heads=8, num_kv_heads=2, tokens=5)
    inputs = make_inputs(case)
    T, Hq, Hkv, D = case.tokens, case.num_q_heads, case.num_kv_heads, case.head_dim
    t = {k: to_torch(v, device) for k, v in inputs.items()}
    qkv = torch.cat([t["q"].reshape(T, -1), t["k"].reshape(T, -1), t["v"].reshape(T, -1)], dim=1)
    q, k, v = qkv.split([Hq * D, Hkv * D, Hkv * D], dim=1)
    q, k, v = q.view(T, Hq, D), k.view(T, Hkv, D), v.view(T, Hkv, D)
    assert not q.is_contiguous()
    out = ht.rope_norm(q, k, v, t["positions"], t["cos_sin_cache"], t["slot_mapping"], t["k_cache"], t["v_cache"],
                       q_norm_weight=t["q_norm_weight"], k_norm_weight=t["k_norm_weight"], out=q, **case.kwargs())
    assert out is q
    check(case, inputs, from_torch(q), None, from_torch(t["k_cache"]), from_torch(t["v_cache"]))


def test_jax_donation_updates_cache_in_place():
    import jax

    import hpc_xla.jax as hj

    case = Case()
    inputs = make_inputs(case)
    args = {k: None if v is None else jax.device_put(v) for k, v in inputs.items()}
    # device_put may alias numpy memory, which XLA cannot take over; caches made by XLA can be donated.
    for name in ("k_cache", "v_cache"):
        args[name] = jax.jit(lambda x: x * 1)(args[name])
        inputs[name] = np.array(args[name], copy=True)  # a view would pin the buffer and block donation
    k_ptr = args["k_cache"].unsafe_buffer_pointer()
    f = jax.jit(lambda *a: hj.rope_norm(*a, q_norm_weight=args["q_norm_weight"], k_norm_weight=args["k_norm_weight"]),
                donate_argnums=(6, 7))
    q_out, k_cache, v_cache = f(args["q"], args["k"], args["v"], args["positions"], args["cos_sin_cache"],
                                args["slot_mapping"], args["k_cache"], args["v_cache"])
    assert k_cache.unsafe_buffer_pointer() == k_ptr, "donated cache was copied instead of updated in place"
    assert args["k_cache"].is_deleted()
    check(case, inputs, np.asarray(q_out), None, np.asarray(k_cache), np.asarray(v_cache))


def test_jax_eager_and_vmap():
    import jax
    import jax.numpy as jnp

    import hpc_xla.jax as hj

    case = Case(tokens=4, skip_every=0)
    inputs = make_inputs(case)
    check(case, inputs, *run_jax(case, inputs, jit=False))
    # XLA may canonicalize NaN payloads when it stacks/slices arrays for vmap, so this test (about batching,
    # not garbage preservation) uses finite cache contents.
    rng = np.random.default_rng(7)
    for name in ("k_cache", "v_cache"):
        inputs[name] = rng.standard_normal(inputs[name].shape).astype(inputs[name].dtype)
    # vmap over a batch of two independent (inputs, caches) problems runs them one after the other.
    other = dict(make_inputs(dataclasses.replace(case, seed=1)), q_norm_weight=inputs["q_norm_weight"],
                 k_norm_weight=inputs["k_norm_weight"])
    names = ["q", "k", "v", "positions", "cos_sin_cache", "slot_mapping", "k_cache", "v_cache"]
    batched = [jnp.stack([jnp.asarray(inputs[n]), jnp.asarray(other[n])]) for n in names]
    out = jax.jit(jax.vmap(lambda *a: hj.rope_norm(*a, q_norm_weight=inputs["q_norm_weight"],
                                                   k_norm_weight=inputs["k_norm_weight"])))(*batched)
    for i, inp in enumerate([inputs, other]):
        # XLA's stack may canonicalize the NaN payloads of the garbage: compare against what went in.
        inp = dict(inp, k_cache=np.asarray(batched[6][i]), v_cache=np.asarray(batched[7][i]))
        check(case, inp, np.asarray(out[0][i]), None, np.asarray(out[1][i]), np.asarray(out[2][i]))


@pytest.mark.parametrize("device", devices())
def test_torch_opcheck(device):
    import torch

    import hpc_xla.torch  # noqa: F401  (registers the op)
    from rope_norm_harness import to_torch

    for case in (Case(), Case(cache_fp8=True, q_fp8=True)):
        inputs = make_inputs(case)
        t = {k: to_torch(v, device) for k, v in inputs.items()}
        q_out = torch.empty(t["q"].shape, dtype=torch.float8_e4m3fn if case.q_fp8 else t["q"].dtype, device=device)
        q_scale = torch.empty(t["q"].shape[:2], device=device) if case.q_fp8 else None
        args = (t["q"], t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"], t["k_cache"],
                t["v_cache"], q_out, q_scale, t["q_norm_weight"], t["k_norm_weight"], t["k_scale"], t["v_scale"],
                1e-6, 0, case.head_dim, True)
        # torch's test_schema compares mutated tensors with arithmetic that float8 lacks ("mul ... not
        # implemented for Float8_e4m3fn"), so the fp8 case runs the other checks.
        utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
        torch.library.opcheck(torch.ops.hpc_xla.rope_norm.default, args,
                              test_utils=utils if case.cache_fp8 else ("test_schema",) + utils)


@pytest.mark.parametrize("device", devices())
def test_torch_compile_fullgraph(device):
    import torch

    import hpc_xla.torch as ht
    from rope_norm_harness import from_torch, to_torch

    case = Case(q_fp8=True)
    inputs = make_inputs(case)
    t = {k: to_torch(v, device) for k, v in inputs.items()}

    @torch.compile(fullgraph=True, dynamic=False)
    def layer(q, k, v, positions, cos_sin, slots, k_cache, v_cache, qw, kw):
        q_fp8, q_scale = ht.rope_norm(q * 1.0, k, v, positions, cos_sin, slots, k_cache, v_cache, q_norm_weight=qw,
                                      k_norm_weight=kw, q_quant="fp8")
        return q_fp8, q_scale * 1.0

    q_fp8, q_scale = layer(t["q"], t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"],
                           t["k_cache"], t["v_cache"], t["q_norm_weight"], t["k_norm_weight"])
    check(case, inputs, from_torch(q_fp8), from_torch(q_scale), from_torch(t["k_cache"]), from_torch(t["v_cache"]))
