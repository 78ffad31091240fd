"""decode_attention numerics (both frameworks, both schedules, every device) against float64 numpy, with
garbage in every cache slot no sequence uses; JAX<->torch parity; bad inputs."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import devices
from decode_harness import DecodeCase, check, make_inputs, reference_output, run_jax, run_torch
from hpc_xla import reference

RUNNERS = {"jax": run_jax, "torch": run_torch}


@st.composite
def cases(draw):
    kv = draw(st.integers(1, 4))
    group = draw(st.sampled_from([1, 2, 4, 8, 16]))
    q_len = draw(st.integers(1, 4))
    lens = draw(st.lists(st.one_of(st.just(0), st.integers(q_len, 200), st.integers(q_len, 2500)),
                         min_size=1, max_size=6))
    kv_dtype = draw(st.sampled_from(["bfloat16", "float16", "float8_e4m3fn"]))
    q_dtype = draw(st.sampled_from(["float16", "float8_e4m3fn"] if kv_dtype == "float16" else
                                   ["bfloat16", "float8_e4m3fn"]))
    return DecodeCase(
        seq_lens=tuple(lens), num_q_heads=kv * group, num_kv_heads=kv,
        head_dim=draw(st.sampled_from([64, 128, 256])), page_size=draw(st.sampled_from([16, 32, 64])),
        q_len=q_len, kv_dtype=kv_dtype, q_dtype=q_dtype, schedule=draw(st.sampled_from(["dynamic", "static"])),
        max_ctas=draw(st.sampled_from([None, 1, 3, 17])), sm_scale=draw(st.sampled_from([None, 0.02, 0.3])),
        seed=draw(st.integers(0, 2**31 - 1)),
        out_dtype=draw(st.sampled_from([None, "bfloat16", "float16"])) if q_dtype == "float8_e4m3fn" else None)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("framework", ["jax", "torch"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_random_cases(framework, device, case):
    inp = make_inputs(case)
    check(case, inp, RUNNERS[framework](case, inp, device))


NAMED = {
    "mixed": DecodeCase(),
    "one_long_many_short": DecodeCase(seq_lens=(9000,) + (65,) * 15, max_ctas=24),
    "q_len2": DecodeCase(q_len=2, seq_lens=(2, 130, 700)),
    "q_len4_group16": DecodeCase(q_len=4, num_q_heads=16, seq_lens=(4, 67, 1000)),
    "gqa_64_8": DecodeCase(num_q_heads=64, num_kv_heads=8, seq_lens=(300, 1, 129)),
    "mha": DecodeCase(num_q_heads=4, num_kv_heads=4, seq_lens=(333, 64)),
    "page32": DecodeCase(page_size=32),
    "page64": DecodeCase(page_size=64, seq_lens=(64, 65, 640)),
    "d64": DecodeCase(head_dim=64),
    "d256": DecodeCase(head_dim=256, seq_lens=(500, 3)),
    "fp8_kv": DecodeCase(kv_dtype="float8_e4m3fn"),
    "fp8_kv_fp8_q": DecodeCase(kv_dtype="float8_e4m3fn", q_dtype="float8_e4m3fn", q_len=2, seq_lens=(90, 2)),
    "fp8_q_fp16_out": DecodeCase(kv_dtype="float8_e4m3fn", q_dtype="float8_e4m3fn", out_dtype="float16",
                                 seq_lens=(90, 0, 1300)),  # an fp16 model's fp8 q: the output stays fp16
    "fp16": DecodeCase(kv_dtype="float16", q_dtype="float16"),
    "all_empty": DecodeCase(seq_lens=(0, 0)),
    "many_splits": DecodeCase(seq_lens=(3000, 2900), max_ctas=40),
}


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("framework", ["jax", "torch"])
@pytest.mark.parametrize("schedule", ["dynamic", "static"])
@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_cases(framework, device, schedule, name):
    case = dataclasses.replace(NAMED[name], schedule=schedule)
    inp = make_inputs(case)
    check(case, inp, RUNNERS[framework](case, inp, device))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("framework", ["jax", "torch"])
@pytest.mark.parametrize("schedule", ["dynamic", "static"])
def test_nan_in_q_or_a_visible_key_gives_nan_rows(framework, device, schedule):
    """A NaN in q (sequence 0, head 3) or in a key the query sees (sequence 2, kv head 1) makes exactly the rows that
    read it NaN -- as a softmax does -- not zeros, through split pieces and their merge (max_ctas=11 splits the long
    sequences); every other row is still right."""
    case = DecodeCase(seq_lens=(900, 5, 1300), num_q_heads=8, num_kv_heads=2, max_ctas=11, schedule=schedule)
    inp = make_inputs(case)
    q, k = np.array(inp["q"]), np.array(inp["k_cache"])
    q[0, 3, 17] = np.nan
    tok = 1000  # visible to sequence 2's query (position 1299)
    k[inp["block_table"][2, tok // case.page_size], tok % case.page_size, 1, 5] = np.nan
    inp = dict(inp, q=q, k_cache=k)
    out = np.asarray(RUNNERS[framework](case, inp, device), np.float64)
    nan_rows = np.zeros(out.shape[:2], bool)
    nan_rows[0, 3] = True
    nan_rows[2, 4:8] = True  # q heads 4-7 read kv head 1
    assert np.isnan(out[nan_rows]).all(), "rows that read a NaN must be NaN"
    assert not np.isnan(out[~nan_rows]).any(), "a NaN must not reach rows that do not read it"
    err = reference.relative_error(out[~nan_rows], reference_output(case, inp)[~nan_rows])
    assert err < case.tol, err


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("schedule", ["dynamic", "static"])
def test_jax_torch_bitwise_parity_and_determinism(device, schedule):
    case = DecodeCase(seq_lens=(3000, 5, 700, 0), num_q_heads=16, num_kv_heads=2, q_len=2, schedule=schedule,
                      max_ctas=None if device == "cuda" else 13)
    inp = make_inputs(case)
    a, b, c = run_jax(case, inp, device), run_torch(case, inp, device), run_torch(case, inp, device)
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
    assert np.array_equal(b.view(np.uint8), c.view(np.uint8))


@pytest.mark.parametrize("device", devices())
def test_a_plan_sets_the_static_schedules_splits_in_both_faces(device):
    """With schedule="static" a given plan's max_ctas sizes the splits in JAX and torch alike (JAX used to ignore
    the plan and take the device default: other splits, other bits); a different explicit max_ctas is refused."""
    import jax

    import hpc_xla.jax as hj
    import hpc_xla.torch as ht
    from decode_harness import from_torch, to_torch

    case = DecodeCase(seq_lens=(1000, 700), schedule="static", max_ctas=2)
    inp = make_inputs(case)
    expected = run_torch(case, inp, device)  # static, max_ctas=2, no plan
    shape = dict(num_kv_heads=case.num_kv_heads, num_q_heads=case.num_q_heads, head_dim=case.head_dim,
                 page_size=case.page_size, max_ctas=2)
    t = {k: to_torch(v, device) for k, v in inp.items()}
    got_torch = from_torch(ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"],
                                               ht.decode_plan(t["seq_lens"], **shape), schedule="static"))
    dev = jax.devices("cpu" if device == "cpu" else "gpu")[0]
    a = {k: None if v is None else jax.device_put(v, dev) for k, v in inp.items()}
    got_jax = np.asarray(hj.decode_attention(a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"],
                                             hj.decode_plan(a["seq_lens"], **shape), schedule="static"))
    assert np.array_equal(got_torch.view(np.uint8), expected.view(np.uint8))
    assert np.array_equal(got_jax.view(np.uint8), expected.view(np.uint8))
    msg = r"decode_attention: max_ctas=3 but the plan was built for max_ctas=2; omit max_ctas"
    for schedule in ("static", "dynamic"):
        with pytest.raises(ValueError, match=msg):
            ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"],
                                ht.decode_plan(t["seq_lens"], **shape), schedule=schedule, max_ctas=3)
        with pytest.raises(ValueError, match=msg):
            hj.decode_attention(a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"],
                                hj.decode_plan(a["seq_lens"], **shape), schedule=schedule, max_ctas=3)


def _torch_args(case, device="cpu", **edits):
    from decode_harness import to_torch

    inp = make_inputs(case)
    inp.update(edits)
    return {k: to_torch(v, device) for k, v in inp.items()}


def _call(t, case, **kw):
    import hpc_xla.torch as ht

    args = dict(q_scale=t["q_scale"], k_scale=t["k_scale"], v_scale=t["v_scale"], q_len=case.q_len,
                schedule=case.schedule, max_ctas=8)
    args.update(kw)
    return ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"], **args)


def test_errors_torch_cpu():
    import torch

    import hpc_xla.torch as ht

    case = DecodeCase()
    t = _torch_args(case)
    with pytest.raises(ValueError, match=r"q.shape\[0\] must be batch \* q_len = 4 \* 2 = 8"):
        _call(t, case, q_len=2)
    with pytest.raises(ValueError, match=r"sm_scale must be finite and > 0"):
        _call(t, case, sm_scale=-1.0)
    with pytest.raises(ValueError, match=r"sm_scale must be finite and > 0; got inf"):
        _call(t, case, sm_scale=float("inf"))
    with pytest.raises(ValueError, match=r"schedule must be 'dynamic' or 'static'"):
        _call(t, case, schedule="greedy")
    with pytest.raises(ValueError, match=r"k_cache must have dtype"):
        _call(dict(t, k_cache=t["k_cache"].float(), v_cache=t["v_cache"].float()), case)
    with pytest.raises(ValueError, match=r"v_cache.shape\[2\] must be 1"):
        _call(dict(t, v_cache=t["v_cache"].repeat(1, 1, 2, 1)), case)
    bad_table = t["block_table"].clone()
    bad_table[3, 0] = 10**6
    with pytest.raises(ValueError, match=r"block_table\[3, 0\] = 1000000 is outside"):
        _call(dict(t, block_table=bad_table), case)
    narrow = t["block_table"][:, :2].contiguous()
    with pytest.raises(ValueError, match=r"seq_lens\[0\] = 100 must be 0 or in \[q_len=1, max_blocks \* page_size = 32\]"):
        _call(dict(t, block_table=narrow), case)
    with pytest.raises(ValueError, match=r"k_scale is required"):
        fp8 = DecodeCase(kv_dtype="float8_e4m3fn")
        _call(dict(_torch_args(fp8), k_scale=None), fp8)
    with pytest.raises(ValueError, match=r"block_table.shape\[0\] must be 4"):
        _call(dict(t, block_table=t["block_table"][:3]), case)
    # output dtypes: a 16-bit q's own; bf16 or fp16 for an fp8 q
    with pytest.raises(ValueError, match=r"out_dtype must be q's dtype \(bfloat16\) for a 16-bit q; got float16"):
        _call(t, case, out_dtype=torch.float16)
    with pytest.raises(ValueError, match=r"out must have dtype bfloat16; got float16"):
        _call(t, case, out=torch.empty(t["q"].shape, dtype=torch.float16))
    fp8q = DecodeCase(kv_dtype="float8_e4m3fn", q_dtype="float8_e4m3fn")
    with pytest.raises(ValueError, match=r"out_dtype must be bfloat16 or float16 for a float8_e4m3fn q; got float32"):
        _call(_torch_args(fp8q), fp8q, out_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"out must have dtype bfloat16 or float16; got float32"):
        _call(_torch_args(fp8q), fp8q, out=torch.empty(t["q"].shape, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"give out_dtype or out, not both"):
        _call(t, case, out=torch.empty(t["q"].shape, dtype=torch.bfloat16), out_dtype=torch.bfloat16)
    plan = ht.decode_plan(t["seq_lens"], num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, q_len=1)
    with pytest.raises(ValueError, match=r"plan was built for q_len=1 but this call has q_len=2"):
        case2 = DecodeCase(q_len=2, seq_lens=(100, 0, 2, 700))
        t2 = _torch_args(case2)
        ht.decode_attention(t2["q"], t2["k_cache"], t2["v_cache"], t2["block_table"], t2["seq_lens"], plan, q_len=2)
    other = ht.decode_plan(torch.tensor([5, 5], dtype=torch.int32), num_kv_heads=1, num_q_heads=8, head_dim=128,
                           page_size=16)
    with pytest.raises(ValueError, match=r"plan was built for batch=2 but this call has batch=4"):
        ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"], other)
    # A plan buffer longer than decode_plan wrote (its size then implies another max_ctas): the extra CTAs would
    # read start[] entries nobody wrote, so the header and the size must agree.
    mine = ht.decode_plan(t["seq_lens"], num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, max_ctas=8)
    longer = torch.cat([mine.plan, torch.zeros(2, dtype=torch.int32)])
    workspace = torch.empty(2 * mine.workspace.numel(), dtype=torch.float32)
    out = torch.empty_like(t["q"])
    with pytest.raises(ValueError, match=r"plan holds 41 int32, which for batch 4 means max_ctas=9, but decode_plan "
                                         r"built it for max_ctas=8"):
        torch.ops.hpc_xla.decode_attention(t["q"], None, t["k_cache"], t["v_cache"], t["block_table"],
                                           t["seq_lens"], longer, workspace, out, None, None, 0.1, 1, 0, 8)


def test_errors_jax_cpu():
    import jax

    import hpc_xla.jax as hj

    case = DecodeCase()
    inp = make_inputs(case)
    cpu = jax.devices("cpu")[0]
    a = {k: None if v is None else jax.device_put(v, cpu) for k, v in inp.items()}
    bad = np.array(inp["block_table"])
    bad[3, 0] = inp["k_cache"].shape[0]
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"block_table\[3, 0\] = %d is outside" % bad[3, 0]):
        jax.block_until_ready(jax.jit(hj.decode_attention)(a["q"], a["k_cache"], a["v_cache"],
                                                           jax.device_put(bad, cpu), a["seq_lens"]))
    plan = hj.decode_plan(a["seq_lens"], num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, q_len=2)
    with pytest.raises(ValueError, match=r"plan was built for q_len=2 but this call has q_len=1"):
        hj.decode_attention(a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"], plan, q_len=1)
    with pytest.raises(Exception, match=r"q.shape\[0\] must be batch \* q_len = 4 \* 2 = 8"):  # q_len from the plan
        hj.decode_attention(a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"], plan)
    with pytest.raises(ValueError, match=r"out_dtype must be q's dtype \(bfloat16\) for a 16-bit q; got float16"):
        hj.decode_attention(a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"], out_dtype="float16")
    with pytest.raises(ValueError, match=r"out_dtype must be bfloat16 or float16 for a float8_e4m3fn q; got int8"):
        hj.decode_attention(a["q"].astype("float8_e4m3fn"), a["k_cache"], a["v_cache"], a["block_table"],
                            a["seq_lens"], q_scale=np.ones(a["q"].shape[:2], np.float32), out_dtype=np.int8)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"v_cache.shape\[1\] must be 16"):
        jax.block_until_ready(hj.decode_attention(a["q"], a["k_cache"], a["v_cache"][:, :8], a["block_table"],
                                                  a["seq_lens"], schedule="static"))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("schedule", ["dynamic", "static"])
def test_torch_compile_fullgraph(device, schedule):
    """A step's plan + attention under torch.compile(fullgraph=True): the wrappers' sizes and dtype codes are plain
    Python and the device's grid size a folded constant, so dynamo traces them without a graph break."""
    import torch

    import hpc_xla.torch as ht
    from decode_harness import from_torch, to_torch

    case = DecodeCase(schedule=schedule, max_ctas=None)
    inp = make_inputs(case)
    t = {k: to_torch(v, device) for k, v in inp.items()}

    @torch.compile(fullgraph=True, dynamic=False)
    def step(q, k_cache, v_cache, block_table, seq_lens):
        plan = None
        if schedule == "dynamic":
            plan = ht.decode_plan(seq_lens, num_kv_heads=case.num_kv_heads, num_q_heads=case.num_q_heads,
                                  head_dim=case.head_dim, page_size=case.page_size)
        return ht.decode_attention(q * 1.0, k_cache, v_cache, block_table, seq_lens, plan, schedule=schedule) * 1.0

    check(case, inp, from_torch(step(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"])))


@pytest.mark.parametrize("device", devices())
def test_torch_compile_new_batch_sizes_and_a_shared_workspace(device):
    """torch.compile's default (dynamic after the first recompile) over changing batch sizes, with the plan in a
    workspace shared by every batch size (the docstring's pattern): q_len comes from comparisons, not a symbolic
    division, and the workspace's alignment is left to the launcher while tracing."""
    import torch

    import hpc_xla.torch as ht
    from decode_harness import from_torch, to_torch

    ws = torch.empty(1 << 20, dtype=torch.float32, device=device)

    @torch.compile(fullgraph=True)
    def step(q, k_cache, v_cache, block_table, seq_lens):
        plan = ht.decode_plan(seq_lens, num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, workspace=ws)
        return ht.decode_attention(q, k_cache, v_cache, block_table, seq_lens, plan)

    for lens in ((100, 0, 300), (100, 0, 300, 5), (7, 8, 9, 10, 11)):
        case = DecodeCase(seq_lens=lens)
        inp = make_inputs(case)
        t = {k: to_torch(v, device) for k, v in inp.items()}
        check(case, inp, from_torch(step(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"])))


def test_jax_export_refuses_a_symbolic_batch_by_name():
    """The plan's and the workspace's sizes are functions of B: jax.export of a symbolic batch is refused naming it."""
    import jax
    import jax.numpy as jnp
    from jax import export

    import hpc_xla.jax as hj

    b = export.symbolic_shape("b")[0]
    shapes = (jax.ShapeDtypeStruct((b, 8, 128), jnp.bfloat16), jax.ShapeDtypeStruct((10, 16, 1, 128), jnp.bfloat16),
              jax.ShapeDtypeStruct((10, 16, 1, 128), jnp.bfloat16), jax.ShapeDtypeStruct((b, 4), jnp.int32),
              jax.ShapeDtypeStruct((b,), jnp.int32))
    with pytest.raises(ValueError, match=r"decode_attention: the batch must be concrete .* got seq_lens \(b,\)"):
        export.export(jax.jit(hj.decode_attention), platforms=["cpu"])(*shapes)
    with pytest.raises(ValueError, match=r"decode_plan: the batch must be concrete"):
        export.export(jax.jit(lambda sl: hj.decode_plan(sl, num_kv_heads=1, num_q_heads=8, head_dim=128,
                                                        page_size=16).array), platforms=["cpu"])(shapes[4])


def test_torch_decode_plan_on_meta_tensors_queries_no_gpu():
    """Shape-only planning (meta tensors) sizes the plan with the CPU platform's grid, not cuda:0's occupancy."""
    import torch

    import hpc_xla.torch as ht
    from hpc_xla import _decode

    plan = ht.decode_plan(torch.zeros(3, dtype=torch.int32, device="meta"), num_kv_heads=1, num_q_heads=8,
                          head_dim=128, page_size=16)
    assert plan.plan.device.type == "meta" and plan.config.max_ctas == _decode.max_ctas_for(
        None, 1, 8, 128, 1, 16, "bfloat16", "bfloat16")


def test_python_sizes_equal_the_binary():
    """The faces size plans and workspaces in Python (hpc_xla._decode); the binary validates against its own."""
    from hpc_xla import _decode
    from hpc_xla._ext import ext

    for batch in (1, 3, 64, 2047):
        for heads in ((1, 8), (8, 64), (4, 4)):
            for max_ctas in (1, 17, 264, 2048):
                assert _decode.plan_ints(batch, max_ctas) == ext().decode_plan_size(batch, max_ctas)
                for d, q_len in ((64, 1), (128, 4), (256, 2)):
                    assert _decode.workspace_floats(batch, heads[0], heads[1], d, q_len, max_ctas) == \
                        ext().decode_workspace_size(batch, heads[0], heads[1], d, q_len, max_ctas)
                    assert _decode.static_splits(batch, heads[0], max_ctas) == \
                        ext().decode_static_splits(batch, heads[0], max_ctas)


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_q_len_defaults_to_the_plan_or_the_shapes(framework):
    """q_len need not be repeated: the plan's, else q.shape[0] / B (the contract's B * q_len rows)."""
    case = DecodeCase(q_len=3, seq_lens=(100, 0, 7, 700))
    inp = make_inputs(case)
    for schedule in ("dynamic", "static"):
        c = dataclasses.replace(case, schedule=schedule)
        want = RUNNERS[framework](c, inp)
        if framework == "torch":
            import hpc_xla.torch as ht
            from decode_harness import from_torch, to_torch

            t = {k: to_torch(v, "cpu") for k, v in inp.items()}
            plan = None if schedule == "static" else ht.decode_plan(
                t["seq_lens"], num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, q_len=3)
            got = from_torch(ht.decode_attention(t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"],
                                                 plan, schedule=schedule))
        else:
            import jax

            import hpc_xla.jax as hj

            # on the CPU like `want` (numpy inputs would go to jax's default device, a GPU where there is one)
            with jax.default_device(jax.devices("cpu")[0]):
                plan = None if schedule == "static" else hj.decode_plan(
                    inp["seq_lens"], num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, q_len=3)
                got = np.asarray(hj.decode_attention(inp["q"], inp["k_cache"], inp["v_cache"], inp["block_table"],
                                                     inp["seq_lens"], plan, schedule=schedule))
        assert np.array_equal(np.asarray(got).view(np.uint16), np.asarray(want).view(np.uint16))


def test_make_fx_traces_a_plan_in_a_shared_workspace():
    """make_fx (fake and symbolic tracing) of decode_plan(workspace=): the alignment check read the fake tensor's
    data pointer ("Cannot access data pointer of Tensor"), where torch.compile skipped it (a review of session 41)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    import hpc_xla.torch as ht

    def plan(seq_lens, ws):
        return ht.decode_plan(seq_lens, num_kv_heads=1, num_q_heads=8, head_dim=128, page_size=16, workspace=ws).plan

    lens, ws = torch.tensor([100, 0, 300], dtype=torch.int32), torch.empty(1 << 20, dtype=torch.float32)
    for mode in ("fake", "symbolic"):
        graph = make_fx(plan, tracing_mode=mode)(lens, ws)
        assert torch.equal(graph(lens, ws), plan(lens, ws)), mode
