"""rope_norm benchmark: hpc_xla's fused kernel against the unfused torch sequence a user would write (RMSNorm,
RoPE, cache scatter, fp8 quant as separate torch ops), both under CUDA-graph replay in the same run.

Bytes counted (the fewest a correct implementation must move): q, k, v read; q (or fp8 q + scales) written;
K/V written into the cache (2 or 1 bytes/element); positions, slot_mapping and the tokens' cos/sin rows read.
"%ceil" is against the copy ceiling (a 2 GiB device copy); "copy us" times a plain copy of the same bytes under the
same graph replay, for reference: at small sizes even a copy stays well below the ceiling.

Index layouts (HPC_BENCH_ROPE_LAYOUT): "serving" (default) is what vLLM hands the kernel: the batch is a few
sequences (chunks of 64..2048 tokens), positions run consecutively inside each from a random start, and each
sequence fills whole pages taken in random order from the block allocator (slots consecutive within a page).
"random" draws every position and every slot independently (a random permutation of the cache's slots): the
worst case for DRAM locality, kept to show what scattered 1-page-row writes cost.
"""

import math
import os
import time

import torch

import hpc_xla.torch as ht
from hpc_xla._ext import ext
from hpc_xla.bench import report, timing

TOKENS = (1, 64, 1024, 16384)
HEADS = ((64, 8, 128), (8, 1, 128), (32, 4, 128))
VARIANTS = ("bf16", "fp8")  # bf16: bf16 cache, bf16 q; fp8: fp8 cache + fp8 q (per-token-head scale)
PAGE = 64
EPS = 1e-6


def _indices(layout, tokens, sets, num_blocks, max_pos, gen):
    """positions [sets, tokens] and slots [sets, tokens] (int64, on gen's device) for the index layout (module
    docstring)."""
    dev = gen.device
    if layout == "random":
        slots = torch.randperm(num_blocks * PAGE, device=dev, generator=gen)[: sets * tokens]
        pos = torch.randint(0, max_pos, (sets * tokens,), device=dev, dtype=torch.int64, generator=gen)
        return pos.view(sets, tokens), slots.view(sets, tokens)
    cpu = torch.Generator().manual_seed(tokens * 131 + sets)
    pages = torch.randperm(num_blocks, generator=cpu).tolist()
    pos, slots, page_i = [], [], 0
    for _ in range(sets):
        left = tokens
        while left > 0:  # one sequence chunk: consecutive positions, its own pages
            n = min(left, int(torch.randint(64, 2049, (1,), generator=cpu)))
            start = int(torch.randint(0, max_pos - n + 1, (1,), generator=cpu))
            pos.append(torch.arange(start, start + n))
            npages = -(-n // PAGE)
            seq_pages = torch.tensor(pages[page_i:page_i + npages])
            page_i += npages
            slots.append((seq_pages[:, None] * PAGE + torch.arange(PAGE)[None]).flatten()[:n])
            left -= n
    return (torch.cat(pos).view(sets, tokens).to(dev), torch.cat(slots).view(sets, tokens).to(dev))


def _problem(tokens, hq, hkv, d, variant, sets, gen, layout="serving"):
    """`sets` rotating input sets sharing one cache (each set writes its own slots), on gen's device."""
    dev = gen.device
    max_pos = 32768
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
    freqs = torch.arange(max_pos, device=dev, dtype=torch.float32)[:, None] * inv[None]
    cos_sin = torch.cat([freqs.cos(), freqs.sin()], dim=-1)
    # serving layout: a set has at most ceil(tokens / PAGE) + 1 sequence chunks, each may leave a partial page
    num_blocks = sets * (2 * math.ceil(tokens / PAGE) + 1) + 1
    cache_dtype = torch.float8_e4m3fn if variant == "fp8" else torch.bfloat16
    k_cache = torch.randn(num_blocks, PAGE, hkv, d, device=dev).to(cache_dtype)
    v_cache = torch.randn(num_blocks, PAGE, hkv, d, device=dev).to(cache_dtype)
    positions, slots = _indices(layout, tokens, sets, num_blocks, max_pos, gen)
    common = dict(cos_sin=cos_sin, k_cache=k_cache, v_cache=v_cache,
                  qw=torch.rand(d, device=dev) + 0.5, kw=torch.rand(d, device=dev) + 0.5,
                  k_scale=torch.tensor(0.05, device=dev) if variant == "fp8" else None,
                  v_scale=torch.tensor(0.05, device=dev) if variant == "fp8" else None)
    out = []
    for i in range(sets):
        qkv = torch.randn(tokens, (hq + 2 * hkv) * d, device=dev, dtype=torch.bfloat16)
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)  # vLLM's strided views of one qkv tensor
        out.append(dict(common, q=q.view(tokens, hq, d), k=k.view(tokens, hkv, d), v=v.view(tokens, hkv, d),
                        positions=positions[i].contiguous(), slots=slots[i].contiguous(),
                        q_out=torch.empty(tokens, hq, d, device=dev,
                                          dtype=torch.float8_e4m3fn if variant == "fp8" else torch.bfloat16),
                        q_scale=torch.empty(tokens, hq, device=dev) if variant == "fp8" else None))
    return out


