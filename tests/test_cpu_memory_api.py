"""numba-cuda's memory API on the Rust core (`fastlaunch.memory`), on the stand-in driver, whose
memory is real host memory. numba-cuda cannot make its own context without a GPU, so these
give fastlaunch a stand-in `Context` with numba-cuda's own memory manager: the objects made
are numba-cuda's (`DeviceNDArray`, `OwnedPointer`), their bytes round-trip, their frees go
through numba-cuda's deallocation queue, and `install()` puts the functions in place and
`uninstall()` takes them away."""

from __future__ import annotations

PRELUDE = """
import ctypes, gc, logging, os, weakref
import numpy as np
from numba.cuda.cudadrv import driver as numba_driver
from numba.cuda.cudadrv.devicearray import DeviceNDArray
import fastlaunch as fl
from fastlaunch import _core
from fastlaunch.memory import allocation, transfers

numba_driver._logger = logging.getLogger("numba.cuda.cudadrv.driver")  # set by its init

class StandInContext:
    # numba-cuda's Context, as far as fastlaunch.memory uses it
    def __init__(self):
        self.memory_manager = numba_driver.NumbaCUDAMemoryManager(context=self)
        self.deallocations = self.memory_manager.deallocations

context = StandInContext()
allocation._contexts[_core.context_key()] = context
allocation._proxies[_core.context_key()] = weakref.proxy(context)
fake = ctypes.CDLL(os.environ["FASTLAUNCH_CUDA_DRIVER"])

def numba_state(array):
    # vars(array) less the launch description fastlaunch's arrays carry, last
    state = dict(vars(array))
    if list(state)[-1:] == ["_fastlaunch_description"]:
        assert type(state.pop("_fastlaunch_description")) is _core.ArrayDescription
    return state
"""


def test_arrays_round_trip_as_numba_device_arrays(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
cases = [
    np.arange(12.0).reshape(3, 4),
    np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4)),
    np.array(2.5),
    np.arange(6).astype("datetime64[s]"),
    np.arange(300_000, dtype=np.float64),  # over a staging slot
]
for host in cases:
    device = fl.to_device(host)
    back = transfers.copy_to_host(device)
    same = (
        type(device) is DeviceNDArray
        and (device.shape, device.strides, device.dtype) == (host.shape, host.strides, host.dtype)
        and np.array_equal(back, host)
        and (back.shape, back.strides, back.dtype) == (host.shape, host.strides, host.dtype)
    )
    print(same)
"""
    )
    assert lines == ["True"] * 5  # (zero-size arrays ask numba-cuda for a context: GPU tests)


def test_what_fastlaunch_does_not_copy_goes_to_numba_cuda(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
def numba_to_device(obj, stream=0, copy=True):
    return "numba"
from fastlaunch.memory import originals
from fastlaunch import _numba_compat
originals.remember(_numba_compat.api(), "to_device", numba_to_device)
for value in (np.arange(8.0)[::2], np.zeros(3, dtype=[("a", "f4")]), [1, 2], np.float64(3)):
    print(fl.to_device(value))
"""
    )
    assert lines == ["numba"] * 4


