#!/usr/bin/env bash
# Fetch, on the CPU machine, the CPython 3.12 wheels that the GPU machine lacks, into DIR
# (default .whl). The GPU machine reaches no package registry; carry DIR there and install
# with:  python3 -m pip install -q --no-index --no-deps --target /tmp/site DIR/*.whl
# Its image ships numpy 2.5, which numba-cuda 0.30.4 cannot import (np.row_stack), so a
# numpy 2.4 wheel goes first. Extra NAME==VERSION arguments are fetched the same way.
# Old numpy wheels are removed first: two versions of one package stop the whole install.
# PYTHON picks the interpreter that runs pip (default python3).
set -euo pipefail
dir=${1:-.whl}; shift || true
mkdir -p "$dir"
rm -f "$dir"/numpy-*.whl
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${plat[@]}" -d "$dir" "numpy>=2.4,<2.5" "$@"
ls -la "$dir"
