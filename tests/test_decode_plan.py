"""Properties of the decode planner (CPU plans; the GPU planner computes the same function, compared
bitwise in test_gpu_decode.py)."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpc_xla import _decode

TILE = 64


def _plan(lens, num_kv_heads, max_ctas, q_len=1, group=2):
    import torch

    import hpc_xla.torch as ht

    p = ht.decode_plan(torch.tensor(lens, dtype=torch.int32), num_kv_heads=num_kv_heads,
                       num_q_heads=num_kv_heads * group, head_dim=128, page_size=16, q_len=q_len, max_ctas=max_ctas)
    return p.plan.numpy()


lengths = st.lists(st.one_of(st.just(0), st.integers(1, 300), st.integers(1, 40000)), min_size=1, max_size=70)


@settings(max_examples=200, deadline=None)
@given(lens=lengths, num_kv_heads=st.integers(1, 8), max_ctas=st.integers(1, 600), rows=st.sampled_from([2, 16]))
def test_every_tile_covered_exactly_once_and_balanced(lens, num_kv_heads, max_ctas, rows):
    """(16 rows a piece -- q_len 2 x GQA 8 -- is where the planner chooses its piece cost; the header holds it)"""
    plan = _plan(lens, num_kv_heads, max_ctas, *((1, 2) if rows == 2 else (2, 8)))
    info = _decode.read_plan(plan)
    batch = len(lens)
    assert info["magic"] == 0x4C505848 and info["batch"] == batch and info["max_ctas"] == max_ctas
    tiles = [(n + TILE - 1) // TILE for n in lens]
    cost = info["piece_cost"]
    aligned = info["aligned"] == 1
    if aligned:  # units padded to whole CTAs of `capacity` tiles (decode_plan.h), piece cost 0
        capacity = _aligned_chunk(lens, num_kv_heads, max_ctas, int(os.environ.get("HPC_XLA_DECODE_MIN_TILES", "1")))
        assert rows == 16 and cost == 0 and info["capacity"] == capacity
        assert info["num_ctas"] == num_kv_heads * sum(-(-t // capacity) for t in tiles) <= max_ctas
    else:
        total = sum(t + cost for t in tiles if t) * num_kv_heads
        min_tiles = int(os.environ.get("HPC_XLA_DECODE_MIN_TILES", "1"))  # the planner's A/B knob
        capacity = max(-(-total // max_ctas), min_tiles + cost)
        assert info["capacity"] == capacity
        assert info["num_ctas"] <= max_ctas and info["num_ctas"] == -(-total // capacity)
    pieces = _decode.plan_pieces(plan, lens)
    seen = {}
    load = np.zeros(max(1, info["num_ctas"]), np.int64)
    per_cta = {}
    for cta, unit, t0, t1 in pieces:
        assert 0 <= t0 < t1 <= tiles[unit % batch]
        for t in range(t0, t1):
            assert (unit, t) not in seen, "tile covered twice"
            seen[(unit, t)] = cta
        load[cta] += (t1 - t0) + cost
        per_cta.setdefault(cta, []).append((unit, t0, t1))
    expected = {(h * batch + b, t) for h in range(num_kv_heads) for b in range(batch) for t in range(tiles[b])}
    assert set(seen) == expected, "tiles missing"
    # every CTA gets the same work to within one piece cost (tile granularity included)
    assert load.max(initial=0) <= capacity + cost
    if aligned:  # one piece a CTA: none ends mid-CTA
        assert all(len(ps) == 1 for ps in per_cta.values()) and len(per_cta) == info["num_ctas"]
    # at most two split pieces per CTA (its first and last): the workspace holds 2 * max_ctas partials
    for cta, ps in per_cta.items():
        split = [p for p in ps if not (p[1] == 0 and p[2] == tiles[p[0] % batch])]
        assert len(split) <= 2
        for p in split:
            assert p == ps[0] or p == ps[-1]


@settings(max_examples=100, deadline=None)
@given(lens=lengths, num_kv_heads=st.integers(1, 4), max_ctas=st.integers(2, 300), rows=st.sampled_from([2, 16]))
def test_merge_tasks_cover_each_split_unit_once(lens, num_kv_heads, max_ctas, rows):
    plan = _plan(lens, num_kv_heads, max_ctas, *((1, 2) if rows == 2 else (2, 8)))
    info = _decode.read_plan(plan)
    batch = len(lens)
    tiles = [(n + TILE - 1) // TILE for n in lens]
    pieces = _decode.plan_pieces(plan, lens)
    by_unit = {}
    for cta, unit, t0, t1 in pieces:
        by_unit.setdefault(unit, []).append(cta)
    split_units = {u for u, ctas in by_unit.items() if len(ctas) > 1}
    starts = info["starts"]
    owners = []
    for i in range(1, info["num_ctas"]):
        unit, tile = starts[i]
        if tile > 0 and not (starts[i - 1][0] == unit and starts[i - 1][1] > 0):
            owners.append(unit)
            # its pieces are in consecutive CTAs i-1 .. last
            assert by_unit[unit] == list(range(i - 1, i - 1 + len(by_unit[unit])))
    assert sorted(owners) == sorted(split_units)
    for u in split_units:
        assert tiles[u % batch] > 0


@settings(max_examples=100, deadline=None)
@given(lens=lengths, num_kv_heads=st.integers(1, 4), max_ctas=st.integers(2, 300), rows=st.sampled_from([2, 16]))
def test_combine_boundaries_find_their_task(lens, num_kv_heads, max_ctas, rows):
    """The combine's CTA for boundary i finds the unit that i cuts and its rank in O(1) (merge_task_covering mirrors
    MergeTaskCovering): the task is the unit's first cutting boundary (the walk-back definition), and the ranks of a
    unit of n pieces are exactly 0 .. n - 2, so rows r = rank + j * (n - 1) give every row of a long unit one CTA.
    (16 rows a piece: the planner's choice, aligned plans included.)"""
    plan = _plan(lens, num_kv_heads, max_ctas, *((1, 2) if rows == 2 else (2, 8)))
    info = _decode.read_plan(plan)
    starts = info["starts"]
    by_unit = {}
    for cta, unit, t0, t1 in _decode.plan_pieces(plan, lens):
        by_unit.setdefault(unit, []).append(cta)
    ranks = {}
    for i in range(info["num_ctas"] + 1):
        got = _decode.merge_task_covering(plan, i)
        if not 1 <= i < info["num_ctas"] or starts[i][1] == 0:
            assert got is None
            continue
        unit = starts[i][0]
        first = i
        while starts[first - 1][0] == unit and starts[first - 1][1] > 0:
            first -= 1
        assert got == (first, i - first)
        ranks.setdefault(unit, []).append(got[1])
    for unit, rs in ranks.items():
        assert rs == list(range(len(by_unit[unit]) - 1))


def test_zero_length_batch_plans_no_work():
    plan = _plan([0, 0, 0], 2, 16)
    info = _decode.read_plan(plan)
    assert info["num_ctas"] == 0 and _decode.plan_pieces(plan, [0, 0, 0]) == []


def test_plan_size_is_a_function_of_max_shapes():
    a = _plan([5, 70000, 3], 2, 100)
    b = _plan([0, 1, 2], 2, 100)
    assert a.shape == b.shape


def test_bad_plan_arguments_raise():
    import torch

    import hpc_xla.torch as ht

    lens = torch.tensor([10, 20], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"page_size must be 16, 32 or 64; got 8"):
        ht.decode_plan(lens, num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=8)
    with pytest.raises(ValueError, match=r"num_q_heads \(6\) must be a multiple of num_kv_heads \(4\)"):
        ht.decode_plan(lens, num_kv_heads=4, num_q_heads=6, head_dim=128, page_size=16)
    with pytest.raises(ValueError, match=r"q_len must be in \[1, 4\]; got 5"):
        ht.decode_plan(lens, num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, q_len=5)
    with pytest.raises(ValueError, match=r"head_dim must be 64, 128 or 256; got 96"):
        ht.decode_plan(lens, num_kv_heads=1, num_q_heads=8, head_dim=96, page_size=16)
    with pytest.raises(ValueError, match=r"seq_lens\[1\] = -3 is negative"):
        ht.decode_plan(torch.tensor([1, -3], dtype=torch.int32), num_kv_heads=1, num_q_heads=8, head_dim=128,
                       page_size=16, max_ctas=4)
    # the faces' copy of the kernel's q_len limit is the binary's
    with pytest.raises(ValueError, match=r"q_len must be in \[1, %d\]" % _decode.MAX_Q_LEN):
        ht.decode_plan(lens, num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, q_len=_decode.MAX_Q_LEN + 1)
    ht.decode_plan(lens, num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, q_len=_decode.MAX_Q_LEN)


def test_plans_share_a_given_workspace():
    """decode_plan(workspace=): one buffer sized for the largest batch serves the plans of every batch size (the
    vLLM adapter keeps one plan per batch size for CUDA-graph replay)."""
    import torch

    import hpc_xla.torch as ht

    shape = dict(num_kv_heads=2, num_q_heads=8, head_dim=128, page_size=16)
    big = ht.decode_plan(torch.zeros(64, dtype=torch.int32), **shape)
    lens = torch.tensor([10, 300], dtype=torch.int32)
    small = ht.decode_plan(lens, workspace=big.workspace, **shape)
    assert small.workspace is big.workspace and small.config.workspace_size <= big.workspace.shape[0]
    q = torch.randn(2, 8, 128, dtype=torch.bfloat16)
    cache = torch.randn(40, 16, 2, 128, dtype=torch.bfloat16)
    table = torch.arange(40, dtype=torch.int32).reshape(2, 20)
    own = ht.decode_attention(q, cache, cache, table, lens, ht.decode_plan(lens, **shape))
    lens40 = torch.arange(40, dtype=torch.int32) * 7
    q40, table40 = torch.randn(40, 8, 128, dtype=torch.bfloat16), torch.randint(0, 40, (40, 20), dtype=torch.int32)
    other = ht.decode_plan(lens40, workspace=big.workspace, **shape)  # a second plan on the same buffer
    own40 = ht.decode_attention(q40, cache, cache, table40, lens40, ht.decode_plan(lens40, **shape))
    for _ in range(2):  # the plans' calls interleaved, the shared scratch poisoned in between
        big.workspace.fill_(float("nan"))
        torch.testing.assert_close(ht.decode_attention(q, cache, cache, table, lens, small), own, rtol=0, atol=0)
        big.workspace.fill_(float("nan"))
        torch.testing.assert_close(ht.decode_attention(q40, cache, cache, table40, lens40, other), own40, rtol=0,
                                   atol=0)
    bad = r"workspace must be a contiguous, 16-byte aligned 1-D float32 tensor on cpu with >= \d+ elements"
    with pytest.raises(ValueError, match=bad):
        ht.decode_plan(lens, workspace=torch.empty(5, dtype=torch.float32), **shape)
    with pytest.raises(ValueError, match=bad):
        ht.decode_plan(lens, workspace=torch.empty(big.workspace.shape, dtype=torch.float16), **shape)
    with pytest.raises(ValueError, match=r"address % 16 = 4"):  # the kernels use float4 accesses on it
        ht.decode_plan(lens, workspace=big.workspace[1:], **shape)
    with pytest.raises(ValueError, match=r"strides \(2,\)"):
        ht.decode_plan(lens, workspace=torch.empty(2 * big.workspace.shape[0])[::2], **shape)
    with pytest.raises(ValueError, match=r"workspace applies to a new plan"):
        ht.decode_plan(lens, out=small, workspace=big.workspace, **shape)
    with pytest.raises(TypeError, match=r"workspace"):
        ht.decode_plan(lens, workspace=[0.0] * 10, **shape)


@pytest.mark.parametrize("cost", [0, 5])
def test_piece_cost_knob(cost):
    """HPC_XLA_DECODE_PIECE_COST (an A/B knob of the planner, read once per process: a child) goes into the plan's
    header, and the planner's properties and the decode numerics (CPU plans walked tile by tile) hold with it."""
    import subprocess
    import sys

    env = dict(os.environ, HPC_XLA_DECODE_PIECE_COST=str(cost))
    probe = ("import torch, hpc_xla.torch as ht; from hpc_xla import _decode; "
             "p = ht.decode_plan(torch.tensor([700, 0, 64], dtype=torch.int32), num_kv_heads=2, num_q_heads=4, "
             "head_dim=128, page_size=16, max_ctas=5); print('COST', _decode.read_plan(p.plan.numpy())['piece_cost'])")
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert "COST %d" % cost in r.stdout, r.stdout + r.stderr
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        os.path.join(here, "test_decode_plan.py"), os.path.join(here, "test_decode.py"),
                        "-k", "not piece_cost_knob"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


@pytest.mark.parametrize("heads, q_len, cost", [((8, 1), 1, 4), ((64, 8), 1, 4), ((32, 8), 1, 2), ((32, 8), 2, 4),
                                                ((8, 8), 4, 2), ((8, 8), 1, 2)])
def test_piece_cost_follows_rows_per_piece(heads, q_len, cost):
    """The planner's piece cost by the rows a piece carries (q_len x group): 4 tile-equivalents from 8 rows, 2 below
    (the A/Bs in decode_plan.h) -- in the plan's header, which the GPU planner, the kernels and the CPU walk share."""
    import torch

    import hpc_xla.torch as ht

    if os.environ.get("HPC_XLA_DECODE_PIECE_COST"):
        pytest.skip("HPC_XLA_DECODE_PIECE_COST overrides the rule")
    hq, hkv = heads
    p = ht.decode_plan(torch.tensor([700, 0, 64], dtype=torch.int32), num_kv_heads=hkv, num_q_heads=hq,
                       head_dim=128, page_size=16, q_len=q_len, max_ctas=5)
    assert _decode.read_plan(p.plan.numpy())["piece_cost"] == cost


def _modeled_makespan(lens, num_kv_heads, max_ctas, cost, piece_tenths=62, min_tiles=1):
    """The planner's layout for one piece cost re-done here (decode_plan.h's prefix / capacity / LocatePosition /
    NextPiece), then max over CTAs of 10 x tiles + piece_tenths x pieces: the oracle of the planner's choice."""
    batch = len(lens)
    tiles = [(n + TILE - 1) // TILE if n > 0 else 0 for n in lens]
    prefix = [0]
    for t in tiles:
        prefix.append(prefix[-1] + (t + cost if t else 0))
    head_cost = prefix[-1]
    total = head_cost * num_kv_heads
    cap = max(-(-total // max_ctas), min_tiles + cost)
    used = -(-total // cap) if total else 0

    def locate(pos):
        if head_cost == 0 or pos >= total:
            return batch * num_kv_heads, 0
        h, r = divmod(pos, head_cost)
        b = max(i for i in range(batch) if prefix[i] <= r)
        return h * batch + b, max(r - prefix[b] - cost, 0)

    most = 0
    for i in range(used):
        (unit, tile), (end_unit, end_tile) = locate(i * cap), locate((i + 1) * cap if i + 1 <= used else total)
        n_tiles = pieces = 0
        while unit < end_unit or (unit == end_unit and tile < end_tile):
            n = tiles[unit % batch]
            end = n if unit < end_unit else min(end_tile, n)
            if end > tile:
                pieces += 1
                n_tiles += end - tile
            unit, tile = unit + 1, 0
        most = max(most, 10 * n_tiles + piece_tenths * pieces)
    return most


def _aligned_chunk(lens, num_kv_heads, max_ctas, min_tiles=1):
    """The aligned layout's chunk re-done here: the smallest q of 32 from ceil(tiles / max_ctas) (at least min_tiles)
    whose units, padded to whole CTAs of q tiles, fit max_ctas CTAs (and int32 positions); None if none does."""
    tiles = [(n + TILE - 1) // TILE for n in lens if n > 0]
    if not tiles:
        return None
    low = max(-(-sum(tiles) * num_kv_heads // max_ctas), min_tiles)
    for q in range(low, low + 32):
        ctas = num_kv_heads * sum(-(-t // q) for t in tiles)
        if ctas <= max_ctas and ctas * q < 2 ** 31:
            return q
    return None


@settings(max_examples=150, deadline=None)
@given(lens=lengths, num_kv_heads=st.integers(1, 4), max_ctas=st.one_of(st.integers(1, 300), st.integers(1020, 1030)))
def test_sixteen_row_pieces_take_the_layout_of_the_smallest_modeled_makespan(lens, num_kv_heads, max_ctas):
    """From 16 rows a piece (q_len 2 at GQA 8) the planner lays the batch out with piece cost 4 and 6 and keeps the
    one whose CTAs' modeled time (tiles + 6.2 x pieces) peaks lower, 4 on a tie -- or the aligned layout when it fits,
    its q tiles alone model lower still and q outweighs a piece (q >= 6.2 tiles); 8 rows keep 4, and so do grids of more than 1024 CTAs
    (the layouts' starts must fit the GPU planner's shared memory; decode_plan.h)."""
    if any(os.environ.get(k) for k in ("HPC_XLA_DECODE_PIECE_COST", "HPC_XLA_DECODE_MODEL_PIECE",
                                       "HPC_XLA_DECODE_MIN_TILES", "HPC_XLA_DECODE_ALIGNED")):
        pytest.skip("a knob overrides the rule")
    info = _decode.read_plan(_plan(lens, num_kv_heads, max_ctas, q_len=2, group=8))
    four, six = (_modeled_makespan(lens, num_kv_heads, max_ctas, c) for c in (4, 6))
    q = _aligned_chunk(lens, num_kv_heads, max_ctas) if max_ctas <= 1024 else None
    if q is not None and 62 <= 10 * q < min(four, six):
        assert (info["aligned"], info["capacity"], info["piece_cost"]) == (1, q, 0), (four, six, q)
    else:
        want = 6 if six < four and max_ctas <= 1024 else 4
        assert (info["aligned"], info["piece_cost"]) == (0, want), (four, six, q)
    one = _decode.read_plan(_plan(lens, num_kv_heads, max_ctas, q_len=1, group=8))
    assert (one["aligned"], one["piece_cost"]) == (0, 4)


def test_the_choice_on_the_benchmark_batches():
    """8/1/128 at q_len 2 on the decode benchmark's batches (264 CTAs, an H100's or H200's grid): cost 6 where it
    measured faster in s43b (the skewed batches, 1x32K+63x1K), 4 on the uniform ones (64x4K: 6 cost +3 us there);
    aligned where s44d / s45a measured it faster (64x512 measured 1.4 us slower aligned: q = 2 is under a piece)."""
    import torch

    import hpc_xla.torch as ht
    from hpc_xla.bench.decode_workloads import workloads

    if any(os.environ.get(k) for k in ("HPC_XLA_DECODE_PIECE_COST", "HPC_XLA_DECODE_MODEL_PIECE",
                                       "HPC_XLA_DECODE_ALIGNED")):
        pytest.skip("a knob overrides the rule")
    # "a16": aligned, 16 tiles a CTA (64x4K: piece cost 4 happened to align it already, 17 tiles a CTA)
    want = {"64x512": 4, "64x4K": "a16", "1x128K+31x4K": "a16", "1x64K+15x4K": "a8", "2x32K+30x4K": "a13",
            "1x32K+63x1K": "a7", "128 random [64,16K)": 6, "256 zipf": 6}
    got = {}
    for name, lens in workloads().items():
        p = ht.decode_plan(torch.tensor(lens, dtype=torch.int32), num_kv_heads=1, num_q_heads=8, head_dim=128,
                           page_size=16, q_len=2, max_ctas=264)
        info = _decode.read_plan(p.plan.numpy())
        got[name] = "a%d" % info["capacity"] if info["aligned"] else info["piece_cost"]
    assert {k: got[k] for k in want} == want, got


def _layout_in_child(env, lens, q_len=2):
    """(aligned, piece_cost, capacity) of an 8/1/128 q_len 2 plan built in a child with `env` (the planner's knobs are
    read once per process)."""
    import subprocess
    import sys

    probe = ("import torch, hpc_xla.torch as ht; from hpc_xla import _decode; "
             "p = ht.decode_plan(torch.tensor(%r, dtype=torch.int32), num_kv_heads=1, num_q_heads=8, head_dim=128, "
             "page_size=16, q_len=%d, max_ctas=264); i = _decode.read_plan(p.plan.numpy()); "
             "print('LAYOUT', i['aligned'], i['piece_cost'], i['capacity'])" % (lens, q_len))
    r = subprocess.run([sys.executable, "-c", probe], env=dict(os.environ, **env), capture_output=True, text=True)
    line = [x for x in r.stdout.splitlines() if x.startswith("LAYOUT")]
    assert line, r.stdout + r.stderr
    return tuple(int(v) for v in line[0].split()[1:])


def test_model_piece_knob_zero_keeps_the_base_cost():
    """HPC_XLA_DECODE_MODEL_PIECE=0 (an A/B knob) turns the choice off: piece cost 4, never aligned."""
    if os.environ.get("HPC_XLA_DECODE_PIECE_COST") or os.environ.get("HPC_XLA_DECODE_ALIGNED"):
        pytest.skip("a knob overrides the choice")
    lens = [131072] + [4096] * 31
    assert _layout_in_child({"HPC_XLA_DECODE_MODEL_PIECE": "0"}, lens)[:2] == (0, 4)
    assert _layout_in_child({"HPC_XLA_DECODE_MODEL_PIECE": "62"}, lens) == (1, 0, 16)


def test_aligned_knob():
    """HPC_XLA_DECODE_ALIGNED (an A/B knob): 0 never lays a batch out aligned, 2 whenever the layout fits, 3 also
    below 16 rows a piece (q_len 1 at GQA 8), 1 (the default) by the modeled makespan -- 64x512's chunk, 2 tiles,
    is under a piece's 6.2."""
    if os.environ.get("HPC_XLA_DECODE_PIECE_COST") or os.environ.get("HPC_XLA_DECODE_MODEL_PIECE"):
        pytest.skip("a knob overrides the choice")
    skewed, two = [131072] + [4096] * 31, [512] * 64
    assert _layout_in_child({"HPC_XLA_DECODE_ALIGNED": "0"}, skewed)[:2] == (0, 6)
    assert _layout_in_child({"HPC_XLA_DECODE_ALIGNED": "1"}, two)[:2] == (0, 4)
    assert _layout_in_child({"HPC_XLA_DECODE_ALIGNED": "2"}, two) == (1, 0, 2)
    assert _layout_in_child({"HPC_XLA_DECODE_ALIGNED": "2"}, skewed, q_len=1)[:2] == (0, 4)
    assert _layout_in_child({"HPC_XLA_DECODE_ALIGNED": "3"}, skewed, q_len=1) == (1, 0, 16)


def test_an_aligned_plan_serves_lengths_needing_the_same_ctas():
    """An aligned plan (16 rows a piece) stays valid for lengths whose units need the same CTAs of Q tiles -- every
    CTA still gets a tile, so every partial the combine merges is written (the CPU walk, against float64) -- and is
    refused, naming its CTAs, for lengths that need others (a plan of another layout is refused for any other tile
    count: test_argument_errors.py)."""
    import decode_harness
    import torch

    import hpc_xla.torch as ht

    if any(os.environ.get(k) for k in ("HPC_XLA_DECODE_PIECE_COST", "HPC_XLA_DECODE_MODEL_PIECE",
                                       "HPC_XLA_DECODE_ALIGNED", "HPC_XLA_DECODE_MIN_TILES")):
        pytest.skip("a knob overrides the layout")
    built, same_ctas, other = (4096, 0, 4096), (4000, 0, 3900), (4096, 0, 3000)  # 64 / 63, 61 / 47 tiles
    kw = dict(num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, q_len=2, max_ctas=8)
    plan = ht.decode_plan(torch.tensor(built, dtype=torch.int32), **kw)
    info = _decode.read_plan(plan.plan.numpy())
    assert (info["aligned"], info["capacity"], info["num_ctas"]) == (1, 16, 8)
    for lens, ok in ((same_ctas, True), (other, False)):
        case = decode_harness.DecodeCase(seq_lens=lens, q_len=2, max_ctas=8)
        inp = decode_harness.make_inputs(case)
        t = {k: decode_harness.to_torch(v, "cpu") for k, v in inp.items()}
        call = lambda: ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"],  # noqa: E731
                                           t["seq_lens"], plan, q_len=2)
        if ok:
            decode_harness.check(case, inp, decode_harness.from_torch(call()))
        else:
            with pytest.raises(ValueError, match=r"seq_lens\[2\] = 3000 needs 47 tiles, the plan has 4 CTAs of 16"):
                call()


@pytest.mark.parametrize("field,value", [("capacity", 0), ("aligned", 2), ("num_ctas", 10**6)])
def test_a_corrupted_plan_header_is_refused(field, value):
    """A plan whose header cannot come from decode_plan (capacity < 1 would divide by zero in CheckPlanLengths, an
    aligned field other than 0 / 1, more CTAs than max_ctas) is refused by name before anything reads it."""
    import decode_harness
    import torch

    import hpc_xla.torch as ht

    lens = (4096, 0, 4096)
    kw = dict(num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, q_len=2, max_ctas=8)
    plan = ht.decode_plan(torch.tensor(lens, dtype=torch.int32), **kw)
    plan.plan[_decode.HEADER_FIELDS.index(field)] = value
    inp = decode_harness.make_inputs(decode_harness.DecodeCase(seq_lens=lens, q_len=2, max_ctas=8))
    t = {k: decode_harness.to_torch(v, "cpu") for k, v in inp.items()}
    with pytest.raises(ValueError, match=r"plan header is inconsistent \(.*%s=%d.*\): not a decode_plan output"
                       % (field, value)):
        ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"], plan, q_len=2)
