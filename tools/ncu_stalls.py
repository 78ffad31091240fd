"""Top SASS lines by warp-stall samples from an ncu source-page CSV (dev tool; no GPU needed to read one):

  ncu --section SourceCounters --section WarpStateStats --page source --print-source sass --csv ... > f.csv
  python3 tools/ncu_stalls.py f.csv [N]

ncu prints its own log lines and a "Kernel Name" row before the table's header row: the header is the first CSV row
that names the stall column."""
import csv
import sys

STALL = "Warp Stall Sampling (All"


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def top_stalls(path, n=15):
    rows = list(csv.reader(line for line in open(path, errors="replace") if line.startswith('"')))
    at = next((i for i, r in enumerate(rows) if any(STALL in h for h in r)), None)
    if at is None:
        raise SystemExit("no stall column in %s (first row: %s)" % (path, ", ".join(rows[0][:8]) if rows else "none"))
    head, body = rows[at], [r for r in rows[at + 1:] if len(r) == len(rows[at])]
    col = next(i for i, h in enumerate(head) if STALL in h)
    src = next((i for i, h in enumerate(head) if h.strip() in ("Source", "# Source")), 1)
    adr = next((i for i, h in enumerate(head) if h.strip() in ("Address", "# Address")), None)
    total = sum(num(r[col]) for r in body) or 1.0
    out = []
    for r in sorted(body, key=lambda r: -num(r[col]))[:n]:
        out.append("%6.1f%%  %s  %s" % (100 * num(r[col]) / total, r[adr][-5:] if adr is not None else "", r[src][:100]))
    return out


if __name__ == "__main__":
    print("\n".join(top_stalls(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 15)))
