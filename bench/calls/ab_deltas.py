"""Per-row differences of a decode A/B (tools/ab_bench.sh output) against a base version: for each (q_len, workload)
and version, step / plan / layer us minus the base's, round by round. Usage: ab_deltas.py AB_TXT BASE"""
import collections
import re
import sys

rows = collections.defaultdict(lambda: collections.defaultdict(list))
version = None
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
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
base = sys.argv[2]
print("q_len workload        base step | version: step,plan,layer minus base, per round")
for (q_len, name), by_version in rows.items():
    ref = by_version[base]
    parts = []
    for v, vals in by_version.items():
        if v != base:
            parts.append(v[:12] + " " + " / ".join(
                "%+.1f,%+.1f,%+.1f" % tuple(x - y for x, y in zip(a, b)) for a, b in zip(vals, ref)))
    print(q_len, name[:15].ljust(15), "/".join("%.1f" % r[0] for r in ref), "|", " | ".join(parts))
