"""What the installed memory API raises where numba-cuda raises (findings of the memory review):
an int stream argument is numba-cuda's TypeError, never a raw stream handle; a failed driver
call is numba-cuda's CudaAPIError; an External Memory Management plugin allocates pinned
arrays; a negative pinned extent is numba-cuda's OverflowError. On the stand-in driver, with
the stand-in numba-cuda Context of test_cpu_memory_api."""

from __future__ import annotations

from test_cpu_memory_api import PRELUDE as MEMORY_API_PRELUDE

PRELUDE = (
    MEMORY_API_PRELUDE
    + """
from numba import cuda
fl.install()
def outcome(call):
    try:
        call()
        return "no error"
    except Exception as error:
        return f"{type(error).__name__}: {error}"
"""
)


def test_int_streams_raise_numba_cudas_type_error(run_on_stand_in):
    """An int other than 0 would reach the driver as a CUstream pointer (a crash on a GPU):
    refused as numba-cuda's `_stream_handle` refuses it; 0, None, False and numba-cuda's
    streams go on working."""
    lines = run_on_stand_in(
        PRELUDE
        + """
host = np.arange(3.0)
d = cuda.to_device(host)
print(outcome(lambda: numba_driver._stream_handle(7)))
refusals = (7, True, 2**70)  # (2**70: no handle, nor a numba-cuda stream)
numba_messages = [outcome(lambda: numba_driver._stream_handle(s)) for s in refusals]
calls = {
    "to_device": lambda s: cuda.to_device(host, stream=s),
    "copy_to_host": lambda s: d.copy_to_host(stream=s),
    "copy_to_device": lambda s: d.copy_to_device(host, stream=s),
    "device_array": lambda s: cuda.device_array(3, stream=s),
    "host_to_device": lambda s: numba_driver.host_to_device(d, host, host.nbytes, stream=s),
    "device_to_host": lambda s: numba_driver.device_to_host(host.copy(), d, 24, stream=s),
    "device_to_device": lambda s: numba_driver.device_to_device(d, d, 24, stream=s),
    "stream_handle": transfers.stream_handle,
}
for name, call in calls.items():
    refused = [outcome(lambda: call(s)) for s in refusals]
    expected = [m.replace("TypeError: ", "TypeError: stream: ") for m in numba_messages]
    print(name, refused == expected)
stream = cuda.stream()
for s in (0, None, False, stream):
    fine = [outcome(lambda: call(s)) for call in calls.values()]
    print(fine == ["no error"] * len(calls))
print(transfers.stream_handle(stream) == stream.__cuda_stream__()[1])
"""
    )
    assert lines[0] == "TypeError: Expected a Stream object or 0, got int"
    assert lines[1:9] == [
        f"{name} True"
        for name in (
            "to_device",
            "copy_to_host",
            "copy_to_device",
            "device_array",
            "host_to_device",
            "device_to_host",
            "device_to_device",
            "stream_handle",
        )
    ]
    assert lines[9:] == ["True"] * 5


def test_driver_failures_are_numba_cudas_cuda_api_error(run_on_stand_in):
    """fastlaunch's CudaDriverError (and LaunchRefusedError) is numba-cuda's CudaAPIError too,
    so `except CudaAPIError` catches the memory API's failures; its str stays fastlaunch's
    message (numba-cuda's "[code] msg" would name the code twice), `.msg` is that message,
    `.code` the CUresult as an int, and it pickles with its attributes."""
    lines = run_on_stand_in(
        PRELUDE
        + """
import pickle
from numba.cuda.cudadrv.driver import CudaAPIError
from numba.cuda.cudadrv.error import CudaDriverError as NumbaCudaDriverError
from cuda.core._utils.cuda_utils import CUDAError
from fastlaunch.errors import CudaDriverError  # built here, before LaunchRefusedError
from fastlaunch.errors import LaunchRefusedError

def fail(*args):  # a driver call that fails: freeing memory the driver never gave
    _core.pinned_free(0xDEAD0000)

try:
    fail()
except CudaAPIError as caught:
    error = caught
print(type(error) is CudaDriverError, isinstance(error, (CUDAError)),
      isinstance(error, NumbaCudaDriverError), isinstance(error, fl.CudaError))
print(error.code == 1, error.msg == str(error) == error.args[0], str(error).startswith("["),
      error.during in str(error))
again = pickle.loads(pickle.dumps(error))
print(type(again) is CudaDriverError, str(again) == str(error),
      (again.code, again.name, again.during, again.msg)
      == (error.code, error.name, error.during, error.msg))
refused = LaunchRefusedError("too many threads", 1, "CUDA_ERROR_INVALID_VALUE", "launching")
print(isinstance(refused, (CudaAPIError)), isinstance(refused, CudaDriverError),
      isinstance(refused, fl.LaunchConfigurationError), str(refused), refused.msg)
again = pickle.loads(pickle.dumps(refused))
print(type(again) is LaunchRefusedError, str(again), again.code, again.during)

# the installed memory API raises the core's error as it is: CudaAPIError
d = cuda.to_device(np.arange(4.0))
event = cuda.event()
for name in ("copy_to_host", "copy_to_device", "context_synchronize", "event_synchronize"):
    setattr(_core, name, fail)
from fastlaunch.memory import transfers
transfers._pool_array_from = fail  # to_device's allocation and copy, in one call
raised = []
for call in (d.copy_to_host, lambda: d.copy_to_device(np.ones(4)),
             lambda: cuda.to_device(np.ones(4)), cuda.synchronize, event.synchronize):
    try:
        call()
        raised.append("no error")
    except CudaAPIError as caught:
        raised.append(type(caught).__name__)
print(raised)
"""
    )
    assert lines == [
        "True True True True",
        "True True False True",
        "True True True",
        "True True True too many threads too many threads",
        "True too many threads 1 launching",
        str(["CudaDriverError"] * 5),
    ]


