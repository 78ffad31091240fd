#!/usr/bin/env bash
# session 32 call C (~5 min; carry .peer/exp/n, .peer/exp/e32): experiment 32 (s31a.sh cut to fit the session's last
# device minutes): n vs e32 on the EP shapes (Qwen3 as the control), 2 rounds, then e32's gather tests.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e32
env AB_WIDTH=100 AB_TIMEOUT=120 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes hy3-ep8,dsv3-ep8,qwen3-30b-a3b/fp8_tensor --tokens 1024,4096" n e32 > $R/a_ab.txt 2>&1; t
cp $R/a_ab.txt $OUT/; grep -a "│\|==" $R/a_ab.txt | cut -c1-70
(cd $E && PYTHONPATH=$E:$E/tests timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fused_moe.py \
  -k "gather_by_tokens" 2>&1 | tail -3); t
