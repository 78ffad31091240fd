"""The adapter's entry points into hpc_xla's torch ops, outside autograd."""

import functools

import torch


def without_grad(fn):
    """Runs fn with grad mode off. vLLM calls the adapter under inference_mode, where this is a flag test (~0.2 us);
    a call outside it (a test, a plugin's warm-up) gets torch.no_grad(): vLLM's Parameters require grad by
    default, which hpc_xla's torch ops refuse in grad mode. (torch.no_grad() as the decorator cost ~1.8 us on every
    call, 3 per layer per step in eager mode.)"""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not torch.is_grad_enabled():
            return fn(*args, **kwargs)
        with torch.no_grad():
            return fn(*args, **kwargs)

    return call
