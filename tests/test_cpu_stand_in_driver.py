"""The stand-in driver itself (tests/stand_in_driver/fake_cuda.c), called through ctypes in a
child process: the CUDA behaviours its FAKE_* environment variables switch on (asynchronous
copies with page-locked memory, slow events, launches that run the queued work, strict
pointers, a failing context synchronisation), the driver's rules of stream capture, pools of
one's own, and the counters tests read. Unset, the switches leave it as it always was."""

from __future__ import annotations

import pytest

PRELUDE = """
import ctypes, os, time
from ctypes import byref, c_int, c_size_t, c_uint, c_uint64, c_void_p

fake = ctypes.CDLL(os.environ["FASTLAUNCH_CUDA_DRIVER"])
SIGNATURES = {
    "cuMemAlloc_v2": (ctypes.POINTER(c_uint64), c_size_t),
    "cuMemFree_v2": (c_uint64,),
    "cuMemAllocAsync": (ctypes.POINTER(c_uint64), c_size_t, c_void_p),
    "cuMemAllocFromPoolAsync": (ctypes.POINTER(c_uint64), c_size_t, c_void_p, c_void_p),
    "cuMemFreeAsync": (c_uint64, c_void_p),
    "cuMemHostAlloc": (ctypes.POINTER(c_void_p), c_size_t, c_uint),
    "cuMemFreeHost": (c_void_p,),
    "cuMemcpyHtoD_v2": (c_uint64, c_void_p, c_size_t),
    "cuMemcpyDtoH_v2": (c_void_p, c_uint64, c_size_t),
    "cuMemcpyDtoD_v2": (c_uint64, c_uint64, c_size_t),
    "cuMemcpyHtoDAsync_v2": (c_uint64, c_void_p, c_size_t, c_void_p),
    "cuMemcpyDtoHAsync_v2": (c_void_p, c_uint64, c_size_t, c_void_p),
    "cuMemcpyDtoDAsync_v2": (c_uint64, c_uint64, c_size_t, c_void_p),
    "cuMemsetD8Async": (c_uint64, ctypes.c_ubyte, c_size_t, c_void_p),
    "cuStreamCreate": (ctypes.POINTER(c_void_p), c_uint),
    "cuStreamSynchronize": (c_void_p,),
    "cuStreamQuery": (c_void_p,),
    "cuStreamWaitEvent": (c_void_p, c_void_p, c_uint),
    "cuStreamIsCapturing": (c_void_p, ctypes.POINTER(c_int)),
    "cuStreamBeginCapture_v2": (c_void_p, c_int),
    "cuStreamEndCapture": (c_void_p, ctypes.POINTER(c_void_p)),
    "cuStreamGetCtx": (c_void_p, ctypes.POINTER(c_void_p)),
    "cuCtxSetCurrent": (c_void_p,),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(c_void_p), c_int),
    "cuEventCreate": (ctypes.POINTER(c_void_p), c_uint),
    "cuEventRecord": (c_void_p, c_void_p),
    "cuEventSynchronize": (c_void_p,),
    "cuEventQuery": (c_void_p,),
    "cuDeviceGetMemPool": (ctypes.POINTER(c_void_p), c_int),
    "cuMemPoolCreate": (ctypes.POINTER(c_void_p), c_void_p),
    "cuMemPoolDestroy": (c_void_p,),
    "cuMemPoolSetAttribute": (c_void_p, c_int, c_void_p),
    "cuMemPoolGetAttribute": (c_void_p, c_int, c_void_p),
    "cuMemPoolTrimTo": (c_void_p, c_size_t),
}
for name, argtypes in SIGNATURES.items():
    getattr(fake, name).argtypes = argtypes
for name in ("fake_sync_copies", "fake_plain_allocations", "fake_plain_frees",
             "fake_pool_trims", "fake_captured_allocations", "fake_outstanding_bytes"):
    getattr(fake, name).restype = c_size_t
fake.fake_captured_stream.restype = c_void_p

LEGACY, PER_THREAD = 1, 2

def device(size):
    pointer = c_uint64()
    assert fake.cuMemAlloc_v2(byref(pointer), size) == 0
    return pointer.value

def pinned(size):
    pointer = c_void_p()
    assert fake.cuMemHostAlloc(byref(pointer), size, 0) == 0
    return pointer.value

def stream(flags=0):
    handle = c_void_p()
    assert fake.cuStreamCreate(byref(handle), flags) == 0
    return handle.value

def event():
    handle = c_void_p()
    assert fake.cuEventCreate(byref(handle), 0) == 0
    return handle.value

def put(address, data):
    ctypes.memmove(address, data, len(data))

def get(address, size):
    return ctypes.string_at(address, size)

def pinned_copy(data):
    # data copied from page-locked memory to new device memory on the legacy stream
    source, target = pinned(len(data)), device(len(data))
    put(source, data)
    fake.cuMemcpyHtoDAsync_v2(target, source, len(data), LEGACY)
    return target

def status(handle):
    value = c_int(-1)
    code = fake.cuStreamIsCapturing(handle, byref(value))
    return (code, value.value) if code else value.value
"""


