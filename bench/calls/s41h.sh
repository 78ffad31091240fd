#!/usr/bin/env bash
# session 41 call H (~2 min, any Hopper; carry .peer/exp/e46 = HEAD's tests, main's kernels with its knob off): the
# four test_gpu_fused_moe cases that failed in s41d (part 02's 6th, 9th, 15th and 18th ids; s41d's tail file was lost
# to the 8-file limit), one process, short tracebacks.
# Written BEFORE the run: if they fail again, the tracebacks say whether a path disagrees (a kernel) or the child
# process setup (the harness).
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e46
( cd $E && PYTHONPATH=$E:$E/tests timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=short \
  "tests/test_gpu_fused_moe.py::test_grouped_gather_by_tokens_equals_rows[case8]" \
  "tests/test_gpu_fused_moe.py::test_grouped_cluster_pairs_equal_one_cta[case2]" \
  "tests/test_gpu_fused_moe.py::test_grouped_block128_cluster_pairs_equal_one_cta[case2]" \
  "tests/test_gpu_fused_moe.py::test_grouped_narrow_cluster_pairs_equal_one_cta[case1-64x256-both]" \
  > $OUT/h_tests.txt 2>&1; echo "tests rc=$?" ); t
grep -E "^E |Error|FAILED|passed|failed" $OUT/h_tests.txt | cut -c1-220 | head -40
