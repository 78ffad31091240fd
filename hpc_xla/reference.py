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
    score = _route_scores(x, scoring)
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
    return _route_weights(score, ids, renormalize, routed_scaling), ids, masked


def moe_route_weights(router_logits, ids, *, scoring="softmax", renormalize=True, routed_scaling=1.0):
    """float64 weights moe_route gives the experts `ids` [T, k] (in that order): lets a test check the weights of
    a selection that differs from the reference's only by a near-tie."""
    return _route_weights(_route_scores(_f64(router_logits), scoring), np.asarray(ids), renormalize, routed_scaling)


def _route_scores(x, scoring):
    if scoring == "softmax":
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    return 1.0 / (1.0 + np.exp(-x))


def _route_weights(score, ids, renormalize, routed_scaling):
    weights = np.take_along_axis(score, ids.astype(np.int64), -1)
    if renormalize:
        weights = weights / weights.sum(-1, keepdims=True)
    return weights * routed_scaling


def _fp8_round(x):
    """float64 -> nearest float8_e4m3fn value (saturating at +-448), as float64."""
    import ml_dtypes

    return np.clip(x, -FP8_E4M3_MAX, FP8_E4M3_MAX).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


def _quantize_blocks(v, block, static_scale=None):
    """Per-row quantization of v [N, C] in column blocks of `block`: returns (fp8 values, scales [N, C/block]).

    Emulates the pipeline's float32 quantizer exactly (csrc/common/numeric.h QuantizeE4M3): scale =
    fp32(amax) / 448 in fp32 (or the static scale), multiplier = 1 / scale in fp32, fp8(sat(fp32(v) * multiplier)).
    (With x / scale in float64 instead, bf16 inputs often sit on fp8 rounding midpoints: one-ulp flips of a
    few inputs cascaded to ~5% on single-row problems, a difference in the reference, not in the kernels.)"""
    n, c = v.shape
    blocks = np.asarray(v, np.float64).astype(np.float32).reshape(n, c // block, block)
    if static_scale is not None:
        scale = np.full((n, c // block), np.float32(static_scale), np.float32)
    else:
        scale = np.abs(blocks).max(-1) / np.float32(FP8_E4M3_MAX)
    mul = np.where(scale > 0, np.float32(1.0) / np.where(scale > 0, scale, np.float32(1.0)), np.float32(0.0))
    q = _fp8_round((blocks * mul[..., None]).astype(np.float64))
    return q.reshape(n, c), scale.astype(np.float64)


def quantize_moe_weights(w, quant):
    """float weights [E, N, K] -> (stored weights, scales) for fused_moe's scheme: quant None -> bfloat16, no
    scales; "fp8_tensor" -> e4m3 with per-expert scales [E]; "fp8_block128" -> e4m3 with per-128x128-block
    scales [E, N/128, K/128] (scale = amax / 448)."""
    import ml_dtypes

    w = np.asarray(w)
    if quant is None:
        return w.astype(ml_dtypes.bfloat16), None
    if quant == "fp8_tensor":
        scale = (np.abs(w).reshape(w.shape[0], -1).max(-1) / FP8_E4M3_MAX).astype(np.float32)
        return (w / scale[:, None, None]).astype(ml_dtypes.float8_e4m3fn), scale
    e, n, k = w.shape
    blocks = np.abs(w.reshape(e, n // 128, 128, k // 128, 128)).max(axis=(2, 4))
    scale = (blocks / FP8_E4M3_MAX).astype(np.float32)
    full = np.repeat(np.repeat(scale, 128, 1), 128, 2)
    return (w / full).astype(ml_dtypes.float8_e4m3fn), scale


_PAIR_CHUNK = 1024


def _expert_rows(e, xq, x_scale, w13, w2, quant, w13_scale, w2_scale, a2_scale, inter, hidden, B, nudge=0.0):
    """Down rows [P, H] of expert e (w13 / w2: every expert's weights as stored) for P token rows xq [P, H] of x as
    quantized; x_scale: their scales [P, H/128] (fp8_block128), the per-tensor scale (fp8_tensor) or None; nudge:
    fused_moe's inter_nudge."""
    w13, w2 = _f64(w13[e]), _f64(w2[e])
    if quant == "fp8_block128":
        gu = _block_scaled_product(xq, w13, x_scale, np.repeat(_f64(w13_scale)[e], B, axis=0), B)
    else:
        gu = xq @ w13.T
        if quant == "fp8_tensor":
            gu = gu * x_scale * float(_f64(w13_scale)[e])
    g, u = gu[:, :inter], gu[:, inter:]
    h = g / (1.0 + np.exp(-g)) * u * (1.0 + nudge)
    if quant is None:
        import ml_dtypes

        return h.astype(ml_dtypes.bfloat16).astype(np.float64) @ w2.T
    if quant == "fp8_tensor":
        hq, _ = _quantize_blocks(h, inter, a2_scale)
        return (hq @ w2.T) * float(a2_scale) * float(_f64(w2_scale)[e])
    hq, hs = _quantize_blocks(h, B)
    return _block_scaled_product(hq, w2, hs, np.repeat(_f64(w2_scale)[e], B, axis=0), B)


def _block_scaled_product(a, w, a_scale, w_scale, B):
    """fp8_block128's promotion: sum over 128-deep K blocks kb of (a[:, kb] @ w[:, kb].T) * a_scale[:, kb] *
    w_scale[:, kb] -- a [P, K], w [N, K], a_scale [P, K/B], w_scale [N, K/B] -> [P, N]."""
    out = np.zeros((a.shape[0], w.shape[0]))
    for kb in range(a.shape[1] // B):
        out += (a[:, kb * B:(kb + 1) * B] @ w[:, kb * B:(kb + 1) * B].T) * a_scale[:, kb:kb + 1] * w_scale[None, :, kb]
    return out


def fused_moe(x, w13, w2, topk_weights, topk_ids, *, quant=None, w13_scale=None, w2_scale=None, a13_scale=None,
              a2_scale=None, x_scale=None, expert_offset=0, shared_output=None, inter_nudge=0.0):
    """float64 MoE layer with fused_moe's quantization steps emulated (see csrc/moe/fused_moe.h).

    inter_nudge (tests only): silu(gate) * up times (1 + inter_nudge) before it is rounded to the intermediate's
    type (bf16, or e4m3 with the static a2_scale). A kernel's float32 sums land ~1e-6-1e-5 from float64's, so an
    intermediate within that of a rounding midpoint may round the other way there -- one e4m3 step is 6-12% of that
    element, ~1-3% of its token's row at small I (session 46: two hypothesis draws, tiled path). The oracles at
    +-inter_nudge round those few the other way; fp8_block128's dynamic scale moves with the nudge (no effect)."""
    x_is_fp8 = np.asarray(x).dtype.itemsize == 1
    x, w13, w2 = _f64(x), np.asarray(w13), np.asarray(w2)  # weights: only the hit experts', to float64 below
    tokens, hidden = x.shape
    experts, inter = w13.shape[0], w13.shape[1] // 2
    ids, weights = np.asarray(topk_ids), _f64(topk_weights)
    B = 128
    if quant is None:
        xq, xs = x, None
    elif x_is_fp8:  # already quantized: fp8_tensor with a13_scale, fp8_block128 with x_scale
        xq, xs = x, (_f64(x_scale) if quant == "fp8_block128" else float(a13_scale))
    elif quant == "fp8_tensor":
        xq, _ = _quantize_blocks(x, hidden, a13_scale)
        xs = float(a13_scale)
    else:
        xq, xs = _quantize_blocks(x, B)
    y = np.zeros((tokens, hidden))
    local = ids.astype(np.int64) - expert_offset
    for e in range(experts):  # the pairs of one expert at a time, a matrix product per step (chunks bound memory)
        t_all, j_all = np.nonzero(local == e)
        for c in range(0, len(t_all), _PAIR_CHUNK):
            t_idx, j_idx = t_all[c:c + _PAIR_CHUNK], j_all[c:c + _PAIR_CHUNK]
            rows_scale = xs[t_idx] if quant == "fp8_block128" else xs  # (the x_scale argument is in xs)
            down = _expert_rows(e, xq[t_idx], rows_scale, w13, w2, quant, w13_scale, w2_scale, a2_scale, inter,
                                hidden, B, inter_nudge)
            np.add.at(y, t_idx, weights[t_idx, j_idx][:, None] * down)  # a token may list an expert twice
    if shared_output is not None:
        y += _f64(shared_output)
    return y


def worst_row_error(actual, expected):
    """max over rows (every index but the last axis) of ||actual_row - expected_row|| / ||expected_row||, float64;
    a row whose expected value is all zero must be all zero (else inf), NaN anywhere gives inf. Where one global
    norm lets a bug confined to a few rows hide under the others (a long sequence's merge among short ones, one
    token among thousands), this sees it."""
    actual, expected = _f64(actual), _f64(expected)
    if not np.all(np.isfinite(actual)):
        return float("inf")
    a = actual.reshape(-1, actual.shape[-1])
    e = expected.reshape(-1, expected.shape[-1])
    diff, norm = np.linalg.norm(a - e, axis=1), np.linalg.norm(e, axis=1)
    if np.any((norm == 0) & (diff > 0)):
        return float("inf")
    live = norm > 0
    return float(np.max(diff[live] / norm[live])) if live.any() else 0.0


def relative_error(actual, expected):
    """||actual - expected|| / ||expected|| in float64; NaN anywhere gives inf."""
    actual, expected = _f64(actual), _f64(expected)
    if not np.all(np.isfinite(actual)):
        return float("inf")
    denom = np.linalg.norm(expected)
    return float(np.linalg.norm(actual - expected) / (denom if denom > 0 else 1.0))
