"""float64 numpy references of every op (the test oracle and the demo's check). Inputs are numpy arrays of
any float dtype (ml_dtypes bfloat16 / float8 included); results are float64, before any output rounding."""

import numpy as np

FP8_E4M3_MAX = 448.0


def _f64(x):
    return None if x is None else np.asarray(x).astype(np.float64)


def _rms_norm(x, weight, eps):
    if weight is None:
        return x
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rope(x, cos, sin, rot, style):
    """x [..., D]; cos/sin [..., rot/2] broadcast against x[..., :rot]."""
    out = x.copy()
    half = rot // 2
    if style == "neox":
        x1, x2 = x[..., :half], x[..., half:rot]
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half:rot] = x2 * cos + x1 * sin
    else:
        x1, x2 = x[..., 0:rot:2], x[..., 1:rot:2]
        out[..., 0:rot:2] = x1 * cos - x2 * sin
        out[..., 1:rot:2] = x2 * cos + x1 * sin
    return out


def rope_norm(q, k, v, positions, cos_sin_cache, *, q_norm_weight=None, k_norm_weight=None, eps=1e-6,
              rope_style="neox", rotary_dim=None, norm_before_rope=True):
    """Returns float64 (q_out [T,Hq,D], k_new [T,Hkv,D], v_new [T,Hkv,D]): the values rope_norm produces for q
    and writes into the cache slots (before rounding/quantization to the output dtypes)."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    rot = q.shape[-1] if rotary_dim is None else rotary_dim
    table = _f64(cos_sin_cache)[np.asarray(positions).astype(np.int64)]  # [T, rot]
    cos, sin = table[:, None, : rot // 2], table[:, None, rot // 2:rot]
    qw, kw = _f64(q_norm_weight), _f64(k_norm_weight)

    def transform(x, w):
        if norm_before_rope:
            return _rope(_rms_norm(x, w, eps), cos, sin, rot, rope_style)
        return _rms_norm(_rope(x, cos, sin, rot, rope_style), w, eps)

    return transform(q, qw), transform(k, kw), v.copy()


def fp8_quantize_rows(x):
    """Per-row (last axis) dynamic fp8 scale as rope_norm computes it: scale = amax / 448."""
    amax = np.max(np.abs(x), axis=-1)
    return amax / FP8_E4M3_MAX


def moe_route(router_logits, top_k, *, scoring="softmax", renormalize=True, num_groups=None, topk_groups=None,
              correction_bias=None, routed_scaling=1.0):
    """float64 routing: returns (weights [T, k], ids [T, k], select [T, E]) with the documented rules
    (ties: lower expert index first). `select` is what the ranking used (to tell near-ties in tests)."""
    x = _f64(router_logits)
    if scoring == "softmax":
        e = np.exp(x - x.max(-1, keepdims=True))
        score = e / e.sum(-1, keepdims=True)
    else:
        score = 1.0 / (1.0 + np.exp(-x))
    select = score + (0.0 if correction_bias is None else _f64(correction_bias))
    tokens, experts = x.shape
    allowed = np.ones_like(select, bool)
    if num_groups and num_groups > 1:
        g = select.reshape(tokens, num_groups, experts // num_groups)
        top2 = np.sort(g, -1)[..., ::-1]
        rank = top2[..., 0] + top2[..., 1] if correction_bias is not None and g.shape[-1] > 1 else top2[..., 0]
        keep = np.argsort(-rank, axis=-1, kind="stable")[:, :topk_groups]
        mask = np.zeros((tokens, num_groups), bool)
        np.put_along_axis(mask, keep, True, axis=-1)
        allowed = np.repeat(mask, experts // num_groups, axis=-1)
    masked = np.where(allowed, select, -np.inf)
    ids = np.argsort(-masked, axis=-1, kind="stable")[:, :top_k]
    weights = np.take_along_axis(score, ids, -1)
    if renormalize:
        weights = weights / weights.sum(-1, keepdims=True)
    return weights * routed_scaling, ids, masked


def relative_error(actual, expected):
    """||actual - expected|| / ||expected|| in float64; NaN anywhere gives inf."""
    actual, expected = _f64(actual), _f64(expected)
    if not np.all(np.isfinite(actual)):
        return float("inf")
    denom = np.linalg.norm(expected)
    return float(np.linalg.norm(actual - expected) / (denom if denom > 0 else 1.0))
