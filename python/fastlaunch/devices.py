"""Devices and the per-thread context stack.

The thread's current CUDA context is the truth, so torch, CuPy and numba (which use
primary contexts) and fastlaunch see the same device. With none current, a launch
makes device 0's primary context current, as numba does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastlaunch import _core


class Device:
    """One CUDA device. ``with device:`` makes it current on this thread for the block.

    Any driver attribute is readable by name, as numba's devices offer:
    ``device.MAX_THREADS_PER_BLOCK``, ``device.WARP_SIZE``, ...
    """

    def __init__(self, ordinal: int) -> None:
        self.id = ordinal

    @property
    def name(self) -> str:
        return _core.device_name(self.id)

    @property
    def compute_capability(self) -> tuple[int, int]:
        return _core.compute_capability(self.id)

    @property
    def uuid(self) -> str:
        return _core.device_uuid(self.id)

    @property
    def pci_bus_id(self) -> str:
        return _core.device_pci_bus_id(self.id)

    @property
    def multiprocessor_count(self) -> int:
        return _core.device_attribute(self.id, "MULTIPROCESSOR_COUNT")

    @property
    def total_memory(self) -> int:
        return _core.device_total_memory(self.id)

    def attribute(self, name: str) -> int:
        """A ``CU_DEVICE_ATTRIBUTE_*`` value by name (prefix optional, any case)."""
        return _core.device_attribute(self.id, name)

    def __getattr__(self, name: str) -> Any:
        if name.isupper():
            return _core.device_attribute(self.id, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __enter__(self) -> Device:
        _core.push_device(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        _core.pop_device()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<CUDA device {self.id} '{self.name}'>"


class DeviceList:
    """The CUDA devices: ``len(gpus)``, ``gpus[i]``, iteration, and ``gpus.current``."""

    def __len__(self) -> int:
        return _core.device_count()

    def __getitem__(self, ordinal: int) -> Device:
        return Device(_core.device_index(int(ordinal)))

    def __iter__(self) -> Iterator[Device]:
        return (Device(i) for i in range(_core.device_count()))

    @property
    def current(self) -> Device | None:
        """The device of this thread's current context, or None when it has none."""
        ordinal = _core.current_device()
        return None if ordinal is None else Device(ordinal)

    def __repr__(self) -> str:
        return f"<DeviceList {list(self)}>" if _core.is_available() else "<DeviceList (no CUDA)>"


gpus = DeviceList()


def select_device(ordinal: int) -> Device:
    """Makes device ``ordinal``'s primary context current on this thread."""
    _core.select_device(ordinal)
    return Device(int(ordinal))


def current_device() -> Device:
    """The current device; with no current context, device 0's is made current."""
    ordinal = _core.current_device()
    if ordinal is None:
        return select_device(0)
    return Device(ordinal)


__all__ = ["Device", "DeviceList", "current_device", "gpus", "select_device"]
