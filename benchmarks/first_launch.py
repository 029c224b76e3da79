#!/usr/bin/env python3
"""What a launch over NEW arrays costs beyond one over the same arrays again (issue 39), on
the stand-in driver (``tests/stand_in_driver/fake_cuda.c``: every driver call succeeds and does
nothing, so what is timed is fastlaunch's host work and Python's).

usage:
    cc -O2 -shared -fPIC -o /tmp/fake_cuda.so tests/stand_in_driver/fake_cuda.c
    FASTLAUNCH_CUDA_DRIVER=/tmp/fake_cuda.so python3 benchmarks/first_launch.py \
        [--rounds 5] [--calls 20000] [--sources numba,numba-view,...] [--baseline DIR]

For each source of arrays, µs per call, the best of ``--rounds`` batches of ``--calls``:

- ``reused``: ``k[16, 256](a, b, c, d, e)`` over the same five arrays every call;
- ``make5``: making five new arrays (float32, 4096 elements), and dropping them;
- ``make5+launch``: making five new arrays and launching the kernel over them;
- ``share``: ``make5+launch - make5``, what the launch of five new arrays costs (with what
  the launch adds to their free); ``ratio``: ``share / reused``. The issue's target is
  ``ratio <= 1.3`` on the GPU, where ``reused`` is ~5 µs, mostly the driver's: what counts
  here is ``(share - reused) / 5``, the extra per new array, also printed;
- ``rotating``: the launch over 4,000 sets of five arrays made before the timing, one set
  after another: new objects to the launch, with no making or dropping in the timed loop
  (steadier than ``share``, which is a difference of two noisy figures); ``rotating extra``:
  ``(rotating - reused) / 5``, per new array.

``--streams`` also times the launch on a stream: ``one stream`` (the same ``cuda.stream()``
object each call), ``new stream`` (a new ``cuda.stream()`` per call, as the tutorial writes
it), ``stream alone`` (making and dropping the stream object); ``stream extra`` is
``new stream - one stream``, the target's figure (``<= 1 µs`` on the GPU).

Sources: ``fl`` (``fastlaunch.device_array``, described from birth), ``fl-view`` (``x[1:]``
of one), ``numba`` (numba-cuda's own ``DeviceNDArray(shape, strides, dtype,
gpu_data=...)``, as with ``FASTLAUNCH_MEMORY_API=0``), ``numba-view`` (``x[1:]`` of one),
``cai`` (an object whose ``__cuda_array_interface__`` is an instance attribute, a dict),
``cupy`` (the stand-in CuPy of ``tests/stand_in_cupy.py``) and ``torch`` (the stand-in
tensor of ``tests/exchange_tensors.py``, read by its exchange API in C).

``--baseline DIR``: also time the ``fastlaunch`` package copied into ``DIR`` (``DIR/fastlaunch``,
with its built ``_core``; e.g. ``cp -r python/fastlaunch /tmp/before/`` before a change), in
a second process, the two processes' rounds alternating; both tables are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SOURCES = ["fl", "fl-view", "numba", "numba-view", "cai", "cupy", "torch"]
N = 4096
# `x[1:]` without numba-cuda's `require_context` (no CUDA context on the stand-in)
VIEW = slice(1, None)


def _makers() -> tuple[dict[str, Callable[[], Any]], Callable[[tuple], Any]]:
    """The array makers by source, and ``kernel_for(count)`` (a kernel of ``count`` array
    parameters, registered for float32 vectors without compiling: the stand-in runs none)."""
    import numpy as np
    from cuda.bindings import driver as bindings
    from numba.cuda.cudadrv import driver as numba_driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    import fastlaunch as fl
    from fastlaunch import _core
    from fastlaunch.dispatcher import numba_type

    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO))
    import exchange_tensors
    import stand_in_cupy

    from benchmarks.stand_in import stand_in_context

    stand_in_context()

    cp = stand_in_cupy.fake_cupy()
    sys.modules["cupy"], sys.modules["cupy.cuda"] = cp, cp.cuda
    library = "/tmp/first_launch_tensor_reader.so"
    if not os.path.exists(library):
        source = library[:-3] + ".c"
        Path(source).write_text(exchange_tensors.C_READER)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
    tensor_class = exchange_tensors.fast_tensor_class(library)

    float32 = np.dtype(np.float32)

    def numba_own(n: int) -> Any:
        memory = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(1 << 40), 1 << 20)
        return DeviceNDArray((n,), (4,), float32, gpu_data=numba_driver.OwnedPointer(memory))

    class Interface:
        def __init__(self, n: int) -> None:
            self.__cuda_array_interface__ = {
                "shape": (n,),
                "strides": None,
                "typestr": "<f4",
                "data": (1 << 40, False),
                "version": 3,
            }

    cupy_memory = stand_in_cupy.MemoryPointer(stand_in_cupy.Memory(4 * N), 0)
    fl_base = fl.device_array(N + 1, np.float32)
    numba_base = numba_own(N + 1)
    makers = {
        "fl": lambda: fl.device_array(N, np.float32),
        "fl-view": lambda: fl_base._do_getitem(VIEW),
        "numba": lambda: numba_own(N),
        "numba-view": lambda: numba_base._do_getitem(VIEW),
        "cai": lambda: Interface(N),
        "cupy": lambda: cp.ndarray((N,), np.float32, memptr=cupy_memory),
        "torch": lambda: tensor_class((N,), 1 << 40),
    }
    compiled = _core.CompiledKernel(b"fake image", "fake_entry")

    def kernel_for(count: int) -> Any:
        names = ", ".join(f"a{i}" for i in range(count))
        namespace: dict[str, Any] = {}
        exec(f"def k({names}):\n    pass\n", namespace)
        return fl.jit(namespace["k"])

    def register(kernel: Any, args: tuple) -> None:
        fingerprint = _core.fingerprint(args)
        types = tuple(numba_type(d) for d in _core.describe(fingerprint))
        kernel._register(fingerprint, 90, types, compiled)

    def registered_kernel(args: tuple) -> Any:
        kernel = kernel_for(len(args))
        register(kernel, args)
        return kernel

    return makers, registered_kernel


def _best(f: Callable[[], Any], calls: int, rounds: int) -> float:
    for _ in range(min(calls, 1000)):
        f()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def measure(
    sources: list[str], calls: int, rounds: int, streams: bool
) -> dict[str, dict[str, float]]:
    """µs per call of each source's ``reused``, ``make5``, ``make5+launch`` and ``rotating``;
    with ``streams``, the stream rows too (as ``"streams"``)."""
    makers, registered_kernel = _makers()
    out = {}
    for source in sources:
        out[source] = _measure_one(makers[source], registered_kernel, calls, rounds)
    if streams:
        out["streams"] = measure_streams(makers, registered_kernel, calls, rounds)
    return out


ROTATING_SETS = 4000


def _measure_one(
    make: Callable[[], Any], registered_kernel: Callable[[tuple], Any], calls: int, rounds: int
) -> dict[str, float]:
    arrays = tuple(make() for _ in range(5))
    launch = registered_kernel(arrays)[16, 256]

    def make5() -> tuple:
        return (make(), make(), make(), make(), make())

    sets = [make5() for _ in range(ROTATING_SETS)]

    def rotating() -> None:
        for each in sets:
            launch(*each)

    return {
        "reused": _best(lambda: launch(*arrays), calls, rounds),
        "make5": _best(make5, calls, rounds),
        "make5+launch": _best(lambda: launch(*make5()), calls, rounds),
        "rotating": _best(rotating, max(1, calls // ROTATING_SETS), rounds) / ROTATING_SETS,
    }


def measure_streams(
    makers: dict[str, Callable[[], Any]],
    registered_kernel: Callable[[tuple], Any],
    calls: int,
    rounds: int,
) -> dict[str, float]:
    """µs per call of a launch over five reused arrays on one stream object, on a new one
    per call, and of a stream object alone (``cuda.stream()`` under install: a pooled stream)."""
    from fastlaunch.memory import streams

    arrays = tuple(makers["fl"]() for _ in range(5))
    kernel = registered_kernel(arrays)
    kept = streams.stream()

    def one_stream() -> None:
        kernel[16, 256, kept](*arrays)

    def new_stream() -> None:
        kernel[16, 256, streams.stream()](*arrays)

    return {
        "one stream": _best(one_stream, calls, rounds),
        "new stream": _best(new_stream, calls, rounds),
        "stream alone": _best(streams.stream, calls, rounds),
    }


def table(title: str, results: dict[str, dict[str, float]]) -> str:
    lines = [
        f"### {title}",
        "",
        "| source | reused | make5 | make5+launch | share | ratio | extra per new array "
        "| rotating | rotating extra |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for source, r in results.items():
        if source == "streams":
            continue
        share = r["make5+launch"] - r["make5"]
        lines.append(
            f"| {source} | {r['reused']:.2f} | {r['make5']:.2f} | {r['make5+launch']:.2f} "
            f"| {share:.2f} | {share / r['reused']:.2f} | {(share - r['reused']) / 5:.3f} "
            f"| {r['rotating']:.3f} | {(r['rotating'] - r['reused']) / 5:.3f} |"
        )
    if "streams" in results:
        r = results["streams"]
        lines += [
            "",
            "| one stream | new stream | stream alone | stream extra |",
            "|---:|---:|---:|---:|",
            f"| {r['one stream']:.3f} | {r['new stream']:.3f} | {r['stream alone']:.3f} "
            f"| {r['new stream'] - r['one stream']:.3f} |",
        ]
    return "\n".join(lines)


def _worker(pythonpath: str | None, argv: list[str]) -> dict[str, dict[str, float]]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(
        [sys.executable, __file__, "--worker", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--sources", default=",".join(SOURCES))
    parser.add_argument("--baseline", help="a directory holding a fastlaunch package")
    parser.add_argument("--streams", action="store_true", help="time launches on streams too")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sources = [s for s in args.sources.split(",") if s]
    if args.worker:
        print(json.dumps(measure(sources, args.calls, args.rounds, args.streams)))
        return
    if "FASTLAUNCH_CUDA_DRIVER" not in os.environ:
        sys.exit("set FASTLAUNCH_CUDA_DRIVER to the stand-in driver (see the docstring)")
    argv = ["--rounds", "1", "--calls", str(args.calls), "--sources", ",".join(sources)]
    argv += ["--streams"] if args.streams else []
    builds = {"this build": None}
    if args.baseline:
        builds = {"baseline": str(Path(args.baseline).resolve()), "this build": None}
    best: dict[str, dict[str, dict[str, float]]] = {}
    for _ in range(args.rounds):  # the builds' rounds alternate, each in a fresh process
        for name, pythonpath in builds.items():
            for source, r in _worker(pythonpath, argv).items():
                kept = best.setdefault(name, {}).setdefault(source, r)
                for key, value in r.items():
                    kept[key] = min(kept[key], value)
    print("µs per call, best of", args.rounds, "rounds of", args.calls, "calls")
    for name, results in best.items():
        print()
        print(table(name, results))


if __name__ == "__main__":
    main()
