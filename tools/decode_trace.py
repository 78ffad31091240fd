"""Where the decode kernels' time goes, CTA by CTA (GPU only; needs a binary built with experiment 19's
HPC_DECODE_TRACE, see csrc/attention/decode_trace.cuh).

  python3 tools/decode_trace.py --heads 8,1,128 --workload 64x4K [--kv fp8] [--graph]

One plan + attention + combine call (eager, or the last replay of a CUDA graph of 16 calls with --graph) after the
L2 is flushed; prints, in us from the plan kernel's entry: when the attention CTAs enter, leave their PdlWait, have
located their first piece, have their first K/V tile, finish their last tile and exit (min / median / max over the
CTAs with work), the tiles per CTA, cycles per CTA (clock64 at 1.98 GHz), and the combine's span.
"""
import argparse

import numpy as np
import torch

import hpc_xla.torch as ht
from hpc_xla._ext import ext
from hpc_xla.bench import decode

FIELDS, CTAS = 10, 2048
NAMES = ["entry", "pdl wait done", "piece located", "first tile", "last tile", "exit"]


def _trace():
    raw = np.frombuffer(ext().decode_trace_read(), dtype=np.uint64).reshape(3, CTAS, FIELDS).astype(np.int64)
    return raw[0], raw[1], raw[2]


def _stats(x):
    return "%7.2f %7.2f %7.2f" % (np.min(x), np.median(x), np.max(x)) if len(x) else "      -"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", default="8,1,128")
    ap.add_argument("--workload", default="64x4K")
    ap.add_argument("--kv", default="bf16", choices=["bf16", "fp8"])
    ap.add_argument("--graph", action="store_true")
    args = ap.parse_args()
    hq, hkv, d = (int(x) for x in args.heads.split(","))
    gen = torch.Generator(device="cuda").manual_seed(0)
    lens = decode.workloads()[args.workload]
    kv_dtype = torch.float8_e4m3fn if args.kv == "fp8" else torch.bfloat16
    _, k_cache, v_cache, seq_lens, (s,), scales = decode._problem(lens, hq, hkv, d, kv_dtype, 1, 1, gen)
    kw = dict(num_kv_heads=hkv, num_q_heads=hq, head_dim=d, page_size=decode.PAGE, q_len=1, kv_dtype=kv_dtype,
              q_dtype=torch.bfloat16)
    plan = ht.decode_plan(seq_lens, **kw)

    def call():
        ht.decode_plan(seq_lens, out=plan, **kw)
        ht.decode_attention(s["q"], k_cache, v_cache, s["table"], seq_lens, plan, q_len=1, out=s["out"], **scales)

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        call()
    if args.graph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(16):
                call()
        graph.replay()
    torch.cuda.synchronize()
    flush.fill_(1)
    ext().decode_trace_reset()
    if args.graph:
        graph.replay()
    else:
        call()
    att, comb, pl = _trace()
    t0 = pl[0, 0]
    working = att[:, 8] > 0
    entered = att[:, 0] > 0
    print("%s %s kv=%s %s: plan kernel %.2f us; %d attention CTAs entered, %d with work" % (
        args.workload, args.heads, args.kv, "graph" if args.graph else "eager", (pl[0, 5] - pl[0, 0]) / 1e3,
        entered.sum(), working.sum()))
    print("%-16s %7s %7s %7s   (us from the plan kernel's entry; CTAs with work)" % ("", "min", "median", "max"))
    w = att[working]
    for f, name in enumerate(NAMES):
        print("%-16s %s" % (name, _stats((w[:, f] - t0) / 1e3)))
    print("%-16s %s" % ("phase: wait", _stats((w[:, 1] - w[:, 0]) / 1e3)))
    print("%-16s %s" % ("phase: locate", _stats((w[:, 2] - w[:, 1]) / 1e3)))
    print("%-16s %s" % ("phase: 1st tile", _stats((w[:, 3] - w[:, 2]) / 1e3)))
    print("%-16s %s" % ("phase: stream", _stats((w[:, 4] - w[:, 3]) / 1e3)))
    print("%-16s %s" % ("phase: finish", _stats((w[:, 5] - w[:, 4]) / 1e3)))
    print("%-16s %s" % ("tiles per CTA", _stats(w[:, 8].astype(float))))
    print("%-16s %s" % ("cycles (us)", _stats((w[:, 7] - w[:, 6]) / 1.98e3)))
    sms = np.bincount(w[:, 9].astype(int), minlength=132)
    print("CTAs per SM with work: min %d max %d" % (sms[:132].min(), sms[:132].max()))
    c = comb[comb[:, 0] > 0]
    if len(c):
        waited = c[c[:, 1] > 0]
        print("combine: %d CTAs entered %.2f..%.2f us, %d waited (done waiting %s), last exit %.2f us" % (
            len(c), (c[:, 0].min() - t0) / 1e3, (c[:, 0].max() - t0) / 1e3, len(waited),
            _stats((waited[:, 1] - t0) / 1e3) if len(waited) else "-", (c[:, 5].max() - t0) / 1e3))
    span = (max(att[entered, 5].max(), c[:, 5].max() if len(c) else 0) - t0) / 1e3
    print("plan entry -> last exit: %.2f us; attention first entry -> last exit: %.2f us" % (
        span, (att[entered, 5].max() - att[entered, 0].min()) / 1e3))


if __name__ == "__main__":
    main()
