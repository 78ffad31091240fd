"""The README's "Using it" torch lines run as written (a review found them reusing the JAX lines' plan, which the
torch op refuses, and a plan without the fp8 cache's kv_dtype)."""

import os
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _readme_torch_attention_lines():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "README.md")) as f:
        text = f.read()
    block = re.search(r"## Using it\n\n```python\n(.*?)```", text, re.S).group(1)
    start = block.index("import hpc_xla.torch as ht")
    return block[start:block.index("\n# MoE", start)]


def test_readme_torch_attention_example_runs():
    rng = np.random.default_rng(0)
    T, Hq, Hkv, D, P, NB = 2, 64, 8, 128, 64, 4
    seq_lens = torch.tensor([70, 5], dtype=torch.int32)
    rot = np.arange(0, D, 2) / D
    freqs = np.arange(128)[:, None] * (1.0 / 10000.0 ** rot)[None]
    env = dict(
        torch=torch,
        q=torch.from_numpy(rng.standard_normal((T, Hq, D), np.float32)).bfloat16(),
        k=torch.from_numpy(rng.standard_normal((T, Hkv, D), np.float32)).bfloat16(),
        v=torch.from_numpy(rng.standard_normal((T, Hkv, D), np.float32)).bfloat16(),
        positions=torch.tensor([69, 4], dtype=torch.int32),  # each sequence's new token
        cos_sin_cache=torch.from_numpy(np.concatenate([np.cos(freqs), np.sin(freqs)], -1).astype(np.float32)),
        slot_mapping=torch.tensor([69, 2 * P + 4], dtype=torch.int64),
        k_cache=torch.zeros(NB, P, Hkv, D, dtype=torch.float8_e4m3fn),
        v_cache=torch.zeros(NB, P, Hkv, D, dtype=torch.float8_e4m3fn),
        k_scale=torch.tensor([0.05]), v_scale=torch.tensor([0.05]),
        block_table=torch.tensor([[0, 1], [2, 3]], dtype=torch.int32), seq_lens=seq_lens)
    exec(compile(_readme_torch_attention_lines(), "README.md", "exec"), env)
    out = env["out"]
    assert out.dtype == torch.float16 and out.shape == (T, Hq, D)
    assert torch.isfinite(out.float()).all()