def test_an_emm_plugin_allocates_pinned_arrays(run_on_stand_in):
    """With a memory manager of the user's (a full `BaseCUDAMemoryManager`), `pinned_array`
    and `pinned_array_like` ask its `memhostalloc`, as numba-cuda does, and fastlaunch
    allocates nothing."""
    lines = run_on_stand_in(
        PRELUDE
        + """
import contextlib
calls = []

class Plugin(numba_driver.BaseCUDAMemoryManager):
    def initialize(self):
        pass
    def memalloc(self, size):
        raise NotImplementedError
    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        calls.append((size, mapped, portable, wc))
        buffer = (ctypes.c_byte * size)()
        return numba_driver.PinnedMemory(self.context, ctypes.addressof(buffer), size,
                                         owner=buffer)
    def mempin(self, owner, pointer, size, mapped=False):
        raise NotImplementedError
    def get_memory_info(self):
        return numba_driver.MemoryInfo(free=0, total=0)
    def get_ipc_handle(self, memory):
        raise NotImplementedError
    def reset(self):
        pass
    def defer_cleanup(self):
        return contextlib.nullcontext()
    @property
    def interface_version(self):
        return 1

context.memory_manager = Plugin(context=context)
del context.deallocations  # a plugin's context has none to offer
before = fake.fake_outstanding_allocations()
a = cuda.pinned_array((2, 3), np.float32)
b = cuda.pinned_array_like(np.zeros((4, 5), order="F"))
print(calls)
print(type(a) is np.ndarray, a.shape, a.strides, b.shape, b.strides, b.flags.f_contiguous)
a[...] = 1.5
print(a.sum(), fake.fake_outstanding_allocations() - before)
"""
    )
    assert lines == [
        "[(24, False, False, False), (160, False, False, False)]",
        "True (2, 3) (12, 4) (4, 5) (8, 32) True",
        "9.0 0",
    ]


def test_empty_pinned_arrays_are_numba_cudas_own_under_install(run_on_stand_in):
    """An empty pinned array is numba-cuda's memory manager's `memhostalloc(0)`, as numba-cuda
    makes it (under install, `numba.cuda.api.pinned_array` is fastlaunch's own: asking it
    again recursed)."""
    lines = run_on_stand_in(
        PRELUDE
        + """
sizes = []
def memhostalloc(size, mapped=False, portable=False, wc=False):
    sizes.append(size)
    return (ctypes.c_byte * 1)()
context.memory_manager.memhostalloc = memhostalloc
empty = cuda.pinned_array((0, 3))
print(empty.shape, sizes)
"""
    )
    assert lines == ["(0, 3) [0]"]


def test_negative_pinned_extents_raise_numba_cudas_overflow_error(run_on_stand_in):
    """numba-cuda passes the negative byte count to cuMemHostAlloc, which cuda.bindings refuses
    with OverflowError; fastlaunch raises that class, naming the shape, before allocating."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from cuda.bindings import driver as bindings
print(outcome(lambda: bindings.cuMemHostAlloc(-8, 0)).split(":")[0])  # numba-cuda's call
before = fake.fake_outstanding_allocations()
print(outcome(lambda: cuda.pinned_array(-1)))
print(outcome(lambda: cuda.pinned_array((-2, 3), np.int16)))
print(fake.fake_outstanding_allocations() - before)
"""
    )
    assert lines == [
        "OverflowError",
        "OverflowError: shape (-1,) gives a negative size (-8 bytes)",
        "OverflowError: shape (-2, 3) gives a negative size (-12 bytes)",
        "0",
    ]
