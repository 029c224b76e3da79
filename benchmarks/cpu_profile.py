"""fastlaunch's host-side launch path, timed without a GPU against a stand-in driver.

Builds ``tests/stand_in_driver/fake_cuda.c`` (every call succeeds and does nothing), points
fastlaunch at it, registers overloads by hand (numba-cuda cannot compile without a GPU) and
times full launches against pre-bound ones, for the argument kinds that exist on the CPU:
numba device arrays, generic CUDA Array Interface objects, Python and NumPy scalars. The
driver's own cost is nil here, so these are fastlaunch's own costs; for profilers
(``valgrind --tool=callgrind``, ``perf``) run this file under them.

    python benchmarks/cpu_profile.py [--loops 200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from stand_in import fake_driver


def on_stand_in_driver() -> int:
    """Runs this script again with the stand-in driver unless it has one; returns --loops."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--loops", type=int, default=200_000)
    loops = parser.parse_args().loops
    if os.environ.get("FASTLAUNCH_CUDA_DRIVER") is None:
        os.environ["FASTLAUNCH_CUDA_DRIVER"] = fake_driver()
        os.execv(sys.executable, [sys.executable, *sys.argv])
    return loops


def main() -> None:
    loops = on_stand_in_driver()

    import numpy as np
    from cuda.bindings import driver as bindings
    from numba.cuda.cudadrv import driver as numba_driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    import fastlaunch as fl
    from fastlaunch import _core
    from fastlaunch.dispatcher import numba_type

    assert fl.is_available(), _core.unavailable_reason()
    compiled = _core.CompiledKernel(b"fake image", "fake_entry")

    def numba_array(shape):
        pointer = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(1 << 40), 1 << 20)
        strides = tuple(4 * int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
        return DeviceNDArray(
            shape, strides, np.float32, gpu_data=numba_driver.OwnedPointer(pointer)
        )

    class Interface:
        def __init__(self, shape):
            self.__cuda_array_interface__ = {
                "shape": shape,
                "strides": None,
                "typestr": "<f4",
                "data": (1 << 40, False),
                "version": 3,
            }

    def kernel_for(args):
        names = ", ".join(f"a{i}" for i in range(len(args)))
        namespace: dict = {}
        exec(f"def k({names}):\n    pass\n", namespace)  # noqa: S102 - an empty kernel
        kernel = fl.jit(namespace["k"])
        fingerprint = _core.fingerprint(args)
        param_types = tuple(numba_type(d) for d in _core.describe(fingerprint))
        kernel._register(fingerprint, 90, param_types, compiled)
        return kernel

    def per_call_us(call):
        for _ in range(1000):
            call()
        start = time.perf_counter()
        for _ in range(loops):
            call()
        return (time.perf_counter() - start) / loops * 1e6

    cases = {
        "A no arguments": (),
        "B numba array": (numba_array((128,)),),
        "B CAI object": (Interface((128,)),),
        "C numba 2-D x3 + 4 scalars": (*(numba_array((16, 8)) for _ in range(3)), 3, 1.5, 7, 2.5),
        "D numba array x26": tuple(numba_array((128,)) for _ in range(26)),
        "E16 np.float32 x16": tuple(np.float32(i) for i in range(16)),
        "E256 np.float32 x256": tuple(np.float32(i) for i in range(256)),
        "E256 float x256": tuple(float(i) for i in range(256)),
    }
    print(
        f"{'case':28} {'inline µs':>9} {'reused µs':>9} {'bound µs':>9} "
        f"{'inline-reused':>13} {'classify+pack':>13}"
    )
    for name, args in cases.items():
        kernel = kernel_for(args)
        launcher = kernel[1, 1]
        bound = launcher.bind(*args)
        inline = per_call_us(lambda kernel=kernel, args=args: kernel[1, 1](*args))
        full = per_call_us(lambda launcher=launcher, args=args: launcher(*args))
        prebound = per_call_us(bound)
        print(
            f"{name:28} {inline:9.3f} {full:9.3f} {prebound:9.3f} "
            f"{inline - full:13.3f} {full - prebound:13.3f}"
        )
    kernel = kernel_for(())
    for spelling, call in {
        "k[1, 1, 0]()": lambda: kernel[1, 1, 0](),
        "k[1, 1, None, 0]()": lambda: kernel[1, 1, None, 0](),
        "k[(1, 1), (32, 4)]()": lambda: kernel[(1, 1), (32, 4)](),
    }.items():
        print(f"{spelling:28} {per_call_us(call):9.3f}")


if __name__ == "__main__":
    main()
