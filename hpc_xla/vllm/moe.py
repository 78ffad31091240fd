"""vLLM 0.33 MoE experts on hpc_xla's fused_moe, selected with `--moe-backend hpc`. vLLM has no registry for
out-of-tree MoE backends, so the plugin in hpc_xla.vllm rebinds the names vLLM's oracles look up: fp8 models through
`hpc_moe.HPCExperts` (imported lazily by the fp8 oracle), bf16 models through `select_unquantized_backend` below
(vLLM's own unquantized oracle refuses "hpc").

FP8 models: per-tensor weights with static activation scales, and 128x128 block weights with dynamic per-token
128-column activations (DeepSeek-V3 style); bf16 models: bf16 weights and activations. The layer hands over bf16
activations (`expects_unquantized_inputs`) and hpc_xla quantizes them inside its pipeline; the top-k weighted reduce
is fused too, so vLLM's finalize does nothing. Expert parallelism: vLLM's global ids, with this rank's experts found
from `expert_map` when there is one (any placement) or as the contiguous range [ep_rank * E_local,
(ep_rank + 1) * E_local) when not.

Weight layout: vLLM converts loaded expert weights to a backend's runtime format in one function per scheme
(`convert_to_unquantized_kernel_format`, `convert_to_fp8_moe_kernel_format`), called on the first load and on every
weight reload. The plugin wraps both: for the "hpc" backends, bf16 and fp8 per-tensor w13 with I % 64 == 0 leaves
them interleaved (`hpc_xla.moe_layout.interleave_w13`), tagged `hpc_xla_interleaved` -- vLLM's replace_parameter
copies the data into the layer's parameter (same storage: CUDA graphs stay valid) and carries the tag over -- and
the experts pass `w13_interleaved` from that tag, so the grouped path computes silu(gate) * up in its gate-up GEMM's
epilogue. Weights vLLM marks as already in runtime format (is_weights_pre_processed: the weight cache's IPC loader,
whose daemon ran the conversion under the same `moe_backend`, part of its cache key) skip the conversion, and the
tag does not cross the IPC boundary: experts built in that mode (vLLM builds them inside it, `_init_moe_kernel`) take
w13 as interleaved wherever the conversion would have interleaved it (`interleavable`), which is the layout the
daemon's conversion left.
"""

import torch

import vllm.model_executor.layers.fused_moe.modular_kernel as mk
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.topk_weight_and_reduce import TopKWeightAndReduceNoOP
from vllm.model_executor.layers.quantization.utils.quant_utils import (kFp8Dynamic128Sym, kFp8Static128BlockSym,
                                                                       kFp8StaticTensorSym)
from vllm.model_executor.utils import is_weights_pre_processed
from vllm.platforms import current_platform

from hpc_xla.vllm._grad import without_grad

SCHEMES = ((kFp8StaticTensorSym, kFp8StaticTensorSym), (kFp8Static128BlockSym, kFp8Dynamic128Sym), (None, None))


