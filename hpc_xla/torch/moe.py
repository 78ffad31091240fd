"""MoE ops for torch (DESIGN.md API items 4 and 5). moe_route: router logits -> (topk_weights, topk_ids)."""

import torch

from hpc_xla import _args, _options
from hpc_xla._ext import ext
from hpc_xla.torch._library import define


def _route_impl(router_logits, correction_bias, topk_weights, topk_ids, top_k, scoring, renormalize, num_groups,
                topk_groups, routed_scaling):
    ext().moe_route(router_logits, correction_bias, topk_weights, topk_ids, top_k, scoring, renormalize, num_groups,
                    topk_groups, routed_scaling)


def _fake(*args):
    return None


moe_route_op = define(
    "moe_route(Tensor router_logits, Tensor? correction_bias, Tensor(a!) topk_weights, Tensor(b!) topk_ids, "
    "int top_k, int scoring, bool renormalize, int num_groups, int topk_groups, float routed_scaling) -> ()",
    _route_impl, _fake, user_names=dict(topk_weights="out[0]", topk_ids="out[1]"))


def moe_route(router_logits, top_k, *, scoring="softmax", renormalize=True, num_groups=None, topk_groups=None,
              correction_bias=None, routed_scaling=1.0, out=None):
    """Top-k expert routing (see hpc_xla.jax.moe_route). `out`: optional preallocated (weights, ids).
    Returns (topk_weights [T, k] float32, topk_ids [T, k] int32)."""
    _args.tensor("moe_route", "router_logits", router_logits)
    _args.optional_tensors("moe_route", correction_bias=correction_bias)
    top_k, scoring, groups, kept, routed_scaling = _options.route_options(router_logits, top_k, scoring, num_groups,
                                                                          topk_groups, routed_scaling)
    renormalize = _args.boolean("moe_route", "renormalize", renormalize)
    if out is not None:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError("moe_route: out must be a pair (topk_weights [T, top_k] float32, topk_ids [T, top_k] "
                            "int32); got %s" % ("%d items" % len(out) if isinstance(out, (tuple, list))
                                                else type(out).__name__))
        _args.tensors("moe_route", **{"out[0]": out[0], "out[1]": out[1]})
        shape = (router_logits.shape[0], top_k)  # by this face's names (csrc's are topk_weights / topk_ids)
        for i, dtype in ((0, torch.float32), (1, torch.int32)):
            if out[i].dtype != dtype or tuple(out[i].shape) != tuple(shape):
                raise ValueError("moe_route: out[%d] must be %s %s ([T, top_k]); got %s %s"
                                 % (i, dtype, list(shape), out[i].dtype, list(out[i].shape)))
    else:
        tokens = router_logits.shape[0]
        out = (torch.empty(tokens, top_k, dtype=torch.float32, device=router_logits.device),
               torch.empty(tokens, top_k, dtype=torch.int32, device=router_logits.device))
    try:
        moe_route_op(router_logits, correction_bias, out[0], out[1], top_k, scoring, renormalize, groups, kept,
                     routed_scaling)
    except ValueError as e:  # csrc's stride / overlap errors about the out pair, by its names here
        raise _args.renamed(e, moe_route_op.user_names) from None
    return out


def _fused_impl(x, x_scale, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale, topk_weights, topk_ids, shared_output,
                out, workspace, quant, expert_offset, num_experts_global, w13_interleaved):
    ext().fused_moe(x, x_scale, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale, topk_weights, topk_ids,
                    shared_output, out, workspace, quant, expert_offset, num_experts_global, w13_interleaved)


fused_moe_op = define(
    "fused_moe(Tensor x, Tensor? x_scale, Tensor w13, Tensor w2, Tensor? w13_scale, Tensor? w2_scale, "
    "Tensor? a13_scale, Tensor? a2_scale, Tensor topk_weights, Tensor topk_ids, Tensor? shared_output, "
    "Tensor(a!) out, Tensor(b!) workspace, int quant, int expert_offset, int num_experts_global, "
    "bool w13_interleaved) -> ()",
    _fused_impl, _fake)


