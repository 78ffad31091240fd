"""MoE ops for JAX (DESIGN.md API items 4 and 5). moe_route: router logits -> (topk_weights, topk_ids)."""

import jax
import jax.numpy as jnp
import numpy as np

from hpc_xla import _args, _options
from hpc_xla._ext import ext
from hpc_xla.jax import _ffi


def moe_route(router_logits, top_k, *, scoring="softmax", renormalize=True, num_groups=None, topk_groups=None,
              correction_bias=None, routed_scaling=1.0):
    """Top-k expert routing.

    Args:
      router_logits: [T, E] float32 / bfloat16 / float16.
      scoring: "softmax" (over all experts) or "sigmoid" (per expert).
      correction_bias: optional [E], added to the scores for SELECTION only (DeepSeek-V3).
      num_groups / topk_groups: grouped top-k: experts in num_groups equal groups, only the topk_groups best
        groups (sum of their two best scores with a bias, else their best score) are eligible.
      renormalize: divide the k weights by their sum; routed_scaling multiplies them afterwards.
    Returns (topk_weights [T, k] float32, topk_ids [T, k] int32), best expert first; ties -> lower index.
    """
    _args.array("moe_route", "router_logits", router_logits)
    top_k, scoring, groups, kept, routed_scaling = _options.route_options(router_logits, top_k, scoring, num_groups,
                                                                          topk_groups, routed_scaling)
    tokens = router_logits.shape[0]
    call = jax.ffi.ffi_call("hpc_xla_moe_route",
                            (jax.ShapeDtypeStruct((tokens, top_k), jnp.float32),
                             jax.ShapeDtypeStruct((tokens, top_k), jnp.int32)),
                            vmap_method="sequential")
    return tuple(call(router_logits, _ffi.optional("moe_route", "correction_bias", correction_bias),
                      top_k=np.int32(top_k),
                      scoring=np.int32(scoring), renormalize=_args.boolean("moe_route", "renormalize", renormalize),
                      num_groups=np.int32(groups), topk_groups=np.int32(kept),
                      routed_scaling=np.float32(routed_scaling)))


