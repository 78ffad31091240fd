"""Registration of the library's XLA FFI targets with JAX, and small helpers shared by the jax ops."""

import functools

import jax
import jax.numpy as jnp

from hpc_xla import _args
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


def optional(op, name, x):
    """An optional array operand: the array, or the absent placeholder for None. A given array of the placeholder's
    shape (0,) would read as "absent" on the other side (ffi/buffers.h), so it is refused here; other empty shapes
    (e.g. shared_output [0, H] at T=0) are real operands."""
    if x is None:
        return absent()
    x = jnp.asarray(_args.array(op, name, x))
    if x.shape == (0,):
        raise ValueError("%s: %s is empty (shape (0,)); pass None to leave it out" % (op, name))
    return x


def f32_scalar(op, name, x):
    """A per-tensor scale given as a python float, numpy or jax scalar -> float32 jax array (or absent)."""
    if x is None:
        return absent()
    x = jnp.asarray(x, jnp.float32)
    if x.size != 1:
        raise ValueError("%s: %s must be one float32 value (a per-tensor scale); got shape %s" % (op, name, x.shape))
    return x.reshape(())
