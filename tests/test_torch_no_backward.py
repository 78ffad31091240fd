"""The torch ops have no backward. Without an Autograd-key kernel, torch's fallback left the outputs they write
detached from their inputs, so a gradient through them was silently missing (x.grad of `residual + fused_moe(x)`
without the MoE term). Now an argument that requires grad, in grad mode, is refused by name; under no_grad /
inference_mode (vLLM's) or with detached tensors the ops run as before, and they bump the version counters of the
tensors they write, as torch's in-place ops do."""

import pytest
from test_fused_moe import make_problem, torch_problem

from hpc_xla._arrays import to_torch

torch = pytest.importorskip("torch")


def _moe():
    import hpc_xla.torch as ht

    p = torch_problem(make_problem(5, 4, 128, 128, 2, None, shared=True, seed=3))

    def call(**replace):
        a = dict(p, **replace)
        return ht.fused_moe(a["x"], a["w13"], a["w2"], a["topk_weights"], a["topk_ids"],
                            shared_output=a["shared_output"])

    return p, call


def _rope():
    import hpc_xla.torch as ht
    from rope_norm_harness import Case, make_inputs

    case = Case(tokens=5)
    t = {k: (to_torch(v, "cpu") if v is not None else None) for k, v in make_inputs(case).items()}

    def call(**replace):
        a = dict(t, **replace)
        return ht.rope_norm(a["q"], a["k"], a["v"], a["positions"], a["cos_sin_cache"], a["slot_mapping"],
                            a["k_cache"].clone(), a["v_cache"].clone(), q_norm_weight=a["q_norm_weight"],
                            k_norm_weight=a["k_norm_weight"], **case.kwargs())

    return t, call


def _decode():
    import hpc_xla.torch as ht
    from decode_harness import DecodeCase, make_inputs

    t = {k: (to_torch(v, "cpu") if v is not None else None)
         for k, v in make_inputs(DecodeCase(seq_lens=(100, 0, 300))).items()}

    def call(**replace):
        a = dict(t, **replace)
        return ht.decode_attention(a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"])

    return t, call


def _route():
    import hpc_xla.torch as ht

    t = {"router_logits": torch.randn(5, 16, generator=torch.Generator().manual_seed(0))}

    def call(**replace):
        return ht.moe_route(dict(t, **replace)["router_logits"], 2)[0]

    return t, call


CASES = {"fused_moe": (_moe, ["x", "w13", "w2", "topk_weights", "shared_output"]),
         "rope_norm": (_rope, ["q", "k", "v", "q_norm_weight", "k_norm_weight"]),
         "decode_attention": (_decode, ["q", "k_cache", "v_cache"]),
         "moe_route": (_route, ["router_logits"])}


@pytest.mark.parametrize("op, arg", [(op, arg) for op, (_, args) in CASES.items() for arg in args])
def test_an_argument_that_requires_grad_is_refused_by_name(op, arg):
    tensors, call = CASES[op][0]()
    wants_grad = torch.nn.Parameter(tensors[arg].clone()) if arg.startswith("w") else \
        tensors[arg].clone().requires_grad_()
    with pytest.raises(ValueError, match=r"^%s: %s requires grad, but hpc_xla ops have no backward .* "
                                         r"torch\.no_grad\(\) .* %s\.detach\(\)" % (op, arg, arg)):
        call(**{arg: wants_grad})
    # the same tensors run, with the same bits as plain ones, where no gradient is recorded
    expected = call()
    with torch.no_grad():
        assert torch.equal(call(**{arg: wants_grad}).view(torch.uint8), expected.view(torch.uint8))
    with torch.inference_mode():
        assert torch.equal(call(**{arg: wants_grad}).view(torch.uint8), expected.view(torch.uint8))
    assert torch.equal(call(**{arg: wants_grad.detach()}).view(torch.uint8), expected.view(torch.uint8))


def test_written_tensors_get_a_new_version():
    import hpc_xla.torch as ht

    p, _ = _moe()
    out = torch.empty(5, 128, dtype=torch.bfloat16)
    before = out._version
    ht.fused_moe(p["x"], p["w13"], p["w2"], p["topk_weights"], p["topk_ids"], out=out)
    assert out._version > before


def test_errors_name_the_wrappers_arguments():
    """The schema calls rope_norm's `out` q_out and moe_route's `out` topk_weights / topk_ids: the errors use the
    names the user passed."""
    import hpc_xla.torch as ht

    t, call = _rope()
    out = torch.empty_like(t["q"]).requires_grad_()
    with pytest.raises(ValueError, match=r"^rope_norm: out requires grad, .* pass out\.detach\(\)"):
        ht.rope_norm(t["q"], t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"],
                     t["k_cache"].clone(), t["v_cache"].clone(), out=out)
    logits = torch.randn(5, 16)
    with pytest.raises(ValueError, match=r"^moe_route: out\[0\] requires grad"):
        ht.moe_route(logits, 2, out=(torch.empty(5, 2).requires_grad_(), torch.empty(5, 2, dtype=torch.int32)))


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_written_tensors_get_a_new_version_in_every_mode(mode):
    """inference_mode skips the Autograd key, not ADInplaceOrView: an ordinary tensor the op writes there still gets
    a new version, as with torch's own in-place ops, so a backward that saved it raises."""
    import hpc_xla.torch as ht

    p, _ = _moe()
    w = torch.ones(5, 128, dtype=torch.bfloat16, requires_grad=True)
    out = torch.zeros(5, 128, dtype=torch.bfloat16)
    y = (w * out).float().sum()  # saves `out` for w's gradient
    with getattr(torch, mode)():
        ht.fused_moe(p["x"], p["w13"], p["w2"], p["topk_weights"], p["topk_ids"], out=out)
    assert out._version > 0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_a_tensor_saved_for_backward_and_then_overwritten_is_caught():
    """What the version bump buys: autograd refuses a backward that would read a tensor the op overwrote."""
    import hpc_xla.torch as ht

    p, _ = _moe()
    w = torch.ones(5, 128, dtype=torch.bfloat16, requires_grad=True)
    out = torch.zeros(5, 128, dtype=torch.bfloat16)
    y = (w * out).float().sum()  # saves `out` for w's gradient
    ht.fused_moe(p["x"], p["w13"], p["w2"], p["topk_weights"], p["topk_ids"], out=out)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


@pytest.mark.parametrize("module, op", [("moe", "fused_moe_op"), ("rope_norm", "rope_norm_op"),
                                        ("attention", "decode_attention_op"), ("moe", "moe_route_op"),
                                        ("attention", "decode_plan_op")])
def test_every_wrapper_calls_its_op_through_the_check(module, op):
    """The check and the version bump live in InferenceOnly, not in dispatcher kernels (Python kernels at the
    Autograd / ADInplaceOrView keys cost ~9-22 us per call); every op the wrappers call goes through it."""
    import importlib

    from hpc_xla.torch._library import InferenceOnly

    wrapped = getattr(importlib.import_module("hpc_xla.torch." + module), op)
    assert isinstance(wrapped, InferenceOnly)
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("hpc_xla::" + wrapped.name, "Autograd")
