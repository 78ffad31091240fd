"""rope_norm, decode_attention and fused_moe for plain `jax.jit` with sharded operands (jax's custom_partitioning).

XLA cannot partition an opaque custom call by itself: under `jax.jit` with, say, a head-sharded KV cache it
all-gathers every operand (the cache included) and runs the call replicated. These wrappers tell the partitioner
what hpc_xla's ops can do: rope_norm and decode_attention split over HEADS (tensor parallelism), fused_moe over
EXPERTS (expert parallelism, partial outputs summed over the axis; see fused_moe below). Each device then runs the op
on its own share -- the same thing `jax.shard_map` does by hand (see README) -- and the cache stays sharded.

The head axis is the mesh axis that shards the cache's head dimension (k_cache.shape[2]), else q's (q.shape[1]);
it must divide both head counts. Every other dimension is replicated (XLA gathers a token- or block-sharded
operand first). When no usable head sharding is found, the op runs replicated, as without these wrappers.
decode_attention's plan describes ONE device's share of the heads: build it with decode_plan below
(`head_shards` = the size of the mesh axis the heads are split over; the plan runs replicated and is reused by every
layer), or pass none and each call plans for itself (one small kernel per call). A plan for g kv heads also serves
calls with a multiple of g heads (unpartitioned, or split fewer ways), one group of g after another; other counts
are refused when the call is traced. Same arguments and results as hpc_xla.jax otherwise.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from hpc_xla import _args, _options
from hpc_xla.jax import _ffi
from hpc_xla.jax.attention import DecodePlan
from hpc_xla.jax.attention import decode_attention as _decode_attention
from hpc_xla.jax.attention import decode_plan as _decode_plan
from hpc_xla.jax.moe import fused_moe as _fused_moe
from hpc_xla.jax.moe import moe_route
from hpc_xla.jax.rope_norm import rope_norm as _rope_norm


def _scalar(op, name, x):
    """A per-tensor scale as a float32 scalar array (a custom_partitioning operand must be an array), checked as
    hpc_xla.jax checks it (one value, not a string)."""
    return None if x is None else _ffi.f32_scalar(op, name, x)


def _option_key(op, options):
    """The options (eps, sm_scale, ...) as a hashable cache key of (name, type, value): numpy / jax scalars
    (hpc_xla.jax takes them as well as Python numbers) become Python numbers; a traced one cannot be a static option.
    The type keeps 64 and 64.0, 1 and True apart: the op checks each call's own value (a cached op built for a
    refused 64.0 raised for every later 64)."""
    def static(name, value):
        if isinstance(value, (np.ndarray, np.generic, jax.Array)):
            if isinstance(value, jax.core.Tracer) or np.ndim(value) != 0:
                raise TypeError("%s: %s must be a static scalar (a Python or numpy number, not traced); got %r"
                                % (op, name, value))
            value = np.asarray(value).item()
        try:
            hash(value)
        except TypeError:
            raise TypeError("%s: %s must be a static value (a string, number, bool or dtype); got %s %r"
                            % (op, name, type(value).__name__, value)) from None
        return (name, type(value).__name__, value)
    return tuple(static(name, value) for name, value in sorted(options.items()))


def _options_of(static):
    return {name: value for name, _, value in static}


def _check_ranks(op, entries):
    """Each given operand's rank against its layout (name, array, (rank, sharded dim), rule letters): a wrong rank
    reached the sharding rule first and read "Sharding rule 3th operand has rank 2, ..." (an index into this
    module's operand list, not the user's arguments)."""
    for name, x, (rank, _), rule in entries:
        if x is not None and np.ndim(x) != rank:
            raise ValueError("%s: %s must be %d-D [%s]; got shape %s" % (op, name, rank, ", ".join(rule.split()),
                                                                        tuple(np.shape(x))))


def _spec_axis(sharding, dim):
    """The mesh axis (or axes) a NamedSharding puts on `dim`, or None."""
    if not isinstance(sharding, NamedSharding) or dim >= len(sharding.spec):
        return None
    return sharding.spec[dim]


def _axis_size(mesh, axis):
    names = axis if isinstance(axis, tuple) else (axis,)
    size = 1
    for name in names:
        size *= mesh.shape[name]
    return size


def _head_axis(mesh, candidates, head_counts):
    """The first candidate (sharding, dim) whose mesh axis divides every head count, or None (replicated)."""
    for sharding, dim in candidates:
        axis = _spec_axis(sharding, dim)
        if axis is not None and all(h % _axis_size(mesh, axis) == 0 for h in head_counts):
            return axis
    return None


def _specs(mesh, ranks_and_head_dims, axis):
    """NamedShardings: `axis` on each array's head dim (None: none), every other dim replicated."""
    out = []
    for rank, head_dim in ranks_and_head_dims:
        spec = [None] * rank
        if head_dim is not None and axis is not None:
            spec[head_dim] = axis
        out.append(NamedSharding(mesh, P(*spec)))
    return tuple(out)


