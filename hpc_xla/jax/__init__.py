"""JAX face of hpc_xla: functions that lower to XLA FFI custom calls (CUDA and CPU), usable under jax.jit.

Caches are updated functionally with input_output_aliases: donate them (`jax.jit(..., donate_argnums=...)`)
and the update happens in place.
"""

from hpc_xla.jax._ffi import register_targets as _register_targets
from hpc_xla.jax.attention import DecodePlan, decode_attention, decode_plan
from hpc_xla.jax.moe import fused_moe, moe_route
from hpc_xla.jax.rope_norm import rope_norm

_register_targets()

__all__ = ["DecodePlan", "decode_attention", "decode_plan", "fused_moe", "moe_route", "rope_norm"]
