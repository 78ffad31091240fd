"""Timing on the GPU the way the benchmark suites report it: CUDA-graph replays, median of several replays,
inputs rotated so the working set exceeds L2; plus the measured copy ceiling."""

import os
import statistics

import torch

# Calls per captured graph, at least: a replay pays the graph launch itself (~5-7 us on the H200, measured with
# torch.profiler in bench/NOTES.md, session 11) on top of its kernels; spread over 2-3 calls (the big sizes: few
# rotating sets fill 3-4x L2) that added 2-4 us to every call, a cost a serving graph of many layers never pays
# per op. The list of rotating sets is cycled until the graph holds this many calls (HPC_BENCH_MIN_CALLS=1 gives
# the old one-pass graphs). Peers and the copy reference go through here too.
MIN_CALLS = int(os.environ.get("HPC_BENCH_MIN_CALLS", "16"))
# HPC_BENCH_SEPARATE=1: a one-element add (an ordinary launch, no PDL) between the graph's calls, its own time
# (a graph of as many adds alone) subtracted. Back to back, our PDL-launched kernels start during the previous call's
# tail -- a neighbour an op in a real model, after a different kernel, may not have -- and the peers (Triton, torch,
# FlashInfer) do not use PDL; separated, every side starts from a drained GPU.
SEPARATE = os.environ.get("HPC_BENCH_SEPARATE", "0") == "1"


def cycled(calls, min_calls=None):
    """`calls` repeated in order until there are at least `min_calls` (MIN_CALLS) of them, whole passes only."""
    min_calls = MIN_CALLS if min_calls is None else min_calls
    return list(calls) * max(1, -(-min_calls // len(calls)))


def _separator():
    """A one-element add: an ordinary launch (no PDL) that starts only after the previous kernel has drained."""
    flag = torch.zeros(1, device="cuda")
    return lambda: flag.add_(1.0)


def _separated(calls):
    """`calls` with a separator after each (HPC_BENCH_SEPARATE)."""
    sep = _separator()
    return [c for call in calls for c in (call, sep)]


def capture(calls, warmup=3, separate=None):
    """Runs `calls` `warmup` times on a side stream, then captures them -- cycled until there are MIN_CALLS -- back
    to back into one CUDA graph (each followed by a one-element add under HPC_BENCH_SEPARATE) and replays it once:
    (graph, calls in it)."""
    captured = cycled(calls)
    n = len(captured)
    if SEPARATE if separate is None else separate:
        captured = _separated(captured)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            for c in calls:
                c()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in captured:
            c()
    graph.replay()
    torch.cuda.synchronize()
    return graph, n


def replay_us(graph, n, replays):
    """Median µs per call over `replays` replays of a captured graph holding n calls."""
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / n)
    return statistics.median(times)


_SEPARATOR_US = {}


def separator_us(n, replays=20):
    """µs per one-element add in a graph of n of them alone: what HPC_BENCH_SEPARATE subtracts."""
    if n not in _SEPARATOR_US:
        graph, _ = capture([_separator()] * n, separate=False)
        _SEPARATOR_US[n] = replay_us(graph, n, replays)
    return _SEPARATOR_US[n]


def graph_time_us(calls, replays=20, warmup=3, separate=None):
    """Median µs per call of `calls` (a list of zero-arg callables, e.g. one per rotating input set) in one CUDA
    graph (`capture`), replayed `replays` times; separated (`separate`, default HPC_BENCH_SEPARATE), less the
    separators' own time."""
    separate = SEPARATE if separate is None else separate
    graph, n = capture(calls, warmup, separate)
    us = replay_us(graph, n, replays)
    del graph
    return us - separator_us(n) if separate else us


def copy_ceiling_tbps(num_bytes=2 << 30, reps=10):
    """Device-to-device copy bandwidth (bytes read + written per second, TB/s): the memory ceiling we report
    percentages of. Measured in the same process as the benchmark."""
    src = torch.empty(num_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    src.random_(0, 255)
    us = event_time_us([lambda: dst.copy_(src)], reps=reps, warmup=2)
    del src, dst
    return 2 * num_bytes / (us * 1e-6) / 1e12


def event_time_us(calls, reps=5, warmup=1):
    """Median over `reps` of the calls run back to back between two CUDA events, in us per call (eager launches:
    for what cannot be graph-captured, or is long enough that launch gaps do not matter)."""
    for _ in range(warmup):
        for c in calls:
            c()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for c in calls:
            c()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / len(calls))
    return statistics.median(times)


def gemm_ceiling_tflops(kind, n=8192, reps=10):
    """Dense tensor-core rate (TFLOP/s) of one n x n x n GEMM, measured in the same process: the compute ceiling
    the MoE table reports percentages of. kind "bf16": torch.matmul; "fp8": torch._scaled_mm, e4m3 x e4m3 -> bf16
    with per-tensor scales (the fp8_tensor and fp8_block128 rows). Returns (TFLOP/s, None), or (None, why) where the
    installed torch cannot run it -- the table then shows '-' rather than a made-up ceiling."""
    try:
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        if kind == "fp8":
            a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()  # column-major B, as cuBLASLt wants
            one = torch.ones((), device="cuda", dtype=torch.float32)

            def call():
                return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:

            def call():
                return a @ b
        return 2.0 * n ** 3 / (event_time_us([call], reps=reps, warmup=3) * 1e-6) / 1e12, None
    except Exception as e:  # an old torch without _scaled_mm, or a GPU without fp8
        return None, (str(e).splitlines()[0][:160] if str(e) else repr(e))


def l2_bytes():
    return torch.cuda.get_device_properties(0).L2_cache_size


def same_size_copy_us(num_bytes, sets):
    """µs per D2D copy moving `num_bytes` in all (num_bytes / 2 read + num_bytes / 2 written), `sets` rotating
    buffer pairs under the same graph replay as the op: what a plain copy of the op's bytes costs at that size,
    ramp and tail included. A reference column only; percentages stay against copy_ceiling_tbps()."""
    half = max(16, num_bytes // 2 // 16 * 16)
    pairs = [(torch.empty(half, dtype=torch.uint8, device="cuda"), torch.empty(half, dtype=torch.uint8,
                                                                               device="cuda"))
             for _ in range(sets)]
    for src, _ in pairs:
        src.random_(0, 255)
    us = graph_time_us([(lambda s=s, d=d: d.copy_(s)) for s, d in pairs])
    del pairs
    return us
