"""Experiment 71's aligned-candidate rounds (4728b3f) emulated against the host rule (the smallest of 32 candidates
that fits): round 0 = the first 4 candidates + a probe of the last, later rounds a candidate a warp. Prints the cases
and how many differ (session 52: 18954 cases, 0 differ). CPU only: python3 bench/calls/aligned_rounds_emulation.py"""
import random
def ctas_of(tiles, q): return sum(-(-t//q) for t in tiles if t > 0)
def fits(c, q, heads, maxc): return 1 <= c*heads <= maxc and c*q <= 0x7fffffff
def host(tiles, heads, maxc, low):
    for q in range(low, low+32):
        if fits(ctas_of(tiles,q), q, heads, maxc): return q
    return None
def dev(tiles, heads, maxc, low, warps):
    best = None; first = 0; end = min(4, warps)
    while first < 32:
        anyfit = False; none = False
        for w in range(warps):
            probe = first == 0 and w == end
            c = 31 if probe else first + w
            if c < end or probe:
                q = low + c; ct = ctas_of(tiles, q); f = fits(ct, q, heads, maxc)
                if f: best = q if best is None else min(best, q)
                n = probe and ct*heads > maxc
                f = f and not probe
                anyfit |= f; none |= n
        if anyfit or none: break
        first, end = end, min(end + warps, 32)
    return best
random.seed(1); bad = 0; n = 0
for it in range(20000):
    B = random.choice([1,2,5,16,64,200])
    tiles = [random.choice([0, random.randint(1,8), random.randint(1,300), random.randint(1,4000)]) for _ in range(B)]
    heads = random.choice([1,2,8]); maxc = random.choice([64,132,264,528,1000])
    tot = sum(tiles)
    if tot == 0: continue
    low = max(-(-tot*heads//maxc), random.choice([1,1,3]))
    warps = random.choice([2,3,4,5,8,18,32])
    n += 1
    if host(tiles,heads,maxc,low) != dev(tiles,heads,maxc,low,warps): bad += 1
print(n, "cases,", bad, "differ")
