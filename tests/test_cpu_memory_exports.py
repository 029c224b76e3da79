"""What another library's read of a numba-cuda array costs and waits for under install
(`rust/ext/src/memory/exports.rs`, `ordering.rs`), and the ordering the second outside review
found broken, on the stand-in driver:

- an interface read waits for the array's own pending copy, whatever stream the array is
  bound to (F4), for nothing else (F6), and makes no call a capture refuses or is broken by
  (F2);
- a copy back left in flight on a non-blocking stream is waited for by the next free (F1);
- a capture of a blocking stream does not make work on an uncaptured non-blocking stream
  fail (F5);
- a block another library read is not handed out again before a synchronization of the
  context (it cannot know the streams that library used)."""

from __future__ import annotations

from test_cpu_memory_api import PRELUDE as MEMORY_API_PRELUDE
from test_cpu_memory_ordering import LAUNCH

PRELUDE = (
    MEMORY_API_PRELUDE
    + LAUNCH
    + """
import time
from fastlaunch.memory import install
install.install()
from numba import cuda

fake.cuStreamBeginCapture_v2.argtypes = [ctypes.c_void_p, ctypes.c_int]
fake.cuStreamEndCapture.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
fake.fake_stream_waits.restype = ctypes.c_size_t
fake.fake_event_records.restype = ctypes.c_size_t
fake.fake_last_waiting_stream.restype = ctypes.c_void_p
GLOBAL, RELAXED = 0, 2

class Foreign:
    # another library's stream (a torch side stream, CuPy's non_blocking=True)
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)

    def __int__(self):
        return self.handle

NON_BLOCKING = _core.stream_create(True)
BLOCKING = _core.stream_create(False)
_core.set_pool_release_threshold(0, allocation.KEEP_EVERYTHING)  # as allocation.context() does

def begin_capture(stream, mode):
    assert fake.cuStreamBeginCapture_v2(ctypes.c_void_p(stream), mode) == 0

def end_capture(stream):
    graph = ctypes.c_void_p()
    return fake.cuStreamEndCapture(ctypes.c_void_p(stream), ctypes.byref(graph))

def device_bytes(interface, nbytes):
    # the stand-in's device memory is host memory: what a reader on the GPU would see
    return ctypes.string_at(interface["data"][0], nbytes)

def attempt(work):
    try:
        work()
        return "ok"
    except Exception as error:
        return type(error).__name__
"""
)


def test_an_interface_read_during_a_capture_is_neither_refused_nor_invalidates_it(
    run_on_stand_in,
):
    """F2: a pending copy is waited for in the relaxed capture mode, so neither a blocking
    stream's capture (which refuses the legacy stream) nor a global-mode capture of a
    non-blocking stream (which refuses event queries to threads in the global mode) is
    troubled by it."""
    lines = run_on_stand_in(
        PRELUDE
        + """
for stream, mode in ((BLOCKING, RELAXED), (BLOCKING, GLOBAL), (NON_BLOCKING, GLOBAL)):
    d = cuda.to_device(np.arange(8.0))  # its copy's mark pending
    begin_capture(stream, mode)
    read = attempt(lambda: d.__cuda_array_interface__)
    print(read, end_capture(stream))
"""
    )
    assert lines == ["ok 0"] * 3


def test_a_bound_array_s_interface_waits_for_its_own_legacy_copy(run_on_stand_in):
    """F4: `to_device` with no stream enqueues its staged copy on the legacy stream; bound to
    a non-blocking stream after, the array exports that stream, whose readers are not ordered
    after the copy: the read waits for the copy itself (FAKE_ASYNC_PINNED keeps it queued)."""
    lines = run_on_stand_in(
        PRELUDE
        + """
host = np.arange(1.0, 9.0)
d = cuda.to_device(host)
bound = d.bind(Foreign(NON_BLOCKING))
interface = bound.__cuda_array_interface__
print(interface["stream"] == NON_BLOCKING)
print(device_bytes(interface, host.nbytes) == host.tobytes())
""",
        env={"FAKE_ASYNC_PINNED": "1"},
    )
    assert lines == ["True", "True"]


