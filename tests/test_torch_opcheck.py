"""torch.library.opcheck of every hpc_xla op on the CPU (schema mutations, fake tensors, autograd registration,
AOT dispatch with dynamic shapes) -- rope_norm's is in test_rope_norm.py. fp8 operands run every check but
test_schema, whose comparisons of mutated tensors torch does not implement for float8."""

import pytest
from test_fused_moe import make_problem, torch_problem

from hpc_xla._arrays import to_torch

FULL = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def test_decode_plan_and_attention_opcheck():
    import torch

    import hpc_xla.torch as ht
    from decode_harness import DecodeCase, make_inputs

    from hpc_xla import _decode

    t = {k: (to_torch(v, "cpu") if v is not None else None)
         for k, v in make_inputs(DecodeCase(seq_lens=(100, 0, 300))).items()}
    plan = ht.decode_plan(t["seq_lens"], num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16)
    c = plan.config
    torch.library.opcheck(torch.ops.hpc_xla.decode_plan.default,
                          (t["seq_lens"], torch.empty_like(plan.plan), c.num_kv_heads, c.num_q_heads, c.head_dim,
                           c.q_len, c.page_size, _decode.dtype_code("decode_plan", "kv_dtype", c.kv_dtype),
                           c.max_ctas), test_utils=FULL)
    out = torch.empty_like(t["q"])
    torch.library.opcheck(torch.ops.hpc_xla.decode_attention.default,
                          (t["q"], None, t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"], plan.plan,
                           plan.workspace, out, None, None, 128 ** -0.5, 1, 0, c.max_ctas), test_utils=FULL)


@pytest.mark.parametrize("scoring", [0, 1])
def test_moe_route_opcheck(scoring):
    import torch

    import hpc_xla.torch  # noqa: F401  (registers the ops)

    logits = torch.randn(5, 16, generator=torch.Generator().manual_seed(scoring))
    w, ids = torch.empty(5, 2), torch.empty(5, 2, dtype=torch.int32)
    torch.library.opcheck(torch.ops.hpc_xla.moe_route.default, (logits, None, w, ids, 2, scoring, True, 0, 0, 1.0),
                          test_utils=FULL)


@pytest.mark.parametrize("quant", [None, "fp8_tensor"])
def test_fused_moe_opcheck(quant):
    import torch

    import hpc_xla.torch  # noqa: F401  (registers the ops)

    p = torch_problem(make_problem(5, 4, 128, 128, 2, quant, shared=True, seed=3))
    out, ws = torch.empty(5, 128, dtype=torch.bfloat16), torch.empty(0, dtype=torch.uint8)
    args = (p["x"], None, p["w13"], p["w2"], p["w13_scale"], p["w2_scale"], p["a13_scale"], p["a2_scale"],
            p["topk_weights"], p["topk_ids"], p["shared_output"], out, ws, {None: 0, "fp8_tensor": 1}[quant], 0, 4,
            False)
    torch.library.opcheck(torch.ops.hpc_xla.fused_moe.default, args, test_utils=FULL if quant is None else FULL[1:])


@pytest.mark.parametrize("quant", [None, "fp8_tensor"])
def test_fused_moe_routed_opcheck(quant):
    import torch

    import hpc_xla.torch  # noqa: F401  (registers the ops)

    p = torch_problem(make_problem(5, 4, 128, 128, 2, quant, shared=True, seed=4))
    logits = torch.randn(5, 4, generator=torch.Generator().manual_seed(4))
    w, ids = torch.empty(5, 2), torch.empty(5, 2, dtype=torch.int32)
    out, ws = torch.empty(5, 128, dtype=torch.bfloat16), torch.empty(0, dtype=torch.uint8)
    args = (p["x"], None, p["w13"], p["w2"], p["w13_scale"], p["w2_scale"], p["a13_scale"], p["a2_scale"], logits,
            None, w, ids, p["shared_output"], out, ws, {None: 0, "fp8_tensor": 1}[quant], 0, 4, False, 0, True, 0, 0,
            1.0)
    torch.library.opcheck(torch.ops.hpc_xla.fused_moe_routed.default, args,
                          test_utils=FULL if quant is None else FULL[1:])
