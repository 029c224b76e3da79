"""The fast paths of a launch on a new `cuda.stream()` object, on the stand-in driver: the
`Stream` made and given back to the pool in Rust (`rust/ext/src/memory/numba_streams.rs`),
its handle read without its `__cuda_stream__` frame, and the flags of the streams fastlaunch
made known without asking the driver (`rust/ext/src/made_streams.rs`), never in place of
what tells streams apart: a non-blocking stream still waits for the legacy work, a reborn
handle waits again, a captured stream is still told apart."""

from __future__ import annotations

from test_cpu_memory_ordering import PRELUDE

QUERIES = """
from fastlaunch.memory import streams
fake.fake_stream_queries.restype = ctypes.c_size_t

def queries_of(launch_once, times=10):
    launch_once()
    before = fake.fake_stream_queries()
    for _ in range(times):
        launch_once()
    return (fake.fake_stream_queries() - before) / times
"""


def test_a_launch_on_a_new_stream_asks_the_driver_only_its_capture_state(run_on_stand_in):
    """A pooled stream's flags are known (fastlaunch made it): one driver query per launch,
    `cuStreamIsCapturing`, on a new `cuda.stream()` object as on a reused one; a stream made
    elsewhere (a raw handle) is asked its flags too. A `cuda.stream()` object's collection
    asks the same once (a stream still being captured is not given back to the pool)."""
    lines = run_on_stand_in(
        PRELUDE
        + QUERIES
        + """
reused = streams.stream()
new = []
def launch_on_a_new_stream():
    new.append(streams.stream())
    launch(new[-1], device)
print(queries_of(launch_on_a_new_stream))  # (each kept: no collection counted)
new.clear()
print(queries_of(lambda: launch(streams.stream(), device)))  # and each given back
print(queries_of(lambda: launch(reused, device)))
print(queries_of(lambda: launch(BLOCKING, device)))
"""
    )
    assert lines == ["1.0", "2.0", "1.0", "2.0"]


def test_a_made_non_blocking_stream_waits_for_the_legacy_work_and_again_when_reborn(
    run_on_stand_in,
):
    """A non-blocking stream made by `Stream.create`, its flags known without asking, waits
    for the legacy copies as a raw one does; its handle given to a new stream (the driver's
    stream id changes) waits again."""
    lines = run_on_stand_in(
        PRELUDE
        + """
made = _core.Stream.create(True)
waits = fake.fake_stream_waits()
launch(made, device)
launch(made, device)
print(fake.fake_stream_waits() - waits, fake.fake_last_waiting_stream() == made.handle)
fake.fake_stream_reborn(ctypes.c_void_p(made.handle))
launch(made, device)
print(fake.fake_stream_waits() - waits)
blocking = _core.Stream.create(False)
launch(blocking, device)  # ordered with the legacy stream already
print(fake.fake_stream_waits() - waits)
"""
    )
    assert lines == ["1 True", "2", "2"]


def test_a_numba_stream_is_read_as_its_cuda_stream_says(run_on_stand_in):
    """Rust reads a numba-cuda `Stream`'s handle as its `__cuda_stream__` returns it (0 for a
    default stream); a subclass, with its own `__cuda_stream__`, is asked through it."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from numba.cuda.cudadrv.driver import Stream
from fastlaunch.memory import streams
made = streams.stream()
print(_core.stream_handle(made) == made.__cuda_stream__()[1] != 0)
external = numba_driver.Context.create_external_stream(None, 0x1234)
print(_core.stream_handle(external), _core.stream_handle(
    numba_driver.Context.create_external_stream(None, 0)))

class Renamed(Stream):
    def __cuda_stream__(self):
        return (0, 0x4321)

renamed = object.__new__(Renamed)
renamed.handle = made.handle
print(_core.stream_handle(renamed) == 0x4321)
"""
    )
    assert lines == ["True", "4660 0", "True"]


def test_a_stream_goes_back_to_the_pool_once(run_on_stand_in):
    """The `Stream` holds its stream's return in its instance dict: when the object is
    collected, the stream goes back to the pool, once, whoever else held the return (a
    second holder gives it back when the last goes); a stream never goes back while an
    object handed out over it lives, and is never handed out twice at once."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from fastlaunch.memory import streams
made = streams.stream()
handle = made.__cuda_stream__()[1]
print(type(vars(made)["_fastlaunch_pooled"]) is _core.StreamReturn, len(weakref.getweakrefs(made)))
idle = streams._idle[_core.current_context_key()]
before = len(idle)
del made
gc.collect()
print(len(idle) - before, idle[-1].handle == handle)
again = streams.stream()
held = vars(again)["_fastlaunch_pooled"]
del again
gc.collect()
print(len(idle) - before)  # the stream was taken, and is held by `held`
del held
print(len(idle) - before)
first, second = streams.stream(), streams.stream()
print(first.__cuda_stream__()[1] != second.__cuda_stream__()[1])
"""
    )
    assert lines == ["True 0", "1 True", "0", "1", "True"]


def test_a_new_stream_per_launch_reuses_the_pool_s_streams(run_on_stand_in):
    """A new `cuda.stream()` object per launch (the tutorial's spelling): its launcher, kept
    by the kernel's recent configurations, no longer keeps the stream object once no one else
    holds either, so the pool hands the stream out again within two calls (two streams in
    all), each object over the same handle object type numba-cuda gives its streams."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from fastlaunch.memory import streams
seen = set()
for _ in range(20):
    made = streams.stream()
    seen.add(made.__cuda_stream__()[1])
    launch(made, device)
    del made
idle = streams._idle[_core.current_context_key()]
print(len(seen), len(idle))
made = streams.stream()
print(type(made.handle) is type(numba_driver.Context.create_external_stream(None, 1).handle))
print(made.external, made.__cuda_stream__()[1] in seen)
"""
    )
    assert lines == ["2 1", "True", "False True"]
