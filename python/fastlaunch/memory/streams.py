"""numba-cuda's streams, events and ``synchronize`` on the Rust core. ``stream()`` hands out
numba-cuda ``Stream`` objects over streams kept in a pool per context (as torch pools its
streams): a stream goes back to the pool when its ``Stream`` object is collected, so creating
one costs no ``cuStreamCreate`` after the first. Pooled streams are blocking streams, like
numba-cuda's own; work still queued on a stream returned to the pool runs before the next
user's, in stream order."""

from __future__ import annotations

from typing import Any

from fastlaunch import _core
from fastlaunch.memory import objects
from fastlaunch.memory.allocation import context

_pooled_numba_stream = _core.pooled_numba_stream

#: idle streams (``_core.Stream``, owning their handle) per context key
_idle: dict[int, list[Any]] = {}


def stream() -> Any:
    """numba-cuda's ``cuda.stream()``: a ``Stream`` of numba-cuda's over a pooled stream."""
    idle = _idle.get(_core.current_context_key())  # None too while no context is current
    if idle is None:
        objects.kinds()  # numba-cuda's classes, given to Rust before the first stream is made
        idle = _idle.setdefault(context()[0], [])
    try:
        owned = idle.pop()
    except IndexError:  # none idle (another thread may have taken the last)
        owned = _core.Stream.create(False)
    # its collection appends `owned` to `idle` again (in Rust, without a Python frame)
    return _pooled_numba_stream(owned, idle)


def forget(key: int) -> None:
    """Destroys the idle streams of the context whose key is ``key`` (being reset: its
    streams go with it, and would never be handed out again)."""
    _idle.pop(key, None)


def synchronize() -> None:
    """numba-cuda's ``cuda.synchronize()``: waits for the current context (without the GIL)."""
    _core.synchronize()
