"""The memory API's guarantees that an outside review found broken, on the stand-in driver
(`tests/stand_in_driver/fake_cuda.c`), with the CUDA behaviours it models when asked: copies
with page-locked memory that complete at the next synchronization (`FAKE_ASYNC_PINNED`), event
waits that take time (`FAKE_SLOW_EVENT_MS`), and captures that refuse work on the legacy stream
while a blocking stream is captured. The GPU twins are in `test_gpu_memory_review.py`."""

from __future__ import annotations

from test_cpu_memory_api import PRELUDE as MEMORY_API_PRELUDE
from test_cpu_memory_ordering import LAUNCH

PRELUDE = (
    MEMORY_API_PRELUDE
    + LAUNCH
    + """
import threading, time, warnings

for name in ("fake_stream_waits", "fake_event_records", "fake_sync_copies", "fake_pool_trims",
             "fake_plain_allocations", "fake_plain_frees", "fake_captured_allocations"):
    getattr(fake, name).restype = ctypes.c_size_t
fake.cuStreamBeginCapture_v2.argtypes = [ctypes.c_void_p, ctypes.c_int]
fake.cuStreamEndCapture.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
warnings.simplefilter("ignore")
"""
)

#: more than a staging slot (1 MiB) of float64
LARGE = 300_000


def test_copies_over_a_slot_with_page_locked_memory_return_with_their_bytes(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + f"""
os.environ["FAKE_ASYNC_PINNED"] = "1"
os.environ["FAKE_FLUSH_AT_LAUNCH"] = "1"
from fastlaunch.memory import install
install.install()  # the arrays' methods are fastlaunch's
N = {LARGE}
src = np.arange(N, dtype=np.float64)
d = fl.to_device(src)
out = fl.pinned_array(N); out[:] = -1.0
d.copy_to_host(out)
print("copy_to_host", np.array_equal(out, src))
buf = fl.pinned_array(N); buf[:] = 1.0
d1 = fl.to_device(buf); buf[:] = 2.0
print("to_device", bool(np.all(d1.copy_to_host() == 1.0)))
buf[:] = 5.0
d1.copy_to_device(buf); buf[:] = 6.0
print("copy_to_device", bool(np.all(d1.copy_to_host() == 5.0)))
arr = fl.pinned_array(N); arr[:] = 1.0
launch(None, arr)  # numba-cuda: copy in, launch, copy back, then return
arr[:] = 7.0    # the launch returned: the program uses its array
_core.synchronize()
print("kernel argument", bool(np.all(arr == 7.0)))
"""
    )
    assert lines == [
        "copy_to_host True",
        "to_device True",
        "copy_to_device True",
        "kernel argument True",
    ]


def test_a_new_allocation_used_on_a_non_blocking_stream_waits_for_the_legacy_stream(
    run_on_stand_in,
):
    """The pool may hand back memory freed on the legacy stream whose earlier users still run:
    an allocation is legacy work, which a launch on a non-blocking stream waits for."""
    lines = run_on_stand_in(
        PRELUDE
        + """
fake.fake_last_waiting_stream.restype = ctypes.c_void_p
NB = _core.stream_create(True)
launch(NB, fl.to_device(np.arange(4.0)))
old = fl.device_array(8)
del old
gc.collect()
context.deallocations.clear()
y = fl.device_array(8)
before = fake.fake_stream_waits()
launch(NB, y)
print(fake.fake_stream_waits() - before, fake.fake_last_waiting_stream() == NB)
launch(NB, y)  # nothing new since: no second wait
print(fake.fake_stream_waits() - before)
"""
    )
    assert lines == ["1 True", "1"]


def test_waits_for_the_gpu_let_other_python_threads_run(run_on_stand_in):
    """A staged copy waiting for its slot, and an allocation beside a copy back that waits,
    hold neither the GIL nor a lock another call needs: a pure-Python thread keeps running
    (on a GPU, a Python host callback queued before the awaited work would otherwise never
    run)."""
    lines = run_on_stand_in(
        PRELUDE
        + """
os.environ["FAKE_SLOW_EVENT_MS"] = "400"
ticks, stop = [], False

def ticker():
    while not stop:
        ticks.append(time.perf_counter())
        time.sleep(0.001)

threading.Thread(target=ticker, daemon=True).start()
time.sleep(0.05)

def longest_stop(start, end):
    points = [start] + [t for t in ticks if start <= t <= end] + [end]
    return max(b - a for a, b in zip(points, points[1:]))

for _ in range(4):
    fl.to_device(np.ones(16))
t0 = time.perf_counter(); fl.to_device(np.ones(16)); t1 = time.perf_counter()
print("slot wait took", t1 - t0 >= 0.3, "thread stopped", longest_stop(t0, t1) >= 0.2)
d = fl.to_device(np.arange(16.0))
worker = threading.Thread(target=d.copy_to_host)
worker.start()
time.sleep(0.1)
t0 = time.perf_counter(); fl.device_array(4); t1 = time.perf_counter()
worker.join()
stop = True
print("allocation waited", t1 - t0 >= 0.2, "thread stopped", longest_stop(t0, t1) >= 0.2)
"""
    )
    assert lines == [
        "slot wait took True thread stopped False",
        "allocation waited False thread stopped False",
    ]


