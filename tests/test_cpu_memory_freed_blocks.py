"""The freed-block cache in front of the pool (`rust/ext/src/memory/freed_blocks.rs`), on the
stand-in driver, which counts the pool's allocations and stream-ordered frees, and the event
records and waits that order a reused block: a block freed on the legacy stream is handed out
again for its size class without a driver allocation, after a command on the legacy stream
made since its free, waited for by any other stream; captures neither take nor get blocks;
trimming, running out of memory, a new release threshold and the context's reset empty it;
`pool_usage` counts it; `FASTLAUNCH_FREED_BLOCK_CACHE=0` turns it off. The GPU twins are in
`test_gpu_memory_freed_blocks.py`."""

from __future__ import annotations

from test_cpu_memory_api import PRELUDE as MEMORY_API_PRELUDE

PRELUDE = (
    MEMORY_API_PRELUDE
    + """
import warnings
warnings.simplefilter("ignore")
_core.set_pool_release_threshold(0, allocation.KEEP_EVERYTHING)  # as allocation.context() does
for name in ("fake_pool_allocations", "fake_async_frees", "fake_event_records",
             "fake_stream_waits", "fake_plain_allocations", "fake_outstanding_bytes"):
    getattr(fake, name).restype = ctypes.c_size_t
fake.fake_last_recording_stream.restype = ctypes.c_void_p
fake.fake_last_waiting_stream.restype = ctypes.c_void_p
fake.cuStreamBeginCapture_v2.argtypes = [ctypes.c_void_p, ctypes.c_int]
fake.cuStreamEndCapture.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
LEGACY = 1  # CU_STREAM_LEGACY, where the Rust core records on the legacy stream

class Counts:
    # the stand-in's counters since the last call
    NAMES = ("fake_pool_allocations", "fake_async_frees", "fake_event_records",
             "fake_stream_waits")

    def __init__(self):
        self.last = self.now()

    def now(self):
        return [getattr(fake, name)() for name in self.NAMES]

    def since(self):
        now = self.now()
        made = [b - a for a, b in zip(self.last, now)]
        self.last = now
        return "allocs {} frees {} records {} waits {}".format(*made)

def cached():
    return _core.pool_usage(0)[2]
"""
)