def _partitioned(run, operands, results, rule, axis_of, lower_for=None):
    """custom_partitioning of `run` (arrays -> results) over the mesh axis axis_of(mesh, arg_shapes) picks (None:
    replicated): operands / results laid out as (rank, sharded dim or None), each device running lower_for(axis)
    (default: run itself on its share)."""
    op = custom_partitioning(run)
    single = len(results) == 1  # a one-array result is not a tuple

    def result_specs(mesh, axis):
        specs = _specs(mesh, results, axis)
        return specs[0] if single else specs

    def infer(mesh, arg_shapes, result_shape):
        return result_specs(mesh, axis_of(mesh, arg_shapes))

    def partition(mesh, arg_shapes, result_shape):
        axis = axis_of(mesh, arg_shapes)
        lower = run if axis is None or lower_for is None else lower_for(axis)
        return mesh, lower, result_specs(mesh, axis), _specs(mesh, operands, axis)

    op.def_partition(partition=partition, infer_sharding_from_operands=infer, sharding_rule=rule)
    return op


def _head_parallel(run, operands, results, rule, q_arg, cache_arg):
    """_partitioned over heads: the axis _head_axis finds from the cache (operand cache_arg, heads at dim 2) or q
    (operand q_arg, heads at dim 1)."""
    def axis_of(mesh, arg_shapes):
        q, k_cache = arg_shapes[q_arg], arg_shapes[cache_arg]
        return _head_axis(mesh, ((k_cache.sharding, 2), (q.sharding, 1)), (q.shape[1], k_cache.shape[2]))

    return _partitioned(run, operands, results, rule, axis_of)


def _given(optional, present):
    return tuple(entry for entry, given in zip(optional, present) if given)


# ------------------------------------------------------------------------------------------------ rope_norm
# operands: q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, then the optional ones given
# (q_norm_weight, k_norm_weight, k_scale, v_scale); results: q_out (+ q_scale), k_cache, v_cache
_ROPE_OPERANDS = ((3, 1), (3, 1), (3, 1), (1, None), (2, None), (1, None), (4, 2), (4, 2))
_ROPE_RULE = ("t hq d", "t hk d", "t hk d", "t", "m r", "t", "n p hk d", "n p hk d")
_ROPE_NAMES = ("q", "k", "v", "positions", "cos_sin_cache", "slot_mapping", "k_cache", "v_cache")
_ROPE_OPTIONAL = (("q_norm_weight", (1, None), "d"), ("k_norm_weight", (1, None), "d"), ("k_scale", (0, None), ""),
                  ("v_scale", (0, None), ""))


@functools.lru_cache(maxsize=None)
def _rope_norm_op(present, static):
    kwargs = _options_of(static)
    optional = _given(_ROPE_OPTIONAL, present)
    names = [name for name, _, _ in optional]
    quant = kwargs.get("q_quant") is not None

    def run(*arrays):
        return tuple(_rope_norm(*arrays[:8], **dict(zip(names, arrays[8:])), **kwargs))

    rule = ", ".join(_ROPE_RULE + tuple(r for _, _, r in optional))
    rule += " -> t hq d, " + ("t hq, " if quant else "") + "n p hk d, n p hk d"
    results = ((3, 1),) + (((2, 1),) if quant else ()) + ((4, 2), (4, 2))
    return _head_parallel(run, _ROPE_OPERANDS + tuple(layout for _, layout, _ in optional), results, rule, 0, 6)


