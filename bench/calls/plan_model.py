"""A model of the decode planner's balance (dev tool, no GPU, no binary): decode_plan.h's cost prefix / capacity /
LocatePosition / NextPiece re-done in Python for the benchmark's 8/1 workloads, then each CTA's modeled time =
its tiles + P x its pieces (in tiles), for the planner's piece cost pc in 4 / 5 / 6 / 8 and two true piece costs P
(session 42's trace with 51, H100: a piece costs ~6.2 tiles at q_len 2, ~4.5 at q_len 1). Prints the modeled
makespan (max over CTAs) per (workload, pc): which pc the A/B of call s43b should favour where, if the model holds.

  python3 bench/calls/plan_model.py [--ctas 264]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from hpc_xla.bench.decode_workloads import workloads  # noqa: E402


def tiles(n):
    return (n + 63) // 64 if n > 0 else 0


def cta_loads(lens, heads, max_ctas, pc, min_tiles=1):
    """(tiles, pieces) of every CTA with work, as decode_plan.h would cut the units."""
    batch = len(lens)
    prefix = [0]
    for n in lens:
        prefix.append(prefix[-1] + (tiles(n) + pc if tiles(n) else 0))
    head_cost = prefix[-1]
    total = head_cost * heads
    cap = max(-(-total // max_ctas), min_tiles + pc)
    used = -(-total // cap)

    def locate(pos):
        if head_cost == 0 or pos >= total:
            return batch * heads, 0
        h, r = divmod(pos, head_cost)
        lo, hi = 0, batch
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if prefix[mid] <= r else (lo, mid)
        return h * batch + lo, max(r - prefix[lo] - pc, 0)

    starts = [locate(i * cap if i <= used else total) for i in range(max_ctas + 1)]
    loads = []
    for i in range(max_ctas):
        (unit, tile), (end_unit, end_tile) = starts[i], starts[i + 1]
        n_tiles = pieces = 0
        while unit < end_unit or (unit == end_unit and tile < end_tile):
            n = tiles(lens[unit % batch])
            end = n if unit < end_unit else min(end_tile, n)
            if end > tile:
                pieces += 1
                n_tiles += end - tile
            unit, tile = unit + 1, 0
        if pieces:
            loads.append((n_tiles, pieces))
    return loads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctas", type=int, default=264, help="the persistent grid (132 SMs x 2 for 8/1/128 bf16)")
    args = ap.parse_args()
    costs = (4, 5, 6, 8)
    for true_p in (6.2, 4.5):
        print("modeled makespan in tiles, true piece cost %.1f tiles; columns: planner piece cost" % true_p)
        print("workload".ljust(22) + "".join(("pc%d" % pc).rjust(8) for pc in costs) + "   best")
        for name, lens in workloads().items():
            row = [max(t + true_p * p for t, p in cta_loads(lens, 1, args.ctas, pc)) for pc in costs]
            print(name.ljust(22) + "".join(("%.1f" % v).rjust(8) for v in row) + "   pc%d" % costs[row.index(min(row))])


if __name__ == "__main__":
    main()
