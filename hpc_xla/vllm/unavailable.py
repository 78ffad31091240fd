"""Where vLLM's HPC_ATTN points when hpc_xla's plugin failed to register in this process (hpc_xla.vllm.register):
resolving the backend raises that failure, instead of vLLM's Tencent-backed default running another package's
kernels or failing with an error that names it."""

import hpc_xla.vllm as _plugin


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise ImportError("--attention-backend HPC_ATTN: hpc_xla's vLLM plugin did not register in this process (%s); "
                      "its error is also logged by the hpc_xla.vllm logger at startup" % _plugin.registration_error)
