"""fused_moe benchmark: hpc_xla's CUDA pipeline against the torch pipeline a user would write and against
vLLM 0.33's Triton fused MoE, all under CUDA-graph replay in the same run (routing given: random ids with a
fixed seed, no top-k in any of them).

Peer ("torch"): stable sort of the pairs by local expert, gather x rows, torch._grouped_mm (bf16; fp8_block128
uses bf16 weights dequantized once, outside the timing) or torch._scaled_grouped_mm (fp8_tensor, rowwise
scales), silu(gate)*up (+ fp8 quant), the down grouped GEMM, weighted index_add into fp32, bf16 out. When the
installed torch lacks grouped GEMMs (or they reject the shape) the peer is a per-expert loop, timed eagerly
with events (it needs host syncs; marked "loop" in the table).

Peer ("triton", the issue's bar): vLLM 0.33.0's Triton `fused_moe_kernel` + `invoke_fused_moe_triton_kernel` taken
from the vllm wheel by tools/fetch_triton_moe.sh into the git-ignored .peer/vllm_triton_moe (or the folder in
$HPC_TRITON_MOE_DIR; torch + triton only). It runs the full layer as vLLM's fused_experts_impl does: act quant,
align (Triton rewrite of vLLM's CUDA op; the naive one-block-per-pair path for tiny batches, as vLLM), GEMM1,
silu_and_mul, quant, GEMM2 with the routing weight, sum over top-k; configs from the wheel's tuned JSONs for the
device (H200, H100 80GB HBM3), else vLLM's default -- as vLLM itself picks them. bf16, fp8_tensor and fp8_block128;
EP shapes through vLLM's expert_map. Its output is compared with ours (relative error printed, not asserted).
Without the folder its columns show '-'. Its Triton kernels are compiled up front in parallel processes into
Triton's disk cache (HPC_TRITON_PRECOMPILE=0: off).

Ours reads w13 as a deployment would load it: for bf16 and fp8_tensor (I a multiple of 64) prepared once by
hpc_xla.moe_layout.interleave_w13 and called with w13_interleaved=True (the grouped path's gate-up epilogue then
computes the activation; each record says w13_interleaved and act_in_epilogue); HPC_BENCH_MOE_INTERLEAVE=0 keeps
vLLM's layout (A/B). The peers always read vLLM's layout.

Columns: µs per call, TB/s on the weight bytes of the experts actually hit, TFLOP/s (2*pairs*3*H*I over local
pairs), speedup = torch µs / ours, vs triton = triton µs / ours (> 1: we are faster), tri err = |triton - ours| /
|ours| on the first input set. The plot (<out>.png) shows µs against T per shape for ours, torch and triton.
"""

import importlib
import math
import os
import sys
import time
import zlib
from pathlib import Path

import torch

import hpc_xla.torch as ht
from hpc_xla import _options
from hpc_xla._ext import ext
from hpc_xla.bench import report, timing
from hpc_xla.moe_layout import interleavable, interleave_w13
from hpc_xla.torch.moe import fused_moe_workspace_size

TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384)  # the list (the whole suite ran in ~90 s, session 21)
# name, local experts, global experts, expert offset, H, I, top_k, quant
SHAPES = (
    ("qwen3-30b-a3b", 128, 128, 0, 2048, 768, 8, None),
    ("qwen3-30b-a3b", 128, 128, 0, 2048, 768, 8, "fp8_tensor"),
    ("hy3-tp8", 192, 192, 0, 4096, 192, 8, "fp8_tensor"),
    ("hy3-ep8", 24, 192, 0, 4096, 1536, 8, "fp8_tensor"),
    ("dsv3-ep8", 32, 256, 0, 7168, 2048, 8, "fp8_block128"),
    ("mixtral-8x7b", 8, 8, 0, 4096, 14336, 2, None),
    ("mixtral-8x7b", 8, 8, 0, 4096, 14336, 2, "fp8_tensor"),  # the target table is fp8 per-tensor
)
FP8 = torch.float8_e4m3fn