def test_frees_go_through_numba_cudas_deallocation_queue(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
base = fake.fake_outstanding_allocations()
with context.memory_manager.defer_cleanup():
    for _ in range(30):
        fl.to_device(np.ones(1000))
    gc.collect()
    print(fake.fake_outstanding_allocations() - base >= 30, len(context.deallocations) >= 30)
context.deallocations.clear()
print(fake.fake_outstanding_allocations() - base <= 4)  # what stays: the staging ring
for _ in range(100_000 // 100):  # many rounds, then drop: nothing accumulates
    for _ in range(100):
        fl.to_device(np.ones(16))
    context.deallocations.clear()
print(fake.fake_outstanding_allocations() - base <= 4)
"""
    )
    assert lines == ["True True", "True", "True"]


def test_frees_bypass_the_queue_but_defer_cleanup_holds_them_back(run_on_stand_in):
    """A pool free is stream-ordered, so it needs no deferral: it is made when the array goes
    (nothing in numba-cuda's queue); inside `defer_cleanup()` (nested too, and after an
    exception left one) it waits in the queue as numba-cuda's frees do."""
    lines = run_on_stand_in(
        PRELUDE
        + """
deallocations = context.deallocations
base = fake.fake_outstanding_allocations()
array = fl.device_array(4096)
pointer = array.gpu_data
del array
print(fake.fake_outstanding_allocations() - base, len(deallocations))  # its pointer holds it
del pointer
print(fake.fake_outstanding_allocations() - base, len(deallocations))
with context.memory_manager.defer_cleanup():
    with context.memory_manager.defer_cleanup():
        del_me = [fl.device_array(16) for _ in range(3)]
        del del_me
        deallocations.clear()  # held back
        print(fake.fake_outstanding_allocations() - base, len(deallocations))
    del_me = fl.device_array((2, 2), order="F")
    del del_me
    print(fake.fake_outstanding_allocations() - base, len(deallocations))
deallocations.clear()
print(fake.fake_outstanding_allocations() - base, len(deallocations))
try:
    with context.memory_manager.defer_cleanup():
        raise KeyError
except KeyError:
    pass
fl.device_array(16)
print(fake.fake_outstanding_allocations() - base, len(deallocations))
"""
    )
    assert lines == ["1 0", "0 0", "3 3", "4 4", "0 0", "0 0"]


def test_device_arrays_and_pinned_arrays(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
d = fl.device_array((4, 5), np.int32, order="F")
print(type(d) is DeviceNDArray, d.shape, d.strides, d.dtype)
like = fl.device_array_like(np.zeros((2, 3), np.float32)[:, ::2])
print(like.shape, like.strides)
before = fake.fake_outstanding_allocations()
p = fl.pinned_array((3, 3), np.float64)
p[:] = 7
print(type(p) is np.ndarray, p.sum(), fake.fake_outstanding_allocations() - before)
del p
gc.collect()
context.deallocations.clear()
print(fake.fake_outstanding_allocations() - before)
print(fl.pinned_array_like(np.zeros((2, 2), np.int8, order="F")).strides)
"""
    )
    assert lines == [
        "True (4, 5) (4, 16) int32",
        "(2, 2) (8, 4)",
        "True 63.0 1",
        "0",
        "(1, 2)",
    ]


def test_install_puts_the_functions_in_place_and_uninstall_takes_them_away(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
from numba import cuda
import numba.cuda.api as api
originals = (cuda.to_device, api.device_array, numba_driver.host_to_device,
             DeviceNDArray.__getitem__)
fl.install()
print(cuda.to_device is fl.to_device, api.device_array is fl.device_array,
      numba_driver.host_to_device is transfers.host_to_device,
      DeviceNDArray.copy_to_host is transfers.copy_to_host)
d = cuda.to_device(np.arange(5.0))
print(d.copy_to_host().tolist())
d.copy_to_device(np.arange(5.0) * 2)  # numba-cuda's method, through the staged copy
print(d.copy_to_host().tolist())
from fastlaunch.memory.originals import original
# what the replacements hand to numba-cuda: its own, by owner and name
print(original(api, "to_device") is originals[0], original(numba_driver, "host_to_device")
      is originals[2], original(DeviceNDArray, "__getitem__") is originals[3])
fl.uninstall()
print((cuda.to_device, api.device_array, numba_driver.host_to_device,
       DeviceNDArray.__getitem__) == originals,
      "copy_to_host" in vars(DeviceNDArray), original(api, "to_device") is originals[0])
"""
    )
    assert lines == [
        "True True True True",
        "[0.0, 1.0, 2.0, 3.0, 4.0]",
        "[0.0, 2.0, 4.0, 6.0, 8.0]",
        "True True True",
        "True False True",
    ]


def test_copy_to_host_checks_the_given_array_as_numba_cuda_does(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
d = fl.to_device(np.arange(6.0))
for out in (np.zeros(5), np.zeros(6, np.float32)):
    try:
        transfers.copy_to_host(d, out)
    except (TypeError, ValueError) as error:
        print(type(error).__name__)
"""
    )
    assert lines == ["ValueError", "TypeError"]


def test_the_pool_keeps_its_memory_unless_told_otherwise(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
allocation._contexts.clear()  # the next allocation sets the device's pool threshold
import fastlaunch._numba_compat as compat
compat.numba_context = lambda: context
fl.device_array(4)
print(_core.pool_release_threshold(0) == 2**64 - 1)
os.environ["FASTLAUNCH_POOL_RELEASE_THRESHOLD"] = "oops"
allocation._contexts.clear()
try:
    fl.device_array(4)
except ValueError as e:
    print("ValueError", "FASTLAUNCH_POOL_RELEASE_THRESHOLD" in str(e))
"""
    )
    assert lines == ["True", "ValueError True"]


def test_views_are_numba_cudas_own_in_every_attribute(run_on_stand_in):
    """`d[a:b]`, `reshape` and `ravel` built by fastlaunch (objects.py, numba_views.rs)
    against numba-cuda's own code on the same array: the same attributes in the same order,
    the same dummy array (numba-cuda caches it per layout), the same pointers, owners and
    reference counts."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from numba.cuda.cudadrv import driver as d
from fastlaunch.memory import views
original = {name: getattr(DeviceNDArray, name) for name in ("reshape", "ravel")}

def described(array):
    state = numba_state(array)
    names = list(state)
    memory = state.pop("gpu_data")
    view = memory._view
    return (
        names, state, type(memory), type(view), int(view.device_pointer),
        view.size, memory.device_ctypes_pointer.value, memory._mem.owner is view.owner,
        type(view.owner), view.is_managed, view.refct, view.context is not None,
    )

def same(ours, theirs, owner):
    refct = owner.refct
    return described(ours) == described(theirs) and owner.refct == refct

hosts = [
    np.arange(40.0),
    np.arange(60, dtype=np.int16).reshape(6, 10),
    np.asfortranarray(np.arange(24, dtype=np.float32).reshape(4, 6)),
    np.arange(2 * 3 * 4, dtype=np.complex128).reshape(2, 3, 4),
    np.ones((5, 1)),
]
items = [slice(1, -1), slice(None, 3), slice(2, None), slice(-2, None), slice(0, 1),
         slice(3, 1), slice(None, None, 2), 0, (slice(1, 3), 0)]
results = []
for host in hosts:
    base = fl.to_device(host)
    owner = base.gpu_data._mem.owner
    for array in (base, base._do_getitem(slice(1, None)), base._do_getitem(slice(None, 2))):
        for item in items:
            try:
                theirs = array._do_getitem(item)
            except Exception:  # an element: a copy to the host through numba-cuda's driver
                continue
            for _ in range(2):  # the second from the thread's table of views' layouts
                results.append(same(views.getitem(array, item), theirs, owner))
    for shape in [(host.size,), host.shape, (-1,)]:
        try:
            theirs = original["reshape"](base, *shape)
        except NotImplementedError:
            continue
        results.append(same(views.reshape(base, *shape), theirs, owner))
    for order in "CF":
        try:
            theirs = original["ravel"](base, order=order)
        except NotImplementedError:
            continue
        results.append(same(views.ravel(base, order=order), theirs, owner))
print(len(results) > 100, all(results), results.count(False))
"""
    )
    assert lines == ["True True 0"]


def test_a_slice_whose_extent_passes_64_bits_is_numba_cudas_own(run_on_stand_in):
    """An array may be made with any strides over any memory: where a slice's byte range
    does not fit 64 bits, fastlaunch leaves the view to numba-cuda (its Python integers),
    rather than wrapping around to another range."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from fastlaunch.memory import views
base = fl.to_device(np.arange(8.0))
crafted = DeviceNDArray((16,), (2**62,), np.dtype(np.float64), gpu_data=base.gpu_data)
ours, theirs = views.getitem(crafted, slice(0, 8)), crafted._do_getitem(slice(0, 8))
pointers = [int(view.gpu_data.device_pointer) for view in (ours, theirs)]
print(ours.shape == theirs.shape, pointers[0] == pointers[1])
print(ours.gpu_data._view.size == theirs.gpu_data._view.size == 7 * 2**62 + 8)
"""
    )
    assert lines == ["True True", "True"]


