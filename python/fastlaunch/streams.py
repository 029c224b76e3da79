"""Streams, events, and the rules that order launches after their inputs.

A launch goes to the stream given in ``kernel[grid, block, stream]``: 0/None (the legacy
default stream, numba-cuda's rule), a raw handle, or any object with ``__cuda_stream__``
(numba, torch, CuPy and cuda.core streams, and fastlaunch's own).

It is ordered after the work that produced its inputs, on the GPU and without blocking
the host, when the producer's stream is known and differs from the launch stream:

- a CUDA Array Interface v3 ``stream``;
- torch's current stream (read through the DLPack C exchange API, no Python call);
- CuPy's current stream;
- other ``__dlpack__`` producers get the launch stream and order themselves.

The launch stream then waits on an event recorded on the producer's stream (numba-cuda
blocks the host instead). Nothing is added while the launch stream is being captured into
a CUDA graph. ``set_ordering(False)`` (or ``NUMBA_CUDA_ARRAY_INTERFACE_SYNC=0``) turns it
off. ``set_default_stream_policy("follow")`` sends launches without a stream to the
current stream of torch or CuPy when their arrays are arguments.
"""

from __future__ import annotations

import os

from fastlaunch import _core
from fastlaunch._core import (
    Event,
    Stream,
    default_stream_policy,
    ordering_enabled,
    set_default_stream_policy,
    set_ordering,
)


def stream(non_blocking: bool = False) -> Stream:
    """A new stream in the current context. Blocking streams (the default, as numba's)
    synchronise with the legacy default stream; ``non_blocking`` ones do not."""
    return Stream.create(non_blocking)


def default_stream() -> Stream:
    """The default stream (handle 0: the legacy default stream)."""
    return Stream.external(0)


def legacy_default_stream() -> Stream:
    return Stream.external(1)


def per_thread_default_stream() -> Stream:
    return Stream.external(2)


def external_stream(handle: int) -> Stream:
    """Wraps a stream created elsewhere, by its handle; fastlaunch never destroys it."""
    return Stream.external(handle)


def event(timing: bool = True) -> Event:
    """A new event; ``timing=False`` makes a lighter one for ordering only."""
    return Event(timing)


if os.environ.get("NUMBA_CUDA_ARRAY_INTERFACE_SYNC", "1") == "0":
    _core.set_ordering(False)

__all__ = [
    "Event",
    "Stream",
    "default_stream",
    "default_stream_policy",
    "event",
    "external_stream",
    "legacy_default_stream",
    "ordering_enabled",
    "per_thread_default_stream",
    "set_default_stream_policy",
    "set_ordering",
    "stream",
]
