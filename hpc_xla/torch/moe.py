"""MoE ops for torch (DESIGN.md API items 4 and 5). moe_route: router logits -> (topk_weights, topk_ids)."""

import torch

from hpc_xla import _options
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
    _route_impl, _fake)


def moe_route(router_logits, top_k, *, scoring="softmax", renormalize=True, num_groups=None, topk_groups=None,
              correction_bias=None, routed_scaling=1.0, out=None):
    """Top-k expert routing (see hpc_xla.jax.moe_route). `out`: optional preallocated (weights, ids).
    Returns (topk_weights [T, k] float32, topk_ids [T, k] int32)."""
    groups, kept = _options.groups_or_default(num_groups, topk_groups)
    if out is None:
        tokens = router_logits.shape[0]
        out = (torch.empty(tokens, top_k, dtype=torch.float32, device=router_logits.device),
               torch.empty(tokens, top_k, dtype=torch.int32, device=router_logits.device))
    moe_route_op(router_logits, correction_bias, out[0], out[1], int(top_k), _options.scoring_code(scoring),
                 bool(renormalize), groups, kept, float(routed_scaling))
    return out
