"""Experiments 87 / 88's grouped selection (csrc/moe/route.cu: group ranks in registers, kept groups by redux max / min
rounds, dropped groups' experts pre-marked taken, the top-k by warp reductions), emulated lane by lane in Python and
compared with the CPU reference's rule (csrc/ref/route_ref.cc) on the same select values -- the selection logic
alone, before any device time: random E / groups / kept / top_k / bias, half the draws from a small set of values
(ties, -0 against +0, -inf). Session 57: 0 mismatches in 3000. Usage: python3 bench/calls/grouped_route_emulation.py"""
import struct

import numpy as np


def key(v):
    """OrderKey, then max(., 1) as the kernel stores it."""
    b = struct.unpack('<I', struct.pack('<f', np.float32(v) + np.float32(0.0)))[0]
    k = (~b & 0xffffffff) if b & 0x80000000 else (b | 0x80000000)
    return max(k, 1)
def ref(select, groups, kept_n, k, bias):
    E = len(select); gs = E // groups
    rank = []
    for g in range(groups):
        first = second = np.float32(-np.inf)
        for e in range(g*gs, (g+1)*gs):
            v = select[e]
            if v > first: second, first = first, v
            elif v > second: second = v
        rank.append(np.float32(first + second) if bias and gs > 1 else first)
    allowed_g = [1]*groups; kept = [0]*groups
    for _ in range(kept_n):
        best = -1
        for g in range(groups):
            if allowed_g[g] and (best < 0 or rank[g] > rank[best]): best = g
        kept[best] = 1; allowed_g[best] = 0
    allowed = [kept[e // gs] for e in range(E)]
    ids = []
    for _ in range(k):
        best = -1
        for e in range(E):
            if allowed[e] and (best < 0 or select[e] > select[best]): best = e
        allowed[best] = 0; ids.append(best)
    return ids
def emu(select, groups, kept_n, k, bias):
    E = len(select); gs = E // groups
    gkey = [[0, 0] for _ in range(32)]
    for lane in range(32):
        for s in range(2):
            g = lane + 32*s
            if g >= groups: continue
            first = second = np.float32(-np.inf)
            for e in range(g*gs, (g+1)*gs):
                v = select[e]; above = v > first
                second = first if above else (v if v > second else second)
                first = v if above else first
            gkey[lane][s] = key(np.float32(first + second) if bias and gs > 1 else first)
    kept = 0
    for _ in range(kept_n):
        mine = []; idx = []
        for lane in range(32):
            hi = gkey[lane][1] > gkey[lane][0]
            mine.append(gkey[lane][1] if hi else gkey[lane][0]); idx.append(lane + (32 if hi else 0))
        best = max(mine)
        g = min(idx[l] if mine[l] == best else 0xffffffff for l in range(32))
        kept |= 1 << g
        for lane in range(32):
            if g == lane: gkey[lane][0] = 0
            if g == lane + 32: gkey[lane][1] = 0
    taken = [0]*32
    for lane in range(32):
        for i, e in enumerate(range(lane, E, 32)):
            if not (kept >> (e // gs)) & 1: taken[lane] |= 1 << i
    def lane_best(lane):
        mk, mb = 0, 1 << 31
        for i, e in enumerate(range(lane, E, 32)):
            kk = key(select[e])
            if (taken[lane] >> i) & 1: kk = 0
            if kk > mk: mk, mb = kk, e
        return mk, mb
    lb = [lane_best(l) for l in range(32)]
    ids = []
    for j in range(k):
        best = max(x[0] for x in lb)
        e = min(x[1] if x[0] == best else 0xffffffff for x in lb)
        ids.append(e)
        lane = e & 31
        taken[lane] |= 1 << (e // 32)
        lb[lane] = lane_best(lane)
    return ids
rng = np.random.default_rng(0)
n = 0
for trial in range(3000):
    E = int(rng.choice([16, 32, 64, 128, 256, 512, 1024]))
    groups = int(rng.choice([g for g in (2, 4, 8, 16, 32, 64) if E % g == 0 and g <= E]))
    kept_n = int(rng.integers(1, groups + 1))
    k = int(rng.integers(1, min(32, kept_n * (E // groups)) + 1))
    bias = bool(rng.integers(0, 2))
    if rng.random() < 0.5:
        sel = rng.choice(np.float32([0.0, -0.0, 0.25, 0.5, 0.5, 1.0, -1.0, -np.inf]), E).astype(np.float32)
    else:
        sel = rng.standard_normal(E).astype(np.float32)
    a, b = ref(sel, groups, kept_n, k, bias), emu(sel, groups, kept_n, k, bias)
    if a != b:
        n += 1
        if n < 5: print("MISMATCH", E, groups, kept_n, k, bias, a, b)
print("mismatches", n, "of 3000")
