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
    # the result read back (one element copied from the device): the fake's first element
    monkeypatch.setattr(reduce, "first_element", lambda array: array[0])
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


def test_later_calls_on_the_default_stream_take_the_partials_back(allocations):
    host = np.arange(1000, dtype=np.float32)
    plan = reduce.Plan(RecordingKernel(), 1000)
    for _ in range(3):
        assert plan.run(FakeArray(host), None, np.float32(0), 0) == 0  # the fake kernel's
    assert len(allocations) == 1  # read back on the default stream: kept, taken again
    res = FakeArray(np.zeros(1, np.float32))
    plan.run(FakeArray(host), res, np.float32(0), None)
    assert len(allocations) == 1  # the legacy stream orders the next call's launches after


def test_partials_are_not_shared_off_the_default_stream_or_in_a_capture(allocations, monkeypatch):
    from fastlaunch import _core

    host = np.arange(1000, dtype=np.float32)
    plan = reduce.Plan(RecordingKernel(), 1000)
    stream = object()
    for _ in range(2):
        plan.run(FakeArray(host), None, np.float32(0), stream)
    assert len(allocations) == 2 and plan.spares == []
    monkeypatch.setattr(_core, "followed_capture", lambda: 0x1234)  # a capture follows 0
    for _ in range(2):
        plan.run(FakeArray(host), None, np.float32(0), 0)
    assert len(allocations) == 4 and plan.spares == []


def test_with_res_on_a_per_thread_default_stream_the_partials_are_not_kept(
    allocations, monkeypatch
):
    from fastlaunch import _numba_compat

    monkeypatch.setattr(_numba_compat.config(), "CUDA_PER_THREAD_DEFAULT_STREAM", True)
    host = np.arange(1000, dtype=np.float32)
    plan = reduce.Plan(RecordingKernel(), 1000)
    res = FakeArray(np.zeros(1, np.float32))
    for _ in range(2):
        plan.run(FakeArray(host), res, np.float32(0), 0)
    assert len(allocations) == 2  # another thread's stream would not wait for this one's
    plan.run(FakeArray(host), None, np.float32(0), 0)
    assert plan.spares == [allocations[-1]]  # read back: done, kept


# -- the call: which calls a plan takes, and what it hands the plan ----------------------------


class FakeGpuData:
    """A numba-cuda device array's memory, as far as building arrays and views reads it."""

    class _Pointer:
        value = 0x10000

    device_ctypes_pointer = _Pointer()

    def view(self, start, stop=None):
        return self


def numba_array(shape, dtype=np.float32):
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    dtype = np.dtype(dtype)
    strides = tuple(int(s) for s in np.empty(shape, dtype).strides)
    return DeviceNDArray(shape, strides, dtype, gpu_data=FakeGpuData())


def test_the_result_is_read_as_one_element_copied_on_the_default_stream(monkeypatch):
    from fastlaunch import _core

    copies = []

    def copy_to_host(host, pointer, stream, nbytes):
        copies.append((host.shape, host.dtype, pointer, stream, nbytes))
        host[0] = 42.5

    monkeypatch.setattr(_core, "copy_to_host", copy_to_host)
    value = reduce.first_element(numba_array((65,), np.float64))
    assert copies == [((1,), np.dtype(np.float64), FakeGpuData._Pointer.value, 0, 8)]
    assert type(value) is np.float64 and value == 42.5  # numba-cuda's partials[0]: a scalar


@pytest.fixture
def planned_reduction(monkeypatch):
    """A reduction whose plans are recorded (not run) and whose numba-cuda calls are noted."""
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    from fastlaunch.ufuncs import kernels
    from fastlaunch.ufuncs import plans as ufunc_plans

    monkeypatch.setattr(ufunc_plans, "device", lambda: 0)
    # numba-cuda's own __getitem__ asks for a context first (none here); the slice is the same
    monkeypatch.setattr(DeviceNDArray, "__getitem__", DeviceNDArray._do_getitem)
    monkeypatch.setattr(kernels, "as_fastlaunch", lambda kernel: kernel)
    runs, numba_calls = [], []
    monkeypatch.setattr(
        reduce.Plan,
        "run",
        lambda plan, array, res, init, stream: runs.append((plan, array, res, init, stream)),
    )
    reduction = Reduce(lambda a, b: a + b)
    warned: list[str] = []

    class Kernel:  # what the plan reads of its kernel here
        def __init__(self, dtype):
            self.dtype = dtype

        def _warn_implicit_copy(self):
            warned.append(str(self.dtype))

    reduction._compile = Kernel
    copied: list[np.ndarray] = []

    def to_device(host, stream=0):
        copied.append(host)
        return numba_array(host.shape, host.dtype)

    monkeypatch.setattr(numba.cuda, "to_device", to_device)
    reduction.warned, reduction.copied = warned, copied

    def numba_call(owner, *args, **kws):
        numba_calls.append((args, kws))

    def call(*args, **kws):
        return reduce.call(reduction, args, kws, numba_call)

    return call, reduction, runs, numba_calls


