"""GPU-only behaviour of decode: the device planner equals the host planner, CUDA-graph capture at max batch
replayed with new lengths (torch), XLA command buffers (JAX), and the HPC_XLA_CHECK debug mode."""

import os
import subprocess
import sys

import numpy as np
import pytest

from cuda_graph import capture
from decode_harness import DecodeCase, check, from_torch, make_inputs, to_torch

pytestmark = pytest.mark.gpu
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_python(code, **env):
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]), **env)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def _captured_step(t, plan, kw):
    """A CUDA graph of one decode step (refill the plan from t["seq_lens"], attend) after a warm-up on a side
    stream -> (graph, its output buffer)."""
    import torch

    import hpc_xla.torch as ht

    out = torch.empty(t["q"].shape, dtype=torch.bfloat16, device="cuda")

    def step():
        ht.decode_plan(t["seq_lens"], out=plan, **kw)
        ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"], plan, out=out)

    graph, _ = capture(step)
    return graph, out


@pytest.mark.parametrize("lens", [[0], [5, 70000, 0, 3], list(range(0, 9000, 7)), [131072] + [4096] * 31,
                                  [4000, 65, 0] * 1365])  # (4095 sequences: the largest batch with a choice)
# (> 1024: no choice; < 512: the two layouts searched side by side in the block's halves -- 31, 32, 33 and 511 put
# max_ctas at a warp's edges; 512: the halves path's end)
@pytest.mark.parametrize("max_ctas", [None, 7, 31, 32, 33, 511, 512, 1024, 1025])
@pytest.mark.parametrize("q_len", [1, 2])  # (2: 16 rows a piece, where the planner chooses its piece cost)
def test_device_plan_equals_host_plan(lens, max_ctas, q_len):
    import torch

    import hpc_xla.torch as ht

    kw = dict(num_kv_heads=2, num_q_heads=16, head_dim=128, page_size=16, max_ctas=max_ctas, q_len=q_len)
    gpu = ht.decode_plan(torch.tensor(lens, dtype=torch.int32, device="cuda"), **kw)
    cpu = ht.decode_plan(torch.tensor(lens, dtype=torch.int32), **dict(kw, max_ctas=gpu.config.max_ctas))
    assert torch.equal(gpu.plan.cpu(), cpu.plan)


def test_torch_cuda_graph_at_max_batch_replayed_with_new_lengths():
    import torch

    import hpc_xla.torch as ht

    max_case = DecodeCase(seq_lens=(4000, 100, 1, 2000, 64, 3000, 7, 900), num_q_heads=8, num_kv_heads=1,
                          page_size=16)
    inp = make_inputs(max_case)
    t = {k: to_torch(v, "cuda") for k, v in inp.items()}
    kw = dict(num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16)
    plan = ht.decode_plan(t["seq_lens"], **kw)
    graph, out = _captured_step(t, plan, kw)
    # replay: shorter lengths, padded (zero-length) slots, new queries; same cache
    for lens in ((3999, 0, 1, 64, 0, 2500, 0, 17), (1, 1, 1, 1, 0, 0, 0, 900)):  # each <= its captured length
        inp2 = dict(inp, seq_lens=np.asarray(lens, np.int32),
                    q=np.random.default_rng(sum(lens)).standard_normal(inp["q"].shape).astype(inp["q"].dtype))
        t["seq_lens"].copy_(to_torch(inp2["seq_lens"], "cuda"))
        t["q"].copy_(to_torch(inp2["q"], "cuda"))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(DecodeCase(seq_lens=lens, page_size=16), inp2, from_torch(out))


