"""The benchmark harness's host-side pieces (CPU): shape selection and graph sizing. The timings themselves need
the H200 (python -m hpc_xla.bench)."""
import pytest

from hpc_xla.bench import moe, timing


def test_moe_shapes_select_by_name_and_quant():
    assert moe._selected_shapes(None) == moe.SHAPES
    picked = moe._selected_shapes("qwen3-30b-a3b/fp8_tensor,mixtral-8x7b/bf16")
    assert [(s[0], s[7]) for s in picked] == [("qwen3-30b-a3b", "fp8_tensor"), ("mixtral-8x7b", None)]
    assert [s[7] for s in moe._selected_shapes("mixtral-8x7b")] == [None, "fp8_tensor"]  # the fp8 row
    assert [s[7] for s in moe._selected_shapes("qwen3-30b-a3b")] == [None, "fp8_tensor"]
    assert moe._selected_shapes("qwen3-30b-a3b/bf16")[0][7] is None


def test_moe_shapes_unknown_name_lists_the_known_ones():
    with pytest.raises(SystemExit, match=r"--shapes: no shape 'llama'; known: .*qwen3-30b-a3b/fp8_tensor"):
        moe._selected_shapes("llama")


@pytest.mark.parametrize("n, min_calls, expect", [(3, 16, 18), (1, 16, 16), (20, 16, 20), (5, 1, 5)])
def test_graphs_cycle_the_rotating_sets_in_whole_passes(n, min_calls, expect):
    calls = list(range(n))
    got = timing.cycled(calls, min_calls)
    assert len(got) == expect and got[:n] == calls and got == calls * (expect // n)


def test_moe_roofline_against_the_same_run_ceilings():
    # Qwen3 fp8 T=1 on the session-21 numbers: 37.7 MB of hit weights in 19.5 us, a 4.2 TB/s copy ceiling.
    c = dict(copy_tbps=4.2, fp8_tflops=1300.0, bf16_tflops=None)
    flops = 2.0 * 8 * 3 * 2048 * 768
    r = moe._roofline(c, "fp8_tensor", 37.7e6, flops, 19.5)
    assert r["floor_us"] == pytest.approx(37.7e6 / 4.2e12 * 1e6)  # weight-bound: the memory floor
    assert r["x_floor"] == pytest.approx(19.5 / r["floor_us"])
    assert r["pct_mem"] == pytest.approx(100 * 37.7e6 / 19.5e-6 / 4.2e12)
    assert r["pct_tc"] == pytest.approx(100 * flops / 19.5e-6 / 1300e12)
    # compute-bound row: the GEMM ceiling sets the floor
    big = moe._roofline(c, "fp8_tensor", 1e6, 1e12, 1000.0)
    assert big["floor_us"] == pytest.approx(1e12 / 1300e12 * 1e6)
    # no bf16 GEMM ceiling measured: no %tc, the floor falls back to memory
    r = moe._roofline(c, None, 1e6, 1e12, 10.0)
    assert r["pct_tc"] is None and r["floor_us"] == pytest.approx(1e6 / 4.2e12 * 1e6)
    assert moe._ceilings_text(c) == "copy 4.20 TB/s, bf16 GEMM -, fp8 GEMM 1300 TFLOP/s"


def test_peer_outputs_are_checked_over_every_rotating_set():
    """The Triton error used to come from the first set alone: under EP its routing may hit no local expert, both
    outputs are zero and the error reads 0. Over all sets a disagreement elsewhere shows, and drops the time."""
    import torch

    from hpc_xla.bench import moe

    zero, ours = torch.zeros(4, 8), torch.ones(4, 8)
    sets = [dict(out=zero, triton_out=zero.clone()), dict(out=ours, triton_out=ours * 1.5)]
    err = moe._rel_err(sets, "triton_out")
    assert abs(err - 0.5) < 1e-6
    assert not moe._matches("triton", err, "fp8_tensor")
    assert moe._matches("triton", moe._rel_err([dict(out=ours, triton_out=ours * 1.01)], "triton_out"), None)
    assert not moe._matches("triton", float("nan"), None)
    assert moe._rel_err(sets, "peer_out") is None and moe._matches("torch", None, None)
    assert moe._ours_finite(sets) and not moe._ours_finite([dict(out=torch.tensor([float("nan")]))])


def test_bench_json_records_the_binary_and_settings(tmp_path, monkeypatch):
    import json

    from hpc_xla._ext import ext
    from hpc_xla.bench import report

    monkeypatch.setenv("HPC_XLA_MOE_ACT", "kernel")
    path = tmp_path / "x.json"
    report.write_json(str(path), dict(suite="x", rows=[]))
    prov = json.loads(path.read_text())["provenance"]
    assert prov["binary"] == ext().__file__ and len(prov["binary_sha256"]) == 16
    assert prov["env"]["HPC_XLA_MOE_ACT"] == "kernel"


@pytest.mark.parametrize("variant", ["bf16", "fp8"])
def test_rope_norm_unfused_peer_is_checked_against_the_fused_op(variant, monkeypatch):
    """bench rope_norm reports the unfused sequence's time only when its results match ours (they were never
    compared); on the CPU path here: it matches, and a sequence that skips the norm does not."""
    import torch

    from hpc_xla.bench import rope_norm

    p = rope_norm._problem(64, 8, 1, 128, variant, 1, torch.Generator().manual_seed(0))[0]
    assert rope_norm.unfused_error(p, variant) <= rope_norm.UNFUSED_TOL[variant]
    real = rope_norm._unfused

    def no_norm(p, variant):
        return real(dict(p, qw=p["qw"] * 2.0), variant)  # the wrong q norm weight

    monkeypatch.setattr(rope_norm, "_unfused", no_norm)
    assert rope_norm.unfused_error(p, variant) > rope_norm.UNFUSED_TOL[variant]
