"""Registration of the library's XLA FFI targets with JAX, and small helpers shared by the jax ops."""

import functools

import jax
import jax.numpy as jnp

from hpc_xla._ext import ext


@functools.lru_cache(maxsize=None)
def register_targets():
    """Registers every handler of the binary for the CUDA and cpu platforms (once per process)."""
    for name, platforms in ext().ffi_targets().items():
        for platform, capsule in platforms.items():
            jax.ffi.register_ffi_target(name, capsule, platform=platform)
    return True


def absent():
    """Placeholder operand for an optional input that was not given: shape (0,) (see ffi/buffers.h)."""
    return jnp.zeros((0,), jnp.float32)


def optional(x, dtype=None):
    if x is None:
        return absent()
    return jnp.asarray(x, dtype) if dtype is not None else jnp.asarray(x)


def f32_scalar(x):
    """A per-tensor scale given as a python float, numpy or jax scalar -> float32 jax array (or absent)."""
    if x is None:
        return absent()
    return jnp.asarray(x, jnp.float32).reshape(())


def dtype_code(dtype):
    """The binary's code for a dtype (numpy / jax / torch dtype or name)."""
    from hpc_xla._decode import canonical_dtype_name

    return ext().dtype_code(canonical_dtype_name(dtype))
