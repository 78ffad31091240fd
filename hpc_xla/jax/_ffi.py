"""Registration of the library's XLA FFI targets with JAX, and small helpers shared by the jax ops."""

import functools
import os
import re

import jax
import jax.numpy as jnp

from hpc_xla import _args
from hpc_xla._ext import ext


# XLA FFI C API minor version of each jaxlib release line (the XLA_FFI_API_MINOR of its headers, read from the
# wheels: 0.6.2 / 0.7.0 -> 1, 0.8.1 - 0.9.0 -> 2, 0.9.1 - 0.10.2 -> 3, 0.11.2 -> 4; jax 0.8.0 reported 0.1 at run
# time). Only the fallback where the running jaxlib's own header cannot be read (installed_ffi_minor): a newer release
# is assumed to accept the last known minor, the conservative side (the minor only grows).
_FFI_MINOR_SINCE = ((0, 11, 2), 4), ((0, 9, 1), 3), ((0, 8, 1), 2), ((0, 0, 0), 1)


def release_tuple(jaxlib_version):
    """(major, minor, patch) of a version string; a non-numeric part ("1rc1", "dev2026") ends it."""
    return tuple(int(p) for p in jaxlib_version.split(".")[:3] if p.isdigit())


def runtime_ffi_minor(jaxlib_version):
    """The XLA FFI API minor version a jaxlib release accepts handlers up to, from the table above."""
    v = release_tuple(jaxlib_version)
    return next(minor for since, minor in _FFI_MINOR_SINCE if v >= since)


def header_ffi_minor(path):
    """XLA_FFI_API_MINOR of the c_api.h at path, or None where the file is missing or names none."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^#define XLA_FFI_API_MINOR (\d+)", text, re.M)
    return int(m.group(1)) if m else None


def installed_ffi_minor(jaxlib_module):
    """The FFI API minor the running jaxlib accepts: its wheel ships the XLA headers it was built from, so their
    XLA_FFI_API_MINOR is exact for any release (a stale table once refused jaxlib 0.11.2's own API 0.4 handlers);
    the table where the header is absent."""
    header = os.path.join(os.path.dirname(jaxlib_module.__file__), "include", "xla", "ffi", "api", "c_api.h")
    minor = header_ffi_minor(header)
    return runtime_ffi_minor(jaxlib_module.__version__) if minor is None else minor


def check_ffi_compatible(binary_api, jaxlib_version, accepted=None):
    """Raises ImportError where the binary's handlers are newer than the running jaxlib accepts (accepted: its FFI
    API minor; the release table's where not given): registering them anyway would fail the JAX backend's start for
    the whole process (every later jax call, not only ours)."""
    major, minor = binary_api
    if accepted is None:
        accepted = runtime_ffi_minor(jaxlib_version)
    if major == 0 and minor > accepted:
        raise ImportError(
            "hpc_xla was built against XLA FFI API 0.%d headers (a newer jaxlib than the running %s, which accepts up "
            "to 0.%d): rebuild it against this jaxlib (pip install --no-build-isolation .) or upgrade jax/jaxlib"
            % (minor, jaxlib_version, accepted))


@functools.lru_cache(maxsize=None)
def register_targets():
    """Registers every handler of the binary for the CUDA and cpu platforms (once per process), after checking that
    the running jaxlib accepts their FFI API version."""
    import jaxlib

    check_ffi_compatible(tuple(ext().build_info()["xla_ffi_api_version"]), jaxlib.__version__,
                         installed_ffi_minor(jaxlib))
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
    if isinstance(x, (str, bytes)):  # jnp.asarray parses "0.3" into 0.3
        raise TypeError("%s: %s must be a number or a float32 array (a per-tensor scale); got %r" % (op, name, x))
    x = jnp.asarray(x, jnp.float32)
    if x.size != 1:
        raise ValueError("%s: %s must be one float32 value (a per-tensor scale); got shape %s" % (op, name, x.shape))
    return x.reshape(())
