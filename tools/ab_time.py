"""Times the fused rope_norm op alone (no unfused peer, no copy column: a few seconds per shape) for A/B runs of
kernel versions in one device call, one process per version (the package on PYTHONPATH decides which binary runs;
see tools/stage_ab_copy.sh). Same problems and timing as `python -m hpc_xla.bench rope_norm`.

  PYTHONPATH=.peer/exp/old:tests python3 tools/ab_time.py --heads 8/1/128,64/8/128 --variants bf16,fp8
"""
import argparse

import torch

from hpc_xla.bench import rope_norm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", default="8/1/128,64/8/128,32/4/128")
    ap.add_argument("--variants", default="bf16,fp8")
    ap.add_argument("--tokens", type=int, default=16384)
    args = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    layout = rope_norm.index_layout()  # HPC_BENCH_ROPE_LAYOUT, as in the suite
    out = []
    for variant in args.variants.split(","):
        for h in args.heads.split(","):
            hq, hkv, d = (int(x) for x in h.split("/"))
            _, _, probs, us = rope_norm.time_fused(args.tokens, hq, hkv, d, variant, gen, layout)
            out.append("%s %s %.1f" % (variant, h, us))
            del probs
    print(" | ".join(out))


if __name__ == "__main__":
    main()