class HpcXlaExperts(mk.FusedMoEExpertsModular):
    """Gate-up GEMM, SiLU*up, quantization, down GEMM and the weighted top-k reduce in hpc_xla's one pipeline."""

    def __init__(self, moe_config, quant_config):
        super().__init__(moe_config, quant_config)
        if quant_config.weight_quant_dtype not in (torch.float8_e4m3fn, None):
            raise ValueError("hpc_xla MoE experts take float8_e4m3fn or bfloat16 weights; got %s"
                             % quant_config.weight_quant_dtype)
        if moe_config.in_dtype != torch.bfloat16:
            raise ValueError("hpc_xla MoE experts write bfloat16; the model's dtype is %s" % moe_config.in_dtype)
        unsupported = unsupported_features(moe_config, quant_config)
        if unsupported:
            raise NotImplementedError("hpc_xla MoE experts do not implement %s" % ", ".join(unsupported))
        parallel = moe_config.moe_parallel_config
        self.num_local_experts = moe_config.num_local_experts
        self.expert_offset = parallel.ep_rank * moe_config.num_local_experts if parallel.use_ep else 0
        if quant_config.weight_quant_dtype is None:
            self.quant = None
        else:
            self.quant = "fp8_block128" if quant_config.is_block_quantized else "fp8_tensor"
        # Built under vLLM's weights_already_processed (the IPC weight cache): w13 is in the runtime format the
        # daemon's conversion made, without our tag (see the module docstring).
        self.weights_pre_processed = is_weights_pre_processed()

    @property
    def expects_unquantized_inputs(self):
        return True  # quantized inside the pipeline (static per-tensor or dynamic per 128 columns)

    @staticmethod
    def activation_format():
        return mk.FusedMoEActivationFormat.Standard

    @staticmethod
    def _supports_current_device():
        return current_platform.is_cuda() and current_platform.is_device_capability(90)

    @staticmethod
    def _supports_no_act_and_mul():
        return False

    @staticmethod
    def _supports_quant_scheme(weight_key, activation_key):
        return (weight_key, activation_key) in SCHEMES

    @staticmethod
    def _supports_activation(activation):
        return activation == MoEActivation.SILU

    @staticmethod
    def _supports_shape(hidden_dim):
        return hidden_dim % 128 == 0

    @staticmethod
    def is_supported_config(cls, moe_config, weight_key, activation_key, activation_format):
        """vLLM's checks, then what they leave out that fused_moe's CUDA path refuses -- so selection refuses the
        layer by name before its weights load (a Qwen3-30B-A3B at TP=8, I = 768 / 8 = 96 per rank, passed selection
        and failed at the profile run's workspace size; an fp16 model failed in the constructor): bfloat16
        activations, and I per partition a multiple of 64 (128 with block-128 weight scales)."""
        ok, reason = mk.FusedMoEExperts.is_supported_config(cls, moe_config, weight_key, activation_key,
                                                            activation_format)
        if not ok:
            return ok, reason
        if moe_config.in_dtype != torch.bfloat16:
            return False, "kernel does not support %s activations (bfloat16 only)" % moe_config.in_dtype
        inter, multiple = moe_config.intermediate_size_per_partition, 128 if weight_key == kFp8Static128BlockSym else 64
        if inter % multiple:
            return False, ("kernel does not support intermediate size %d per partition (a multiple of %d: "
                           "fewer tensor-parallel ranks, or expert parallelism)" % (inter, multiple))
        return True, None

    @staticmethod
    def _supports_parallel_config(moe_parallel_config):
        return True

    def supports_expert_map(self):
        return True

    def supports_chunking(self):
        return True

    def finalize_weight_and_reduce_impl(self):
        return TopKWeightAndReduceNoOP()  # the weighted reduce happens inside fused_moe

    def workspace_shapes(self, M, N, K, topk, global_num_experts, local_num_experts, expert_tokens_meta, activation):
        """workspace2 carries fused_moe's scratch, so it comes from vLLM's workspace manager (one buffer shared by
        every layer, sized by the profile run) instead of an allocation per layer and step. Its bytes are
        fused_moe_workspace_size(M), the most any call of <= M tokens needs: a call's own need is not monotone in
        M, and the manager refuses to grow once the profile run has locked it. workspace13 is unused (vLLM would
        place it on the output's storage), the shape's first dim is M as vLLM asks, its dtype the activations'."""
        from hpc_xla.torch import fused_moe_workspace_size

        if M == 0:
            return (0,), (0,), (0, K)
        need = fused_moe_workspace_size(M, topk, local_num_experts, K, N // 2, self.quant,
                                        num_experts_global=global_num_experts,
                                        w13_interleaved=self._expects_interleaved(N // 2))
        item = self.workspace_dtype(self.moe_config.in_dtype).itemsize
        return (0,), (M, -(-need // (M * item))), (M, K)

    def _expects_interleaved(self, inter):
        """Whether this layer's w13 will be interleaved: our conversion interleaves every hpc layer's w13 where
        `interleavable` (workspace_shapes sees no weights; apply falls back to fused_moe's own scratch if a w13
        arrives in vLLM's layout after all, whose need is larger)."""
        from hpc_xla.moe_layout import interleavable

        return interleavable(self.quant, inter)

    @without_grad  # (vLLM's Parameters require grad; the ops refuse that in grad mode)
    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, global_num_experts, expert_map,
              a1q_scale, a2_scale, workspace13, workspace2, expert_tokens_meta, apply_router_weight_on_input):
        import hpc_xla.torch as ht

        if not self._supports_activation(activation):
            raise ValueError("hpc_xla MoE experts: activation must be silu; got %s" % activation)
        if getattr(self, "post_gemm2_hook", None) is not None:  # a model's own top-k reduction: ours is fused in
            raise NotImplementedError("hpc_xla MoE experts reduce the top-k inside fused_moe; this layer installs "
                                      "post_gemm2_hook (its own reduction), which they cannot run")
        qc = self.quant_config
        if apply_router_weight_on_input:  # the layer already scaled x by the (top-1) weight
            topk_weights = torch.ones_like(topk_weights)
        if expert_map is not None:  # global id -> local id, -1 elsewhere (adds 0); negative ids stay negative
            ids = topk_ids.long()
            topk_ids = torch.where(ids >= 0, expert_map[ids.clamp(min=0)], -1)
            offset = 0
        else:
            offset = self.expert_offset
        experts = global_num_experts  # the routing's expert count: it sizes the pipeline's tiles
        scales = {} if self.quant is None else dict(w13_scale=qc.w1_scale, w2_scale=qc.w2_scale)
        if self.quant == "fp8_tensor":
            if qc.a1_scale is None or qc.a2_scale is None:
                raise ValueError("hpc_xla MoE experts: fp8 per-tensor needs static activation scales "
                                 "(the checkpoint's input_scale)")
            scales = dict(w13_scale=_per_expert(qc.w1_scale, w1, "w13"), w2_scale=_per_expert(qc.w2_scale, w2, "w2"),
                          a13_scale=qc.a1_scale.reshape(()).float(), a2_scale=qc.a2_scale.reshape(()).float())
        interleaved = self._w13_interleaved(w1)
        # workspace2 was sized for an interleaved w13 where one was expected: too small for vLLM's layout
        fits = interleaved or not self._expects_interleaved(w1.shape[1] // 2)
        ht.fused_moe(hidden_states, w1, w2, topk_weights.float(), topk_ids.int(), quant=self.quant,
                     expert_offset=offset, num_experts_global=experts, out=output, w13_interleaved=interleaved,
                     workspace=_bytes_of(workspace2) if fits else None, **scales)

    def _w13_interleaved(self, w1):
        """Whether w1 holds w13 in fused_moe's interleaved layout: tagged by our conversion, or pre-processed weights
        of a shape that conversion interleaves."""
        from hpc_xla.moe_layout import interleavable

        if getattr(w1, "hpc_xla_interleaved", False):
            return True
        return self.weights_pre_processed and w1.dim() == 3 and interleavable(self.quant, w1.shape[1] // 2)


def _bytes_of(workspace2):
    """vLLM's workspace2 (M x bytes-per-token of the activations' dtype, a 256-byte aligned slice of the manager's
    buffer) as the flat uint8 scratch fused_moe takes; None where vLLM handed none (fused_moe then allocates)."""
    if workspace2 is None or workspace2.numel() == 0:
        return None
    return workspace2.reshape(-1).view(torch.uint8)


def _interleaved_for_hpc(w13, quant):
    """w13 [E, 2I, H] in vLLM's layout -> the interleaved copy fused_moe reads with w13_interleaved=True, tagged for
    the experts; w13 itself where fused_moe keeps vLLM's layout (moe_layout.interleavable)."""
    from hpc_xla.moe_layout import interleavable, interleave_w13

    if w13.dim() != 3 or w13.shape[1] % 2 or not interleavable(quant, w13.shape[1] // 2):
        return w13
    out = interleave_w13(w13).contiguous()
    out.hpc_xla_interleaved = True
    return out


def convert_unquantized(vllm_convert, unquantized_backend, moe_config, w13_weight, w2_weight, layer=None):
    """Stands in for vLLM's convert_to_unquantized_kernel_format: "hpc" layers (run on the TRITON backend's terms,
    see select_unquantized_backend) get the interleaved w13; the others vLLM's conversion."""
    w13_new, w2_new = vllm_convert(unquantized_backend, moe_config=moe_config, w13_weight=w13_weight,
                                   w2_weight=w2_weight, layer=layer)
    if getattr(moe_config, "moe_backend", None) == "hpc":
        w13_new = _interleaved_for_hpc(w13_new, None)
    return w13_new, w2_new


def convert_fp8(vllm_convert, fp8_backend, layer, w13, w2, w13_scale, w2_scale, w13_input_scale, w2_input_scale):
    """Stands in for vLLM's convert_to_fp8_moe_kernel_format: the HPC backend's per-tensor layers get the interleaved
    w13 (128x128 block weights keep vLLM's layout: their scales span 128 rows)."""
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend

    w13, w2, w13_scale, w2_scale = vllm_convert(fp8_backend=fp8_backend, layer=layer, w13=w13, w2=w2,
                                                w13_scale=w13_scale, w2_scale=w2_scale,
                                                w13_input_scale=w13_input_scale, w2_input_scale=w2_input_scale)
    # Per-tensor layers: vLLM's own fp8 methods set weight_block_size = None on them (Fp8MoEMethod, compressed-tensors
    # w8a8), ModelOpt's leave it unset -- only a block size marks 128x128 block weights.
    if fp8_backend == Fp8MoeBackend.HPC and getattr(layer, "weight_block_size", None) is None:
        w13 = _interleaved_for_hpc(w13, "fp8_tensor")
    return w13, w2, w13_scale, w2_scale


def unsupported_features(moe_config, quant_config=None):
    """What a layer asks for that fused_moe does not compute (vLLM's experts selection checks none of these, and
    ignoring them would give wrong output silently): expert biases and the SwiGLU clamp / alpha / beta variants."""
    named = [("has_bias", moe_config.has_bias), ("swiglu_limit", moe_config.swiglu_limit),
             ("swiglu_alpha", moe_config.swiglu_alpha), ("swiglu_beta", moe_config.swiglu_beta)]
    if quant_config is not None:
        named += [(n, getattr(quant_config, n, None)) for n in ("w1_bias", "w2_bias", "gemm1_alpha", "gemm1_beta",
                                                                  "gemm1_clamp_limit")]
    return [n for n, v in named if v not in (None, False)]


def _per_expert(scale, weight, name):
    """vLLM keeps one per-tensor scale per expert (w13's two shards requantized to their max at load time)."""
    if scale.numel() != weight.shape[0]:
        raise ValueError("hpc_xla MoE experts: %s weight scale must hold one value per expert (%d); got shape %s"
                         % (name, weight.shape[0], tuple(scale.shape)))
    return scale.reshape(weight.shape[0]).float()


def select_unquantized_backend(vllm_select, moe_config):
    """Stands in for vLLM's select_unquantized_moe_backend (bf16 MoE layers): "hpc" -> these experts on the TRITON
    backend's terms (vLLM's w13 [E, 2I, H] / w2 [E, H, I] layout as loaded, no padding, modular prepare/finalize);
    any other choice -> vLLM's own selection."""
    if moe_config.moe_backend != "hpc":
        return vllm_select(moe_config=moe_config)
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend

    # the format vLLM's own selection would build the experts for (DeepEP-LL style all2all: batched), so such a layer
    # is refused here by name instead of failing later in the experts' constructor
    fmt = (mk.FusedMoEActivationFormat.BatchedExperts if moe_config.moe_parallel_config.use_batched_activation_format
           else mk.FusedMoEActivationFormat.Standard)
    ok, reason = HpcXlaExperts.is_supported_config(HpcXlaExperts, moe_config, None, None, fmt)
    unsupported = unsupported_features(moe_config) if ok else []
    if unsupported:
        ok, reason = False, "kernel does not support " + ", ".join(unsupported)
    if not ok:
        raise ValueError("--moe-backend hpc: hpc_xla's MoE experts cannot run this bf16 layer: %s" % reason)
    return UnquantizedMoeBackend.TRITON, HpcXlaExperts
