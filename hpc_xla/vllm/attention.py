"""vLLM 0.33 attention backend on hpc_xla's paged decode kernel (selected with `--attention-backend HPC_ATTN` once
the plugin in hpc_xla.vllm has registered it).

A step's batch arrives reordered, decodes first. The decode requests (uniform q_len 1-4: plain decode and
speculative decode) run through hpc_xla's load-balanced `decode_attention`; its plan is built ON THE GPU once per
step in the metadata builder (one small kernel, no host sync) and reused by every layer, into buffers that stay at
the same address for a given batch size, so FULL CUDA graphs of uniform decode batches replay with fresh plans.
Prefill / extend requests (hpc_xla has no prefill kernel yet) run through vLLM's own Triton `unified_attention`
on CUDA and through a torch reference on the CPU. The KV cache is written by `do_kv_cache_update` (vLLM's
`reshape_and_cache_flash` on CUDA; models that apply RoPE and QK-norm themselves hand us rotated K).

Layout: vLLM's LBNHC cache `[num_blocks, Hkv, P, 2 D]` (physical order blocks, tokens, heads), split into the
strided K / V views `[num_blocks, P, Hkv, D]` that hpc_xla's kernels take as they are.
"""

from dataclasses import dataclass
from typing import ClassVar

import torch

from vllm.v1.attention.backend import (AttentionBackend, AttentionCGSupport, AttentionImpl, AttentionMetadata,
                                       AttentionMetadataBuilder, AttentionType, MultipleOf, max_decode_query_len)
from vllm.v1.attention.backends.utils import get_num_attention_heads_from_layers, split_decodes_and_prefills
from vllm.v1.kv_cache_interface import KVCacheLayout

from hpc_xla import _decode
from hpc_xla.vllm import _torch_paths
from hpc_xla.vllm._grad import without_grad

NAME = "HPC_ATTN"  # an existing AttentionBackendEnum member: vLLM resolves backends by get_name()
HEAD_SIZES = (64, 128, 256)
PAGE_SIZES = (16, 32, 64)
MAX_GQA = 16
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3")
FUSED_PROLOGUE = "hpc_xla_fused_prologue"  # set on an Attention layer whose K/V hpc_xla.vllm.rope_norm writes


def has_fused_prologue(vllm_config, layer_name):
    """Whether the model built hpc_xla's prologue for this attention layer (a flag on the layer module itself, so
    another engine in the same process with the same layer names is not affected)."""
    layer = vllm_config.compilation_config.static_forward_context.get(layer_name)
    return bool(getattr(layer, FUSED_PROLOGUE, False))


def decode_query_len(vllm_config):
    """The widest request the decode kernel takes as a decode (1 + draft tokens of speculative decoding), or 1 when
    vLLM's drafts are wider than the kernel's q_len limit (those steps' verifications go to the prefill path). One
    rule for the batch split and for the CUDA-graph support level, so they cannot disagree."""
    widest = max_decode_query_len(vllm_config)
    return widest if widest <= _decode.MAX_Q_LEN else 1


def cache_dtype(kv_cache_dtype, model_dtype):
    """The dtype hpc_xla's kernels see the cache as (vLLM stores fp8 caches as uint8)."""
    if kv_cache_dtype in ("fp8", "fp8_e4m3"):
        return torch.float8_e4m3fn
    if kv_cache_dtype == "auto":
        return model_dtype
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(kv_cache_dtype)  # None: not one we take


def spec_dtype(dtype):
    """The dtype hpc_xla's kernels see a layer's cache as, from its KV cache spec (vLLM stores fp8 caches as uint8;
    the backend takes fp8_e4m3 only)."""
    return torch.float8_e4m3fn if dtype in (torch.uint8, torch.float8_e4m3fn) else dtype


