"""Why a pre-bound launch of case D (26 arrays) costs more than the C floor: the same bound
launch path timed with three images of the same empty 26-array kernel (run on the GPU).

- numba's cubin (what fastlaunch loads: sm_XXa), through ``fastlaunch.jit`` and ``bind``;
- numba's PTX for the same kernel, loaded by the driver (JIT);
- the floor bench's hand-written PTX (``harness.empty_kernel_ptx``), as the Rust floor uses.

All three go through ``_core.Kernel`` → ``bind`` → the same ``cuLaunchKernel`` call, so any
difference is the image's, not the launch path's.

    python3 benchmarks/bound_probe.py [--batches 50]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fastlaunch as fl  # noqa: E402
from benchmarks.harness import CASES, empty_kernel_ptx, numba_ptx_types, ptx_target  # noqa: E402
from benchmarks.stages import per_launch_us  # noqa: E402
from fastlaunch import _core  # noqa: E402

N_ARRAYS = 26


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=50)
    batches = parser.parse_args().batches
    names = [f"a{i}" for i in range(N_ARRAYS)]
    source = f"def empty_d({', '.join(names)}):\n    pass\n"
    namespace: dict = {}
    exec(source, namespace)  # a real function of 26 parameters, as the suite's
    kernel = fl.jit(namespace["empty_d"])
    arrays = [cuda.device_array(128, np.float32) for _ in range(N_ARRAYS)]
    kernel[1, 1](*arrays)
    fl.synchronize()
    (overload,) = kernel.overloads.values()
    major, minor = fl.gpus[0].compute_capability
    code = major * 10 + minor
    param_types = tuple(overload.signature.args)
    fingerprint = _core.fingerprint(tuple(arrays))

    def bound_with(image: bytes, entry: str):
        raw = _core.Kernel()
        raw._register(fingerprint, code, param_types, _core.CompiledKernel(image, entry))
        return raw, raw[1, 1].bind(*arrays)

    cubin = overload._codelibrary.get_cubin(cc=(major, minor, "a" if code >= 90 else ""))
    images = {
        "numba cubin (fastlaunch's)": (bytes(cubin.code), overload.entry_name),
        "numba PTX, driver JIT": (
            overload._codelibrary.get_asm_str(cc=(major, minor)).encode() + b"\0",
            overload.entry_name,
        ),
        "floor bench PTX": (
            empty_kernel_ptx(
                "empty_d", numba_ptx_types(CASES["D"]), ptx_target((major, minor))
            ).encode()
            + b"\0",
            "empty_d",
        ),
    }
    bound_fastlaunch = kernel[1, 1].bind(*arrays)
    print(f"{'image':32} {'bound µs':>9}")
    print(f"{'fastlaunch.jit + bind':32} {per_launch_us(bound_fastlaunch, batches):9.2f}")
    keep = []
    for label, (image, entry) in images.items():
        raw, bound = bound_with(image, entry)
        keep.append(raw)
        print(f"{label:32} {per_launch_us(bound, batches):9.2f}")
    a = _core.Kernel()
    a_bound = None
    try:
        ptx = empty_kernel_ptx("empty_a", [], ptx_target((major, minor))).encode() + b"\0"
        a._register(b"", code, (), _core.CompiledKernel(ptx, "empty_a"))
        a_bound = a[1, 1].bind()
    except Exception as e:  # report and go on
        print("case A image failed:", e)
    if a_bound is not None:
        print(f"{'floor bench PTX, case A':32} {per_launch_us(a_bound, batches):9.2f}")


if __name__ == "__main__":
    main()