def _fused_routed_impl(x, x_scale, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale, router_logits, correction_bias,
                       topk_weights, topk_ids, shared_output, out, workspace, quant, expert_offset, num_experts_global,
                       w13_interleaved, scoring, renormalize, num_groups, topk_groups, routed_scaling):
    ext().fused_moe_routed(x, x_scale, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale, router_logits,
                           correction_bias, topk_weights, topk_ids, shared_output, out, workspace, quant, expert_offset,
                           num_experts_global, w13_interleaved, scoring, renormalize, num_groups, topk_groups,
                           routed_scaling)


# Fused routing: router_logits routed by the op's first stage (moe_route's kernel), its topk_weights / topk_ids written.
fused_moe_routed_op = define(
    "fused_moe_routed(Tensor x, Tensor? x_scale, Tensor w13, Tensor w2, Tensor? w13_scale, Tensor? w2_scale, "
    "Tensor? a13_scale, Tensor? a2_scale, Tensor router_logits, Tensor? correction_bias, Tensor(a!) topk_weights, "
    "Tensor(b!) topk_ids, Tensor? shared_output, Tensor(c!) out, Tensor(d!) workspace, int quant, int expert_offset, "
    "int num_experts_global, bool w13_interleaved, int scoring, bool renormalize, int num_groups, int topk_groups, "
    "float routed_scaling) -> ()",
    _fused_routed_impl, _fake)


def fused_moe_workspace_size(tokens, top_k, num_experts, hidden, inter, quant=None, *, num_experts_global=None,
                             w13_interleaved=False):
    """Bytes of a uint8 workspace that serves every CUDA fused_moe call of at most `tokens` tokens: a pure function
    of the shapes (num_experts = the LOCAL experts, w13.shape[0]; inter = I) and of the calls' num_experts_global
    and w13_interleaved (an interleaved w13 lets the large-batch path compute the activation inside its gate-up GEMM
    and skip a T*k x 2I bf16 buffer: pass what the calls pass; the defaults give the larger size, which serves either).
    Allocate it once for the largest T you will run and pass it as `workspace=`, e.g. inside a CUDA graph. (One
    call's own need is not monotone in T -- it drops where the pipeline changes path -- so this is the maximum over
    T' <= tokens.)"""
    op = "fused_moe_workspace_size"
    big = 2**62  # (the binary takes int64; 2^63 read nanobind's "incompatible function arguments")
    experts_global = _args.optional_integer(op, "num_experts_global", num_experts_global, minimum=1, maximum=big) or 0
    sizes = (_args.integer(op, "tokens", tokens, minimum=0, maximum=big),
             _args.integer(op, "top_k", top_k, minimum=1, maximum=big),
             _args.integer(op, "num_experts", num_experts, minimum=1, maximum=big),
             _args.integer(op, "hidden", hidden, minimum=1, maximum=big),
             _args.integer(op, "inter", inter, minimum=1, maximum=big))
    try:  # the rules are fused_moe's, worded for its tensors: said here with this function's arguments
        return _workspace_bytes(*sizes, _options.moe_quant_code(quant), experts_global,
                                _options.w13_interleaved_flag(w13_interleaved, quant, (num_experts, 2 * inter, hidden)))
    except (TypeError, ValueError) as e:
        raise _args.renamed(_args.as_op(e, "fused_moe", op), _WORKSPACE_SIZE_NAMES) from None


# fused_moe's words for the shapes -> fused_moe_workspace_size's arguments
_WORKSPACE_SIZE_NAMES = {"H (x.shape[1])": "hidden", "I (w13.shape[1] / 2)": "inter", "(w13.shape[0])": "(num_experts)"}


# Sizes from the binary's path rules: constants of the shapes, which torch.compile folds (a call into the extension
# while dynamo traces would otherwise break the graph).
@torch.compiler.assume_constant_result
def _workspace_bytes(tokens, top_k, num_experts, hidden, inter, quant_code, experts_global, w13_interleaved):
    return int(ext().fused_moe_workspace_size(tokens, top_k, num_experts, hidden, inter, quant_code, experts_global,
                                              w13_interleaved))


@torch.compiler.assume_constant_result
def _call_workspace_bytes(tokens, top_k, num_experts, hidden, inter, quant_code, experts_global, w13_interleaved):
    return int(ext().fused_moe_call_workspace_size(tokens, top_k, num_experts, hidden, inter, quant_code,
                                                   experts_global, w13_interleaved))


