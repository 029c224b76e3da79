"""No driver call of the memory API that may wait for the GPU holds the GIL (second memory
review, F3): `cuMemFreeHost` synchronizes with the device, as `cudaFreeHost` does, so freeing a
`cuda.pinned_array`, or the staging ring's slots when a context's memory state is dropped
(`cuda.close()`, `forget_context`), with the GIL held would hang a program with a Python host
function queued on a stream (the callback waits for the GIL, the free for the callback).
On the stand-in driver, `FAKE_FREEHOST_MS` makes `cuMemFreeHost` last that long: a pure-Python
thread must keep running meanwhile."""

from __future__ import annotations

import pytest
from test_cpu_memory_api import PRELUDE as MEMORY_API_PRELUDE

PRELUDE = (
    MEMORY_API_PRELUDE
    + """
import threading, time, types
from numba import cuda
fl.install()
ticks, stop = [], False

def ticker():
    while not stop:
        ticks.append(time.perf_counter())
        time.sleep(0.001)

def longest_stop(start, end):
    # the longest time the ticker did not run between start and end
    points = [start] + [t for t in ticks if start <= t <= end] + [end]
    return max(b - a for a, b in zip(points, points[1:]))

def timed(call):
    start = time.perf_counter()
    call()
    end = time.perf_counter()
    return end - start, longest_stop(start, end)

threading.Thread(target=ticker, daemon=True).start()
time.sleep(0.05)
"""
)


def test_freeing_a_pinned_array_lets_other_threads_run(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
context.deallocations.memory_capacity = 1 << 40  # (the stand-in's: unset, every free at once)
pinned = cuda.pinned_array(1000)
pinned[:] = 1
del pinned
gc.collect()  # its free is queued in numba-cuda's deallocations: made at the flush
print("queued", len(context.deallocations))
os.environ["FAKE_FREEHOST_MS"] = "500"
took, stopped = timed(context.deallocations.clear)
print("free took", took >= 0.45, "thread stopped", stopped >= 0.2)
"""
    )
    assert lines == ["queued 1", "free took True thread stopped False"]


@pytest.mark.parametrize("how", ["cuda.close", "forget_context"])
def test_freeing_the_staging_slots_of_a_closed_context_lets_other_threads_run(run_on_stand_in, how):
    lines = run_on_stand_in(
        PRELUDE
        + f"""
from fastlaunch.memory import closing
context.device = types.SimpleNamespace(id=0)  # what numba-cuda's Context.reset reads
context.modules = {{}}
for _ in range(3):
    fl.to_device(np.ones(16))  # a staging slot made (page-locked memory)
os.environ["FAKE_FREEHOST_MS"] = "500"
key = _core.context_key()
if {how!r} == "cuda.close":
    took, stopped = timed(lambda: closing.reset(context))
else:
    took, stopped = timed(lambda: _core.forget_context(key))
print("free took", took >= 0.45, "thread stopped", stopped >= 0.2)
"""
    )
    assert lines == ["free took True thread stopped False"]
