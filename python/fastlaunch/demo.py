"""``make demo``: a real kernel on every array library present, and a launch-overhead table.

Without a GPU it says so and shows what it can: the typing, the packing plan and the
packed parameter bytes for SAXPY's arguments.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import cuda

import fastlaunch as fl
from fastlaunch import _core

N = 1 << 16
THREADS = 256
BATCH = 256
BATCHES = 50


def saxpy(out, a, x, y):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


class _FakeDeviceArray:
    """A CUDA Array Interface description with no memory behind it (for the no-GPU demo)."""

    def __init__(self, n: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (n,),
            "strides": None,
            "typestr": "<f4",
            "data": (0x7F00_0000_0000, False),
            "version": 3,
        }


def _show_plan() -> None:
    from fastlaunch.dispatcher import numba_type

    args = (_FakeDeviceArray(N), np.float32(2.0), _FakeDeviceArray(N), _FakeDeviceArray(N))
    fingerprint = _core.fingerprint(args)
    types = tuple(numba_type(d) for d in _core.describe(fingerprint))
    packed = _core.pack(types, args)
    print("SAXPY's arguments as fastlaunch classifies them (no GPU needed):")
    print(f"  numba signature: saxpy({', '.join(map(str, types))})")
    print("  packing plan:    built in Rust from those numba types")
    print(f"  parameters:      {len(packed) // 8} 8-byte slots, first array = ", end="")
    print([int.from_bytes(packed[i : i + 8], "little") for i in range(0, 56, 8)])


def _sources() -> dict[str, Callable[[np.ndarray], Any]]:
    sources: dict[str, Callable[[np.ndarray], Any]] = {"numba": cuda.to_device}
    try:
        import cupy

        sources["cupy"] = cupy.asarray
    except ImportError:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            sources["torch"] = lambda a: torch.as_tensor(a, device="cuda")
    except ImportError:
        pass
    return sources


def _to_host(array: Any) -> np.ndarray:
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    if hasattr(array, "get"):
        return array.get()
    return array.cpu().numpy()


def _per_launch_us(launch: Callable[[], None]) -> float:
    for _ in range(BATCH):
        launch()
    fl.synchronize()
    times = []
    for _ in range(BATCHES):
        start = time.perf_counter()
        for _ in range(BATCH):
            launch()
        times.append((time.perf_counter() - start) / BATCH * 1e6)
        fl.synchronize()
    return statistics.median(times)


def _run_on_gpu() -> None:
    for device in fl.gpus:
        print(
            f"device {device.id}: {device.name}, compute capability {device.compute_capability}, "
            f"{device.multiprocessor_count} SMs"
        )
    fast = fl.jit(saxpy)
    slow = cuda.jit(saxpy)
    rng = np.random.default_rng(0)
    x, y = rng.random(N, dtype=np.float32), rng.random(N, dtype=np.float32)
    expected = np.float32(2.0) * x + y
    blocks = (N + THREADS - 1) // THREADS
    rows = []
    for source, make in _sources().items():
        out, dx, dy = make(np.zeros(N, np.float32)), make(x), make(y)
        fast[blocks, THREADS](out, np.float32(2.0), dx, dy)
        fl.synchronize()
        ok = np.allclose(_to_host(out), expected)
        fast_launch = fast[blocks, THREADS]
        slow_launch = slow[blocks, THREADS]
        args = (out, np.float32(2.0), dx, dy)
        fast_us = _per_launch_us(lambda launch=fast_launch, args=args: launch(*args))
        slow_us = _per_launch_us(lambda launch=slow_launch, args=args: launch(*args))
        rows.append((source, ok, fast_us, slow_us))
    print(
        f"\nSAXPY on {N} float32, µs of host time per launch (median of {BATCHES} batches "
        f"of {BATCH}):"
    )
    print(f"  {'arrays':8} {'correct':8} {'fastlaunch':>11} {'numba-cuda':>11} {'speed-up':>9}")
    for source, ok, fast_us, slow_us in rows:
        print(f"  {source:8} {str(ok):8} {fast_us:11.2f} {slow_us:11.2f} {slow_us / fast_us:8.1f}x")
    print(
        f"\nfastlaunch compiled {fast.miss_count} overload(s) for {len(rows) * (2 * BATCHES + 3)}"
        " launches."
    )


def main() -> int:
    print(f"fastlaunch {fl.__version__}")
    if not fl.is_available():
        print(f"No GPU here: {_core.unavailable_reason()}")
        print("Launching needs a CUDA driver and device; this is what runs without one.\n")
        _show_plan()
        return 0
    major, minor = fl.driver_version()
    print(f"CUDA driver {major}.{minor}")
    _run_on_gpu()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
