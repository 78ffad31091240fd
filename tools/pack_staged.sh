#!/usr/bin/env bash
# Packs staged trees (.peer/exp/NAME, from tools/stage_experiments.sh) into .peer/pack/NAME.tar.xz for one device
# call: a staged tree is ~20 MB (its binary) and the device tool carries 64 MiB, xz makes it ~5.5 MB, so five
# builds travel in one call. On the device: `for f in .peer/pack/*.tar.xz; do tar xJf $f -C .peer/exp; done`.
#   tools/pack_staged.sh m8 e55 t55      (then carry .peer/pack)
# It REPLACES .peer/pack (the carry holds exactly the call's builds): name every build the call needs, old ones too.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .peer/pack && mkdir -p .peer/pack
for name in "$@"; do
  [ -d ".peer/exp/$name" ] || { echo "pack_staged: .peer/exp/$name is not staged" >&2; exit 1; }
  tar cf - -C .peer/exp "$name" | xz -6 -T2 > ".peer/pack/$name.tar.xz" &
done
wait
du -ch .peer/pack/*.tar.xz | tail -n1
