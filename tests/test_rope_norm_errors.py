"""Bad inputs to rope_norm raise clear errors naming the argument, in both frameworks, on every device —
never a crash, a hang or silent garbage."""

import dataclasses

import numpy as np
import pytest

from conftest import devices
from rope_norm_harness import Case, make_inputs, to_torch

BASE = Case(tokens=6, num_q_heads=4, num_kv_heads=2, head_dim=64, page_size=8, num_blocks=2)


def _mutations():
    """(id, case, edit(inputs) -> inputs, extra kwargs, expected message regex)."""
    fp8 = dataclasses.replace(BASE, cache_fp8=True)
    return [
        ("q_dtype", BASE, lambda i: dict(i, q=i["q"].astype(np.float32)), {}, r"q must have dtype bfloat16 or float16"),
        ("k_dtype_mismatch", BASE, lambda i: dict(i, k=i["k"].astype(np.float16)), {}, r"k must have the dtype of q"),
        ("q_rank", BASE, lambda i: dict(i, q=i["q"].reshape(6, -1)), {}, r"q must be a 3-D tensor"),
        ("v_heads", BASE, lambda i: dict(i, v=i["v"][:, :1]), {}, r"v.shape\[1\] must be 2"),
        ("cache_heads", BASE, lambda i: dict(i, k_cache=i["k_cache"][:, :, :1], v_cache=i["v_cache"][:, :, :1]), {},
         r"k_cache.shape\[2\] must be 2"),
        # k_cache wrong, v_cache right: named k_cache (it was "v_cache.shape[2] must be 1 (from k_cache)")
        ("k_cache_heads", BASE, lambda i: dict(i, k_cache=i["k_cache"][:, :, :1]), {},
         r"rope_norm: k_cache.shape\[2\] must be 2 \(num_kv_heads, from k\)"),
        ("k_cache_head_dim", BASE, lambda i: dict(i, k_cache=i["k_cache"][..., :32]), {},
         r"rope_norm: k_cache.shape\[3\] must be 64 \(head_dim, from q\)"),
        ("head_dim_unsupported", dataclasses.replace(BASE, head_dim=64), lambda i: {
            **i, **{n: i[n][..., :60] for n in ("q", "k", "v", "k_cache", "v_cache")},
            "q_norm_weight": i["q_norm_weight"][:60], "k_norm_weight": i["k_norm_weight"][:60],
            "cos_sin_cache": i["cos_sin_cache"][:, :60]}, {}, r"head_dim \(q.shape\[2\]\) must be a multiple of 8"),
        ("tokens_mismatch", BASE, lambda i: dict(i, positions=i["positions"][:5]), {}, r"positions.shape\[0\] must be 6"),
        ("rotary_dim_odd", BASE, lambda i: i, {"rotary_dim": 63}, r"rotary_dim must be even"),
        ("cos_sin_width", BASE, lambda i: dict(i, cos_sin_cache=i["cos_sin_cache"][:, :32]), {},
         r"cos_sin_cache.shape\[1\] must be 64"),
        ("slot_out_of_range", BASE, lambda i: dict(i, slot_mapping=np.full_like(i["slot_mapping"], 16)), {},
         r"slot_mapping\[0\] = 16 is outside \[-1, 16\)"),
        ("position_out_of_range", BASE, lambda i: dict(i, positions=np.full_like(i["positions"], 4096)), {},
         r"positions\[0\] = 4096 is outside \[0, 4096\)"),
        ("fp8_cache_without_scale", fp8, lambda i: dict(i, k_scale=None), {}, r"k_scale is required"),
        ("scale_with_bf16_cache", BASE, lambda i: dict(i, v_scale=np.float32(1.0)), {},
         r"v_scale is only used with a float8_e4m3fn cache"),
        ("norm_weight_len", BASE, lambda i: dict(i, k_norm_weight=i["k_norm_weight"][:32]), {},
         r"k_norm_weight.shape\[0\] must be 64"),
        ("cache_dtype", BASE, lambda i: dict(i, k_cache=i["k_cache"].astype(np.float32),
                                             v_cache=i["v_cache"].astype(np.float32)), {},
         r"k_cache must have dtype bfloat16 or float8_e4m3fn"),
        ("rope_style", BASE, lambda i: i, {"rope_style": "llama"}, r"rope_style must be 'neox' or 'gptj'"),
        ("q_quant", BASE, lambda i: i, {"q_quant": "int8"}, r"q_quant must be None or 'fp8'"),
        ("norm_before_rope", BASE, lambda i: i, {"norm_before_rope": None},
         r"norm_before_rope must be a bool; got None"),
    ]


MUTATIONS = _mutations()
# CPU-only checks of data values; on the GPU they need HPC_XLA_CHECK=1 (tested in test_gpu_rope_norm.py).
DATA_CHECKS = {"slot_out_of_range", "position_out_of_range"}


def _call_torch(inputs, device, kwargs):
    import hpc_xla.torch as ht

    t = {k: to_torch(v, device) for k, v in inputs.items()}
    return ht.rope_norm(t["q"], t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"],
                        t["k_cache"], t["v_cache"], q_norm_weight=t["q_norm_weight"],
                        k_norm_weight=t["k_norm_weight"], k_scale=t["k_scale"], v_scale=t["v_scale"], **kwargs)


