#!/usr/bin/env bash
# session 61 call C (~30 s, any Hopper; ran on an H100 in session 61): which L2 unit ncu's "L2 Cache Throughput" is,
# for main's rope_norm 8/1 bf16 T=16384 and for torch's D2D copy of the same bytes (92.5 MB, half read, half
# written) -- is the 8/1 kernel's L2 figure a co-limit that a plain copy does not have? Carry .peer/pack (m59).
. "$(dirname "$0")/prelude.sh"
unpack_packs
M=$X/m59
MET=breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,lts__t_bytes.sum,dram__bytes.sum
if [ "${SKIP_ROPE:-0}" != 1 ]; then
  ( cd $M && PYTHONPATH=$M timeout 60 ncu --clock-control none --cache-control all --metrics $MET -k regex:RopeNorm \
      -s 1 -c 1 python3 $ROOT/tools/profile_targets.py rope_norm --tokens 16384 --heads 8,1,128 --variant bf16 \
      --reps 2 > $R/l2_rope.txt 2>&1 ); t
  grep -E "lts__|gpu__time|dram__|rror" $R/l2_rope.txt | awk '{$1=$1; print}' | tee $OUT/l2_rope.txt
fi
cat > $R/cp.py <<'PY'
import torch
n = 16384 * 5648 // 2 // 2  # bf16 elements: the op's 92.5 MB as half read, half written
a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
b = torch.empty_like(a)
for _ in range(3):
    torch.mul(a, 1, out=b)  # an SM copy kernel (copy_ of contiguous tensors is a cudaMemcpy, which ncu does not profile)
torch.cuda.synchronize()
PY
timeout 60 ncu --clock-control none --cache-control all --metrics $MET -k regex:elementwise -s 1 -c 1 \
  python3 $R/cp.py > $OUT/l2_copy_raw.txt 2>&1; echo "copy ncu rc=$?"; t
grep -E "lts__|gpu__time|dram__|rror|void" $OUT/l2_copy_raw.txt | awk '{$1=$1; print}' | cut -c1-160
