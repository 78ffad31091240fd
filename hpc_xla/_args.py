"""Python-side argument checks of the jax and torch faces: what the binary never sees as such.

Shapes, dtypes and values are validated once, in csrc. What the binary cannot judge is how a Python value was
converted on its way there -- `int(4.5)` is 4, `float("x")` fails far from the call, None has no `.shape` -- and
calls XLA never makes (it skips a custom call whose results are all empty, so csrc's checks would not run).
These helpers turn such values into errors that name the op and the argument.
"""

import contextlib
import numbers
import re

import numpy as np


def integer(op, name, value, minimum=None, maximum=None):
    """An int (Python or numpy integer; not bool, not float) within [minimum, maximum] -> int."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError("%s: %s must be an int; got %r" % (op, name, value))
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError("%s: %s must be >= %d; got %d" % (op, name, minimum, value))
    if maximum is not None and value > maximum:
        raise ValueError("%s: %s must be <= %d; got %d" % (op, name, maximum, value))
    return value


def optional_integer(op, name, value, minimum=None, maximum=None):
    return None if value is None else integer(op, name, value, minimum, maximum)


def boolean(op, name, value):
    """A bool (Python or numpy; not an int, not None) -> bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError("%s: %s must be a bool; got %r" % (op, name, value))
    return bool(value)


def real(op, name, value):
    """A real number (Python / numpy scalar or a 0-d array; not bool, not str) -> float."""
    if value is None or isinstance(value, (bool, np.bool_, str, bytes)):
        raise TypeError("%s: %s must be a number; got %r" % (op, name, value))
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError("%s: %s must be a number; got %r" % (op, name, value)) from None


def array(op, name, value):
    """Something with a shape and a dtype (a jax / numpy array, a tracer, a torch tensor)."""
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        raise TypeError("%s: %s must be an array; got %s" % (op, name, type(value).__name__))
    return value


_TORCH_TENSOR = None


def _tensor_type():
    """torch.Tensor, imported on first use (this module serves the jax face too, which must not import torch)."""
    global _TORCH_TENSOR
    if _TORCH_TENSOR is None:
        import torch

        _TORCH_TENSOR = torch.Tensor
    return _TORCH_TENSOR


def tensor(op, name, value):
    """A torch.Tensor."""
    if not isinstance(value, _tensor_type()):
        raise TypeError("%s: %s must be a torch.Tensor; got %s" % (op, name, type(value).__name__))
    return value


def tensors(op, **named):
    # on every call of a torch wrapper: one type lookup, no per-argument function call
    cls = _tensor_type()
    for name, value in named.items():
        if not isinstance(value, cls):
            raise TypeError("%s: %s must be a torch.Tensor; got %s" % (op, name, type(value).__name__))


def scale_tensors(op, device, **named):
    """Per-tensor scales of a torch op, as the JAX face takes them: a tensor stays as it is, a real number becomes a
    float32 0-d tensor on `device` (torch.full: a fill kernel, so a CUDA graph captures it with the value fixed; a
    tensor keeps a captured graph reading its current value), None stays None -> dict name -> value."""
    import torch

    out = {}
    for name, value in named.items():
        if value is None or isinstance(value, torch.Tensor):
            out[name] = value
        elif isinstance(value, (numbers.Real, np.number)) and not isinstance(value, (bool, np.bool_)):
            out[name] = torch.full((), float(value), dtype=torch.float32, device=device)
        else:
            raise TypeError("%s: %s must be a torch.Tensor, a number or None; got %s"
                            % (op, name, type(value).__name__))
    return out


def optional_tensors(op, **named):
    """Optional tensor arguments: a torch.Tensor or None (a float scale would otherwise reach torch's dispatcher
    and fail there with a message about schemas)."""
    cls = _tensor_type()
    for name, value in named.items():
        if value is not None and not isinstance(value, cls):
            raise TypeError("%s: %s must be a torch.Tensor or None; got %s" % (op, name, type(value).__name__))


def arrays(op, **named):
    for name, value in named.items():
        array(op, name, value)


def nonempty_dims(op, **dims):
    """Dimensions that size every result of a jax custom call: when one is 0, XLA skips the call and csrc never
    validates it, so the jax face checks them here (the torch face always reaches csrc)."""
    for name, value in dims.items():
        if int(value) < 1:
            raise ValueError("%s: %s must be >= 1; got %d" % (op, name, int(value)))


def renamed(error, names):
    """An error from csrc (same type) with its argument names replaced by the face's (csrc's q_out is torch rope_norm's
    out): for the checks a face leaves to csrc (strides, overlaps), so that a message names what the caller passed.
    `names`: {csrc's name: the face's} (the op's user_names: outputs the face allocates itself when the caller gives
    none, which then cannot fail these checks)."""
    msg = str(error)
    for inner, outer in names.items():
        msg = re.sub(r"(?<![\w.])%s(?!\w)" % re.escape(inner), outer, msg)  # whole names: not q_out in xq_out
    return type(error)(msg)


def as_op(error, inner, outer):
    """An error of `inner` (an op a face calls for the caller: fused_moe's routing runs moe_route) as `outer`'s: the
    caller passed these arguments to `outer` (same names) and never called `inner`. Other errors unchanged."""
    msg = str(error)
    if not msg.startswith(inner + ": "):
        return error
    return type(error)(outer + ": " + msg[len(inner) + 2:])


@contextlib.contextmanager
def speaking_as(inner, outer):
    """Re-raises the block's TypeError / ValueError of `inner` as `outer`'s (as_op): fused_moe's faces routing with
    moe_route for the caller."""
    try:
        yield
    except (TypeError, ValueError) as e:
        raise as_op(e, inner, outer) from None
