#!/usr/bin/env bash
# Builds and stages several kernel versions for one A/B device call, each from commits applied on top of HEAD
# (the prepared experiments are committed then reverted on main, so `git cherry-pick -n` brings one back):
#   tools/stage_experiments.sh main e8:b2c22b9 e89:b2c22b9,f7bb1c2
# NAME alone stages HEAD itself; NAME:C1,C2 stages HEAD + those commits' changes. Each ends up in .peer/exp/NAME
# (tools/stage_ab_copy.sh) with its cp312 binary; the working tree is reset to HEAD after every build, so it must be
# clean to start. Then: tools/ab_bench.sh ROUNDS "SUITE ARGS" NAME... on the device (carry .peer).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "stage_experiments: the working tree has changes; commit or stash them first" >&2
  exit 1
fi
for spec in "$@"; do
  name="${spec%%:*}"
  commits=""
  [ "$spec" != "$name" ] && commits="${spec#*:}"
  if [ -n "$commits" ]; then
    # shellcheck disable=SC2086
    git cherry-pick -n ${commits//,/ } || { git reset -q --hard HEAD; echo "stage_experiments: $spec does not apply" >&2; exit 1; }
  fi
  if ! tools/build_gpu_binary.sh > "/tmp/stage_${name}.log" 2>&1; then
    git reset -q --hard HEAD
    echo "stage_experiments: build of $spec failed (/tmp/stage_${name}.log)" >&2
    exit 1
  fi
  tools/stage_ab_copy.sh "$name"
  git reset -q --hard HEAD
done
du -sh .peer
