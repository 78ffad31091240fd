"""rope_norm and decode_attention for plain `jax.jit` with sharded operands (jax's custom_partitioning).

XLA cannot partition an opaque custom call by itself: under `jax.jit` with, say, a head-sharded KV cache it
all-gathers every operand (the cache included) and runs the call replicated. These wrappers tell the partitioner
what hpc_xla's ops can do: split over HEADS (tensor parallelism). Each device then runs the op on its own heads --
the same thing `jax.shard_map` does by hand (see README) -- and the cache stays sharded.

The head axis is the mesh axis that shards the cache's head dimension (k_cache.shape[2]), else q's (q.shape[1]);
it must divide both head counts. Every other dimension is replicated (XLA gathers a token- or block-sharded
operand first). When no usable head sharding is found, the op runs replicated, as without these wrappers.
decode_attention plans on each device for its own heads, so it takes no plan here (each call builds one: one small
kernel per call; pass a plan only under shard_map). Same arguments and results as hpc_xla.jax otherwise.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from hpc_xla.jax.attention import decode_attention as _decode_attention
from hpc_xla.jax.rope_norm import rope_norm as _rope_norm


def _scalar(x):
    """A per-tensor scale as a float32 scalar array (a custom_partitioning operand must be an array)."""
    return None if x is None else jnp.asarray(x, jnp.float32).reshape(())


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


def _head_parallel(run, operands, results, rule, q_arg, cache_arg):
    """custom_partitioning of `run` (arrays -> results): heads over the axis _head_axis finds from the cache
    (operand cache_arg, heads at dim 2) or q (operand q_arg, heads at dim 1); layouts are (rank, head dim)."""
    op = custom_partitioning(run)
    single = len(results) == 1  # a one-array result is not a tuple

    def axis_of(mesh, arg_shapes):
        q, k_cache = arg_shapes[q_arg], arg_shapes[cache_arg]
        return _head_axis(mesh, ((k_cache.sharding, 2), (q.sharding, 1)), (q.shape[1], k_cache.shape[2]))

    def result_specs(mesh, axis):
        specs = _specs(mesh, results, axis)
        return specs[0] if single else specs

    def infer(mesh, arg_shapes, result_shape):
        return result_specs(mesh, axis_of(mesh, arg_shapes))

    def partition(mesh, arg_shapes, result_shape):
        axis = axis_of(mesh, arg_shapes)
        return mesh, run, result_specs(mesh, axis), _specs(mesh, operands, axis)

    op.def_partition(partition=partition, infer_sharding_from_operands=infer, sharding_rule=rule)
    return op


def _given(optional, present):
    return tuple(entry for entry, given in zip(optional, present) if given)


# ------------------------------------------------------------------------------------------------ rope_norm
# operands: q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, then the optional ones given
# (q_norm_weight, k_norm_weight, k_scale, v_scale); results: q_out (+ q_scale), k_cache, v_cache
_ROPE_OPERANDS = ((3, 1), (3, 1), (3, 1), (1, None), (2, None), (1, None), (4, 2), (4, 2))
_ROPE_RULE = ("t hq d", "t hk d", "t hk d", "t", "m r", "t", "n p hk d", "n p hk d")
_ROPE_OPTIONAL = (("q_norm_weight", (1, None), "d"), ("k_norm_weight", (1, None), "d"), ("k_scale", (0, None), ""),
                  ("v_scale", (0, None), ""))


@functools.lru_cache(maxsize=None)
def _rope_norm_op(present, static):
    kwargs = dict(static)
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
    optional = (q_norm_weight, k_norm_weight, _scalar(k_scale), _scalar(v_scale))
    op = _rope_norm_op(tuple(x is not None for x in optional), tuple(sorted(options.items())))
    given = [x for x in optional if x is not None]
    return op(q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, *given)


# ------------------------------------------------------------------------------------------ decode_attention
# operands: q, k_cache, v_cache, block_table, seq_lens, then the optional ones given (q_scale, k_scale, v_scale)
_DECODE_OPERANDS = ((3, 1), (4, 2), (4, 2), (2, None), (1, None))
_DECODE_RULE = ("r hq d", "n p hk d", "n p hk d", "b m", "b")
_DECODE_OPTIONAL = (("q_scale", (2, 1), "r hq"), ("k_scale", (0, None), ""), ("v_scale", (0, None), ""))


@functools.lru_cache(maxsize=None)
def _decode_op(present, static):
    kwargs = dict(static)
    optional = _given(_DECODE_OPTIONAL, present)
    names = [name for name, _, _ in optional]

    def run(*arrays):
        return _decode_attention(*arrays[:5], **dict(zip(names, arrays[5:])), **kwargs)

    rule = ", ".join(_DECODE_RULE + tuple(r for _, _, r in optional)) + " -> r hq d"
    return _head_parallel(run, _DECODE_OPERANDS + tuple(layout for _, layout, _ in optional), ((3, 1),), rule, 0, 1)


def decode_attention(q, k_cache, v_cache, block_table, seq_lens, plan=None, *, q_scale=None, k_scale=None,
                     v_scale=None, **options):
    """hpc_xla.jax.decode_attention, partitioned over heads under jax.jit (see the module docstring). No plan:
    each device plans for its own heads."""
    if plan is not None:
        raise ValueError("hpc_xla.jax.partitioned.decode_attention: pass plan=None (each device plans its own heads; "
                         "a plan built for all heads would not match a device's share)")
    optional = (q_scale, _scalar(k_scale), _scalar(v_scale))
    op = _decode_op(tuple(x is not None for x in optional), tuple(sorted(options.items())))
    return op(q, k_cache, v_cache, block_table, seq_lens, *[x for x in optional if x is not None])
