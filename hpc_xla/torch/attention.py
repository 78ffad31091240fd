"""Paged decode attention for torch (DESIGN.md API item 2): decode_plan + decode_attention.

    plan = decode_plan(seq_lens, num_kv_heads=8, num_q_heads=64, head_dim=128, page_size=64)  # once per step
    out = decode_attention(q, k_cache, v_cache, block_table, seq_lens, plan)                  # every layer

decode_plan runs one small kernel on the current stream (no host sync); a DecodePlan owns its plan and
workspace buffers, so `decode_plan(..., out=plan)` refills one in place: capture both calls in a CUDA graph
at the max batch and replay with new seq_lens (padded sequences have length 0).
"""

import dataclasses

import torch

from hpc_xla import _args, _decode
from hpc_xla._ext import ext
from hpc_xla.torch._library import define


@dataclasses.dataclass
class DecodePlan:
    """Plan (int32, built on the device) + the fp32 workspace its split pieces use + the config it is for."""

    plan: torch.Tensor
    workspace: torch.Tensor
    config: _decode.DecodeConfig


def _plan_impl(seq_lens, plan, num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, max_ctas):
    ext().decode_plan(seq_lens, plan, num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, max_ctas)


def _attention_impl(q, q_scale, k_cache, v_cache, block_table, seq_lens, plan, workspace, out, k_scale, v_scale,
                    sm_scale, q_len, schedule, max_ctas):
    ext().decode_attention(q, q_scale, k_cache, v_cache, block_table, seq_lens, plan, workspace, out, k_scale,
                           v_scale, sm_scale, q_len, schedule, max_ctas)


def _fake(*args):
    return None


decode_plan_op = define(
    "decode_plan(Tensor seq_lens, Tensor(a!) plan, int num_kv_heads, int num_q_heads, int head_dim, int q_len, "
    "int page_size, int kv_dtype, int max_ctas) -> ()", _plan_impl, _fake)
decode_attention_op = define(
    "decode_attention(Tensor q, Tensor? q_scale, Tensor k_cache, Tensor v_cache, Tensor block_table, "
    "Tensor seq_lens, Tensor? plan, Tensor(a!) workspace, Tensor(b!) out, Tensor? k_scale, Tensor? v_scale, "
    "float sm_scale, int q_len, int schedule, int max_ctas) -> ()", _attention_impl, _fake,
    user_names=dict(plan="plan.plan", workspace="workspace (or plan.workspace)"))


def _max_ctas(max_ctas, device, num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, q_dtype):
    # (the query validates the config: the workspace is sized from it next; an explicit max_ctas asks the CPU's)
    index = (device.index or 0) if device.type == "cuda" and max_ctas is None else None  # cpu, meta: no GPU query
    ctas = _device_max_ctas(index, num_kv_heads, num_q_heads, head_dim, q_len, page_size,
                            _decode.canonical_dtype_name(kv_dtype), _decode.canonical_dtype_name(q_dtype))
    return ctas if max_ctas is None else _decode.checked_max_ctas("decode_attention", max_ctas)


@torch.compiler.assume_constant_result
def _device_max_ctas(index, num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, q_dtype):
    # an occupancy query of the binary: a constant of the device and the config (torch.compile folds it)
    return _decode.max_ctas_for(index, num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, q_dtype)


def _address_mod16(t):
    """t's address % 16, or 0 where it has none to read: under torch.compile, and for make_fx's / FakeTensorMode's
    fake tensors ("Cannot access data pointer of Tensor")."""
    if torch.compiler.is_compiling():
        return 0
    try:
        return t.data_ptr() % 16
    except RuntimeError:
        return 0


def decode_plan(seq_lens, *, num_kv_heads, num_q_heads, head_dim, page_size, q_len=1, kv_dtype=torch.bfloat16,
                q_dtype=None, max_ctas=None, out=None, workspace=None):
    """Builds the load-balanced schedule for `seq_lens` [B] int32 on their device (see hpc_xla.jax.decode_plan).
    `out`: an existing DecodePlan for the same config to refill in place (CUDA-graph friendly).
    `workspace`: a float32 buffer of at least the config's workspace_size for a new plan to use instead of its own
    (one buffer sized for the largest batch can serve the plans of every batch size: they run one at a time)."""
    _args.tensor("decode_plan", "seq_lens", seq_lens)
    _args.optional_tensors("decode_plan", workspace=workspace)
    num_kv_heads, num_q_heads, head_dim, page_size, q_len, max_ctas = _decode.check_shape_args(
        "decode_plan", num_kv_heads, num_q_heads, head_dim, page_size, q_len, max_ctas)
    if seq_lens.dim() != 1:
        raise ValueError("decode_plan: seq_lens must be [B] int32; got shape %s" % (tuple(seq_lens.shape),))
    q_dtype = kv_dtype if q_dtype is None else q_dtype
    if out is not None and not isinstance(out, DecodePlan):
        raise TypeError("decode_plan: out must be a DecodePlan to refill (from an earlier decode_plan); got %s"
                        % type(out).__name__)
    if out is None:
        ctas = _max_ctas(max_ctas, seq_lens.device, num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype,
                         q_dtype)
        config = _decode.DecodeConfig(batch=int(seq_lens.shape[0]), num_kv_heads=int(num_kv_heads),
                                      num_q_heads=int(num_q_heads), head_dim=int(head_dim), q_len=int(q_len),
                                      page_size=int(page_size), kv_dtype=_decode.canonical_dtype_name(kv_dtype),
                                      max_ctas=ctas)
        if workspace is None:
            workspace = torch.empty(config.workspace_size, dtype=torch.float32, device=seq_lens.device)
        elif (workspace.dtype != torch.float32 or workspace.dim() != 1 or workspace.device != seq_lens.device
              or workspace.shape[0] < config.workspace_size or not workspace.is_contiguous()
              or _address_mod16(workspace)):  # (the launcher checks too)
            raise ValueError("decode_plan: workspace must be a contiguous, 16-byte aligned 1-D float32 tensor on %s "
                             "with >= %d elements; got %s %s (strides %s, address %% 16 = %d) on %s"
                             % (seq_lens.device, config.workspace_size, workspace.dtype, tuple(workspace.shape),
                                tuple(workspace.stride()), _address_mod16(workspace), workspace.device))
        out = DecodePlan(torch.empty(config.plan_size, dtype=torch.int32, device=seq_lens.device), workspace, config)
    elif workspace is not None:
        raise ValueError("decode_plan: workspace applies to a new plan; a refilled plan (out=) keeps its own")
    c = out.config
    if max_ctas is not None and max_ctas != c.max_ctas:  # (it was ignored: the refilled plan keeps its own)
        raise ValueError("decode_plan: out was built for max_ctas=%d but this call has max_ctas=%d"
                         % (c.max_ctas, max_ctas))
    c.check_call(int(seq_lens.shape[0]), num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype,
                 op="decode_plan", plan_name="out")
    decode_plan_op(seq_lens, out.plan, c.num_kv_heads, c.num_q_heads, c.head_dim, c.q_len, c.page_size,
                   _decode.dtype_code("decode_plan", "kv_dtype", c.kv_dtype), c.max_ctas)
    return out