# -- FAKE_ASYNC_PINNED: copies with page-locked memory run at the next synchronisation ---------

SYNCHRONISATIONS = {
    "cuStreamSynchronize": "fake.cuStreamSynchronize(STREAM)",
    "cuCtxSynchronize": "fake.cuCtxSynchronize()",
    "cuEventSynchronize": "fake.cuEventSynchronize(event())",
    "cuEventQuery": "fake.cuEventQuery(event())",
    "cuStreamQuery": "fake.cuStreamQuery(STREAM)",
    "cuMemcpyHtoD_v2": "fake.cuMemcpyHtoD_v2(device(8), b'x' * 8, 8)",
    "cuMemcpyDtoH_v2": "fake.cuMemcpyDtoH_v2(ctypes.create_string_buffer(8), device(8), 8)",
    "cuMemcpyDtoD_v2": "fake.cuMemcpyDtoD_v2(device(8), device(8), 8)",
    "cuMemFreeHost": "fake.cuMemFreeHost(pinned(8))",
}


@pytest.mark.parametrize("synchronise", SYNCHRONISATIONS.values(), ids=SYNCHRONISATIONS.keys())
def test_a_copy_from_pinned_memory_lands_at_the_next_synchronisation(run_on_stand_in, synchronise):
    lines = run_on_stand_in(
        PRELUDE
        + f"""
STREAM = stream()
source, target = pinned(8), device(8)
put(source, b"abcdefgh")
print(fake.cuMemcpyHtoDAsync_v2(target, source, 8, STREAM), fake.fake_queued(), get(target, 8))
print({synchronise}, fake.fake_queued(), get(target, 8))
""",
        env={"FAKE_ASYNC_PINNED": "1"},
    )
    assert lines == ["0 1 b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00'", "0 0 b'abcdefgh'"]


def test_a_copy_to_pinned_memory_lands_at_the_next_synchronisation(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
source, target = device(4), pinned(4)
put(source, b"wxyz")
print(fake.cuMemcpyDtoHAsync_v2(target, source, 4, LEGACY), get(target, 4))
fake.cuStreamSynchronize(LEGACY)
print(get(target, 4))
""",
        env={"FAKE_ASYNC_PINNED": "1"},
    )
    assert lines == ["0 b'\\x00\\x00\\x00\\x00'", "b'wxyz'"]


def test_copies_with_pageable_memory_run_at_once_after_the_queued_work(run_on_stand_in):
    """Pageable memory is copied when asked, the queue first: the last copy wins."""
    lines = run_on_stand_in(
        PRELUDE
        + """
source, target = pinned(4), device(4)
put(source, b"pppp")
fake.cuMemcpyHtoDAsync_v2(target, source, 4, LEGACY)
pageable = ctypes.create_string_buffer(b"hhhh", 4)
fake.cuMemcpyHtoDAsync_v2(target, pageable, 4, LEGACY)
print(fake.fake_queued(), get(target, 4))
fake.cuMemcpyHtoDAsync_v2(target, source, 4, LEGACY)
fake.cuMemsetD8Async(target, ord("s"), 4, LEGACY)
print(fake.fake_queued(), get(target, 4))
""",
        env={"FAKE_ASYNC_PINNED": "1"},
    )
    assert lines == ["0 b'hhhh'", "0 b'ssss'"]


def test_pool_frees_are_queued_too(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
pointer = c_uint64()
fake.cuMemAllocAsync(byref(pointer), 16, LEGACY)
before = fake.fake_outstanding_allocations()
print(fake.cuMemFreeAsync(pointer.value, LEGACY), fake.fake_outstanding_allocations() - before)
print(fake.cuMemFreeAsync(12345, LEGACY))  # not an allocation: refused at once
fake.cuStreamSynchronize(LEGACY)
print(fake.fake_outstanding_allocations() - before)
""",
        env={"FAKE_ASYNC_PINNED": "1"},
    )
    assert lines == ["0 0", "1", "-1"]


