"""The stand-in driver itself (tests/stand_in_driver/fake_cuda.c), called through ctypes in a
child process: the CUDA behaviours its FAKE_* environment variables switch on (asynchronous
copies with page-locked memory, slow events, slow frees of page-locked memory, launches that
run the queued work, strict pointers, a failing context synchronisation), the driver's rules
of stream capture and its capture modes, pools of one's own, the counters tests read, and its
thread safety (the memory API calls it from several threads at once). Unset, the switches
leave it as it always was."""

from __future__ import annotations

import pytest
from test_cpu_memory_api import PRELUDE as MEMORY_API_PRELUDE

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
    "cuThreadExchangeStreamCaptureMode": (ctypes.POINTER(c_int),),
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
    # (relaxed: the legacy stream is refused in every mode, and cuMemAlloc stays allowed)
    fake.cuStreamBeginCapture_v2(captured, 2)
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


# -- capture modes: which threads a capture refuses the "potentially unsafe" calls -----------

#: the calls CUDA names potentially unsafe during a capture, each made on what the script made
#: before the capture began (a fresh event, device and page-locked memory)
UNSAFE_CALLS = {
    "cuEventQuery": "fake.cuEventQuery(made['event'])",
    "cuEventSynchronize": "fake.cuEventSynchronize(made['event'])",
    "cuStreamSynchronize": "fake.cuStreamSynchronize(made['other'])",
    "cuStreamQuery": "fake.cuStreamQuery(made['other'])",
    "cuMemAlloc_v2": "fake.cuMemAlloc_v2(byref(c_uint64()), 8)",
    "cuMemFree_v2": "fake.cuMemFree_v2(made['device'])",
    "cuMemAllocHost_v2": "fake.cuMemAllocHost_v2(byref(c_void_p()), 8)",
    "cuMemHostAlloc": "fake.cuMemHostAlloc(byref(c_void_p()), 8, 0)",
    "cuMemFreeHost": "fake.cuMemFreeHost(made['pinned'])",
}

#: (capture's mode, who calls, the caller's own mode): refused?
MODE_CASES = [
    ("global", "capturing thread", "global", True),
    ("thread_local", "capturing thread", "global", True),
    ("relaxed", "capturing thread", "global", False),
    ("global", "capturing thread", "relaxed", False),
    ("thread_local", "capturing thread", "thread_local", True),
    ("global", "other thread", "global", True),
    ("global", "other thread", "thread_local", False),
    ("global", "other thread", "relaxed", False),
    ("thread_local", "other thread", "global", False),
    ("relaxed", "other thread", "global", False),
]


@pytest.mark.parametrize("call", UNSAFE_CALLS.values(), ids=UNSAFE_CALLS.keys())
def test_potentially_unsafe_calls_are_refused_as_the_capture_modes_say(run_on_stand_in, call):
    """CUDA's rules (cuThreadExchangeStreamCaptureMode): a thread whose own mode is not relaxed
    is refused the call while it captures in a mode other than relaxed, or while another thread
    captures in global mode and its own mode is global; refused, the call returns
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and the capture ends CUDA_ERROR_STREAM_CAPTURE_
    INVALIDATED."""
    lines = run_on_stand_in(
        PRELUDE
        + f"""
import threading
MODES = {{"global": 0, "thread_local": 1, "relaxed": 2}}
fake.cuMemAllocHost_v2.argtypes = (ctypes.POINTER(c_void_p), c_size_t)

def exchange(mode):
    value = c_int(mode)
    assert fake.cuThreadExchangeStreamCaptureMode(byref(value)) == 0
    return value.value

def call_as(mode, made):
    previous = exchange(MODES[mode])
    try:
        return {call}
    finally:
        exchange(previous)

for capture_mode, caller, caller_mode in {[case[:3] for case in MODE_CASES]!r}:
    made = dict(event=event(), other=stream(1), device=device(8), pinned=pinned(8))
    captured = stream(1)
    assert fake.cuStreamBeginCapture_v2(captured, MODES[capture_mode]) == 0
    if caller == "capturing thread":
        code = call_as(caller_mode, made)
    else:
        codes = []
        worker = threading.Thread(target=lambda: codes.append(call_as(caller_mode, made)))
        worker.start()
        worker.join()
        code = codes[0]
    invalidated = fake.fake_capture_invalidated()
    graph = c_void_p()
    print(code, invalidated, fake.cuStreamEndCapture(captured, byref(graph)))
"""
    )
    assert lines == ["900 1 901" if refused else "0 0 0" for *_, refused in MODE_CASES], MODE_CASES


