"""The torch.library namespace `hpc_xla` that every torch op is defined in (one Library object per process)."""

import torch

LIB = torch.library.Library("hpc_xla", "DEF")


def define(schema, impl, fake, user_names=None):
    """Defines `hpc_xla::<name>` with one implementation for CPU and CUDA tensors (the binary dispatches on the
    tensors' device), a fake (meta) implementation for tracing, and the autograd-side kernels of an op without a
    backward (_no_backward, _bump_versions). `user_names`: schema argument -> what the Python wrapper calls it
    (rope_norm's q_out is its `out`), for the errors."""
    name = schema.split("(", 1)[0]
    LIB.define(schema)
    LIB.impl(name, impl, "CPU")
    LIB.impl(name, impl, "CUDA")
    torch.library.register_fake("hpc_xla::" + name, _one_device(name, fake), lib=LIB)
    op = getattr(torch.ops.hpc_xla, name).default
    LIB.impl(name, _no_backward(name, op, user_names or {}), "Autograd")
    LIB.impl(name, _bump_versions(op), "ADInplaceOrView", with_keyset=True)
    return op


def _bound(op, args, kwargs):
    """schema argument name -> value of one call."""
    return dict(zip((a.name for a in op._schema.arguments), args), **kwargs)


def _no_backward(name, op, user_names):
    """The op's Autograd-key kernel. The ops have no backward, and without this kernel torch's fallback leaves the
    outputs they write detached from their inputs: a gradient through them would be silently missing (zero for x in
    `residual + fused_moe(x, ...)`). So an argument that requires grad, while grad mode is on, is refused by the
    name the user passed it under; otherwise the call goes below autograd, as torch documents for a
    non-differentiable op."""
    def kernel(*args, **kwargs):
        if torch.is_grad_enabled():
            for arg, value in _bound(op, args, kwargs).items():
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    shown = user_names.get(arg, arg)
                    raise ValueError(
                        "%s: %s requires grad, but hpc_xla ops have no backward (inference only); call it under "
                        "torch.no_grad() or torch.inference_mode(), or pass %s.detach()" % (name, shown, shown))
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args, **kwargs)

    return kernel


def _bump_versions(op):
    """The op's ADInplaceOrView kernel: bumps the version counters of the tensors it writes, as torch's in-place
    ops do -- also under inference_mode, which skips the Autograd key but not this one for ordinary tensors (a
    tensor saved for a backward and then overwritten must make that backward raise, not read the new values)."""
    written = [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]

    def kernel(keyset, *args, **kwargs):
        bound = _bound(op, args, kwargs)
        torch.autograd.graph.increment_version([bound[arg] for arg in written if bound.get(arg) is not None])
        return op.redispatch(keyset & torch._C._after_ADInplaceOrView_keyset, *args, **kwargs)

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
