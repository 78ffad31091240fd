"""Where a call's time goes under CUDA-graph replay, per kernel: `python tools/profile_kernels.py moe|decode|rope`.

torch.profiler (CUPTI) records every kernel node of a replayed graph; for each kernel name this prints the median
duration and the median gap from the previous kernel's end to its start. A PDL-launched kernel starts early and
waits, so its gap is negative and its duration includes the wait: the time it adds after its predecessor is
duration + gap. (The GPU machine has no Nsight Systems; this is what gave bench/NOTES.md's session-11 profiles.)"""
import collections
import math
import os
import statistics
import sys
from pathlib import Path

# The checkout's in-place build, after PYTHONPATH: a staged package (tools/stage_ab_copy.sh) named there wins
# (inserting the checkout first made a staged run silently import the root package, or fail without its binary).
sys.path.append(str(Path(__file__).resolve().parents[1]))

import torch
from torch.profiler import ProfilerActivity, profile

from hpc_xla.bench import timing


def profile_graph(label, calls, replays=10):
    us_call = timing.graph_time_us(calls)
    graph, n = timing.capture(calls)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    events = sorted(((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda x: x[0])
    # A kernel that runs m > 1 times per call (the grouped path's two GEMMs share one CUTLASS kernel type) is
    # reported per occurrence within the call, "#1".."#m", in start order.
    total = collections.Counter(name for _, _, name in events)
    seen = collections.Counter()
    dur, gap = collections.defaultdict(list), collections.defaultdict(list)
    for i, (start, end, name) in enumerate(events):
        per = total[name] // (replays * n) if total[name] % (replays * n) == 0 else 1
        key = "%s #%d" % (name[:58], seen[name] % per + 1) if per > 1 else name
        seen[name] += 1
        dur[key].append(end - start)
        if i:
            gap[key].append(start - events[i - 1][1])
    span = (events[-1][1] - events[0][0]) / (replays * n) if events else 0.0
    print("== %s: %.2f us per call (graph timing), kernels span %.2f us per call" % (label, us_call, span))
    for name in dur:
        g = gap[name] or [0.0]
        print("   %-64s n=%4d  dur %8.2f us  gap %7.2f us  (after predecessor %.2f)" % (
            name[:64], len(dur[name]), statistics.median(dur[name]), statistics.median(g),
            statistics.median(dur[name]) + statistics.median(g)))


def moe():
    from hpc_xla.bench import moe as bm

    cases = {"qwen3-30b-a3b/fp8_tensor": (1, 16, 64, 256), "qwen3-30b-a3b/bf16": (1,), "hy3-tp8/fp8_tensor": (1, 16),
             "hy3-ep8/fp8_tensor": (1, 64), "dsv3-ep8/fp8_block128": (16,), "mixtral-8x7b/bf16": (64,)}
    only = os.environ.get("HPC_PROFILE_MOE")  # e.g. "qwen3-30b-a3b/fp8_tensor:1,hy3-tp8/fp8_tensor:1"
    if only:
        picked = collections.defaultdict(list)
        for item in only.split(","):
            key, t = item.rsplit(":", 1)
            picked[key].append(int(t))
        cases = dict(picked)
    for key, token_counts in cases.items():
        (name, e_local, e_global, offset, h, i, top_k, quant), = bm._selected_shapes(key)
        w = bm._row_weights(name, e_local, h, i, quant)  # the bench rows' own draws, in the layout ours reads
        for t in token_counts:
            gen = bm._generator(name, quant, t)
            sets = [bm._inputs(t, e_local, e_global, offset, h, top_k, gen) for _ in range(4)]
            ws = bm._workspace(w, t, top_k, e_local, e_global, h, i, quant)
            profile_graph("%s T=%d" % (key, t), [bm._ours(w, s, quant, offset, e_global, ws) for s in sets], 5)
            del sets, ws
        del w
        torch.cuda.empty_cache()


def decode():
    """Decode 8/1/128 bf16 per kernel (attention, merge) at the q_lens of HPC_PROFILE_QLEN (default "1"; "1,2" shows
    where q_len 2's extra time goes)."""
    import hpc_xla.torch as ht
    from hpc_xla.bench import decode as bd

    gen = torch.Generator(device="cuda").manual_seed(0)
    hq, hkv, d = 8, 1, 128
    q_lens = [int(v) for v in os.environ.get("HPC_PROFILE_QLEN", "1").split(",")]
    for q_len in q_lens:
        for name in ("64x512", "64x4K", "1x128K+31x4K"):
            lens = bd.workloads()[name]
            sets = max(1, min(8, math.ceil(3 * timing.l2_bytes() / (sum(lens) * hkv * d * 4))))
            kv, k_cache, v_cache, seq_lens, sets_, _ = bd._problem(lens, hq, hkv, d, torch.bfloat16, q_len, sets, gen)
            plan = ht.decode_plan(seq_lens, num_kv_heads=hkv, num_q_heads=hq, head_dim=d, page_size=bd.PAGE,
                                  q_len=q_len, kv_dtype=torch.bfloat16, q_dtype=torch.bfloat16)
            profile_graph("decode 8/1/128 bf16 q_len %d %s, one layer (plan built)" % (q_len, name),
                          [lambda s=s: ht.decode_attention(s["q"], k_cache, v_cache, s["table"], seq_lens, plan,
                                                           q_len=q_len, out=s["out"]) for s in sets_])
            del kv, k_cache, v_cache, sets_


def rope():
    from hpc_xla.bench import rope_norm as br

    gen = torch.Generator(device="cuda").manual_seed(0)
    for hq, hkv in ((8, 1), (64, 8)):
        nbytes, sets, probs, _ = br.time_fused(16384, hq, hkv, 128, "bf16", gen)
        profile_graph("rope_norm %d/%d/128 bf16 T=16384" % (hq, hkv), [br._fused(p, "bf16") for p in probs])
        src = [torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda") for _ in range(sets)]
        dst = [torch.empty_like(x) for x in src]
        profile_graph("same-size copy %d/%d" % (hq, hkv), [lambda a=a, b=b: b.copy_(a) for a, b in zip(src, dst)])
        del probs, src, dst


if __name__ == "__main__":
    suites = {"moe": moe, "decode": decode, "rope": rope}
    if len(sys.argv) != 2 or sys.argv[1] not in suites:
        sys.exit("usage: python tools/profile_kernels.py moe|decode|rope")
    suites[sys.argv[1]]()
