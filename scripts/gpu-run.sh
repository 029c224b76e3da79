#!/usr/bin/env bash
# The one command the GPU machine runs, from a copy of this repo with .whl/ and .gpu/
# carried (both made here by `make gpu-prepare`). That machine has Python 3.12, no cargo,
# no network, and NumPy 2.5, which is used as it is (fastlaunch restores the np.row_stack alias
# numba-cuda 0.30 names): the wheels in .whl/ (fastlaunch, and the test-only packages the image
# lacks) are installed into /tmp/site, which goes first on PYTHONPATH.
#
# usage: bash scripts/gpu-run.sh [--numba-cuda VERSION] [PART...]      (default: all)
#   --numba-cuda V  run against numba-cuda V (0.26 or 0.28) instead of the image's 0.30.4:
#              the wheels of .whl-versions/V/ and .whl-versions/common/ (numba 0.65, NumPy 2.4,
#              cuda-core 0.7: what numba-cuda before 0.30 needs; `make gpu-prepare-versions`)
#              are installed into /tmp/site-numba-cuda-V, first on PYTHONPATH; carry
#              .whl-versions
#   rust       .gpu/bin/*-tests $RUST_TEST_ARGS (the Rust tests that need a GPU)
#   tests      python3 -m pytest -m gpu $PYTEST_TARGETS $PYTEST_ARGS (PYTEST_TARGETS: tests)
#   bench      python3 benchmarks/run.py --out $OUT $BENCH_ARGS (when that file exists)
#   stages     python3 benchmarks/stages.py (per-stage launch cost)
#   gap        python3 benchmarks/gap_probe.py: case D's reused-minus-bound cost timed the ways
#              stages.py and interleaved.py time it, in one process; not part of `all`
#   conformance python3 conformance/run.py --out $OUT (numba-cuda's own tests, plain and
#              installed): all 148 modules (cudapy, doc_examples, cudadrv; about 250 s with CONFORMANCE_JOBS=14), or the
#              K-th of N groups (CONFORMANCE_GROUP=K/N), or CONFORMANCE_MODULES=a,b,c; 8
#              module runs at a time (CONFORMANCE_JOBS) within CONFORMANCE_BUDGET s (420);
#              merge the runs' conformance.json here with conformance/run.py --merge
#   ab         benchmarks/ab_probe.py: the build in .whl-old/ (carry it; e.g. main's wheel
#              before a change) against .whl/'s, alternating in one run (AB_ROUNDS, 3), and
#              any builds in .whl-ab/LABEL/ beside them (scripts/ab-wheels.sh REV...: carry
#              .whl-ab too, to find which commit moved a figure); not part of `all`
#   fresh      scripts/fresh-wheel.sh: the wheel alone in a fresh venv: info, an example,
#              `python -m fastlaunch run` on an unedited numba-cuda program, FASTLAUNCH_INSTALL=1
#   rustbench  .gpu/bin/*-bench --bench (criterion; not part of `all`)
#   threads    aggregate launches/s from 1-8 threads: the Rust floor, then fastlaunch and
#              numba-cuda (benchmarks/threads.py); not part of `all`
#   graphed    python3 benchmarks/graphed.py --out $OUT $GRAPHED_ARGS: fastlaunch.graphed
#              against eager fastlaunch, numba-cuda and a hand-captured graph (cuda.bindings);
#              not part of `all`
#   interleaved python3 benchmarks/interleaved.py --out $OUT $INTERLEAVED_ARGS: cases D, B and C,
#              every variant (fastlaunch, cuda.core, CuPy RawKernel, cuda.bindings) once per
#              round in a shuffled order, the Rust floor (.gpu/bin/launch-bench: carry .gpu)
#              run between rounds; e.g. INTERLEAVED_ARGS="--batches 64,256 --rounds 60"
#              (--seconds, 120 by default, bounds it); not part of `all`
#   memory     python3 benchmarks/memory.py --out $OUT $MEMORY_ARGS: numba-cuda's memory API
#              (to_device, device_array, copy_to_host, stream, slices, synchronize, the
#              Black-Scholes-shaped call, a kernel on host arrays) against fastlaunch installed,
#              CuPy, torch and the driver, interleaved; e.g. MEMORY_ARGS="--rounds 10"; not part
#              of `all`
#              now with the fresh-object launch rows: launch_new, launch_reused, stream_new,
#              and CuPy's and torch's reads through __cuda_array_interface__ (cai_read_*)
#   ufuncs     python3 benchmarks/ufuncs.py --out $OUT $UFUNCS_ARGS: CUDA ufuncs, a gufunc,
#              cuda.reduce and a kernel over cuda.random states under numba-cuda and fastlaunch
#              installed, against CuPy's same work and the spelled-out twins, interleaved; e.g.
#              UFUNCS_ARGS="--rounds 10 --seconds 60"; not part of `all`
#   drivercalls python3 benchmarks/driver_calls.py --out $OUT $DRIVER_CALLS_ARGS: the fresh-object
#              cases (new arrays, new streams, slices, to_device) with fastlaunch on a driver
#              that counts and times each call (.gpu/timed-cuda.so, made by make gpu-prepare:
#              carry .gpu); not part of `all`
#   review     the outside reviews' repros of the memory API, each review's run_gpu.sh run from
#              the project's root (make gpu-prepare copies both from ../shared: carry .gpu and
#              .whl): .gpu/memory-review/run_gpu.sh (the first review), then
#              .gpu/memory-review-2/run_gpu.sh (the second: it installs .whl/fastlaunch*.whl
#              into /tmp/site-mr2 itself; 3-4 minutes); REVIEWS="1 2" (the default) picks
#              which. Each repro prints REPRO <name> PASS|FAIL, teed to $OUT/review.txt and
#              $OUT/review-2.txt; the repros' own logs are gathered in $OUT/review-logs.txt and
#              $OUT/review-2-logs.txt. The part fails if any line says FAIL, or a run_gpu.sh
#              exits non-zero or reports no REPRO line; not part of `all`
#   stress     python3 -m pytest -m gpu tests/test_gpu_memory_stress.py $PYTEST_ARGS, alone: the
#              threaded differential stress of the memory API (seeded random sequences per
#              thread, every byte checked against a NumPy model; under install(), then plain
#              numba-cuda on the same seeds; under a minute). FASTLAUNCH_STRESS_THREADS (6),
#              _STEPS (300), _SEED (0), _ONLY (one thread's sequence alone, e.g. 3),
#              _LIBRARIES (cupy,torch; none), _BUDGET_S (150 a run): see the test file;
#              e.g. PYTEST_ARGS="-k installed"; not part of `all`
#   all        rust tests stages conformance bench
# The wheel install, versions and devices always come first.
#
# env: OUT             where logs and results go (default ./gpu-out)
#      PYTEST_ARGS     extra pytest arguments, shell-quoted (e.g. "-k 'launch and torch' -x")
#      PYTEST_TARGETS  what the tests part runs (default: tests), shell words with globs. The
#                      whole GPU suite takes over 9 minutes on the H200, near the device tool's
#                      10 a call: run it as two calls, 'tests/test_gpu_[a-l]*.py' and
#                      'tests/test_gpu_[m-z]*.py'
#      PYTEST_TIMEOUT  seconds before the tests part is interrupted (900); PYTEST_HANG_S (120):
#                      a test running longer has every thread's stack printed
#      RUST_TEST_ARGS  arguments for the Rust test binaries (default --ignored)
#      BENCH_ARGS      extra arguments for benchmarks/run.py, shell-quoted
#      INTERLEAVED_ARGS  extra arguments for benchmarks/interleaved.py, shell-quoted
#      MEMORY_ARGS     extra arguments for benchmarks/memory.py, shell-quoted
#      UFUNCS_ARGS     extra arguments for benchmarks/ufuncs.py, shell-quoted
#      DRIVER_CALLS_ARGS  extra arguments for benchmarks/driver_calls.py, shell-quoted
#      REVIEWS         which reviews' repros the review part runs: "1 2" (default), "1", "2"
#      FASTLAUNCH_STRESS_THREADS, _STEPS, _SEED, _ONLY, _LIBRARIES, _BUDGET_S  the stress part's
#                      parameters (tests/test_gpu_memory_stress.py; the tests part reads them too)
#
# Every part runs even after another failed; the exit status is 1 if any failed, 2 if the
# set-up failed. $OUT gets gpu-run.log (everything printed) and pytest-junit.xml, review's
# review.txt, review-2.txt and their -logs.txt; benchmarks/run.py writes its own files there
# (the device tool brings back 8 files at most).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
export OUT PYTHONUNBUFFERED=1
shopt -s nullglob