def test_a_freed_block_is_handed_out_again_for_its_size_class(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
counts = Counts()
bytes_before = fake.fake_outstanding_bytes()
p = _core.mem_alloc(32257)
print(counts.since(), fake.fake_outstanding_bytes() - bytes_before)  # at its class's size
_core.copy_to_device(p, b"kept bytes")
counts.since()
_core.mem_free(p)
print(counts.since(), cached())  # kept: no free
q = _core.mem_alloc(32768)  # the same class (64 x 512 bytes)
print(q == p, counts.since(), cached())  # no allocation; one record on the legacy stream
back = bytearray(10)
_core.copy_to_host(back, q)
print(bytes(back))
counts.since()
r = _core.mem_alloc(32768)  # the class keeps no more: the pool
s = _core.mem_alloc(100)  # another class
print(r != p and s != p, counts.since())
for pointer in (q, r, s):
    _core.mem_free(pointer)
print(counts.since(), cached(), _core.pool_usage(0)[0])
array = fl.device_array(4096)  # 32 KiB, through numba-cuda's objects
address = array.device_ctypes_pointer.value
counts.since()
del array
again = fl.device_array(4096)
print(again.device_ctypes_pointer.value == address, counts.since())
"""
    )
    assert lines == [
        "allocs 1 frees 0 records 0 waits 0 32768",
        "allocs 0 frees 0 records 0 waits 0 32768",
        "True allocs 0 frees 0 records 1 waits 0 0",
        "b'kept bytes'",
        "True allocs 2 frees 0 records 0 waits 0",
        "allocs 0 frees 0 records 0 waits 0 66048 0",
        "True allocs 0 frees 0 records 1 waits 0",
    ]


def test_blocks_over_a_mebibyte_are_kept_in_classes_of_128_kib(run_on_stand_in):
    # a loop making arrays of a few MiB each step reuses its blocks, as CuPy's and torch's
    # caching allocators do, instead of the pool's allocation and free per array
    lines = run_on_stand_in(
        PRELUDE
        + """
counts = Counts()
bytes_before = fake.fake_outstanding_bytes()
p = _core.mem_alloc((1 << 20) + 1)
print(counts.since(), fake.fake_outstanding_bytes() - bytes_before)  # 1 MiB + 128 KiB
_core.mem_free(p)
q = _core.mem_alloc((1 << 20) + (128 << 10))  # the same class
print(q == p, counts.since())
big = fl.device_array(2 << 20, np.uint8)  # 2 MiB, through numba-cuda's objects
address = big.device_ctypes_pointer.value
counts.since()
del big
again = fl.device_array(1 << 19, np.float32)  # 2 MiB again, another dtype
print(again.device_ctypes_pointer.value == address, counts.since())
_core.mem_free(q)
print(cached() == (1 << 20) + (128 << 10))
"""
    )
    assert lines == [
        f"allocs 1 frees 0 records 0 waits 0 {(1 << 20) + (128 << 10)}",
        "True allocs 0 frees 0 records 1 waits 0",
        "True allocs 0 frees 0 records 1 waits 0",
        "True",
    ]


def test_a_reuse_is_ordered_after_the_free_on_every_stream(run_on_stand_in):
    """A command on the legacy stream after the free orders the block after its earlier users
    on blocking streams, and later work on a blocking stream after it (the legacy stream
    synchronises with both); a non-blocking stream, ordered with nothing else, waits for it on
    the GPU, unless it is known done; the reuse is legacy work, which a copy on another
    non-blocking stream then waits for."""
    lines = run_on_stand_in(
        PRELUDE
        + """
NON_BLOCKING = _core.stream_create(True)
OTHER = _core.stream_create(True)
BLOCKING = _core.stream_create(False)
counts = Counts()
blocks = [_core.mem_alloc(4096) for _ in range(3)]
for block in blocks:
    _core.mem_free(block)
counts.since()

q = _core.mem_alloc(4096, NON_BLOCKING)  # a record on the legacy stream, a wait; followed
print(q in blocks, counts.since(), fake.fake_last_waiting_stream() == NON_BLOCKING)
_core.copy_to_device(q, b"x", OTHER)  # legacy work counted since OTHER last waited
print(counts.since().split(" waits ")[1], fake.fake_last_waiting_stream() == OTHER)
r = _core.mem_alloc(4096, BLOCKING)  # recorded since the free already, followed: no wait
print(r in blocks, counts.since())
s = _core.mem_alloc(4096)  # the legacy stream: nothing to wait for
print(s in blocks, counts.since())

_core.mem_free(s)  # waits for the two non-blocking streams' work (followed since)
t = _core.mem_alloc(4096)  # freed after the last record: recorded again
print(t == s, counts.since(), fake.fake_last_recording_stream() == LEGACY)

_core.mem_free(t)
u = _core.mem_alloc(8192)  # another size: from the pool, a mark recorded after the free
_core.context_synchronize()  # that mark known done
v = _core.mem_alloc(4096, NON_BLOCKING)  # t's block, after a mark known done: no wait
print(v == t, counts.since())
"""
    )
    assert lines == [
        "True allocs 0 frees 0 records 2 waits 1 True",
        "1 True",
        "True allocs 0 frees 0 records 0 waits 0",
        "True allocs 0 frees 0 records 0 waits 0",
        "True allocs 0 frees 0 records 1 waits 2 True",
        "True allocs 1 frees 0 records 2 waits 0",
    ]


def test_frees_after_work_on_non_blocking_streams_still_wait_for_it(run_on_stand_in):
    """A block kept is freed as the pool's free is: the legacy stream waits for the work on
    non-blocking streams since the last free before the block can be handed out."""
    lines = run_on_stand_in(
        PRELUDE
        + """
NON_BLOCKING = _core.stream_create(True)
p = _core.mem_alloc(4096, NON_BLOCKING)
_core.copy_to_device(p, b"abc", NON_BLOCKING)
counts = Counts()
_core.mem_free(p)
print(counts.since(), fake.fake_last_waiting_stream() in (0, LEGACY, None), cached())
"""
    )
    assert lines == ["allocs 0 frees 0 records 0 waits 1 True 4096"]


def test_captures_neither_take_nor_get_blocks(run_on_stand_in):
    """While a blocking stream is captured (which refuses the legacy stream), an allocation on
    it or beside it is numba-cuda's `cuMemAlloc` and a free is deferred, never kept: the capture
    stays valid; afterwards the cache serves again."""
    lines = run_on_stand_in(
        PRELUDE
        + """
S = _core.stream_create(False)
kept = _core.mem_alloc(4096)
during = _core.mem_alloc(4096)
_core.mem_free(kept)
counts = Counts()
plain = fake.fake_plain_allocations()
fake.cuStreamBeginCapture_v2(S, 2)
on_captured = _core.mem_alloc(4096, S)
beside = _core.mem_alloc(4096)
_core.mem_free(during)  # deferred, not kept
print(kept not in (on_captured, beside), fake.fake_plain_allocations() - plain, cached())
graph = ctypes.c_void_p()
print("capture ends", fake.cuStreamEndCapture(S, ctypes.byref(graph)))
print(counts.since())
again = _core.mem_alloc(4096)  # makes the deferred free first
print(again == kept, counts.since(), cached())
_core.mem_free(on_captured); _core.mem_free(beside)
"""
    )
    assert lines == [
        "True 2 4096",
        "capture ends 0",
        "allocs 0 frees 0 records 0 waits 0",
        "True allocs 0 frees 1 records 1 waits 0 0",
    ]


def test_trimming_running_out_of_memory_and_a_reset_empty_it(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
def fill():
    blocks = [_core.mem_alloc(4096) for _ in range(3)]
    for block in blocks:
        _core.mem_free(block)
    return cached()

counts = Counts()
print(fill())
before = fake.fake_outstanding_allocations()
_core.pool_trim(0)
print(cached(), counts.since().split(" records")[0],
      before - fake.fake_outstanding_allocations())
fill()
try:
    _core.mem_alloc(1 << 50)
except Exception as error:
    print(type(error).__name__, cached())
fill()
before = fake.fake_outstanding_allocations()
_core.set_pool_release_threshold(0, 1 << 30)
print("new threshold", cached(), before - fake.fake_outstanding_allocations())
fill()
before = fake.fake_outstanding_allocations()
_core.forget_context(_core.context_key())  # what numba-cuda's Context.reset wrapper calls
print("reset", before - fake.fake_outstanding_allocations(), cached())
"""
    )
    assert lines == [
        "12288",
        "0 allocs 3 frees 3 3",
        "CudaDriverError 0",
        "new threshold 0 3",
        "reset 3 0",
    ]


