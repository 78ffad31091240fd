"""GPU-only behaviour of rope_norm: CUDA-graph capture (torch), XLA command buffers (JAX), the HPC_XLA_CHECK
debug mode, alignment errors, and memory safety with bad indices when checks are off."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cuda_graph import capture
from rope_norm_harness import Case, check, from_torch, make_inputs, to_torch

pytestmark = pytest.mark.gpu
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_python(code, **env):
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]), **env)
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env,
                         timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def test_torch_cuda_graph_capture_and_replay_with_new_inputs():
    import torch

    import hpc_xla.torch as ht

    case = Case(tokens=32, num_q_heads=8, num_kv_heads=1, page_size=16, num_blocks=8, cache_fp8=True, q_fp8=True)
    first = make_inputs(case)
    s = {k: to_torch(v, "cuda") for k, v in first.items()}
    graph, (q_fp8, q_scale) = capture(lambda: ht.rope_norm(
        s["q"], s["k"], s["v"], s["positions"], s["cos_sin_cache"], s["slot_mapping"], s["k_cache"], s["v_cache"],
        q_norm_weight=s["q_norm_weight"], k_norm_weight=s["k_norm_weight"], k_scale=s["k_scale"],
        v_scale=s["v_scale"], q_quant="fp8"))
    for seed in (1, 2):  # new step: new tokens, positions, slots, fresh cache garbage
        inputs = make_inputs(Case(**{**case.__dict__, "seed": seed}))
        for name in ("q", "k", "v", "positions", "slot_mapping", "k_cache", "v_cache"):
            s[name].copy_(to_torch(inputs[name], "cuda"))
        inputs["q_norm_weight"], inputs["k_norm_weight"] = first["q_norm_weight"], first["k_norm_weight"]
        graph.replay()
        torch.cuda.synchronize()
        check(case, inputs, from_torch(q_fp8), from_torch(q_scale), from_torch(s["k_cache"]), from_torch(s["v_cache"]))


def test_jax_xla_command_buffers():
    """Under XLA's command-buffer flags our FFI handler must be recorded into a command buffer (XLA records FFI
    calls by stream capture, which the handler sees with HPC_XLA_COUNT_CAPTURED=1) and still compute right."""
    out = _run_python("""
        import jax, jax.numpy as jnp, numpy as np
        import hpc_xla.jax as hj
        from hpc_xla import reference
        from hpc_xla._ext import ext
        from rope_norm_harness import Case, check, make_inputs
        case = Case(tokens=16, num_blocks=4, q_fp8=True)
        inputs = make_inputs(case)
        dev = jax.devices("gpu")[0]
        a = {k: None if v is None else jax.device_put(v, dev) for k, v in inputs.items()}
        names = ["q", "k", "v", "positions", "cos_sin_cache", "slot_mapping", "k_cache", "v_cache"]
        def layers(q, k, v, pos, cs, slots, kc, vc):
            # three "layers" back to back: XLA records the custom calls and fusions into one command buffer
            acc = jnp.zeros(q.shape, jnp.float32)
            for _ in range(3):
                qf, qs, kc, vc = hj.rope_norm(q, k, v, pos, cs, slots, kc, vc, q_norm_weight=a["q_norm_weight"],
                                              k_norm_weight=a["k_norm_weight"], q_quant="fp8")
                acc = acc + qf.astype(jnp.float32) * qs[..., None]
            return acc / 3, qf, qs, kc, vc
        f = jax.jit(layers, donate_argnums=(6, 7))
        kc, vc = a["k_cache"], a["v_cache"]
        # XLA may record on the first execution and replay afterwards: every run gets new q / k / v / positions
        # (the slots stay, so slots no run writes keep the first cache's bytes), the donated caches come back at
        # new addresses, and every run's q and caches are checked -- a replay of recorded inputs or of a donated,
        # stale cache buffer fails
        for seed in range(3):
            new = make_inputs(Case(**{**case.__dict__, "seed": seed + 1}))
            run = dict(inputs, **{n: new[n] for n in ("q", "k", "v", "positions")})
            args = [jax.device_put(run[n], dev) for n in names[:6]] + [kc, vc]
            q, qf, qs, kc, vc = f(*args)
            check(case, run, np.asarray(qf), np.asarray(qs), np.asarray(kc), np.asarray(vc))
            ref_q, _, _ = reference.rope_norm(run["q"], run["k"], run["v"], run["positions"], run["cos_sin_cache"],
                                              q_norm_weight=run["q_norm_weight"], k_norm_weight=run["k_norm_weight"])
            err = reference.relative_error(np.asarray(q), ref_q)
            assert err < 5e-2, err
        calls, captured = ext().handler_capture_counts()
        print("OK", err, "calls", calls, "captured", captured)
        """, HPC_XLA_COUNT_CAPTURED="1",
        XLA_FLAGS="--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1")
    assert "OK" in out, out
    calls, captured = [int(x) for x in out.split("calls")[1].split("captured")]
    assert calls > 0, out
    assert captured > 0, "XLA ran every rope_norm call outside a command buffer: " + out


_CHECK_CALLS = {
    "torch": """
