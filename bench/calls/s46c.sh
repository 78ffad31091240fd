#!/usr/bin/env bash
# session 46 call C (~1 min): bench/calls/flake_s46.py on m46 under each path knob (the tiled path at T=8 on one
# expert sat 8x further from the oracle than the CPU reference in s46b's run of m46).
set -u
mkdir -p .peer/exp && tar xJf .peer/pack/m46.tar.xz -C .peer/exp && cp bench/calls/flake_s46.py .peer/exp/m46/
cd .peer/exp/m46
for v in "X=0" "HPC_XLA_MOE_PATH=stream" "HPC_XLA_MOE_PATH=v1 HPC_XLA_MOE_TILED_M=32" "HPC_XLA_MOE_PATH=grouped" \
         "HPC_XLA_MOE_PATH=v1 HPC_XLA_MOE_TILED_M=16 HPC_XLA_MOE_UP_SPLITS=1"; do
  n=$(echo $v | tr ' =' '__')
  echo "== $v"; env $v PYTHONPATH=$PWD:$PWD/tests timeout 100 python3 flake_s46.py $OUT/$n.npz 2>&1 | tail -3
done
