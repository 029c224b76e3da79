"""The memory API's work ordered with launches on non-blocking streams
(`rust/ext/src/memory/ordering.rs`), on the stand-in driver, which counts the waits it is
asked for: a launch on a non-blocking stream waits once for the copies to the device enqueued
on the legacy stream, and the next free (on the legacy stream) waits for an event recorded
after it; blocking and default streams need neither."""

from __future__ import annotations

from test_cpu_memory_api import PRELUDE as MEMORY_API_PRELUDE

#: `launch(stream, array)`: a one-array kernel launched on the stand-in (which has no kernels:
#: its overload registered by hand), on `stream` (None: written without one)
LAUNCH = """
from fastlaunch.dispatcher import numba_type

COMPILED = _core.CompiledKernel(b"fake image", "fake_entry")

@fl.jit
def one(a):
    pass

def launch(stream, array):
    fingerprint = _core.fingerprint((array,))
    types = tuple(numba_type(d) for d in _core.describe(fingerprint))
    one._register(fingerprint, 90, types, COMPILED)
    if stream is None:
        one[1, 1](array)
    else:
        one[1, 1, stream](array)
"""

PRELUDE = (
    MEMORY_API_PRELUDE
    + LAUNCH
    + """
fake.fake_stream_waits.restype = ctypes.c_size_t
fake.fake_last_waiting_stream.restype = ctypes.c_void_p

NON_BLOCKING = _core.stream_create(True)
BLOCKING = _core.stream_create(False)
device = fl.to_device(np.arange(8.0))
ADDRESS = device.device_ctypes_pointer.value
"""
)


def test_a_new_stream_on_a_waited_streams_handle_waits_again(run_on_stand_in):
    """A non-blocking stream destroyed after its wait for the legacy work may leave its
    handle to a new stream, which has waited for nothing: it waits (told apart by the
    driver's stream id), where the same stream launching again does not."""
    lines = run_on_stand_in(
        PRELUDE
        + """
waits = fake.fake_stream_waits()
launch(NON_BLOCKING, device)
launch(NON_BLOCKING, device)  # the same stream, no new legacy work: no second wait
print(fake.fake_stream_waits() - waits)
fake.fake_stream_reborn(ctypes.c_void_p(NON_BLOCKING))  # destroyed, its handle remade
launch(NON_BLOCKING, device)
print(fake.fake_stream_waits() - waits, fake.fake_last_waiting_stream() == NON_BLOCKING)
launch(NON_BLOCKING, device)
print(fake.fake_stream_waits() - waits)
"""
    )
    assert lines == ["1", "2 True", "2"]


