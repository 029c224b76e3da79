# fastlaunch: build, test and GPU-run plumbing.
#   make demo         build into .venv and list the GPUs (or say there is none)
#   make test         everything CI runs: Rust fmt/clippy/tests/bench build, ruff, stubtest, pytest
#                     (against the newest numba-cuda, then the oldest supported: .venv-oldest)
#   make wheel        the release wheel, manylinux_2_28 x86_64 (zig linker), checked by auditwheel
#   make gpu-prepare  wheels (.whl/) and Rust GPU test/bench binaries (.gpu/bin/) for the GPU machine
#   make gpu-prepare-versions  wheels for older numba-cuda there (.whl-versions/; gpu-run.sh --numba-cuda)
#   make clean        build outputs (keeps .venv); make distclean also removes .venv

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test
.DELETE_ON_ERROR:

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-stamp
DEPS := 'maturin>=1.9,<2' 'numba-cuda[cu13]==0.30.4' 'numpy>=2.0' \
        pytest pytest-benchmark hypothesis ruff mypy check-jsonschema
PY_DIRS := python tests benchmarks examples

# The oldest supported numba-cuda (pyproject.toml: >=0.26,<0.31): the no-GPU tests run against it
# too. numba-cuda before 0.30 needs numba < 0.66 (which takes NumPy < 2.5), and says so nowhere.
OLDEST_NUMBA_CUDA := 0.26.0
VENV_OLDEST := .venv-oldest
OLDEST_VPY := $(VENV_OLDEST)/bin/python
OLDEST_STAMP := $(VENV_OLDEST)/.deps-stamp
OLDEST_DEPS := 'numba-cuda[cu13]==$(OLDEST_NUMBA_CUDA)' 'numba<0.66' 'numpy>=2.0' \
               pytest pytest-benchmark hypothesis
IN_OLDEST = VIRTUAL_ENV="$(abspath $(VENV_OLDEST))" PATH="$(abspath $(VENV_OLDEST))/bin:$$PATH"
# what the GPU machine runs against besides the image's numba-cuda 0.30.4
GPU_NUMBA_CUDA_VERSIONS := 0.26.0 0.28.2
STUBTEST_ALLOWLIST := $(wildcard python/stubtest-allowlist.txt)

