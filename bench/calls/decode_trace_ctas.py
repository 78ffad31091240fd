"""Per-CTA view of experiment 49's decode trace (needs a staged build with HPC_DECODE_TRACE, e.g. e51t; GPU only):
the slowest CTAs' phases and the mean CTA time by piece count -- which CTAs set the kernel's end and whether their
pieces cost more than the planner's piece cost (HPC_XLA_DECODE_PIECE_COST, tiles) charges.

  cd .peer/exp/e51t && PYTHONPATH=$PWD python3 $ROOT/bench/calls/decode_trace_ctas.py --q-len 2 --workloads 1x128K+31x4K
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.getcwd(), "tools"))  # the staged tree's tools/decode_trace.py
import decode_trace as dt  # noqa: E402

import hpc_xla.torch as ht  # noqa: E402
from hpc_xla.bench import decode  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", default="8,1,128")
    ap.add_argument("--variant", default="bf16")
    ap.add_argument("--q-len", type=int, default=2)
    ap.add_argument("--workloads", default="1x128K+31x4K;64x4K;256 zipf", help="';'-separated")
    ap.add_argument("--ghz", type=float, default=1.98)
    ap.add_argument("--top", type=int, default=6)
    args = ap.parse_args()
    hq, hkv, d = (int(x) for x in args.heads.split(","))
    kv_dtype = torch.float8_e4m3fn if args.variant == "fp8" else torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(0)
    F = dt.F
    us = lambda c: c / args.ghz / 1e3  # noqa: E731
    for name in args.workloads.split(";"):
        lens = decode.workloads()[name]
        _, k_cache, v_cache, seq_lens, (s,), scales = decode._problem(lens, hq, hkv, d, kv_dtype, args.q_len, 1, gen)
        kw = dict(num_kv_heads=hkv, num_q_heads=hq, head_dim=d, page_size=decode.PAGE, q_len=args.q_len,
                  kv_dtype=kv_dtype, q_dtype=torch.bfloat16)
        plan = ht.decode_plan(seq_lens, **kw)

        def call():
            ht.decode_attention(s["q"], k_cache, v_cache, s["table"], seq_lens, plan, q_len=args.q_len, out=s["out"],
                                **scales)

        rows = dt.trace_once(call)
        work = rows[rows[:, F["tiles"]] > 0]
        total = work[:, F["total"]]
        print("== %s %s q_len %d %s (piece cost %s): mean %.2f us, max %.2f us" % (
            args.variant, args.heads, args.q_len, name, os.environ.get("HPC_XLA_DECODE_PIECE_COST", "default"),
            us(total.mean()), us(total.max())))
        for k in sorted(set(work[:, F["pieces"]].astype(int))):
            sel = work[work[:, F["pieces"]] == k]
            print("   %d piece(s): %3d CTAs, %.1f tiles, total mean %.2f / max %.2f us, per piece start %.0f finish %.0f "
                  "advance %.0f cycles" % (k, len(sel), sel[:, F["tiles"]].mean(), us(sel[:, F["total"]].mean()),
                                            us(sel[:, F["total"]].max()), *(sel[:, F[f]].sum() / sel[:, F["pieces"]].sum()
                                                                           for f in ("piece_start", "finish", "advance"))))
            if "fin_store" in F:  # experiment 56's build: FinishPiece's sub-phases, cycles a piece
                print("      finish = prep %.0f + merge %.0f + store %.0f" % tuple(
                    sel[:, F[f]].sum() / sel[:, F["pieces"]].sum() for f in ("fin_prep", "fin_merge", "fin_store")))
        print("   slowest: " + " | ".join(f for f in dt.FIELDS))
        for r in work[np.argsort(-total)[:args.top]]:
            print("   " + " ".join(("%.2f" % us(r[F[f]])) if f not in ("tiles", "pieces", "sm") else "%d" % r[F[f]]
                                  for f in dt.FIELDS))
        del k_cache, v_cache, s
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
