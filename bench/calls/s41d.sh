#!/usr/bin/env bash
# session 41 call D (~7 min, any Hopper; carry .peer/exp/e46 = HEAD + experiment 46 staged (`tools/stage_experiments.sh
# e46:29bd7e7`; its knob off = main's kernels and HEAD's tests) and .whl (tools/fetch_peer_wheels.sh)).
# (1) the GPU tests s41a missed or failed: test_gpu_fused_moe's last third of ids (s41a split them on spaces: none
#     ran), test_argument_errors (its two JAX checks now on the CPU), the path test's per-path bound.
# (2) decode 8/1/128 bf16: where q_len 2's extra time goes (s41a's H100 profile: the attention kernel +3.0 us on
#     64x4K, +6.1 on 1x128K+31x4K; the combine's tail +0.3..0.6). Runs: main with FlashInfer (FA2 prefill at q_len 2);
#     q_len 1 with HPC_XLA_DECODE_FORCE_MT1=1 (the 16-row kernel, rows 8-15 zero: same pieces, same merge rows);
#     q_len 2 with HPC_XLA_DECODE_PIECE_COST=8 and =6 (the planner charges 4 tiles a piece from 8 rows up).
# Written BEFORE the run: tests pass. q_len 2 vs FI 0.85-0.95x on the skewed rows (as on the H200). FORCE_MT1 at
# q_len 1: +1..3 us on 64x4K / 1x128K+31x4K (about half of q_len 2's gap: the rest is the 16-row pieces); if it
# reads within 0.5 us of q_len 1, the kernel's softmax rows are not the cost and the pieces are. PIECE_COST 8 at
# q_len 2: -1..-3 us on the skewed rows, 64x512 +0..0.5 (fewer, longer pieces); 6 in between.
. "$(dirname "$0")/prelude.sh"
E=$PWD/.peer/exp/e46
T="python3 -m pytest -q -p no:cacheprovider"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?"
( cd $E && PYTHONPATH=$E:$E/tests $T --collect-only tests/test_gpu_fused_moe.py 2>/dev/null | grep "::" > $R/ids.txt )
split -n l/3 -d $R/ids.txt $R/ids_part_
mapfile -t ids < $R/ids_part_02  # one id a line: parametrized ids hold spaces
in_background "moe gpu part 02" d_moe_02.log 300 $E $T "${ids[@]}" "tests/test_gpu_fused_moe.py::test_v1_and_grouped_paths_agree"
in_background "argument errors" d_args.log 200 $E $T tests/test_argument_errors.py
wait; t
collect d_
# bench LABEL "ENV=V ..." ARGS...: decode 8/1/128 bf16 from e46 (FlashInfer on the path only in main_fi)
bench() {
  local label=$1 envs=$2; shift 2
  local path=$E; [ "$label" = main_fi ] && path=$E:/tmp/site
  # shellcheck disable=SC2086
  ( cd $E && env $envs PYTHONPATH=$path timeout 150 python3 -m hpc_xla.bench decode --heads 8/1/128 --kv bf16 "$@" \
    --out $OUT/dec_$label.json > $OUT/dec_$label.txt 2>&1; echo "== $label rc=$?" ); t
}
bench main_fi "HPC_X=0"
bench mt1_q1 "HPC_XLA_DECODE_FORCE_MT1=1" --q-len 1
bench cost8_q2 "HPC_XLA_DECODE_PIECE_COST=8" --q-len 2
bench main_q2 "HPC_X=0" --q-len 2
bench cost6_q2 "HPC_XLA_DECODE_PIECE_COST=6" --q-len 2
bench main_q1 "HPC_X=0" --q-len 1
# the short table: q_len, workload, layer us (decode_attention with its plan built) per run, FlashInfer
python3 - "$OUT" <<'PY'
import json, sys, glob, os
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "dec_*.json"))):
    label = os.path.basename(f)[4:-5]
    try:
        d = json.load(open(f))
    except Exception as e:
        print(label, "unreadable", e); continue
    for r in d["rows"]:
        key = (r.get("q_len"), r.get("workload"))
        rows.setdefault(key, {})[label] = r
labels = ["main_fi", "main_q1", "mt1_q1", "main_q2", "cost6_q2", "cost8_q2"]
print("q wl".ljust(26) + "".join(l.rjust(10) for l in labels) + "  FI".rjust(8))
for key in sorted(rows, key=str):
    cells = rows[key]
    fi = cells.get("main_fi", {}).get("flashinfer_us")
    print(("%s %s" % key)[:26].ljust(26) + "".join(
        ("%.1f" % cells[l]["layer_us"] if l in cells else "-").rjust(10) for l in labels)
        + ("%.1f" % fi if fi else "-").rjust(8))
PY
