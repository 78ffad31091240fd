"""Bit-exact moves of numpy arrays (ml_dtypes bfloat16/float8 included) to and from torch, used by the demo
and the tests to feed both frameworks the same bytes."""

import numpy as np


def _torch_dtypes():
    import ml_dtypes
    import torch

    return {np.dtype(ml_dtypes.bfloat16): torch.bfloat16, np.dtype(np.float16): torch.float16,
            np.dtype(ml_dtypes.float8_e4m3fn): torch.float8_e4m3fn}


def to_torch(x, device):
    """numpy array (or scalar, or None) -> torch tensor on `device` with the same bytes."""
    import torch

    if x is None:
        return None
    x = np.asarray(x)
    if x.ndim == 0:
        return torch.tensor(x.item(), dtype=torch.float32, device=device)
    dtype = _torch_dtypes().get(x.dtype)
    if dtype is None:
        return torch.from_numpy(x.copy()).to(device)
    if x.size == 0:  # (no bytes to move; the byte view below would fail on an empty array's strides)
        return torch.empty(x.shape, dtype=dtype, device=device)
    raw = torch.from_numpy(np.ascontiguousarray(x).view(np.uint8).copy())
    return raw.view(dtype).to(device)


def from_torch(t):
    """torch tensor -> numpy array with the same bytes (bfloat16/float8 as ml_dtypes)."""
    import torch

    back = {v: k for k, v in _torch_dtypes().items()}
    t = t.detach().cpu().contiguous()
    if t.dtype in back:
        if t.numel() == 0:  # (the byte view below needs bytes)
            return np.empty(tuple(t.shape), back[t.dtype])
        return t.view(torch.uint8).numpy().view(back[t.dtype]).reshape(tuple(t.shape))
    return t.numpy()