def test_reshapes_kept_per_dummy_array_are_numba_cudas_own(run_on_stand_in):
    """`reshape` keeps numba-cuda's dummy-array answer per layout, shape and order: asked
    again (the kept answer) it still gives numba-cuda's view; extents that are not all int,
    and reshapes that need a copy, are numba-cuda's each time."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from fastlaunch.memory import views
original = DeviceNDArray.reshape
base = fl.to_device(np.arange(24.0).reshape(4, 6))
strided = base._do_getitem((slice(None), slice(None, None, 2)))
results = []
for args, kws in [((6, 4), {}), ((-1,), {}), ((2, -1, 3), {}), (([3, 8],), {}),
                  ((6, 4), {"order": "F"}), ((np.int64(8), 3), {}), ((24,), {"order": "A"})]:
    for _ in range(2):
        ours, theirs = views.reshape(base, *args, **kws), original(base, *args, **kws)
        results.append(
            (ours.shape, ours.strides, ours._dummy is theirs._dummy)
            == (theirs.shape, theirs.strides, True)
            and type(ours.shape[0]) is type(theirs.shape[0])
        )
errors = []
for _ in range(2):
    try:
        views.reshape(strided, 12)
    except NotImplementedError as error:
        errors.append(str(error))
print(all(results), len(results), errors)
"""
    )
    assert lines == ["True 14 ['operation requires copying', 'operation requires copying']"]