@dataclass
class HpcXlaAttentionMetadata(AttentionMetadata):
    """One step's batch, shared by every layer: decodes [0, num_decodes), then prefills / extends."""

    num_actual_tokens: int
    num_decodes: int
    num_decode_tokens: int
    decode_q_len: int
    num_prefills: int
    max_query_len: int
    max_seq_len: int
    seq_lens: torch.Tensor  # [B] int32, KV length incl. this step's tokens
    block_table: torch.Tensor  # [B, max_blocks] int32
    slot_mapping: torch.Tensor  # [tokens] int64
    query_start_loc: torch.Tensor  # [B + 1] int32 (device)
    query_start_loc_cpu: torch.Tensor  # [B + 1] int32 (host)
    decode_plan: object = None  # hpc_xla.torch.DecodePlan of the decodes, built on the device this step
    prefill_query_start: torch.Tensor | None = None  # [num_prefills + 1] int32, from 0 (device)
    positions: torch.Tensor | None = None  # [tokens], for the fused prologue (hpc_xla.vllm.rope_norm)
    q_scale: torch.Tensor | None = None  # [tokens, Hq] float32: where the prologue puts fp8 q's scales (fixed buffer)


class HpcXlaAttentionMetadataBuilder(AttentionMetadataBuilder[HpcXlaAttentionMetadata]):
    """Splits the batch and plans the decodes on the device (once per step, reused by every layer)."""

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=True)
        self.reorder_batch_threshold = min(self.reorder_batch_threshold, decode_query_len(vllm_config))
        model = vllm_config.model_config
        # the layers' own head count (draft models and models whose layers differ build builders of their own)
        self.num_q_heads = (get_num_attention_heads_from_layers(vllm_config, layer_names)
                            or model.get_num_attention_heads(vllm_config.parallel_config))
        self.num_kv_heads = kv_cache_spec.num_kv_heads
        self.head_dim = kv_cache_spec.head_size
        self.page_size = kv_cache_spec.block_size
        # the group's own cache (--kv-cache-dtype-skip-layers keeps some layers' caches in the model dtype: they get a
        # group, a spec and a builder of their own), not the engine-wide cache_dtype
        self.kv_dtype = spec_dtype(kv_cache_spec.dtype)
        self.fused_prologue = any(has_fused_prologue(vllm_config, name) for name in layer_names)
        # the prologue hands an fp8 cache's decodes fp8 q (another kernel, another occupancy)
        self.q_dtype = self.kv_dtype if self.fused_prologue and self.kv_dtype.itemsize == 1 else model.dtype
        self.max_batch = vllm_config.scheduler_config.max_num_seqs
        self._plans = {}  # (batch, q_len) -> DecodePlan: fixed addresses for CUDA-graph replay
        self._workspace = None  # one fp32 buffer for every plan: the layers of a step run one at a time
        # the prologue's buffers, at fixed addresses (read inside CUDA graphs): token positions, refilled every step;
        # fp8 q scales, written by the prologue of each layer
        self._positions = self._q_scale = None
        if self.fused_prologue:
            tokens = max(vllm_config.scheduler_config.max_num_batched_tokens,
                         getattr(vllm_config.compilation_config, "max_cudagraph_capture_size", None) or 0)
            self._positions = torch.zeros(tokens, dtype=torch.int32, device=device)
            if self.kv_dtype == torch.float8_e4m3fn:
                self._q_scale = torch.ones(tokens, self.num_q_heads, dtype=torch.float32, device=device)

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec):
        if decode_query_len(vllm_config) > 1:  # uniform speculative-decode batches: q_len = 1 + drafts
            return AttentionCGSupport.UNIFORM_BATCH
        return AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        cam = common_attn_metadata
        if cam.causal is not True:  # the selector keeps non-causal layers away; per-request causal is not taken
            raise NotImplementedError("%s attention is causal only; got causal=%r" % (NAME, cam.causal))
        threshold = self.reorder_batch_threshold
        num_decodes, num_prefills, num_decode_tokens, _ = split_decodes_and_prefills(
            cam, decode_threshold=threshold, require_uniform=threshold > 1)
        q_len = num_decode_tokens // num_decodes if num_decodes else 0
        if num_decodes and (q_len * num_decodes != num_decode_tokens or not 1 <= q_len <= _decode.MAX_Q_LEN):
            # not a uniform decode block: the prefill path serves every request
            num_decodes, num_prefills, num_decode_tokens, q_len = 0, cam.num_reqs, 0, 0
        plan = self._plan(cam.seq_lens[:num_decodes], q_len) if num_decodes else None
        prefill_start = None
        if num_prefills:
            starts = cam.query_start_loc[num_decodes:cam.num_reqs + 1]
            prefill_start = starts - starts[:1]
        return HpcXlaAttentionMetadata(
            num_actual_tokens=cam.num_actual_tokens, num_decodes=num_decodes, num_decode_tokens=num_decode_tokens,
            decode_q_len=q_len, num_prefills=num_prefills, max_query_len=cam.max_query_len,
            max_seq_len=cam.max_seq_len, seq_lens=cam.seq_lens, block_table=cam.block_table_tensor,
            slot_mapping=cam.slot_mapping, query_start_loc=cam.query_start_loc,
            query_start_loc_cpu=cam.query_start_loc_cpu, decode_plan=plan, prefill_query_start=prefill_start,
            positions=self._token_positions(cam) if self.fused_prologue else None,
            q_scale=None if self._q_scale is None else self._q_scale[:cam.num_actual_tokens])

    def _token_positions(self, cam):
        """Position of every token: its request's seq_len - q_len + its index among the request's new tokens,
        computed here into a fixed buffer (device ops, no host sync); padding tokens get 0 (their slot is -1).
        Not vLLM's cam.positions: speculative drafters advance seq_lens and slot_mapping between draft steps but
        leave those positions at the target step's."""
        tokens, real = cam.num_actual_tokens, int(cam.query_start_loc_cpu[cam.num_reqs])
        if tokens > self._positions.shape[0]:
            raise ValueError("%s: %d tokens in a step, more than the %d the positions buffer was sized for "
                             "(max_num_batched_tokens)" % (NAME, tokens, self._positions.shape[0]))
        starts = cam.query_start_loc[:cam.num_reqs + 1]
        q_lens = starts[1:] - starts[:-1]
        request = torch.repeat_interleave(torch.arange(cam.num_reqs, device=self.device), q_lens, output_size=real)
        index = torch.arange(real, dtype=torch.int32, device=self.device) - starts[request]
        self._positions[:real] = cam.seq_lens[request] - q_lens[request] + index
        self._positions[real:tokens] = 0
        return self._positions[:tokens]

    def _plan(self, seq_lens, q_len):
        import hpc_xla.torch as ht

        key = (int(seq_lens.shape[0]), q_len)
        plan = self._plans.get(key)
        kwargs = dict(num_kv_heads=self.num_kv_heads, num_q_heads=self.num_q_heads, head_dim=self.head_dim,
                      page_size=self.page_size, q_len=q_len, kv_dtype=self.kv_dtype, q_dtype=self.q_dtype)
        if plan is not None:
            return ht.decode_plan(seq_lens, out=plan, **kwargs)
        if self._workspace is None:
            self._workspace = torch.empty(self._workspace_floats(), dtype=torch.float32, device=seq_lens.device)
        plan = self._plans[key] = ht.decode_plan(seq_lens, workspace=self._workspace, **kwargs)
        return plan

    def _workspace_floats(self):
        """The largest workspace any (batch <= max_num_seqs, q_len <= the threshold) plan needs."""
        index = None if self.device.type == "cpu" else (self.device.index or 0)
        sizes = []
        for q_len in range(1, max(self.reorder_batch_threshold, 1) + 1):
            ctas = _decode.max_ctas_for(index, self.num_kv_heads, self.num_q_heads, self.head_dim, q_len,
                                        self.page_size, _decode.canonical_dtype_name(self.kv_dtype),
                                        _decode.canonical_dtype_name(self.q_dtype))
            sizes += [_decode.workspace_floats(b, self.num_kv_heads, self.num_q_heads, self.head_dim, q_len, ctas)
                      for b in {1, self.max_batch}]
        return max(sizes)