def test_an_interface_read_waits_for_nothing_but_the_array_s_own_work(run_on_stand_in):
    """F6: once the array's copy is known done (a synchronization, or an earlier read), a read
    asks nothing, however busy the GPU is (FAKE_SLOW_EVENT_MS: every wait takes 300 ms), and
    later work on other memory adds nothing to it."""
    lines = run_on_stand_in(
        PRELUDE
        + """
def timed_read(array):
    start = time.perf_counter()
    array.__cuda_array_interface__
    return time.perf_counter() - start < 0.1

d = cuda.to_device(np.arange(16.0))
cuda.synchronize()
print(timed_read(d))
other = cuda.to_device(np.ones(16))  # legacy work on other memory, still pending
print(timed_read(d))
print(timed_read(other))  # its own copy: waited for
print(timed_read(other))  # known done now
""",
        env={"FAKE_SLOW_EVENT_MS": "300"},
    )
    assert lines == ["True", "True", "False", "True"]


def test_a_copy_back_in_flight_on_a_non_blocking_stream_is_waited_for_by_the_next_free(
    run_on_stand_in,
):
    """F1: into page-locked memory above a staging slot, a copy back on a non-blocking stream
    returns before the copy ran (as numba-cuda's does); the free of the array right after must
    wait for that stream, or the pool hands the block to the next allocation meanwhile."""
    lines = run_on_stand_in(
        PRELUDE
        + """
n = 300_000  # 2.4 MB: above a staging slot
d = cuda.to_device(np.arange(float(n)))
pinned = cuda.pinned_array(n)
d.copy_to_host(pinned, stream=Foreign(NON_BLOCKING))
waits = fake.fake_stream_waits()
del d
gc.collect()
context.deallocations.clear()
print(fake.fake_stream_waits() - waits, fake.fake_last_waiting_stream() in (0, 1, None))
cuda.synchronize()
print(pinned[-1] == n - 1)
""",
        env={"FAKE_ASYNC_PINNED": "1"},
    )
    assert lines == ["1 True", "True"]


def test_work_on_a_non_blocking_stream_goes_on_while_a_blocking_stream_is_captured(
    run_on_stand_in,
):
    """F5: a blocking stream's capture refuses the legacy stream; launches and copies on an
    uncaptured non-blocking stream wait for the legacy work through its marks, recorded when
    that work was enqueued, and need nothing on the legacy stream."""
    lines = run_on_stand_in(
        PRELUDE
        + """
d = cuda.to_device(np.arange(8.0))  # legacy work: a copy and an allocation
spare = cuda.device_array(8)
begin_capture(BLOCKING, RELAXED)
print(attempt(lambda: launch(NON_BLOCKING, d)))
print(attempt(lambda: d.copy_to_device(np.ones(8), stream=Foreign(NON_BLOCKING))))
print(attempt(lambda: d.copy_to_host(np.empty(8), stream=Foreign(NON_BLOCKING))))
print(end_capture(BLOCKING))
"""
    )
    assert lines == ["ok", "ok", "ok", "0"]


def test_an_exported_block_is_held_until_the_context_is_synchronized(run_on_stand_in):
    """A block another library read may still be used on streams fastlaunch cannot see: its
    free is held (numba-cuda's `cuMemFree` waits for the device) until a synchronization of
    the context lets the held blocks go to the pool; none is made on a free (it would break
    any capture open meanwhile). A block never read that way is reused at once."""
    lines = run_on_stand_in(
        PRELUDE
        + """
def address(array):
    return array.device_ctypes_pointer.value

plain = cuda.device_array(64)
kept = address(plain)
del plain
print(address(cuda.device_array(64)) == kept)  # the freed-block cache hands it back

held = []
for _ in range(12):
    exported = cuda.device_array(64)
    held.append(address(exported))
    exported.__cuda_array_interface__
    del exported
again = cuda.device_array(64)
print(address(again) in held, _core.pool_usage(0)[0])  # twelve held, and `again`
cuda.synchronize()
print(_core.pool_usage(0)[0])  # only `again`
"""
    )
    assert lines == ["True", "False 6656", "512"]


def test_the_installed_interface_is_a_read_only_property_as_numba_cudas(run_on_stand_in):
    """What install() puts on numba-cuda's arrays reads as numba-cuda's property does: on the
    class, the descriptor itself (`hasattr` holds); on an array, numba-cuda's dictionary; set,
    an AttributeError."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from numba.cuda.cudadrv.devicearray import DeviceNDArrayBase
from fastlaunch.memory.originals import original
numba_property = original(DeviceNDArrayBase, "__cuda_array_interface__")
installed = vars(DeviceNDArrayBase)["__cuda_array_interface__"]
print(installed.fget is numba_property.fget, hasattr(DeviceNDArray, "__cuda_array_interface__"))
d = cuda.to_device(np.arange(4.0))
print(d.__cuda_array_interface__ == numba_property.fget(d))
print(attempt(lambda: setattr(d, "__cuda_array_interface__", {})))
"""
    )
    assert lines == ["True True", "True", "AttributeError"]