# pyo3 builds against the venv's interpreter; the `cargo test` binary of rust/ext links
# libpython, so it must find that interpreter's own libpython at run time.
export PYO3_PYTHON := $(abspath $(VPY))
PY_LIBDIR = $(shell $(VPY) -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
WITH_LIBPYTHON = LD_LIBRARY_PATH="$(PY_LIBDIR)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}"
IN_VENV = VIRTUAL_ENV="$(abspath $(VENV))" PATH="$(abspath $(VENV))/bin:$$PATH"

# make wheel: glibc >= 2.28 (RHEL/Rocky 8 and newer), linked with zig (PyPI's ziglang).
WHEEL_DIR ?= dist
MANYLINUX ?= manylinux_2_28
WHEEL_TOOLS := 'ziglang>=0.13' 'auditwheel>=6'
WHEEL_STAMP := $(VENV)/.wheel-tools-stamp
DASK_WHEELS := dask==2026.8.0 distributed==2026.8.0 partd==1.4.2 locket==1.0.0 tblib==3.2.2 \
               tornado==6.6.1 zict==3.0.0

.PHONY: venv build test test-oldest demo wheel gpu-prepare gpu-prepare-versions clean distclean

$(VPY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): Makefile | $(VPY)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q $(DEPS)
	touch $@

venv: $(STAMP)

$(OLDEST_STAMP): Makefile
	$(PYTHON) -m venv $(VENV_OLDEST)
	$(OLDEST_VPY) -m pip install -q --upgrade pip
	$(OLDEST_VPY) -m pip install -q $(OLDEST_DEPS)
	touch $@

build: venv
	$(IN_VENV) $(VENV)/bin/maturin develop --release

test: venv build
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(WITH_LIBPYTHON) cargo test --workspace
	cargo bench --workspace --no-run
	$(VENV)/bin/ruff check $(PY_DIRS)
	$(VENV)/bin/ruff format --check $(PY_DIRS)
	$(VPY) -m mypy.stubtest fastlaunch._core $(if $(STUBTEST_ALLOWLIST),--allowlist $(STUBTEST_ALLOWLIST))
	# the release workflow cannot run here: checked against GitHub's workflow schema
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(VPY) -m pytest tests
	$(MAKE) test-oldest

# fastlaunch into the oldest venv (maturin installs its dependencies there: pip must keep
# numba-cuda $(OLDEST_NUMBA_CUDA), which the check after it asserts), then the no-GPU tests.
test-oldest: build $(OLDEST_STAMP)
	$(IN_OLDEST) $(VENV)/bin/maturin develop --release
	$(OLDEST_VPY) -c "import numba_cuda as m; v = m.__version__; \
	  assert v == '$(OLDEST_NUMBA_CUDA)', f'installing fastlaunch moved numba-cuda to {v}'"
	$(OLDEST_VPY) -m pytest tests -q
demo: venv build
	$(VPY) -m fastlaunch.demo

$(WHEEL_STAMP): Makefile | $(STAMP)
	$(VPY) -m pip install -q $(WHEEL_TOOLS)
	touch $@

# The wheel carries fastlaunch_install.pth in its .data/purelib (FASTLAUNCH_INSTALL=1).
wheel: venv $(WHEEL_STAMP)
	mkdir -p $(WHEEL_DIR)
	rm -f $(WHEEL_DIR)/fastlaunch-*.whl
	$(IN_VENV) $(VENV)/bin/maturin build --release --zig --compatibility $(MANYLINUX) -o $(WHEEL_DIR)
	$(VENV)/bin/auditwheel show $(WHEEL_DIR)/fastlaunch-*.whl
	$(VPY) -m zipfile -l $(WHEEL_DIR)/fastlaunch-*.whl | grep 'purelib/fastlaunch_install.pth'

# The GPU machine gets .whl/ and .gpu/ carried (see scripts/gpu-run.sh). Only the
# fastlaunch-driver binaries go to .gpu/bin: rust/ext's test binary links this machine's
# libpython 3.11, which the GPU machine (Python 3.12) lacks.
gpu-prepare: venv
	mkdir -p .whl .gpu/bin
	$(MAKE) wheel WHEEL_DIR=.whl
	# numba-cuda's own test suite (the conformance run) needs filecheck and cffi, and the Dask
	# test dask + distributed and the dependencies the image lacks: none of them is in the image.
	PYTHON=$(VPY) bash scripts/gpu-wheels.sh .whl filecheck==1.0.6 cffi==2.1.1 pycparser==3.12 \
	  $(DASK_WHEELS)
	rm -f .gpu/bin/*
	cargo test --workspace --release --no-run --message-format=json \
	  | $(VPY) scripts/gpu-bins.py tests .gpu/bin --exclude fastlaunch-ext
	cargo bench --workspace --no-run --message-format=json \
	  | $(VPY) scripts/gpu-bins.py benches .gpu/bin --exclude fastlaunch-ext
	# the counting driver of benchmarks/driver_calls.py (gpu-run.sh drivercalls)
	cc -O2 -shared -fPIC -o .gpu/timed-cuda.so benchmarks/timed_driver/timed_cuda.c -ldl
	# the outside reviews' repros (gpu-run.sh review), where the work folder has them
	rm -rf .gpu/memory-review .gpu/memory-review-2
	if [ -d ../shared/memory-review ]; then cp -r ../shared/memory-review .gpu/; fi
	if [ -d ../shared/memory-review-2 ]; then cp -r ../shared/memory-review-2 .gpu/; fi
	ls -la .whl .gpu/bin

gpu-prepare-versions: venv
	$(VPY) scripts/gpu-version-wheels.py .whl-versions $(GPU_NUMBA_CUDA_VERSIONS)

clean:
	cargo clean
	rm -rf .whl .whl-versions .gpu gpu-out dist .pytest_cache .ruff_cache .mypy_cache .benchmarks
	rm -f python/fastlaunch/_core*.so

distclean: clean
	rm -rf $(VENV) $(VENV_OLDEST)
