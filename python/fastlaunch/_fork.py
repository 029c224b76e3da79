"""A child forked after its parent initialised CUDA cannot use CUDA. fastlaunch's driver notes
a fork after its own initialisation (``pthread_atfork``); this notes a fork after numba-cuda's
driver initialised CUDA, so that fastlaunch's calls in such a child (launches, the memory API)
raise ``CudaForkedError`` (numba-cuda's ``CudaDriverError`` too, as numba-cuda raises there)
instead of calling into a driver that may crash."""

from __future__ import annotations

import os

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda


def _after_fork_in_child() -> None:
    if numba_cuda.initialized_cuda():
        _core._mark_forked_child()


def watch_forks() -> None:
    """Called once, at import."""
    os.register_at_fork(after_in_child=_after_fork_in_child)