def _call_jax(inputs, device, kwargs):
    import jax

    import hpc_xla.jax as hj

    dev = jax.devices("cpu" if device == "cpu" else "gpu")[0]
    a = {k: None if v is None else jax.device_put(v, dev) for k, v in inputs.items()}
    out = jax.jit(lambda q, k, v, p, cs, s, kc, vc: hj.rope_norm(
        q, k, v, p, cs, s, kc, vc, q_norm_weight=a["q_norm_weight"], k_norm_weight=a["k_norm_weight"],
        k_scale=a["k_scale"], v_scale=a["v_scale"], **kwargs))(
        a["q"], a["k"], a["v"], a["positions"], a["cos_sin_cache"], a["slot_mapping"], a["k_cache"], a["v_cache"])
    jax.block_until_ready(out)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("name,case,edit,kwargs,message", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_bad_input_raises(framework, device, name, case, edit, kwargs, message):
    if device == "cuda" and name in DATA_CHECKS:
        pytest.skip("value checks on the GPU need HPC_XLA_CHECK=1")
    inputs = edit(make_inputs(case))
    if framework == "torch":
        with pytest.raises((ValueError, TypeError), match=message):
            _call_torch(inputs, device, kwargs)
    else:
        import jax

        with pytest.raises((ValueError, TypeError, jax.errors.JaxRuntimeError), match=message):
            _call_jax(inputs, device, kwargs)


def test_torch_cpu_error_leaves_cache_untouched():
    """Indices are checked before anything is written."""
    import torch

    case = BASE
    inputs = make_inputs(case)
    bad = dict(inputs, slot_mapping=np.concatenate([inputs["slot_mapping"][:-1], [99]]).astype(np.int32))
    t = {k: to_torch(v, "cpu") for k, v in bad.items()}
    before = t["k_cache"].clone()
    import hpc_xla.torch as ht

    with pytest.raises(ValueError, match=r"slot_mapping\[5\] = 99"):
        ht.rope_norm(t["q"], t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"], t["k_cache"],
                     t["v_cache"])
    assert torch.equal(before.view(torch.uint8), t["k_cache"].view(torch.uint8))


def test_torch_non_tensor_argument():
    import hpc_xla.torch as ht

    inputs = make_inputs(BASE)
    t = {k: to_torch(v, "cpu") for k, v in inputs.items()}
    with pytest.raises(TypeError, match=r"rope_norm: positions must be a torch.Tensor; got list"):
        ht.rope_norm(t["q"], t["k"], t["v"], [1, 2, 3], t["cos_sin_cache"], t["slot_mapping"], t["k_cache"],
                     t["v_cache"])
    with pytest.raises(TypeError, match=r"rope_norm: k_scale must be a torch.Tensor, a number or None; got str"):
        ht.rope_norm(*[t[k] for k in ("q", "k", "v", "positions", "cos_sin_cache", "slot_mapping", "k_cache",
                                      "v_cache")], k_scale="0.5")


def test_torch_mixed_devices():
    pytest.importorskip("torch")
    from conftest import hopper_available

    if not hopper_available():
        pytest.skip("needs a GPU to mix devices")
    inputs = make_inputs(BASE)
    t = {k: to_torch(v, "cuda") for k, v in inputs.items()}
    import hpc_xla.torch as ht

    with pytest.raises(ValueError, match=r"positions is on cpu but q is on cuda:0"):
        ht.rope_norm(t["q"], t["k"], t["v"], t["positions"].cpu(), t["cos_sin_cache"], t["slot_mapping"],
                     t["k_cache"], t["v_cache"])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", ["q", "k_cache", "q_scale_strided", "positions", "slot_mapping"])
def test_torch_non_contiguous_where_unsupported(device, name):
    import torch

    import hpc_xla.torch as ht

    case = dataclasses.replace(BASE, q_fp8=name == "q_scale_strided")
    t = {k: to_torch(v, device) for k, v in make_inputs(case).items()}
    kwargs = {}
    if name == "q":  # last dim strided
        t["q"] = t["q"].transpose(1, 2).contiguous().transpose(1, 2)
        message = r"q must be contiguous in its last dimension"
    elif name == "k_cache":
        t["k_cache"] = t["k_cache"].transpose(2, 3).contiguous().transpose(2, 3)
        message = r"k_cache must be contiguous in its last dimension"
    elif name in ("positions", "slot_mapping"):  # the GPU kernels index them densely: a strided view is refused
        t[name] = torch.stack([t[name], t[name]], dim=1)[:, 0]
        assert t[name].stride(0) == 2
        message = name + r" must be contiguous"
    else:
        kwargs["out_scale"] = torch.empty(case.num_q_heads, case.tokens, device=device).t()
        message = r"out_scale must be contiguous"  # (csrc's q_scale, named as passed)
    with pytest.raises(ValueError, match=message):
        ht.rope_norm(t["q"], t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"], t["k_cache"],
                     t["v_cache"], q_quant="fp8" if case.q_fp8 else None, **kwargs)
