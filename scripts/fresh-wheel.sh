#!/usr/bin/env bash
# From the built wheel alone, in a clean temporary folder with no checkout on sys.path:
# install fastlaunch into a fresh virtual environment (which sees the image's packages:
# numba-cuda, numpy, torch), then
#   1. python -m fastlaunch info
#   2. one example (examples/saxpy_torch.py, copied out of the checkout)
#   3. python -m fastlaunch run --report on an unedited numba-cuda program
#      (tests/programs/numba_saxpy.py): its kernel must be fastlaunch's, launched by fastlaunch
#   4. FASTLAUNCH_INSTALL=1 at start-up (the wheel's fastlaunch_install.pth), in the program and
#      in a spawned worker; and without it, numba-cuda's own kernel class.
# Run by `bash scripts/gpu-run.sh fresh` on the GPU machine (or alone: bash scripts/fresh-wheel.sh
# [WHEEL]). Exits non-zero if a step failed.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
shopt -s nullglob
wheels=("${1:-}")
[[ -n ${wheels[0]} ]] || wheels=("$repo"/.whl/fastlaunch-*.whl "$repo"/dist/fastlaunch-*.whl)
if ((${#wheels[@]} == 0)) || [[ ! -f ${wheels[0]} ]]; then
  echo "fresh-wheel: no fastlaunch wheel (make wheel, or make gpu-prepare, first)"
  exit 2
fi
wheel=${wheels[0]}
PY=${PYTHON:-python3}
tmp=$(mktemp -d /tmp/fastlaunch-fresh.XXXXXX)
venv=$tmp/venv
failed=()
step() { printf '\n--- fresh wheel: %s\n' "$*"; }
check() { # NAME COMMAND...: runs it, records a failure
  local name=$1; shift
  "$@" || { echo "fresh-wheel: FAILED: $name (exit $?)"; failed+=("$name"); }
}

step "wheel $(basename "$wheel") into a fresh virtual environment $venv"
unset PYTHONPATH  # nothing from the checkout (gpu-run.sh puts /tmp/site there)
"$PY" -m venv --without-pip "$venv" || exit 2
site_dir=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The image's own packages (numba-cuda, numpy, torch...), with their .pth files processed
# (numba-cuda's numba.cuda redirector is one): a site dir added by a .pth of the new venv,
# also reported by site.getsitepackages(), where cuda-pathfinder looks for the CUDA libraries.
# (python3 there is itself a venv's, so --system-site-packages would not reach them.)
image_site=$("$PY" -c 'import site; print(site.getsitepackages()[0])')
echo "import site; site.addsitedir('$image_site'); site.getsitepackages =" \
  "lambda prefixes=None, _g=site.getsitepackages: [*_g(prefixes), '$image_site']" \
  >"$site_dir/_image_site.pth"
"$PY" -m pip install -q --no-index --no-deps --no-cache-dir --target "$site_dir" "$wheel" || exit 2
ls "$site_dir"
cp "$repo/examples/saxpy_torch.py" "$repo/tests/programs/numba_saxpy.py" "$tmp/"
cat >"$tmp/spawned.py" <<'EOF'
import multiprocessing as mp
import sys

def child():
    from numba import cuda

    @cuda.jit
    def k(a):
        pass

    return f"{type(k).__module__}.{type(k).__qualname__}"

if __name__ == "__main__":
    with mp.get_context("spawn").Pool(1) as pool:
        kind = pool.apply(child)
    print("spawned worker's kernel class:", kind)
    sys.exit(0 if kind == "fastlaunch.dispatcher.Kernel" else 1)
EOF
cd "$tmp" || exit 2
py=$venv/bin/python

step "where fastlaunch comes from (must be $site_dir)"
check import "$py" -c "import fastlaunch, sys; print(fastlaunch.__file__, fastlaunch.__version__); \
assert fastlaunch.__file__.startswith('$site_dir'), 'fastlaunch is not the wheel'"

step "python -m fastlaunch info"
check info "$py" -m fastlaunch info

step "example: saxpy_torch.py"
check example "$py" saxpy_torch.py

step "python -m fastlaunch run --report numba_saxpy.py (an unedited numba-cuda program)"
out=$("$py" -m fastlaunch run --report numba_saxpy.py 2>&1)
rc=$?
echo "$out"
check run test "$rc" -eq 0
check run-kernel-class grep -q "kernel class: fastlaunch.dispatcher.Kernel" <<<"$out"
check run-launched-by-fastlaunch grep -q "saxpy: 1 overload(s) launched by fastlaunch.*0 launch(es) through numba-cuda" <<<"$out"

step "FASTLAUNCH_INSTALL=1 python numba_saxpy.py (installed at start-up by fastlaunch_install.pth)"
out=$(FASTLAUNCH_INSTALL=1 FASTLAUNCH_REPORT=1 "$py" numba_saxpy.py 2>&1)
echo "$out"
check startup-kernel-class grep -q "kernel class: fastlaunch.dispatcher.Kernel" <<<"$out"

step "FASTLAUNCH_INSTALL=1: a spawned worker installs too"
check spawned-worker env FASTLAUNCH_INSTALL=1 "$py" spawned.py

step "without FASTLAUNCH_INSTALL: numba-cuda's own kernel"
out=$(env -u FASTLAUNCH_INSTALL "$py" numba_saxpy.py 2>&1)
echo "$out"
# numba-cuda 0.30.4 alone cannot compile under NumPy 2.5 (np.row_stack is gone; fastlaunch
# restores it only where it is imported), so this check applies to older NumPy only.
if "$py" -c 'import numpy, sys; sys.exit(0 if hasattr(numpy, "row_stack") else 1)'; then
  check plain-kernel-class grep -q "kernel class: numba.cuda.dispatcher.CUDADispatcher" <<<"$out"
else
  echo "fresh-wheel: NumPy without row_stack: numba-cuda's own compile fails, as expected"
fi

cd / && rm -rf "$tmp"
if ((${#failed[@]})); then
  echo "fresh-wheel: FAILED: ${failed[*]}"
  exit 1
fi
echo "fresh-wheel: all steps passed"
