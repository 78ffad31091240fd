"""Short tables of `python -m hpc_xla.bench decode --out` JSON files, shared by the device-call scripts:

  python3 decode_tables.py ab DIR PREFIX LABEL...   layer us per row, one column per DIR/PREFIX<LABEL>.json
  python3 decode_tables.py fi JSON...               ours (step us with the plan, and layer us) vs FlashInfer per row
  python3 decode_tables.py deltas AB_TXT BASE       a tools/ab_bench.sh decode A/B's step / plan / layer us minus
                                                    BASE's, per row, version and round
"""
import collections
import json
import os
import re
import sys


def row_key(r):
    return "%s %d/%d q%d %s" % (r["kv"], r["heads"][0], r["heads"][1], r["q_len"], r["workload"])


def ab(folder, prefix, labels):
    rows, found = {}, []
    for label in labels:
        path = os.path.join(folder, prefix + label + ".json")
        if not os.path.exists(path):
            continue
        found.append(label)
        for r in json.load(open(path))["rows"]:
            rows.setdefault(row_key(r), {})[label] = r["layer_us"]
    print("row".ljust(40) + "".join(label.rjust(9) for label in found))
    for key in sorted(rows):
        print(key[:40].ljust(40) + "".join(("%.1f" % rows[key][l] if l in rows[key] else "-").rjust(9) for l in found))


def fi(paths):
    # step = our plan + attention (the measure, the bench's "us"); layer = attention with the plan built
    # (every later layer of the step). FlashInfer plans on the host, so neither of its columns holds a planner.
    print("row".ljust(44) + "step".rjust(8) + "layer".rjust(8) + "FI".rjust(8) + "step/FI".rjust(9) + "layer/FI".rjust(9))
    for path in paths:
        for r in json.load(open(path))["rows"]:
            peer = r.get("flashinfer_us")
            ratio = lambda v: ("%.3f" % (v / peer)) if peer else "-"
            print(row_key(r)[:44].ljust(44) + ("%.1f" % r["us"]).rjust(8) + ("%.1f" % r["layer_us"]).rjust(8)
                  + (("%.1f" % peer) if peer else "-").rjust(8) + ratio(r["us"]).rjust(9) + ratio(r["layer_us"]).rjust(9))


def deltas(path, base):
    # ab_bench.sh keeps only the table text of each version and round (no JSON): "== NAME round N" headers, then rows
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    version = None
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"== (\S+) round (\d+)", line)
        if m:
            version = m.group(1)
            continue
        cols = [c.strip() for c in line.split("│")]
        if version and len(cols) > 7:
            try:
                rows[(cols[3], cols[4])][version].append(tuple(float(c) for c in cols[5:8]))
            except ValueError:
                pass
    print("q_len workload        base step | version: step,plan,layer minus base, per round")
    for (q_len, name), by_version in rows.items():
        ref = by_version[base]
        parts = [v[:12] + " " + " / ".join("%+.1f,%+.1f,%+.1f" % tuple(x - y for x, y in zip(a, b))
                                            for a, b in zip(vals, ref))
                 for v, vals in by_version.items() if v != base]
        print(q_len, name[:15].ljust(15), "/".join("%.1f" % r[0] for r in ref), "|", " | ".join(parts))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "ab":
        ab(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "fi":
        fi(sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "deltas":
        deltas(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)
