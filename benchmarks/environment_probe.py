"""What a launch costs beyond fastlaunch's own work (run on the GPU): the same empty kernels
launched through fastlaunch (full and pre-bound) and through ``cuda.bindings``
``cuLaunchKernel`` with parameters packed once (the Python-side floor), with numba-cuda's
image and with the floor bench's hand-written PTX, in three settings of one process:

- ``fresh``: only numba-cuda's context exists;
- ``+16 blocking streams``: the context also holds 16 streams created as numba, CuPy and
  torch streams are by default, which launches on the legacy default stream are ordered
  against (as in the benchmark process, which has made many);
- ``own stream``: the same launches on one non-blocking stream of their own.

It also prints each image's per-thread local memory and registers as the driver reports
them, since the driver does more per launch for kernels that need local memory.

    python3 benchmarks/environment_probe.py [--batches 50]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from cuda.bindings import driver as cu
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fastlaunch as fl  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    CASES,
    PackedParams,
    empty_kernel_ptx,
    numba_layout_values,
    numba_ptx_types,
    ptx_target,
)
from benchmarks.stages import per_launch_us  # noqa: E402
from fastlaunch import _core  # noqa: E402


def check(result: tuple) -> object:
    err, *rest = result
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return rest[0] if rest else None


def function_of(image: bytes, entry: str) -> tuple[object, object]:
    module = check(cu.cuModuleLoadData(image))
    return module, check(cu.cuModuleGetFunction(module, entry.encode()))


def library_handles(image: bytes, entry: str) -> tuple[object, object, object]:
    """(library, CUkernel as a CUfunction, the kernel's CUfunction in this context), as
    fastlaunch loads images (``cuLibraryLoadData``)."""
    library = check(cu.cuLibraryLoadData(image, None, None, 0, None, None, 0))
    kernel = check(cu.cuLibraryGetKernel(library, entry.encode()))
    return library, cu.CUfunction(int(kernel)), check(cu.cuKernelGetFunction(kernel))


def attribute(function: object, name: str) -> int:
    return check(cu.cuFuncGetAttribute(getattr(cu.CUfunction_attribute, name), function))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=50)
    batches = parser.parse_args().batches
    cuda.current_context()
    major, minor = fl.gpus[0].compute_capability
    code = major * 10 + minor
    suffix = "a" if code >= 90 else ""

    setups = {}
    keep: list[object] = []
    for case_id in ("A", "D"):
        case = CASES[case_id]
        names = [f"a{i}" for i in range(case.n_arrays)]
        namespace: dict = {}
        source = f"def empty_{case_id.lower()}({', '.join(names)}):\n    pass\n"
        exec(source, namespace)  # noqa: S102 - an empty kernel of the case's arity
        kernel = fl.jit(namespace[f"empty_{case_id.lower()}"])
        arrays = tuple(cuda.device_array(case.shape, np.float32) for _ in range(case.n_arrays))
        kernel[1, 1](*arrays)
        fl.synchronize()
        (overload,) = kernel.overloads.values()
        cubin = bytes(overload._codelibrary.get_cubin(cc=(major, minor, suffix)).code)
        entry = f"empty_{case_id.lower()}"
        ptx = empty_kernel_ptx(entry, numba_ptx_types(case), ptx_target((major, minor)))
        images = {
            "numba cubin": (cubin, overload.entry_name),
            "floor PTX": (ptx.encode() + b"\0", entry),
        }
        param_types = tuple(overload.signature.args)
        fingerprint = _core.fingerprint(arrays)
        values = numba_layout_values(case, [a.device_ctypes_pointer.value for a in arrays])
        packed = PackedParams(values, numba_ptx_types(case))
        keep += [kernel, arrays, packed]
        functions = {}
        for label, (image, name) in images.items():
            module, function = function_of(image, name)
            keep.append(module)
            functions[label] = function
            library, as_function, in_context = library_handles(image, name)
            keep.append(library)
            functions[f"{label}, library CUkernel"] = as_function
            functions[f"{label}, library CUfunction"] = in_context
            local = attribute(function, "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES")
            registers = attribute(function, "CU_FUNC_ATTRIBUTE_NUM_REGS")
            print(f"{case_id} {label:12} local bytes/thread {local}, registers {registers}")
        setups[case_id] = (kernel, arrays, images, param_types, fingerprint, packed, functions)

    def row(setting: str, stream_object: object, handle: int) -> None:
        for case_id, (
            kernel,
            arrays,
            images,
            param_types,
            fingerprint,
            packed,
            functions,
        ) in setups.items():
            launcher = kernel[1, 1, stream_object]
            timings = {
                "fastlaunch": per_launch_us(
                    lambda launcher=launcher, arrays=arrays: launcher(*arrays), batches
                ),
                "fl bound": per_launch_us(launcher.bind(*arrays), batches),
            }
            raw = _core.Kernel()
            raw._register(
                fingerprint, code, param_types, _core.CompiledKernel(*images["floor PTX"])
            )
            timings["fl bound, floor PTX"] = per_launch_us(
                raw[1, 1, stream_object].bind(*arrays), batches
            )
            for label, function in functions.items():
                args = (function, 1, 1, 1, 1, 1, 1, 0, cu.CUstream(handle), packed.address, 0)
                timings[f"bindings, {label}"] = per_launch_us(
                    lambda args=args: cu.cuLaunchKernel(*args), batches
                )
            cells = "  ".join(f"{k} {v:5.2f}" for k, v in timings.items())
            print(f"{setting:22} {case_id}  {cells}")

    print(f"\nµs per launch, median of {batches} batches of 256 (synchronized between batches)")
    row("fresh", 0, 0)
    streams = [cuda.stream() for _ in range(16)]  # blocking streams, as numba makes them
    row("+16 blocking streams", 0, 0)
    own = fl.stream(non_blocking=True)
    row("own non-blocking stream", own, own.handle)
    del streams, keep


if __name__ == "__main__":
    main()