def test_a_launch_on_a_non_blocking_stream_waits_once_for_legacy_copies(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
waits = fake.fake_stream_waits()
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


def test_a_free_waits_for_the_launches_on_non_blocking_streams_since_the_last(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
OTHER_NON_BLOCKING = _core.stream_create(True)

def waits_of_a_free_after(*streams):
    array = fl.device_array(4)
    for stream in streams:
        launch(stream, array)
    waits = fake.fake_stream_waits()
    del array
    gc.collect()
    context.deallocations.clear()
    return fake.fake_stream_waits() - waits, fake.fake_last_waiting_stream() in (0, None)

print(waits_of_a_free_after(BLOCKING, 0, 2))
print(waits_of_a_free_after(NON_BLOCKING, NON_BLOCKING))
print(waits_of_a_free_after(BLOCKING))  # waited for already
print(waits_of_a_free_after(NON_BLOCKING, OTHER_NON_BLOCKING, BLOCKING))
"""
    )
    assert lines == ["(0, True)", "(1, True)", "(0, True)", "(2, True)"]


def test_a_copy_on_a_non_blocking_stream_waits_for_legacy_copies(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
waits = fake.fake_stream_waits()
back = np.empty(8)
_core.copy_to_host(back, ADDRESS, NON_BLOCKING)
_core.copy_to_host(back, ADDRESS, NON_BLOCKING)
_core.copy_to_host(back, ADDRESS, BLOCKING)
print(fake.fake_stream_waits() - waits)
"""
    )
    assert lines == ["1"]


def test_a_capture_on_a_non_blocking_stream_is_left_to_record_its_own_order(run_on_stand_in):
    """Inside a capture the stream's flags are not asked (the driver refuses, and the capture
    is lost) and nothing waits; its replay on a non-blocking stream is followed as a launch."""
    lines = run_on_stand_in(
        PRELUDE
        + """
waits = fake.fake_stream_waits()
with fl.graph() as graph:  # a new non-blocking stream
    launch(graph.stream, device)
print(fake.fake_stream_waits() - waits, graph.captured)
graph.replay()  # waits for the legacy copy, then its event is what a free waits for
print(fake.fake_stream_waits() - waits)
array = fl.device_array(4)
del array
gc.collect()
context.deallocations.clear()
print(fake.fake_stream_waits() - waits)
"""
    )
    assert lines == ["0 True", "1", "2"]


def test_legacy_copies_are_marked_when_enqueued_so_waits_need_no_legacy_command(run_on_stand_in):
    """A copy to the device on the legacy stream records a mark after it, on the legacy stream,
    as it is enqueued (its staging slot waits for that mark: no event of its own); a
    non-blocking stream then waits for
    the newest mark and nothing is recorded on the legacy stream for the wait (a capture of a
    blocking stream would refuse it: the second review's F5)."""
    lines = run_on_stand_in(
        PRELUDE
        + """
fake.fake_event_records.restype = ctypes.c_size_t
fake.fake_last_recording_stream.restype = ctypes.c_void_p
launch(NON_BLOCKING, device)  # waits for the prelude's copy: nothing new below
records = fake.fake_event_records()
for _ in range(3):
    _core.copy_to_device(ADDRESS, np.ones(8))
print(fake.fake_event_records() - records)  # three marks
records = fake.fake_event_records()
waits = fake.fake_stream_waits()
# the stream's own, for frees (the slot's copy is waited for by synchronizing the stream)
_core.copy_to_host(np.empty(8), ADDRESS, NON_BLOCKING)
print(fake.fake_event_records() - records, fake.fake_stream_waits() - waits)
launch(OTHER := _core.stream_create(True), device)  # the newest mark, waited for again
print(fake.fake_event_records() - records, fake.fake_stream_waits() - waits)
print(fake.fake_last_recording_stream() == OTHER)  # the launch's own event, for frees
"""
    )
    assert lines == ["3", "1 1", "2 2", "True"]


def test_a_new_stream_object_per_launch_reuses_its_configuration_and_is_not_kept(
    run_on_stand_in,
):
    """`kernel[grid, block, stream]` with a new `cuda.stream()` per launch (pooled streams under
    install: the handles repeat) finds the configuration by the stream's handle: after the
    first few, no parse and no new entry; the launch goes to the new stream's handle; the
    cache's ring of recent launchers keeps no stream that only its launcher holds past the
    next one, so the pool's two handles go round. A launcher held keeps its stream (and is
    the one `kernel[...]` gives for it)."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from fastlaunch.memory import streams
fake.fake_last_launch_stream.restype = ctypes.c_void_p

launch(streams.stream(), device)  # registers the overload, caches the configuration
handles, collected = set(), []
for round in range(2):
    parses, count = one._configuration_parses, one._configuration_count
    for _ in range(20):
        stream = streams.stream()
        one[1, 1, stream](device)
        handles.add(stream.__cuda_stream__()[1])
        print(fake.fake_last_launch_stream() == stream.__cuda_stream__()[1])
        collected.append(weakref.ref(stream))
        del stream
    # the first round meets each pooled handle once; the second only handles seen before
    print(one._configuration_parses - parses, one._configuration_count - count)
print(len(handles), sum(ref() is not None for ref in collected))

first, second = streams.stream(), streams.stream()  # two handles at once
held = one[1, 1, first]
print(held is one[1, 1, first], held.stream is first, one[1, 1, second].stream is second)
one[1, 1, second](device)
print(fake.fake_last_launch_stream() == second.__cuda_stream__()[1])
gone = weakref.ref(first)
del first
print(gone() is not None)  # held by its launcher
held(device)
print(fake.fake_last_launch_stream() == held.stream_handle)
del held
one._clear_configurations()  # the ring let go: nothing else holds it
print(gone() is None, all(ref() is None for ref in collected))
"""
    )
    assert lines[:20] == ["True"] * 20
    assert lines[21:41] == ["True"] * 20
    first_round, second_round = lines[20], lines[41]
    assert second_round == "0 0", lines
    assert first_round in ("0 0", "1 1", "2 2", "3 3", "4 4"), lines  # handles new to it
    assert lines[42:] == [
        "2 1",  # the ring holds the last stream only: the pool goes round two handles
        "True True True",
        "True",
        "True",
        "True",
        "True True",
    ]


def test_stream_objects_of_one_handle_share_a_configuration_and_launch_there(run_on_stand_in):
    """Any stream object (numba-cuda's, cuda.core's, torch's: `__cuda_stream__`) is keyed by the
    handle it gives; int handles and None keep configurations of their own."""
    lines = run_on_stand_in(
        PRELUDE
        + """
fake.fake_last_launch_stream.restype = ctypes.c_void_p

class Stream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)

launch(None, device)
parses = one._configuration_parses
for stream in (Stream(BLOCKING), Stream(BLOCKING), Stream(NON_BLOCKING), BLOCKING, None):
    one[1, 1, stream](device)
    expected = stream if type(stream) is int else getattr(stream, "handle", None)
    print(fake.fake_last_launch_stream() == expected)
print(one._configuration_parses - parses)  # the first object's handle, the other, the int
"""
    )
    assert lines == ["True"] * 5 + ["3"]
