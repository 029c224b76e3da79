#!/usr/bin/env bash
# Wheels of earlier commits for `scripts/gpu-run.sh ab` to time beside .whl-old/ and .whl/:
# one folder per commit, .whl-ab/<short hash>/fastlaunch-*.whl (carry .whl-ab). Each commit is
# built in a worktree of its own under /tmp, with this checkout's .venv (make venv first).
#
# usage: bash scripts/ab-wheels.sh REV [REV...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
(($# > 0)) || { echo "usage: bash scripts/ab-wheels.sh REV [REV...]" >&2; exit 2; }
export PYO3_PYTHON=$root/.venv/bin/python VIRTUAL_ENV=$root/.venv PATH=$root/.venv/bin:$PATH
for rev in "$@"; do
  short=$(git rev-parse --short "$rev")
  tree=/tmp/fastlaunch-ab-$short
  [[ -d $tree ]] || git worktree add --detach "$tree" "$rev" >/dev/null
  rm -rf ".whl-ab/$short" && mkdir -p ".whl-ab/$short"
  (cd "$tree" && CARGO_TARGET_DIR=$tree/target maturin build --release --zig \
    --compatibility manylinux_2_28 -o "$root/.whl-ab/$short")
  echo "ab-wheels: $rev -> .whl-ab/$short/"
done
