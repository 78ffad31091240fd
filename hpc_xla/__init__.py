"""hpc_xla: Hopper (sm_90a) attention and MoE kernels for LLM serving, one binary for JAX and PyTorch.

    import hpc_xla.jax as hj      # jax functions (XLA FFI custom calls; work under jax.jit)
    import hpc_xla.torch as ht    # torch ops (torch.ops.hpc_xla.*; torch.compile / CUDA-graph safe)

Every op also runs on the CPU (a reference implementation), so both frameworks work without a GPU.
Importing `hpc_xla` alone imports neither framework.
"""

__version__ = "0.1.0"

from hpc_xla._ext import build_info  # noqa: E402,F401
