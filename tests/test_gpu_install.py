"""Process-wide use on the GPU: ``install()``, numba-cuda's API on installed kernels, the
kernels numba-cuda builds (vectorize, guvectorize, reduce, forall), ``python -m fastlaunch
run`` on an unedited program, and workers (concurrent.futures and torch.multiprocessing
with spawn, Dask ``distributed``) that install fastlaunch."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import install_workers
import numba.cuda
import numpy as np
import pytest
from numba import cuda
from numba.cuda.dispatcher import CUDADispatcher

import fastlaunch

pytestmark = pytest.mark.gpu

TESTS_DIR = str(Path(__file__).resolve().parent)
PROGRAM = Path(__file__).resolve().parent / "programs" / "numba_saxpy.py"
TIMEOUT_S = 180
NUMBA_JIT = numba.cuda.jit


@pytest.fixture(autouse=True)
def uninstalled_after():
    yield
    fastlaunch.uninstall()
    assert numba.cuda.jit is NUMBA_JIT


@pytest.fixture
def spawn_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawned children and Dask workers find ``install_workers`` by name."""
    path = os.environ.get("PYTHONPATH", "")
    if TESTS_DIR not in path.split(os.pathsep):
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (TESTS_DIR, path) if p))


def test_an_installed_kernel_launches_through_fastlaunch():
    with fastlaunch.install():
        report = install_workers.launch(0, repeats=200)
    assert report["ok"], report
    assert report["fastlaunch_kernel"] and report["installed"]
    assert report["numba_launches"] == 0 and report["overloads"] == 1


def test_numba_cuda_api_on_an_installed_kernel(tmp_path):
    with fastlaunch.install():

        @cuda.jit
        def add_one(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] += 1

        eager = cuda.jit("void(float32[::1])")(add_one.py_func)
    a = cuda.to_device(np.zeros(64, np.float32))
    add_one[1, 64](a)
    assert isinstance(add_one, CUDADispatcher) and isinstance(eager, fastlaunch.Kernel)
    assert list(add_one.overloads) and add_one.signatures
    sig = add_one.signatures[0]
    assert "add_one" in add_one.inspect_llvm(sig)
    assert ".entry" in add_one.inspect_asm(sig)
    assert all(regs > 0 for regs in add_one.get_regs_per_thread().values())
    assert add_one.py_func.__name__ == "add_one"
    specialized = add_one.specialize(a)
    assert isinstance(specialized, fastlaunch.Kernel) and specialized.specialized
    assert add_one.specialize(a) is specialized  # cached, as numba-cuda caches it
    with pytest.raises(RuntimeError):
        specialized.specialize(a)  # numba-cuda: "Dispatcher already specialized"
    add_one.forall(64)(a)  # launches the specialization through fastlaunch
    assert specialized.numba_launches == 0 and specialized.overload_count == 1
    eager[1, 64](a)
    clone = pickle.loads(pickle.dumps(add_one))
    assert isinstance(clone, fastlaunch.Kernel)
    clone[1, 64](a)
    assert np.array_equal(a.copy_to_host(), np.full(64, 4, np.float32))
    assert add_one.numba_launches == 0


def test_kernels_numba_cuda_builds_after_install():
    """vectorize / guvectorize / reduce give the right results when installed, and their
    kernels (made by numba.cuda.jit, launched with forall or a launch configuration) launch
    through fastlaunch: all of them, on device arrays, and reduce on a host array too (its
    slices of the host array are contiguous host arrays, which fastlaunch packs)."""
    # held, so that no kernel made below can take the id of one that died meanwhile
    alive_before = fastlaunch._installer.installed_kernels()
    earlier = {id(k) for k in alive_before}
    with fastlaunch.install():

        @cuda.vectorize(["float32(float32, float32)"], target="cuda")
        def vadd(x, y):
            return x + y

        @cuda.guvectorize(["void(float32[:], float32[:])"], "(n)->()", target="cuda")
        def row_sum(x, out):
            s = 0.0
            for v in x:
                s += v
            out[0] = s

        total = cuda.reduce(lambda a, b: a + b)
        host_total = cuda.reduce(lambda a, b: a + b)
        x = np.arange(1000, dtype=np.float32)
        dx = cuda.to_device(x)
        assert np.array_equal(vadd(dx, dx).copy_to_host(), x + x)
        m = x.reshape(10, 100)
        assert np.allclose(row_sum(cuda.to_device(m)).copy_to_host(), m.sum(axis=1))
        assert np.allclose(row_sum(m), m.sum(axis=1))
        assert total(dx) == x.sum()
        assert host_total(x) == x.sum()
        made = [k for k in fastlaunch._installer.installed_kernels() if id(k) not in earlier]

    (_, gufunc_kernel), *_ = row_sum.kernelmap.values()
    reduce_kernel = total._compile(x.dtype)
    host_reduce_kernel = host_total._compile(x.dtype)
    assert gufunc_kernel in made and reduce_kernel in made, [k.__name__ for k in made]
    summary = [(k.__name__, k.overload_count, k.numba_launches) for k in made]
    assert host_reduce_kernel in made, summary
    for k in made:
        assert k.numba_launches == 0, summary
        # forall launches numba-cuda's specialization of a lazily compiled kernel
        specializations = [s.__dict__["_fastlaunch_kernel"] for s in k.specializations.values()]
        for fast in specializations:
            assert fast.numba_launches == 0 and fast.overload_count == 1, summary
        assert k.overload_count >= 1 or specializations, summary


