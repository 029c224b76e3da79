"""Several GPUs (issue 10): the device list, ``with gpus[i]`` launches, one loaded image
serving every device of a compute capability, threads pinned to devices, arrays on
another device, and worker processes started with ``spawn``.

Tests marked ``two_gpus`` skip on machines with fewer than two GPUs; the multi-process
tests run on one GPU too (every worker then picks GPU 0), and the spawn plumbing test runs
without a GPU. Launches whose failure could leave a sticky error in a context (an array on
another device) run in a child process.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import multi_workers
import numpy as np
import pytest
from arrays import to_host
from numba import cuda

import fastlaunch as fl

TESTS_DIR = str(Path(__file__).resolve().parent)
SPAWN_TIMEOUT_S = 120  # per result; a spawn test normally takes 5-20 s


def _gpu_count() -> int:
    return len(fl.gpus) if fl.is_available() else 0


gpu = pytest.mark.gpu


def two_gpus(test):
    """Marks a test that needs two GPUs: skipped, with the reason, on fewer."""
    count = _gpu_count()
    skip = pytest.mark.skipif(count < 2, reason=f"needs two GPUs (fastlaunch.gpus has {count})")
    return gpu(skip(test))


@fl.jit
def fill(a, value):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = value


@fl.jit
def increment(a, by):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += by


def _launch_1d(kernel, n, *args, stream=0):
    kernel[(n + 127) // 128, 128, stream](*args)


def _can_access_peer(device: int, peer: int) -> bool:
    """``cuDeviceCanAccessPeer(device, peer)``, through torch where importable."""
    try:
        import torch

        return bool(torch.cuda.can_device_access_peer(device, peer))
    except ImportError:
        from cuda.bindings import driver

        err, can = driver.cuDeviceCanAccessPeer(device, peer)
        assert err == driver.CUresult.CUDA_SUCCESS
        return bool(can)


def _makers_on(device: int):
    """Array makers placing a NumPy array on `device`: numba always, CuPy and torch where
    importable. Each returns a device array."""

    def numba_maker(host):
        with cuda.gpus[device]:
            return cuda.to_device(host)

    makers = {"numba": numba_maker}
    try:
        import cupy

        def cupy_maker(host):
            with cupy.cuda.Device(device):
                return cupy.asarray(host)

        makers["cupy"] = cupy_maker
    except ImportError:
        pass
    try:
        import torch

        makers["torch"] = lambda host: torch.from_numpy(host).to(f"cuda:{device}")
    except ImportError:
        pass
    return makers


def _pointer(array) -> int:
    if hasattr(array, "device_ctypes_pointer"):
        return array.device_ctypes_pointer.value
    if hasattr(array, "data_ptr"):
        return array.data_ptr()
    return array.data.ptr


def _on_device(device: int, array) -> np.ndarray:
    """`array` copied to the host with `device` current (what torch, CuPy and numba expect)."""
    with fl.gpus[device], cuda.gpus[device]:
        return to_host(array)


def _uuid(value) -> str:
    return str(value).lower().removeprefix("gpu-")


# -- the device list ---------------------------------------------------------------------


@two_gpus
def test_gpus_lists_every_device_with_its_attributes():
    assert len(fl.gpus) == len(cuda.gpus)
    devices = list(fl.gpus)
    assert [d.id for d in devices] == list(range(len(cuda.gpus)))
    for device in devices:
        numba_device = cuda.gpus[device.id]
        name = numba_device.name
        assert device.name == (name.decode() if isinstance(name, bytes) else name)
        assert device.compute_capability == tuple(numba_device.compute_capability)
        assert _uuid(device.uuid) == _uuid(numba_device.uuid)
        assert device.multiprocessor_count == numba_device.MULTIPROCESSOR_COUNT
        assert fl.gpus[device.id] == device
        assert fl.gpus[device.id - len(devices)] == device  # negative indices
    assert len({d.uuid for d in devices}) == len(devices)
    assert len({d.pci_bus_id for d in devices}) == len(devices)
    with pytest.raises(IndexError, match="does not exist"):
        fl.gpus[len(devices)]


@two_gpus
def test_device_attributes_agree_with_torch_and_cupy():
    checked = 0
    try:
        import torch
    except ImportError:
        pass
    else:
        assert torch.cuda.device_count() == len(fl.gpus)
        for device in fl.gpus:
            props = torch.cuda.get_device_properties(device.id)
            assert device.name == props.name
            assert device.compute_capability == (props.major, props.minor)
            assert device.multiprocessor_count == props.multi_processor_count
            assert device.total_memory == props.total_memory
            assert _uuid(device.uuid) == _uuid(props.uuid)
        checked += 1
    try:
        import cupy
    except ImportError:
        pass
    else:
        assert cupy.cuda.runtime.getDeviceCount() == len(fl.gpus)
        for device in fl.gpus:
            props = cupy.cuda.runtime.getDeviceProperties(device.id)
            name = props["name"]
            assert device.name == (name.decode() if isinstance(name, bytes) else name)
            assert device.compute_capability == (props["major"], props["minor"])
            assert device.multiprocessor_count == props["multiProcessorCount"]
            assert device.total_memory == props["totalGlobalMem"]
            assert device.attribute("PCI_BUS_ID") == props["pciBusID"]
        checked += 1
    if not checked:
        pytest.skip("neither torch nor CuPy is importable")


# -- launching on another device ---------------------------------------------------------


@two_gpus
@pytest.mark.parametrize("library", ["numba", "cupy", "torch"])
def test_with_gpus1_launch_writes_an_array_on_device_1(library):
    makers = _makers_on(1)
    if library not in makers:
        pytest.skip(f"{library} is not importable")
    n = 10_000
    array = makers[library](np.zeros(n, np.float32))
    assert fl._core.pointer_device(_pointer(array)) == 1
    with fl.gpus[1]:
        assert fl.gpus.current == fl.gpus[1]
        _launch_1d(fill, n, array, np.float32(2.5))
        _launch_1d(increment, n, array, np.float32(1.0))
        fl.synchronize()
    assert (_on_device(1, array) == 3.5).all()


@two_gpus
def test_a_launch_follows_the_context_numba_made_current():
    n = 1000
    with cuda.gpus[1]:
        array = cuda.to_device(np.zeros(n, np.int32))
        assert fl.gpus.current == fl.gpus[1]
        _launch_1d(fill, n, array, 7)
        cuda.synchronize()
        assert (array.copy_to_host() == 7).all()


@two_gpus
def test_one_loaded_image_serves_every_device_of_a_compute_capability():
    """Overloads are keyed by argument fingerprint and compute capability: two GPUs of one
    capability share the overload and its context-independent library (cuLibraryLoadData),
    loaded into each context by the driver; GPUs of different capabilities get one each."""

    @fl.jit
    def store(a, value):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = value

    n = 512
    arrays = {}
    for device in (0, 1):
        with cuda.gpus[device]:
            arrays[device] = cuda.device_array(n, np.int64)
        with fl.gpus[device]:
            _launch_1d(store, n, arrays[device], device + 40)
            fl.synchronize()
    capabilities = {fl.gpus[d].compute_capability for d in (0, 1)}
    assert store.overload_count == len(capabilities)
    assert len(store.overloads) == 1  # numba compiled the signature once
    # Each device runs code built for its own capability (the driver loads the library's
    # kernel into each device's context on first use).
    targets = [target for _, target in store._compiled.values()]
    for device in (0, 1):
        major, minor = fl.gpus[device].compute_capability
        versions = {t.attribute("binary_version", device) for t in targets}
        assert major * 10 + minor in versions, (device, versions)
        assert all(t.attribute("max_threads_per_block", device) > 0 for t in targets)
    # Launching again on either device finds the registered overload.
    misses = store.miss_count
    for device in (1, 0, 1):
        with fl.gpus[device]:
            _launch_1d(store, n, arrays[device], device + 50)
            fl.synchronize()
    assert store.miss_count == misses
    for device in (0, 1):
        assert (_on_device(device, arrays[device]) == device + 50).all()


@two_gpus
def test_bound_launches_stay_on_their_device():
    n = 256
    with cuda.gpus[1]:
        array = cuda.to_device(np.zeros(n, np.int64))
    with fl.gpus[1]:
        bound = increment[(n + 127) // 128, 128].bind(array, 1)
        for _ in range(10):
            bound()
        fl.synchronize()
    with fl.gpus[0], pytest.raises(ValueError, match="another CUDA context"):
        bound()
    assert (_on_device(1, array) == 10).all()


@two_gpus
def test_threads_pinned_to_different_devices_launch_concurrently():
    per_device = 2
    launches = 20_000
    devices = list(range(len(fl.gpus)))
    threads = per_device * len(devices)
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    results: dict[int, tuple[int, int, np.ndarray]] = {}

    def worker(index: int) -> None:
        device = devices[index % len(devices)]
        try:
            with fl.gpus[device]:
                with cuda.gpus[device]:
                    array = cuda.to_device(np.zeros(128, np.int64))
                stream = fl.stream(non_blocking=True)
                launcher = increment[1, 128, stream]
                seen = fl.gpus.current.id
                barrier.wait()
                for _ in range(launches):
                    launcher(array, 1)
                stream.synchronize()
                results[index] = (device, seen, array.copy_to_host())
        except BaseException as e:  # reported in the main thread
            errors.append(e)
            barrier.abort()

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    assert len(results) == threads
    for device, seen, values in results.values():
        assert seen == device
        assert (values == launches).all()


@two_gpus
def test_an_array_on_another_device_is_refused_clearly(monkeypatch):
    """Devices that cannot access each other's memory: the launch is refused before it is
    submitted, naming the argument and both devices (not a fault on the GPU). Run in a
    child process so a launch that does fault cannot poison this process's contexts."""
    if _can_access_peer(0, 1):
        pytest.skip(
            "devices 0 and 1 can access each other as peers: "
            "test_peer_accessible_arrays_work covers them"
        )
    _spawn_env(monkeypatch)
    report = _in_child(multi_workers.launch_with_array_on, 1, 0)
    assert report["raised"] is not None, "a launch on device 0 took an array on device 1"
    assert report["argument_error"], report
    assert "device" in report["message"], report


