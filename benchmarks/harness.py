"""Shared pieces of the launch-overhead benchmarks: the cases, kernel sources, PTX for the
raw-launch peers, and the timing helper.

Nothing here touches CUDA at import time, so collecting the benchmarks needs no GPU.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import math
import os
import struct
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Elements of every array argument (float32), as in numba-cuda's own benchmarks.
ARRAY_ELEMENTS = 128
ARRAY_2D_SHAPE = (16, 8)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


#: Launches per timed round: under the stream's ~1000-entry queue, so a round measures the
#: host's cost and not the GPU draining the queue. ``FASTLAUNCH_BENCH_BATCH`` changes it here and
#: in the Rust floor bench alike (smaller batches tell whether a case is bound by the GPU).
BATCH = max(1, _env_int("FASTLAUNCH_BENCH_BATCH", 256))

#: Rounds per benchmark: as many as fit in TARGET_SECONDS, clamped to [MIN, MAX].
MIN_ROUNDS = _env_int("FASTLAUNCH_BENCH_MIN_ROUNDS", 50)
MAX_ROUNDS = max(MIN_ROUNDS, _env_int("FASTLAUNCH_BENCH_MAX_ROUNDS", 200))
TARGET_SECONDS = float(os.environ.get("FASTLAUNCH_BENCH_TARGET_SECONDS", "1.0"))
#: When set, each finished benchmark appends one JSON line here (run.py reads it, so the
#: results survive a run that is cut short).
JSONL_ENV = "FASTLAUNCH_BENCH_JSONL"


def apply_numpy_shim() -> None:
    """numba-cuda 0.30.4 calls ``np.row_stack``, which NumPy 2.5 removed."""
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One benchmark case of docs/benchmarks.md: its arrays (float32, C order) and scalars."""

    id: str
    n_arrays: int = 0
    shape: tuple[int, ...] = (ARRAY_ELEMENTS,)
    #: numba type names of the scalars, in order after the arrays
    scalar_types: tuple[str, ...] = ()
    #: the scalar values passed (Python int / float, or NumPy float32 for E)
    scalar_values: tuple[Any, ...] = ()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def n_params(self) -> int:
        return self.n_arrays + len(self.scalar_types)

    def param_names(self) -> list[str]:
        return [f"a{i}" for i in range(self.n_arrays)] + [
            f"s{i}" for i in range(len(self.scalar_types))
        ]

    def numba_signature(self) -> str:
        array = "float32[" + ", ".join([":"] * (self.ndim - 1) + ["::1"]) + "]"
        return "void(" + ", ".join([array] * self.n_arrays + list(self.scalar_types)) + ")"

    def scalars(self) -> tuple[Any, ...]:
        if self.scalar_types and self.scalar_types[0] == "float32":
            import numpy as np

            return tuple(np.float32(v) for v in self.scalar_values)
        return self.scalar_values


def _float32_case(id: str, n: int) -> Case:
    return Case(id, scalar_types=("float32",) * n, scalar_values=tuple(i + 0.5 for i in range(n)))


CASES: dict[str, Case] = {
    c.id: c
    for c in [
        Case("A"),
        Case("B", n_arrays=1),
        Case(
            "C",
            n_arrays=3,
            shape=ARRAY_2D_SHAPE,
            scalar_types=("int64", "float64", "int64", "float64"),
            scalar_values=(3, 2.5, 7, 0.5),
        ),
        Case("D", n_arrays=26),
        _float32_case("E16", 16),
        _float32_case("E256", 256),
    ]
}


def array_makers(
    sources: Sequence[str] = ("numba", "cupy", "torch"),
) -> dict[str, Callable[[tuple[int, ...]], Any]]:
    """``{source: make(shape)}``: a float32 C-order device array of ``shape`` from numba and,
    where installed, CuPy and torch, for the ``sources`` asked (the others are not imported:
    a process without torch and CuPy loaded is what ``interleaved.py --sources numba``
    measures). For probes run as scripts; pytest uses ``make_arrays``."""
    import numpy as np
    from numba import cuda

    made: dict[str, Callable[[tuple[int, ...]], Any]] = {}
    if "numba" in sources:
        made["numba"] = lambda shape: cuda.device_array(shape, np.float32)
    if "cupy" in sources:
        try:
            import cupy

            made["cupy"] = lambda shape: cupy.zeros(shape, np.float32)
        except ImportError:
            pass
    if "torch" in sources:
        try:
            import torch

            made["torch"] = lambda shape: torch.zeros(shape, dtype=torch.float32, device="cuda")
        except ImportError:
            pass
    return made


