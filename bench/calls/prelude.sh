# Shared start of the session's device-call scripts (sourced): repository root (from .peer/ or bench/calls/), quiet
# Python, the GPU's clocks, a scratch folder $R and a stopwatch t.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd); [ -d "$ROOT/tools" ] || ROOT=$(cd "$ROOT/.." && pwd); cd "$ROOT"
# HPC_XLA_REQUIRE_GPU: the tests fail instead of skipping their GPU cases when torch sees no Hopper GPU
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false HPC_XLA_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
R=/tmp/r; mkdir -p $R /tmp/abl; S=$(date +%s); t() { echo "t=$(( $(date +%s) - S ))"; }
# in_background LABEL LOG SECONDS DIR CMD...: CMD in the staged folder DIR (its Python first on the path) under a
# timeout, in the background, output to $R/LOG; prints "LABEL rc=N: <its last line>" when it ends. `wait` collects.
in_background() {
  local label=$1 log=$R/$2 secs=$3 dir=$4
  shift 4
  ( cd "$dir" && PYTHONPATH="$dir:$dir/tests" timeout "$secs" "$@" > "$log" 2>&1; echo "$label rc=$?: $(tail -n1 "$log")" ) &
}
# collect PREFIX: the failures of $R/PREFIX*.log on stdout, their tails to $OUT/tests_all.txt
collect() {
  grep -E "^FAILED|^E  " "$R"/"$1"*.log | head -20
  for f in "$R"/"$1"*.log; do echo "### $f"; tail -60 "$f"; done > "$OUT/tests_all.txt"
}
# profile_moe DIR KNOB PREFIX VALUE...: tools/profile_kernels.py moe (Qwen3 fp8 / Hy3-TP8 at T=4096) from the staged
# folder DIR once per VALUE of the knob, output to $R/PREFIX_VALUE.txt: which kernel an A/B's difference sits in.
profile_moe() {
  local dir=$1 knob=$2 prefix=$3
  shift 3
  for value in "$@"; do
    (cd "$dir" && env PYTHONPATH="$dir" "$knob=$value" HPC_BENCH_PEERS=0 \
      HPC_PROFILE_MOE=qwen3-30b-a3b/fp8_tensor:4096,hy3-tp8/fp8_tensor:4096 timeout 120 \
      python3 "$ROOT/tools/profile_kernels.py" moe > "$R/${prefix}_$value.txt" 2>&1); t
  done
}
# unpack_packs: .peer/pack/*.tar.xz (tools/pack_staged.sh) -> .peer/exp/, side by side; sets X to that folder.
unpack_packs() {
  X=$ROOT/.peer/exp; mkdir -p "$X"
  for f in "$ROOT"/.peer/pack/*.tar.xz; do tar xJf "$f" -C "$X" & done
  wait; t
}
# bench_decode LABEL DIR HEADS: the decode suite of the staged folder DIR at HEADS (e.g. 8/1/128) -> $R/LABEL.json / .txt
bench_decode() {
  ( cd "$2" && PYTHONPATH="$2" timeout 150 python3 -m hpc_xla.bench decode --heads "$3" --out "$R/$1.json" \
    > "$R/$1.txt" 2>&1; echo "== $1 rc=$?" ); t
}
# sanitize_decode LABEL DIR: memcheck and racecheck over test_decode's heaviest cuda cases, in the background
# (`wait` collects; logs $R/LABEL_memcheck.log / _racecheck.log)
sanitize_decode() {
  local k="cuda and torch and (q_len2 or q_len4_group16 or gqa_64_8 or d64 or many_splits or one_long)"
  for tool in memcheck racecheck; do
    in_background "$1 $tool" "$1_$tool.log" 280 "$2" compute-sanitizer --target-processes all --error-exitcode 99 \
      --tool $tool python3 -m pytest -q -p no:cacheprovider tests/test_decode.py -k "$k"
  done
}
# h200_rows DIR: the H200 rows of record that need no peer, from the staged folder DIR, into $OUT --
# decode_ring_probe (.peer/probe), rope_norm 8/1 (#2), MoE T=1 ours (#4); each step under its own timeout.
h200_rows() {
  timeout 60 ./.peer/probe/decode_ring_probe > $OUT/decode_ring_probe.txt 2>&1; echo "probe rc=$?"; t
  grep -E "spin|ceiling|TB/s" $OUT/decode_ring_probe.txt | tail -12 | cut -c1-150
  ( cd "$1" && PYTHONPATH="$1" timeout 120 python3 -m hpc_xla.bench rope_norm --heads 8/1/128 \
      --out $OUT/rope_norm.json > $OUT/rope_table.txt 2>&1; echo "rope bench rc=$?" ); t
  grep -E "8/1" $OUT/rope_table.txt | cut -c1-190
  ( cd "$1" && PYTHONPATH="$1" HPC_BENCH_PEERS=0 timeout 60 python3 -m hpc_xla.bench moe --shapes \
      qwen3-30b-a3b/fp8_tensor,hy3-tp8/fp8_tensor --tokens 1 > $OUT/moe_t1.txt 2>&1; echo "moe bench rc=$?" ); t
  grep -a "│" $OUT/moe_t1.txt | cut -c1-110
}
