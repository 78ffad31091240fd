# Session 62, experiment 94: a Python emulation of rope_norm.cu's tiling with k/v token pairs (RowsPerGroup aside) --
# every q / k / v row of every token covered once, warps of one kind -- over 2592 shapes (run: python3 THIS).
# Emulates rope_norm.cu's paired tiling + UnitOfGroup (experiment 94) and checks coverage / warp uniformity.
import itertools
def plan(T, hq, hkv, D, rows, pairs_enabled=True, merge_enabled=True):
    lanes = D // 16
    q_groups = -(-hq // rows); kv_groups = -(-hkv // rows)
    kv_merged = merge_enabled and rows > 1 and 2 * hkv <= rows
    gpw = 32 // lanes
    uneven = hq % q_groups != 0 or (not kv_merged and hkv % kv_groups != 0)
    pair = 1 if (pairs_enabled and rows == 4 and hkv == 1 and kv_merged and not uneven) else 0
    kvt = lambda sh: (kv_groups << sh) >> pair
    def whole(sh):
        if uneven: return (1 << sh) >= gpw
        return sh >= pair and ((q_groups << sh) % gpw) == 0 and (kvt(sh) % gpw) == 0
    sh = 0
    while not whole(sh) and (1 << sh) < (gpw << pair): sh += 1
    gpt = (q_groups << sh) + kvt(sh) * (1 if kv_merged else 2)
    tiles = -(-T // (1 << sh))
    groups = tiles * gpt
    return dict(lanes=lanes, q_groups=q_groups, kv_groups=kv_groups, kv_merged=kv_merged, pair=pair, sh=sh, gpt=gpt, groups=groups, gpw=gpw)
def unit(P, g):
    tile, r = divmod(g, P['gpt'])
    kv_shift = P['sh'] - P['pair']
    q_span = P['q_groups'] << P['sh']; kv_span = P['kv_groups'] << kv_shift
    kind = 'q' if r < q_span else ('k' if r < q_span + kv_span else 'v')
    r -= 0 if kind == 'q' else (q_span if kind == 'k' else q_span + kv_span)
    shift = P['sh'] if kind == 'q' else kv_shift
    tok = (tile << P['sh']) + ((r & ((1 << shift) - 1)) << (P['sh'] - shift))
    return kind, tok, r >> shift
def check(T, hq, hkv, D, rows, **kw):
    P = plan(T, hq, hkv, D, rows, **kw)
    cov = {}
    threads = 128; gpb = threads // P['lanes']
    grid_groups = -(-P['groups'] // gpb) * gpb
    warp_kinds = {}
    for g in range(grid_groups):
        kind, tok, fh = unit(P, g)
        if tok >= T: continue
        w = g // P['gpw']
        warp_kinds.setdefault(w, set()).add(kind)
        heads = hq if kind == 'q' else hkv
        step = P['q_groups'] if kind == 'q' else P['kv_groups']
        toks = [tok, tok + 1] if (kind == 'k' and P['pair']) else [tok]
        for t in toks:
            if t >= T: continue
            for i in range(rows):
                h = fh + i * step
                k2 = kind
                if P['kv_merged'] and kind == 'k' and h >= heads: k2, h = 'v', h - heads
                if h < heads:
                    key = (k2, t, h); cov[key] = cov.get(key, 0) + 1
    want = {(k, t, h) for t in range(T) for k, n in (('q', hq), ('k', hkv), ('v', hkv)) for h in range(n)}
    assert set(cov) == want, (T, hq, hkv, D, rows, len(set(cov) ^ want))
    assert all(v == 1 for v in cov.values()), (T, hq, hkv, D, rows)
    assert all(len(s) == 1 for s in warp_kinds.values()), (T, hq, hkv, D, rows, P)
    return P
n = 0
for T in (1, 2, 3, 5, 7, 8, 9, 16, 37, 64, 3001, 1024):
    for hq, hkv in ((8, 1), (64, 8), (32, 4), (16, 1), (4, 1), (5, 1), (12, 4), (8, 2), (6, 3), (10, 3), (2, 1), (1, 1), (40, 1)):
        if hq % hkv: continue
        for D in (64, 128, 256):
            for rows in (1, 2, 4):
                for pe in (True, False):
                    P = check(T, hq, hkv, D, rows, pairs_enabled=pe); n += 1
print("ok", n, plan(16384, 8, 1, 128, 4), plan(16384, 8, 1, 128, 4, pairs_enabled=False))