def test_frees_follow_the_work_on_non_blocking_streams(run_on_stand_in):
    """The free of pool memory (on the legacy stream) waits for an event recorded after the
    allocation and the copies on each non-blocking stream since the last free, never on a
    stream handle (the stream may be destroyed by then); blocking and default streams order
    with the legacy stream already."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from fastlaunch.memory import views
fake.fake_stream_waits.restype = ctypes.c_size_t
fake.fake_last_waiting_stream.restype = ctypes.c_void_p
host = np.arange(16.0)
allocated_on = _core.stream_create(non_blocking=True)
copied_on = _core.stream_create(non_blocking=True)
blocking = _core.stream_create()

def external(handle):  # numba-cuda's Stream over a raw handle (cuda.external_stream)
    return numba_driver.Context.create_external_stream(None, handle)

def waits_of_a_free(make):
    array = make()
    waits = fake.fake_stream_waits()
    del array
    gc.collect()
    context.deallocations.clear()
    return fake.fake_stream_waits() - waits, fake.fake_last_waiting_stream() in (0, None)

def used_on_both():
    d = fl.device_array(16, stream=external(allocated_on))
    e = fl.device_array(16)
    copying = external(copied_on)
    transfers.host_to_device(d, host, host.nbytes, stream=copying)
    transfers.host_to_device(views.getitem(d, slice(2, None)), host[2:], 8 * 14, stream=copying)
    transfers.device_to_device(e, d, host.nbytes, stream=copying)
    transfers.host_to_device(d, host, host.nbytes, stream=0)
    _core.stream_destroy(allocated_on)  # its event stays valid
    return d, e

def used_on_blocking_streams():
    d = fl.device_array(16, stream=external(blocking))
    transfers.host_to_device(d, host, host.nbytes, stream=external(blocking))
    transfers.host_to_device(d, host, host.nbytes, stream=external(2))
    return d

print(waits_of_a_free(used_on_both))
print(waits_of_a_free(used_on_blocking_streams))
"""
    )
    assert lines == ["(2, True)", "(0, True)"]


