"""decode benchmark: hpc_xla's dynamic (planner included) and static schedules on the issue's workloads,
CUDA-graph replay, KV bytes / time against the measured copy ceiling. FlashInfer 0.5.3 joins the table when
it is importable, same graph replay: at q_len 1 its two decode configs (with / without tensor cores; the table shows
the better, the JSON both under flashinfer_configs_us), at q_len 2 its causal paged prefill.

"us" is one step with its plan (the issue's measure); "layer us" is decode_attention alone with the step's plan
already built, what every further layer of the step costs. FlashInfer plans on the host before capture, so its
graph replay holds no planner: "layer vs FI" compares like with like."""

import math

import torch

import hpc_xla.torch as ht
from hpc_xla.bench import report, timing
from hpc_xla.bench.decode_workloads import workloads  # (tools read decode.workloads too)

HEADS = ((8, 1, 128), (64, 8, 128), (32, 8, 128))
PAGE = 64


def _problem(lens, hq, hkv, d, kv_dtype, q_len, sets, gen):
    dev = "cuda"
    pages = [math.ceil(n / PAGE) for n in lens]
    max_blocks = max(pages)
    num_blocks = sets * sum(pages) + 1
    # FlashInfer's NHD layout [NB, 2, P, Hkv, D]; our k/v caches are strided views of the same memory
    kv = torch.randn(num_blocks, 2, PAGE, hkv, d, device=dev, dtype=torch.bfloat16).to(kv_dtype)
    k_cache, v_cache = kv[:, 0], kv[:, 1]
    perm = torch.randperm(num_blocks, device=dev, generator=gen)
    out = []
    used = 0
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    for _ in range(sets):
        table = torch.zeros(len(lens), max_blocks, dtype=torch.int32, device=dev)
        for b, n in enumerate(pages):
            table[b, :n] = perm[used:used + n]
            used += n
        q = torch.randn(len(lens) * q_len, hq, d, device=dev, dtype=torch.bfloat16)
        out.append(dict(q=q, table=table, out=torch.empty_like(q)))
    scales = dict(k_scale=torch.tensor(1.0, device=dev), v_scale=torch.tensor(1.0, device=dev)) \
        if kv_dtype == torch.float8_e4m3fn else {}
    return kv, k_cache, v_cache, seq_lens, out, scales


def flashinfer_us(kv, seq_lens, sets, hq, hkv, d, q_len, reference):
    """FlashInfer 0.5.3 on the same pages, same graph replay: ({config: us}, {config: relative error against
    `reference`, our output for sets[0]}); empty when it is not installed. A config it cannot run, or whose output
    does not match ours (max |diff| / max |ours| above 2e-2, fp8 KV 0.1), is left out of the times (its error is
    kept). q_len 1: BatchDecodeWithPagedKVCacheWrapper with and without tensor cores (its two decode configs, "tc" /
    "cuda"); q_len > 1: BatchPrefillWithPagedKVCacheWrapper, causal (its masks align the q_len new tokens with the
    end of each sequence, as ours), with its FA2 kernels and with backend="auto" (FA3 on sm_90, whose planner does
    not split a long sequence's KV across CTAs -- so both). Its plan() runs on the host and is left out of its time
    (ours includes our planner)."""
    try:
        import flashinfer
    except ImportError:
        return {}, {}
    lens = seq_lens.tolist()
    pages = [math.ceil(n / PAGE) for n in lens]
    indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0).tolist()), dtype=torch.int32, device="cuda")
    last = torch.tensor([n - (p - 1) * PAGE for n, p in zip(lens, pages)], dtype=torch.int32, device="cuda")
    qo_indptr = torch.arange(0, (len(lens) + 1) * q_len, q_len, dtype=torch.int32, device="cuda")
    configs = {"tc": True, "cuda": False} if q_len == 1 else {"prefill fa2": "fa2", "prefill auto": "auto"}
    # (fp8 KV: a backend may also quantize q or P to fp8 -- a wrong page or mask reads ~1)
    tol = 0.1 if kv.dtype == torch.float8_e4m3fn else 2e-2
    report.ours_finite([reference], "the FlashInfer comparisons")
    times, errors = {}, {}
    for config, option in configs.items():
        calls = []
        try:
            for s in sets:
                indices = torch.cat([s["table"][b, :n] for b, n in enumerate(pages)]).int()
                ws = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
                if q_len == 1:
                    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=option)
                    w.plan(indptr, indices, last, hq, hkv, d, PAGE, data_type=kv.dtype, q_data_type=torch.bfloat16)
                else:
                    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=option)
                    w.plan(qo_indptr, indptr, indices, last, hq, hkv, d, PAGE, causal=True,
                           q_data_type=torch.bfloat16, kv_data_type=kv.dtype)
                calls.append(lambda w=w, s=s: w.run(s["q"], kv))
            us = timing.graph_time_us(calls)
            got = calls[0]().float()
            errors[config] = float((got - reference.float()).abs().max() / reference.float().abs().max().clamp_min(
                1e-6))
            if report.peer_agrees("flashinfer " + config, errors[config], tol):
                times[config] = us
        except Exception as e:  # a config FlashInfer cannot run (e.g. fp8 without tensor cores)
            print("    flashinfer %s failed: %s" % (config, (str(e).splitlines() or [""])[0][:120]))
    return times, errors