@two_gpus
def test_peer_accessible_arrays_work(monkeypatch):
    """Where ``cuDeviceCanAccessPeer`` says device 0 can reach device 1's memory, a launch on
    device 0 with an array on device 1 runs and gives the right result (fastlaunch enables
    peer access as needed). Also run in a child process."""
    if not _can_access_peer(0, 1):
        pytest.skip("device 0 cannot access device 1's memory (cuDeviceCanAccessPeer)")
    _spawn_env(monkeypatch)
    report = _in_child(multi_workers.launch_with_array_on, 1, 0)
    assert report["raised"] is None, report
    assert report["ok"], report


# -- several processes (one GPU is enough) -------------------------------------------------


def _spawn_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawned children find `multi_workers` (and `arrays`) by name: multiprocessing passes
    the parent's sys.path to them, and PYTHONPATH makes sure of it."""
    path = os.environ.get("PYTHONPATH", "")
    if TESTS_DIR not in path.split(os.pathsep):
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (TESTS_DIR, path) if p))


def _in_child(function, *args):
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result(timeout=SPAWN_TIMEOUT_S)


def test_spawned_processes_import_fastlaunch_and_the_workers(monkeypatch):
    """No GPU needed: the plumbing the spawn tests rely on (runs on CPU-only machines)."""
    _spawn_env(monkeypatch)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        futures = [pool.submit(multi_workers.child_info) for _ in range(2)]
        infos = [f.result(timeout=SPAWN_TIMEOUT_S) for f in futures]
    assert all(info["pid"] != os.getpid() for info in infos)
    assert {info["available"] for info in infos} == {fl.is_available()}
    assert all(info["fastlaunch"] == fl.__file__ for info in infos)