class HpcXlaAttentionImpl(AttentionImpl[HpcXlaAttentionMetadata]):
    """Decodes through hpc_xla.torch.decode_attention; prefills through vLLM's Triton kernel (CPU: torch)."""

    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None, sliding_window=None,
                 kv_cache_dtype="auto", logits_soft_cap=None, attn_type=AttentionType.DECODER,
                 kv_sharing_target_layer_name=None, **unsupported):
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        refused = [name for name, given in (("alibi_slopes", alibi_slopes is not None),
                                            ("sliding_window", sliding_window not in (None, -1)),
                                            ("logits_soft_cap", logits_soft_cap not in (None, 0)),
                                            ("attn_type=%s" % attn_type, attn_type != AttentionType.DECODER))
                   if given] + sorted(k for k, v in unsupported.items() if v is not None)
        if refused:
            raise NotImplementedError("%s attention does not support %s" % (NAME, ", ".join(refused)))
        if head_size not in HEAD_SIZES:
            raise ValueError("%s attention: head_size must be one of %s; got %d" % (NAME, HEAD_SIZES, head_size))
        if num_heads % num_kv_heads or not 1 <= num_heads // num_kv_heads <= MAX_GQA:
            raise ValueError("%s attention: num_heads / num_kv_heads must be an integer in [1, %d]; got %d / %d"
                             % (NAME, MAX_GQA, num_heads, num_kv_heads))
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError("%s attention: kv_cache_dtype must be one of %s; got %r"
                             % (NAME, KV_CACHE_DTYPES, kv_cache_dtype))
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.fp8_cache = kv_cache_dtype.startswith("fp8")

    def _kv_split(self, kv_cache):  # vLLM's LBNHC [NB, Hkv, P, 2D] -> K / V views [NB, P, Hkv, D], as stored
        return kv_cache.transpose(1, 2).split(self.head_size, dim=-1)

    def _kv_views(self, kv_cache):  # ... as hpc_xla's kernels read them (an fp8 cache is stored as uint8)
        k_cache, v_cache = self._kv_split(kv_cache)
        if self.fp8_cache:
            k_cache, v_cache = k_cache.view(torch.float8_e4m3fn), v_cache.view(torch.float8_e4m3fn)
        return k_cache, v_cache

    def _scales(self, layer):
        return (layer._k_scale, layer._v_scale) if self.fp8_cache else (None, None)

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping):
        if self.kv_sharing_target_layer_name is not None or getattr(layer, FUSED_PROLOGUE, False):
            return  # the layer reads another layer's cache, or the fused prologue wrote it (key here is unrotated)
        if key.is_cuda:  # vLLM's writer (quantizes an fp8 cache itself; skips slot -1)
            from vllm import _custom_ops

            _custom_ops.reshape_and_cache_flash(key, value, *self._kv_split(kv_cache), slot_mapping,
                                                self.kv_cache_dtype, layer._k_scale, layer._v_scale)
        else:
            _torch_paths.write_kv(key, value, *self._kv_views(kv_cache), slot_mapping, *self._scales(layer))

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("%s attention does not fuse output quantization" % NAME)
        # vLLM sizes `output` with the layer's head_size_v and tells the backend nothing else of it (a model with
        # value heads of another size than q/k's would otherwise fail in a view): refused by name, at the profiling run
        if output.numel() != output.shape[0] * self.num_heads * self.head_size:
            raise NotImplementedError("%s attention needs value heads of the q/k head size %d; this layer has "
                                      "head_size_v=%s" % (NAME, self.head_size, getattr(layer, "head_size_v", "?")))
        if attn_metadata is None:  # vLLM's profiling run
            return output.fill_(0)
        m = attn_metadata
        out = output.view(output.shape[0], self.num_heads, self.head_size)
        k_cache, v_cache = self._kv_views(kv_cache)
        k_scale, v_scale = self._scales(layer)
        query = query.view(query.shape[0], self.num_heads, self.head_size)
        q_scale = m.q_scale if query.dtype == torch.float8_e4m3fn else None  # fp8 q from the fused prologue
        if m.num_decodes:
            rows = slice(0, m.num_decode_tokens)
            self._decode(query[rows], None if q_scale is None else q_scale[rows], k_cache, v_cache, m, out[rows],
                         k_scale, v_scale)
        if m.num_prefills:
            rows = slice(m.num_decode_tokens, m.num_actual_tokens)
            q = query[rows]
            if q_scale is not None:  # the prefill kernels take one q scale at most: dequantize these rows
                q = (q.float() * q_scale[rows].unsqueeze(-1)).to(out.dtype)
            self._prefill(q, k_cache, v_cache, m, out[rows], k_scale, v_scale)
        return output

    @without_grad  # (vLLM's Parameters require grad; the ops refuse that in grad mode)
    def _decode(self, q, q_scale, k_cache, v_cache, m, out, k_scale, v_scale):
        import hpc_xla.torch as ht

        nd = m.num_decodes
        ht.decode_attention(q, k_cache, v_cache, m.block_table[:nd], m.seq_lens[:nd], m.decode_plan,
                            sm_scale=self.scale, k_scale=k_scale, v_scale=v_scale, q_scale=q_scale,
                            q_len=m.decode_q_len, out=out)

    def _prefill(self, q, k_cache, v_cache, m, out, k_scale, v_scale):
        nd, end = m.num_decodes, m.num_decodes + m.num_prefills
        if q.is_cuda:
            self._prefill_triton(q, k_cache, v_cache, m, out, k_scale, v_scale)
        else:
            starts = m.query_start_loc_cpu[nd:end + 1]
            _torch_paths.prefill(q, k_cache, v_cache, m.block_table[nd:end], m.seq_lens[nd:end],
                                 (starts - starts[0]).tolist(), self.scale, k_scale, v_scale, out)

    def _prefill_triton(self, q, k_cache, v_cache, m, out, k_scale, v_scale):
        """vLLM's Triton kernel over the prefill requests [num_decodes, num_decodes + num_prefills): q / out are
        their rows, cu_seqlens_q their query starts rebased to 0."""
        from vllm.v1.attention.ops import triton_unified_attention as triton

        nd, end = m.num_decodes, m.num_decodes + m.num_prefills
        descale = None if k_scale is None else (m.num_prefills, self.num_kv_heads)
        triton.unified_attention(
            q=q, k=k_cache, v=v_cache, out=out, cu_seqlens_q=m.prefill_query_start, max_seqlen_q=m.max_query_len,
            seqused_k=m.seq_lens[nd:end], max_seqlen_k=m.max_seq_len, softmax_scale=self.scale, causal=True,
            window_size=(-1, -1), block_table=m.block_table[nd:end], softcap=0, q_descale=None,
            k_descale=None if descale is None else k_scale.expand(descale),
            v_descale=None if descale is None else v_scale.expand(descale),
            kv_quant_mode=self.kv_quant_mode)  # FP8_PER_TENSOR: the kernel applies the scales (NONE would not)


