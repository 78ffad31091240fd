#!/usr/bin/env bash
# session 22 call 5: the fused_moe table of record of whatever main is then (re-stage .peer/exp/m from main first:
# `rm -rf .peer/exp/m && tools/stage_experiments.sh m`), with vLLM's Triton (.peer/vllm_triton_moe, from
# tools/fetch_triton_moe.sh) and the torch pipeline in the same run; checks the new ceiling columns on the GPU.
. "$(dirname "$0")/prelude.sh"
W=$PWD/.peer/exp/m
( cd $W && PYTHONPATH=$W HPC_TRITON_MOE_DIR=$PWD/../../vllm_triton_moe timeout 400 python3 -m hpc_xla.bench moe --out $OUT/moe.json > $OUT/moe_table.txt 2>&1; echo "bench rc=$?" )
grep -v "^  " $OUT/moe_table.txt | tail -70 | cut -c1-190
