"""The benchmark harness's host-side pieces (CPU): shape selection and graph sizing. The timings themselves need
the H200 (python -m hpc_xla.bench)."""
import pytest

from hpc_xla.bench import moe, timing


def test_moe_shapes_select_by_name_and_quant():
    assert moe._selected_shapes(None) == moe.SHAPES
    picked = moe._selected_shapes("qwen3-30b-a3b/fp8_tensor,mixtral-8x7b")
    assert [(s[0], s[7]) for s in picked] == [("qwen3-30b-a3b", "fp8_tensor"), ("mixtral-8x7b", None)]
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