def _weights(e, h, i, quant, gen):
    dev = "cuda"

    def mat(n, k):
        w = torch.empty(e, n, k, device=dev, dtype=torch.bfloat16)
        for j in range(e):  # one expert at a time: no fp32 copy of everything
            w[j] = (torch.randn(n, k, device=dev, generator=gen) / math.sqrt(k)).to(torch.bfloat16)
        return w

    w13, w2 = mat(2 * i, h), mat(h, i)
    out = dict(w13=w13, w2=w2, w13_scale=None, w2_scale=None, a13_scale=None, a2_scale=None)
    if quant == "fp8_tensor":
        for name in ("w13", "w2"):
            w = out[name]
            s = w.float().abs().amax(dim=(1, 2)) / 448.0
            out[name] = (w.float() / s[:, None, None]).to(FP8)
            out[name + "_scale"] = s.float()
            out[name + "_bf16"] = None
        out["a13_scale"] = torch.tensor(4.5 / 448.0, device=dev)
        out["a2_scale"] = torch.tensor(0.02, device=dev)
    elif quant == "fp8_block128":
        for name in ("w13", "w2"):
            w = out[name]
            n, k = w.shape[1], w.shape[2]
            blocks = w.float().abs().view(e, n // 128, 128, k // 128, 128).amax(dim=(2, 4)) / 448.0
            full = blocks.repeat_interleave(128, 1).repeat_interleave(128, 2)
            q = (w.float() / full).to(FP8)
            out[name + "_bf16"] = (q.float() * full).to(torch.bfloat16)  # the peer's dequantized copy
            out[name], out[name + "_scale"] = q, blocks.contiguous()
            del full
    return out


def _routing():
    """HPC_BENCH_MOE_ROUTING: "random" (default; each token draws top_k distinct experts uniformly) or "balanced"
    (every expert gets T*k/E pairs, +-1: slot j of token t takes expert (t*k + j) mod E under a random relabeling) --
    to bound what the GEMMs lose to partly filled tiles (bench/research/moe_grouped_gemm_1000tf.md)."""
    mode = os.environ.get("HPC_BENCH_MOE_ROUTING", "random")
    if mode not in ("random", "balanced"):
        raise SystemExit("HPC_BENCH_MOE_ROUTING must be 'random' or 'balanced'; got %r" % mode)
    return mode


def _inputs(tokens, e_local, e_global, offset, h, top_k, gen):
    x = torch.randn(tokens, h, device="cuda", generator=gen).to(torch.bfloat16)
    if _routing() == "balanced":
        slots = torch.arange(tokens * top_k, device="cuda").view(tokens, top_k) % e_global
        ids = torch.randperm(e_global, device="cuda", generator=gen)[slots].to(torch.int32)
    else:
        ids = torch.rand(tokens, e_global, device="cuda", generator=gen).argsort(dim=1)[:, :top_k].to(torch.int32)
    weights = torch.rand(tokens, top_k, device="cuda", generator=gen)
    return dict(x=x, ids=ids.contiguous(), weights=weights, out=torch.empty(tokens, h, device="cuda",
                                                                             dtype=torch.bfloat16))


def _local_hits(inp, offset, e_local):
    """(distinct local experts hit, local (token, slot) pairs) of one input set's routing."""
    local = inp["ids"].long() - offset
    mask = (local >= 0) & (local < e_local)
    return int(torch.unique(local[mask]).numel()), int(mask.sum())


def _interleave(quant, i):
    """Whether ours gets w13 prepared in the interleaved layout (fused_moe's w13_interleaved): where the op takes it
    (quant None / fp8_tensor, I a multiple of 64), as a deployment would load it, unless HPC_BENCH_MOE_INTERLEAVE=0
    (A/B against vLLM's layout). The peers always read vLLM's layout."""
    return os.environ.get("HPC_BENCH_MOE_INTERLEAVE", "1") != "0" and interleavable(quant, i)


def _row_weights(name, e_local, h, i, quant):
    """A row's weights (its own draw), with w13 also in the layout ours reads ("w13_ours", where _interleave says):
    what the bench times and what tools/profile_kernels.py / profile_targets.py profile."""
    w = _weights(e_local, h, i, quant, _generator(name, quant))
    if _interleave(quant, i):  # ours reads the prepared layout; the peers keep vLLM's
        w["w13_ours"] = interleave_w13(w["w13"]).contiguous()
    return w


def _workspace(w, tokens, top_k, e_local, e_global, h, i, quant):
    """fused_moe's workspace for a call of `tokens` on the row's weights `w` (sized for the layout ours reads)."""
    size = fused_moe_workspace_size(tokens, top_k, e_local, h, i, quant, num_experts_global=e_global,
                                    w13_interleaved="w13_ours" in w)
    return torch.empty(size, dtype=torch.uint8, device="cuda")


def _ours(w, inp, quant, offset, e_global, workspace):
    interleaved = "w13_ours" in w
    w13 = w["w13_ours"] if interleaved else w["w13"]

    def call():
        ht.fused_moe(inp["x"], w13, w["w2"], inp["weights"], inp["ids"], quant=quant, w13_scale=w["w13_scale"],
                     w2_scale=w["w2_scale"], a13_scale=w["a13_scale"], a2_scale=w["a2_scale"], expert_offset=offset,
                     num_experts_global=e_global, w13_interleaved=interleaved, out=inp["out"], workspace=workspace)
    return call


def _fp8(x, scale):
    return (x.float() / scale).clamp(-448, 448).to(FP8)


def _torch_grouped(w, inp, quant, offset, e_local):
    """The grouped-GEMM torch pipeline (graph-capturable: no host syncs)."""
    x, ids, weights = inp["x"], inp["ids"], inp["weights"]
    tokens, top_k = ids.shape
    inter = w["w2"].shape[2]
    use_scaled = quant == "fp8_tensor"
    w13 = w["w13_bf16"] if quant == "fp8_block128" else w["w13"]
    w2 = w["w2_bf16"] if quant == "fp8_block128" else w["w2"]

    def gemm(a, b, a_scale=None, b_scale=None):  # a [M, K], b [E, N, K] -> [M, N]
        if use_scaled:
            m, n = a.shape[0], b.shape[1]
            return torch._scaled_grouped_mm(a, b.transpose(-2, -1), a_scale.expand(m).contiguous(),
                                            b_scale[:, None].expand(-1, n).contiguous(), offs=offs_holder[0],
                                            out_dtype=torch.bfloat16)
        return torch._grouped_mm(a, b.transpose(-2, -1), offs=offs_holder[0])

    offs_holder = [None]

    def call():
        local = ids.long() - offset
        valid = (local >= 0) & (local < e_local)
        key = torch.where(valid, local, e_local).flatten()
        order = torch.argsort(key, stable=True)
        counts = torch.zeros(e_local + 1, device="cuda", dtype=torch.int64).index_add_(0, key, torch.ones_like(key))
        offs_holder[0] = torch.cumsum(counts[:e_local], 0).to(torch.int32)  # (bincount would sync)
        tok = order // top_k
        xs = x[tok]
        if use_scaled:
            xs = _fp8(xs, w["a13_scale"])
        gu = gemm(xs, w13, w["a13_scale"], w["w13_scale"])
        h = torch.nn.functional.silu(gu[:, :inter].float()) * gu[:, inter:].float()
        if use_scaled:
            h = _fp8(h, w["a2_scale"])
        else:
            h = h.to(torch.bfloat16)
        down = gemm(h, w2, w["a2_scale"], w["w2_scale"])
        wsorted = weights.flatten()[order]
        vsorted = valid.flatten()[order]
        contrib = torch.where(vsorted[:, None], down.float() * wsorted[:, None], 0.0)
        y = torch.zeros(tokens, x.shape[1], device="cuda", dtype=torch.float32).index_add_(0, tok, contrib)
        inp["peer_out"] = y.to(torch.bfloat16)
    return call


def _torch_loop(w, inp, quant, offset, e_local):
    """Per-expert loop, the fallback where torch has no grouped GEMM (host syncs: timed eagerly on one set; its
    time is reported as "(loop)" without a speedup, since it is not timed like ours)."""
    x, ids, weights = inp["x"], inp["ids"], inp["weights"]
    inter = w["w2"].shape[2]

    def deq(name):
        if quant is None:
            return w[name]
        if quant == "fp8_block128":
            return w[name + "_bf16"]
        return None

    def call():
        y = torch.zeros(x.shape, device="cuda", dtype=torch.float32)
        local = ids.long() - offset
        for e in torch.unique(local[(local >= 0) & (local < e_local)]).tolist():
            t, j = torch.nonzero(local == e, as_tuple=True)
            w13 = deq("w13")[e] if deq("w13") is not None else (w["w13"][e].float() * w["w13_scale"][e]).bfloat16()
            w2 = deq("w2")[e] if deq("w2") is not None else (w["w2"][e].float() * w["w2_scale"][e]).bfloat16()
            gu = x[t] @ w13.t()
            h = (torch.nn.functional.silu(gu[:, :inter].float()) * gu[:, inter:].float()).bfloat16()
            y.index_add_(0, t, (h @ w2.t()).float() * weights[t, j][:, None])
        inp["peer_out"] = y.bfloat16()
    return call


# A peer's output must match ours to have its time reported: ||theirs - ours|| / ||ours|| over the sets at most this
# (the recorded Triton errors: bf16 ~5e-3, fp8 1.2-2.1e-2; the torch pipeline's block128 keeps x in bf16).
PEER_TOL = {None: 2e-2, "fp8_tensor": 6e-2, "fp8_block128": 6e-2}


def _rel_err(sets, key):
    """||theirs - ours|| / ||ours|| over every set holding `key` (ours: its "out", which our timed graph wrote),
    or None when none does. Over all sets, not the first: under expert parallelism the first set may route no pair
    to a local expert (both outputs zero: an error of 0 that checks nothing)."""
    pairs = [(s[key].float(), s["out"].float()) for s in sets if key in s]
    if not pairs:
        return None
    diff = torch.stack([(t - o).norm() for t, o in pairs]).norm()
    return (diff / torch.stack([o.norm() for _, o in pairs]).norm().clamp_min(1e-30)).item()


def _ours_finite(sets):
    return report.ours_finite([s["out"] for s in sets], "the peer comparisons of this row")


def _matches(name, err, quant):
    return report.peer_agrees(name + " peer", err, PEER_TOL[quant])


def _peer_time(w, sets, quant, offset, e_local, replays):
    try:
        calls = [_torch_grouped(w, s, quant, offset, e_local) for s in sets]
        calls[0]()
        torch.cuda.synchronize()
        return timing.graph_time_us(calls, replays=replays), "grouped"
    except (RuntimeError, TypeError, NotImplementedError, AttributeError):
        torch.cuda.synchronize()
        for s in sets:  # what a failed capture left there never ran
            s.pop("peer_out", None)
        us = timing.event_time_us([_torch_loop(w, s, quant, offset, e_local) for s in sets[:1]], reps=3)
        for s in sets[1:]:  # untimed, so the output check covers every set (the first may hit no local expert)
            _torch_loop(w, s, quant, offset, e_local)()
        return us, "loop"


_TRITON = {}


def triton_peer():
    """vLLM 0.33's Triton fused MoE (the extracted package), or None; the reason is in _TRITON["why"]."""
    if "mod" in _TRITON:
        return _TRITON["mod"]
    env = os.environ.get("HPC_TRITON_MOE_DIR")
    here = Path(__file__).resolve().parents[2] / ".peer" / "vllm_triton_moe"
    candidates = [Path(env)] if env else [here, Path.cwd() / ".peer" / "vllm_triton_moe"]
    mod, why = None, "no %s (run tools/fetch_triton_moe.sh, carry .peer)" % candidates[0]
    for d in candidates:
        if not (d / "__init__.py").is_file():
            continue
        try:
            if str(d.parent) not in sys.path:
                sys.path.insert(0, str(d.parent))
            mod = importlib.import_module(d.name)
            _TRITON["dir"] = str(d)
            why = "vLLM %s Triton fused_moe_kernel from %s" % (getattr(mod, "VLLM_VERSION", "?"), d)
        except Exception as e:  # an incomplete extraction, triton missing, ...
            mod, why = None, "import of %s failed: %s" % (d, str(e).splitlines()[0][:160] if str(e) else repr(e))
        break
    _TRITON["mod"], _TRITON["why"] = mod, why
    return mod


def _expert_map(e_local, e_global, offset):
    """vLLM's expert_map (global id -> local id, -1 elsewhere); None without expert parallelism."""
    if e_local == e_global and offset == 0:
        return None
    emap = torch.full((e_global,), -1, dtype=torch.int32, device="cuda")
    emap[offset:offset + e_local] = torch.arange(e_local, dtype=torch.int32, device="cuda")
    return emap


def _triton_call(peer, w, inp, quant, e_global, expert_map):
    def call():
        peer.fused_experts(inp["x"], w["w13"], w["w2"], inp["weights"], inp["ids"], quant=quant,
                           w1_scale=w["w13_scale"], w2_scale=w["w2_scale"], a1_scale=w["a13_scale"],
                           a2_scale=w["a2_scale"], global_num_experts=e_global, expert_map=expert_map,
                           out=inp["triton_out"])
    return call


def _triton_time(peer, w, sets, quant, e_global, expert_map, replays):
    """µs of the Triton layer (same graph replay as ours) and its relative error against our outputs (ours must have
    run on the sets already); (None, None) when the peer is missing or fails, (None, err) when it disagrees."""
    if peer is None or quant not in getattr(peer, "QUANTS", ()):
        return None, None
    try:
        for s in sets:
            s["triton_out"] = torch.empty_like(s["out"])
        calls = [_triton_call(peer, w, s, quant, e_global, expert_map) for s in sets]
        calls[0]()  # eager first: JIT-compiles the kernels outside the capture
        torch.cuda.synchronize()
        us = timing.graph_time_us(calls, replays=replays)
        err = _rel_err(sets, "triton_out")
        return (us if _matches("triton", err, quant) else None), err
    except Exception as e:  # report and go on: the peer must never stop our benchmark
        print("    triton peer failed: %s" % (str(e).splitlines()[0][:200] if str(e) else repr(e)), flush=True)
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        return None, None


def _precompile_jobs(jobs):
    """Worker: run the Triton layer once per (shape, T) on zero weights so that every kernel it launches is
    compiled into Triton's on-disk cache (same shapes, strides and sizes as the timed run: same cache keys)."""
    peer = triton_peer()
    if peer is None:
        return
    w, w_key = None, None
    for name, e_local, e_global, offset, h, i, top_k, quant, tokens in jobs:
        try:
            if w_key != (name, quant):
                w = None
                torch.cuda.empty_cache()
                wd = FP8 if quant else torch.bfloat16  # zero bytes (no fill kernel needed for fp8)
                w = dict(w13=torch.zeros(e_local, 2 * i, h * wd.itemsize, device="cuda", dtype=torch.uint8).view(wd),
                         w2=torch.zeros(e_local, h, i * wd.itemsize, device="cuda", dtype=torch.uint8).view(wd),
                         w13_scale=None, w2_scale=None, a13_scale=None, a2_scale=None)
                if quant == "fp8_tensor":
                    w.update(w13_scale=torch.ones(e_local, device="cuda"), w2_scale=torch.ones(e_local, device="cuda"),
                             a13_scale=torch.tensor(1.0, device="cuda"), a2_scale=torch.tensor(1.0, device="cuda"))
                elif quant == "fp8_block128":
                    w.update(w13_scale=torch.ones(e_local, 2 * i // 128, h // 128, device="cuda"),
                             w2_scale=torch.ones(e_local, h // 128, i // 128, device="cuda"))
                w_key = (name, quant)
            inp = dict(x=torch.zeros(tokens, h, device="cuda", dtype=torch.bfloat16),
                       ids=torch.randint(0, e_global, (tokens, top_k), device="cuda", dtype=torch.int32),
                       weights=torch.ones(tokens, top_k, device="cuda"))
            inp["triton_out"] = torch.empty_like(inp["x"])
            _triton_call(peer, w, inp, quant, e_global, _expert_map(e_local, e_global, offset))()
            torch.cuda.synchronize()
        except Exception as e:  # the timed run compiles (and reports) whatever failed here
            print("precompile %s %s T=%d: %s" % (name, quant, tokens, e), file=sys.stderr)


def _precompile(jobs, timeout_s=240):
    """Compile the Triton peer's kernels in parallel processes before the timed loop (one process compiles one
    kernel at a time, ~2 s each, ~65 kernels for the default shapes and T). Best effort: on a failure or the
    timeout the timed run just compiles what is missing itself. HPC_TRITON_PRECOMPILE=0 turns it off."""
    import json
    import subprocess

    workers = max(1, min(8, (os.cpu_count() or 2) // 2, len(jobs)))
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    if _TRITON.get("dir"):
        env["HPC_TRITON_MOE_DIR"] = _TRITON["dir"]
    code = "import json, sys; from hpc_xla.bench.moe import _precompile_jobs; _precompile_jobs(json.loads(sys.argv[1]))"
    procs = [subprocess.Popen([sys.executable, "-c", code, json.dumps(jobs[k::workers])], env=env,
                              stdout=subprocess.DEVNULL) for k in range(workers)]
    deadline = time.time() + timeout_s
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return workers


def _fmt(v, spec):
    return "-" if v is None else spec % v


def plot(path, records):
    """µs against T per shape: ours, torch, triton (log-log)."""
    panels = []
    for key in dict.fromkeys((r["shape"], r["quant"]) for r in records):
        rs = [r for r in records if (r["shape"], r["quant"]) == key]
        xs = [r["tokens"] for r in rs]
        panels.append(dict(title="%s %s" % key, xlabel="T (tokens)", ylabel="us per layer", logx=True, logy=True,
                           series=[dict(label="hpc_xla", x=xs, y=[r["us"] for r in rs]),
                                   dict(label="torch", x=xs, y=[r["torch_us"] for r in rs]),
                                   dict(label="vLLM triton", x=xs, y=[r["triton_us"] for r in rs])]))
    return report.plot(path, panels, title="fused_moe on %s (CUDA-graph replay)" % torch.cuda.get_device_name(0))


def _selected_shapes(spec):
    """SHAPES, or the ones `spec` names ("name" or "name/quant", comma-separated); an unknown name is an error."""
    if not spec:
        return SHAPES
    picked = []
    for item in spec.split(","):
        name, _, quant = item.partition("/")
        match = [s for s in SHAPES if s[0] == name and (not quant or (s[7] or "bf16") == quant)]
        if not match:
            raise SystemExit("--shapes: no shape %r; known: %s" % (item, ", ".join(
                sorted({"%s/%s" % (s[0], s[7] or "bf16") for s in SHAPES}))))
        picked += [s for s in match if s not in picked]
    return tuple(picked)


def _generator(*key):
    """A CUDA generator seeded by the row's identity, so a (shape, T) row draws the same weights and routing whatever
    else the command line selects (one shared generator made an Hy3-EP8 T=1 row hit 1 or 2 local experts -- 15.5 or
    18.2 us -- depending on the rows drawn before it)."""
    return torch.Generator(device="cuda").manual_seed(zlib.crc32("/".join(map(str, key)).encode()))


def _ceilings(shapes):
    """The same-run ceilings the rows are put against: the D2D copy (TB/s) and an n=8192 GEMM of each operand type
    the selected shapes use (TFLOP/s; None with the reason where torch cannot run it)."""
    out = dict(copy_tbps=timing.copy_ceiling_tbps())
    for kind in sorted({"fp8" if s[7] else "bf16" for s in shapes}):
        out[kind + "_tflops"], why = timing.gemm_ceiling_tflops(kind)
        if why:
            out[kind + "_why"] = why
    return out


def _ceilings_text(c):
    parts = ["copy %.2f TB/s" % c["copy_tbps"]]
    for kind in ("bf16", "fp8"):
        if kind + "_tflops" in c:
            v = c[kind + "_tflops"]
            parts.append("%s GEMM %s" % (kind, "-" if v is None else "%.0f TFLOP/s" % v))
    return ", ".join(parts)


def _roofline(ceilings, quant, hit_bytes, flops, us):
    """The row's rates (TB/s on the hit weights, TFLOP/s), their % of the memory and tensor-core ceilings, and `us`
    against the floor max(bytes / copy, FLOPs / GEMM)."""
    gemm = ceilings.get(("fp8" if quant else "bf16") + "_tflops")
    copy = ceilings["copy_tbps"]
    tbps, tflops = hit_bytes / (us * 1e-6) / 1e12, flops / (us * 1e-6) / 1e12
    floor_us = max(hit_bytes / (copy * 1e12), 0.0 if gemm is None else flops / (gemm * 1e12)) * 1e6
    return dict(tbps=tbps, tflops=tflops, pct_mem=100 * tbps / copy,
                pct_tc=None if gemm is None else 100 * tflops / gemm, floor_us=floor_us,
                x_floor=us / floor_us if floor_us > 0 else None)


def run(args):
    started = time.time()
    torch.manual_seed(0)
    l2 = timing.l2_bytes()
    tokens_list = [int(t) for t in args.tokens.split(",")] if args.tokens else TOKENS
    shapes = _selected_shapes(getattr(args, "shapes", None))
    rows, records = [], []
    peers = os.environ.get("HPC_BENCH_PEERS", "1") != "0"  # 0: ours only (A/B runs of HPC_XLA_MOE_PATH)
    peer = triton_peer() if peers else None
    print("triton peer: %s" % (_TRITON["why"] if peers else "off (HPC_BENCH_PEERS=0)"), flush=True)
    print("routing: %s (HPC_BENCH_MOE_ROUTING)" % _routing(), flush=True)
    if peer is not None and os.environ.get("HPC_TRITON_PRECOMPILE", "1") != "0":
        t0 = time.time()
        jobs = [list(shape) + [t] for shape in shapes for t in tokens_list]
        workers = _precompile(jobs)
        print("triton peer: kernels precompiled for %d (shape, T) in %d processes, %.0f s" % (
            len(jobs), workers, time.time() - t0), flush=True)
    ceilings = _ceilings(shapes)
    for name, e_local, e_global, offset, h, i, top_k, quant in shapes:
        w = _row_weights(name, e_local, h, i, quant)
        interleaved = "w13_ours" in w
        emap = _expert_map(e_local, e_global, offset)
        tuned = None
        if peer is not None:
            try:
                tuned = bool(peer.config_is_tuned(w["w13"], w["w2"], quant))
            except Exception:
                tuned = None
            print("  %s %s: triton config %s" % (name, quant or "bf16", {True: "tuned JSON for this device", False:
                  "vLLM default (no tuned JSON)", None: "?"}[tuned]), flush=True)
        elem = 1 if quant else 2
        expert_bytes = 3 * h * i * elem
        for tokens in tokens_list:
            gen = _generator(name, quant, tokens)
            probe = _inputs(tokens, e_local, e_global, offset, h, top_k, gen)
            counts = [_local_hits(probe, offset, e_local)]
            sets_n = max(1, min(8, math.ceil(2 * l2 / max(counts[0][0] * expert_bytes, 1))))
            sets = [probe] + [_inputs(tokens, e_local, e_global, offset, h, top_k, gen) for _ in range(sets_n - 1)]
            counts += [_local_hits(s, offset, e_local) for s in sets[1:]]
            # What the timed graph does per call: the mean over its rotating sets, whose routings differ (the first
            # set's alone made the Hy3-EP8 T=1 row report 0 experts hit while 7 of its 8 sets hit some).
            hit, pairs = (sum(v) / len(counts) for v in zip(*counts))
            hit_bytes = max(hit * expert_bytes, 1)
            flops = 2.0 * pairs * 3 * h * i
            ws = _workspace(w, tokens, top_k, e_local, e_global, h, i, quant)
            big = flops > 2e12
            replays = 5 if big else 20
            ours = timing.graph_time_us([_ours(w, s, quant, offset, e_global, ws) for s in sets], replays=replays)
            theirs, peer_kind = _peer_time(w, sets, quant, offset, e_local, replays) if peers else (None, "off")
            ours_finite = _ours_finite(sets)
            torch_err = _rel_err(sets, "peer_out") if theirs is not None else None
            if not _matches("torch", torch_err, quant):
                theirs = None
            tri, tri_err = _triton_time(peer, w, sets, quant, e_global, emap, replays)
            tile_m = ext().fused_moe_tile_m(tokens, top_k, e_local, _options.moe_quant_code(quant))
            grouped_rows = ext().fused_moe_grouped_cta_rows(tokens, top_k, e_local, e_global,
                                                            _options.moe_quant_code(quant)) if tile_m == 128 else None
            act_in_epilogue = bool(ext().fused_moe_act_in_epilogue(tokens, top_k, e_local, e_global,
                                                                   _options.moe_quant_code(quant), interleaved))
            roof = _roofline(ceilings, quant, hit_bytes, flops, ours)
            tbps, tflops = roof["tbps"], roof["tflops"]
            rec = dict(shape=name, quant=quant or "bf16", experts=[e_local, e_global], hidden=h, inter=i,
                       top_k=top_k, tokens=tokens, local_pairs=pairs, experts_hit=hit, weight_bytes_hit=hit_bytes,
                       us=ours, ours_finite=ours_finite, torch_us=theirs, torch_kind=peer_kind, torch_rel_err=torch_err,
                       # the loop fallback is timed eagerly on one L2-warm set with host syncs (and, for fp8_tensor,
                       # a dequantization per call): not comparable with our graph-replayed rotation, so no ratio
                       speedup_vs_torch=None if theirs is None or peer_kind != "grouped" else theirs / ours,
                       triton_us=tri,
                       speedup_vs_triton=None if tri is None else tri / ours, triton_rel_err=tri_err,
                       triton_config=None if tri is None else peer.config_for(w["w13"], w["w2"], top_k, tokens,
                                                                              quant),
                       triton_config_tuned=tuned, rotating_sets=sets_n,
                       tile_m=tile_m, grouped_cta_rows=grouped_rows, **roof,
                       path=os.environ.get("HPC_XLA_MOE_PATH", "auto"),
                       act=os.environ.get("HPC_XLA_MOE_ACT", "auto"), w13_interleaved=interleaved,
                       act_in_epilogue=act_in_epilogue)
            records.append(rec)
            rows.append([name, quant or "bf16", tokens, "%.1f" % ours, "%.2f" % tbps, "%.1f" % tflops,
                         _fmt(roof["pct_mem"], "%.0f%%"), _fmt(roof["pct_tc"], "%.0f%%"),
                         _fmt(roof["x_floor"], "%.2fx"),
                         _fmt(theirs, "%.1f") + ("" if peer_kind in ("grouped", "off") else " (loop)"),
                         _fmt(rec["speedup_vs_torch"], "%.2fx"), _fmt(tri, "%.1f"),
                         _fmt(rec["speedup_vs_triton"], "%.2fx"), _fmt(tri_err, "%.1e")])
            print("  " + "  ".join(str(x) for x in rows[-1]), flush=True)
            for s in sets:
                s.pop("triton_out", None)
                s.pop("peer_out", None)
            del sets, probe, ws
            torch.cuda.empty_cache()
        del w, emap
        torch.cuda.empty_cache()
    report.print_table("fused_moe on %s (CUDA-graph replay, median; triton = vLLM 0.33 fused_moe_kernel, full "
                       "layer; ceilings: %s)" % (torch.cuda.get_device_name(0), _ceilings_text(ceilings)),
                       ["shape", "quant", "T", "us", "TB/s(w hit)", "TFLOP/s", "%mem", "%tc", "x floor", "torch us",
                        "speedup", "triton us", "vs triton", "tri err"], rows)
    print("%mem: TB/s(w hit) against the copy ceiling; %tc: TFLOP/s against the same-run n=8192 GEMM of the row's "
          "operand type; x floor: us / max(hit weight bytes / copy ceiling, FLOPs / GEMM ceiling).")
    print("triton peer: %s; moe suite took %.0f s" % (_TRITON.get("why", "off"), time.time() - started))
    report.write_json(args.out, dict(suite="moe", device=torch.cuda.get_device_name(0), rows=records,
                                     ceilings=ceilings,
                                     torch=torch.__version__, triton_peer=_TRITON.get("why", "off"),
                                     seconds=time.time() - started))
    plot(report.plot_path(args.out), records)
    return records
