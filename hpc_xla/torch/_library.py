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
    torch.library.register_fake("hpc_xla::" + name, _one_device(name, fake), lib=LIB)
    return getattr(torch.ops.hpc_xla, name).default


def _one_device(name, fake):
    """The fake runs whenever one argument is a meta tensor, also when the others are real: the real op would
    refuse such a mix (csrc wants every tensor on one device), so the fake refuses it too instead of returning as
    if the op had run."""
    def checked(*args):
        devices = sorted({str(a.device) for a in args if isinstance(a, torch.Tensor)})
        if len(devices) > 1:
            raise ValueError("%s: all tensors must be on one device; got %s" % (name, " and ".join(devices)))
        return fake(*args)

    return checked