def test_plans_sharing_one_workspace_replay_in_a_graph():
    """The vLLM adapter's pattern: one plan per batch size, all on one workspace sized for the largest batch,
    refilled (decode_plan(out=)) and used inside a CUDA graph; bitwise equal to a plan with its own workspace."""
    import torch

    import hpc_xla.torch as ht

    case = DecodeCase(seq_lens=(3000, 17, 640, 1), num_q_heads=8, num_kv_heads=1, page_size=16)
    inp = make_inputs(case)
    t = {k: to_torch(v, "cuda") for k, v in inp.items()}
    kw = dict(num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16)
    big = ht.decode_plan(torch.zeros(64, dtype=torch.int32, device="cuda"), **kw)
    plan = ht.decode_plan(t["seq_lens"], workspace=big.workspace, **kw)
    graph, out = _captured_step(t, plan, kw)
    t["seq_lens"].copy_(torch.tensor([2999, 0, 600, 1], dtype=torch.int32))  # each <= its captured length
    out.fill_(float("nan"))
    graph.replay()
    own = ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"],
                              ht.decode_plan(t["seq_lens"], **kw))
    torch.cuda.synchronize()
    assert torch.equal(out, own)
    lens = (2999, 0, 600, 1)
    check(DecodeCase(seq_lens=lens, num_q_heads=8, num_kv_heads=1, page_size=16),
          dict(inp, seq_lens=np.asarray(lens, np.int32)), from_torch(out))


def test_jax_command_buffer():
    out = _run_python("""
import glob, os, tempfile, jax, jax.numpy as jnp, numpy as np
import hpc_xla.jax as hj
from decode_harness import DecodeCase, make_inputs, check
case = DecodeCase(seq_lens=(3000, 5, 700, 0), num_q_heads=16, num_kv_heads=2, q_len=2)
inp = make_inputs(case)
a = {k: None if v is None else jnp.asarray(v) for k, v in inp.items()}
def step(q, kc, vc, bt, lens):
    plan = hj.decode_plan(lens, num_kv_heads=2, num_q_heads=16, head_dim=128, page_size=16, q_len=2)
    return [hj.decode_attention(q * (i + 1), kc, vc, bt, lens, plan, q_len=2) for i in range(3)]  # 3 layers
f = jax.jit(step)
rng = np.random.default_rng(7)
# XLA may record on the first execution and replay afterwards: every run gets new q and lengths (the block table
# and caches stay, the shapes too), and every layer of every run is checked -- a replay of recorded inputs fails
for lens in ((3000, 5, 700, 0), (2990, 3, 650, 0), (3000, 0, 690, 0)):
    q = rng.standard_normal(inp["q"].shape).astype(inp["q"].dtype)
    lens = np.asarray(lens, np.int32)
    outs = f(jnp.asarray(q), a["k_cache"], a["v_cache"], a["block_table"], jnp.asarray(lens))
    for i, out in enumerate(outs):
        qi = (q.astype(np.float32) * (i + 1)).astype(q.dtype)
        check(DecodeCase(seq_lens=tuple(lens.tolist()), num_q_heads=16, num_kv_heads=2, q_len=2),
              dict(inp, q=qi, seq_lens=lens), np.asarray(out))
from hpc_xla._ext import ext
print("OK calls %d captured %d" % ext().handler_capture_counts())
""", HPC_XLA_COUNT_CAPTURED="1",
       XLA_FLAGS="--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1")
    assert "OK" in out, out
    captured = int(out.split("captured")[1])
    assert captured > 0, "XLA ran the decode custom calls outside a command buffer: " + out


def test_device_checks_report_bad_block_id():
    out = _run_python("""
import numpy as np, torch
import hpc_xla.torch as ht
from decode_harness import DecodeCase, make_inputs, to_torch
inp = make_inputs(DecodeCase())
inp["block_table"][3, 1] = -2
t = {k: to_torch(v, "cuda") for k, v in inp.items()}
try:
    ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"])
    torch.cuda.synchronize()
    print("NO ERROR")
except ValueError as e:
    print("ERROR", e)
""", HPC_XLA_CHECK="1")
    assert "block_table[3, 1] = -2 is outside" in out, out


