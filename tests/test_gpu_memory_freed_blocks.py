"""The freed-block cache on the GPU (`rust/ext/src/memory/freed_blocks.rs`): a block freed while
its earlier user still runs on one stream, handed out again at once on another (legacy,
blocking or non-blocking), and written or read there, never races that user; numba-cuda's
deferred cleanup (`test_deallocations`' expectations) still holds frees back, and what is
kept shows in `pool_usage` and goes with `pool_trim`. The stand-in twins are in
`test_cpu_memory_freed_blocks.py`."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import fastlaunch as fl
from fastlaunch import _core
from fastlaunch import memory as flm
from fastlaunch.memory import transfers

pytestmark = pytest.mark.gpu

N = 4096  # float64: 32 KiB, a size class the cache keeps
SPINS = 1 << 20  # a kernel that keeps its stream busy for a while


@fl.jit
def slow_copy(out, a, spins):
    i = cuda.grid(1)
    if i < a.size:
        t = a[i]
        for _ in range(spins):  # floating point: not folded away; stays a[i], exactly
            t = t * 0.5 + a[i] * 0.5
        out[i] = t


@fl.jit
def fill(a, value):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = value


_owned = []


def _stream(kind):
    """A numba-cuda stream of `kind`: the legacy default stream (0), a blocking stream, or a
    non-blocking one (kept alive for the session: an external stream's owner outlives it)."""
    if kind == "legacy":
        return 0
    if kind == "blocking":
        return flm.stream()
    _owned.append(_core.Stream.create(True))
    return cuda.external_stream(_owned[-1].handle)


def _address(array):
    return array.device_ctypes_pointer.value


def _flush():
    cuda.current_context().memory_manager.deallocations.clear()


@pytest.fixture(scope="module", autouse=True)
def _kernels_launched_once():
    """The kernels compiled and launched once before the tests: these tests are about the
    cache, and the arguments of a kernel's first launch were seen to stay referenced after it
    (``test_gpu_launch.py::test_the_arrays_of_a_launch_are_released_when_dropped``)."""
    a = fl.device_array(N)
    slow_copy[N // 256, 256](a, a, 0)
    fill[N // 256, 256](a, 0.0)
    cuda.synchronize()


@pytest.fixture(autouse=True)
def _an_empty_cache():
    """Each test starts with nothing kept: a class filled by earlier tests would not keep the
    block a test frees, and would hand out another."""
    _flush()
    _core.pool_trim(_core.current_device() or 0)


KINDS = ("legacy", "blocking", "non-blocking")


@pytest.mark.parametrize("reused_on", KINDS)
@pytest.mark.parametrize("used_on", KINDS)
def test_a_block_written_late_by_its_earlier_user_is_reused_after_it(used_on, reused_on):
    """The earlier user writes the block at the end of a long kernel; the block is freed and
    handed out again at once on another stream, which fills it: the fill lands after the
    earlier user's write (the block holds the fill)."""
    first, then = _stream(used_on), _stream(reused_on)
    source = fl.to_device(np.arange(N, dtype=np.float64))
    cuda.synchronize()
    old = fl.device_array(N, stream=first)
    address = _address(old)
    slow_copy[N // 256, 256, first](old, source, SPINS)  # writes `old` late
    del old
    _flush()
    new = fl.device_array(N, stream=then)
    assert _address(new) == address  # the cache handed the block out again
    fill[N // 256, 256, then](new, -1.0)
    cuda.synchronize()
    assert (transfers.copy_to_host(new) == -1.0).all()


@pytest.mark.parametrize("reused_on", KINDS)
@pytest.mark.parametrize("used_on", KINDS)
def test_a_block_read_late_by_its_earlier_user_is_not_overwritten_before(used_on, reused_on):
    """The earlier user reads the block in a long kernel; the block is freed and handed out
    again at once on another stream, which overwrites it: the earlier user read the values it
    was given."""
    first, then = _stream(used_on), _stream(reused_on)
    host = np.arange(N, dtype=np.float64)
    old = fl.to_device(host, stream=first)
    out = fl.device_array(N, stream=first)
    address = _address(old)
    slow_copy[N // 256, 256, first](out, old, SPINS)  # reads `old` throughout
    del old
    _flush()
    new = fl.device_array(N, stream=then)
    assert _address(new) == address
    fill[N // 256, 256, then](new, -1.0)
    cuda.synchronize()
    assert np.array_equal(transfers.copy_to_host(out), host)


def test_values_written_on_one_stream_survive_a_reuse_on_a_non_blocking_stream():
    """A block's new owner on a non-blocking stream writes it, copies it back on that stream:
    it reads its own values, never the earlier owner's queued behind a long kernel."""
    blocking, side = _stream("blocking"), _stream("non-blocking")
    source = fl.to_device(np.arange(N, dtype=np.float64))
    for _ in range(4):
        old = fl.device_array(N, stream=blocking)
        slow_copy[N // 256, 256, blocking](old, source, SPINS // 4)
        del old
        _flush()
        new = fl.to_device(np.full(N, 7.0), stream=side)
        back = new.copy_to_host(stream=side)
        side.synchronize()
        assert (back == 7.0).all()
    cuda.synchronize()


def test_defer_cleanup_holds_frees_back_then_the_blocks_are_kept():
    """numba-cuda's `TestDeferCleanup.test_basic`, installed: inside `defer_cleanup()` the
    frees wait in the queue (counted there, nothing kept); flushed after it, the blocks are
    kept by the cache and serve the next allocations of their class."""
    device = _core.current_device() or 0
    with fl.install():
        harr = np.arange(N, dtype=np.float64)
        darr1 = cuda.to_device(harr)
        deallocs = cuda.current_context().memory_manager.deallocations
        deallocs.clear()
        with cuda.defer_cleanup():
            darr2 = cuda.to_device(harr)  # may take a block the cache kept: counted after it
            cached_before = _core.pool_usage(device)[2]
            addresses = {_address(darr1), _address(darr2)}
            del darr1
            assert len(deallocs) == 1
            del darr2
            assert len(deallocs) == 2
            deallocs.clear()
            assert len(deallocs) == 2
            assert _core.pool_usage(device)[2] == cached_before
        deallocs.clear()
        assert len(deallocs) == 0
        assert _core.pool_usage(device)[2] >= cached_before + 2 * harr.nbytes
        again = [cuda.device_array(N) for _ in range(2)]
        assert {_address(a) for a in again} == addresses


def test_pool_trim_empties_it_and_usage_counts_it():
    device = _core.current_device() or 0
    arrays = [fl.device_array(N) for _ in range(4)]
    used = _core.pool_usage(device)[0]
    del arrays
    used_after, _, cached = _core.pool_usage(device)
    assert cached >= 4 * N * 8
    assert used_after <= used - 4 * N * 8  # what the cache holds is not counted as used
    _core.pool_trim(device)
    assert _core.pool_usage(device)[2] == 0
    cuda.synchronize()