def fused_moe(x, w13, w2, topk_weights=None, topk_ids=None, *, quant=None, w13_scale=None, w2_scale=None,
              a13_scale=None, a2_scale=None, x_scale=None, expert_offset=0, num_experts_global=None,
              w13_interleaved=False, activation="silu", shared_output=None, router_logits=None, out=None,
              workspace=None, **route_kwargs):
    """One MoE layer (see hpc_xla.jax.fused_moe). `out`: optional preallocated [T, H] bfloat16. `workspace`:
    optional uint8 scratch of >= fused_moe_workspace_size(...) bytes for CUDA tensors (else allocated here
    with torch.empty on x's device: the caching allocator, fine under CUDA-graph capture); unused on CPU.
    `w13_interleaved=True`: w13 holds gate / up rows interleaved in blocks of 64, as
    `hpc_xla.moe_layout.interleave_w13(w13)` makes them once at weight loading (quant None or fp8_tensor).
    `a13_scale` / `a2_scale` (fp8_tensor): one-element float32 tensors, or numbers (made into 0-d tensors on x's
    device; a captured CUDA graph keeps their values)."""
    _args.tensors("fused_moe", x=x, w13=w13, w2=w2)
    a13_scale, a2_scale = _args.scale_tensors("fused_moe", x.device, a13_scale=a13_scale, a2_scale=a2_scale).values()
    _args.optional_tensors("fused_moe", w13_scale=w13_scale, w2_scale=w2_scale, a13_scale=a13_scale,
                           a2_scale=a2_scale, x_scale=x_scale, shared_output=shared_output, out=out,
                           workspace=workspace)
    _options.check_activation(activation)
    w13_interleaved = _options.w13_interleaved_flag(w13_interleaved, quant, w13.shape)
    expert_offset, num_experts_global = _options.expert_counts(expert_offset, num_experts_global)
    routing = None
    if _options.routing_inputs(topk_weights, topk_ids, router_logits, route_kwargs):
        _args.tensor("fused_moe", "router_logits", router_logits)
        _options.check_router_experts("fused_moe", router_logits, num_experts_global or None, w13.shape[0],
                                      expert_offset, tokens=x.shape[0] if x.dim() == 2 else None)
        bias = route_kwargs.get("correction_bias")
        _args.optional_tensors("fused_moe", correction_bias=bias)
        top_k, *route_options = _options.fused_route_options(router_logits, route_kwargs["top_k"], route_kwargs)
        routing = (router_logits, bias, *route_options)
        # the op writes the routing here (its first stage is moe_route's kernel)
        tokens = router_logits.shape[0]
        topk_weights = torch.empty(tokens, top_k, dtype=torch.float32, device=router_logits.device)
        topk_ids = torch.empty(tokens, top_k, dtype=torch.int32, device=router_logits.device)
    _args.tensors("fused_moe", topk_weights=topk_weights, topk_ids=topk_ids)
    if out is None:
        out = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    if workspace is None:
        size = 0
        if x.device.type == "cuda":  # exactly this call's need
            if isinstance(x.shape[0], torch.SymInt):
                raise ValueError("fused_moe: with a dynamic token count (torch.compile) pass workspace= sized by "
                                 "fused_moe_workspace_size(max_tokens, ...): this call's own size depends on T")
            size = _call_workspace_bytes(x.shape[0], topk_ids.shape[-1], w13.shape[0], x.shape[-1], w13.shape[1] // 2,
                                         _options.moe_quant_code(quant), num_experts_global, w13_interleaved)
        workspace = torch.empty(size, dtype=torch.uint8, device=x.device)
    layer = (x, x_scale, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale)
    options = (_options.moe_quant_code(quant), expert_offset, num_experts_global, w13_interleaved)
    if routing is None:
        fused_moe_op(*layer, topk_weights, topk_ids, shared_output, out, workspace, *options)
    else:
        logits, bias, *route_options = routing
        fused_moe_routed_op(*layer, logits, bias, topk_weights, topk_ids, shared_output, out, workspace, *options,
                            *route_options)
    return out
