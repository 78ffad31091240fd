"""Python-level options shared by the jax and torch faces (string choices -> what the binary takes)."""

ROPE_STYLES = {"neox": 0, "gptj": 1}
Q_QUANT = (None, "fp8")


def rope_style_code(rope_style):
    if rope_style not in ROPE_STYLES:
        raise ValueError("rope_norm: rope_style must be 'neox' or 'gptj'; got %r" % (rope_style,))
    return ROPE_STYLES[rope_style]


def check_q_quant(q_quant):
    if q_quant not in Q_QUANT:
        raise ValueError("rope_norm: q_quant must be None or 'fp8'; got %r" % (q_quant,))
    return q_quant == "fp8"


def rotary_dim_or_default(rotary_dim, q_shape):
    if rotary_dim is not None:
        return int(rotary_dim)
    if len(q_shape) != 3:
        raise ValueError("rope_norm: q must be a 3-D tensor [T, Hq, D]; got shape %s" % (tuple(q_shape),))
    return int(q_shape[-1])


SCORING = {"softmax": 0, "sigmoid": 1}


def scoring_code(scoring):
    if scoring not in SCORING:
        raise ValueError("moe_route: scoring must be 'softmax' or 'sigmoid'; got %r" % (scoring,))
    return SCORING[scoring]


def groups_or_default(num_groups, topk_groups):
    """(num_groups, topk_groups) as the binary takes them: 0/0 when grouping is off."""
    if num_groups is None or num_groups <= 1:
        if topk_groups not in (None, 0, 1) and num_groups is None:
            raise ValueError("moe_route: topk_groups needs num_groups")
        return 0, 0
    if topk_groups is None:
        raise ValueError("moe_route: num_groups=%d needs topk_groups" % num_groups)
    return int(num_groups), int(topk_groups)