def _bytes(tokens, hq, hkv, d, variant):
    in_bytes = tokens * (hq + 2 * hkv) * d * 2
    out_elem = 1 if variant == "fp8" else 2
    out_bytes = tokens * (hq + 2 * hkv) * d * out_elem + (tokens * hq * 4 if variant == "fp8" else 0)
    meta = tokens * (8 + 8 + d * 4)  # positions, slots, cos/sin row (rotary_dim = d floats)
    return in_bytes + out_bytes + meta


def _fused(p, variant):
    def call():
        ht.rope_norm(p["q"], p["k"], p["v"], p["positions"], p["cos_sin"], p["slots"], p["k_cache"], p["v_cache"],
                     q_norm_weight=p["qw"], k_norm_weight=p["kw"], eps=EPS, k_scale=p["k_scale"],
                     v_scale=p["v_scale"], q_quant="fp8" if variant == "fp8" else None, out=p["q_out"],
                     out_scale=p["q_scale"])
    return call


def _rope_neox(x, cos, sin):
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _unfused(p, variant):
    """What a torch user writes: separate RMSNorm, RoPE, quant and scatter ops (all graph-capturable)."""
    d = p["q"].shape[-1]

    def call():
        q = torch.nn.functional.rms_norm(p["q"], (d,), p["qw"].to(p["q"].dtype), EPS)
        k = torch.nn.functional.rms_norm(p["k"], (d,), p["kw"].to(p["k"].dtype), EPS)
        cos, sin = p["cos_sin"][p["positions"]].unsqueeze(1).chunk(2, dim=-1)
        q, k = _rope_neox(q, cos, sin), _rope_neox(k, cos, sin)
        v = p["v"]
        if variant == "fp8":
            scale = q.abs().amax(dim=-1, keepdim=True) / 448.0
            p["q_out"].copy_((q / scale).clamp(-448, 448).to(torch.float8_e4m3fn))
            p["q_scale"].copy_(scale.squeeze(-1))
            k = (k / p["k_scale"]).clamp(-448, 448).to(torch.float8_e4m3fn)
            v = (v.float() / p["v_scale"]).clamp(-448, 448).to(torch.float8_e4m3fn)
        else:
            p["q_out"].copy_(q)
            k = k.to(torch.bfloat16)
        hkv = p["k"].shape[1]
        # index_copy_ has no float8 kernel: scatter the bytes
        for cache, x in ((p["k_cache"], k), (p["v_cache"], v)):
            if cache.dtype == torch.float8_e4m3fn:
                cache, x = cache.view(torch.uint8), x.view(torch.uint8)
            cache.view(-1, hkv, d).index_copy_(0, p["slots"], x)
    return call


