"""The memory core's `_core` face on the GPU (`rust/ext/src/memory/`): bytes round trips
through the driver's pool and the staging ring (small copies) or straight from and to pageable
memory (larger ones), the pool's settings and usage, out of memory, streams and events by
handle, and a free ordered after another stream's work. Usage is read from this process's
pool, never from the device's free memory, so other work on the GPU does not matter."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from numba import cuda

import fastlaunch
from fastlaunch import _core
from fastlaunch.errors import CudaDriverError

pytestmark = pytest.mark.gpu

SIZES = [0, 1, 32 * 1024, 3 * 1024 * 1024]


@pytest.fixture
def stream() -> Iterator[int]:
    handle = _core.stream_create(non_blocking=True)
    yield handle
    _core.stream_synchronize(handle)
    _core.stream_destroy(handle)


@pytest.mark.parametrize("nbytes", SIZES)
@pytest.mark.parametrize("on", ["legacy default stream", "created stream"])
def test_bytes_go_round(nbytes: int, on: str, stream: int) -> None:
    handle = 0 if on == "legacy default stream" else stream
    host = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    device, other = _core.mem_alloc(nbytes, handle), _core.mem_alloc(nbytes, handle)
    assert (device == 0) == (nbytes == 0)
    _core.copy_to_device(device, host, handle)
    _core.copy_device(other, device, nbytes, handle)
    back = np.zeros_like(host)
    _core.copy_to_host(back, other, handle)
    assert np.array_equal(back, host)
    _core.memset(other, 7, nbytes, handle)
    _core.copy_to_host(back, other, handle)
    assert (back == 7).all()
    _core.mem_free(device, handle)
    _core.mem_free(other, handle)


def test_a_copy_to_the_device_may_reuse_its_host_buffer_at_once(stream: int) -> None:
    # copy_to_device returns once the bytes are taken: overwriting the source right after
    # changes nothing on the device, for staged (small) and direct (large) copies alike.
    for nbytes in SIZES[1:]:
        host = np.full(nbytes, 5, np.uint8)
        device = _core.mem_alloc(nbytes, stream)
        _core.copy_to_device(device, host, stream)
        host[:] = 9
        back = np.zeros(nbytes, np.uint8)
        _core.copy_to_host(back, device, stream)
        assert (back == 5).all(), nbytes
        _core.mem_free(device, stream)


def test_the_release_threshold_is_set_and_read() -> None:
    before = _core.pool_release_threshold(0)
    try:
        _core.set_pool_release_threshold(0, 1 << 30)
        assert _core.pool_release_threshold(0) == 1 << 30
        _core.set_pool_release_threshold(0, 12345)
        assert _core.pool_release_threshold(0) == 12345
    finally:
        _core.set_pool_release_threshold(0, before)


def test_pool_usage_follows_this_processs_allocations() -> None:
    nbytes = 8 << 20
    before = _core.pool_release_threshold(0)
    _core.set_pool_release_threshold(0, 1 << 30)
    try:
        _core.context_synchronize()
        used_before, _, _ = _core.pool_usage(0)
        pointer = _core.mem_alloc(nbytes)
        used, reserved, _ = _core.pool_usage(0)
        assert used - used_before >= nbytes
        assert reserved >= used
        _core.mem_free(pointer)
        _core.context_synchronize()
        used_after, reserved_after, _ = _core.pool_usage(0)
        assert used_after <= used - nbytes
        assert reserved_after >= nbytes  # kept: below the release threshold
        _core.pool_trim(0, 0)
        assert _core.pool_usage(0)[1] <= reserved_after
    finally:
        _core.set_pool_release_threshold(0, before)


def test_out_of_memory_names_the_cuda_error() -> None:
    # (by name: a test that reloads fastlaunch.errors leaves two CudaDriverError classes)
    with pytest.raises(Exception, match="CUDA_ERROR_OUT_OF_MEMORY") as raised:
        _core.mem_alloc(1 << 50)
    assert type(raised.value).__name__ == CudaDriverError.__name__
    assert raised.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert raised.value.code == 2
    assert "CUDA_ERROR_OUT_OF_MEMORY" in str(raised.value)


def test_streams_and_events_by_handle(stream: int) -> None:
    waiting = _core.stream_create()
    start, end = _core.event_create(), _core.event_create()
    fence = _core.event_create(timing=False)
    nbytes = 256 << 20
    pointer = _core.mem_alloc(nbytes, stream)
    _core.event_record(start, stream)
    for value in range(8):
        _core.memset(pointer, value, nbytes, stream)
    _core.event_record(end, stream)
    _core.event_record(fence, stream)
    _core.stream_wait_event(waiting, fence)
    _core.mem_free(pointer, waiting)
    _core.stream_synchronize(waiting)
    assert _core.event_query(fence) and _core.event_query(end)
    _core.event_synchronize(end)
    assert _core.event_elapsed_ms(start, end) >= 0.0
    assert _core.stream_query(stream) and _core.stream_query(waiting)
    for event in (start, end, fence):
        _core.event_destroy(event)
    _core.stream_destroy(waiting)


@fastlaunch.jit  # its launches are what a free on the pool follows
def spin_then_copy(dst, src, iterations, sink):  # type: ignore[no-untyped-def]
    """Every thread computes for a while, then copies its element of `src` to `dst`: reads of
    `src` long after the launch was enqueued."""
    i = cuda.grid(1)
    acc = 0.0
    for _ in range(iterations):
        acc = acc * 0.9999999 + 1.0
    if i < dst.size:
        sink[i] = acc
        dst[i] = src[i]


class _Bytes:
    """Device memory from `_core.mem_alloc` as the CUDA Array Interface shows it to numba."""

    def __init__(self, pointer: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "data": (pointer, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "strides": None,
            "version": 3,
        }


def test_a_free_after_another_stream_waits_for_its_work() -> None:
    first, second = _core.stream_create(non_blocking=True), _core.stream_create(non_blocking=True)
    on_first = cuda.external_stream(first)
    nbytes, threads = 1 << 16, 256
    result = cuda.device_array(nbytes, np.uint8)
    sink = cuda.device_array(nbytes, np.float32)
    pointer = _core.mem_alloc(nbytes, first)
    _core.copy_to_device(pointer, np.full(nbytes, 0x11, np.uint8), first)
    source = cuda.as_cuda_array(_Bytes(pointer, nbytes))
    spin_then_copy[nbytes // threads, threads, on_first](result, source, 0, sink)  # compiles
    spin_then_copy[nbytes // threads, threads, on_first](result, source, 50_000_000, sink)
    assert not _core.stream_query(first), "the kernel ended before the free could overtake it"
    _core.mem_free(pointer, second)  # waits for the event recorded after the launch
    # The pool may give the same memory back at once on `second`; writing it there must wait
    # for the kernel on `first`, which still reads it.
    reused = _core.mem_alloc(nbytes, second)
    _core.memset(reused, 0x22, nbytes, second)
    _core.stream_synchronize(second)
    _core.stream_synchronize(first)
    assert (result.copy_to_host() == 0x11).all(), f"overwritten (same memory: {reused == pointer})"
    back = np.zeros(nbytes, np.uint8)
    _core.copy_to_host(back, reused, second)
    assert (back == 0x22).all()
    _core.mem_free(reused, second)
    _core.stream_synchronize(second)
    for handle in (first, second):
        _core.stream_destroy(handle)
