#!/usr/bin/env bash
# One call on the H200 (device tool): install, GPU tests, compute-sanitizer, benchmarks; short table last.
#   tools/gpu_check.sh [suite ...]        suites: rope_norm decode moe_route fused_moe (default: all; fused_moe
#                                         is benchmarked by the `moe` suite)
#   HPC_STAGES="test sanitize bench"      which stages to run (default: all three; each has a timeout)
#   HPC_SANITIZERS="memcheck racecheck"   compute-sanitizer tools; HPC_BENCH_SUITES: suites to benchmark
#   HPC_TEST_ARGS="-m gpu tests"          pytest arguments (default: every test); HPC_AB="ENV=V ..." extra runs
#   HPC_PROFILE="suite|kernel|args;..."   with the "profile" stage: ncu sections per workload
#   HPC_PROFILE_SASS=1                    profile: full ncu set saved + per-SASS stall CSV (HPC_PROFILE_LAUNCHES)
# Uses the carried cp312 binary (tools/build_gpu_binary.sh) or builds one with nvcc there. Full logs and
# JSON go to $OUT (or ./out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false \
  HPC_XLA_REQUIRE_GPU=1  # a GPU check on a machine whose torch sees no Hopper GPU fails instead of skipping
SUITES="${*:-rope_norm decode moe_route fused_moe}"
# the benchmark suite of a test suite (python -m hpc_xla.bench NAME): fused_moe's is `moe`
bench_of() { [ "$1" = fused_moe ] && echo moe || echo "$1"; }
STAGES="${HPC_STAGES:-test sanitize bench}"
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }
SUFFIX=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
summary=()
note() { summary+=("$1"); echo "== $1"; }

if [ -f "hpc_xla/_hpc_xla$SUFFIX" ]; then
  note "binary: carried hpc_xla/_hpc_xla$SUFFIX"
else
  t0=$(date +%s)
  python3 tools/nvcc_build.py > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
  note "binary: built here with nvcc in $(( $(date +%s) - t0 ))s"
