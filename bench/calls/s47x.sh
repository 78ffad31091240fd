#!/usr/bin/env bash
# session 47 first call: whichever card comes -- an H200 runs s46h (the tables of record for #2/#3, ours), anything
# else s47a (experiment 64's tests, sanitizers and T=1 A/B). One start either way; the other script goes next call.
# Carry .peer/pack (m46b e64) and .peer/probe.
cd "$(dirname "$0")/../.."
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then bash bench/calls/s46h.sh
else bash bench/calls/s47a.sh; fi