class HpcXlaAttentionBackend(AttentionBackend):
    accept_output_buffer: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list] = list(KV_CACHE_DTYPES)
    forward_includes_kv_cache_update: bool = False  # vLLM calls do_kv_cache_update, then forward

    @staticmethod
    def get_name():
        return NAME

    @staticmethod
    def get_impl_cls():
        return HpcXlaAttentionImpl

    @staticmethod
    def get_builder_cls():
        return HpcXlaAttentionMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list[int | MultipleOf]:
        return list(PAGE_SIZES)

    @classmethod
    def get_supported_head_sizes(cls):
        return list(HEAD_SIZES)

    @classmethod
    def supports_compute_capability(cls, capability):
        return (capability.major, capability.minor) == (9, 0)  # sm_90a kernels only

    @classmethod
    def supported_kv_cache_layouts(cls):
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_combination(cls, head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink, use_sparse,
                             use_mm_prefix, device_capability):
        cache = cache_dtype(kv_cache_dtype or "auto", dtype)
        if cache is not None and cache.itemsize == 2 and cache != dtype:
            return "a 16-bit KV cache must have the model's dtype (%s), not %s" % (dtype, cache)
        return None

    @classmethod
    def supports_device_cpu_query_lens_mismatch(cls):
        return False  # the batch split and the decode plan follow the CPU query lengths (adaptive verification)