def test_a_threads_capture_mode_is_its_own_and_exchanged(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
import threading
def exchange(mode):
    value = c_int(mode)
    code = fake.cuThreadExchangeStreamCaptureMode(byref(value))
    return code, value.value

print(exchange(2), exchange(1), exchange(1))  # global by default; each call gives the last
others = []
worker = threading.Thread(target=lambda: others.append(exchange(2)))
worker.start(); worker.join()
print(others[0], exchange(0))  # another thread's own starts global; this one's stayed
print(exchange(3), exchange(-1), exchange(0))  # no such mode: refused, nothing changed
print(fake.cuStreamBeginCapture_v2(stream(), 3))
"""
    )
    assert lines == ["(0, 0) (0, 2) (0, 1)", "(0, 0) (0, 1)", "(1, 3) (1, -1) (0, 0)", "1"]


def test_waits_on_the_captured_stream_are_refused_in_every_mode(run_on_stand_in):
    """Synchronizing (or querying) the captured stream, or the context, conflicts with the
    capture whatever the modes; the legacy stream during a blocking capture is implicitly
    captured (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)."""
    lines = run_on_stand_in(
        PRELUDE
        + """
def exchange(mode):
    value = c_int(mode)
    fake.cuThreadExchangeStreamCaptureMode(byref(value))
    return value.value

exchange(2)  # this thread relaxed, the captures relaxed: no "unsafe call" rule applies
graph = c_void_p()
for flags in (1, 0):
    for wait in (fake.cuStreamSynchronize, fake.cuStreamQuery):
        captured = stream(flags)
        fake.cuStreamBeginCapture_v2(captured, 2)
        print(wait(captured), wait(LEGACY), fake.cuStreamEndCapture(captured, byref(graph)))
captured = stream(1)
fake.cuStreamBeginCapture_v2(captured, 2)
print(fake.cuCtxSynchronize(), fake.cuStreamEndCapture(captured, byref(graph)))
"""
    )
    assert lines == ["900 0 901", "900 0 901", "900 906 901", "900 906 901", "900 901"]


# -- FAKE_FREEHOST_MS, and waits made without the stand-in's lock -----------------------------


def test_a_free_of_page_locked_memory_waits_for_the_device(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
target = pinned_copy(b"abcd")
host = pinned(16)
before = fake.fake_outstanding_allocations()
start = time.perf_counter()
code = fake.cuMemFreeHost(host)
took = time.perf_counter() - start
print(code, took >= 0.25, fake.fake_queued(), get(target, 4))
print(before - fake.fake_outstanding_allocations())
"""
        + 'os.environ["FAKE_FREEHOST_MS"] = "0"\n'
        + """
start = time.perf_counter()
fake.cuMemFreeHost(pinned(16))
print(time.perf_counter() - start < 0.25)
""",
        env={"FAKE_FREEHOST_MS": "300", "FAKE_ASYNC_PINNED": "1"},
    )
    assert lines == ["0 True 0 b'abcd'", "1", "True"]


WAITS = {
    "cuMemFreeHost": ("FAKE_FREEHOST_MS", "fake.cuMemFreeHost(pinned(8))"),
    "cuEventSynchronize": ("FAKE_SLOW_EVENT_MS", "fake.cuEventSynchronize(event())"),
    "cuStreamSynchronize": ("FAKE_SLOW_EVENT_MS", "fake.cuStreamSynchronize(LEGACY)"),
}


@pytest.mark.parametrize("switch, wait", WAITS.values(), ids=WAITS.keys())
def test_other_threads_calls_go_on_while_one_waits(run_on_stand_in, switch, wait):
    lines = run_on_stand_in(
        PRELUDE
        + f"""
import threading
worker = threading.Thread(target=lambda: {wait})
worker.start()
time.sleep(0.05)
start = time.perf_counter()
for _ in range(50):
    fake.cuMemFree_v2(device(64))
    fake.cuStreamIsCapturing(LEGACY, byref(c_int()))
print(time.perf_counter() - start < 0.2, worker.is_alive())
worker.join()
""",
        env={switch: "500"},
    )
    assert lines == ["True True"]


# -- thread safety ----------------------------------------------------------------------------


