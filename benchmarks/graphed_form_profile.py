"""The host cost of a graphed step's form (its guard key, ``fastlaunch.graphed._form``) and
of replaying an 8-kernel step called again with the same arrays, timed without a GPU against
the stand-in driver (as ``cpu_profile.py`` times launches).

    python benchmarks/graphed_form_profile.py [--loops 200000]
"""

from __future__ import annotations

import time
import warnings

from cpu_profile import on_stand_in_driver


def main() -> None:
    loops = on_stand_in_driver()

    import numpy as np
    from cuda.bindings import driver as bindings
    from numba.cuda.cudadrv import driver as numba_driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    import fastlaunch as fl
    from fastlaunch import _core
    from fastlaunch.dispatcher import numba_type
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

    # A replayed step: 8 kernels over 9 numba arrays, called again with the same arrays.
    def kernel(name: str, args: tuple) -> fl.Kernel:
        namespace: dict = {}
        exec(f"def {name}(out, a, s):\n    pass\n", namespace)  # noqa: S102 - empty kernels
        made = fl.jit(namespace[name])
        fingerprint = _core.fingerprint(args)
        param_types = tuple(numba_type(d) for d in _core.describe(fingerprint))
        made._register(fingerprint, 90, param_types, _core.CompiledKernel(b"image", "entry"))
        return made

    arrays = [numba_array(4096) for _ in range(9)]
    kernels = [kernel(f"k{i}", (arrays[0], arrays[1], 0.5)) for i in range(8)]

    @fl.graphed
    def step(*arrays: DeviceNDArray) -> None:
        for i, k in enumerate(kernels):
            k[16, 256](arrays[i + 1], arrays[i], 0.5)

    warnings.simplefilter("ignore")  # numba's low-occupancy warning
    for _ in range(5):
        step(*arrays)
    replays = max(loops // 10, 1000)
    start = time.perf_counter()
    for _ in range(replays):
        step(*arrays)
    per_step = (time.perf_counter() - start) / replays * 1e6
    print(f"{'graphed 8-kernel step, same arrays':36s} {per_step:6.3f} µs per replayed step")


if __name__ == "__main__":
    main()
