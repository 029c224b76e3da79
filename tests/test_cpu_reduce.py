"""fastlaunch's ``cuda.reduce`` plan (``fastlaunch.ufuncs.reduce``) without a GPU: for every
size it launches what numba-cuda's ``Reduce.__call__`` launches (grid, block, the elements
each kernel covers, ``init`` and its flag), checked against numba-cuda's own call recorded
with the same stand-in kernel. Results side by side with numba-cuda are proven on the GPU
(tests/test_gpu_ufuncs.py)."""

from __future__ import annotations

import numba.cuda
import numpy as np
import pytest
from numba.cuda.kernels.reduction import Reduce

from fastlaunch.ufuncs import reduce


class FakeArray:
    """A 1-d device array: a window (offset, size) on a NumPy array."""

    def __init__(self, base: np.ndarray, offset: int = 0, size: int | None = None) -> None:
        self.base, self.offset = base, offset
        self.size = len(base) - offset if size is None else size
        self.shape, self.ndim, self.dtype = (self.size,), 1, base.dtype

    def __getitem__(self, index):
        if isinstance(index, int):
            return self.base[self.offset + index]
        start, stop, _ = index.indices(self.size)
        return FakeArray(self.base, self.offset + start, stop - start)

    def window(self) -> tuple[int, int, int]:
        return (id(self.base), self.offset, self.size)


class RecordingKernel:
    def __init__(self) -> None:
        self.launches: list[tuple] = []

    def __getitem__(self, config):
        griddim, blockdim, stream = config

        def launch(array, partials, init, use_init):
            self.launches.append(
                (griddim, blockdim, array.window(), partials.window(), init, use_init)
            )

        return launch


@pytest.fixture
def allocations(monkeypatch):
    """Device arrays the reductions allocate, in order, so that the two runs compare."""
    made: list[FakeArray] = []

    def device_array(shape, dtype, stream=0):
        made.append(FakeArray(np.zeros(shape, dtype)))
        return made[-1]

    monkeypatch.setattr(numba.cuda, "device_array", device_array)
    return made


def canonical(launches, bases):
    """Launches with arrays named by their order of first appearance (ids differ per run)."""
    names: dict[int, int] = {}
    out = []
    for griddim, blockdim, array, partials, init, use_init in launches:
        windows = []
        for base, offset, size in (array, partials):
            windows.append((bases.get(base, names.setdefault(base, len(names))), offset, size))
        out.append((griddim, blockdim, *windows, init, use_init))
    return out


@pytest.mark.parametrize("size", [1, 5, 127, 128, 129, 1000, 4096, 8192, 8192 + 77, 100_000])
def test_a_plan_launches_what_numba_cuda_launches(size, allocations):
    host = np.arange(size, dtype=np.float32)
    init = np.float32(0)

    numba_kernel = RecordingKernel()
    reduction = Reduce(lambda a, b: a + b)
    reduction._compile = lambda dtype: numba_kernel
    Reduce.__call__(reduction, FakeArray(host))

    plan_kernel = RecordingKernel()
    reduce.Plan(plan_kernel, size).run(FakeArray(host), None, init, 0)

    source = {id(host): "input"}
    assert canonical(plan_kernel.launches, source) == canonical(numba_kernel.launches, source)
    assert len(allocations) == 2  # one partials array per call


@pytest.mark.parametrize("size", [1, 100, 128, 129, 1000, 100_000])
def test_with_res_the_last_kernel_writes_res(size, allocations):
    host = np.arange(size, dtype=np.float64)
    res = FakeArray(np.zeros(3))
    kernel = RecordingKernel()
    assert reduce.Plan(kernel, size).run(FakeArray(host), res, np.float64(0), 0) is None
    last = kernel.launches[-1]
    assert last[3] == res.window()  # the result goes to res[0], no copy after
    if size <= 128:
        assert allocations == [] and len(kernel.launches) == 1
    else:
        assert len(allocations) == 1
        (partials,) = allocations
        assert last[2] == partials.window()
