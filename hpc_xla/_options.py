"""Python-level options shared by the jax and torch faces (string choices -> what the binary takes)."""

import numpy as np

from hpc_xla import _args
from hpc_xla.moe_layout import ACT_EPILOGUE_BLOCK

ROPE_STYLES = {"neox": 0, "gptj": 1}
Q_QUANT = (None, "fp8")


def is_choice(value, choices):
    """value is one of `choices` (strings / None): an unhashable value (a list) is not, instead of a TypeError from
    the dict lookup."""
    return (value is None or isinstance(value, str)) and value in choices


def rope_style_code(rope_style):
    if not is_choice(rope_style, ROPE_STYLES):
        raise ValueError("rope_norm: rope_style must be 'neox' or 'gptj'; got %r" % (rope_style,))
    return ROPE_STYLES[rope_style]


def check_q_quant(q_quant):
    if not is_choice(q_quant, Q_QUANT):
        raise ValueError("rope_norm: q_quant must be None or 'fp8'; got %r" % (q_quant,))
    return q_quant == "fp8"


def rotary_dim_or_default(rotary_dim, q_shape):
    if rotary_dim is not None:
        return _args.integer("rope_norm", "rotary_dim", rotary_dim)
    if len(q_shape) != 3:
        raise ValueError("rope_norm: q must be a 3-D tensor [T, Hq, D]; got shape %s" % (tuple(q_shape),))
    return int(q_shape[-1])


SCORING = {"softmax": 0, "sigmoid": 1}


def scoring_code(scoring):
    if not is_choice(scoring, SCORING):
        raise ValueError("moe_route: scoring must be 'softmax' or 'sigmoid'; got %r" % (scoring,))
    return SCORING[scoring]


def groups_or_default(num_groups, topk_groups):
    """(num_groups, topk_groups) as the binary takes them: 0/0 when grouping is off."""
    # (<= 2^31 - 1: the binary takes C ints; larger ones got nanobind's / numpy's unnamed errors)
    num_groups = _args.optional_integer("moe_route", "num_groups", num_groups, minimum=0, maximum=2**31 - 1)
    topk_groups = _args.optional_integer("moe_route", "topk_groups", topk_groups, minimum=0, maximum=2**31 - 1)
    if num_groups is None or num_groups <= 1:
        if topk_groups not in (None, 0, 1):
            raise ValueError("moe_route: topk_groups needs num_groups > 1; got num_groups=%s, topk_groups=%d"
                             % (num_groups, topk_groups))
        return 0, 0
    if topk_groups is None:
        raise ValueError("moe_route: num_groups=%d needs topk_groups" % num_groups)
    return int(num_groups), int(topk_groups)


MOE_QUANT = {None: 0, "fp8_tensor": 1, "fp8_block128": 2}


def moe_quant_code(quant):
    if not is_choice(quant, MOE_QUANT):
        raise ValueError("fused_moe: quant must be None, 'fp8_tensor' or 'fp8_block128'; got %r" % (quant,))
    return MOE_QUANT[quant]