def test_device_checks_report_a_stale_plan_and_bad_q_scale():
    """HPC_XLA_CHECK=1 on the GPU: a plan refilled for other seq_lens, and an fp8 q's q_scale with a NaN, are
    errors (the CPU path always checks them; session 40's bad-input review)."""
    out = _run_python("""
import dataclasses, numpy as np, torch
import hpc_xla.torch as ht
from decode_harness import DecodeCase, make_inputs, to_torch
t = {k: to_torch(v, "cuda") for k, v in make_inputs(DecodeCase(seq_lens=(100, 0, 3000))).items()}
stale = ht.decode_plan(torch.tensor([3000, 0, 100], dtype=torch.int32, device="cuda"), num_kv_heads=1, num_q_heads=8,
                       head_dim=128, page_size=16)
for name, call in (
        ("stale", lambda: ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"],
                                              stale)),
        ("q_scale", None)):
    if call is None:
        f = {k: to_torch(v, "cuda") for k, v in make_inputs(DecodeCase(seq_lens=(100, 0, 3000), kv_dtype="float8_e4m3fn",
                                                                        q_dtype="float8_e4m3fn")).items()}
        f["q_scale"][0, 1] = float("nan")
        call = lambda: ht.decode_attention(f["q"], f["k_cache"], f["v_cache"], f["block_table"], f["seq_lens"],
                                           k_scale=f["k_scale"], v_scale=f["v_scale"], q_scale=f["q_scale"])
    try:
        call()
        torch.cuda.synchronize()
        print(name, "NO ERROR")
    except ValueError as e:
        print(name, "ERROR", e)
""", HPC_XLA_CHECK="1")
    assert "stale ERROR" in out and "plan does not match seq_lens: seq_lens[0] = 100" in out, out
    assert "q_scale ERROR" in out and "q_scale[1] (flat index) must be finite and >= 0" in out, out


def test_misaligned_workspace_is_refused():
    # the combine kernel reads the fp32 partials as float4: a workspace view at a 4-byte offset gets a clear error
    import torch

    import hpc_xla.torch as ht
    inp = make_inputs(DecodeCase())
    t = {k: to_torch(v, "cuda") for k, v in inp.items()}
    plan = ht.decode_plan(t["seq_lens"], num_kv_heads=t["k_cache"].shape[2], num_q_heads=t["q"].shape[1],
                          head_dim=t["q"].shape[2], page_size=t["k_cache"].shape[1])
    shifted = torch.empty(4 * plan.workspace.numel() + 1, dtype=torch.float32, device="cuda")[1:]
    with pytest.raises(ValueError, match="workspace must be 16-byte aligned on the GPU"):
        ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"], schedule="static",
                            workspace=shifted)


@pytest.mark.parametrize("name", ["k_cache", "q", "out"])
def test_misaligned_views_are_refused(name):
    # K/V rows are copied 16 bytes at a time, q read 8 elements at a time, out written 2 at a time: a view that
    # breaks that alignment gets a clear error instead of a misaligned-address fault.
    import torch

    import hpc_xla.torch as ht
    inp = make_inputs(DecodeCase())
    t = {k: to_torch(v, "cuda") for k, v in inp.items()}
    kw = {}
    if name == "out":
        kw["out"] = torch.empty(t["q"].numel() + 1, dtype=t["q"].dtype, device="cuda")[1:].view(t["q"].shape)
    else:
        flat = torch.empty(t[name].numel() + 8, dtype=t[name].dtype, device="cuda")
        shifted = flat[4:4 + t[name].numel()].view(t[name].shape)
        shifted.copy_(t[name])
        t[name] = shifted
    with pytest.raises(ValueError, match=name + r" must be \d+-byte aligned on the GPU"):
        ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"], **kw)


