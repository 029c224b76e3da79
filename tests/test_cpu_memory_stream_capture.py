"""The memory API beside stream captures, on the stand-in driver (whose
`cuStreamBeginCapture_v2` captures the stream it is given, in the mode it is given).

`cuda.stream()` under install hands out pooled streams, given back to the pool when their
`Stream` is collected. One collected while a capture of it is still open (begun by another
library, say) is not given back: numba-cuda would destroy it, and the next `cuda.stream()`
caller would otherwise get a stream whose work goes into someone else's graph.

What fastlaunch does implicitly never invalidates another thread's capture in global mode
(DESIGN.md, memory invariant 8): the staging ring's slots, page-locked memory made on first
use, are made in the relaxed capture mode (`cuMemHostAlloc` is one of the calls a global
capture refuses)."""

from __future__ import annotations

from test_cpu_memory_api import PRELUDE as MEMORY_API_PRELUDE

PRELUDE = (
    MEMORY_API_PRELUDE
    + """
from numba import cuda
from fastlaunch.memory import streams
fl.install()
fake.cuStreamBeginCapture_v2.argtypes = [ctypes.c_void_p, ctypes.c_int]
fake.cuStreamEndCapture.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
fake.cuStreamIsCapturing.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]

def handle(stream):
    return int(stream.handle.value if hasattr(stream.handle, "value") else stream.handle)

def capturing(handle):
    status = ctypes.c_int(-1)
    assert fake.cuStreamIsCapturing(handle, ctypes.byref(status)) == 0
    return status.value

def end_capture(handle):
    return fake.cuStreamEndCapture(handle, ctypes.byref(ctypes.c_void_p()))
"""
)


def test_a_stream_dropped_while_captured_is_not_handed_out_again(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
key = _core.context_key()
s = cuda.stream()
captured = handle(s)
print(fake.cuStreamBeginCapture_v2(captured, 2), capturing(captured))  # relaxed
del s
gc.collect()
print("pooled", len(streams._idle[key]))
t = cuda.stream()
print("same handle", handle(t) == captured, "capturing", capturing(handle(t)))
print("end", end_capture(captured))
"""
    )
    assert lines == ["0 1", "pooled 0", "same handle False capturing 0", "end 0"]


def test_an_invalidated_capture_still_open_keeps_the_stream_out_too(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
key = _core.context_key()
s = cuda.stream()
captured = handle(s)
fake.cuStreamBeginCapture_v2(captured, 2)
print(fake.cuCtxSynchronize(), capturing(captured))  # refused: the capture is invalidated
del s
gc.collect()
t = cuda.stream()
print("pooled", len(streams._idle[key]), "same handle", handle(t) == captured)
print("end", end_capture(captured))
"""
    )
    assert lines == ["900 2", "pooled 0 same handle False", "end 901"]


def test_a_stream_whose_capture_ended_goes_back_to_the_pool(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
key = _core.context_key()
s = cuda.stream()
captured = handle(s)
fake.cuStreamBeginCapture_v2(captured, 2)
print("end", end_capture(captured))
del s
gc.collect()
print("pooled", len(streams._idle[key]))
t = cuda.stream()
print("same handle", handle(t) == captured, "capturing", capturing(handle(t)))
"""
    )
    assert lines == ["end 0", "pooled 1", "same handle True capturing 0"]


def test_staged_copies_leave_another_threads_global_capture_valid(run_on_stand_in):
    """The first staged copy makes a staging slot (page-locked memory): while another thread
    captures a non-blocking stream in global mode, that neither fails nor invalidates the
    capture, and neither do the copies, allocations and interface reads after it."""
    lines = run_on_stand_in(
        PRELUDE
        + """
import threading
NON_BLOCKING = ctypes.c_void_p()
fake.cuStreamCreate(ctypes.byref(NON_BLOCKING), 1)
captured = NON_BLOCKING.value
calls = {
    "first to_device (a slot made)": lambda: fl.to_device(np.arange(16.0)),
    "to_device": lambda: fl.to_device(np.arange(16.0)),
    "copy_to_host": lambda: fl.to_device(np.arange(16.0)).copy_to_host(),
    "device_array": lambda: cuda.device_array(16),
    "interface": lambda: fl.to_device(np.arange(16.0)).__cuda_array_interface__,
}
for name, call in calls.items():
    begun = threading.Thread(target=lambda: fake.cuStreamBeginCapture_v2(captured, 0))
    begun.start()
    begun.join()
    call()
    print(name, "invalidated", fake.fake_capture_invalidated(), "end", end_capture(captured))
"""
    )
    assert lines == [
        f"{name} invalidated 0 end 0"
        for name in (
            "first to_device (a slot made)",
            "to_device",
            "copy_to_host",
            "device_array",
            "interface",
        )
    ]
