"""numba-cuda's events, and ``Stream.synchronize``, on the Rust core's raw-handle calls
(``_core.event_*``, ``_core.stream_synchronize``): ``event()`` makes a numba-cuda ``Event`` as
``Context.create_event`` does (its destruction queued in the context's deallocation queue,
as numba-cuda queues it), and while installed numba-cuda's ``Event.record``, ``synchronize``,
``wait``, ``query``, ``elapsed_time`` and ``Stream.synchronize`` make their driver call there.
Stream arguments are read by numba-cuda's own ``_stream_handle`` (its errors for what it
refuses). A driver failure raises ``fastlaunch.errors.CudaDriverError``, which is numba-cuda's
``CudaAPIError`` too (its ``code`` an int, its message fastlaunch's)."""

from __future__ import annotations

from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.memory import objects
from fastlaunch.memory.allocation import context


def event(timing: bool = True) -> Any:
    """numba-cuda's ``cuda.event()``: a numba-cuda ``Event`` over a new event."""
    ctx = context()[1]
    handle = _core.event_create(bool(timing))
    return objects.numba_event(handle, ctx.deallocations)


def record(self: Any, stream: Any = 0) -> None:
    """numba-cuda's ``Event.record``."""
    on = int(numba_cuda.numba_stream_handle(stream))
    _core.event_record(numba_cuda.handle_value(self.handle), on)


def synchronize(self: Any) -> None:
    """numba-cuda's ``Event.synchronize`` (waits without the GIL)."""
    _core.event_synchronize(numba_cuda.handle_value(self.handle))


def wait(self: Any, stream: Any = 0) -> None:
    """numba-cuda's ``Event.wait``: later work on ``stream`` waits for the event."""
    on = int(numba_cuda.numba_stream_handle(stream))
    _core.stream_wait_event(on, numba_cuda.handle_value(self.handle))


def query(self: Any) -> bool:
    """numba-cuda's ``Event.query``."""
    return bool(_core.event_query(numba_cuda.handle_value(self.handle)))


def elapsed_time(self: Any, evtend: Any) -> float:
    """numba-cuda's ``Event.elapsed_time`` (milliseconds)."""
    start, end = numba_cuda.handle_value(self.handle), numba_cuda.handle_value(evtend.handle)
    return _core.event_elapsed_ms(start, end)


def stream_synchronize(self: Any) -> None:
    """numba-cuda's ``Stream.synchronize`` (waits without the GIL)."""
    _core.stream_synchronize(int(numba_cuda.numba_stream_handle(self)))


#: numba-cuda's Event methods and their replacements (install.py)
EVENT_METHODS = {
    "record": record,
    "synchronize": synchronize,
    "wait": wait,
    "query": query,
    "elapsed_time": elapsed_time,
}
#: numba-cuda's Stream methods and their replacements (install.py)
STREAM_METHODS = {"synchronize": stream_synchronize}
