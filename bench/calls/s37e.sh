#!/usr/bin/env bash
# session 37 call E (~1.5 min; carry .peer/exp/e41d): the last ~120 s of session 37's device budget -- one round of
# s37d's A/B only (experiments 41c / 41d vs main's two kernels at T=1), no tests. s37d stays the full check.
. "$(dirname "$0")/prelude.sh"
env AB_WIDTH=110 AB_TIMEOUT=60 OUT=/tmp/abl tools/ab_bench.sh 1 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8 --tokens 1" e41d e41d:HPC_XLA_MOE_ONE_KERNEL=1 \
  e41d:HPC_XLA_MOE_ONE_KERNEL=ws 2>&1 \
  | grep -a "│\|==" | cut -c1-110; t