def make_views(make: Callable[[tuple[int, ...]], Any], n: int, shape: tuple[int, ...]) -> list:
    """``n`` arrays of ``shape`` as views of one buffer made by ``make`` (see ``array_makers``):
    ``buffer[i * size : (i + 1) * size]``, reshaped."""
    size = math.prod(shape)
    if n == 0:
        return []
    buffer = make((n * size,))
    return [buffer[i * size : (i + 1) * size].reshape(shape) for i in range(n)]


# ------------------------------------------------------------------- Python kernels


_kernel_module: types.ModuleType | None = None


def _kernel_module_source() -> str:
    """Empty kernels, one per case, plus numba-cuda's own suite's two, as real source text
    (Triton reads a kernel's source; numba and fastlaunch are happy either way)."""
    lines = ['"""Generated by benchmarks/harness.py: empty kernels."""', ""]
    for case in CASES.values():
        lines += [f"def empty_{case.id.lower()}({', '.join(case.param_names())}):", "    pass", ""]
    lines += ["def one_arg(arr1):", "    return", ""]
    letters = ", ".join("abcdefghijklmnopqrstuvwxyz")
    lines += [f"def many_args({letters}):", "    return", ""]
    return "\n".join(lines)


def py_kernel(name: str) -> types.FunctionType:
    """A fresh function object for kernel ``name`` of the generated module (each jit gets its
    own, so no decorator sees another's state)."""
    global _kernel_module
    if _kernel_module is None:
        folder = Path(tempfile.mkdtemp(prefix="fastlaunch-bench-"))
        path = folder / "fastlaunch_bench_kernels.py"
        path.write_text(_kernel_module_source())
        spec = importlib.util.spec_from_file_location("fastlaunch_bench_kernels", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _kernel_module = module
    base = getattr(_kernel_module, name)
    fresh = types.FunctionType(
        base.__code__, base.__globals__, base.__name__, base.__defaults__, base.__closure__
    )
    fresh.__qualname__ = base.__qualname__
    fresh.__module__ = base.__module__
    return fresh


# ------------------------------------------------------ raw-launch peers: PTX and values

_PTX_TYPE = {"int64": ".u64", "float64": ".f64", "float32": ".f32"}


def numba_ptx_types(case: Case) -> list[str]:
    """PTX parameter types of the case's kernel in numba's data model: an N-d array is
    5 + 2·N 8-byte values (meminfo, parent, nitems, itemsize, data, shape, strides)."""
    return [".u64"] * (case.n_arrays * (5 + 2 * case.ndim)) + [
        _PTX_TYPE[t] for t in case.scalar_types
    ]


#: how a cuda.core user reads an array's pointer on each call, per source
POINTER_READS = {"torch": "{}.data_ptr()", "cupy": "{}.data.ptr"}


def cuda_core_by_hand(case: Case, source: str, arrays: Sequence[Any]) -> tuple[str, dict]:
    """What a cuda.core user writes for torch or CuPy ``arrays``: a kernel taking one pointer
    per array (then the case's scalars), launched with
    ``launch(stream, config, kernel, a0.data_ptr(), ..., s0, ...)``. Returns that statement
    and the names it uses, for :func:`make_statement_batch`."""
    import cuda.core as cuda_core
    from cuda.core import Device, LaunchConfig, ObjectCode, launch

    device = Device(0)
    device.set_current()
    entry = f"pointers_{case.id.lower()}"
    cc = tuple(device.compute_capability)
    param_types = [".u64"] * case.n_arrays + [_PTX_TYPE[t] for t in case.scalar_types]
    ptx = empty_kernel_ptx(entry, param_types, ptx_target((cc[0], cc[1])))
    kernel = ObjectCode.from_ptx(ptx.encode(), name=entry).get_kernel(entry)
    names: dict[str, Any] = {"launch": launch, "kernel": kernel}
    names["stream"] = getattr(cuda_core, "LEGACY_DEFAULT_STREAM", None) or device.default_stream
    names["config"] = LaunchConfig(grid=1, block=1)
    names |= {f"a{i}": a for i, a in enumerate(arrays)}
    names |= {f"s{i}": v for i, v in enumerate(case.scalar_values)}
    call = ", ".join(
        [POINTER_READS[source].format(f"a{i}") for i in range(case.n_arrays)]
        + [f"s{i}" for i in range(len(case.scalar_values))]
    )
    return f"launch(stream, config, kernel, {call})", names


def empty_kernel_ptx(entry: str, param_types: Sequence[str], target: str = "sm_90") -> str:
    """PTX text of an empty kernel; the same generator as rust/driver/benches/launch.rs."""
    params = ",\n".join(f"\t.param {t} {entry}_param_{i}" for i, t in enumerate(param_types))
    if params:
        params = f"\n{params}\n"
    return (
        f".version 8.0\n.target {target}\n.address_size 64\n\n"
        f".visible .entry {entry}({params})\n{{\n\tret;\n}}\n"
    )


def ptx_target(compute_capability: tuple[int, int]) -> str:
    """The device's architecture capped at sm_90 (PTX ISA 8.0's newest); the driver
    JIT-compiles it forward."""
    major, minor = compute_capability
    return f"sm_{min(major * 10 + minor, 90)}"


def numba_layout_values(case: Case, data_ptrs: Sequence[int]) -> list[Any]:
    """The flattened parameter values of the case in numba's data model, as Python ints
    (8-byte integers), floats (double) and NumPy float32."""
    nitems = math.prod(case.shape)
    itemsize = 4
    strides, stride = [], itemsize
    for n in reversed(case.shape):
        strides.insert(0, stride)
        stride *= n
    values: list[Any] = []
    for ptr in data_ptrs[: case.n_arrays]:
        values += [0, 0, nitems, itemsize, int(ptr), *case.shape, *strides]
    values += list(case.scalars())
    return values


class PackedParams:
    """Kernel parameters packed once into 8-byte slots with a ``void*`` array pointing at
    them (for ``cuda.bindings``' ``cuLaunchKernel``); keep the object alive while used."""

    def __init__(self, values: Sequence[Any], ptx_types: Sequence[str]) -> None:
        assert len(values) == len(ptx_types)
        n = len(values)
        self._slots = (ctypes.c_uint64 * max(n, 1))()
        for i, (value, t) in enumerate(zip(values, ptx_types, strict=True)):
            if t == ".f64":
                (self._slots[i],) = struct.unpack("<Q", struct.pack("<d", float(value)))
            elif t == ".f32":
                (self._slots[i],) = struct.unpack("<I", struct.pack("<f", float(value)))
            else:
                self._slots[i] = int(value)
        base = ctypes.addressof(self._slots)
        self._pointers = (ctypes.c_void_p * max(n, 1))(*[base + 8 * i for i in range(n)])
        self.address = ctypes.addressof(self._pointers) if n else 0


def cupy_source(entry: str, case: Case) -> str:
    """CUDA C of an empty kernel with the case's arguments in their natural C types."""
    c_types = {"int64": "long long", "float64": "double", "float32": "float"}
    params = [f"float* a{i}" for i in range(case.n_arrays)] + [
        f"{c_types[t]} s{i}" for i, t in enumerate(case.scalar_types)
    ]
    return f'extern "C" __global__ void {entry}({", ".join(params)}) {{}}\n'


def cupy_scalars(case: Case) -> tuple[Any, ...]:
    """The scalars as NumPy scalars of the exact C widths CuPy should pass."""
    import numpy as np

    kinds = {"int64": np.int64, "float64": np.float64, "float32": np.float32}
    return tuple(kinds[t](v) for t, v in zip(case.scalar_types, case.scalar_values, strict=True))


# ----------------------------------------------------------------------- timing


def make_batch(
    launch: Callable[..., Any], args: Sequence[Any], n: int = BATCH
) -> Callable[[], None]:
    """A function making ``n`` back-to-back calls ``launch(*args)`` (callables bound to
    locals; no per-call allocation beyond what ``launch`` itself does)."""
    args = tuple(args)
    loop = range(n)
    if not args:

        def batch() -> None:
            for _ in loop:
                launch()

    elif len(args) == 1:
        (arg,) = args

        def batch() -> None:
            for _ in loop:
                launch(arg)

    else:

        def batch() -> None:
            for _ in loop:
                launch(*args)

    return batch


def make_inline_batch(
    kernel: Any, config: tuple, args: Sequence[Any], n: int = BATCH
) -> Callable[[], None]:
    """A function making ``n`` launches spelled as users write them,
    ``kernel[config](*args)``: the configuration subscripted on every call."""
    args = tuple(args)
    loop = range(n)

    def batch() -> None:
        for _ in loop:
            kernel[config](*args)

    return batch


def make_statement_batch(
    statement: str, names: dict[str, Any], n: int = BATCH
) -> Callable[[], None]:
    """A function running ``statement`` ``n`` times with ``names`` as its locals: for peers
    whose users spell per-call work inline, e.g. ``launch(s, cfg, k, t0.data_ptr(), ...)``."""
    params = ", ".join(names)
    code = f"def batch({params}):\n    for _ in range({n}):\n        {statement}\n"
    namespace: dict[str, Any] = {}
    exec(code, namespace)  # noqa: S102 - benchmark statements written in this package
    inner = namespace["batch"]
    values = tuple(names.values())

    def batch() -> None:
        inner(*values)

    return batch


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (NumPy's default), as in the Rust floor bench."""
    position = q / 100 * (len(sorted_values) - 1)
    low, high = math.floor(position), math.ceil(position)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def per_launch_stats(round_seconds: Sequence[float], batch: int = BATCH) -> dict[str, float]:
    """µs per launch (median, p10, p90, min, mean) from seconds per round of ``batch``."""
    us = sorted(s * 1e6 / batch for s in round_seconds)
    return {
        "median_us": _percentile(us, 50),
        "p10_us": _percentile(us, 10),
        "p90_us": _percentile(us, 90),
        "min_us": us[0],
        "mean_us": sum(us) / len(us),
        "rounds": len(us),
    }


def run_benchmark(
    benchmark: Any,
    launch: Callable[..., Any],
    args: Sequence[Any],
    sync: Callable[[], Any],
    batch: Callable[[], None] | None = None,
    **meta: Any,
) -> dict[str, Any]:
    """Times ``launch(*args)`` in rounds of ``BATCH`` launches with pytest-benchmark.

    Warm-up first (compilation, first-call loading, caches), then
    ``benchmark.pedantic(batch, setup=sync, iterations=1)``: each round is one batch, and
    ``sync`` (a context synchronize) runs untimed before each. The number of rounds is what
    fits in ``TARGET_SECONDS``, clamped to ``[MIN_ROUNDS, MAX_ROUNDS]``. Returns and records
    (``benchmark.extra_info``, and the JSON-lines file when configured) µs per launch.
    """
    if batch is None:  # else the caller spelled the batch (inline launches, peers' statements)
        batch = make_batch(launch, args)
    launch(*args)  # compiles / loads on the first call
    sync()
    batch()
    sync()
    start = time.perf_counter()
    batch()
    elapsed = time.perf_counter() - start
    sync()
    rounds = int(min(MAX_ROUNDS, max(MIN_ROUNDS, TARGET_SECONDS / max(elapsed, 1e-9))))

    def setup() -> None:
        sync()

    benchmark.extra_info.update(meta, batch=BATCH)
    benchmark.pedantic(batch, setup=setup, rounds=rounds, iterations=1, warmup_rounds=1)
    sync()

    record: dict[str, Any] = {"test": benchmark.name, **meta, "batch": BATCH}
    stats = getattr(benchmark, "stats", None)
    data = list(getattr(getattr(stats, "stats", None), "data", None) or [])
    if data:  # absent with --benchmark-disable
        record.update(per_launch_stats(data))
        benchmark.extra_info.update(
            {k: record[k] for k in ("median_us", "p10_us", "p90_us", "min_us")}
        )
        path = os.environ.get(JSONL_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")
    return record
