"""Two GPUs in one process (torch on cuda:1 after cuda:0; the same holds for JAX shard_map over local GPUs): every
kernel whose dynamic shared memory exceeds 48 KB needs its limit raised in each device's context, not once per
process. The same problems on both devices give the same bits. Skipped without two Hopper GPUs (the decode and
fused_moe kernels are the ones above 48 KB)."""

import numpy as np
import pytest
from test_fused_moe import make_problem, torch_problem

from hpc_xla._arrays import from_torch

pytestmark = pytest.mark.gpu


def _two_gpus():
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() >= 2


def _fused_moe_on(device, p):
    import torch

    import hpc_xla.torch as ht

    t = torch_problem(p, device)
    y = ht.fused_moe(t["x"], t["w13"], t["w2"], t["topk_weights"], t["topk_ids"], quant=p["quant"],
                     w13_scale=t["w13_scale"], w2_scale=t["w2_scale"], a13_scale=t["a13_scale"], a2_scale=t["a2_scale"],
                     expert_offset=p["expert_offset"], num_experts_global=p["num_experts_global"],
                     shared_output=t["shared_output"])
    torch.cuda.synchronize(device)
    return from_torch(y.cpu())


@pytest.mark.skipif(not _two_gpus(), reason="needs two GPUs")
@pytest.mark.parametrize("tokens", [1, 4, 40, 600])  # stream (>48 KB rings), tiled, grouped (CUTLASS) paths
@pytest.mark.parametrize("quant", [None, "fp8_tensor"])
def test_fused_moe_on_two_devices(tokens, quant):
    p = make_problem(tokens, 8, 512, 256, 4, quant, shared=True, seed=tokens)
    from test_gpu_fused_moe import _check_oracle

    a = _fused_moe_on("cuda:0", p)
    b = _fused_moe_on("cuda:1", p)
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    _check_oracle(p, b)  # equal bits could also be two equally wrong (or both untouched) outputs


@pytest.mark.skipif(not _two_gpus(), reason="needs two GPUs")
@pytest.mark.parametrize("kv_dtype, head_dim", [("bfloat16", 128), ("float8_e4m3fn", 128), ("bfloat16", 256)])
def test_decode_on_two_devices(kv_dtype, head_dim):
    from decode_harness import DecodeCase, check, make_inputs, run_torch

    case = DecodeCase(seq_lens=(100, 0, 1, 700, 4096), kv_dtype=kv_dtype, head_dim=head_dim)
    inp = make_inputs(case)
    a, b = run_torch(case, inp, "cuda:0"), run_torch(case, inp, "cuda:1")
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    check(case, inp, b)  # (run_torch poisons its output with NaN: equal bits alone could be two unwritten ones)