def run(args):
    cgen = torch.Generator(device="cuda").manual_seed(0)
    ceiling = timing.copy_ceiling_tbps()
    l2 = timing.l2_bytes()
    rows, records = [], []
    only_heads = None if not getattr(args, "heads", None) else {
        tuple(int(x) for x in h.split("/")) for h in args.heads.split(",")}
    only_q_len = None if not getattr(args, "q_len", None) else {int(x) for x in args.q_len.split(",")}
    for kv_name, kv_dtype in (("bf16", torch.bfloat16), ("fp8", torch.float8_e4m3fn)):
        if getattr(args, "kv", None) and args.kv != kv_name:
            continue
        for hq, hkv, d in HEADS:
            if only_heads is not None and (hq, hkv, d) not in only_heads:
                continue
            for q_len in (1, 2):
                if q_len == 2 and (hq, hkv, d) != (8, 1, 128):
                    continue
                if only_q_len is not None and q_len not in only_q_len:
                    continue
                for name, lens in workloads().items():
                    kv_bytes = sum(lens) * hkv * d * 2 * (1 if kv_name == "fp8" else 2)
                    sets = max(1, min(8, math.ceil(3 * l2 / kv_bytes)))
                    kv, k_cache, v_cache, seq_lens, sets_, scales = _problem(lens, hq, hkv, d, kv_dtype, q_len,
                                                                             sets, cgen)
                    kw = dict(num_kv_heads=hkv, num_q_heads=hq, head_dim=d, page_size=PAGE, q_len=q_len,
                              kv_dtype=kv_dtype, q_dtype=torch.bfloat16)
                    plan = ht.decode_plan(seq_lens, **kw)

                    def dyn(s):
                        return lambda: (ht.decode_plan(seq_lens, out=plan, **kw),
                                        ht.decode_attention(s["q"], k_cache, v_cache, s["table"], seq_lens, plan,
                                                            q_len=q_len, out=s["out"], **scales))

                    def layer(s):  # every layer after the step's first: the plan is already built
                        return lambda: ht.decode_attention(s["q"], k_cache, v_cache, s["table"], seq_lens, plan,
                                                           q_len=q_len, out=s["out"], **scales)

                    def static(s):
                        return lambda: ht.decode_attention(s["q"], k_cache, v_cache, s["table"], seq_lens,
                                                           schedule="static", q_len=q_len, out=s["out"],
                                                           workspace=plan.workspace, **scales)

                    t_dyn = timing.graph_time_us([dyn(s) for s in sets_])
                    ht.decode_plan(seq_lens, out=plan, **kw)
                    t_layer = timing.graph_time_us([layer(s) for s in sets_])
                    # 8 plans back to back in one graph: per-plan time without the graph launch itself
                    t_plan = timing.graph_time_us([lambda: ht.decode_plan(seq_lens, out=plan, **kw)] * 8)
                    t_static = timing.graph_time_us([static(s) for s in sets_])
                    layer(sets_[0])()  # our output for the first set: what FlashInfer's must match
                    fi, fi_err = flashinfer_us(kv, seq_lens, sets_, hq, hkv, d, q_len, sets_[0]["out"].clone())
                    t_fi = min(fi.values()) if fi else None  # the table's column: its best config
                    floor = kv_bytes / (ceiling * 1e12) * 1e6
                    tbps = kv_bytes / (t_dyn * 1e-6) / 1e12
                    rec = dict(kv=kv_name, heads=[hq, hkv, d], q_len=q_len, workload=name, kv_bytes=kv_bytes,
                               us=t_dyn, plan_us=t_plan, layer_us=t_layer, static_us=t_static, floor_us=floor, tbps=tbps,
                               pct_ceiling=100 * tbps / ceiling, vs_static=t_static / t_dyn, flashinfer_us=t_fi,
                               flashinfer_configs_us=fi, flashinfer_rel_err=fi_err,
                               vs_flashinfer=None if t_fi is None else t_fi / t_dyn,
                               layer_vs_flashinfer=None if t_fi is None else t_fi / t_layer)
                    records.append(rec)
                    rows.append([kv_name, "%d/%d/%d" % (hq, hkv, d), q_len, name, "%.1f" % t_dyn, "%.1f" % t_plan,
                                 "%.1f" % t_layer,
                                 "%.1f" % floor, "%.2f" % tbps, "%.0f%%" % rec["pct_ceiling"], "%.1f" % t_static,
                                 "%.2fx" % rec["vs_static"], "-" if t_fi is None else "%.1f" % t_fi,
                                 "-" if t_fi is None else "%.2fx" % rec["vs_flashinfer"],
                                 "-" if t_fi is None else "%.2fx" % rec["layer_vs_flashinfer"]])
                    print("  " + "  ".join(str(x) for x in rows[-1]), flush=True)
                    kv = k_cache = v_cache = sets_ = plan = None  # free this workload's memory before the next
                    torch.cuda.empty_cache()
    report.print_table("decode on %s (copy ceiling %.2f TB/s; CUDA-graph replay, planner included)" % (
        torch.cuda.get_device_name(0), ceiling),
        ["kv", "Hq/Hkv/D", "q_len", "workload", "us", "plan us", "layer us", "floor us", "TB/s", "%ceil",
         "static us", "vs static", "FlashInfer us", "vs FI", "layer vs FI"], rows)
    report.write_json(args.out, dict(suite="decode", device=torch.cuda.get_device_name(0),
                                     copy_ceiling_tbps=ceiling, rows=records, torch=torch.__version__))
    plot(report.plot_path(args.out), records)
    return records


