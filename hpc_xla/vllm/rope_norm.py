"""The fused attention prologue for vLLM models that wire vLLM's `HpcRopeNorm` (HunYuan V3): QK-RMSNorm + RoPE +
paged K/V write (+ fp8 q with per-token-head scales for an fp8 cache) in ONE hpc_xla `rope_norm` launch per layer.

vLLM builds an `HpcRopeNorm` for every attention layer when the backend is HPC_ATTN and its `support()` agrees; the
plugin rebinds that name to `HpcXlaRopeNorm` (same constructor, same custom op `vllm.hpc_rope_norm_forward`, which
routes to `_forward_impl`). Differences from the Tencent-backed class: no `hpc` package, any GQA ratio up to 16 and
head_dim 64 / 128 / 256, and the K/V views of vLLM's LBNHC cache are written in place (strided), so there is no
scratch-then-scatter fallback. The attention layers it serves are flagged (attention.FUSED_PROLOGUE) so the backend
skips its own KV write for them, and the fp8 q scales reach the attention through the step's metadata.
"""

import torch

from vllm.config import get_current_vllm_config_or_none
from vllm.model_executor.layers.hpc.rope_norm import HpcRopeNorm, QkNormPolicy
from vllm.model_executor.custom_op import CustomOp
from vllm.v1.attention.backends.registry import AttentionBackendEnum

from hpc_xla.vllm import attention as _attention
from hpc_xla.vllm._grad import without_grad


class HpcXlaRopeNorm(HpcRopeNorm):
    def __init__(self, num_heads, num_kv_heads, head_dim, cos_sin_cache, use_qk_norm, fallback_qnorm, fallback_knorm,
                 kv_cache_dtype, layer_name, qk_norm_policy=QkNormPolicy.ROPE_THEN_NORM):
        CustomOp.__init__(self)  # not HpcRopeNorm.__init__: it requires Tencent's hpc package
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_size, self.kv_size = num_heads * head_dim, num_kv_heads * head_dim
        self.register_buffer("cos_sin_cache", cos_sin_cache.float(), persistent=False)
        self.fallback_qnorm, self.fallback_knorm = fallback_qnorm, fallback_knorm
        self.qk_norm_policy = qk_norm_policy if use_qk_norm else QkNormPolicy.NONE
        if self.qk_norm_policy != QkNormPolicy.NONE and (fallback_qnorm is None or fallback_knorm is None):
            raise ValueError("HpcXlaRopeNorm: QK-norm is on but fallback_qnorm / fallback_knorm were not given "
                             "(their weights are the kernel's norm weights)")
        self.layer_name = None
        self.register_layer_name(layer_name)  # vLLM's custom op finds this instance by the layer's name
        config = get_current_vllm_config_or_none()
        layer = None if config is None else config.compilation_config.static_forward_context.get(layer_name)
        if layer is None:
            raise RuntimeError("HpcXlaRopeNorm: attention layer %r is not built yet (the model builds it first)"
                               % layer_name)
        setattr(layer, _attention.FUSED_PROLOGUE, True)  # its K/V: written here, not by the backend
        # the layer's own cache dtype: HunYuan V3 passes the engine-wide one, which --kv-cache-dtype-skip-layers
        # overrides per layer (and a checkpoint's kv_cache_scheme may set it after the model read it)
        self.use_fp8 = layer.kv_cache_dtype.startswith("fp8")

    @classmethod
    def support(cls, num_heads, num_kv_heads, head_dim, kv_cache_dtype):
        """vLLM asks this at model construction: the fused prologue runs with hpc_xla's HPC_ATTN backend only."""
        config = get_current_vllm_config_or_none()
        if config is None or config.attention_config.backend != AttentionBackendEnum.HPC_ATTN:
            return False
        # (an fp8 cache gets fp8 q; the decode kernel writes the model's bf16 or fp16 output from it)
        return (kv_cache_dtype in _attention.KV_CACHE_DTYPES and head_dim in _attention.HEAD_SIZES
                and num_heads % num_kv_heads == 0 and num_heads // num_kv_heads <= _attention.MAX_GQA)

    @without_grad  # (vLLM's Parameters require grad; the ops refuse that in grad mode)
    def _forward_impl(self, qkv, kv_cache, attn_metadata, attn_layer, output):
        import hpc_xla.torch as ht

        m = attn_metadata
        if getattr(m, "positions", None) is None:
            raise RuntimeError("HpcXlaRopeNorm (layer %s) needs hpc_xla's HPC_ATTN metadata with token positions; got "
                               "%s (is the attention backend hpc_xla's?)" % (self.layer_name, type(m).__name__))
        rows = m.num_actual_tokens
        if m.slot_mapping.shape[0] < rows or qkv.shape[0] < rows:
            raise RuntimeError("HpcXlaRopeNorm (layer %s): %d tokens in the step but slot_mapping has %d and qkv %d"
                               % (self.layer_name, rows, m.slot_mapping.shape[0], qkv.shape[0]))
        qkv = qkv[:rows]
        q = qkv[:, :self.q_size].view(rows, self.num_heads, self.head_dim)
        k = qkv[:, self.q_size:self.q_size + self.kv_size].view(rows, self.num_kv_heads, self.head_dim)
        v = qkv[:, self.q_size + self.kv_size:].view(rows, self.num_kv_heads, self.head_dim)
        if self.use_fp8:
            kv_cache = kv_cache.view(torch.float8_e4m3fn)
        k_cache, v_cache = kv_cache.transpose(1, 2).split(self.head_dim, dim=-1)
        norm = {}
        if self.qk_norm_policy != QkNormPolicy.NONE:
            norm = dict(q_norm_weight=self.fallback_qnorm.weight, k_norm_weight=self.fallback_knorm.weight,
                        eps=self.fallback_qnorm.variance_epsilon,
                        norm_before_rope=self.qk_norm_policy == QkNormPolicy.NORM_THEN_ROPE)
        args = (q, k, v, m.positions[:rows], self.cos_sin_cache, m.slot_mapping[:rows], k_cache, v_cache)
        rot = dict(rotary_dim=self.cos_sin_cache.shape[1], **norm)  # partial rotary: the cache's width
        if self.use_fp8:  # q's scales into the step's fixed buffer, where the attention of this layer reads them
            ht.rope_norm(*args, k_scale=attn_layer._k_scale, v_scale=attn_layer._v_scale, q_quant="fp8",
                         out=output[:rows], out_scale=m.q_scale[:rows], **rot)
        else:
            ht.rope_norm(*args, out=output[:rows], **rot)