def decode_attention(q, k_cache, v_cache, block_table, seq_lens, plan=None, *, sm_scale=None, k_scale=None,
                     v_scale=None, q_scale=None, q_len=None, schedule="dynamic", max_ctas=None, out=None,
                     workspace=None, out_dtype=None):
    """Attention of q_len new tokens per sequence against the paged cache (see hpc_xla.jax.decode_attention).

    k_cache / v_cache may be vLLM's strided views. `out`: optional preallocated [B * q_len, Hq, D] output, in q's
    dtype, or for a float8_e4m3fn q bfloat16 or float16 (the model's); without `out`, `out_dtype` picks that one.
    `plan` must come from these `seq_lens` (refill it with decode_plan(..., out=plan) when they change); with
    either schedule its max_ctas is the call's (a different explicit `max_ctas` raises) and its workspace is used
    unless `workspace` is given; without a plan a workspace is taken from `workspace` or allocated. `q_len`
    defaults to the plan's, else q.shape[0] / B. `k_scale` / `v_scale` (fp8 cache): one-element float32 tensors,
    or numbers (made into 0-d tensors on q's device; a captured CUDA graph keeps their values).
    """
    _args.tensors("decode_attention", q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table,
                  seq_lens=seq_lens)
    k_scale, v_scale = _args.scale_tensors("decode_attention", q.device, k_scale=k_scale, v_scale=v_scale).values()
    _args.optional_tensors("decode_attention", k_scale=k_scale, v_scale=v_scale, q_scale=q_scale, out=out,
                           workspace=workspace)
    q_len = _decode.check_attention_call(q, k_cache, seq_lens, plan, DecodePlan, q_len, schedule)
    if out is not None and out_dtype is not None:
        raise ValueError("decode_attention: give out_dtype or out, not both (out's dtype is the output's)")
    if out is None:  # (a given out's dtype is checked by csrc with the other operands)
        out_dtype = getattr(torch, _decode.out_dtype_name("decode_attention", q.dtype, out_dtype))
    batch = int(seq_lens.shape[0])
    num_q_heads, head_dim = int(q.shape[1]), int(q.shape[2])
    page_size, num_kv_heads = int(k_cache.shape[1]), int(k_cache.shape[2])
    if schedule == "dynamic" and plan is None:
        _decode.check_cache_dtype_before_planning(k_cache)
        with _decode.planning_for_attention():
            plan = decode_plan(seq_lens, num_kv_heads=num_kv_heads, num_q_heads=num_q_heads, head_dim=head_dim,
                               page_size=page_size, q_len=q_len, kv_dtype=k_cache.dtype, q_dtype=q.dtype,
                               max_ctas=max_ctas)
    if plan is not None:
        plan.config.check_call(batch, num_kv_heads, num_q_heads, head_dim, q_len, page_size, k_cache.dtype,
                               plan_ints=int(plan.plan.numel()))
        ctas = _decode.planned_max_ctas(plan.config, max_ctas)
        workspace = plan.workspace if workspace is None else workspace
    else:
        with _decode.planning_for_attention():
            ctas = _max_ctas(max_ctas, q.device, num_kv_heads, num_q_heads, head_dim, q_len, page_size,
                             k_cache.dtype, q.dtype)
    if workspace is None:
        size = _decode.workspace_floats(batch, num_kv_heads, num_q_heads, head_dim, q_len, ctas)
        workspace = torch.empty(size, dtype=torch.float32, device=q.device)
    if out is None:
        out = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    decode_attention_op(q, q_scale, k_cache, v_cache, block_table, seq_lens,
                        plan.plan if schedule == "dynamic" else None, workspace, out, k_scale, v_scale,
                        _decode.default_sm_scale(head_dim, sm_scale), int(q_len), _decode.SCHEDULES[schedule], ctas)
    return out
