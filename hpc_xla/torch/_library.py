"""The torch.library namespace `hpc_xla` that every torch op is defined in (one Library object per process)."""

import torch

LIB = torch.library.Library("hpc_xla", "DEF")


def define(schema, impl, fake):
    """Defines `hpc_xla::<name>` with one implementation for CPU and CUDA tensors (the binary dispatches on the
    tensors' device) and a fake (meta) implementation for tracing."""
    name = schema.split("(", 1)[0]
    LIB.define(schema)
    LIB.impl(name, impl, "CPU")
    LIB.impl(name, impl, "CUDA")
    torch.library.register_fake("hpc_xla::" + name, fake, lib=LIB)
    return getattr(torch.ops.hpc_xla, name).default