# The unfused sequence's results must match the fused op's to have its time reported: max |diff| / max |fused| of
# q (dequantized for fp8) and of the written K / V cache rows. Its RMSNorm runs in bf16 (rms_norm in the input
# dtype), ours in fp32: a few bf16 ulps apart; with fp8 one rounding step apart at the top binade is already
# 32 / 448 = 7% of the max (seen on the CPU path: 6.6e-2), so two steps are allowed. A wrong result (a norm weight
# off by 2x: q doubles) reads ~1.
UNFUSED_TOL = {"bf16": 3e-2, "fp8": 0.15}


def _written(p):
    """(q, k rows, v rows) as float32, dequantized, from what the last call wrote into p's buffers."""
    q = p["q_out"].float() * (p["q_scale"][..., None] if p["q_scale"] is not None else 1.0)
    rows = []
    for cache, scale in ((p["k_cache"], p["k_scale"]), (p["v_cache"], p["v_scale"])):
        x = cache.view(-1, *cache.shape[2:])[p["slots"].long()].float()
        rows.append(x * scale if scale is not None else x)
    return (q, *rows)


def unfused_error(p, variant):
    """The unfused sequence against the fused op on problem p: the largest relative error over q, K and V rows."""
    _fused(p, variant)()
    fused = [x.clone() for x in _written(p)]
    report.ours_finite(fused, "the unfused comparisons")
    _unfused(p, variant)()
    return max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
               for a, b in zip(_written(p), fused))


def index_layout():
    """HPC_BENCH_ROPE_LAYOUT (module docstring): 'serving' (default) or 'random'."""
    layout = os.environ.get("HPC_BENCH_ROPE_LAYOUT", "serving")
    if layout not in ("serving", "random"):
        raise ValueError("HPC_BENCH_ROPE_LAYOUT must be 'serving' or 'random', got %r" % layout)
    return layout


def time_fused(tokens, hq, hkv, d, variant, gen, layout="serving"):
    """The fused op under graph replay on enough rotating input sets to exceed L2 four times: (bytes per call,
    sets, the problems, median us per call)."""
    nbytes = _bytes(tokens, hq, hkv, d, variant)
    sets = max(1, min(64, math.ceil(4 * timing.l2_bytes() / nbytes)))
    probs = _problem(tokens, hq, hkv, d, variant, sets, gen, layout)
    return nbytes, sets, probs, timing.graph_time_us([_fused(p, variant) for p in probs])


def time_fused_separated(probs, variant):
    """The same calls with an ordinary kernel between them (timing.capture's separator, its time subtracted): a
    model runs other kernels between two rope_norm calls, so chained calls -- whose PDL prologues overlap the
    previous call's tail -- flatter the small rows (session 40, H200: bf16 8/1 T=1024 3.8 us chained, 4.7 us
    separated; T=16384 unmoved)."""
    return timing.graph_time_us([_fused(p, variant) for p in probs], separate=True)