def rope_norm(q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, *, q_norm_weight=None,
              k_norm_weight=None, k_scale=None, v_scale=None, **options):
    """hpc_xla.jax.rope_norm, partitioned over heads under jax.jit (see the module docstring)."""
    name = "hpc_xla.jax.partitioned.rope_norm"
    _check_ranks(name, zip(_ROPE_NAMES + ("q_norm_weight", "k_norm_weight"),
                           (q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, q_norm_weight,
                            k_norm_weight),
                           _ROPE_OPERANDS + tuple(layout for _, layout, _ in _ROPE_OPTIONAL[:2]),
                           _ROPE_RULE + tuple(rule for _, _, rule in _ROPE_OPTIONAL[:2])))
    optional = (q_norm_weight, k_norm_weight, _scalar(name, "k_scale", k_scale), _scalar(name, "v_scale", v_scale))
    op = _rope_norm_op(tuple(x is not None for x in optional), _option_key(name, options))
    given = [x for x in optional if x is not None]
    return op(q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, *given)


# ------------------------------------------------------------------------------------------ decode_attention
# operands: q, k_cache, v_cache, block_table, seq_lens, then the optional ones given (q_scale, k_scale, v_scale)
_DECODE_OPERANDS = ((3, 1), (4, 2), (4, 2), (2, None), (1, None))
_DECODE_RULE = ("r hq d", "n p hk d", "n p hk d", "b m", "b")
_DECODE_NAMES = ("q", "k_cache", "v_cache", "block_table", "seq_lens")
_DECODE_OPTIONAL = (("q_scale", (2, 1), "r hq"), ("k_scale", (0, None), ""), ("v_scale", (0, None), ""))


@functools.lru_cache(maxsize=None)
def _decode_op(present, with_plan, plan_config, static):
    kwargs = _options_of(static)
    optional = _given(_DECODE_OPTIONAL, present)
    names = [name for name, _, _ in optional]
    plan_operand = ((1, None),) if with_plan else ()

    def attend(q, k_cache, v_cache, table, lens, plan, opts):
        return _decode_attention(q, k_cache, v_cache, table, lens, plan, **opts, **kwargs)

    def run(*arrays):
        q, k_cache, v_cache, table, lens = arrays[:5]
        opts = dict(zip(names, arrays[6:] if with_plan else arrays[5:]))
        if not with_plan:
            return attend(q, k_cache, v_cache, table, lens, None, opts)
        plan = DecodePlan(arrays[5], plan_config)
        # A plan for g kv heads serves any multiple of g, group by group (the same schedule for every group): the
        # partitioned call has exactly g per device; the whole op (one device, or the shapes traced before
        # partitioning) runs its head groups one after another.
        g_kv, g_q = plan_config.num_kv_heads, plan_config.num_q_heads
        groups = k_cache.shape[2] // g_kv
        if k_cache.shape[2] % g_kv or q.shape[1] != groups * g_q:
            raise ValueError("hpc_xla.jax.partitioned.decode_attention: the plan is for %d kv / %d q heads per "
                             "device; this call has %d / %d, not a multiple" % (g_kv, g_q, k_cache.shape[2],
                                                                                 q.shape[1]))
        if groups == 1:
            return attend(q, k_cache, v_cache, table, lens, plan, opts)
        parts = []
        for i in range(groups):
            sub = dict(opts)
            if "q_scale" in sub:
                sub["q_scale"] = sub["q_scale"][:, i * g_q:(i + 1) * g_q]
            kv = slice(i * g_kv, (i + 1) * g_kv)
            parts.append(attend(q[:, i * g_q:(i + 1) * g_q], k_cache[:, :, kv], v_cache[:, :, kv], table, lens, plan,
                                sub))
        return jnp.concatenate(parts, axis=1)

    rule = ", ".join(_DECODE_RULE + (("s",) if with_plan else ()) + tuple(r for _, _, r in optional)) + " -> r hq d"
    operands = _DECODE_OPERANDS + plan_operand + tuple(layout for _, layout, _ in optional)
    return _head_parallel(run, operands, ((3, 1),), rule, 0, 1)


