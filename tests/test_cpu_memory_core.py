"""The memory core (`rust/ext/src/memory/`, `rust/driver/src/memory/`) on the stand-in driver,
whose memory is real host memory: bytes go round through the pool, the staging ring (small
copies) and the direct path (copies larger than a slot), and every allocation is returned."""

from __future__ import annotations

PRELUDE = """
import ctypes, os
import numpy as np
from fastlaunch import _core

fake = ctypes.CDLL(os.environ["FASTLAUNCH_CUDA_DRIVER"])
fake.fake_outstanding_allocations.restype = ctypes.c_int

def outstanding():
    return fake.fake_outstanding_allocations()
"""


def test_bytes_go_round_through_the_pool_and_the_staging_ring(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
_core.mem_alloc(8)  # the first call sets up the context (and nothing that stays allocated)
before = outstanding()
for nbytes in (0, 1, 32 * 1024, 3 * 1024 * 1024):
    host = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    device = _core.mem_alloc(nbytes)
    other = _core.mem_alloc(nbytes)
    _core.copy_to_device(device, host)
    _core.copy_device(other, device, nbytes)
    back = np.zeros_like(host)
    _core.copy_to_host(back, other)
    same = np.array_equal(back, host)
    _core.memset(other, 7, nbytes)
    _core.copy_to_host(back, other)
    print(nbytes, same, bool((back == 7).all()))
    _core.mem_free(device)
    _core.mem_free(other, 0)
print(outstanding() - before <= 4)  # what stays is the staging ring's pinned slots
"""
    )
    assert lines == [
        "0 True True",
        "1 True True",
        "32768 True True",
        "3145728 True True",
        "True",
    ]


def test_arrays_of_any_contiguous_layout_are_copied_as_their_bytes(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
host = np.asfortranarray(np.arange(12.0).reshape(3, 4))
device = _core.mem_alloc(host.nbytes)
_core.copy_to_device(device, host)
back = np.empty((3, 4), order="F")
_core.copy_to_host(back, device)
print(np.array_equal(back, host))
_core.mem_free(device)
"""
    )
    assert lines == ["True"]


CONTIGUOUS = (
    "['ValueError', ' host must export a contiguous buffer (a C- or F-contiguous NumPy array)']"
)


def test_bad_input_names_the_argument(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
def error(call):
    try:
        call()
    except (ValueError, TypeError) as e:
        return f"{type(e).__name__}: {e}"
    return "no error"

device = _core.mem_alloc(64)
print(error(lambda: _core.mem_alloc(-1)))
print(error(lambda: _core.copy_to_device(device, np.arange(16.0)[::2])).split(":")[0:2])
read_only = np.frombuffer(b"12345678", np.uint8)
print(error(lambda: _core.copy_to_host(read_only, device)).split(":")[0:2])
print(error(lambda: _core.copy_to_device(device, object())).split(":")[0:2])
print(error(lambda: _core.copy_device(device, device, -3)))
_core.mem_free(device)
"""
    )
    assert lines == [
        "ValueError: nbytes must not be negative, got -1",
        CONTIGUOUS,
        "['ValueError', ' host must export a writable, contiguous buffer (a C- or F-contiguous "
        "NumPy array)']",
        CONTIGUOUS,
        "ValueError: nbytes must not be negative, got -3",
    ]


def test_pool_settings_and_pinned_memory(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
_core.set_pool_release_threshold(0, 1 << 30)
print(_core.pool_release_threshold(0))
before = outstanding()
pointer = _core.pinned_alloc(4096)
ctypes.memset(pointer, 5, 4096)
print(outstanding() - before, ctypes.string_at(pointer, 2))
_core.pinned_free(pointer)
print(outstanding() - before)
device = _core.mem_alloc(100)
used, reserved, cached = _core.pool_usage(0)
print(used >= 100)
_core.mem_free(device)
_core.pool_trim(0)
try:
    _core.pool_usage(5)
except IndexError as e:
    print("IndexError")
"""
    )
    assert lines == ["1073741824", "1 b'\\x05\\x05'", "0", "True", "IndexError"]


def test_every_allocation_is_returned_once_the_ring_is_made(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
fake.fake_outstanding_bytes.restype = ctypes.c_size_t
scratch = _core.mem_alloc(16)
for _ in range(4):  # the ring's four pinned slots, made on first use and kept
    _core.copy_to_device(scratch, b"x")
_core.mem_free(scratch)
count, nbytes = outstanding(), fake.fake_outstanding_bytes()
pointers = [_core.mem_alloc(n) for n in (1, 32 * 1024, 3 * 1024 * 1024)]
print(outstanding() - count, fake.fake_outstanding_bytes() - nbytes)
for pointer in pointers:
    _core.copy_to_device(pointer, b"abc")
    _core.mem_free(pointer)
print(outstanding() - count, fake.fake_outstanding_bytes() - nbytes)
print(_core.mem_alloc(0), outstanding() - count)
_core.mem_free(0)
"""
    )
    # up to 1 MiB, a size is allocated at its freed-block cache class (a multiple of 512 bytes);
    # the pool's release threshold is the driver's 0 here, so the cache keeps nothing
    assert lines == [f"3 {512 + 32 * 1024 + 3 * 1024 * 1024}", "0 0", "0 0"]


def test_streams_and_events_by_handle(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
blocking, non_blocking = _core.stream_create(), _core.stream_create(non_blocking=True)
print(blocking != non_blocking, blocking not in (0, 1, 2))
start, end = _core.event_create(), _core.event_create(timing=False)
_core.event_record(start)
_core.event_record(end, non_blocking)
_core.stream_wait_event(blocking, end)
device = _core.mem_alloc(8, non_blocking)
_core.copy_to_device(device, b"12345678", non_blocking)
_core.mem_free(device, blocking)
_core.stream_synchronize(blocking)
_core.event_synchronize(end)
print(_core.stream_query(blocking), _core.event_query(end))
print(type(_core.event_elapsed_ms(start, end)).__name__)
_core.context_synchronize()
for event in (start, end):
    _core.event_destroy(event)
for stream in (blocking, non_blocking):
    _core.stream_destroy(stream)
try:
    _core.stream_create(non_blocking=True, flags=1)
except TypeError:
    print("TypeError")
"""
    )
    assert lines == ["True True", "True True", "float", "TypeError"]
