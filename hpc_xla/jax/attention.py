"""Paged decode attention for JAX (DESIGN.md API item 2): decode_plan + decode_attention.

The plan is built ON THE DEVICE from seq_lens (one small kernel), has a fixed size for given max shapes, and is
meant to be built once per step and reused by every layer. It is a pytree whose static part (the config it was
built for) is checked against each decode_attention call at trace time.
"""

import jax
import jax.numpy as jnp
import numpy as np

from hpc_xla import _args, _decode
from hpc_xla.jax import _ffi


@jax.tree_util.register_pytree_node_class
class DecodePlan:
    """The schedule of one decode step: `array` (int32, built on the device) + `config` (static)."""

    def __init__(self, array, config):
        self.array = array
        self.config = config

    def tree_flatten(self):
        return (self.array,), self.config

    @classmethod
    def tree_unflatten(cls, config, children):
        return cls(children[0], config)

    def __repr__(self):
        return "DecodePlan(%s)" % (self.config,)


def _max_ctas(max_ctas, num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, q_dtype):
    # (the query validates the config: the workspace is sized from it next; an explicit max_ctas asks the CPU's)
    on_gpu = jax.default_backend() == "gpu" and max_ctas is None
    ctas = _decode.max_ctas_for(0 if on_gpu else None, num_kv_heads, num_q_heads, head_dim, q_len, page_size,
                                kv_dtype, q_dtype)
    return ctas if max_ctas is None else _decode.checked_max_ctas("decode_attention", max_ctas)


def _concrete_batch(op, seq_lens):
    """jax.export with a symbolic batch: the plan's and the workspace's sizes are functions of B that shape
    polymorphism cannot express -- refused by name (jax's own error names no argument)."""
    if len(seq_lens.shape) == 1 and not isinstance(seq_lens.shape[0], (int, np.integer)):
        raise ValueError("%s: the batch must be concrete (the plan and workspace sizes are functions of B that shape "
                         "polymorphism cannot express); got seq_lens %s: export one function per batch size"
                         % (op, tuple(seq_lens.shape)))


def decode_plan(seq_lens, *, num_kv_heads, num_q_heads, head_dim, page_size, q_len=1, kv_dtype=jnp.bfloat16,
                q_dtype=None, max_ctas=None):
    """Builds the load-balanced decode schedule for `seq_lens` [B] int32 (total KV length incl. new tokens).

    Args:
      num_kv_heads, num_q_heads, head_dim, page_size, q_len: the attention the plan is for. Supported: head_dim
        64, 128 or 256; page_size 16, 32 or 64; num_q_heads a multiple of num_kv_heads, at most 16 q heads per
        kv head; q_len 1-4.
      kv_dtype / q_dtype: the cache and query dtypes (they select the kernel, hence the grid size).
      max_ctas: persistent-grid size; default: SMs x resident CTAs from the occupancy API on the GPU. The default
        follows jax's default backend (under jit the plan's size is fixed before jax knows where the call runs):
        pass it when planning for another platform, e.g. a CPU computation on a machine with a GPU.
    Returns a DecodePlan to pass to decode_attention (valid for every layer of the step).
    """
    _args.array("decode_plan", "seq_lens", seq_lens)
    _concrete_batch("decode_plan", seq_lens)
    num_kv_heads, num_q_heads, head_dim, page_size, q_len, max_ctas = _decode.check_shape_args(
        "decode_plan", num_kv_heads, num_q_heads, head_dim, page_size, q_len, max_ctas)
    if seq_lens.ndim != 1:
        raise ValueError("decode_plan: seq_lens must be [B] int32; got shape %s" % (seq_lens.shape,))
    q_dtype = kv_dtype if q_dtype is None else q_dtype
    batch = int(seq_lens.shape[0])
    ctas = _max_ctas(max_ctas, num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, q_dtype)
    config = _decode.DecodeConfig(batch=batch, num_kv_heads=int(num_kv_heads), num_q_heads=int(num_q_heads),
                                  head_dim=int(head_dim), q_len=int(q_len), page_size=int(page_size),
                                  kv_dtype=_decode.canonical_dtype_name(kv_dtype), max_ctas=ctas)
    call = jax.ffi.ffi_call("hpc_xla_decode_plan", jax.ShapeDtypeStruct((config.plan_size,), jnp.int32),
                            vmap_method="sequential")
    array = call(seq_lens, num_kv_heads=np.int32(num_kv_heads), num_q_heads=np.int32(num_q_heads),
                 head_dim=np.int32(head_dim), q_len=np.int32(q_len), page_size=np.int32(page_size),
                 kv_dtype=np.int32(_decode.dtype_code("decode_plan", "kv_dtype", kv_dtype)), max_ctas=np.int32(ctas))
    return DecodePlan(array, config)


