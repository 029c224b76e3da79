"""What numba-cuda's ``Context.reset`` (``cuda.close()``, ``cuda.current_context().reset()``)
releases under ``fastlaunch.install()``, after numba-cuda's own release (which frees the
context's pending deallocations, fastlaunch's pool memory among them): numba-cuda's
``Context`` object as fastlaunch keeps it, the context's idle pooled streams, and, on the
Rust core, its staging ring, events and pool, all while the context still lives. Nothing of a
closed context is kept."""

from __future__ import annotations

from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.memory import allocation, streams
from fastlaunch.memory.originals import original


def reset(self: Any) -> None:
    """numba-cuda's ``Context.reset``, then what fastlaunch kept for that context."""
    original(numba_cuda.cudadrv_driver().Context, "reset")(self)
    for key in allocation.forget(self):
        streams.forget(key)
        _core.forget_context(key)
