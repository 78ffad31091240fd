#!/usr/bin/env bash
# session 38 call C (~3-4 min; carry .peer/exp/e41d): s38a cut to what a ~400 s device budget holds -- one A/B
# round of experiments 41c / 41d against main's two kernels at T=1, then the one-kernel tests (oracle, knob
# refusals; no sanitizers) under a 150 s limit. s37d / s38a stay the full check.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e41d
env AB_WIDTH=110 AB_TIMEOUT=60 OUT=/tmp/abl tools/ab_bench.sh 1 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8,hy3-ep8 --tokens 1" e41d e41d:HPC_XLA_MOE_ONE_KERNEL=1 \
  e41d:HPC_XLA_MOE_ONE_KERNEL=ws > $R/c_ab.txt 2>&1; t
grep -a "│\|==" $R/c_ab.txt | cut -c1-110
cp $R/c_ab.txt $OUT/
in_background "e41d one-kernel + knob" c_a.log 150 $E python3 -m pytest -q -p no:cacheprovider \
  tests/test_gpu_fused_moe.py -k "one_kernel or knobs_reject"
wait; t
collect c_