def test_a_failed_staging_slot_allocation_leaves_the_ring_working(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
host = np.arange(4, dtype=np.float64)
dev = _core.mem_alloc(host.nbytes)
held = []
while True:  # the stand-in's allocation table full: cuMemHostAlloc runs out of memory
    try:
        held.append(_core.mem_alloc(8))
    except Exception:
        break
outcomes = []
for attempt in range(5):
    if attempt == 1:
        for pointer in held[:100]:
            _core.mem_free(pointer)
    try:
        _core.copy_to_device(dev, host * attempt)
        back = np.zeros(4)
        _core.copy_to_host(back, dev)
        outcomes.append(bool(np.array_equal(back, host * attempt)))
    except BaseException as error:
        outcomes.append(type(error).__name__)
print(outcomes)
"""
    )
    assert lines == ["[True, True, True, True, True]"]


def test_a_host_array_launch_on_a_captured_stream_is_refused_and_staging_keeps_working(
    run_on_stand_in,
):
    lines = run_on_stand_in(
        PRELUDE
        + """
S = _core.stream_create(False)
fake.cuStreamBeginCapture_v2(S, 2)  # another library's capture (relaxed)
try:
    launch(S, np.zeros(16))
    print("launched")
except TypeError as error:
    print("refused:", "captur" in str(error))
graph = ctypes.c_void_p()
print("capture ends", fake.cuStreamEndCapture(S, ctypes.byref(graph)))
expected = [np.arange(16.0) + i for i in range(12)]
ok = all(np.array_equal(transfers.copy_to_host(fl.to_device(x)), x) for x in expected)
print("copies after", ok)
"""
    )
    assert lines == ["refused: True", "capture ends 0", "copies after True"]


def test_allocations_and_frees_during_a_capture_are_what_numba_cuda_makes(run_on_stand_in):
    """On a stream being captured, or beside a blocking stream's capture, an allocation is
    `cuMemAlloc` (numba-cuda's: no graph allocation node, no work on the legacy stream), and a
    free of pool memory waits until the capture ended; the capture stays valid."""
    lines = run_on_stand_in(
        PRELUDE
        + """
S = _core.stream_create(False)
stream = transfers.numba_cuda.cudadrv_driver().Stream
kept = fl.device_array(16)
fake.cuStreamBeginCapture_v2(S, 2)
on_captured = _core.mem_alloc(128, S)
beside = _core.mem_alloc(128)
outstanding = fake.fake_outstanding_allocations()
del kept
gc.collect()
context.deallocations.clear()  # its free: deferred while the capture refuses the legacy stream
print("captured", fake.fake_captured_allocations(), "plain", fake.fake_plain_allocations())
print("freed during capture", outstanding - fake.fake_outstanding_allocations())
graph = ctypes.c_void_p()
print("capture ends", fake.cuStreamEndCapture(S, ctypes.byref(graph)))
fresh = fl.device_array(4)  # the next allocation outside a capture makes the deferred free
print("freed after", outstanding - fake.fake_outstanding_allocations())
_core.mem_free(on_captured); _core.mem_free(beside)
print("plain frees", fake.fake_plain_frees())
"""
    )
    assert lines == [
        "captured 0 plain 2",
        "freed during capture 0",
        "capture ends 0",
        "freed after 0",
        "plain frees 2",
    ]


def test_fastlaunch_allocates_from_a_pool_of_its_own_trimmed_when_out_of_memory(
    run_on_stand_in,
):
    lines = run_on_stand_in(
        PRELUDE
        + """
fake.fake_pools_created.restype = ctypes.c_int
d = fl.device_array(16)
print("pools", fake.fake_pools_created())
held = []
try:
    while True:
        held.append(_core.mem_alloc(8))
except Exception as error:
    print(type(error).__name__, "trimmed", fake.fake_pool_trims() >= 1)
for pointer in held:
    _core.mem_free(pointer)
_core.forget_context(_core.context_key())  # numba-cuda resets the context: a new pool after
key = _core.context_key()
_core.mem_free(_core.mem_alloc(8))
print("pools", fake.fake_pools_created())
"""
    )
    assert lines == ["pools 1", "CudaDriverError trimmed True", "pools 2"]


def test_the_array_interface_records_nothing_and_waits_for_its_own_work(run_on_stand_in):
    """The copy's mark is recorded when the copy is enqueued; the interface read records
    nothing on the legacy stream (a blocking stream's capture would refuse it), and later work
    elsewhere adds nothing to it (the second review's F2 and F6)."""
    lines = run_on_stand_in(
        PRELUDE
        + """
d = fl.to_device(np.arange(8.0))
before = fake.fake_event_records()
print(transfers.cuda_array_interface(d)["stream"], fake.fake_event_records() - before)
print(transfers.cuda_array_interface(d)["stream"], fake.fake_event_records() - before)
fl.to_device(np.ones(4))  # new legacy work, on other memory
before = fake.fake_event_records()
transfers.cuda_array_interface(d)
print(fake.fake_event_records() - before)
"""
    )
    assert lines == ["None 0", "None 0", "0"]


def test_a_context_reset_releases_what_fastlaunch_kept(run_on_stand_in):
    """numba-cuda's `Context.reset` (`cuda.close()`) under install: fastlaunch's numba-cuda
    `Context`, idle pooled streams and Rust-side state (ring, events, pool) of that context
    go, after numba-cuda's own release."""
    lines = run_on_stand_in(
        PRELUDE
        + """
import types
from fastlaunch.memory import closing, streams
fake.fake_pools_created.restype = ctypes.c_int
context.device = types.SimpleNamespace(id=0)
context.modules = {}
key = _core.context_key()
kept = streams.stream()
d = fl.device_array(16)
del kept, d
gc.collect()
print("idle", len(streams._idle[key]), "pools", fake.fake_pools_created())
closing.reset(context)
print(key in allocation._contexts, key in streams._idle)
allocation._contexts[key] = context  # the stand-in's context lives on under the same key
allocation._proxies[key] = weakref.proxy(context)
fl.device_array(16)
print("pools", fake.fake_pools_created())
"""
    )
    assert lines == ["idle 1 pools 1", "False False", "pools 2"]


def test_a_stream_of_another_context_is_followed_as_a_non_blocking_one(run_on_stand_in):
    """numba-cuda allocates and copies in the current context whatever context the stream
    belongs to; such a stream (another device's) is not ordered with the current context's
    legacy stream, so the free there waits for an event recorded on it, as for a
    non-blocking stream."""
    lines = run_on_stand_in(
        PRELUDE
        + """
fake.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
OTHER = _core.stream_create(False)  # a blocking stream of the primary context
elsewhere = ctypes.create_string_buffer(8)  # another context
fake.cuCtxPushCurrent_v2(ctypes.addressof(elsewhere))
allocation._contexts[_core.context_key()] = context
allocation._proxies[_core.context_key()] = weakref.proxy(context)
stream = numba_driver.Context.create_external_stream(None, OTHER)
d = fl.to_device(np.arange(8.0), stream=stream)
before = fake.fake_stream_waits()
del d
gc.collect()
context.deallocations.clear()
print("free waited", fake.fake_stream_waits() - before)
"""
    )
    assert lines == ["free waited 1"]


def test_a_staging_slot_is_reused_only_once_the_mark_after_its_copy_is_done(run_on_stand_in):
    """A staged copy to the device on the legacy stream is followed by its mark alone, which
    the slot's next copy waits for: with the copies from the slots still queued on a busy GPU
    (page-locked sources run at the next synchronization; queries say "not ready"), twelve
    copies through four slots each land their own bytes; with an idle GPU, one query of the
    newest mark frees every slot before it."""
    lines = run_on_stand_in(
        PRELUDE
        + """
os.environ["FAKE_ASYNC_PINNED"] = "1"
from fastlaunch.memory import install
install.install()
def copies(env):
    os.environ.update(env)
    sources = [np.full(4096, float(i)) for i in range(12)]  # 32 KiB each: staged
    arrays = [fl.to_device(source) for source in sources]
    os.environ.pop("FAKE_SLOW_EVENT_MS", None)
    return all(np.array_equal(a.copy_to_host(), s) for a, s in zip(arrays, sources))
print(copies({"FAKE_SLOW_EVENT_MS": "5"}), copies({}))
"""
    )
    assert lines == ["True True"]
