"""rope_norm for JAX: fused per-head QK RMSNorm + RoPE + paged KV-cache write (DESIGN.md, API item 1)."""

import jax
import jax.numpy as jnp
import numpy as np

from hpc_xla import _args, _options
from hpc_xla.jax import _ffi

_TARGET = "hpc_xla_rope_norm"
_OP = "rope_norm"
_K_CACHE_ARG, _V_CACHE_ARG = 6, 7  # operand positions of the caches (aliased to the last two results)


def rope_norm(q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache, *, q_norm_weight=None,
              k_norm_weight=None, eps=1e-6, rope_style="neox", rotary_dim=None, norm_before_rope=True,
              k_scale=None, v_scale=None, q_quant=None):
    """Normalizes and rotates q and k, writes k and v into the paged cache, returns q and the new caches.

    Args:
      q: [T, Hq, D] bfloat16/float16. k, v: [T, Hkv, D], q's dtype.
      positions: [T] int32/int64 rotary positions. cos_sin_cache: [max_pos, rotary_dim] float32 (bf16/fp16 ok),
        cos in [:, :rotary_dim/2], sin in [:, rotary_dim/2:].
      slot_mapping: [T] int32/int64; token t goes to block s // P, offset s % P; -1 skips the token.
      k_cache, v_cache: [num_blocks, P, Hkv, D] in q's dtype or float8_e4m3fn (then k_scale/v_scale: float32
        scalars, the cache holds e4m3(saturate(x * fp32(1 / scale))): a reciprocal multiply, which differs from
        x / scale by one fp8 step in ~1e-5 of the values). Donate them to update in place.
      q_norm_weight, k_norm_weight: optional [D] RMSNorm weights: x * rsqrt(mean(x^2) + eps) * w, per head.
      rope_style: "neox" (rotate halves) or "gptj" (rotate interleaved pairs). rotary_dim: default D.
      norm_before_rope: RMSNorm then RoPE (default) or RoPE then RMSNorm.
      q_quant: None, or "fp8" to return q as float8_e4m3fn with a per-(token, head) scale amax / 448.

    Returns:
      (q_out, k_cache, v_cache), or (q_fp8, q_scale [T, Hq] float32, k_cache, v_cache) with q_quant="fp8".
    """
    _args.arrays(_OP, q=q, k=k, v=v, positions=positions, cos_sin_cache=cos_sin_cache, slot_mapping=slot_mapping,
                 k_cache=k_cache, v_cache=v_cache)
    quant_q = _options.check_q_quant(q_quant)
    style = _options.rope_style_code(rope_style)
    rot = _options.rotary_dim_or_default(rotary_dim, q.shape)
    if q.ndim == 3:  # (other ranks: csrc names the error; the caches' results are not empty then)
        _args.nonempty_dims(_OP, **{"head_dim (q.shape[2])": q.shape[2]})
    eps = _args.real(_OP, "eps", eps)
    q_out_dtype = jnp.float8_e4m3fn if quant_q else q.dtype
    results = [jax.ShapeDtypeStruct(q.shape, q_out_dtype)]
    if quant_q:
        results.append(jax.ShapeDtypeStruct(q.shape[:2], jnp.float32))
    results += [jax.ShapeDtypeStruct(k_cache.shape, k_cache.dtype), jax.ShapeDtypeStruct(v_cache.shape, v_cache.dtype)]
    n = len(results)
    call = jax.ffi.ffi_call(
        _TARGET,
        results,
        input_output_aliases={_K_CACHE_ARG: n - 2, _V_CACHE_ARG: n - 1},
        vmap_method="sequential",
    )
    return tuple(call(
        q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache,
        _ffi.optional(_OP, "q_norm_weight", q_norm_weight), _ffi.optional(_OP, "k_norm_weight", k_norm_weight),
        _ffi.f32_scalar(_OP, "k_scale", k_scale), _ffi.f32_scalar(_OP, "v_scale", v_scale),
        eps=np.float32(eps), rope_style=np.int32(style), rotary_dim=np.int64(rot),
        norm_before_rope=_args.boolean("rope_norm", "norm_before_rope", norm_before_rope),
    ))
