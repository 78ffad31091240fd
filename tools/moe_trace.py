"""Where the single-token fused_moe layer's time goes, CTA by CTA (GPU only; needs a binary built with experiment
42's HPC_MOE_TRACE, see csrc/moe/moe_trace.cuh).

  python3 tools/moe_trace.py [--shape qwen3-30b-a3b/fp8_tensor] [--tokens 1] [--eager]

The bench moe row's own weights and rotating routings, captured into a CUDA graph as `bench moe` times them; the
graph is timed, then replayed once more with the trace zeroed, so the arrays hold its last call. Printed, in us from
the first gate-up CTA past its PdlWait (the layer's start: before it the previous call's down kernel still runs):
the wgmma gate-up CTAs' entry / PdlWait / copies issued / first K group landed / last wgmma done / exit, and the down
CTAs' entry / hit list built / PdlWait / jobs done / exit, min / median / max over the CTAs that worked.
"""
import argparse
import math

import numpy as np
import torch

from hpc_xla._ext import ext
from hpc_xla.bench import moe, timing

CTAS, FIELDS = 1024, 8
UP = ["entry", "pdl wait done", "copies issued", "1st group landed", "last wgmma done", "exit"]
DOWN = ["entry", "hit list built", "pdl wait done", "jobs done", None, "exit"]


def _stats(x):
    return "%7.2f %7.2f %7.2f" % (np.min(x), np.median(x), np.max(x)) if len(x) else "      -       -       -"


def _per_sm(smids):
    n = np.bincount(smids.astype(int), minlength=132)
    return "%d-%d per SM on %d SMs" % (n[n > 0].min(), n.max(), (n > 0).sum()) if len(smids) else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen3-30b-a3b/fp8_tensor", help="name/quant as in bench moe --shapes")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--eager", action="store_true", help="one eager call after an L2 flush instead of the graph")
    args = ap.parse_args()
    if not hasattr(ext(), "moe_trace_read"):
        raise SystemExit("this binary has no HPC_MOE_TRACE (experiment 42): stage it with tools/stage_experiments.sh")
    (name, e_local, e_global, offset, h, i, top_k, quant), = moe._selected_shapes(args.shape)
    w = moe._row_weights(name, e_local, h, i, quant)
    gen = moe._generator(name, quant, args.tokens)
    probe = moe._inputs(args.tokens, e_local, e_global, offset, h, top_k, gen)
    expert_bytes = 3 * h * i * (1 if quant else 2)
    hit = moe._local_hits(probe, offset, e_local)[0]
    sets_n = max(1, min(8, math.ceil(2 * timing.l2_bytes() / max(hit * expert_bytes, 1))))  # as bench moe
    sets = [probe] + [moe._inputs(args.tokens, e_local, e_global, offset, h, top_k, gen) for _ in range(sets_n - 1)]
    ws = moe._workspace(w, args.tokens, top_k, e_local, e_global, h, i, quant)
    calls = [moe._ours(w, s, quant, offset, e_global, ws) for s in sets]
    before = ext().fused_moe_wgmma_gate_up_launches()
    if args.eager:
        for c in calls:
            c()
        torch.cuda.synchronize()
        us = None
        flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        flush.fill_(1)
        ext().moe_trace_reset()
        calls[-1]()
    else:
        graph, n = timing.capture(calls)
        us = timing.replay_us(graph, n, 20)
        ext().moe_trace_reset()
        graph.replay()
    torch.cuda.synchronize()
    wgmma = ext().fused_moe_wgmma_gate_up_launches() > before
    raw = np.frombuffer(ext().moe_trace_read(), dtype=np.uint64).reshape(2, CTAS, FIELDS).astype(np.int64)
    up, down = raw[0], raw[1]
    for kernel, arr in (("gate-up", up), ("down", down)):
        if arr[CTAS - 1, 0] > 0:  # the trace keeps CTAs 0..1023 only
            print("WARNING: the %s grid reaches the trace's %d-CTA cap: CTAs past it are not shown" % (kernel, CTAS))
    print("%s T=%d %s: %d rotating sets, %s gate-up, %s" % (
        args.shape, args.tokens, "eager, L2 flushed" if args.eager else "graph's last call", sets_n,
        "wgmma" if wgmma else "mma.sync (NOT traced)", "%.2f us per call (graph median)" % us if us else "eager"))
    up_in = up[up[:, 0] > 0]
    if not wgmma or len(up_in) == 0:
        raise SystemExit("no gate-up trace: this shape / T does not take the wgmma gate-up")
    t0 = up_in[:, 1].min()
    work = up_in[up_in[:, 6] >= 2]
    left = up_in[up_in[:, 6] == 1]
    print("gate-up: %d CTAs entered (%s), %d worked (%d epilogue), %d left at the id check (exits %s us)" % (
        len(up_in), _per_sm(up_in[:, 7]), len(work), (work[:, 6] == 3).sum(), len(left),
        _stats((left[:, 5] - t0) / 1e3).strip()))
    print("%-18s %7s %7s %7s   (us from the first gate-up PdlWait; CTAs that worked)" % ("", "min", "median", "max"))
    for f, label in enumerate(UP):
        print("  up %-15s %s" % (label, _stats((work[:, f] - t0) / 1e3)))
    for label, a, b in (("ids + issue", 1, 2), ("to 1st group", 2, 3), ("groups", 3, 4), ("reduce+epilogue", 4, 5)):
        print("  up %-15s %s" % ("phase: " + label, _stats((work[:, b] - work[:, a]) / 1e3)))
    d = down[down[:, 0] > 0]
    print("down: %d CTAs entered (%s), experts hit %s" % (len(d), _per_sm(d[:, 7]), sorted(set(d[:, 6].tolist()))))
    for f, label in enumerate(DOWN):
        if label:
            print("  dn %-15s %s" % (label, _stats((d[:, f] - t0) / 1e3)))
    for label, a, b in (("before wait", 0, 1), ("waiting", 1, 2), ("jobs", 2, 3), ("sum + store", 3, 5)):
        print("  dn %-15s %s" % ("phase: " + label, _stats((d[:, b] - d[:, a]) / 1e3)))
    up_end, dn_end = up_in[:, 5].max(), d[:, 5].max() if len(d) else 0
    print("layer: first gate-up PdlWait -> last gate-up exit %.2f us -> last down exit %.2f us; "
          "down's first PdlWait release %.2f us after the last gate-up exit" % (
              (up_end - t0) / 1e3, (dn_end - t0) / 1e3, ((d[:, 2].min() - up_end) / 1e3) if len(d) else float("nan")))


if __name__ == "__main__":
    main()