fi
# benchmark peers carried as wheels (tools/fetch_peer_wheels.sh -> .whl/, pass `.whl` in carry): FlashInfer
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/peer_site .whl/*.whl > "$OUT/peer_install.log" 2>&1 \
    && export PYTHONPATH="$PYTHONPATH:/tmp/peer_site" && note "peers: installed $(ls .whl | tr '\n' ' ')" \
    || note "peers: install failed (see peer_install.log)"
fi
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  python3 -c 'import torch, jax, hpc_xla; print("torch", torch.__version__, "jax", jax.__version__, jax.devices()); print(hpc_xla.build_info())'
} 2>&1 | tee "$OUT/env.txt"

# 1. tests: everything (CPU and GPU) with the GPU present
if has_stage test; then
timeout "${HPC_TEST_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider ${HPC_TEST_ARGS:-tests} --junitxml="$OUT/pytest.xml" > "$OUT/pytest.log" 2>&1
rc=$?
note "pytest (all, GPU present): rc=$rc, $(tail -n 1 "$OUT/pytest.log")"
[ $rc -ne 0 ] && grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20
fi

# the torch GPU tests each suite runs under compute-sanitizer (a subset: the sanitizer is ~50x slower)
sanitizer_subset() {
  case "$1" in
    rope_norm) echo "cuda and torch and (named or strided) or bad_indices or graph or misaligned or rows_per_group or (large_batch and (fp811 or D256 or rot100 or H64))" ;;
    decode) echo "cuda and torch and named and (mixed or one_long or fp8_kv or q_len or many_splits or d256) or graph or device_plan" ;;
    fused_moe) echo "(oracle and (case0 or case3 or case6)) or deterministic or out_of_range or graph_per_token or (grouped_vs_oracle and case0) or stream_path" ;;
    *) echo "cuda and torch" ;;
  esac
}

# 2. compute-sanitizer on the torch GPU tests of each suite (same kernels as JAX; XLA under the sanitizer is
#    slow). All (suite, tool) runs go in parallel: each is bound by its host-side start-up, not by the GPU.
if has_stage sanitize; then
  jobs_started=()
  for s in $SUITES; do
    for tool in ${HPC_SANITIZERS:-memcheck racecheck}; do
      ( timeout "${HPC_SANITIZER_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 99 \
          --log-file "$OUT/sanitizer_${s}_$tool.log" \
          python3 -m pytest -q -p no:cacheprovider -x $(ls "tests/test_${s}.py" "tests/test_gpu_${s}.py" 2>/dev/null) \
          -k "$(sanitizer_subset "$s")" > "$OUT/sanitizer_${s}_${tool}_pytest.log" 2>&1
        echo $? > "$OUT/sanitizer_${s}_$tool.rc" ) &
      jobs_started+=("${s}_$tool")
    done
  done
  wait
  for j in "${jobs_started[@]}"; do
    note "compute-sanitizer ${j}: rc=$(cat "$OUT/sanitizer_$j.rc"), $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$j.log" | tail -n 1), $(tail -n 1 "$OUT/sanitizer_${j}_pytest.log")"
  done
fi

# 3. benchmarks
has_stage bench && for s in ${HPC_BENCH_SUITES:-$(for x in $SUITES; do bench_of "$x"; done)}; do
  python3 -c "import hpc_xla.bench.$s" 2>/dev/null || continue  # suites without a benchmark (moe_route)
  extra_var="HPC_BENCH_ARGS_$s"  # e.g. HPC_BENCH_ARGS_moe="--tokens 1,256"
  timeout "${HPC_BENCH_TIMEOUT:-300}" python3 -m hpc_xla.bench "$s" --out "$OUT/bench_$s.json" ${!extra_var:-} 2>&1 | tee "$OUT/bench_$s.txt"
done

# 4. profile (only when asked: HPC_STAGES includes "profile"): ncu hardware counters of the kernels of one
#    workload per entry of HPC_PROFILE ("suite|kernel regex|profile_targets.py args", ';'-separated)
has_stage profile && IFS=';' read -ra profiles <<< "${HPC_PROFILE:-rope_norm|RopeNorm|--tokens 16384;decode|Decode|--heads 8,1,128 --workload 1x128K+31x4K}"
has_stage profile && for entry in "${profiles[@]}"; do
  IFS='|' read -r psuite pkern pargs <<< "$entry"
  tag="$psuite$(echo "$pargs" | tr -c 'A-Za-z0-9' '_' | cut -c1-40)"
  if [ -n "${HPC_PROFILE_SASS:-}" ]; then
    # full section set saved as a report, plus per-SASS-instruction stall samples and executed counts (CSV)
    timeout "${HPC_PROFILE_TIMEOUT:-120}" ncu --clock-control none -k "regex:$pkern" --launch-skip 0 \
      --launch-count "${HPC_PROFILE_LAUNCHES:-1}" --set full --import-source no -f -o "$OUT/ncu_$tag" \
      python3 tools/profile_targets.py $psuite $pargs > "$OUT/ncu_$tag.log" 2>&1
    ncu -i "$OUT/ncu_$tag.ncu-rep" > "$OUT/ncu_$tag.txt" 2>&1
    ncu -i "$OUT/ncu_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/sass_$tag.csv" 2>&1
  else
    timeout "${HPC_PROFILE_TIMEOUT:-120}" ncu --clock-control none -k "regex:$pkern" --launch-skip 0 --launch-count 6 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      --section LaunchStats --section SchedulerStats --section SourceCounters --section InstructionStats \
      python3 tools/profile_targets.py $psuite $pargs > "$OUT/ncu_$tag.txt" 2>&1
  fi
  note "ncu $psuite $pargs: rc=$? -> ncu_$tag.txt"
  grep -E "^  [A-Za-z].*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size" "$OUT/ncu_$tag.txt" | head -60
done

# A/B: the rope_norm benchmark again at T=16384 under each HPC_AB setting (e.g. HPC_AB="HPC_XLA_ROPE_ROWS=1")
has_stage bench && for ab in ${HPC_AB:-}; do
  env "$ab" timeout 90 python3 -m hpc_xla.bench rope_norm --tokens 16384 > "$OUT/ab_$ab.txt" 2>&1
  grep -E "^  (bf16|fp8)" "$OUT/ab_$ab.txt" | sed "s/^/$ab: /"
done

echo
echo "================ summary ================"
printf '%s\n' "${summary[@]}"
has_stage bench && for s in $SUITES; do cat "$OUT/bench_$(bench_of "$s").txt" 2>/dev/null; done
# the device tool returns at most 8 files: pack everything into one archive
if [ "$(ls "$OUT" | wc -l)" -gt 7 ]; then
  (cd "$OUT" && tar czf /tmp/gpu_check_logs.tgz --exclude logs.tgz . && find . -mindepth 1 -delete && mv /tmp/gpu_check_logs.tgz logs.tgz)
fi
