"""The decode benchmark's batches (sequence lengths per workload), in a module of their own so that tools which
only model the schedule (bench/calls/plan_model.py) read the same lengths without loading the binary."""

import torch


def workloads():
    """The benchmark's batches. The random one is drawn from its own seeded generator, so every run, filtered
    (--heads/--kv/--q-len) or not, and every (kv, heads, q_len) group measures the same lengths."""
    rand = torch.randint(64, 16384, (128,), generator=torch.Generator().manual_seed(0)).tolist()
    zipf = [min(32768, max(16, int(64 * (1.0 / (i + 1)) ** 1.0 * 512))) for i in range(256)]
    return {
        "64x512": [512] * 64,
        "64x4K": [4096] * 64,
        "1x128K+31x4K": [131072] + [4096] * 31,
        "1x64K+15x4K": [65536] + [4096] * 15,
        "2x32K+30x4K": [32768] * 2 + [4096] * 30,
        "1x32K+63x1K": [32768] + [1024] * 63,
        "128 random [64,16K)": rand,
        "256 zipf": zipf,
    }
