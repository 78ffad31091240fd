"""EXPERIMENT 68t: where the decode plan kernel's time goes, phase by phase, under graph replay (GPU only; needs a
build with 68t's HPC_XLA_DECODE_PLAN_PROFILE printf).

  HPC_XLA_DECODE_PLAN_PROFILE=1 python3 tools/plan_phases.py > phases.txt   # 8 plans a graph, as the bench's plan us
  python3 tools/plan_phases.py --parse phases.txt                            # medians per workload and q_len

Phases (cycles of the plan's one SM, thread 0 after a barrier): wait (entry to PdlWait's release: in a graph of
back-to-back plans, the previous plan's tail), scan (the first prefix scan), starts (both layouts' CTA starts),
model (their modeled times and makespans), cand (the aligned candidates), layout (the aligned layout's scan and
starts, or the chosen layout's copy), rest (the plain path's starts, the header)."""
import os
import re
import statistics
import sys


def run():
    import torch

    import hpc_xla.torch as ht
    from hpc_xla.bench import decode

    hq, hkv, d = 8, 1, 128
    for name, lens in decode.workloads().items():
        for q_len in (1, 2):
            seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
            kw = dict(num_kv_heads=hkv, num_q_heads=hq, head_dim=d, page_size=decode.PAGE, q_len=q_len,
                      kv_dtype=torch.bfloat16, q_dtype=torch.bfloat16)
            plan = ht.decode_plan(seq_lens, **kw)
            torch.cuda.synchronize()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    ht.decode_plan(seq_lens, out=plan, **kw)
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(8):
                    ht.decode_plan(seq_lens, out=plan, **kw)
            torch.cuda.synchronize()
            os.write(1, ("WORKLOAD %s q_len=%d\n" % (name, q_len)).encode())
            for _ in range(48):
                g.replay()
            torch.cuda.synchronize()
            os.write(1, b"END\n")


FIELDS = ["wait", "scan", "starts", "model", "cand", "layout", "rest"]


def parse(path):
    rows, cur, vals, info = [], None, {}, {}
    for line in open(path, errors="replace"):
        m = re.match(r"WORKLOAD (.*) q_len=(\d)", line)
        if m:
            cur, vals, info = (m.group(1), int(m.group(2))), {f: [] for f in FIELDS + ["ns"]}, {}
            continue
        if line.startswith("END") and cur:
            if vals["ns"]:
                rows.append((cur, info, {f: statistics.median(v) for f, v in vals.items()}, len(vals["ns"])))
            cur = None
            continue
        if cur and line.startswith("PLANT"):
            kv = dict(x.split("=") for x in line.split()[1:])
            info = {k: kv[k] for k in ("batch", "choose", "aligned", "ctas")}
            for f in FIELDS + ["ns"]:
                vals[f].append(int(kv[f]))
    hdr = "%-22s %2s %3s %3s %4s " % ("workload", "q", "ch", "al", "ctas") + " ".join("%7s" % f for f in FIELDS)
    print(hdr + "  work(cyc)  ns(entry-end)  n")
    for (name, q), info, med, n in rows:
        work = sum(med[f] for f in FIELDS[1:])
        print("%-22s %2d %3s %3s %4s " % (name, q, info["choose"], info["aligned"], info["ctas"]) +
              " ".join("%7.0f" % med[f] for f in FIELDS) + "  %9.0f  %13.0f  %d" % (work, med["ns"], n))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--parse":
        parse(sys.argv[2])
    else:
        run()
