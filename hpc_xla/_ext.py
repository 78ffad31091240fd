"""The one place that loads the compiled extension `hpc_xla._hpc_xla` (the same binary for JAX and torch)."""

import functools
import importlib


@functools.lru_cache(maxsize=None)
def ext():
    try:
        return importlib.import_module("hpc_xla._hpc_xla")
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError(
            "hpc_xla's binary (hpc_xla/_hpc_xla*.so) is missing or does not load: "
            "install with `pip install .` (builds with Bazel, or nvcc+g++ without it), or run "
            "`tools/build.sh` for an in-place build. Cause: %s" % e
        ) from e


def build_info():
    """What the binary was built with: CUDA runtime, XLA FFI API version, GPU architectures."""
    return dict(ext().build_info())