def test_bad_input_raises_what_numba_cuda_raises_naming_the_argument(run_on_stand_in):
    """What fastlaunch checks itself raises numba-cuda's exception class with the argument
    named (the rest goes to numba-cuda's own code: tests/test_gpu_memory_api.py)."""
    lines = run_on_stand_in(
        PRELUDE
        + """
for call in (lambda: fl.device_array((-1, 3)), lambda: fl.device_array(-4, np.int8)):
    try:
        call()
    except OverflowError as error:  # numba-cuda's cuMemAlloc(size_t) refuses a negative size
        print("OverflowError", "shape" in str(error))
for shape in ((2.0, 3), (2, "3")):
    try:
        fl.device_array(shape)
    except TypeError as error:
        print("TypeError", "shape" in str(error))
d = fl.to_device(np.arange(6.0))
for out in (np.zeros((2, 3)), np.zeros(6, np.int64)):
    try:
        transfers.copy_to_host(d, out)
    except (TypeError, ValueError) as error:
        print(type(error).__name__, "incompatible" in str(error))
"""
    )
    assert lines == [
        "OverflowError True",
        "OverflowError True",
        "TypeError True",
        "TypeError True",
        "ValueError True",
        "TypeError True",
    ]


def test_ipc_handles_of_pool_memory_are_refused_with_a_reason(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
from numba.cuda.cudadrv.driver import CudaAPIError
from fastlaunch.memory import ipc, views
d = fl.to_device(np.arange(4.0))
for array in (d, views.getitem(d, slice(1, None)), views.reshape(d, 2, 2)):
    try:
        ipc.get_ipc_handle(array)
    except CudaAPIError as error:
        print(error.code.name, "stream-ordered pool" in str(error))
"""
    )
    assert lines == ["CUDA_ERROR_NOT_SUPPORTED True"] * 3


def test_streams_are_numba_cudas_and_come_back_to_the_pool(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
from numba.cuda.cudadrv.driver import Stream
from fastlaunch.memory import streams
made = streams.stream()
handle = made.__cuda_stream__()[1]  # (int(made.handle) works on numba-cuda 0.30 alone)
described = repr(made) == f"<CUDA stream {handle}>"
print(type(made) is Stream, made.external, list(vars(made)), described)
del made
gc.collect()
print(streams.stream().__cuda_stream__()[1] == handle)  # the same stream again, from the pool
"""
    )
    # numba-cuda's attributes, and the pooled stream's return (docs/differences.md)
    assert lines == ["True False ['handle', 'external', '_fastlaunch_pooled'] True", "True"]


def test_events_and_stream_synchronize_on_the_rust_core(run_on_stand_in):
    """numba-cuda's Event (made as Context.create_event makes it, destroyed through the
    context's deallocation queue) and, installed, its methods and Stream.synchronize on the
    Rust core, with numba-cuda's errors for stream arguments it refuses."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from numba.cuda.cudadrv.driver import Event, Stream
from fastlaunch.memory import events, streams
from fastlaunch.memory import install as memory_install
originals = (vars(Event)["record"], vars(Event)["elapsed_time"], vars(Stream)["synchronize"])
memory_install.install()
print(Event.record is events.record, Stream.synchronize is events.stream_synchronize)
start, end = fl.memory.event(), fl.memory.event(timing=False)
handle_type = type(start.handle).__name__  # numba-cuda's: CUevent (0.30), c_void_p (0.26)
print(type(start) is Event, list(vars(start)), handle_type in ("CUevent", "c_void_p"))
s = streams.stream()
start.record()
end.record(s)
end.wait(s)
end.synchronize()
s.synchronize()
print(start.query(), end.query(), isinstance(start.elapsed_time(end), float))
try:
    start.record("a stream")
except TypeError as error:
    print("TypeError", "str" in str(error))
pending = len(context.deallocations)
del start
gc.collect()
print(len(context.deallocations) - pending)
memory_install.uninstall()
now = (vars(Event)["record"], vars(Event)["elapsed_time"], vars(Stream)["synchronize"])
print(now == originals)
"""
    )
    assert lines == [
        "True True",
        "True ['handle'] True",
        "True True True",
        "TypeError True",
        "1",
        "True",
    ]


