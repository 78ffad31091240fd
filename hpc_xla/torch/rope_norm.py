"""rope_norm for torch: fused per-head QK RMSNorm + RoPE + paged KV-cache write (DESIGN.md, API item 1)."""

import torch

from hpc_xla import _args, _options
from hpc_xla._ext import ext
from hpc_xla.torch._library import define


def _impl(q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, q_out, q_scale, q_norm_weight,
          k_norm_weight, k_scale, v_scale, eps, rope_style, rotary_dim, norm_before_rope):
    ext().rope_norm(q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, q_out, q_scale,
                    q_norm_weight, k_norm_weight, k_scale, v_scale, eps, rope_style, rotary_dim, norm_before_rope)


def _fake(*args):
    return None


rope_norm_op = define(
    "rope_norm(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor cos_sin_cache, Tensor slot_mapping, "
    "Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor(c!) q_out, Tensor(d!)? q_scale, Tensor? q_norm_weight, "
    "Tensor? k_norm_weight, Tensor? k_scale, Tensor? v_scale, float eps, int rope_style, int rotary_dim, "
    "bool norm_before_rope) -> ()",
    _impl,
    _fake,
    user_names=dict(q_out="out", q_scale="out_scale"),
)


def rope_norm(q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, *, q_norm_weight=None,
              k_norm_weight=None, eps=1e-6, rope_style="neox", rotary_dim=None, norm_before_rope=True,
              k_scale=None, v_scale=None, q_quant=None, out=None, out_scale=None):
    """Normalizes and rotates q and k, writes k and v into the paged cache in place, returns q.

    Same arguments as hpc_xla.jax.rope_norm (shapes and semantics there), plus:
      k_cache, v_cache: written in place; strided views are fine (vLLM:
        `kv_cache.transpose(1, 2).split(D, dim=-1)` of its [NB, Hkv, P, 2D] cache).
      out, out_scale: optional preallocated q output [T, Hq, D] (and [T, Hq] float32 scale with q_quant="fp8");
        `out` may be q itself.
      k_scale, v_scale: a float32 tensor of one element, or a number (then a 0-d tensor made on q's device, its
        value fixed in a captured CUDA graph).
    Returns q_out, or (q_fp8, q_scale) with q_quant="fp8". Launches on the current CUDA stream, never syncs.
    """
    _args.tensors("rope_norm", q=q, k=k, v=v, positions=positions, cos_sin_cache=cos_sin_cache,
                  slot_mapping=slot_mapping, k_cache=k_cache, v_cache=v_cache)
    k_scale, v_scale = _args.scale_tensors("rope_norm", q.device, k_scale=k_scale, v_scale=v_scale).values()
    _args.optional_tensors("rope_norm", q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight, k_scale=k_scale,
                           v_scale=v_scale, out=out, out_scale=out_scale)
    quant_q = _options.check_q_quant(q_quant)
    style = _options.rope_style_code(rope_style)
    rot = _options.rotary_dim_or_default(rotary_dim, q.shape)
    eps = _args.real("rope_norm", "eps", eps)
    if out_scale is not None and not quant_q:
        raise ValueError("rope_norm: out_scale is only written with q_quant='fp8'; got q_quant=%r" % (q_quant,))
    if out is None:
        out = torch.empty(q.shape, dtype=torch.float8_e4m3fn if quant_q else q.dtype, device=q.device)
    elif out.dtype == torch.float8_e4m3fn and not quant_q:  # (csrc would name the missing scale, not the cause)
        raise ValueError("rope_norm: out is float8_e4m3fn, which needs q_quant='fp8' (and its out_scale); got "
                         "q_quant=%r" % (q_quant,))
    else:  # by this face's names (csrc's are q_out / q_scale)
        want = torch.float8_e4m3fn if quant_q else q.dtype
        if out.dtype != want or out.shape != q.shape:
            raise ValueError("rope_norm: out must be %s %s (q's shape%s); got %s %s"
                             % (want, list(q.shape), ", q_quant='fp8'" if quant_q else ", q's dtype", out.dtype,
                                list(out.shape)))
    if quant_q and out_scale is None:
        out_scale = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    elif out_scale is not None and (out_scale.dtype != torch.float32 or out_scale.shape != q.shape[:2]):
        raise ValueError("rope_norm: out_scale must be float32 %s ([T, Hq], from q); got %s %s"
                         % (list(q.shape[:2]), out_scale.dtype, list(out_scale.shape)))
    norm_before_rope = _args.boolean("rope_norm", "norm_before_rope", norm_before_rope)
    try:
        rope_norm_op(q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, out, out_scale,
                     q_norm_weight, k_norm_weight, k_scale, v_scale, eps, style, rot, norm_before_rope)
    except ValueError as e:  # csrc's stride / overlap errors about out / out_scale, by their names here
        raise _args.renamed(e, rope_norm_op.user_names) from None
    return (out, out_scale) if quant_q else out