def test_the_report_counts_vectorize_launches_on_host_arrays():
    """vectorize on host arrays launches the kernel's specialization (forall): the report
    counts it under the kernel numba.cuda.jit made."""
    with fastlaunch.install():

        @cuda.vectorize(["float32(float32, float32)"], target="cuda")
        def vmul(x, y):
            return x * y

        x = np.arange(100, dtype=np.float32)
        assert np.array_equal(vmul(x, x), x * x)
        text = fastlaunch._installer.report()
    lines = [t for t in text.splitlines() if "vmul" in t]
    assert any("0 overload(s)" not in line for line in lines), text


def test_run_an_unedited_numba_cuda_program():
    done = subprocess.run(
        [sys.executable, "-m", "fastlaunch", "run", "--report", str(PROGRAM)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok=True" in done.stdout
    assert "kernel class: fastlaunch.dispatcher.Kernel" in done.stdout
    assert "saxpy: 1 overload(s) launched by fastlaunch" in done.stderr
    assert "0 launch(es) through numba-cuda's path" in done.stderr
    if np.lib.NumpyVersion(np.__version__) >= "2.5.0":
        return  # numba-cuda 0.30.4 alone cannot compile on NumPy 2.5 (fastlaunch restores it)
    plain = subprocess.run(
        [sys.executable, str(PROGRAM)], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "kernel class: numba.cuda.dispatcher.CUDADispatcher" in plain.stdout


def test_concurrent_futures_spawn_workers_install(spawn_env):
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        2, mp_context=context, initializer=install_workers.install_in_worker
    ) as pool:
        reports = list(pool.map(install_workers.launch, range(4), timeout=TIMEOUT_S))
    print(json.dumps(reports))
    for r in reports:
        assert r["ok"] and r["installed"] and r["fastlaunch_kernel"], r
        assert r["numba_launches"] == 0, r


def test_a_kernel_shipped_to_spawn_workers(spawn_env):
    with fastlaunch.install():
        kernel = install_workers._saxpy_source()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        reports = list(pool.map(install_workers.launch, range(2), [kernel] * 2, timeout=TIMEOUT_S))
    for r in reports:
        assert r["ok"] and r["fastlaunch_kernel"] and r["numba_launches"] == 0, r


def test_torch_multiprocessing_spawn_workers_install(spawn_env, tmp_path):
    torch_mp = pytest.importorskip("torch.multiprocessing")
    torch_mp.spawn(install_workers.torch_spawn_worker, args=(str(tmp_path),), nprocs=2, join=True)
    for rank in range(2):
        report = json.loads((tmp_path / f"{rank}.json").read_text())
        assert report["ok"] and report["kernel"] == "Kernel", report
        assert report["numba_launches"] == 0, report


def test_dask_local_cluster_workers(spawn_env):
    """Two worker processes sharing the one GPU: install() in each through a worker plugin;
    a kernel shipped from here and one made there both launch through fastlaunch."""
    pytest.importorskip("distributed")

    with fastlaunch.install():
        shipped = install_workers._saxpy_source()
    made_there, shipped_runs = install_workers.run_on_dask_workers(install_workers.launch, shipped)
    print(json.dumps({"made_in_workers": made_there, "shipped": shipped_runs}))
    for r in made_there + shipped_runs:
        assert r["ok"] and r["fastlaunch_kernel"] and r["numba_launches"] == 0, r
    assert all(r["installed"] for r in made_there)
