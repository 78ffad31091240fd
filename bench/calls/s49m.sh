#!/usr/bin/env bash
# session 49, the short form of s49a for a last ~5 device minutes (carry .peer/pack as s49a; predictions in s49a's
# header): e66c's device==host plan test and e67's MoE stream tests first (in parallel, ~1.5 min), then a 2-round
# decode 8/1 bf16 A/B m48 | e66c | e67 and the MoE T=1 A/B of e67 by its knob, each table written to $OUT as it runs.
. "$(dirname "$0")/prelude.sh"
unpack_packs
T="python3 -m pytest -q -p no:cacheprovider"
in_background "e66c device==host" m_dh.log 150 $X/e66c $T tests/test_gpu_decode.py -k device_plan_equals
in_background "e67 moe stream/one-token" m_67m.log 150 $X/e67 $T tests/test_gpu_fused_moe.py -k "stream or one_token"
wait; t
collect m_
env AB_WIDTH=150 AB_TIMEOUT=90 OUT=/tmp/abl tools/ab_bench.sh 2 "decode --heads 8/1/128 --kv bf16" \
  m48 e66c e67 > $OUT/m_ab.txt 2>&1; t
env AB_WIDTH=150 AB_TIMEOUT=60 OUT=/tmp/abl tools/ab_bench.sh 2 \
  "moe --shapes qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor --tokens 1" e67:HPC_XLA_CARVEOUT=0 e67 > $OUT/m_moe.txt 2>&1; t
grep -a "│\|==" $OUT/m_ab.txt | cut -c1-110
grep -a "│\|==" $OUT/m_moe.txt | cut -c1-130