import hpc_xla.torch as ht, torch
t = {k: to_torch(v, "cuda") for k, v in inputs.items()}
ht.rope_norm(t["q"], t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"], t["k_cache"], t["v_cache"])
torch.cuda.synchronize()
""",
    "jax": """
import jax, hpc_xla.jax as hj
d = jax.devices("gpu")[0]
a = {k: None if v is None else jax.device_put(v, d) for k, v in inputs.items()}
jax.block_until_ready(jax.jit(hj.rope_norm)(a["q"], a["k"], a["v"], a["positions"], a["cos_sin_cache"],
                                           a["slot_mapping"], a["k_cache"], a["v_cache"]))
""",
}


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_device_checks_report_bad_slot(framework):
    code = "\n".join([
        "import numpy as np",
        "from rope_norm_harness import Case, make_inputs, to_torch",
        "inputs = make_inputs(Case(tokens=6, num_blocks=1, page_size=8))",
        "inputs['slot_mapping'][4] = 8",
        "try:",
        textwrap.indent(_CHECK_CALLS[framework].strip(), "    "),
        "    print('NO ERROR')",
        "except Exception as e:",
        "    print('ERROR', e)",
    ])
    out = _run_python(code, HPC_XLA_CHECK="1")
    assert "ERROR" in out and "slot_mapping[4] = 8 is outside [-1, 8)" in out, out


def test_bad_indices_without_checks_do_not_write_out_of_bounds():
    """Without HPC_XLA_CHECK the kernel cannot raise, but it must not write outside the cache or read outside
    cos_sin_cache: bad slots are skipped and rows with bad positions become NaN. (tools/gpu_check.sh runs this
    test under compute-sanitizer memcheck, which is what proves no access went out of bounds.)"""
    import torch

    import hpc_xla.torch as ht

    case = Case(tokens=6, num_blocks=1, page_size=8, skip_every=0)
    inputs = make_inputs(case)
    inputs["slot_mapping"][:] = [0, 1, 2, 3, 8, 1 << 30]
    inputs["positions"][1] = -5
    t = {k: to_torch(v, "cuda") for k, v in inputs.items()}
    q = ht.rope_norm(t["q"], t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"], t["k_cache"],
                     t["v_cache"])
    torch.cuda.synchronize()
    k_cache = from_torch(t["k_cache"]).reshape(8, -1).view(np.uint8)
    before = inputs["k_cache"].reshape(8, -1).view(np.uint8)
    assert np.array_equal(k_cache[4:], before[4:]), "slots 4..7 were not addressed by valid slots"
    assert torch.isnan(q[1].float()).all() and torch.isfinite(q[0].float()).all()


def test_misaligned_view_is_rejected():
    import torch

    import hpc_xla.torch as ht

    t = {k: to_torch(v, "cuda") for k, v in make_inputs(Case()).items()}
    flat = torch.empty(t["q"].numel() + 1, dtype=t["q"].dtype, device="cuda")
    q = flat[1:].view(t["q"].shape)
    q.copy_(t["q"])
    with pytest.raises(ValueError, match=r"q must be 16-byte aligned"):
        ht.rope_norm(q, t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"], t["k_cache"],
                     t["v_cache"])


# Large batches: more rows per lane group (RowsPerGroup picks 4 once the grid fills the GPU twice: the 64/8
# case), the few-head 8/1 shape at T=16383, the general kernel (rotary_dim 100), lanes outside the rotary part,
# D 64 and 256.
LARGE = dict(num_q_heads=16, num_kv_heads=4, page_size=16)
LARGE_CASES = [
    Case(tokens=2048, num_blocks=136, **LARGE),
    Case(tokens=4096, num_blocks=264, num_q_heads=64, num_kv_heads=8, page_size=16),
    Case(tokens=2048, num_blocks=136, rope_style="gptj", norm_before_rope=False, index_dtype="int64", **LARGE),
    Case(tokens=2048, num_blocks=136, cache_fp8=True, q_fp8=True, weight_dtype="bfloat16", **LARGE),
    Case(tokens=2048, num_blocks=136, rotary_dim=100, dtype="float16", q_norm=False, **LARGE),  # general cos/sin path
    Case(tokens=2048, num_blocks=136, rotary_dim=64, k_norm=False, skip_every=2, **LARGE),  # lanes outside rotary
    Case(tokens=4096, num_blocks=264, head_dim=64, **LARGE),
    Case(tokens=1024, num_blocks=72, head_dim=256, cache_fp8=True, **LARGE),
    # 8/1 heads at a benchmark-sized odd T (one row per group, kind-major tiles of 4 tokens), fp8 cache and q
    Case(tokens=16383, num_blocks=1030, num_q_heads=8, num_kv_heads=1, page_size=16, cache_fp8=True, q_fp8=True),
]


@pytest.mark.parametrize("case", LARGE_CASES, ids=lambda c: "T%d_H%d_D%d_%s_rot%s_fp8%d%d_%s" % (
    c.tokens, c.num_q_heads, c.head_dim, c.rope_style, c.rotary_dim, c.cache_fp8, c.q_fp8, c.index_dtype))
def test_large_batch(case):
    from rope_norm_harness import run_torch

    inputs = make_inputs(case)
    check(case, inputs, *run_torch(case, inputs, device="cuda"))


def test_every_rows_per_group_setting():
    """The paired kernel with 1, 2 and 4 rows per lane group (HPC_XLA_ROPE_ROWS, read once per process, so each
    setting runs in its own process) over head counts that do and do not divide by the rows, both rope styles,
    partial rotary, norm after rope, fp8 cache and q, D 64/128/256 (Hkv 1 and 2 at 2 or 4 rows take merged k/v
    groups, Hkv 3 and 4 separate ones; 5 and 10 q heads and 3 kv heads in 2 groups leave some groups a row short,
    which the kernel's full-warp shuffles need a warp of tokens per tile for; groups holding all their rows -- 8/2
    and 12/4 neox, 8/4 gptj with fp8 -- take the kernel's phased path); plus shapes that take the general kernel."""
    code = """
from rope_norm_harness import Case, check, make_inputs, run_torch
cases = [
    Case(tokens=37, num_q_heads=6, num_kv_heads=3, page_size=8, num_blocks=6),
    Case(tokens=37, num_q_heads=5, num_kv_heads=1, page_size=8, num_blocks=6, rope_style="gptj", rotary_dim=48),
    Case(tokens=37, num_q_heads=8, num_kv_heads=2, page_size=8, num_blocks=6, rotary_dim=32, norm_before_rope=False),
    Case(tokens=37, num_q_heads=12, num_kv_heads=4, page_size=8, num_blocks=6, cache_fp8=True, q_fp8=True,
         head_dim=64, dtype="float16"),
    Case(tokens=37, num_q_heads=4, num_kv_heads=2, page_size=8, num_blocks=6, head_dim=256, q_fp8=True,
         weight_dtype="bfloat16", k_norm=False),
    Case(tokens=37, num_q_heads=10, num_kv_heads=3, page_size=8, num_blocks=6, cache_fp8=True, q_fp8=True),
    Case(tokens=37, num_q_heads=8, num_kv_heads=4, page_size=8, num_blocks=6, rope_style="gptj", cache_fp8=True,
         q_fp8=True),
    Case(tokens=37, num_q_heads=4, num_kv_heads=2, page_size=8, num_blocks=6, head_dim=96),  # general kernel
    Case(tokens=37, num_q_heads=4, num_kv_heads=2, page_size=8, num_blocks=6, rotary_dim=40),  # general kernel
]
from hpc_xla._ext import ext
launched = []
for case in cases:
    inputs = make_inputs(case)
    check(case, inputs, *run_torch(case, inputs, device="cuda"))
    launched.append(ext().rope_norm_last_launch()[0])
print("OK", len(cases), "ROWS", *launched)
"""
    for rows in ("1", "2", "4"):
        out = _run_python(code, HPC_XLA_ROPE_ROWS=rows)
        assert "OK 9" in out, (rows, out)
        # the knob really took effect: the paired cases ran with these rows, the last two took the general kernel
        assert out.split("ROWS")[1].split() == [rows] * 7 + ["0", "0"], (rows, out)


def test_fp8_scale_helpers_match_ieee_division_on_every_float():
    """The paired kernel's per-row fp8 scale math (csrc/common/fp8_scale.cuh: amax / 448 and 1 / scale by double FMAs
    from the hardware's approximate reciprocal, no division call; and the per-row pair in single precision where it
    is exact) against the float divisions it replaces, on all 2^32 bit patterns, on this GPU."""
    from hpc_xla._ext import ext

    assert tuple(ext().fp8_scale_selfcheck(0)) == (0, 0, 0)


def test_fp8_q_scale_of_special_rows():
    """fp8 q_scale where the row's math leaves the normal range, at 1, 2 and 4 rows per lane group (experiment 29's 2-
    and 4-row kernels take max |x| before the 1 / rms factor and reduce it with the sum of squares): an all-zero
    row with eps = 0 (1 / rms = inf, the row NaN: scale 0 like the CPU path), a row whose sum of squares overflows
    (1 / rms = 0: scale 0), a row holding inf, a row without q norm holding inf (scale inf), a bad position (NaN
    row: scale 0, GPU only). Every other row's scale matches the CPU path to rounding."""
    code = """
import numpy as np
from rope_norm_harness import Case, make_inputs, run_torch
from hpc_xla._ext import ext
for q_norm in (True, False):
    case = Case(tokens=37, num_q_heads=8, num_kv_heads=1, page_size=8, num_blocks=6, cache_fp8=True, q_fp8=True,
                eps=0.0, q_norm=q_norm)
    inputs = make_inputs(case)
    q = inputs["q"]
    q[0] = 0
    q[1] = 1e30
    q[2, :, 5] = np.inf
    _, cpu_scale, _, _ = run_torch(case, inputs, device="cpu")
    inputs["positions"][3] = -5
    _, gpu_scale, _, _ = run_torch(case, inputs, device="cuda")
    exact = (cpu_scale == 0) | np.isinf(cpu_scale)  # per (token, head)
    want = [True, q_norm, True]  # token 1 without norm: 1e30 rows, finite scales
    assert [bool(exact[t].all()) for t in range(3)] == want and not exact[4:].any(), (q_norm, cpu_scale[:5])
    exact[3] = False
    assert np.array_equal(cpu_scale[exact].view(np.uint32), gpu_scale[exact].view(np.uint32)), (
        q_norm, cpu_scale[:3], gpu_scale[:3])
    assert (gpu_scale[3] == 0).all(), gpu_scale[3]
    rest = ~exact
    rest[3] = False
    rel = np.abs(gpu_scale[rest] - cpu_scale[rest]) / cpu_scale[rest]
    assert rel.max() < 1e-5, rel.max()
    assert np.isinf(cpu_scale[2]).all() != q_norm, cpu_scale[2]
print("OK ROWS", ext().rope_norm_last_launch()[0])
"""
    for rows in ("1", "2", "4"):
        out = _run_python(code, HPC_XLA_ROPE_ROWS=rows)
        assert "OK ROWS " + rows in out, (rows, out)


LAYOUT_CASES = [
    Case(tokens=37, num_q_heads=6, num_kv_heads=3, page_size=8, num_blocks=6),
    Case(tokens=37, num_q_heads=5, num_kv_heads=1, page_size=8, num_blocks=6, rope_style="gptj", rotary_dim=48),
    Case(tokens=37, num_q_heads=12, num_kv_heads=4, page_size=8, num_blocks=6, cache_fp8=True, q_fp8=True,
         head_dim=64, dtype="float16"),
    Case(tokens=37, num_q_heads=4, num_kv_heads=2, page_size=8, num_blocks=6, head_dim=96),  # general kernel
    Case(tokens=3001, num_q_heads=8, num_kv_heads=1, page_size=64, num_blocks=48, index_dtype="int64"),
]


@pytest.mark.parametrize("layout", ["qkv", "head_strided"])
@pytest.mark.parametrize("case", LAYOUT_CASES, ids=lambda c: "T%d_H%d_%d_D%d" % (
    c.tokens, c.num_q_heads, c.num_kv_heads, c.head_dim))
def test_input_layouts(case, layout):
    """q, k, v as vLLM passes them (views of one [T, (Hq + 2 Hkv) D] qkv tensor) and as head-strided views."""
    from rope_norm_harness import run_torch

    inputs = make_inputs(case)
    check(case, inputs, *run_torch(case, inputs, device="cuda", input_layout=layout))


def test_device_checks_report_bad_cache_scale():
    code = "\n".join([
        "import torch",
        "import hpc_xla.torch as ht",
        "from rope_norm_harness import Case, make_inputs, to_torch",
        "t = {k: to_torch(v, 'cuda') for k, v in make_inputs(Case(tokens=6, num_blocks=1, page_size=8,",
        "                                                          cache_fp8=True)).items()}",
        "try:",
        "    ht.rope_norm(t['q'], t['k'], t['v'], t['positions'], t['cos_sin_cache'], t['slot_mapping'],",
        "                 t['k_cache'], t['v_cache'], k_scale=torch.zeros((), device='cuda'), v_scale=t['v_scale'])",
        "    torch.cuda.synchronize()",
        "    print('NO ERROR')",
        "except ValueError as e:",
        "    print('ERROR', e)",
    ])
    out = _run_python(code, HPC_XLA_CHECK="1")
    assert "k_scale must be finite and > 0; got 0.000000 (HPC_XLA_CHECK)" in out, out
