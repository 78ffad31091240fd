#!/usr/bin/env bash
# session 58 call C (the budget's last ~2.5 min): main's (e87's) MoE GPU test files in 4 parallel shards, 115 s each (test ids hold spaces: passed as an array).
set -u
mkdir -p .peer/exp
[ -d .peer/exp/e87 ] || tar xJf .peer/pack/e87.tar.xz -C .peer/exp
cd .peer/exp/e87 || exit 1
export PYTHONPATH=$PWD:$PWD/tests HPC_XLA_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider --co tests/test_gpu_fused_moe.py tests/test_moe_route.py 2>/dev/null | grep "::" > /tmp/ids.txt
echo "collected $(wc -l < /tmp/ids.txt)"
[ -s /tmp/ids.txt ] || exit 1
for k in 0 1 2 3; do
  awk -v k=$k 'NR%4==k' /tmp/ids.txt > /tmp/ids$k.txt
  ( mapfile -t ids < /tmp/ids$k.txt; timeout 115 python3 -m pytest -q -p no:cacheprovider -rf "${ids[@]}" > /tmp/sh$k.log 2>&1; rc=$?
    echo "shard $k ($(wc -l < /tmp/ids$k.txt) tests) rc=$rc: $(tail -n1 /tmp/sh$k.log)" ) &
done
wait
grep -hE "^FAILED|^E  " /tmp/sh*.log | head
for k in 0 1 2 3; do echo "## $k"; tail -8 /tmp/sh$k.log; done > $OUT/s58c_tests.txt
