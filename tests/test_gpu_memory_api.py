"""numba-cuda's memory API on the Rust core (`fastlaunch.memory`), side by side with numba-cuda
on the GPU: the same objects (numba-cuda's), the same contents, dtypes, shapes and strides;
frees ordered after the streams that used the memory; bounded memory; threads; install."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
from numba import cuda
from numba.cuda.cudadrv.devicearray import DeviceNDArray
from numba.cuda.cudadrv.driver import CudaAPIError
from numba.cuda.decorators import jit as numba_jit

import fastlaunch as fl
from fastlaunch import _core
from fastlaunch import memory as flm
from fastlaunch.memory import transfers

pytestmark = pytest.mark.gpu

RECORD = np.dtype([("a", np.float32), ("b", np.int16)])

HOST_ARRAYS = {
    "C": lambda: np.arange(12.0).reshape(3, 4),
    "F": lambda: np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    "0-d": lambda: np.array(2.5),
    "empty": lambda: np.zeros((0, 3), np.float32),
    "bool": lambda: np.array([True, False, True]),
    "complex": lambda: np.arange(5) * (1 + 2j),
    "datetime": lambda: np.arange(6).astype("datetime64[s]"),
    "record": lambda: np.zeros(3, RECORD),
    "non-contiguous": lambda: np.arange(10.0)[::2],
}


def described(array):
    return array.shape, array.strides, array.dtype


@pytest.mark.parametrize("make", HOST_ARRAYS.values(), ids=HOST_ARRAYS.keys())
def test_to_device_and_back_as_numba_cuda(make):
    host = make()
    try:
        plain = cuda.to_device(host)
    except Exception as numba_error:  # what numba-cuda refuses, fastlaunch refuses alike
        with pytest.raises(type(numba_error)):
            fl.to_device(host)
        return
    fast = fl.to_device(host)
    assert type(fast) is DeviceNDArray
    assert described(fast) == described(plain)
    back_plain, back_fast = plain.copy_to_host(), transfers.copy_to_host(fast)
    assert described(back_fast) == described(back_plain)
    assert np.array_equal(back_fast, back_plain)
    cai_plain, cai_fast = plain.__cuda_array_interface__, fast.__cuda_array_interface__
    assert {**cai_plain, "data": None} == {**cai_fast, "data": None}


@pytest.mark.parametrize("order", ["C", "F"])
def test_device_array_and_like_as_numba_cuda(order):
    host = np.zeros((3, 5), np.float32, order=order)
    for plain, fast in [
        (
            cuda.device_array((3, 5), np.int16, order=order),
            fl.device_array((3, 5), np.int16, order=order),
        ),
        (cuda.device_array_like(host), fl.device_array_like(host)),
        (cuda.device_array_like(host[:, ::2]), fl.device_array_like(host[:, ::2])),
        (cuda.device_array(0), fl.device_array(0)),
    ]:
        assert type(fast) is DeviceNDArray
        assert described(fast) == described(plain)


def test_pinned_arrays_as_numba_cuda():
    plain, fast = cuda.pinned_array((4, 3), np.int64), fl.pinned_array((4, 3), np.int64)
    assert type(fast) is np.ndarray and described(fast) == described(plain)
    fast[:] = 3
    assert np.array_equal(fl.to_device(fast).copy_to_host(), fast)
    like = fl.pinned_array_like(np.zeros((2, 2), order="F"))
    assert described(like) == described(cuda.pinned_array_like(np.zeros((2, 2), order="F")))


@pytest.mark.parametrize("wrong", [np.zeros(5), np.zeros(6, np.float32)], ids=["shape", "dtype"])
def test_copy_to_host_into_a_wrong_array_raises_what_numba_cuda_raises(wrong):
    plain, fast = cuda.to_device(np.arange(6.0)), fl.to_device(np.arange(6.0))
    with pytest.raises(Exception) as numba_raised:
        plain.copy_to_host(wrong)
    with pytest.raises(type(numba_raised.value)):
        transfers.copy_to_host(fast, wrong)


STREAMS = {
    "legacy": lambda: 0,
    "per-thread": lambda: cuda.per_thread_default_stream(),
    "numba": lambda: cuda.stream(),
    "fastlaunch": lambda: flm.stream(),
    "external": lambda: cuda.external_stream(_owned_stream().handle),
}

_owned_streams: list = []


def _owned_stream():
    """A stream fastlaunch owns, kept alive for the test session (an external stream's
    owner must outlive its use)."""
    _owned_streams.append(_core.Stream.create(False))
    return _owned_streams[-1]


@pytest.mark.parametrize("make_stream", STREAMS.values(), ids=STREAMS.keys())
def test_transfers_on_every_kind_of_stream(make_stream):
    stream = make_stream()
    host = np.random.default_rng(1).random(40_000)
    device = fl.to_device(host, stream=stream)
    other = fl.device_array_like(host, stream=stream)
    transfers.copy_to_device(other, device, stream=stream)
    back = transfers.copy_to_host(other, stream=stream)
    assert np.array_equal(back, host)


@numba_jit
def slow_copy(out, a, spins):
    i = cuda.grid(1)
    if i < a.size:
        t = a[i]
        for _ in range(spins):  # keeps the stream busy (floating point: not folded away)
            t = t * 0.5 + a[i] * 0.5  # stays a[i], exactly
        out[i] = t


def test_no_use_after_free_across_streams():
    """A long kernel on stream A reads an array; the array is dropped (its free flushed); new
    allocations on stream B are written at once: A's result is intact."""
    a_stream, b_stream = flm.stream(), flm.stream()
    host = np.arange(1 << 16, dtype=np.float64)
    source = fl.to_device(host, stream=a_stream)
    out = fl.device_array_like(host, stream=a_stream)
    slow_copy[(1 << 16) // 256, 256, a_stream](out, source, 1 << 20)
    del source
    cuda.current_context().memory_manager.deallocations.clear()  # the free is enqueued now
    for _ in range(8):
        scribble = fl.device_array(1 << 16, np.float64, stream=b_stream)
        transfers.copy_to_device(scribble, np.full(1 << 16, -1.0), stream=b_stream)
    a_stream.synchronize()
    assert np.array_equal(transfers.copy_to_host(out), host)


def test_defer_cleanup_holds_frees_back():
    used_before = _core.pool_usage(_core.current_device() or 0)[0]
    with cuda.defer_cleanup():
        arrays = [fl.device_array(1 << 20, np.uint8) for _ in range(20)]
        del arrays
        held = _core.pool_usage(_core.current_device() or 0)[0] - used_before
        assert held >= 20 << 20  # not freed inside defer_cleanup
    cuda.current_context().memory_manager.deallocations.clear()
    cuda.synchronize()
    assert _core.pool_usage(_core.current_device() or 0)[0] - used_before < 20 << 20


def test_memory_stays_bounded_over_many_rounds():
    device = _core.current_device() or 0
    host = np.ones(4096)
    fl.to_device(host)
    before = _core.pool_usage(device)[0]
    for _ in range(100_000):
        fl.to_device(host)
    cuda.synchronize()
    assert _core.pool_usage(device)[0] - before < 64 << 20  # what this process's pool holds


def test_eight_threads_allocating_copying_and_dropping():
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(200):
                host = rng.random(rng.integers(1, 5000))
                device = fl.to_device(host)
                assert np.array_equal(transfers.copy_to_host(device), host)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_kernels_read_and_write_pool_arrays():
    @fl.jit
    def double(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] *= 2

    device = fl.to_device(np.arange(100.0))
    double[1, 128](device)
    slow_copy[1, 128](device, device, 0)
    assert np.array_equal(transfers.copy_to_host(device), np.arange(100.0) * 2)


def test_installed_numba_cuda_names_are_fastlaunchs_and_come_back():
    originals = cuda.to_device, cuda.stream, DeviceNDArray.copy_to_host
    with fl.install():
        assert cuda.to_device is fl.to_device
        d = cuda.to_device(np.arange(8.0))
        d[2:4] = np.array([7.0, 7.0])  # numba-cuda's __setitem__, through the staged copy
        s = cuda.stream()
        assert type(s).__name__ == "Stream" and "CUDA stream" in repr(s)
        e1, e2 = cuda.event(), cuda.event()
        e1.record(s)
        e2.record(s)
        e2.synchronize()
        assert e1.elapsed_time(e2) >= 0
        assert d.copy_to_host(stream=s).tolist() == [0, 1, 7, 7, 4, 5, 6, 7]
        cuda.synchronize()
    assert (cuda.to_device, cuda.stream, DeviceNDArray.copy_to_host) == originals


def test_out_of_memory_raises_numba_cudas_error_and_leaks_nothing():
    device = _core.current_device() or 0
    before = _core.pool_usage(device)[0]
    with pytest.raises(CudaAPIError):
        fl.device_array(1 << 50, np.uint8)
    assert _core.pool_usage(device)[0] <= before  # (the retry flushed pending frees)


def test_ipc_handles_of_pool_memory_are_refused_clearly():
    """Deliberate (docs/memory.md): memory from the stream-ordered pool cannot be exported
    through cuIpcGetMemHandle, which numba-cuda's IPC handles use."""
    with pytest.raises(CudaAPIError):  # numba-cuda's own error from the driver
        fl.to_device(np.arange(4.0)).get_ipc_handle()


RESET_WITH_MEMORY_OUTSTANDING = """
import gc
import numpy as np
from numba import cuda
import fastlaunch as fl
from fastlaunch import _core
kept = [fl.to_device(np.arange(1000.0)) for _ in range(5)]
cuda.synchronize()
used = _core.pool_usage(0)[0]
cuda.close()  # the pool memory goes with the context
del kept
gc.collect()  # their frees find their context gone: nothing to do, nothing raised
print(used >= 5 * 8000, _core.pool_usage(0)[0])
"""


def test_closing_the_context_with_pool_memory_outstanding():
    done = subprocess.run(
        [sys.executable, "-c", RESET_WITH_MEMORY_OUTSTANDING],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no exception ignored in a finalizer
    assert done.stdout.strip() == "True 0"


VIEW_ITEMS = [slice(1, -1), slice(None, 3), slice(2, None), slice(3, 1), slice(None, None, 2)]


@pytest.mark.parametrize("make", list(HOST_ARRAYS.values())[:2], ids=["C", "F"])
def test_views_reshape_and_ravel_as_numba_cuda(make):
    from fastlaunch.memory import views

    host = make()
    plain, fast = cuda.to_device(host), fl.to_device(host)
    for item in VIEW_ITEMS:
        theirs, ours = plain[item], views.getitem(fast, item)
        assert type(ours) is DeviceNDArray and described(ours) == described(theirs)
        assert ours.stream == theirs.stream and ours.alloc_size == theirs.alloc_size
        assert np.array_equal(transfers.copy_to_host(ours), theirs.copy_to_host())
    for shape in [(host.size,), (-1,), host.shape]:
        theirs, ours = plain.reshape(*shape), views.reshape(fast, *shape)
        assert described(ours) == described(theirs)
        assert np.array_equal(transfers.copy_to_host(ours), theirs.copy_to_host())
    for order in "CF":
        try:
            theirs = plain.ravel(order=order)
        except NotImplementedError:
            with pytest.raises(NotImplementedError):
                views.ravel(fast, order=order)
            continue
        ours = views.ravel(fast, order=order)
        assert described(ours) == described(theirs)
        assert np.array_equal(transfers.copy_to_host(ours), theirs.copy_to_host())
    # T: numba-cuda's transpose kernel, into a new array from the pool
    theirs, ours = plain.T, fast.T
    assert type(ours) is DeviceNDArray and described(ours) == described(theirs)
    assert np.array_equal(transfers.copy_to_host(ours), theirs.copy_to_host())


BAD_INPUT = {
    "object dtype": lambda f: f.to_device(np.array([object(), 1], dtype=object)),
    "not an array": lambda f: f.to_device(object()),
    "strings": lambda f: f.to_device(np.array(["ab", "c"])),
    "negative shape": lambda f: f.device_array((-1, 3)),
    "float shape": lambda f: f.device_array((2.0, 3)),
    "misaligned view": lambda f: f.to_device(
        np.frombuffer(bytes(17), dtype=np.float64, offset=1, count=2)
    ),
}


@pytest.mark.parametrize("call", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_raises_what_numba_cuda_raises(call):
    try:
        plain = call(cuda)
    except Exception as numba_error:
        with pytest.raises(type(numba_error)):
            call(fl)
        return
    fast = call(fl)  # numba-cuda takes it: so does fastlaunch, with the same result
    assert type(fast) is type(plain) and described(fast) == described(plain)
    if plain.dtype.kind != "O":  # (the bytes of object pointers make no host array)
        assert np.array_equal(transfers.copy_to_host(fast), plain.copy_to_host())


def test_frees_wait_for_a_copy_on_a_non_blocking_stream():
    """An array allocated on the legacy stream is filled by a copy queued on a non-blocking
    stream behind a long kernel, then dropped: its memory is not handed out before that copy
    ran (the free follows the copy's stream), so arrays allocated and written on another
    stream at once keep their contents."""
    owner = _owned_stream_non_blocking()
    side = cuda.external_stream(owner.handle)
    other = flm.stream()
    n = 1 << 16
    host = np.arange(n, dtype=np.float64)
    busy_in, busy_out = fl.to_device(host), fl.device_array(n)
    cuda.synchronize()
    slow_copy[n // 256, 256, side](busy_out, busy_in, 1 << 20)  # keeps `side` busy
    dropped = fl.device_array(n)
    transfers.copy_to_device(dropped, host, stream=side)  # runs after the long kernel
    del dropped
    cuda.current_context().memory_manager.deallocations.clear()
    kept = _scribbled_at_once(other, n)
    other.synchronize()
    side.synchronize()
    for fresh in kept:
        assert (transfers.copy_to_host(fresh) == -1.0).all()


def _scribbled_at_once(stream, n):
    """Eight new arrays of `n` float64 allocated and filled with -1 on `stream` at once: what
    would overwrite memory the pool handed out again too early."""
    kept = []
    for _ in range(8):
        fresh = fl.device_array(n, stream=stream)
        transfers.copy_to_device(fresh, np.full(n, -1.0), stream=stream)
        kept.append(fresh)
    return kept


@fl.jit
def slow_copy_fastlaunch(out, a, spins):
    i = cuda.grid(1)
    if i < a.size:
        t = a[i]
        for _ in range(spins):
            t = t * 0.5 + a[i] * 0.5
        out[i] = t


def test_no_use_after_free_after_a_kernel_on_a_non_blocking_stream():
    """A long fastlaunch kernel on a non-blocking stream reads an array allocated on the legacy
    stream; the array is dropped (its free, on the legacy stream, flushed); arrays allocated
    and written on another stream at once do not get its memory while the kernel reads it."""
    side = cuda.external_stream(_owned_stream_non_blocking().handle)
    other = flm.stream()
    n = 1 << 16
    host = np.arange(n, dtype=np.float64)
    source, out = fl.to_device(host), fl.device_array(n)
    cuda.synchronize()
    slow_copy_fastlaunch[n // 256, 256, side](out, source, 1 << 20)
    del source
    cuda.current_context().memory_manager.deallocations.clear()
    _held = _scribbled_at_once(other, n)  # alive while the kernel may still read
    side.synchronize()
    assert np.array_equal(transfers.copy_to_host(out), host)


def test_a_free_follows_work_on_a_non_blocking_stream_destroyed_since():
    """An array is allocated, filled and read on a non-blocking stream, behind a long kernel
    there; the stream is destroyed (its work runs on), then the array is dropped and its free
    flushed: arrays allocated and written on another stream at once do not get its memory
    before that work ran (the free waits on an event recorded after it, never on the
    stream's handle, which may be gone or another stream's by then)."""
    handle = _core.stream_create(non_blocking=True)
    side = cuda.external_stream(handle)
    other = flm.stream()
    n = 1 << 16
    host = np.arange(n, dtype=np.float64)
    busy_in, out = fl.to_device(host), fl.device_array(n)
    cuda.synchronize()
    slow_copy_fastlaunch[n // 256, 256, side](out, busy_in, 1 << 20)  # keeps `side` busy
    dropped = fl.device_array(n, stream=side)
    transfers.copy_to_device(dropped, host + 1, stream=side)  # after the long kernel
    slow_copy_fastlaunch[n // 256, 256, side](out, dropped, 1)  # reads it, after that
    del side
    _core.stream_destroy(handle)
    del dropped
    cuda.current_context().memory_manager.deallocations.clear()
    kept = _scribbled_at_once(other, n)
    other.synchronize()
    cuda.synchronize()
    assert np.array_equal(transfers.copy_to_host(out), host + 1)
    for fresh in kept:
        assert (transfers.copy_to_host(fresh) == -1.0).all()


def test_a_kernel_on_a_non_blocking_stream_sees_what_to_device_copied():
    """`to_device` with no stream returns once the bytes are staged, its copy queued on the
    legacy stream (here behind a long kernel); a fastlaunch kernel launched at once on a
    non-blocking stream reads the copied values, as under numba-cuda (whose copy waits)."""
    side = cuda.external_stream(_owned_stream_non_blocking().handle)
    n = 1 << 16
    host = np.arange(n, dtype=np.float64)
    busy_in, busy_out = fl.to_device(host), fl.device_array(n)
    results = []
    for to_device in (cuda.to_device, fl.to_device):
        slow_copy[n // 256, 256](busy_out, busy_in, 1 << 20)  # keeps the legacy stream busy
        source = to_device(host + 1)
        out = fl.device_array(n, stream=side)
        slow_copy_fastlaunch[n // 256, 256, side](out, source, 1)
        side.synchronize()
        results.append(transfers.copy_to_host(out))
    assert np.array_equal(results[0], host + 1)
    assert np.array_equal(results[1], host + 1)


def _owned_stream_non_blocking():
    _owned_streams.append(_core.Stream.create(True))
    return _owned_streams[-1]


def test_installed_ipc_refuses_pool_memory_with_a_reason_and_keeps_numba_cudas_own():
    with fl.install():
        pooled = cuda.to_device(np.arange(4.0))
        with pytest.raises(CudaAPIError, match="stream-ordered pool"):
            pooled.get_ipc_handle()
        with pytest.raises(CudaAPIError, match="stream-ordered pool"):
            pooled[1:].get_ipc_handle()
        own = DeviceNDArray(pooled.shape, pooled.strides, pooled.dtype)  # numba-cuda's memory
        own.copy_to_device(pooled)
        handle = own.get_ipc_handle()
        assert handle is not None


def test_installed_views_are_fastlaunchs_and_numba_cudas_come_back():
    originals = {n: getattr(DeviceNDArray, n) for n in ("__getitem__", "reshape", "ravel")}
    with fl.install():
        d = cuda.to_device(np.arange(10.0))
        assert d[1:-1].copy_to_host().tolist() == list(np.arange(1.0, 9.0))
        assert d.reshape(2, 5).ravel().copy_to_host().tolist() == list(np.arange(10.0))
        assert d[3] == 3.0  # an element: numba-cuda's path, copied through fastlaunch
    assert {n: getattr(DeviceNDArray, n) for n in originals} == originals


EMM_PLUGIN_PROGRAM = """
import weakref
import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver
import fastlaunch as fl

class Counting(driver.GetIpcHandleMixin, driver.HostOnlyCUDAMemoryManager):
    allocated = freed = 0

    def initialize(self):
        pass

    def memalloc(self, size):
        Counting.allocated += 1
        pointer = driver.driver.cuMemAlloc(size)

        def finalizer():
            Counting.freed += 1
            driver.driver.cuMemFree(pointer)

        return driver.MemoryPointer(weakref.proxy(self.context), pointer, size, finalizer=finalizer)

    def get_memory_info(self):
        return driver.MemoryInfo(free=0, total=0)

    @property
    def interface_version(self):
        return 1

cuda.set_memory_manager(Counting)
host = np.arange(1000.0)
with fl.install():
    d = cuda.to_device(host)
    e = cuda.device_array_like(host)
    e.copy_to_device(d)
    same = np.array_equal(e[10:20].copy_to_host(), host[10:20])
    plugin = type(d.gpu_data) is driver.MemoryPointer
    del d, e
    cuda.synchronize()
print(Counting.allocated, Counting.freed, same, plugin)
"""


def test_an_emm_plugin_still_allocates_and_the_rest_stays_fast():
    done = subprocess.run(
        [sys.executable, "-c", EMM_PLUGIN_PROGRAM], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2", "True", "True"]


def test_copies_and_pickling_behave_as_numba_cudas():
    import copy
    import pickle

    plain, fast = cuda.to_device(np.arange(4.0)), fl.to_device(np.arange(4.0))
    stream = cuda.stream()
    bound = fast.bind(stream)
    assert bound.stream is stream and bound.gpu_data is fast.gpu_data
    assert described(copy.copy(fast)) == described(fast)
    try:
        pickle.dumps(plain)
    except Exception as numba_error:
        with pytest.raises(type(numba_error)):
            pickle.dumps(fast)
    else:
        assert pickle.loads(pickle.dumps(fast)).shape == fast.shape


def test_events_and_stream_synchronize_as_numba_cuda():
    def run():
        stream = cuda.stream()
        start, end, untimed = cuda.event(), cuda.event(), cuda.event(timing=False)
        outcome = []
        try:
            start.elapsed_time(end)  # neither recorded
        except CudaAPIError as error:
            outcome.append(error.code)
        start.record(stream)
        end.record(stream)
        untimed.record()
        end.wait(cuda.default_stream())
        stream.synchronize()
        end.synchronize()
        cuda.synchronize()
        outcome += [start.query(), end.query(), untimed.query(), start.elapsed_time(end) >= 0]
        try:
            start.elapsed_time(untimed)  # no timing
        except CudaAPIError as error:
            outcome.append(error.code)
        with pytest.raises(TypeError):
            start.record("not a stream")
        return outcome

    plain = run()
    with fl.install():
        assert type(cuda.event()).__name__ == "Event"
        assert run() == plain


SET_VALUES = {
    "matching": lambda: np.arange(6.0).reshape(2, 3),
    "cast": lambda: np.arange(6, dtype=np.float32).reshape(2, 3),
    "broadcast row": lambda: np.arange(3.0),
    "scalar": lambda: 4.5,
    "wrong shape": lambda: np.arange(4.0),
}


@pytest.mark.parametrize("make", SET_VALUES.values(), ids=SET_VALUES.keys())
def test_slice_assignment_as_numba_cuda(make):
    host = np.zeros((4, 3))
    plain, fast = cuda.to_device(host), fl.to_device(host)
    try:
        plain[1:3] = make()
    except Exception as numba_error:
        with pytest.raises(type(numba_error)):
            transfers.setitem(fast, slice(1, 3), make())
        return
    transfers.setitem(fast, slice(1, 3), make())
    assert np.array_equal(transfers.copy_to_host(fast), plain.copy_to_host())


def test_copy_to_host_into_a_read_only_array_raises_what_numba_cuda_raises():
    out = np.zeros(6)
    out.flags.writeable = False
    plain, fast = cuda.to_device(np.arange(6.0)), fl.to_device(np.arange(6.0))
    try:
        plain.copy_to_host(out)
    except Exception as numba_error:
        with pytest.raises(type(numba_error)):
            transfers.copy_to_host(fast, out)
    else:  # numba-cuda writes it: so does fastlaunch (its own path)
        assert transfers.copy_to_host(fast, out) is out