section() { printf '\n===== %s =====\n' "$*"; }

setup() {
  section "install .whl/*.whl into /tmp/site"
  local wheels=(.whl/*.whl)
  if ((${#wheels[@]} == 0)); then
    echo "gpu-run: no wheels in .whl/ (run 'make gpu-prepare' here and carry .whl)"
    return 1
  fi
  printf '%s\n' "${wheels[@]}"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${wheels[@]}" || return 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  if [[ -n $NUMBA_CUDA_VERSION ]]; then
    local site=/tmp/site-numba-cuda-$NUMBA_CUDA_VERSION
    local versioned=(.whl-versions/"$NUMBA_CUDA_VERSION"/*.whl .whl-versions/common/*.whl)
    section "numba-cuda $NUMBA_CUDA_VERSION: install ${versioned[*]} into $site"
    if [[ ! -d .whl-versions/$NUMBA_CUDA_VERSION ]]; then
      echo "gpu-run: no .whl-versions/$NUMBA_CUDA_VERSION (run 'make gpu-prepare-versions' here)"
      return 1
    fi
    rm -rf "$site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$site" "${versioned[@]}" || return 1
    export PYTHONPATH=$site:$PYTHONPATH
  fi

  section "environment"
  date -u
  uname -srm
  grep -m1 'model name' /proc/cpuinfo
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 - <<'EOF'
import importlib
import sys

print("python      ", sys.version.replace("\n", " "))
for mod in ["numpy", "numba", "numba_cuda", "torch", "cupy", "cuda.core", "fastlaunch"]:
    try:
        m = importlib.import_module(mod)
        print(f"{mod:12} {getattr(m, '__version__', '?')}  ({getattr(m, '__file__', '?')})")
    except Exception as e:  # report and go on: the parts below show what breaks
        print(f"{mod:12} NOT IMPORTABLE: {type(e).__name__}: {e}")
try:
    import fastlaunch

    print("fastlaunch.is_available():", fastlaunch.is_available())
except Exception as e:
    print("fastlaunch.is_available() failed:", type(e).__name__, e)
EOF
  section "python -m fastlaunch info"
  python3 -m fastlaunch info || echo "gpu-run: 'python -m fastlaunch info' exited $?"
  return 0
}

rust_tests() {
  local bins=(.gpu/bin/*-tests) targs=() rc=0 b dir
  if ((${#bins[@]} == 0)); then
    echo "no .gpu/bin/*-tests: skipped (run 'make gpu-prepare' here and carry .gpu)"
    return 0
  fi
  read -ra targs <<<"${RUST_TEST_ARGS---ignored}"
  for b in "${bins[@]}"; do
    # run from the crate's folder, as `cargo test` does (driver-tests in rust/driver)
    dir=rust/$(basename "${b%%-*}")
    [[ -d $dir ]] || dir=.
    echo "+ (cd $dir && $b ${targs[*]})"
    (cd "$dir" && "$OLDPWD/$b" "${targs[@]}") || rc=1
  done
  return $rc
}

rust_bench() {
  local bins=(.gpu/bin/*-bench) rc=0 b
  if ((${#bins[@]} == 0)); then echo "no .gpu/bin/*-bench: skipped"; return 0; fi
  for b in "${bins[@]}"; do
    echo "+ $b --bench"
    # CRITERION_HOME keeps criterion's many files out of $OUT
    CRITERION_HOME=/tmp/criterion "$b" --bench || rc=1
  done
  return $rc
}

py_tests() {
  local extra=()
  eval "extra=(${PYTEST_ARGS:-})"
  # a test that hangs has its stack printed after PYTEST_HANG_S, and the run is interrupted
  # (SIGINT: pytest still prints which tests failed) after PYTEST_TIMEOUT
  local targets=()
  eval "targets=(${PYTEST_TARGETS:-tests})"  # globs expand: tests/test_gpu_[a-l]*.py
  timeout -s INT -k 30 "${PYTEST_TIMEOUT:-900}" python3 -m pytest -m gpu "${targets[@]}" -q -rfE \
    -p no:cacheprovider -o faulthandler_timeout="${PYTEST_HANG_S:-120}" \
    --junitxml="$OUT/pytest-junit.xml" "${extra[@]}"
}

bench() {
  if [[ ! -f benchmarks/run.py ]]; then echo "no benchmarks/run.py: skipped"; return 0; fi
  local extra=()
  eval "extra=(${BENCH_ARGS:-})"
  python3 benchmarks/run.py --out "$OUT" "${extra[@]}"
}

stages() {
  python3 benchmarks/stages.py
}

gap_probe() {
  python3 benchmarks/gap_probe.py | tee "$OUT/gap.txt"
}

thread_scaling() {
  local bins=(.gpu/bin/launch-bench*) rc=0
  if ((${#bins[@]})); then
    "${bins[0]}" --bench --batches 50 --cases B --threads | grep '"threads"' || rc=1
  fi
  python3 benchmarks/threads.py || rc=1
  return $rc
}

graphed_bench() {
  local extra=()
  eval "extra=(${GRAPHED_ARGS:-})"
  python3 benchmarks/graphed.py --out "$OUT" "${extra[@]}"
}

interleaved_bench() {
  local extra=()
  eval "extra=(${INTERLEAVED_ARGS:-})"
  python3 benchmarks/interleaved.py --out "$OUT" "${extra[@]}"
}

# One review's repros: its run_gpu.sh (from .gpu/FOLDER, or ../shared/FOLDER where this runs in
# the work folder) from the project's root, its output teed to $OUT/NAME.txt, the logs it
# writes (into a folder of /tmp) gathered into $OUT/NAME-logs.txt: the device tool brings back
# 8 files at most. Fails if a line says FAIL, run_gpu.sh fails, or no repro reported.
review_repros() {
  local folder=$1 name=$2 dir logs rc f
  for dir in .gpu/$folder ../shared/$folder; do
    [[ -f $dir/run_gpu.sh ]] || continue
    logs=/tmp/gpu-run-$name
    rm -rf "$logs"
    section "$dir/run_gpu.sh"
    OUT=$logs bash "$dir/run_gpu.sh" 2>&1 | tee "$OUT/$name.txt"
    rc=${PIPESTATUS[0]}
    for f in "$logs"/*; do
      printf '===== %s =====\n' "$f"
      cat "$f"
    done >"$OUT/$name-logs.txt"
    if ((rc != 0)); then
      echo "gpu-run: $dir/run_gpu.sh exited $rc"
      return 1
    fi
    if ! grep -q '^REPRO' "$OUT/$name.txt"; then
      echo "gpu-run: $dir/run_gpu.sh reported no REPRO line"
      return 1
    fi
    ! grep -q "FAIL" "$OUT/$name.txt"
    return
  done
  echo "no .gpu/$folder (make gpu-prepare copies it from ../shared): skipped"
}

memory_review() {
  local rc=0 which
  for which in ${REVIEWS:-1 2}; do
    case $which in
      1) review_repros memory-review review || rc=1 ;;
      2) review_repros memory-review-2 review-2 || rc=1 ;;
      *)
        echo "gpu-run: REVIEWS names 1 and 2, not '$which'"
        rc=1
        ;;
    esac
  done
  return $rc
}

# tests/test_gpu_memory_stress.py alone (its own FASTLAUNCH_STRESS_* variables pass through);
# each run is a child process with its own hang report, so pytest's stack dump waits longer
stress() {
  local extra=()
  eval "extra=(${PYTEST_ARGS:-})"
  timeout -s INT -k 30 "${PYTEST_TIMEOUT:-900}" python3 -m pytest -m gpu \
    tests/test_gpu_memory_stress.py -q -rfEP -p no:cacheprovider \
    -o faulthandler_timeout="${PYTEST_HANG_S:-400}" "${extra[@]}"
}

memory_bench() {
  local extra=()
  eval "extra=(${MEMORY_ARGS:-})"
  python3 benchmarks/memory.py --out "$OUT" "${extra[@]}"
}

driver_calls() {
  local extra=()
  eval "extra=(${DRIVER_CALLS_ARGS:-})"
  python3 benchmarks/driver_calls.py --out "$OUT" --driver .gpu/timed-cuda.so "${extra[@]}"
}

ufuncs_bench() {
  local extra=()
  eval "extra=(${UFUNCS_ARGS:-})"
  python3 benchmarks/ufuncs.py --out "$OUT" "${extra[@]}"
}

conformance() {
  local group=()
  if [[ -n ${CONFORMANCE_MODULES:-} ]]; then
    group=(--modules "$CONFORMANCE_MODULES")
  elif [[ ${CONFORMANCE_GROUP:-all} != all ]]; then
    group=(--group "$CONFORMANCE_GROUP")
  fi
  python3 conformance/run.py --out "$OUT" --jobs "${CONFORMANCE_JOBS:-8}" \
    --budget "${CONFORMANCE_BUDGET:-420}" "${group[@]}"
}

fresh() {
  bash scripts/fresh-wheel.sh
}

ab() {
  local before=(.whl-old/fastlaunch-*.whl)
  if ((${#before[@]} != 1)); then
    echo "ab: put the build to compare with in .whl-old/ (one fastlaunch wheel) and carry it"
    return 1
  fi
  rm -rf /tmp/ab-before /tmp/ab-after
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ab-before "${before[0]}" &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ab-after \
      .whl/fastlaunch-*.whl || return 1
  # further builds (scripts/ab-wheels.sh: one folder per commit in .whl-ab/, carried)
  local extra=() dir label
  for dir in .whl-ab/*/; do
    label=$(basename "$dir")
    rm -rf "/tmp/ab-$label"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "/tmp/ab-$label" \
      "$dir"fastlaunch-*.whl || return 1
    extra+=(--build "$label=/tmp/ab-$label")
  done
  python3 benchmarks/ab_probe.py --before /tmp/ab-before --after /tmp/ab-after "${extra[@]}" \
    --rounds "${AB_ROUNDS:-3}" | tee "$OUT/ab.txt"
}

NUMBA_CUDA_VERSION=
if [[ ${1:-} == --numba-cuda ]]; then
  NUMBA_CUDA_VERSION=${2:?"--numba-cuda needs a version (0.26, 0.28)"}
  shift 2
fi

main() {
  local parts=() failed=() arg p name fn rc t0
  for arg in "${@:-all}"; do
    case $arg in
      all) parts+=(rust tests stages conformance bench) ;;
      rust | tests | bench | rustbench | stages | gap | conformance | threads | graphed | interleaved | memory | ufuncs | drivercalls | review | stress | fresh | ab) parts+=("$arg") ;;
      *)
        echo "gpu-run: unknown part '$arg' (rust, tests, stages, gap, conformance, bench, rustbench, threads, graphed, interleaved, memory, ufuncs, drivercalls, review, stress, fresh, ab, all)"
        return 2
        ;;
    esac
  done
  setup || { echo "gpu-run: set-up failed"; return 2; }

  for p in "${parts[@]}"; do
    case $p in
      rust) name="rust GPU tests" fn=rust_tests ;;
      tests) name="pytest -m gpu" fn=py_tests ;;
      bench) name="benchmarks/run.py" fn=bench ;;
      rustbench) name="criterion benches" fn=rust_bench ;;
      stages) name="benchmarks/stages.py (per-stage launch cost)" fn=stages ;;
      gap) name="benchmarks/gap_probe.py (reused minus bound, timed four ways)" fn=gap_probe ;;
      conformance) name="conformance/run.py (numba-cuda's own tests)" fn=conformance ;;
      threads) name="thread scaling (Rust floor, fastlaunch, numba-cuda)" fn=thread_scaling ;;
      graphed) name="benchmarks/graphed.py (graphed steps)" fn=graphed_bench ;;
      interleaved) name="benchmarks/interleaved.py (cases D, B and C, interleaved)" fn=interleaved_bench ;;
      memory) name="benchmarks/memory.py (the memory API, interleaved)" fn=memory_bench ;;
      ufuncs) name="benchmarks/ufuncs.py (ufuncs, reductions, random kernels, interleaved)" fn=ufuncs_bench ;;
      drivercalls) name="benchmarks/driver_calls.py (driver calls of the fresh-object cases)" fn=driver_calls ;;
      review) name="the memory reviews' repros" fn=memory_review ;;
      stress) name="tests/test_gpu_memory_stress.py (the memory API, threaded, against a model)" fn=stress ;;
      fresh) name="scripts/fresh-wheel.sh (the wheel alone, fresh venv)" fn=fresh ;;
      ab) name="benchmarks/ab_probe.py (.whl-old against .whl)" fn=ab ;;
    esac
    section "$name"
    t0=$SECONDS
    "$fn"
    rc=$?
    echo "--- $name: exit $rc after $((SECONDS - t0)) s"
    ((rc == 0)) || failed+=("$p")
  done

  section "summary"
  if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]}  (of: ${parts[*]})"
    return 1
  fi
  echo "passed: ${parts[*]}"
}

main "$@" 2>&1 | tee -a "$OUT/gpu-run.log"
exit "${PIPESTATUS[0]}"
