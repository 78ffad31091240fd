#!/usr/bin/env bash
# session 41 call I (~2 min, any Hopper; carry .peer/exp/e46 with HEAD's tests/test_gpu_fused_moe.py copied in):
# the oracle bound by the path that ran (_check_oracle(p, out, tile)) on s41h's four failures and the path test.
# Written BEFORE the run: all pass (the four read 1.6-2.3% against the 5e-2 grouped bound).
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e46
( cd $E && PYTHONPATH=$E:$E/tests timeout 170 python3 -m pytest -q -p no:cacheprovider --tb=short \
  "tests/test_gpu_fused_moe.py::test_grouped_gather_by_tokens_equals_rows[case8]" \
  "tests/test_gpu_fused_moe.py::test_grouped_cluster_pairs_equal_one_cta[case2]" \
  "tests/test_gpu_fused_moe.py::test_grouped_block128_cluster_pairs_equal_one_cta[case2]" \
  "tests/test_gpu_fused_moe.py::test_grouped_narrow_cluster_pairs_equal_one_cta[case1-64x256-both]" \
  tests/test_gpu_fused_moe.py::test_v1_and_grouped_paths_agree > $OUT/i_tests.txt 2>&1; echo "tests rc=$?" ); t
grep -E "^E |FAILED|passed|failed" $OUT/i_tests.txt | cut -c1-200 | head -20