def fused_moe(x, w13, w2, topk_weights=None, topk_ids=None, *, quant=None, w13_scale=None, w2_scale=None,
              a13_scale=None, a2_scale=None, x_scale=None, expert_offset=0, num_experts_global=None,
              w13_interleaved=False, activation="silu", shared_output=None, router_logits=None, **route_kwargs):
    """One MoE layer: y[t] = sum_j w[t,j] * W2_e(silu(W1g_e x) * (W1u_e x)) over the local experts
    (expert_offset <= id < expert_offset + E; other ids contribute 0, negative ones too -- vLLM's -1 for an expert of
    another rank or a padded slot), + shared_output; bfloat16 [T, H].

    Args:
      x: [T, H] bfloat16 (quantized inside), or float8_e4m3fn already quantized (fp8_tensor: with a13_scale;
        fp8_block128: with x_scale [T, H/128]).
      w13: [E, 2I, H] (rows [:I] gate, [I:] up), w2: [E, H, I] — vLLM's layout; bfloat16 (quant=None) or
        float8_e4m3fn. fp8_tensor: w13_scale/w2_scale [E], a13_scale/a2_scale float32 scalars.
        fp8_block128: w13_scale [E, 2I/128, H/128], w2_scale [E, H/128, I/128].
      topk_weights [T, k] float32 / topk_ids [T, k] int32, or router_logits [T, E_global] plus moe_route's
        keywords (top_k, scoring, renormalize, num_groups, topk_groups, correction_bias, routed_scaling): fused
        routing, one custom call whose first stage is moe_route's kernel (the same routing, bit for bit). (A traced
        expert_offset calls moe_route first instead: the offset is folded into its ids.)
      expert_offset, num_experts_global: expert parallelism -- this rank holds experts [expert_offset,
        expert_offset + E) of num_experts_global (ids must be below it; None: E + expert_offset). Pass the global
        count under EP: the CUDA grouped GEMMs size their tiles by the expected local rows per expert,
        T*k / num_experts_global (64-row tiles for fp8 up to 64 rows), which the local shapes overstate E_global/E
        times. expert_offset may also be a traced int scalar, as under shard_map, where every rank runs the same
        program: `expert_offset=jax.lax.axis_index("ep") * E` (then num_experts_global is required).
      w13_interleaved: w13's gate and up rows come interleaved in blocks of 64 -- rows [128q, 128q + 64) = gate rows
        [64q, 64q + 64), rows [128q + 64, 128q + 128) = the matching up rows -- the layout
        `hpc_xla.moe_layout.interleave_w13(w13)` makes once, at weight loading. Same result as the plain layout
        (bitwise on the CPU path); on CUDA it lets the grouped path compute silu(gate) * up in its gate-up GEMM's
        epilogue. quant None or fp8_tensor (w13_scale [E] unchanged; not fp8_block128), I a multiple of 64.
    """
    _args.arrays("fused_moe", x=x, w13=w13, w2=w2)
    # ranks before any shape is read here (the workspace size): csrc's words for what it would say itself
    for name, arr, rank, layout in (("x", x, 2, "[T, H]"), ("w13", w13, 3, "[E, 2I, H]"), ("w2", w2, 3, "[E, H, I]")):
        if arr.ndim != rank:
            raise ValueError("fused_moe: %s must be a %d-D array %s; got shape %s" % (name, rank, layout,
                                                                                  list(arr.shape)))
    _args.nonempty_dims("fused_moe", **{"H (x.shape[-1])": x.shape[-1] if x.ndim else 0})
    _options.check_activation(activation)
    w13_interleaved = _options.w13_interleaved_flag(w13_interleaved, quant, w13.shape)
    num_experts_global = _args.optional_integer("fused_moe", "num_experts_global", num_experts_global, minimum=1)
    routed = _options.routing_inputs(topk_weights, topk_ids, router_logits, route_kwargs)
    if routed:
        _args.arrays("fused_moe", router_logits=router_logits)
        _options.check_router_experts("fused_moe", router_logits, num_experts_global, w13.shape[0], expert_offset,
                                      tokens=x.shape[0])
        top_k = route_kwargs.pop("top_k")
        if not _is_static_int(expert_offset):  # a traced offset is folded into the ids: route first, then the layer
            with _args.speaking_as("moe_route", "fused_moe"):  # (the caller's words: fused_moe's top_k, scoring, ...)
                topk_weights, topk_ids = moe_route(router_logits, top_k, **route_kwargs)
            routed = False
    if not routed:
        _args.arrays("fused_moe", topk_weights=topk_weights, topk_ids=topk_ids)
        expert_offset, topk_ids, traced_offset = _static_expert_offset(expert_offset, num_experts_global,
                                                                       w13.shape[0], topk_ids)
        top_k = topk_ids.shape[-1]
    else:
        expert_offset = _args.integer("fused_moe", "expert_offset", expert_offset, minimum=0)
        top_k, scoring, renormalize, groups, kept, routed_scaling = _options.fused_route_options(router_logits, top_k,
                                                                                                 route_kwargs)
    # The CUDA pipeline's scratch is an extra result (XLA allocates it; handlers never allocate); dropped here.
    # The CPU handler ignores it (its size is the CUDA one: shapes must not depend on the platform).
    # Sized for exactly this call's T (the size for "any T up to a max" can be larger: fused_moe_workspace_size).
    if not all(isinstance(d, (int, np.integer)) for d in (*x.shape, top_k, *w13.shape)):
        # jax.export with a symbolic token count: the workspace (an output shape) is a non-affine function of T
        raise ValueError("fused_moe: the shapes must be concrete (the CUDA workspace size is a function of T that "
                         "shape polymorphism cannot express); got x %s, top_k %s: export one function per T"
                         % (tuple(x.shape), top_k))
    workspace = ext().fused_moe_call_workspace_size(x.shape[0], top_k, w13.shape[0], x.shape[-1],
                                                    w13.shape[1] // 2, _options.moe_quant_code(quant),
                                                    num_experts_global or 0, w13_interleaved)
    op = "fused_moe"
    layer = (x, _ffi.optional(op, "x_scale", x_scale), w13, w2, _ffi.optional(op, "w13_scale", w13_scale),
             _ffi.optional(op, "w2_scale", w2_scale), _ffi.f32_scalar(op, "a13_scale", a13_scale),
             _ffi.f32_scalar(op, "a2_scale", a2_scale))
    attrs = dict(quant=np.int32(_options.moe_quant_code(quant)), expert_offset=np.int64(expert_offset),
                 num_experts_global=np.int64(num_experts_global or 0), w13_interleaved=w13_interleaved)
    out_shape = jax.ShapeDtypeStruct(x.shape, jnp.bfloat16)
    scratch = jax.ShapeDtypeStruct((workspace,), jnp.uint8)
    if routed:
        # fused routing: one call; its routing (topk_weights, topk_ids) comes back as results, dropped here
        pairs = (jax.ShapeDtypeStruct((x.shape[0], top_k), jnp.float32),
                 jax.ShapeDtypeStruct((x.shape[0], top_k), jnp.int32))
        call = jax.ffi.ffi_call("hpc_xla_fused_moe_routed", (out_shape, *pairs, scratch), vmap_method="sequential")
        out = call(*layer, router_logits, _ffi.optional(op, "correction_bias", route_kwargs.get("correction_bias")),
                   _ffi.optional(op, "shared_output", shared_output), **attrs, scoring=np.int32(scoring),
                   renormalize=renormalize, num_groups=np.int32(groups), topk_groups=np.int32(kept),
                   routed_scaling=np.float32(routed_scaling))[0]
        return out
    call = jax.ffi.ffi_call("hpc_xla_fused_moe", (out_shape, scratch), vmap_method="sequential")
    out, _ = call(*layer, topk_weights, topk_ids, _ffi.optional(op, "shared_output", shared_output),
                  _ffi.absent() if traced_offset is None else traced_offset, **attrs)
    return out


