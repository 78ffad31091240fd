"""torch face of hpc_xla: ops registered as torch.ops.hpc_xla.* (with fake impls, so they trace under
torch.compile and capture into CUDA graphs), plus documented wrappers that allocate outputs when not given.
"""

from hpc_xla import _args
from hpc_xla.torch.attention import DecodePlan, decode_attention, decode_plan
from hpc_xla.torch.moe import fused_moe, fused_moe_workspace_size, moe_route
from hpc_xla.torch.rope_norm import rope_norm

__all__ = ["DecodePlan", "decode_attention", "decode_plan", "fused_moe", "fused_moe_workspace_size", "moe_route",
           "rope_norm"]

# torch.Tensor for the argument checks, bound now: bound lazily on the first call, it made torch.compile guard on
# the global and recompile the first compiled function once (a review of session 41)
_args._tensor_type()
