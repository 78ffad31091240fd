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
    op = getattr(torch.ops.hpc_xla, name).default
    LIB.impl(name, _no_backward(name, op), "Autograd")
    return op


def _no_backward(name, op):
    """The op's Autograd-key kernel. The ops have no backward, and without this kernel torch's fallback leaves the
    outputs they write detached from their inputs: a gradient through them would be silently missing (zero for x in
    `residual + fused_moe(x, ...)`). So an argument that requires grad, while grad mode is on, is refused by name;
    otherwise the call goes below autograd (as torch documents for a non-differentiable op) and the version counters
    of the tensors the op writes are bumped, as an in-place torch op would."""
    arguments = op._schema.arguments
    names = [a.name for a in arguments]
    written = [a.name for a in arguments if a.alias_info is not None and a.alias_info.is_write]

    def kernel(*args, **kwargs):
        bound = dict(zip(names, args), **kwargs)
        if torch.is_grad_enabled():
            for arg in names:
                value = bound.get(arg)
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    raise ValueError(
                        "%s: %s requires grad, but hpc_xla ops have no backward (inference only); call it under "
                        "torch.no_grad() or torch.inference_mode(), or pass %s.detach()" % (name, arg, arg))
        with torch._C._AutoDispatchBelowAutograd():
            result = op(*args, **kwargs)
        torch.autograd.graph.increment_version([bound[arg] for arg in written if bound.get(arg) is not None])
        return result

    return kernel


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