def test_it_is_bounded_by_a_count_per_class_and_the_release_threshold(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
counts = Counts()
blocks = [_core.mem_alloc(4096) for _ in range(20)]
for block in blocks:
    _core.mem_free(block)
print(cached() // 4096, counts.since())
_core.set_pool_release_threshold(0, 3 * 32768)
blocks = [_core.mem_alloc(32768) for _ in range(5)]
for block in blocks:
    _core.mem_free(block)
print(cached() // 32768)
large = _core.mem_alloc((16 << 20) + 1)  # over the largest class: the pool alone
counts.since()
_core.mem_free(large)
print(counts.since(), cached() // 32768)
_core.set_pool_release_threshold(0, 0)  # the driver's default: nothing kept
blocks = [_core.mem_alloc(512) for _ in range(2)]
for block in blocks:
    _core.mem_free(block)
print(cached())
"""
    )
    assert lines == [
        "16 allocs 20 frees 4 records 0 waits 0",
        "3",
        "allocs 0 frees 1 records 0 waits 0 3",
        "0",
    ]


def test_the_switch_turns_it_off(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
counts = Counts()
bytes_before = fake.fake_outstanding_bytes()
p = _core.mem_alloc(100)
print(fake.fake_outstanding_bytes() - bytes_before)  # not rounded to a class
_core.mem_free(p)
q = _core.mem_alloc(100)  # may get p's block: a mark after the free, for its readers
_core.mem_free(q)
print(counts.since(), cached())
""",
        env={"FASTLAUNCH_FREED_BLOCK_CACHE": "0"},
    )
    assert lines == ["100", "allocs 2 frees 2 records 1 waits 0 0"]


def test_defer_cleanup_still_holds_frees_back(run_on_stand_in):
    """Inside `cuda.defer_cleanup()` a free waits in numba-cuda's queue (nothing kept, nothing
    freed); flushed after it, the blocks are kept."""
    lines = run_on_stand_in(
        PRELUDE
        + """
deallocations = context.deallocations
counts = Counts()
with context.memory_manager.defer_cleanup():
    arrays = [fl.device_array(512) for _ in range(3)]
    del arrays
    deallocations.clear()  # held back
    print(len(deallocations), cached(), counts.since())
deallocations.clear()
print(len(deallocations), cached() // 4096, counts.since())
"""
    )
    assert lines == [
        "3 0 allocs 3 frees 0 records 0 waits 0",
        "0 3 allocs 0 frees 0 records 0 waits 0",
    ]