def w13_interleaved_flag(w13_interleaved, quant, w13_shape):
    """fused_moe's w13_interleaved as the binary takes it (a bool). What csrc refuses is checked here too, so the jax
    face raises ValueError at trace time as the torch face does (an FFI error surfaces as a runtime error there)."""
    interleaved = _args.boolean("fused_moe", "w13_interleaved", w13_interleaved)
    if not interleaved:
        return False
    if quant == "fp8_block128":
        raise ValueError("fused_moe: w13_interleaved needs quant None or fp8_tensor (fp8_block128's 128-row weight "
                         "scales would span gate and up rows); got fp8_block128")
    if len(w13_shape) == 3 and w13_shape[1] % 2 == 0 and (w13_shape[1] // 2) % ACT_EPILOGUE_BLOCK != 0:
        raise ValueError("fused_moe: w13_interleaved needs I (w13.shape[1] / 2) to be a multiple of %d; got %d"
                         % (ACT_EPILOGUE_BLOCK, w13_shape[1] // 2))
    return True


def check_activation(activation):
    if activation != "silu":
        raise ValueError("fused_moe: activation must be 'silu'; got %r" % (activation,))


def route_options(router_logits, top_k, scoring, num_groups, topk_groups, routed_scaling):
    """moe_route's options as the binary takes them: (top_k in [1, E], scoring code, num_groups, topk_groups,
    routed_scaling as a float). top_k is checked here, before the outputs [T, top_k] are allocated."""
    if len(router_logits.shape) != 2:
        raise ValueError("moe_route: router_logits must be [T, E]; got shape %s" % (tuple(router_logits.shape),))
    top_k, experts = _args.integer("moe_route", "top_k", top_k), int(router_logits.shape[1])
    if not 1 <= top_k <= max(experts, 1):
        raise ValueError("moe_route: top_k must be in [1, num_experts=%d]; got %d" % (experts, top_k))
    groups, kept = groups_or_default(num_groups, topk_groups)
    return top_k, scoring_code(scoring), groups, kept, _args.real("moe_route", "routed_scaling", routed_scaling)


def fused_route_options(router_logits, top_k, route_kwargs):
    """fused_moe's routing keywords (moe_route's, with its defaults) as the binary's fused_moe_routed takes them, in
    fused_moe's words: (top_k, scoring code, renormalize, num_groups, topk_groups, routed_scaling)."""
    with _args.speaking_as("moe_route", "fused_moe"):
        top_k, scoring, groups, kept, scaling = route_options(
            router_logits, top_k, route_kwargs.get("scoring", "softmax"), route_kwargs.get("num_groups"),
            route_kwargs.get("topk_groups"), route_kwargs.get("routed_scaling", 1.0))
        renormalize = _args.boolean("moe_route", "renormalize", route_kwargs.get("renormalize", True))
    return top_k, scoring, renormalize, groups, kept, scaling


def expert_counts(expert_offset, num_experts_global):
    """(expert_offset, num_experts_global) as the binary takes them (0: E + expert_offset)."""
    # (int64 for the binding, which names the int32 range itself; 2^64 read "Expected a value of type 'int' ...
    # but instead found type 'int'")
    return (_args.integer("fused_moe", "expert_offset", expert_offset, minimum=0, maximum=2**63 - 1),
            0 if num_experts_global is None else _args.integer("fused_moe", "num_experts_global", num_experts_global,
                                                              minimum=1, maximum=2**63 - 1))


# moe_route's keywords that fused_moe passes on with router_logits (both faces' moe_route take exactly these)
ROUTE_KEYWORDS = ("top_k", "scoring", "renormalize", "num_groups", "topk_groups", "correction_bias", "routed_scaling")


def check_router_experts(op, router_logits, num_experts_global, local_experts, expert_offset, tokens=None):
    """Fused routing scores router_logits.shape[-1] experts; they must be the routing's (num_experts_global, or E +
    expert_offset when it is not given). A router over 8 experts with a w13 of 4 and no num_experts_global routed
    some batches onto ids past the layer's experts: an error on the CPU for those batches only, and on the GPU the
    tokens' experts silently dropped (ids outside [offset, offset + E) are other ranks'). Its rank and (given
    `tokens`, x's T) its rows first: a 0-d router was an IndexError, one of T + 1 rows blamed topk_ids, which the
    caller never passed."""
    shape = tuple(router_logits.shape)
    if len(shape) != 2:
        raise ValueError("%s: router_logits must be [T, num_experts]; got shape %s" % (op, shape))
    if tokens is not None and isinstance(shape[0], (int, np.integer)) and isinstance(tokens, (int, np.integer)) \
            and shape[0] != tokens:
        raise ValueError("%s: router_logits has %d rows; x has T=%d tokens" % (op, shape[0], tokens))
    width = int(shape[-1])
    if num_experts_global is not None:
        if width != int(num_experts_global):
            raise ValueError("%s: router_logits scores %d experts (shape[-1]); the routing has num_experts_global=%d"
                             % (op, width, num_experts_global))
    elif isinstance(expert_offset, (int, np.integer)) and width != int(local_experts) + int(expert_offset):
        raise ValueError("%s: router_logits scores %d experts (shape[-1]); without num_experts_global the routing "
                         "has E + expert_offset = %d + %d (w13.shape[0] local experts): pass num_experts_global for "
                         "an expert-parallel rank" % (op, width, local_experts, expert_offset))


def routing_inputs(topk_weights, topk_ids, router_logits, route_kwargs):
    """fused_moe takes either (topk_weights, topk_ids) or router_logits (+ moe_route keywords)."""
    unknown = sorted(set(route_kwargs) - set(ROUTE_KEYWORDS))
    if unknown:  # a misspelled fused_moe keyword lands here too (a13_scales=...): name it as Python would
        raise TypeError("fused_moe() got an unexpected keyword argument %r (its routing keywords, with "
                        "router_logits: %s)" % (unknown[0], ", ".join(ROUTE_KEYWORDS)))
    if router_logits is None:
        if topk_weights is None or topk_ids is None:
            raise ValueError("fused_moe: pass topk_weights and topk_ids, or router_logits (fused routing)")
        if route_kwargs:
            raise ValueError("fused_moe: %s only apply with router_logits" % sorted(route_kwargs))
        return False
    if topk_weights is not None or topk_ids is not None:
        raise ValueError("fused_moe: pass either topk_weights/topk_ids or router_logits, not both")
    if "top_k" not in route_kwargs:
        raise ValueError("fused_moe: fused routing (router_logits) needs top_k")
    return True
