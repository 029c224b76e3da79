#!/usr/bin/env bash
# Fetch, on the CPU machine, the CPython 3.12 wheels that the GPU machine lacks, into DIR
# (default .whl): the NAME==VERSION arguments. The GPU machine reaches no package registry;
# carry DIR there and install with:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site DIR/*.whl
# No NumPy wheel any more: the image's NumPy 2.5 works, as fastlaunch restores the
# np.row_stack alias numba-cuda 0.30 names (python/fastlaunch/_numpy_compat.py). Any numpy
# wheel an older checkout left in DIR is removed, so the suite runs on the image's own NumPy.
# PYTHON picks the interpreter that runs pip (default python3).
set -euo pipefail
dir=${1:-.whl}; shift || true
mkdir -p "$dir"
rm -f "$dir"/numpy-*.whl
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)
if (($#)); then
  "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${plat[@]}" -d "$dir" "$@"
fi
ls -la "$dir"