@gpu
def test_spawned_workers_each_select_a_gpu_compile_and_launch(monkeypatch):
    _spawn_env(monkeypatch)
    count = len(fl.gpus)
    tasks = max(4, 2 * count)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(tasks, max(2, count)), mp_context=context) as pool:
        futures = [pool.submit(multi_workers.launch_on_gpu, i) for i in range(tasks)]
        reports = [f.result(timeout=SPAWN_TIMEOUT_S) for f in futures]
    for i, report in enumerate(reports):
        assert report["index"] == i
        assert report["pid"] != os.getpid()
        assert report["device"] == i % count
        assert report["current"] == report["device"]
        assert report["pointer_device"] == report["device"]
        assert report["ok"], report
        assert report["overloads"] >= 1
    assert {r["device"] for r in reports} == set(range(min(tasks, count)))


@gpu
def test_a_pickled_kernel_launches_in_spawned_workers(monkeypatch):
    """A fastlaunch kernel passed to a worker (pickled as its numba dispatcher) is compiled
    again in the child and launched there."""
    _spawn_env(monkeypatch)
    count = len(fl.gpus)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        futures = [
            pool.submit(multi_workers.launch_on_gpu, i, 1000, multi_workers.scale) for i in range(2)
        ]
        reports = [f.result(timeout=SPAWN_TIMEOUT_S) for f in futures]
    for i, report in enumerate(reports):
        assert report["ok"], report
        assert report["device"] == i % count
        assert report["misses"] >= 1  # compiled in the child


@gpu
def test_torch_multiprocessing_spawn_workers(monkeypatch, tmp_path):
    torch_mp = pytest.importorskip("torch.multiprocessing")
    _spawn_env(monkeypatch)
    count = len(fl.gpus)
    nprocs = max(2, count)
    torch_mp.spawn(
        multi_workers.torch_spawn_worker, args=(str(tmp_path),), nprocs=nprocs, join=True
    )
    reports = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(nprocs)]
    for rank, report in enumerate(reports):
        assert report["rank"] == rank
        assert report["device"] == rank % count
        assert report["tensor_device"] == rank % count
        assert report["ok"], report
    assert len({r["pid"] for r in reports}) == nprocs
