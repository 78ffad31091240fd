"""MoE ops for JAX (DESIGN.md API items 4 and 5). moe_route: router logits -> (topk_weights, topk_ids)."""

import jax
import jax.numpy as jnp
import numpy as np

from hpc_xla import _options
from hpc_xla.jax import _ffi


def moe_route(router_logits, top_k, *, scoring="softmax", renormalize=True, num_groups=None, topk_groups=None,
              correction_bias=None, routed_scaling=1.0):
    """Top-k expert routing.

    Args:
      router_logits: [T, E] float32 / bfloat16 / float16.
      scoring: "softmax" (over all experts) or "sigmoid" (per expert).
      correction_bias: optional [E], added to the scores for SELECTION only (DeepSeek-V3).
      num_groups / topk_groups: grouped top-k: experts in num_groups equal groups, only the topk_groups best
        groups (sum of their two best scores with a bias, else their best score) are eligible.
      renormalize: divide the k weights by their sum; routed_scaling multiplies them afterwards.
    Returns (topk_weights [T, k] float32, topk_ids [T, k] int32), best expert first; ties -> lower index.
    """
    groups, kept = _options.groups_or_default(num_groups, topk_groups)
    tokens = router_logits.shape[0]
    call = jax.ffi.ffi_call("hpc_xla_moe_route",
                            (jax.ShapeDtypeStruct((tokens, top_k), jnp.float32),
                             jax.ShapeDtypeStruct((tokens, top_k), jnp.int32)),
                            vmap_method="sequential")
    return tuple(call(router_logits, _ffi.optional(correction_bias), top_k=np.int32(top_k),
                      scoring=np.int32(_options.scoring_code(scoring)), renormalize=bool(renormalize),
                      num_groups=np.int32(groups), topk_groups=np.int32(kept),
                      routed_scaling=np.float32(routed_scaling)))