def decode_plan(seq_lens, *, num_kv_heads, num_q_heads, head_shards, **options):
    """hpc_xla.jax.decode_plan for ONE device's share of the heads when they are split `head_shards` ways (the
    size of the mesh axis that shards the cache's heads): build once per step, pass to every layer's
    decode_attention here. Same other arguments as hpc_xla.jax.decode_plan."""
    op = "hpc_xla.jax.partitioned.decode_plan"
    head_shards = _args.integer(op, "head_shards", head_shards, minimum=1)  # (numpy ints too; bools, floats refused)
    for name, heads in (("num_kv_heads", num_kv_heads), ("num_q_heads", num_q_heads)):
        heads = _args.integer(op, name, heads, minimum=1)
        if heads % head_shards:
            raise ValueError("%s: %s (%d) must split evenly into head_shards (%d)" % (op, name, heads, head_shards))
    return _decode_plan(seq_lens, num_kv_heads=num_kv_heads // head_shards, num_q_heads=num_q_heads // head_shards,
                        **options)


def decode_attention(q, k_cache, v_cache, block_table, seq_lens, plan=None, *, q_scale=None, k_scale=None,
                     v_scale=None, **options):
    """hpc_xla.jax.decode_attention, partitioned over heads under jax.jit (see the module docstring). plan: from
    decode_plan above (one device's share of the heads), or None (each call plans for itself)."""
    if plan is not None and not isinstance(plan, DecodePlan):
        raise TypeError("hpc_xla.jax.partitioned.decode_attention: plan must come from "
                        "hpc_xla.jax.partitioned.decode_plan (or None); got %s" % type(plan).__name__)
    name = "hpc_xla.jax.partitioned.decode_attention"
    _check_ranks(name, zip(_DECODE_NAMES + ("q_scale",), (q, k_cache, v_cache, block_table, seq_lens, q_scale),
                           _DECODE_OPERANDS + (_DECODE_OPTIONAL[0][1],), _DECODE_RULE + (_DECODE_OPTIONAL[0][2],)))
    optional = (q_scale, _scalar(name, "k_scale", k_scale), _scalar(name, "v_scale", v_scale))
    op = _decode_op(tuple(x is not None for x in optional), plan is not None, None if plan is None else plan.config,
                    _option_key(name, options))
    given = ([plan.array] if plan is not None else []) + [x for x in optional if x is not None]
    return op(q, k_cache, v_cache, block_table, seq_lens, *given)


# ------------------------------------------------------------------------------------------------- fused_moe
# operands: x, w13, w2, topk_weights, topk_ids, then the optional ones given (x_scale, w13_scale, w2_scale,
# a13_scale, a2_scale, shared_output). Layouts: (rank, expert-sharded dim or None).
_MOE_OPERANDS = ((2, None), (3, 0), (3, 0), (2, None), (2, None))
_MOE_RULE = ("t h", "e n h", "e h i", "t k", "t k")
_MOE_NAMES = ("x_scale", "w13_scale", "w2_scale", "a13_scale", "a2_scale", "shared_output")


def _moe_optional_layouts(quant):
    block = quant == "fp8_block128"
    return {"x_scale": ((2, None), "t hb"), "w13_scale": ((3, 0), "e nb hb") if block else ((1, 0), "e"),
            "w2_scale": ((3, 0), "e hb ib") if block else ((1, 0), "e"), "a13_scale": ((0, None), ""),
            "a2_scale": ((0, None), ""), "shared_output": ((2, None), "t h")}


@functools.lru_cache(maxsize=None)
def _moe_op(present, static):
    kwargs = _options_of(static)
    names = [n for n, given in zip(_MOE_NAMES, present) if given]
    layouts = _moe_optional_layouts(kwargs.get("quant"))
    offset, experts_global = kwargs.pop("expert_offset"), kwargs.pop("num_experts_global")

    def run(*arrays):
        opts = dict(zip(names, arrays[5:]))
        return _fused_moe(*arrays[:5], expert_offset=offset, num_experts_global=experts_global, **opts, **kwargs)

    def run_ep(axis):
        def lower(*arrays):  # this device's experts; the partial outputs summed over the axis, then shared added
            opts = dict(zip(names, arrays[5:]))
            shared = opts.pop("shared_output", None)
            local = arrays[1].shape[0]
            y = _fused_moe(*arrays[:5], expert_offset=offset + jax.lax.axis_index(axis) * local,
                           num_experts_global=experts_global, **opts, **kwargs)
            y = jax.lax.psum(y.astype(jnp.float32), axis)
            return (y if shared is None else y + shared.astype(jnp.float32)).astype(jnp.bfloat16)
        return lower

    def axis_of(mesh, arg_shapes):  # one mesh axis name (axis_index takes one) that divides the experts
        w13 = arg_shapes[1]
        axis = _spec_axis(w13.sharding, 0)
        return axis if isinstance(axis, str) and w13.shape[0] % mesh.shape[axis] == 0 else None

    rule = ", ".join(_MOE_RULE + tuple(layouts[n][1] for n in names)) + " -> t h"
    operands = _MOE_OPERANDS + tuple(layouts[n][0] for n in names)
    return _partitioned(run, operands, ((2, None),), rule, axis_of, run_ep)  # the output: replicated


