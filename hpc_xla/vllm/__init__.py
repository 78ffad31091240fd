"""hpc_xla as a vLLM 0.33 plugin: `--attention-backend HPC_ATTN` and `--moe-backend hpc` run hpc_xla's kernels.

    pip install "hpc-xla[vllm]"     # the entry point below is in hpc_xla's package metadata
    vllm serve MODEL --attention-backend HPC_ATTN --moe-backend hpc

vLLM calls `register()` in every process (entry-point group `vllm.general_plugins`, name `hpc_xla`; filter with
VLLM_PLUGINS). It points vLLM's two HPC names at hpc_xla: the HPC_ATTN member of AttentionBackendEnum (a new
member cannot take an in-tree name, and vLLM resolves a backend by the enum name its get_name() returns) and the
`hpc_moe.HPCExperts` class that vLLM's fp8 MoE oracle imports lazily for "hpc" (vLLM has no registry for
out-of-tree MoE backends). Idempotent. What each side does: hpc_xla.vllm.attention and hpc_xla.vllm.moe.
"""

ATTENTION_BACKEND = "hpc_xla.vllm.attention.HpcXlaAttentionBackend"


def register():
    from vllm.model_executor.layers.fused_moe import hpc_moe
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from hpc_xla.vllm.moe import HpcXlaExperts

    register_backend(AttentionBackendEnum.HPC_ATTN, ATTENTION_BACKEND)
    hpc_moe.HPCExperts = HpcXlaExperts
