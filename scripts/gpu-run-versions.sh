#!/usr/bin/env bash
# The older numba-cuda versions on the GPU machine in one call (carry .whl, .whl-versions and
# .gpu/bin/launch-bench): per version, benchmark case D (fastlaunch and numba-cuda, C floor),
# the project's GPU tests, then numba-cuda's own suite plain and installed in the time left to
# that version (conformance/run.py's budget). Each version's files are packed into
# $OUT/numba-cuda-V.tar.gz (the device tool brings back 8 files at most).
#
# usage: bash scripts/gpu-run-versions.sh [VERSION...]     (default: 0.26 0.28)
# env:   SECONDS_PER_VERSION (250), CONFORMANCE_JOBS (14), OUT (./gpu-out)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT" || exit 2
per_version=${SECONDS_PER_VERSION:-250}
bench_d="--quick --no-leak --no-results-copy --budget 50 --pytest-timeout 40"
bench_d+=" --pytest-args '-k \"test_jit and D-\"'"
rc=0
for version in "${@:-0.26 0.28}"; do
  for v in $version; do
    deadline=$((SECONDS + per_version))
    dir=/tmp/gpu-out-$v
    rm -rf "$dir" && mkdir -p "$dir"
    OUT=$dir BENCH_ARGS=$bench_d PYTEST_ARGS="--timeout 60" \
      timeout $((deadline - SECONDS)) bash scripts/gpu-run.sh --numba-cuda "$v" bench tests
    first=$?
    left=$((deadline - SECONDS - 25))
    if ((left > 20)); then
      OUT=$dir CONFORMANCE_JOBS=${CONFORMANCE_JOBS:-14} CONFORMANCE_BUDGET=$left \
        timeout $((deadline - SECONDS)) bash scripts/gpu-run.sh --numba-cuda "$v" conformance
      second=$?
    else
      echo "numba-cuda $v: no time left for conformance"
      second=124
    fi
    echo "numba-cuda $v: bench+tests exit $first, conformance exit $second" | tee -a "$OUT/summary.txt"
    ((first == 0 && second == 0)) || rc=1
    tar czf "$OUT/numba-cuda-$v.tar.gz" -C "$dir" .
  done
done
exit $rc