def test_without_the_switch_every_copy_is_done_when_it_returns(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
target = pinned_copy(b"abcd")
pointer = c_uint64()
fake.cuMemAllocAsync(byref(pointer), 16, LEGACY)
before = fake.fake_outstanding_allocations()
fake.cuMemFreeAsync(pointer.value, LEGACY)
print(fake.fake_queued(), get(target, 4), fake.fake_outstanding_allocations() - before)
"""
    )
    assert lines == ["0 b'abcd' -1"]


def test_a_launch_runs_the_queued_work_first_when_told_to(run_on_stand_in):
    script = (
        PRELUDE
        + """
target = pinned_copy(b"abcd")
fake.cuLaunchKernel()
print(fake.fake_queued(), get(target, 4))
"""
    )
    flushed = run_on_stand_in(script, env={"FAKE_ASYNC_PINNED": "1", "FAKE_FLUSH_AT_LAUNCH": "1"})
    assert flushed == ["0 b'abcd'"]
    assert run_on_stand_in(script, env={"FAKE_ASYNC_PINNED": "1"}) == ["1 b'\\x00\\x00\\x00\\x00'"]


# -- FAKE_SLOW_EVENT_MS, FAKE_STRICT, FAKE_SYNC_ERROR ------------------------------------------


def test_slow_events_are_not_ready_and_waits_take_the_time(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
e = event()
print(fake.cuEventQuery(e))
for wait in (lambda: fake.cuEventSynchronize(e), lambda: fake.cuStreamSynchronize(LEGACY)):
    start = time.perf_counter()
    code = wait()
    print(code, time.perf_counter() - start >= 0.05)
""",
        env={"FAKE_SLOW_EVENT_MS": "60"},
    )
    assert lines == ["600", "0 True", "0 True"]


def test_a_slow_event_wait_runs_the_queued_work(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
target = pinned_copy(b"abcd")
e = event()
print(fake.cuEventQuery(e), fake.fake_queued())  # not done: nothing ran
print(fake.cuEventSynchronize(e), fake.fake_queued(), get(target, 4))
""",
        env={"FAKE_SLOW_EVENT_MS": "1", "FAKE_ASYNC_PINNED": "1"},
    )
    assert lines == ["600 1", "0 0 b'abcd'"]


def test_strict_copies_refuse_device_pointers_the_driver_does_not_know(run_on_stand_in):
    script = (
        PRELUDE
        + """
host = ctypes.create_string_buffer(8)
made_up = 0x7000_0000_0000
print(fake.cuMemcpyHtoD_v2(made_up, host, 8), fake.cuMemcpyDtoH_v2(host, made_up, 8),
      fake.cuMemcpyDtoD_v2(device(8), made_up, 8), fake.cuMemcpyHtoDAsync_v2(made_up, host, 8, 0),
      fake.cuMemcpyDtoHAsync_v2(host, made_up, 8, 0), fake.cuMemcpyHtoD_v2(device(8), host, 8))
"""
    )
    assert run_on_stand_in(script, env={"FAKE_STRICT": "1"}) == ["1 1 1 1 1 0"]
    assert run_on_stand_in(script) == ["0 0 0 0 0 0"]


def test_a_context_synchronisation_can_fail(run_on_stand_in):
    script = PRELUDE + "print(fake.cuCtxSynchronize())\n"
    assert run_on_stand_in(script, env={"FAKE_SYNC_ERROR": "700"}) == ["700"]
    assert run_on_stand_in(script) == ["0"]


# -- counters and new functions ---------------------------------------------------------------


def test_synchronous_copies_and_plain_allocations_are_counted(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
host = ctypes.create_string_buffer(8)
a = device(8)
b = device(8)
fake.cuMemcpyHtoD_v2(a, host, 8)
fake.cuMemcpyDtoH_v2(host, a, 8)
fake.cuMemcpyDtoD_v2(b, a, 8)                 # not a copy with the host
fake.cuMemcpyHtoDAsync_v2(a, host, 8, LEGACY)  # not synchronous
pointer = c_uint64()
fake.cuMemAllocAsync(byref(pointer), 8, LEGACY)  # not plain
fake.cuMemFreeAsync(pointer.value, LEGACY)
fake.cuMemFree_v2(a)
print(fake.fake_sync_copies(), fake.fake_plain_allocations(), fake.fake_plain_frees())
"""
    )
    assert lines == ["2 2 1"]