def decode_attention(q, k_cache, v_cache, block_table, seq_lens, plan=None, *, sm_scale=None, k_scale=None,
                     v_scale=None, q_scale=None, q_len=None, schedule="dynamic", max_ctas=None, out_dtype=None):
    """Attention of q_len new query tokens per sequence against the paged KV cache.

    Args:
      q: [B * q_len, Hq, D] bfloat16 / float16, or float8_e4m3fn with q_scale [B * q_len, Hq] float32.
      k_cache, v_cache: [num_blocks, page_size, Hkv, D], q's dtype or float8_e4m3fn (then k_scale, v_scale).
      block_table: [B, max_blocks] int32. seq_lens: [B] int32, total KV length INCLUDING the new tokens;
        query j of a sequence sees positions [0, seq_len - q_len + j]. Zero-length sequences give zeros.
      plan: from decode_plan; built here when None (schedule="dynamic"). It must come from these seq_lens: with
        other lengths the kernel still reads nothing outside the sequences, but its merges of split sequences
        assume the plan's lengths, so the results are unspecified. With either schedule its max_ctas is the
        call's (a different explicit max_ctas raises).
      schedule: "dynamic" (persistent, load-balanced) or "static" (fixed splits per sequence; the baseline).
      q_len: new tokens per sequence; default: the plan's, else q.shape[0] / B.
      out_dtype: with a float8_e4m3fn q, bfloat16 (default) or float16 -- the model's dtype; a 16-bit q gives its own.
    Returns out [B * q_len, Hq, D] in q's dtype (out_dtype for a float8_e4m3fn q).
    """
    _args.arrays("decode_attention", q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table,
                 seq_lens=seq_lens)
    _concrete_batch("decode_attention", seq_lens)
    q_len = _decode.check_attention_call(q, k_cache, seq_lens, plan, DecodePlan, q_len, schedule)
    out_dtype = jnp.dtype(_decode.out_dtype_name("decode_attention", q.dtype, out_dtype))
    batch = int(seq_lens.shape[0])
    num_q_heads, head_dim = int(q.shape[1]), int(q.shape[2])
    page_size, num_kv_heads = int(k_cache.shape[1]), int(k_cache.shape[2])
    # Results [B * q_len, Hq, D] and a workspace that scales with Hq: empty when one of these is 0, and XLA then
    # skips the call (csrc's checks with it).
    _args.nonempty_dims("decode_attention", **{"batch (seq_lens.shape[0])": batch, "num_q_heads (q.shape[1])":
                                               num_q_heads, "head_dim (q.shape[2])": head_dim})
    if schedule == "dynamic" and plan is None:
        _decode.check_cache_dtype_before_planning(k_cache)
        with _decode.planning_for_attention():
            plan = decode_plan(seq_lens, num_kv_heads=num_kv_heads, num_q_heads=num_q_heads, head_dim=head_dim,
                               page_size=page_size, q_len=q_len, kv_dtype=k_cache.dtype, q_dtype=q.dtype,
                               max_ctas=max_ctas)
    if plan is not None:  # either schedule: checked against the call, its max_ctas sizes the static splits too
        plan.config.check_call(batch, num_kv_heads, num_q_heads, head_dim, q_len, page_size, k_cache.dtype,
                               plan_ints=int(plan.array.shape[0]))
        ctas = _decode.planned_max_ctas(plan.config, max_ctas)
    else:
        with _decode.planning_for_attention():
            ctas = _max_ctas(max_ctas, num_kv_heads, num_q_heads, head_dim, q_len, page_size, k_cache.dtype, q.dtype)
    plan_array = plan.array if schedule == "dynamic" else _ffi.absent()
    workspace = _decode.DecodeConfig(batch, num_kv_heads, num_q_heads, head_dim, q_len, page_size,
                                     _decode.canonical_dtype_name(k_cache.dtype), ctas).workspace_size
    call = jax.ffi.ffi_call(
        "hpc_xla_decode_attention",
        (jax.ShapeDtypeStruct(q.shape, out_dtype), jax.ShapeDtypeStruct((workspace,), jnp.float32)),
        vmap_method="sequential")
    op = "decode_attention"
    out, _ = call(q, _ffi.optional(op, "q_scale", q_scale), k_cache, v_cache, block_table, seq_lens, plan_array,
                  _ffi.f32_scalar(op, "k_scale", k_scale), _ffi.f32_scalar(op, "v_scale", v_scale),
                  sm_scale=np.float32(_decode.default_sm_scale(head_dim, sm_scale)), q_len=np.int32(q_len),
                  schedule=np.int32(_decode.SCHEDULES[schedule]), max_ctas=np.int32(ctas))
    return out
