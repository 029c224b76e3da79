"""The host cost of a graphed step's form (its guard key, ``fastlaunch.graphed._form``),
timed without a GPU against the stand-in driver (as ``cpu_profile.py`` times launches).

    python benchmarks/graphed_form_profile.py [--loops 200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from cpu_profile import fake_driver


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loops", type=int, default=200_000)
    loops = parser.parse_args().loops
    if os.environ.get("FASTLAUNCH_CUDA_DRIVER") is None:
        os.environ["FASTLAUNCH_CUDA_DRIVER"] = fake_driver()
        os.execv(sys.executable, [sys.executable, *sys.argv])

    import numpy as np
    from cuda.bindings import driver as bindings
    from numba.cuda.cudadrv import driver as numba_driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    import fastlaunch as fl
    from fastlaunch.graphed import _form

    def numba_array(n: int) -> DeviceNDArray:
        pointer = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(1 << 40), 4 * n)
        return DeviceNDArray((n,), (4,), np.float32, gpu_data=numba_driver.OwnedPointer(pointer))

    class Interface:
        def __init__(self, n: int) -> None:
            self.__cuda_array_interface__ = {
                "shape": (n,),
                "strides": None,
                "typestr": "<f4",
                "data": (1 << 40, False),
                "version": 3,
            }

    a, b = numba_array(256), numba_array(256)
    cases = {
        "2 numba arrays + float": (a, b, 0.5),
        "2 CAI objects + float + int": (Interface(256), Interface(256), 0.5, 3),
        "numba, np.float32, tuple, stream": (a, np.float32(2), (1, 2.0), fl.stream()),
    }
    for name, args in cases.items():
        _form(args, {})
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(loops):
                _form(args, {})
            best = min(best, (time.perf_counter() - start) / loops * 1e6)
        print(f"{name:36s} {best:6.3f} µs per _form")


if __name__ == "__main__":
    main()
