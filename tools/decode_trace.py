"""EXPERIMENT 49's reader (dev tool, GPU only; needs a build whose decode.h defines HPC_DECODE_TRACE): where the
decode attention CTAs' cycles go, phase by phase (csrc/attention/decode_trace.cuh), for the bench's workloads.

  PYTHONPATH=.peer/exp/e49 [HPC_XLA_DECODE_FORCE_MT1=1] python3 tools/decode_trace.py --q-len 1

Per workload: CTAs with work, tiles and pieces per CTA; per tile, the cycles of the copy issue, the ring wait and the
compute; per piece, its start (q), finish and advance; the lead-in (PdlWait, plan lookup, first copies); total
cycles (mean / max over CTAs) and the slowest CTA's breakdown. Cycles of the SM clock (ns at --ghz).
"""
import argparse

import numpy as np
import torch

import hpc_xla.torch as ht
from hpc_xla._ext import ext
from hpc_xla.bench import decode

FIELDS = ["copy", "wait", "compute", "piece_start", "finish", "advance", "lead", "tiles", "pieces", "total", "sm",
          "fin_prep", "fin_merge", "fin_store"]
F = {name: i for i, name in enumerate(FIELDS)}


def trace_once(call):
    call()
    torch.cuda.synchronize()
    ext().decode_trace_reset()
    call()
    raw = np.frombuffer(ext().decode_trace_read(), np.uint64).reshape(-1, len(FIELDS)).astype(np.float64)
    return raw[raw[:, F["total"]] > 0]  # CTAs that ran (the grid is <= 2048)


def report(name, rows, ghz):
    work = rows[rows[:, F["tiles"]] > 0]
    tiles, pieces = work[:, F["tiles"]].sum(), work[:, F["pieces"]].sum()
    per_tile = {k: work[:, F[k]].sum() / tiles for k in ("copy", "wait", "compute")}
    per_piece = {k: work[:, F[k]].sum() / pieces for k in ("piece_start", "finish", "advance")}
    total = work[:, F["total"]]
    slow = work[np.argmax(total)]
    us = lambda c: c / ghz / 1e3  # noqa: E731
    print("== %s: %d CTAs with work (%d without), %.1f tiles and %.2f pieces per CTA" % (
        name, len(work), len(rows) - len(work), tiles / len(work), pieces / len(work)))
    print("   per tile (cycles): " + ", ".join("%s %.0f" % kv for kv in per_tile.items()) +
          "  = %.0f (%.2f us)" % (sum(per_tile.values()), us(sum(per_tile.values()))))
    print("   per piece (cycles): " + ", ".join("%s %.0f" % kv for kv in per_piece.items()) +
          "; lead-in %.0f (mean)" % work[:, F["lead"]].mean())
    print("   total: mean %.2f us, max %.2f us (SM %d: %d tiles, %d pieces; copy %.1f / wait %.1f / compute %.1f / "
          "pieces %.1f / lead %.1f us)" % (
              us(total.mean()), us(total.max()), slow[F["sm"]], slow[F["tiles"]], slow[F["pieces"]],
              us(slow[F["copy"]]), us(slow[F["wait"]]), us(slow[F["compute"]]),
              us(slow[F["piece_start"]] + slow[F["finish"]] + slow[F["advance"]]), us(slow[F["lead"]])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", default="8,1,128")
    ap.add_argument("--variant", default="bf16")
    ap.add_argument("--q-len", type=int, default=1)
    ap.add_argument("--workloads", default="64x512,64x4K,1x128K+31x4K,256 zipf,128 random [64,16K)")
    ap.add_argument("--ghz", type=float, default=1.98, help="SM clock for the us columns")
    args = ap.parse_args()
    hq, hkv, d = (int(x) for x in args.heads.split(","))
    kv_dtype = torch.float8_e4m3fn if args.variant == "fp8" else torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name in args.workloads.split(","):
        lens = decode.workloads()[name]
        _, k_cache, v_cache, seq_lens, (s,), scales = decode._problem(lens, hq, hkv, d, kv_dtype, args.q_len, 1, gen)
        kw = dict(num_kv_heads=hkv, num_q_heads=hq, head_dim=d, page_size=decode.PAGE, q_len=args.q_len,
                  kv_dtype=kv_dtype, q_dtype=torch.bfloat16)
        plan = ht.decode_plan(seq_lens, **kw)

        def call():
            ht.decode_attention(s["q"], k_cache, v_cache, s["table"], seq_lens, plan, q_len=args.q_len, out=s["out"],
                                **scales)

        report("%s %s q_len %d %s" % (args.variant, args.heads, args.q_len, name), trace_once(call), args.ghz)
        del k_cache, v_cache, s
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
