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

#: idle streams (``_core.Stream``, owning their handle) per context key
_idle: dict[int, list[Any]] = {}


def _first_idle_list() -> list[Any]:
    """The current context's idle list, for ``stream()`` where it has none yet, or where no
    context is current (one is made current): numba-cuda's classes are given to Rust first."""
    objects.kinds()
    return _idle.setdefault(context()[0], [])


_core.pool_numba_streams(_idle, _first_idle_list)

#: numba-cuda's ``cuda.stream()``: a numba-cuda ``Stream`` over an idle stream of the current
#: context's pool (made when none is idle); its collection appends the pooled stream to the
#: idle list again (in Rust, without a Python frame)
stream = _core.numba_stream


def forget(key: int) -> None:
    """Destroys the idle streams of the context whose key is ``key`` (being reset: its
    streams go with it, and would never be handed out again)."""
    _idle.pop(key, None)


def synchronize() -> None:
    """numba-cuda's ``cuda.synchronize()``: waits for the current context (without the GIL),
    and notes the memory API's work enqueued before as done."""
    _core.context_synchronize()
