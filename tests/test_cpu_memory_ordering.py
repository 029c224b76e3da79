"""The memory API's work ordered with launches on non-blocking streams
(`rust/ext/src/memory/ordering.rs`), on the stand-in driver, which counts the waits and
synchronizations it is asked for: a launch on a non-blocking stream waits once for the
copies to the device enqueued on the legacy stream; the next free waits for the context's
work; blocking and default streams need neither."""

from __future__ import annotations

from test_cpu_memory_api import PRELUDE as MEMORY_API_PRELUDE

PRELUDE = (
    MEMORY_API_PRELUDE
    + """
from fastlaunch.dispatcher import numba_type

fake.fake_context_synchronizations.restype = ctypes.c_size_t
fake.fake_stream_waits.restype = ctypes.c_size_t
fake.fake_last_waiting_stream.restype = ctypes.c_void_p

COMPILED = _core.CompiledKernel(b"fake image", "fake_entry")

@fl.jit
def one(a):
    pass

def launch(stream, array):
    fingerprint = _core.fingerprint((array,))
    types = tuple(numba_type(d) for d in _core.describe(fingerprint))
    one._register(fingerprint, 90, types, COMPILED)
    one[1, 1, stream](array)

def counts():
    return fake.fake_stream_waits(), fake.fake_context_synchronizations()

NON_BLOCKING = _core.stream_create(True)
BLOCKING = _core.stream_create(False)
device = fl.to_device(np.arange(8.0))
ADDRESS = device.device_ctypes_pointer.value
"""
)


def test_a_launch_on_a_non_blocking_stream_waits_once_for_legacy_copies(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
waits, _ = counts()
launch(NON_BLOCKING, device)
print(fake.fake_stream_waits() - waits, fake.fake_last_waiting_stream() == NON_BLOCKING)
launch(NON_BLOCKING, device)  # no copy since: no second wait
print(fake.fake_stream_waits() - waits)
_core.copy_to_device(ADDRESS, np.ones(8))  # a new copy on the legacy stream
launch(NON_BLOCKING, device)
print(fake.fake_stream_waits() - waits)
for stream in (0, 1, 2, BLOCKING):  # ordered with the legacy stream already
    launch(stream, device)
print(fake.fake_stream_waits() - waits)
"""
    )
    assert lines == ["1 True", "1", "2", "2"]


def test_a_free_after_a_non_blocking_launch_waits_for_the_context(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
def free_after(stream):
    array = fl.device_array(4)
    launch(stream, array)
    _, synchronized = counts()
    del array
    gc.collect()
    context.deallocations.clear()
    return fake.fake_context_synchronizations() - synchronized

print(free_after(BLOCKING), free_after(0), free_after(NON_BLOCKING), free_after(BLOCKING))
"""
    )
    assert lines == ["0 0 1 0"]


def test_a_copy_on_a_non_blocking_stream_waits_for_legacy_copies(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
waits, _ = counts()
back = np.empty(8)
_core.copy_to_host(back, ADDRESS, NON_BLOCKING)
_core.copy_to_host(back, ADDRESS, NON_BLOCKING)
_core.copy_to_host(back, ADDRESS, BLOCKING)
print(fake.fake_stream_waits() - waits)
"""
    )
    assert lines == ["1"]