def host_overhead_us(n=2000):
    """Per-call host cost without a graph: the bridge alone (4 tensors + stream) and a full rope_norm call
    (T=1) through torch.ops, both launching asynchronously."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    p = _problem(1, 8, 1, 128, "bf16", 1, gen)[0]
    four = (p["q"], p["k"], p["v"], p["positions"])
    call = _fused(p, "bf16")
    result = {}
    for name, fn in (("bridge_4_tensors_us", lambda: ext().bridge_probe(*four)), ("rope_norm_call_us", call)):
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        result[name] = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize()
    return result


def run(args):
    torch.manual_seed(0)
    gen = torch.Generator(device="cuda").manual_seed(0)
    ceiling = timing.copy_ceiling_tbps()
    layout = index_layout()
    rows, records = [], []
    tokens_list = [int(t) for t in args.tokens.split(",")] if args.tokens else TOKENS
    heads_list = [tuple(int(x) for x in h.split("/")) for h in args.heads.split(",")] if args.heads else HEADS
    for variant in ([args.kv] if args.kv else VARIANTS):
        for hq, hkv, d in heads_list:
            for tokens in tokens_list:
                nbytes, sets, probs, ours = time_fused(tokens, hq, hkv, d, variant, gen, layout)
                separated = time_fused_separated(probs, variant)
                theirs = timing.graph_time_us([_unfused(p, variant) for p in probs])
                err = unfused_error(probs[0], variant)
                if not report.peer_agrees("unfused " + variant, err, UNFUSED_TOL[variant]):
                    theirs = None
                copy = timing.same_size_copy_us(nbytes, sets)
                tbps = nbytes / (ours * 1e-6) / 1e12
                rec = dict(variant=variant, heads=[hq, hkv, d], tokens=tokens, bytes=nbytes, us=ours,
                           tbps=tbps, pct_ceiling=100 * tbps / ceiling, separated_us=separated, unfused_us=theirs,
                           unfused_rel_err=err,
                           speedup_vs_unfused=None if theirs is None else theirs / ours, same_size_copy_us=copy,
                           rotating_sets=sets,
                           index_layout=layout)
                records.append(rec)
                rows.append([variant, "%d/%d/%d" % (hq, hkv, d), tokens, "%.1f" % ours, "%.1f" % separated,
                             "%.2f" % tbps, "%.0f%%" % rec["pct_ceiling"], "%.1f" % copy,
                             "-" if theirs is None else "%.1f" % theirs,
                             "-" if theirs is None else "%.2fx" % rec["speedup_vs_unfused"]])
                print("  " + "  ".join(str(x) for x in rows[-1]), flush=True)
                del probs
    overhead = host_overhead_us()
    report.print_table("rope_norm on %s (copy ceiling %.2f TB/s, CUDA-graph replay, median, %s indices)" % (
        torch.cuda.get_device_name(0), ceiling, layout),
        ["variant", "Hq/Hkv/D", "T", "us", "sep us", "TB/s", "%ceil", "copy us", "unfused us", "speedup"], rows)
    print("us: calls chained back to back (PDL overlaps each call's start with the previous one's tail); sep us: "
          "the same calls with an ordinary kernel between them, its time subtracted -- how a model runs it. "
          "copy us: a plain D2D copy of the same bytes (half read, half written) under the same graph replay, "
          "for reference; %ceil (of the chained us) is against the 2 GiB copy ceiling.")
    print("host overhead per call (no graph): bridge 4 tensors %.2f us, rope_norm via torch.ops %.2f us" % (
        overhead["bridge_4_tensors_us"], overhead["rope_norm_call_us"]))
    report.write_json(args.out, dict(suite="rope_norm", device=torch.cuda.get_device_name(0),
                                     copy_ceiling_tbps=ceiling, host_overhead=overhead, rows=records,
                                     torch=torch.__version__))
    plot(report.plot_path(args.out), records, ceiling)
    return records


def plot(path, records, ceiling):
    """% of the copy ceiling against T, one panel per variant, one series per head config."""
    panels = []
    for variant in dict.fromkeys(r["variant"] for r in records):
        rs = [r for r in records if r["variant"] == variant]
        heads = dict.fromkeys(tuple(r["heads"]) for r in rs)
        panels.append(dict(title="rope_norm %s" % variant, xlabel="T (tokens)", ylabel="% of copy ceiling",
                           logx=True, series=[dict(label="%d/%d/%d" % hd, x=[r["tokens"] for r in rs
                                                                             if tuple(r["heads"]) == hd],
                                                   y=[r["pct_ceiling"] for r in rs if tuple(r["heads"]) == hd])
                                              for hd in heads]))
    return report.plot(path, panels, title="rope_norm on %s (copy ceiling %.2f TB/s)" % (
        torch.cuda.get_device_name(0), ceiling), ncols=2)