def test_threads_calling_at_once_keep_the_state_whole(run_on_stand_in):
    """Allocations, queued copies and frees, synchronizations and counters from 8 threads at
    once: every byte arrives and every allocation is given back (the table, the queue and the
    counters are one thread's at a time)."""
    lines = run_on_stand_in(
        PRELUDE
        + """
import random, threading
fake.fake_async_frees.restype = c_size_t
base = fake.fake_outstanding_allocations()
frees_before = fake.fake_async_frees()
wrong, ROUNDS, THREADS = [], 400, 8

def work(seed):
    rng = random.Random(seed)
    own = stream(rng.randrange(2))
    for round_ in range(ROUNDS):
        size = rng.choice((8, 64, 4096, 100_000))
        data = bytes([(seed * 31 + round_) % 256]) * size
        source, middle, back = pinned(size), c_uint64(), pinned(size)
        put(source, data)
        fake.cuMemAllocAsync(byref(middle), size, own)
        fake.cuMemcpyHtoDAsync_v2(middle.value, source, size, own)
        fake.cuMemcpyDtoHAsync_v2(back, middle.value, size, own)
        fake.cuMemFreeAsync(middle.value, own)
        (fake.cuStreamSynchronize(own) if rng.random() < 0.5 else fake.cuEventSynchronize(event()))
        if get(back, size) != data:
            wrong.append((seed, round_))
        fake.cuMemFreeHost(source)
        fake.cuMemFreeHost(back)

threads = [threading.Thread(target=work, args=(seed,)) for seed in range(THREADS)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
fake.cuCtxSynchronize()
print(wrong, fake.fake_outstanding_allocations() - base, fake.fake_queued(),
      fake.fake_async_frees() - frees_before)
""",
        env={"FAKE_ASYNC_PINNED": "1"},
    )
    assert lines == ["[] 0 0 3200"]


def test_the_memory_api_from_many_threads_at_once(run_on_stand_in):
    """The installed memory API from 8 Python threads at once (fastlaunch lets the GIL go
    around its driver calls, so they reach the stand-in together), copies to and from
    page-locked memory asynchronous (FAKE_ASYNC_PINNED): to_device, device_array and
    copy_to_device, copies back (into NumPy and pinned arrays, staged and over a slot, with and
    without a stream), views, and frees in any order; every byte is checked against NumPy."""
    lines = run_on_stand_in(
        MEMORY_API_PRELUDE
        + """
import random, threading, traceback
from numba import cuda
fl.install()
base = fake.fake_outstanding_allocations()
failures, done, THREADS, ROUNDS = [], [], 8, 120

def check(device, expected, what):
    if not np.array_equal(device.copy_to_host(), expected):
        raise AssertionError(f"{what}: bytes differ")

def work(seed):
    rng = random.Random(seed)
    kept = []
    try:
        # device 0's primary context current in this thread, which the stand-in's numba-cuda
        # Context stands for (numba-cuda cannot make one of its own here)
        _core.context_key()
        stream = cuda.stream()
        for round_ in range(ROUNDS):
            n = rng.choice((1, 7, 512, 20_000, 200_000))  # 200_000 float64: over a slot
            host = np.arange(n, dtype=np.float64) + seed * 1e7 + round_
            how = rng.randrange(4)
            if how == 0:
                d = fl.to_device(host)
            elif how == 1:
                d = cuda.device_array(n)
                d.copy_to_device(host)
            elif how == 2:
                d = cuda.to_device(host, stream=stream)
                stream.synchronize()
            else:
                d = cuda.device_array_like(host)
                d.copy_to_device(fl.to_device(host))
            check(d, host, "copy back")
            a = rng.randrange(n)
            b = rng.randrange(a + 1, n + 1)
            check(d[a:b], host[a:b], "view")
            pinned = cuda.pinned_array(n)
            with_stream = rng.random() < 0.5
            if with_stream:
                d.copy_to_host(pinned, stream=stream)
            else:
                d.copy_to_host(pinned)
            if with_stream or how == 2:
                # on a stream (d is bound to it from to_device), into page-locked memory: it
                # may return before the bytes land, as numba-cuda's copy does
                stream.synchronize()
            if not np.array_equal(pinned, host):
                raise AssertionError("copy back into pinned memory: bytes differ")
            kept.append((d, host))
            if len(kept) > 4:
                old, expected = kept.pop(rng.randrange(len(kept)))
                check(old, expected, "kept array")
        done.append(seed)
    except BaseException:
        failures.append(traceback.format_exc())

threads = [threading.Thread(target=work, args=(seed,)) for seed in range(THREADS)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(failures[:1], len(done))
gc.collect()
context.deallocations.clear()
cuda.synchronize()
print(fake.fake_outstanding_allocations() - base <= 4)  # what stays: the staging ring
""",
        env={"FAKE_ASYNC_PINNED": "1"},
    )
    assert lines == ["[] 8", "True"]
