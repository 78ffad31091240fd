"""hpc_xla as a vLLM 0.33 plugin: `--attention-backend HPC_ATTN` and `--moe-backend hpc` run hpc_xla's kernels.

    pip install "hpc-xla[vllm]"     # the entry point below is in hpc_xla's package metadata
    vllm serve MODEL --attention-backend HPC_ATTN --moe-backend hpc

vLLM calls `register()` in every process (entry-point group `vllm.general_plugins`, name `hpc_xla`; filter with
VLLM_PLUGINS). It points vLLM's HPC names at hpc_xla: the HPC_ATTN member of AttentionBackendEnum (a new member
cannot take an in-tree name, and vLLM resolves a backend by the enum name its get_name() returns), the
`hpc_moe.HPCExperts` class that vLLM's fp8 MoE oracle imports lazily for "hpc" and the bf16 MoE layers' backend
selection (vLLM has no registry for out-of-tree MoE backends; its unquantized oracle refuses "hpc"), and
`HpcRopeNorm`, the fused QK-norm + RoPE + KV-write prologue that models such as HunYuan V3 build when the backend
is HPC_ATTN (without this, they would need Tencent's `hpc` package). Idempotent.
What each does: hpc_xla.vllm.attention, hpc_xla.vllm.moe, hpc_xla.vllm.rope_norm.
"""

import logging
import sys

ATTENTION_BACKEND = "hpc_xla.vllm.attention.HpcXlaAttentionBackend"


def register():
    """vLLM's entry point. A failure is logged, not raised: vLLM runs plugins in every process, and one that cannot
    load hpc_xla (say, no binary for this Python) must not stop deployments that do not use it."""
    try:
        _register()
    except Exception as e:  # noqa: BLE001 -- reported, and vLLM's own HPC names stay as they were
        logging.getLogger("hpc_xla.vllm").error("hpc_xla's vLLM plugin is not registered: %s: %s",
                                                type(e).__name__, e)


def _register():
    from vllm.model_executor.layers import hpc as hpc_layers
    from vllm.model_executor.layers.fused_moe import hpc_moe, unquantized_fused_moe_method
    from vllm.model_executor.layers.hpc import rope_norm as hpc_rope_norm
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from hpc_xla.vllm.moe import HpcXlaExperts, convert_fp8, convert_unquantized, select_unquantized_backend
    from hpc_xla.vllm.rope_norm import HpcXlaRopeNorm

    register_backend(AttentionBackendEnum.HPC_ATTN, ATTENTION_BACKEND)
    hpc_moe.HPCExperts = HpcXlaExperts
    select = unquantized_fused_moe_method.select_unquantized_moe_backend
    if not getattr(select, "hpc_xla", False):  # bf16 MoE layers: "hpc" -> ours, anything else -> vLLM's choice
        def select_hpc_xla(moe_config, _vllm_select=select):
            return select_unquantized_backend(moe_config, _vllm_select)

        select_hpc_xla.hpc_xla = True
        unquantized_fused_moe_method.select_unquantized_moe_backend = select_hpc_xla
    _wrap_weight_conversions(convert_unquantized, convert_fp8)
    # models import the name from the package when they are built, normally after the plugins ran
    hpc_layers.HpcRopeNorm = hpc_rope_norm.HpcRopeNorm = HpcXlaRopeNorm
    for name in ("vllm.model_executor.models.hy_v3",):
        if name in sys.modules:
            sys.modules[name].HpcRopeNorm = HpcXlaRopeNorm


# Where vLLM's quant methods find the two weight conversions (imported by name at module load, or from the oracle
# modules at call time: both are rebound; a module imported later takes the oracle's, already ours).
_UNQUANTIZED_CONVERT = ("vllm.model_executor.layers.fused_moe.oracle.unquantized",
                        "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method")
_FP8_CONVERT = ("vllm.model_executor.layers.fused_moe.oracle.fp8", "vllm.model_executor.layers.quantization.fp8",
                "vllm.model_executor.layers.quantization.modelopt",
                ("vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe."
                 "compressed_tensors_moe_w8a8_fp8"))


def _wrap_weight_conversions(convert_unquantized, convert_fp8):
    """The hpc backends' w13 layout (hpc_xla.vllm.moe): vLLM's conversions wrapped where the quant methods call them.
    Idempotent (a wrapped function is marked)."""
    import importlib

    for modules, name, ours in ((_UNQUANTIZED_CONVERT, "convert_to_unquantized_kernel_format", convert_unquantized),
                                (_FP8_CONVERT, "convert_to_fp8_moe_kernel_format", convert_fp8)):
        source = importlib.import_module(modules[0])
        vllm_fn = getattr(source, name)
        if not getattr(vllm_fn, "hpc_xla", False):
            def wrapped(*args, _vllm=vllm_fn, _ours=ours, **kwargs):
                return _ours(_vllm, *args, **kwargs)

            wrapped.hpc_xla = True
            setattr(source, name, wrapped)
            vllm_fn = wrapped
        for module in modules[1:]:
            if module in sys.modules and hasattr(sys.modules[module], name):  # a later import takes the source's
                setattr(sys.modules[module], name, vllm_fn)
