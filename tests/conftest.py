"""Shared test setup: which devices exist, and the `gpu` marker (Hopper only; skipped elsewhere)."""

import functools
import os

import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # jax and torch share the GPU in one process


@functools.lru_cache(maxsize=None)
def hopper_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return "missing", "-"
    return torch.__version__, torch.version.cuda


def devices():
    """Parameters for tests that run on every device: cpu always, cuda (marked gpu) on a Hopper machine."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def pytest_collection_modifyitems(config, items):
    if hopper_available():
        return
    if os.environ.get("HPC_XLA_REQUIRE_GPU") == "1" and any("gpu" in item.keywords for item in items):
        # set by the device calls (bench/calls/prelude.sh): there a missing GPU (a CPU-only torch, a wrong
        # capability) must fail the run, not skip every GPU test as if they had nothing to check
        raise pytest.UsageError("HPC_XLA_REQUIRE_GPU=1 but no Hopper GPU is visible to torch (torch %s, cuda %s)"
                                % _torch_cuda())
    skip = pytest.mark.skip(reason="needs a Hopper (sm_90) GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
