#!/usr/bin/env bash
# session 46 first call: whichever card comes -- an H200 runs s46h (the tables of record, ours), anything else s46a
# (experiment 62 A/B). Carry .peer/pack and .peer/probe (both scripts' carry).
cd "$(dirname "$0")/../.."
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then bash bench/calls/s46h.sh
else bash bench/calls/s46a.sh; fi