def test_a_device_array_takes_a_plan_per_dtype_and_size(planned_reduction):
    call, reduction, runs, numba_calls = planned_reduction
    a = numba_array((1000,))
    call(a)
    call(a, init=3)
    call(numba_array((1000,), np.float64))
    call(a, size=700)  # sliced as numba-cuda slices it
    assert numba_calls == []
    assert [run[3] for run in runs[:2]] == [np.float32(0), np.float32(3)]
    assert type(runs[1][3]) is np.float32  # numba-cuda's cast of init
    assert runs[3][1].shape == (700,)
    assert sorted(key[1:] for key in reduction._fastlaunch_plans) == [
        (np.dtype(np.float32), 700),
        (np.dtype(np.float32), 1000),
        (np.dtype(np.float64), 1000),
    ]
    assert runs[0][0] is runs[1][0]  # one plan for one dtype and size


def test_res_of_the_arrays_dtype_goes_to_the_plan(planned_reduction):
    call, _, runs, numba_calls = planned_reduction
    a, res = numba_array((256,)), numba_array((1,))
    call(a, res=res, stream=0)
    assert runs[0][2] is res and numba_calls == []


@pytest.mark.parametrize(
    "make_args",
    [
        lambda: ((np.arange(20.0)[::2],), {}),  # a non-contiguous host array: refused
        lambda: ((np.arange(10.0),), {"stream": 1}),  # a host array with a stream
        lambda: ((numba_array((4, 4)),), {}),  # 2-d: numba-cuda's TypeError
        lambda: ((numba_array((8,)),), {"res": numba_array((1,), np.float64)}),  # other dtype
        lambda: ((numba_array((8,)),), {"res": np.zeros(1, np.float32)}),  # a host res
        lambda: ((numba_array((8,)),), {"other": 1}),  # numba-cuda's TypeError
        lambda: ((numba_array((8,)), 3), {}),
    ],
    ids=["host strided", "host stream", "2-d", "res dtype", "host res", "keyword", "positional"],
)
def test_what_a_plan_does_not_take_is_numba_cudas_call(planned_reduction, make_args):
    call, _, runs, numba_calls = planned_reduction
    args, kws = make_args()
    call(*args, **kws)
    assert runs == [] and len(numba_calls) == 1


@pytest.mark.parametrize("size, launches", [(100, 1), (256, 1), (1000, 2)])
def test_a_host_array_is_copied_once_with_numba_cudas_warning_per_launch(
    planned_reduction, size, launches
):
    call, reduction, runs, numba_calls = planned_reduction
    host = np.arange(size, dtype=np.float32)
    call(host)
    assert numba_calls == [] and len(runs) == 1
    (copied,) = reduction.copied
    assert copied is host  # one copy, of the whole array
    assert runs[0][1].shape == (size,) and runs[0][1] is not host
    # numba-cuda passes the host array to each kernel that reads it: a warning each
    assert reduction.warned == ["float32"] * launches


class CoreStream:
    """What numba-cuda's launch makes of a stream (a cuda.core ``Stream``): its handle."""

    def __init__(self, handle: int) -> None:
        self.handle = handle


def test_a_host_array_on_a_stream_raises_what_numba_cudas_launch_raises(
    planned_reduction, monkeypatch
):
    """numba-cuda 0.30's launch reads a host argument through DLPack with the launch's stream,
    which NumPy refuses: its own ``cuda.reduce`` of a host array on a stream raises that, after
    casting ``init`` (whose warning comes first) and compiling. Under ``install()`` its call
    launches fastlaunch's kernels, which would take the array: the refusal is made first. The
    default stream (handle 0), an empty slice and other dimensions are numba-cuda's call."""
    import re
    import warnings

    from numba.cuda.cudadrv import devicearray

    from fastlaunch import _numba_compat

    if not hasattr(devicearray, "_make_strided_memory_view"):
        pytest.skip("this numba-cuda copies a host array on any stream (before 0.30)")
    call, reduction, runs, numba_calls = planned_reduction
    stream, default_stream = object(), object()
    handles = {id(stream): 0x1234, id(default_stream): 0}
    monkeypatch.setattr(_numba_compat, "core_stream", lambda s: CoreStream(handles[id(s)]))
    try:
        np.arange(3.0).__dlpack__(stream=0x1234)
    except Exception as error:  # RuntimeError in NumPy 2.4
        refusal = error
    host = np.arange(1000, dtype=np.int32)
    with pytest.raises(type(refusal), match=re.escape(str(refusal))):
        call(host, stream=stream)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(type(refusal)):
            call(host, stream=stream, init=np.float64("nan"))
    assert [w.category for w in caught] == [RuntimeWarning]  # numba-cuda's cast of init, once
    with pytest.raises(OverflowError):  # numba-cuda's cast raises before its launch
        call(host, stream=stream, init=2**40)
    assert numba_calls == [] and runs == []
    call(host, stream=default_stream)
    call(host, stream=stream, size=0)
    call(host.reshape(10, 100), stream=stream)
    assert len(numba_calls) == 3 and runs == []


def test_init_is_cast_before_the_kernel_is_compiled(planned_reduction):
    call, reduction, runs, numba_calls = planned_reduction
    compiled = []
    reduction._compile = lambda dtype: compiled.append(dtype)
    with pytest.raises(OverflowError):
        call(numba_array((100,), np.int32), init=2**40)  # numba-cuda's order
    assert compiled == []
