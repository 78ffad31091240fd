#!/usr/bin/env bash
# session 42 call E (~3 min; carry .peer/exp/m7 and .whl): s42d's 8/1/128 run with FlashInfer timed out at 240 s (FI's
# JIT builds for two KV dtypes): bf16 only here. Written BEFORE the run: q_len 2 1x128K+31x4K within 0.97-1.03x of
# FI, every other row faster.
. "$(dirname "$0")/prelude.sh"
M=$PWD/.peer/exp/m7
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?"
( cd $M && PYTHONPATH=$M:/tmp/site timeout 330 python3 -m hpc_xla.bench decode --heads 8/1/128 --kv bf16 \
  --out $OUT/dec_8_bf16.json > $OUT/dec_8_bf16.txt 2>&1; echo "rc=$?" ); t
python3 - "$OUT/dec_8_bf16.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    fi = r.get("flashinfer_us")
    print("%s %d/%d q%d %-22s %8.1f %8s %s" % (r["kv"], r["heads"][0], r["heads"][1], r["q_len"], r["workload"],
          r["layer_us"], "%.1f" % fi if fi else "-", "%.3f" % (r["layer_us"] / fi) if fi else "-"))
PY
