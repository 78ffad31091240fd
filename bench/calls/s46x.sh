#!/usr/bin/env bash
# session 46 first call: whichever card comes -- an H200 runs s46h (the tables of record, ours), anything else s46a
# (experiment 62 A/B). Then the decode GPU file on m46 (8526c36: the plan kernel's scan folded into one helper).
# Carry .peer/pack (e61c e62 t62 m46) and .peer/probe.
cd "$(dirname "$0")/../.."
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then bash bench/calls/s46h.sh
else bash bench/calls/s46a.sh; fi
M=.peer/exp/m46
( cd $M && PYTHONPATH=$PWD:$PWD/tests HPC_XLA_REQUIRE_GPU=1 timeout 150 python3 -m pytest -q -p no:cacheprovider \
    tests/test_gpu_decode.py > /tmp/r/m46_decode.log 2>&1; echo "m46 decode file rc=$?: $(tail -n1 /tmp/r/m46_decode.log)" ) &
( cd $M && PYTHONPATH=$PWD:$PWD/tests HPC_XLA_REQUIRE_GPU=1 timeout 150 compute-sanitizer --error-exitcode 99 python3 -m \
    pytest -q -p no:cacheprovider tests/test_gpu_decode.py -k plan > /tmp/r/m46_mc.log 2>&1
  echo "m46 plan memcheck rc=$?: $(grep 'ERROR SUMMARY' /tmp/r/m46_mc.log | tail -1) $(tail -n1 /tmp/r/m46_mc.log)" ) &
wait
grep -E "^FAILED|^E  " /tmp/r/m46_decode.log | head