def test_pools_of_ones_own(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
RELEASE_THRESHOLD, USED_MEM_CURRENT = 4, 7
def attribute(pool, which):
    value = c_uint64()
    assert fake.cuMemPoolGetAttribute(pool, which, byref(value)) == 0
    return value.value

first, second, default = c_void_p(), c_void_p(), c_void_p()
print(fake.cuMemPoolCreate(byref(first), None), fake.cuMemPoolCreate(byref(second), None))
fake.cuDeviceGetMemPool(byref(default), 0)
print(len({first.value, second.value, default.value}), fake.fake_pools_created())
pointer = c_uint64()
print(fake.cuMemAllocFromPoolAsync(byref(pointer), 100, first, LEGACY), pointer.value != 0)
fake.cuMemAllocFromPoolAsync(byref(c_uint64()), 30, second, LEGACY)
device(5)
print(attribute(first, USED_MEM_CURRENT), attribute(second, USED_MEM_CURRENT),
      attribute(default, USED_MEM_CURRENT))  # the device's pool: every allocation, as before
fake.cuMemPoolSetAttribute(first, RELEASE_THRESHOLD, byref(c_uint64(1 << 20)))
fake.cuMemPoolSetAttribute(default, RELEASE_THRESHOLD, byref(c_uint64(7)))
print(attribute(first, RELEASE_THRESHOLD), attribute(second, RELEASE_THRESHOLD),
      attribute(default, RELEASE_THRESHOLD))
print(fake.cuMemPoolTrimTo(first, 0), fake.cuMemPoolTrimTo(default, 0), fake.fake_pool_trims())
print(fake.cuMemPoolDestroy(first), fake.cuMemPoolDestroy(first), fake.cuMemPoolDestroy(default))
print(fake.cuMemAllocFromPoolAsync(byref(c_uint64()), 8, first, LEGACY),
      fake.cuMemAllocFromPoolAsync(byref(c_uint64()), 8, default, LEGACY))
print(fake.cuMemFreeAsync(pointer.value, LEGACY))  # its memory outlives the pool
third = c_void_p()
fake.cuMemPoolCreate(byref(third), None)
print(third.value not in (first.value, second.value), fake.fake_pools_created())
"""
    )
    assert lines == [
        "0 0",
        "3 2",
        "0 True",
        "100 30 135",
        "1048576 0 7",
        "0 0 2",
        "0 1 1",
        "1 0",
        "0",
        "True 3",
    ]


def test_a_streams_context_is_the_current_one(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
primary, got = c_void_p(), c_void_p()
fake.cuDevicePrimaryCtxRetain(byref(primary), 0)
print(fake.cuStreamGetCtx(stream(), byref(got)), got.value == primary.value)
fake.cuCtxSetCurrent(12345)
fake.cuStreamGetCtx(LEGACY, byref(got))
print(got.value)
"""
    )
    assert lines == ["0 True", "12345"]


