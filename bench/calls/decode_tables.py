"""Short tables of `python -m hpc_xla.bench decode --out` JSON files, shared by the device-call scripts:

  python3 decode_tables.py ab DIR PREFIX LABEL...   layer us per row, one column per DIR/PREFIX<LABEL>.json
  python3 decode_tables.py fi JSON...               ours (step us with the plan, and layer us) vs FlashInfer per row
"""
import json
import os
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


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "ab":
        ab(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "fi":
        fi(sys.argv[2:])
    else:
        raise SystemExit(__doc__)
