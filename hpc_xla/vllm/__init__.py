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


# Why the last register() in this process failed ("Type: message"), None after a success (hpc_xla.vllm.unavailable).
registration_error = None


def register():
    """vLLM's entry point. A failure is logged, not raised: vLLM runs plugins in every process, and one that cannot
    load hpc_xla (say, no binary for this Python) must not stop deployments that do not use it. Deployments that do
    (--attention-backend HPC_ATTN) get that failure when vLLM resolves the backend (_point_hpc_attn_at_failure)."""
    global registration_error
    try:
        _register()
        registration_error = None
    except Exception as e:  # noqa: BLE001 -- reported here and where HPC_ATTN is resolved
        registration_error = "%s: %s" % (type(e).__name__, e)
        logging.getLogger("hpc_xla.vllm").error("hpc_xla's vLLM plugin is not registered: %s", registration_error)
        _point_hpc_attn_at_failure()


def _point_hpc_attn_at_failure():
    """Left alone, HPC_ATTN would resolve to vLLM's Tencent-backed class, which runs another package's kernels or
    fails naming it: point it at hpc_xla.vllm.unavailable, which raises this process's registration error."""
    try:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

        register_backend(AttentionBackendEnum.HPC_ATTN, "hpc_xla.vllm.unavailable.HpcXlaAttentionBackend")
    except Exception:  # noqa: BLE001 -- vLLM's registry itself did not import: there is no name to point
        pass


def _register():
    from vllm.model_executor.layers import hpc as hpc_layers
    from vllm.model_executor.layers.fused_moe import hpc_moe
    from vllm.model_executor.layers.hpc import rope_norm as hpc_rope_norm
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from hpc_xla.vllm.moe import HpcXlaExperts
    from hpc_xla.vllm.rope_norm import HpcXlaRopeNorm

    register_backend(AttentionBackendEnum.HPC_ATTN, ATTENTION_BACKEND)
    hpc_moe.HPCExperts = HpcXlaExperts
    _wrap_vllm_functions()  # bf16 backend selection, the weight conversions
    # models import the name from the package when they are built, normally after the plugins ran
    hpc_layers.HpcRopeNorm = hpc_rope_norm.HpcRopeNorm = HpcXlaRopeNorm
    for name in ("vllm.model_executor.models.hy_v3",):
        if name in sys.modules:
            sys.modules[name].HpcRopeNorm = HpcXlaRopeNorm


# vLLM functions hpc_xla stands in for (hpc_xla.vllm.moe: ours(vllm_fn, *args) decides, vLLM's otherwise), each with
# the modules that hold it: the defining one first, then those that imported it by name at module load (rebound if
# already imported; one imported later takes the defining module's, already ours).
_WRAPPED = (
    ("select_unquantized_moe_backend", "select_unquantized_backend",  # bf16 MoE layers: "hpc" -> our experts
     ("vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method",)),
    ("convert_to_unquantized_kernel_format", "convert_unquantized",  # the hpc backends' w13 layout
     ("vllm.model_executor.layers.fused_moe.oracle.unquantized",
      "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method")),
    ("convert_to_fp8_moe_kernel_format", "convert_fp8",
     ("vllm.model_executor.layers.fused_moe.oracle.fp8", "vllm.model_executor.layers.quantization.fp8",
      "vllm.model_executor.layers.quantization.modelopt",
      ("vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe."
       "compressed_tensors_moe_w8a8_fp8"))),
)


def _wrap_vllm_functions():
    """Rebinds each function of _WRAPPED to a wrapper calling ours with vLLM's. Idempotent (a wrapper is marked)."""
    import importlib

    from hpc_xla.vllm import moe

    for name, ours_name, modules in _WRAPPED:
        ours = getattr(moe, ours_name)
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
