"""The one place that loads the compiled extension `hpc_xla._hpc_xla` (the same binary for JAX and torch)."""

import importlib

_EXT = None


def ext():
    """The extension module, loaded on first use (a plain global after that, which torch.compile can trace)."""
    global _EXT
    if _EXT is None:
        try:
            _EXT = importlib.import_module("hpc_xla._hpc_xla")
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError(
                "hpc_xla's binary (hpc_xla/_hpc_xla*.so) is missing or does not load: "
                "install with `pip install .` (builds with Bazel, or nvcc+g++ without it), or run "
                "`tools/build.sh` for an in-place build. Cause: %s" % e
            ) from e
    return _EXT


def build_info():
    """What the binary was built with: CUDA runtime, XLA FFI API version, GPU architectures."""
    return dict(ext().build_info())
