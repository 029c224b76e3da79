"""`cuda.stream()` under install hands out pooled streams, given back to the pool when their
`Stream` is collected. One collected while a capture of it is still open (begun by another
library, say) is not given back: numba-cuda would destroy it, and the next `cuda.stream()`
caller would otherwise get a stream whose work goes into someone else's graph. On the stand-in
driver, whose `cuStreamBeginCapture_v2` captures the stream it is given."""

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
