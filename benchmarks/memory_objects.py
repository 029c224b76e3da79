"""The host cost of numba-cuda's array objects built by fastlaunch, timed without a GPU against
the stand-in driver (``tests/stand_in_driver/fake_cuda.c``): each case makes an array (or a
view) and drops it, so that its release runs too. The stand-in's allocation and free cost
next to nothing, so ``_core.mem_alloc`` + ``mem_free`` is the floor: the rest is the Python
objects numba-cuda's arrays are made of (``DeviceNDArray``, ``OwnedPointer``,
``AutoFreePointer``) and their releases (``fastlaunch/memory/objects.py``).

numba-cuda cannot make its own context without a GPU: a stand-in ``Context`` with numba-cuda's
own memory manager is registered, as ``tests/test_cpu_memory_api.py`` does.

    python benchmarks/memory_objects.py [--loops 200000] [--repeats 5]

Each figure is the minimum over the repeats of the mean per call, in microseconds. To compare
with another checkout, put its ``python`` folder (with its built ``_core``) first on
``PYTHONPATH``."""

from __future__ import annotations

import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.stand_in import (  # noqa: E402
    best_microseconds,
    stand_in_context,
    timing_arguments,
)


def tutorial_memory(arrays: Any, streams: Any, transfers: Any, price: Any) -> None:
    """benchmarks/memory.py's Black-Scholes-shaped call, its kernel and synchronize left out:
    a stream, three ``to_device``, two ``device_array_like``, two ``copy_to_host``."""
    stream = streams.stream()
    transfers.to_device(price, stream)
    transfers.to_device(price, stream)
    transfers.to_device(price, stream)
    d_call = arrays.device_array_like(price, stream)
    d_put = arrays.device_array_like(price, stream)
    transfers.copy_to_host(d_call, None, stream)
    transfers.copy_to_host(d_put, None, stream)


def main() -> None:
    arguments = timing_arguments(loops=200_000, repeats=5)

    import numpy as np

    import fastlaunch as fl
    from fastlaunch import _core
    from fastlaunch.memory import arrays, streams, transfers, views

    assert fl.is_available(), _core.unavailable_reason()
    stand_in_context()
    key = _core.context_key()
    d = fl.device_array(8192, dtype=np.float32)
    host = np.arange(8192, dtype=np.float32)  # 32 KiB
    stream = streams.stream()
    price = np.arange(4096, dtype=np.float64)  # 32 KiB, as benchmarks/memory.py's call
    d_price = transfers.to_device(price, stream)
    names = {
        "fl": fl, "np": np, "_core": _core, "views": views, "transfers": transfers, "d": d,
        "host": host, "key": key, "whole": slice(1, -1), "arrays": arrays, "streams": streams,
        "stream": stream, "price": price, "d_price": d_price, "tutorial": tutorial_memory,
    }  # fmt: skip
    cases = [
        ("_core.mem_alloc + mem_free (floor)", "_core.mem_free(_core.mem_alloc(32768, 0), 0, key)"),
        ("device_array(8192, float32) + release", "fl.device_array(8192, dtype=np.float32)"),
        ("device_array((64, 128), float32) + release", "fl.device_array((64, 128), np.float32)"),
        ("to_device(32 KiB float32) + release", "transfers.to_device(host)"),
        ("views.getitem(d, slice(1, -1)) + release", "views.getitem(d, whole)"),
        ("views.reshape(d, 64, 128) + release", "views.reshape(d, 64, 128)"),
        ("to_device(32 KiB float64, stream) + release", "transfers.to_device(price, stream)"),
        ("copy_to_device(d, host)", "transfers.copy_to_device(d, host)"),
        (
            "copy_to_device(d_price, price, stream)",
            "transfers.copy_to_device(d_price, price, stream)",
        ),
        ("copy_to_host(d, host)", "transfers.copy_to_host(d, host)"),
        ("copy_to_host(d_price) (new host array)", "transfers.copy_to_host(d_price)"),
        (
            "copy_to_host(d_price, stream=stream) (new)",
            "transfers.copy_to_host(d_price, None, stream)",
        ),
        ("device_array_like(price) + release", "arrays.device_array_like(price)"),
        ("device_array_like(price, stream) + release", "arrays.device_array_like(price, stream)"),
        ("stream() + release", "streams.stream()"),
        ("tutorial call's memory API (no kernel)", "tutorial(arrays, streams, transfers, price)"),
    ]
    print(f"{'case':46} {'us/call':>8}")
    for name, statement in cases:
        best = best_microseconds(timeit.Timer(statement, globals=names), arguments)
        print(f"{name:46} {best:8.3f}")
    _core.stream_synchronize(0)


if __name__ == "__main__":
    main()
