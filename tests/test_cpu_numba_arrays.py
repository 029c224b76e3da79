"""numba device arrays read without a GPU (a DeviceNDArray over a made-up pointer), and the
per-thread cache of recently launched numba arrays: a dead array's address, reused by a new
array, must never return the old array's pointer, shape or strides."""

from __future__ import annotations

import struct
import threading

import numpy as np
import pytest
from cuda.bindings import driver as bindings
from numba.cuda.cudadrv import driver as numba_driver
from numba.cuda.cudadrv.devicearray import DeviceNDArray

from fastlaunch import _core


def device_array(shape, pointer, dtype=np.float32, owned=True):
    dtype = np.dtype(dtype)
    strides = tuple(dtype.itemsize * int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
    memory = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(pointer), 1 << 20)
    gpu_data = numba_driver.OwnedPointer(memory) if owned else memory
    return DeviceNDArray(shape, strides, dtype, gpu_data=gpu_data)


def slots(array):
    raw = _core.pack((array._numba_type_,), (array,))
    return list(struct.unpack(f"<{len(raw) // 8}q", raw))


@pytest.mark.parametrize("owned", [True, False], ids=["OwnedPointer", "MemoryPointer"])
def test_numba_arrays_pack_their_own_fields(owned):
    array = device_array((3, 5), 0x7000_0000, owned=owned)
    assert _core.classify(array) == ("array", "float32", 2, "C", False)
    assert slots(array) == [0, 0, 15, 4, 0x7000_0000, 3, 5, 20, 4]
    assert slots(array) == slots(array)  # again, from the cache


def test_a_reused_address_never_returns_the_dead_arrays_fields():
    seen = set()
    for i in range(400):
        shape = (i % 7 + 1, i % 5 + 2)
        array = device_array(shape, 0x1000_0000 + 0x1000 * i, np.float64 if i % 2 else np.int8)
        seen.add(id(array))
        itemsize = array.dtype.itemsize
        assert slots(array) == [
            0,
            0,
            shape[0] * shape[1],
            itemsize,
            0x1000_0000 + 0x1000 * i,
            *shape,
            shape[1] * itemsize,
            itemsize,
        ]
        assert slots(array)[4] == 0x1000_0000 + 0x1000 * i
        del array  # freed at once (reference counting): its address is free for the next
    assert len(seen) < 400  # addresses were reused, so the check above meant something


def test_views_sharing_memory_are_distinct_arrays():
    base = device_array((4, 6), 0x5000_0000)
    memory = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(0x5000_0000 + 24), 1 << 20)
    view = DeviceNDArray((3, 3), (24, 8), np.float32, gpu_data=memory)  # base[1:, ::2]
    assert slots(base)[4] == 0x5000_0000
    assert slots(view) == [0, 0, 9, 4, 0x5000_0000 + 24, 3, 3, 24, 8]
    assert _core.classify(view)[3] == "A"


def test_each_thread_has_its_own_cache():
    arrays = [device_array((8,), 0x9000_0000 + 64 * i) for i in range(32)]
    expected = [slots(a) for a in arrays]
    results = []

    def worker():
        results.append([slots(a) for a in arrays])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 4