# -- stream capture, by the driver's rules ----------------------------------------------------


def test_only_the_captured_stream_is_capturing(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
captured, other, non_blocking = stream(), stream(), stream(1)
print(fake.cuStreamBeginCapture_v2(captured, 0), fake.fake_captured_stream() == captured)
print(status(captured), status(other), status(non_blocking), status(PER_THREAD))
print(status(0), status(LEGACY), status(captured))  # asking leaves the capture valid
graph = c_void_p()
print(fake.cuStreamEndCapture(captured, byref(graph)), status(LEGACY), fake.fake_captured_stream())
for other_capture in (non_blocking, PER_THREAD):  # a default handle is a blocking stream
    fake.cuStreamBeginCapture_v2(other_capture, 0)
    print(status(other_capture), status(LEGACY), status(captured))
    fake.cuStreamEndCapture(other_capture, byref(graph))
"""
    )
    assert lines == [
        "0 True",
        "1 0 0 0",
        "(906, -1) (906, -1) 1",
        "0 0 None",
        "1 0 0",
        "1 (906, -1) 0",
    ]


LEGACY_WORK = {
    "cuMemAllocAsync": "fake.cuMemAllocAsync(byref(c_uint64()), 8, LEGACY)",
    "cuMemAllocFromPoolAsync": "fake.cuMemAllocFromPoolAsync(byref(c_uint64()), 8, POOL, LEGACY)",
    "cuMemFreeAsync": "fake.cuMemFreeAsync(device(8), LEGACY)",
    "cuMemcpyHtoDAsync_v2": "fake.cuMemcpyHtoDAsync_v2(device(8), HOST, 8, LEGACY)",
    "cuMemcpyDtoHAsync_v2": "fake.cuMemcpyDtoHAsync_v2(HOST, device(8), 8, LEGACY)",
    "cuMemcpyDtoDAsync_v2": "fake.cuMemcpyDtoDAsync_v2(device(8), device(8), 8, LEGACY)",
    "cuMemsetD8Async": "fake.cuMemsetD8Async(device(8), 0, 8, 0)",
    "cuEventRecord": "fake.cuEventRecord(event(), 0)",
    "cuStreamWaitEvent": "fake.cuStreamWaitEvent(LEGACY, event(), 0)",
}


@pytest.mark.parametrize("work", LEGACY_WORK.values(), ids=LEGACY_WORK.keys())
def test_work_on_the_legacy_stream_during_a_blocking_capture_invalidates_it(run_on_stand_in, work):
    lines = run_on_stand_in(
        PRELUDE
        + f"""
POOL, HOST = c_void_p(), ctypes.create_string_buffer(8)
fake.cuMemPoolCreate(byref(POOL), None)
graph = c_void_p()
for flags in (0, 1):  # blocking: refused and invalidated; non-blocking: no concern of it
    captured = stream(flags)
    fake.cuStreamBeginCapture_v2(captured, 0)
    print({work}, status(captured), fake.cuStreamEndCapture(captured, byref(graph)))
print({work})  # after the capture: fine
"""
    )
    assert lines == ["906 2 901", "0 1 0", "0"]


def test_allocations_on_the_captured_stream_are_counted(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
pool = c_void_p()
fake.cuMemPoolCreate(byref(pool), None)
captured, other = stream(1), stream()
fake.cuMemAllocAsync(byref(c_uint64()), 8, captured)  # before the capture
fake.cuStreamBeginCapture_v2(captured, 0)
print(fake.cuMemAllocAsync(byref(c_uint64()), 8, captured),
      fake.cuMemAllocFromPoolAsync(byref(c_uint64()), 8, pool, captured),
      fake.cuMemAllocAsync(byref(c_uint64()), 8, other),
      fake.cuMemAllocAsync(byref(c_uint64()), 8, LEGACY))  # the capture is non-blocking
fake.cuStreamEndCapture(captured, byref(c_void_p()))
fake.cuMemAllocAsync(byref(c_uint64()), 8, captured)  # after it
print(fake.fake_captured_allocations())
"""
    )
    assert lines == ["0 0 0 0", "2"]
