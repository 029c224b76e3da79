"""Many Python threads launching at once: every result verified, one compile per signature."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from arrays import to_host
from numba import cuda

import fastlaunch as fl

pytestmark = pytest.mark.gpu

THREADS = 8
LAUNCHES = 50_000


@fl.jit
def increment(a, by):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += by


def _sources():
    makers = [cuda.to_device]
    try:
        import cupy

        makers.append(cupy.asarray)
    except ImportError:
        pass
    try:
        import torch

        makers.append(lambda a: torch.from_numpy(a).to("cuda"))
    except ImportError:
        pass
    return makers


def _run(threads: int, launches: int, with_device: bool) -> None:
    makers = _sources()
    errors: list[BaseException] = []
    results: dict[int, tuple] = {}

    def worker(index: int) -> None:
        try:
            if with_device:
                fl.gpus[0].__enter__()
            stream = fl.stream(non_blocking=True)
            array = makers[index % len(makers)](np.zeros(64, np.int64))
            launcher = increment[1, 64, stream]
            for _ in range(launches):
                launcher(array, 1)
            stream.synchronize()
            results[index] = (to_host(array), launches)
            if with_device:
                fl.gpus[0].__exit__(None, None, None)
        except BaseException as e:  # report in the main thread
            errors.append(e)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    for values, count in results.values():
        assert (values == count).all()
    assert len(results) == threads


@pytest.mark.parametrize("with_device", [False, True], ids=["plain", "with-gpus0"])
def test_threads_launch_on_their_own_streams(with_device):
    _run(THREADS, LAUNCHES, with_device)


def test_first_launches_from_many_threads_compile_once_per_signature():
    @fl.jit
    def fill(a, v):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = v

    dtypes = [np.float32, np.int32]
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []
    arrays = [cuda.to_device(np.zeros(16, dtypes[i % 2])) for i in range(8)]

    def worker(index: int) -> None:
        try:
            barrier.wait()
            fill[1, 16](arrays[index], 3)
            cuda.synchronize()
        except BaseException as e:
            errors.append(e)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    assert fill.overload_count == 2
    assert len(fill.overloads) == 2  # numba compiled each signature once
    for a in arrays:
        assert (a.copy_to_host() == 3).all()