def _skews(records):
    """max / mean seq_len of each record's workload."""
    lens_by_name = workloads()
    return [max(lens_by_name[r["workload"]]) * len(lens_by_name[r["workload"]]) / sum(lens_by_name[r["workload"]])
            for r in records]


def plot(path, records):
    """Speedup of the dynamic schedule over our static one and over FlashInfer against workload skew, one series
    per kv dtype / head config (/ q_len)."""
    skews = _skews(records)
    groups = {}
    for r, skew in zip(records, skews):
        label = "%s %d/%d/%d" % (r["kv"], *r["heads"]) + ("" if r["q_len"] == 1 else " q_len=%d" % r["q_len"])
        groups.setdefault(label, []).append((skew, r))
    panels = [dict(title=title, xlabel="skew = max seq_len / mean seq_len", ylabel=ylabel, logx=True, hline=1.0,
                   lines=False,
                   series=[dict(label=label, x=[k for k, _ in pts], y=[r[field] for _, r in pts])
                           for label, pts in groups.items()])
              for field, title, ylabel in (("vs_static", "dynamic vs static schedule", "static us / dynamic us"),
                                           ("vs_flashinfer", "dynamic vs FlashInfer 0.5.3", "FlashInfer us / ours"))]
    return report.plot(path, panels, title="decode on %s (CUDA-graph replay, planner included)" %
                       torch.cuda.get_device_name(0), ncols=2)