def test_slice_assignment_of_a_matching_host_array_is_one_copy(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
d = fl.to_device(np.zeros((4, 3)))
transfers.setitem(d, slice(1, 3), np.arange(6.0).reshape(2, 3))
print(transfers.copy_to_host(d).ravel().tolist())
calls = []
d._do_setitem = lambda key, value: calls.append(key)  # numba-cuda's path, for the rest
transfers.setitem(d, slice(0, 2), np.arange(6, dtype=np.float32).reshape(2, 3))  # a cast
transfers.setitem(d, slice(0, 2), 1.0)  # a broadcast
transfers.setitem(d, 1, np.arange(3.0))  # not a slice
print(len(calls))
"""
    )
    assert lines == ["[0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0, 0.0]", "3"]


def test_new_arrays_are_numba_cudas_own_in_every_attribute(run_on_stand_in):
    """`device_array`, `device_array_like` and `to_device` built by fastlaunch (objects.py,
    its shortcuts for contiguous layouts) against what numba-cuda's constructors make of the
    same arguments over the same memory: `prepare_shape_strides_dtype`, `AutoFreePointer`
    (as its memory manager's `memalloc` makes it), `.own()` and `DeviceNDArray(...)`; and the
    arguments the shortcuts leave to numba-cuda raise its errors."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from numba.cuda.api_util import prepare_shape_strides_dtype
from numba.cuda.cudadrv.driver import AutoFreePointer, OwnedPointer

def pointers(owned):
    memory = owned._mem
    return (
        type(owned), list(vars(owned)), type(owned._view), owned.device_ctypes_pointer.value,
        type(owned.device_ctypes_pointer), type(memory.device_pointer),
        int(memory.device_pointer), memory.handle is memory.device_pointer,
        [(k, v) for k, v in vars(memory).items() if k not in ("context", "_finalizer",
         "device_pointer", "handle")], list(vars(memory)), memory.refct,
    )

kept = []

def theirs_over(ours, shape, strides, dtype, stream):
    memory = ours.gpu_data._mem
    mine = AutoFreePointer(
        memory.context, memory.device_pointer, memory.size, finalizer=lambda: None
    )
    kept.append(mine)  # (as its memory manager's allocations keep it)
    return DeviceNDArray(shape, strides, dtype, stream=stream, gpu_data=mine.own())

def same(ours, theirs):
    a, b = numba_state(ours), numba_state(theirs)
    return (
        type(ours) is type(theirs) and list(a) == list(b)
        and pointers(a.pop("gpu_data")) == pointers(b.pop("gpu_data")) and a == b
        and ours._dummy is theirs._dummy
    )

results = []
streams = {n: numba_driver.Context.create_external_stream(None, n) for n in (7001, 7002)}
calls = [
    ((16,), {}), ((16,), {"dtype": "float32"}), (((np.int64(5),),), {}),
    (((3, 4),), {"dtype": np.int16}), (((3, 4),), {"order": "F", "dtype": np.dtype("complex64")}),
    (([2, 3],), {}),
    (((2, 3, 4),), {"strides": (96, 32, 8)}), ((7,), {"stream": streams[7001]}), (((1, 1),), {}),
    ((True,), {}), (((2, 3),), {"dtype": [("a", "f4"), ("b", "i2")]}),
]
for args, kws in calls:
    kws = {"dtype": "float64", "strides": None, "order": "C", "stream": 0, **kws}
    ours = fl.device_array(*args, **kws)
    shape, strides, dtype = prepare_shape_strides_dtype(
        args[0], kws["strides"], kws["dtype"], kws["order"]
    )
    results.append(same(ours, theirs_over(ours, shape, strides, dtype, kws["stream"])))
from numba.cuda import api as numba_api
for host in (np.arange(12.0), np.zeros((3, 4), np.int8, order="F"), np.zeros((4, 6))[:, ::2],
             np.array(3.5), np.arange(5).astype("datetime64[D]"), np.ones(3)[::2]):
    ours = fl.device_array_like(host)
    shape, strides, dtype = prepare_shape_strides_dtype(
        host.shape, numba_api._contiguous_strides_like_array(host), host.dtype,
        numba_api._order_like_array(host),
    )
    results.append(same(ours, theirs_over(ours, shape, strides, dtype, 0)))
    if host.flags.c_contiguous or host.flags.f_contiguous:  # numba-cuda's from_array_like
        ours = fl.to_device(host, stream=streams[7002])
        theirs = theirs_over(ours, host.shape, host.strides, host.dtype, streams[7002])
        results.append(same(ours, theirs))
errors = []
bad = [((2.0,), {}), (((2, 2.0),), {}), ((4,), {"order": "X"}), ((4,), {"dtype": "nope"}),
       (((2, 3),), {"order": "K"})]
for args, kws in bad:  # (numba-cuda's device_array fails each before it needs a context)
    for make in (fl.device_array, numba_api.device_array.__wrapped__):
        try:
            make(*args, **kws)
            errors.append(None)
        except Exception as error:
            errors.append(type(error).__name__)
print(errors[0::2] == errors[1::2], errors[0::2])
print(len(results), all(results), [i for i, r in enumerate(results) if not r])
"""
    )
    assert lines == [
        "True ['TypeError', 'TypeError', 'ValueError', 'TypeError', 'ValueError']",
        "21 True []",
    ]


def test_pool_memory_is_released_as_numba_cuda_releases_its_own(run_on_stand_in):
    """The release of pool memory follows numba-cuda's reference counting: views keep it,
    the last `OwnedPointer` queues its free (once), an explicit `free()` queues it at once and
    the last release then does nothing more (as for numba-cuda's own pointer), and a memory
    manager's `reset()` frees what is still allocated."""
    lines = run_on_stand_in(
        PRELUDE
        + """
import sys
from numba.cuda.cudadrv.driver import AutoFreePointer
from fastlaunch.memory import views
unraisable = []
sys.unraisablehook = lambda hook: unraisable.append(str(hook.exc_value))
pending = lambda: len(context.deallocations)
with context.memory_manager.defer_cleanup():
    a = fl.device_array(8)
    owner = a.gpu_data._mem
    view = views.getitem(a, slice(2, None))
    before = pending()
    print(owner.refct)
    del a
    gc.collect()
    print(owner.refct, pending() - before)
    del view
    gc.collect()
    print(pending() - before)
    b = fl.device_array(8)
    b.gpu_data.free()
    print(pending() - before)
    del b
    gc.collect()
    print(pending() - before, unraisable)
    # numba-cuda's own pointer (kept by its manager's allocations alone), the same steps
    allocations = {}
    pointer = numba_driver.binding.CUdeviceptr(64)
    theirs = AutoFreePointer(context, pointer, 8, finalizer=lambda: allocations.pop(64))
    allocations[64] = theirs
    owned = theirs.own()
    del theirs
    owned.free()
    del owned
    gc.collect()
    print(unraisable)
context.deallocations.clear()
kept = [fl.device_array(16) for _ in range(3)]
base = fake.fake_outstanding_allocations()
context.memory_manager.reset()  # numba-cuda frees what is allocated, arrays alive or not
print(base - fake.fake_outstanding_allocations())
"""
    )
    assert lines == [
        "2",
        "1 0",
        "1",
        "2",
        "2 []",
        "[]",
        "3",
    ]
