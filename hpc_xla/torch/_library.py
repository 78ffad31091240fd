"""The torch.library namespace `hpc_xla` that every torch op is defined in (one Library object per process)."""

import torch

LIB = torch.library.Library("hpc_xla", "DEF")


def define(schema, impl, fake, user_names=None):
    """Defines `hpc_xla::<name>` with one implementation for CPU and CUDA tensors (the binary dispatches on the
    tensors' device) and a fake (meta) implementation for tracing; returns the op as the wrappers call it
    (InferenceOnly). `user_names`: schema argument -> what the Python wrapper calls it (rope_norm's q_out is its
    `out`), for the errors."""
    name = schema.split("(", 1)[0]
    LIB.define(schema)
    LIB.impl(name, impl, "CPU")
    LIB.impl(name, impl, "CUDA")
    torch.library.register_fake("hpc_xla::" + name, _one_device(name, fake), lib=LIB)
    return InferenceOnly(name, getattr(torch.ops.hpc_xla, name).default, user_names or {})


class InferenceOnly:
    """The op as the wrappers call it (positional arguments, in schema order). The ops have no backward: torch's
    autograd fallback leaves what they write detached from their inputs, so a gradient through them would be
    silently missing (zero for x in `residual + fused_moe(x, ...)`). So an argument that requires grad, while grad
    mode is on, is refused by the name the user passed it under; and the tensors the op writes get new version
    counters, as torch's in-place ops do, also under inference_mode (a tensor saved for a backward and then
    overwritten must make that backward raise, not read the new values). Done here rather than as Autograd /
    ADInplaceOrView kernels in the dispatcher: Python kernels there cost ~9-22 us per call (measured: moe_route
    4.4 -> 13.7-26.4 us), every call, gradient or not; this costs ~1 us."""

    def __init__(self, name, op, user_names):
        self.name, self.op, self.user_names = name, op, user_names
        arguments = op._schema.arguments
        self.shown = [user_names.get(a.name, a.name) for a in arguments]
        self.written = [i for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write]

    def __call__(self, *args):
        if torch.is_grad_enabled():
            for i, value in enumerate(args):
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    raise ValueError(
                        "%s: %s requires grad, but hpc_xla ops have no backward (inference only); call it under "
                        "torch.no_grad() or torch.inference_mode(), or pass %s.detach()"
                        % (self.name, self.shown[i], self.shown[i]))
        try:
            result = self.op(*args)
        except (TypeError, ValueError) as e:
            raise self._named(e) from None
        if not torch.compiler.is_compiling():  # (a compiled graph writes its mutated inputs back with copy_, which
            # bumps them; dynamo cannot trace is_inference)
            torch.autograd.graph.increment_version(
                [args[i] for i in self.written if args[i] is not None and not args[i].is_inference()])
        return result

    _BRIDGE = "hpc_xla: argument '"

    def _named(self, error):
        """The bridge's tensor conversion (a dtype, rank or device no op takes) names the argument but no op, by the
        schema's name: said as this op's, by the caller's name (rope_norm's q_out is `out`). Other errors as they are."""
        msg = str(error)
        if not msg.startswith(self._BRIDGE) or "'" not in msg[len(self._BRIDGE):]:
            return error
        inner, rest = msg[len(self._BRIDGE):].split("'", 1)
        return type(error)("%s: %s%s" % (self.name, self.user_names.get(inner, inner), rest))


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
