"""The releases of pool memory run in Rust (`rust/ext/src/memory/releases.rs`), on the stand-in
driver: an `AutoFreePointer`'s `_core.PoolRelease` releases once and answers numba-cuda's
`MemoryPointer.free`, queues its free inside `defer_cleanup()`, runs when the pointer is
collected unreleased; an `OwnedPointer`'s deref runs when it is collected, in a reference
cycle too; and neither leaves anything behind once it ran."""

from __future__ import annotations

from test_cpu_memory_api import PRELUDE


def test_a_pool_release_releases_once_and_answers_numba_cudas_free(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
allocations = context.memory_manager.allocations
base = fake.fake_outstanding_allocations()
a = fl.device_array(64)
address = a.gpu_data.device_ctypes_pointer.value
memory = allocations[address]  # (held: numba-cuda's free() then finds it dead)
release = memory._finalizer
print(type(release) is _core.PoolRelease, release.alive, memory.refct)
a.gpu_data.free()  # numba-cuda's MemoryPointer.free: calls it, checks alive
print(release.alive, address in allocations, fake.fake_outstanding_allocations() - base)
release()  # again: nothing
try:
    memory.free()
except RuntimeError as error:
    print(error)
del a  # the OwnedPointer's deref finds the owner released: nothing more
gc.collect()
print(fake.fake_outstanding_allocations() - base)
"""
    )
    assert lines == ["True True 1", "False False 0", "Freeing dead memory", "0"]


def test_a_pool_release_waits_in_the_queue_inside_defer_cleanup(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
base = fake.fake_outstanding_allocations()
with context.memory_manager.defer_cleanup():
    a = fl.device_array(64)
    release = a.gpu_data._mem._finalizer
    del a
    print(release.alive, len(context.deallocations), fake.fake_outstanding_allocations() - base)
context.deallocations.clear()
print(len(context.deallocations), fake.fake_outstanding_allocations() - base)
"""
    )
    assert lines == ["False 1 1", "0 0"]


def test_memory_collected_unreleased_is_freed_and_frees_in_a_dead_context_do_nothing(
    run_on_stand_in,
):
    lines = run_on_stand_in(
        PRELUDE
        + """
base = fake.fake_outstanding_allocations()
kept = [fl.device_array(32) for _ in range(3)]
releases = [k.gpu_data._mem._finalizer for k in kept]
context.memory_manager.allocations.clear()  # a context reset: the pointers are collected
print([r.alive for r in releases], fake.fake_outstanding_allocations() - base)
del kept  # their OwnedPointers find their owner gone: nothing more
gc.collect()
print(fake.fake_outstanding_allocations() - base)
"""
    )
    assert lines == ["[False, False, False] 0", "0"]


def test_owned_pointers_in_reference_cycles_are_released_and_nothing_is_left_behind(
    run_on_stand_in,
):
    lines = run_on_stand_in(
        PRELUDE
        + """
from fastlaunch.memory import views
def left():
    kinds = (_core.PoolRelease, _core.OwnerDeref)
    return sum(type(o) in kinds for o in gc.get_objects())
gc.collect()
base = fake.fake_outstanding_allocations()
a = fl.device_array(64)
view = views.getitem(a, slice(1, -1))
cycle = [a, view]
cycle.append(cycle)
del a, view, cycle
print(fake.fake_outstanding_allocations() - base, left())
gc.collect()  # the collector runs the derefs of the cycle's OwnedPointers
print(fake.fake_outstanding_allocations() - base, left())
for _ in range(1000):
    b = fl.device_array(16)
    views.getitem(b, slice(2, None))
del b
gc.collect()
print(fake.fake_outstanding_allocations() - base, left(), len(context.memory_manager.allocations))
"""
    )
    assert lines == ["1 3", "0 0", "0 0 0"]