def _is_static_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _static_expert_offset(expert_offset, num_experts_global, experts, topk_ids):
    """(static offset, ids, traced offset or None) for the binary, whose expert_offset is a compile-time attribute.

    A traced offset (shard_map: one program for every rank) is folded into the ids instead: local ids become
    id - offset, other valid ids become E -- a valid id that is not local under offset 0, since E < E_global
    whenever some valid id is not local -- and invalid ids (< 0 or >= E_global) pass unchanged, so the op's own
    id checks still report them. Same local rows per expert, so the kernels take the same paths as with a static offset.
    The offset itself goes to the binary as an operand that it checks (0 <= offset <= E_global - E; on the GPU under
    HPC_XLA_CHECK): a wrong one (axis_index * E_global instead of * E) otherwise gives zeros or other experts' results.
    """
    if _is_static_int(expert_offset):
        return _args.integer("fused_moe", "expert_offset", expert_offset, minimum=0), topk_ids, None
    if not isinstance(expert_offset, (jax.Array, np.ndarray)) or jnp.ndim(expert_offset) != 0 or \
            not jnp.issubdtype(jnp.result_type(expert_offset), jnp.integer):
        raise ValueError("fused_moe: expert_offset must be an int or an integer scalar array (e.g. "
                         "jax.lax.axis_index(axis) * E); got %r" % (expert_offset,))
    if num_experts_global is None:
        raise ValueError("fused_moe: a traced expert_offset needs num_experts_global (the routing's expert count)")
    ids = jnp.asarray(topk_ids)
    given = jnp.asarray(expert_offset)
    offset = given.astype(ids.dtype)
    # ids < 0 stay "no expert" whatever the offset (a negative offset must not turn -1 into a local expert)
    local = (ids >= 0) & (ids >= offset) & (ids < offset + experts)
    valid = (ids >= 0) & (ids < num_experts_global)
    # an offset past int32 (an int64 one under x64) reaches the check as INT32_MIN, not wrapped into range
    i32 = np.iinfo(np.int32)
    checked = jnp.where((given >= i32.min) & (given <= i32.max), given, i32.min).astype(jnp.int32).reshape((1,))
    return 0, jnp.where(local, ids - offset, jnp.where(valid, experts, ids)).astype(ids.dtype), checked
