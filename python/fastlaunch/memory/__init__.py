"""numba-cuda's memory API on fastlaunch's Rust core (``rust/ext/src/memory/``), returning
numba-cuda's own objects: ``DeviceNDArray``, ``Stream`` and ``Event`` instances, over memory
from the driver's stream-ordered pool and transfers staged through pinned memory.

``fastlaunch.to_device`` ... are the functions; ``fastlaunch.install()`` puts them in place of
numba-cuda's (``install.py``). See ``docs/memory.md``."""

from fastlaunch.memory.allocation import set_pool_release_threshold
from fastlaunch.memory.arrays import (
    device_array,
    device_array_like,
    pinned_array,
    pinned_array_like,
)
from fastlaunch.memory.events import event
from fastlaunch.memory.streams import stream, synchronize
from fastlaunch.memory.transfers import to_device

__all__ = [
    "device_array",
    "device_array_like",
    "event",
    "pinned_array",
    "pinned_array_like",
    "set_pool_release_threshold",
    "stream",
    "synchronize",
    "to_device",
]
