#!/usr/bin/env bash
# session 56 call A (~2 min on an H100; ~6 min on an H200). Carry .peer/pack (e78, e79, m55:
# `tools/stage_experiments.sh e78:e7ac3c0 e79:95c2284 && tools/pack_staged.sh e78 e79 m55`), .peer/probe.
# 1. bench/calls/s55c.sh (its header: the predictions and the land rule for experiments 78b / 79b).
# 2. On an H200 only: bench/calls/s54d.sh on m55 (= main's code since session 54): the H200 rows of #2 / #3 / #4,
#    unmeasured since session 39-40 (its header holds their predictions).
set -u
bash "$(dirname "$0")/s55c.sh"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then TREE=m55 bash "$(dirname "$0")/s54d.sh"; fi