def test_device_checks_report_bad_kv_scale():
    # fp8 KV scales live on the GPU: only the debug mode reads them (a zero scale would give all-zero K rows' scores)
    out = _run_python("""
import torch
import hpc_xla.torch as ht
from decode_harness import DecodeCase, make_inputs, to_torch
t = {k: to_torch(v, "cuda") for k, v in make_inputs(DecodeCase(kv_dtype="float8_e4m3fn")).items()}
try:
    ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"], k_scale=t["k_scale"],
                        v_scale=torch.tensor(float("nan"), device="cuda"))
    torch.cuda.synchronize()
    print("NO ERROR")
except ValueError as e:
    print("ERROR", e)
""", HPC_XLA_CHECK="1")
    assert "v_scale must be finite and > 0; got nan (HPC_XLA_CHECK)" in out, out


def test_long_merge_tasks():
    """The combine's long tasks (more pieces than the warp merge holds, or more than 16 rows: the block merge)
    against the fp64 reference, on both frameworks and schedules, head dims 64 / 128 / 256, an fp8 cache, 32 rows,
    and bitwise equal run to run (in a child, like the other long runs)."""
    out = _run_python("""
import dataclasses, numpy as np
from decode_harness import DecodeCase, make_inputs, check, run_torch, run_jax
cases = [DecodeCase(seq_lens=(20000,) + (65,) * 15, max_ctas=200),
         DecodeCase(seq_lens=(9000, 130, 0), head_dim=64, max_ctas=90),
         DecodeCase(seq_lens=(6000, 7), head_dim=256, max_ctas=70),
         DecodeCase(seq_lens=(12000, 300), kv_dtype="float8_e4m3fn", q_dtype="float8_e4m3fn", out_dtype="float16",
                    max_ctas=150),
         DecodeCase(seq_lens=(5000, 3, 800), q_len=2, num_q_heads=16, num_kv_heads=1, max_ctas=60),
         DecodeCase(seq_lens=(9000, 100), schedule="static", max_ctas=256)]
for case in cases:
    inp = make_inputs(case)
    for run in (run_torch, run_jax):
        first = run(case, inp, "cuda")
        check(case, inp, first)
        assert np.array_equal(first.view(np.uint16), run(case, inp, "cuda").view(np.uint16)), (case, run)
print("OK", len(cases))
""")
    assert "OK 6" in out, out


@pytest.mark.parametrize("case", [DecodeCase(seq_lens=(9000, 100, 0, 700), max_ctas=40),
                                  DecodeCase(seq_lens=(3000, 65), q_len=2, num_q_heads=16, max_ctas=30),
                                  DecodeCase(seq_lens=(9000, 100), schedule="static", max_ctas=64)],
                         ids=["split", "q_len2", "static"])
def test_out_may_be_q(case):
    """out=q gives the bits of a separate out: a whole piece's q rows are read (LoadQ) only by the CTA that then
    writes those rows, and split pieces are written by the combine kernel after every attention CTA has ended."""
    import torch

    import hpc_xla.torch as ht
    from decode_harness import run_torch

    inp = make_inputs(case)
    want = run_torch(case, inp, "cuda")
    t = {k: to_torch(v, "cuda") for k, v in inp.items()}
    plan = None
    if case.schedule == "dynamic":
        plan = ht.decode_plan(t["seq_lens"], num_kv_heads=case.num_kv_heads, num_q_heads=case.num_q_heads,
                              head_dim=case.head_dim, page_size=case.page_size, q_len=case.q_len,
                              kv_dtype=t["k_cache"].dtype, q_dtype=t["q"].dtype, max_ctas=case.max_ctas)
    q = t["q"]
    y = ht.decode_attention(q, t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"], plan, q_len=case.q_len,
                            schedule=case.schedule, max_ctas=case.max_ctas, out=q)
    torch.cuda.synchronize()
    assert y.data_ptr() == q.data_ptr()
    assert np.array_equal(from_torch(y).view(np.uint16), want.view(np.uint16))