def fused_moe(x, w13, w2, topk_weights=None, topk_ids=None, *, quant=None, x_scale=None, w13_scale=None,
              w2_scale=None, a13_scale=None, a2_scale=None, shared_output=None, expert_offset=0,
              num_experts_global=None, w13_interleaved=False, activation="silu", router_logits=None, **route_kwargs):
    """hpc_xla.jax.fused_moe, partitioned over EXPERTS under jax.jit: when w13 / w2 (and their scales) are sharded
    on their expert dim, every device runs its experts (offset = its index on that axis x E_local) and the partial
    outputs are summed over the axis (in float32, then bfloat16: not bitwise the one-device op). Tokens, routing and
    shared_output are replicated; routing (router_logits) runs before, replicated. Same arguments otherwise; an
    integer expert_offset adds to the device's (experts held above this level). w13_interleaved: as in
    hpc_xla.jax.fused_moe (interleave_w13 works per expert, so an expert-sharded interleaved w13 is each device's
    experts interleaved)."""
    if isinstance(expert_offset, (bool, np.bool_)) or not isinstance(expert_offset, (int, np.integer)):
        raise ValueError("hpc_xla.jax.partitioned.fused_moe: expert_offset must be an int (the device's share is "
                         "added here); got %r" % (expert_offset,))
    expert_offset = int(expert_offset)
    w13_interleaved = _options.w13_interleaved_flag(w13_interleaved, quant, w13.shape)  # refused before routing runs
    name = "hpc_xla.jax.partitioned.fused_moe"
    num_experts_global = _args.optional_integer(name, "num_experts_global", num_experts_global, minimum=1)
    if _options.routing_inputs(topk_weights, topk_ids, router_logits, route_kwargs):  # hpc_xla.jax.fused_moe's rule
        _args.arrays(name, router_logits=router_logits)
        # (w13 here is every device's experts: its shape[0] is the whole layer's)
        _options.check_router_experts(name, router_logits, num_experts_global, w13.shape[0], expert_offset)
        top_k = route_kwargs.pop("top_k")
        with _args.speaking_as("moe_route", name):  # (the caller's words, as hpc_xla.jax.fused_moe)
            topk_weights, topk_ids = moe_route(router_logits, top_k, **route_kwargs)
    layouts = _moe_optional_layouts(quant if isinstance(quant, str) else None)
    given = (("x_scale", x_scale), ("w13_scale", w13_scale), ("w2_scale", w2_scale), ("shared_output", shared_output))
    _check_ranks(name, [(n, a, layout, rule) for n, a, layout, rule in
                        zip(("x", "w13", "w2", "topk_weights", "topk_ids"), (x, w13, w2, topk_weights, topk_ids),
                            _MOE_OPERANDS, _MOE_RULE)] +
                 [(n, a) + layouts[n] for n, a in given])
    # Expert-sharded, shared_output is added after the psum, outside the op that checks it (a [1, H] one was
    # broadcast to every token): checked here as the op would.
    if shared_output is not None and (tuple(shared_output.shape) != tuple(x.shape) or
                                      shared_output.dtype != jnp.bfloat16):
        raise ValueError("%s: shared_output must be bfloat16 [T, H] = %s (x's shape); got %s %s"
                         % (name, list(x.shape), shared_output.dtype, list(shared_output.shape)))
    experts_global = num_experts_global if num_experts_global is not None else int(w13.shape[0]) + expert_offset
    optional = (x_scale, w13_scale, w2_scale, _scalar(name, "a13_scale", a13_scale),
                _scalar(name, "a2_scale", a2_scale), shared_output)
    static = dict(quant=quant, activation=activation, expert_offset=expert_offset, num_experts_global=experts_global,
                  w13_interleaved=w13_interleaved)
    op = _moe_op(tuple(x is not None for x in optional), _option_key(name, static))
    return op(x, w13, w2, topk_weights, topk_ids, *[x for x in optional if x is not None])
