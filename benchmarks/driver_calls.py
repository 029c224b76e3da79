"""Where the host time of a fresh object goes, driver call by driver call: the cases of
``benchmarks/memory.py``'s fresh-object rows (and the memory API's calls they are made of),
each run many times under ``fastlaunch.install()`` with fastlaunch loading a driver that
forwards to the real one, counting each function's calls and timing them
(``benchmarks/timed_driver/timed_cuda.c``; ``make gpu-prepare`` builds it as
``.gpu/timed-cuda.so``). Per call of a case: its wall time, and per driver function the calls
and the µs spent in it. numba-cuda, CuPy and torch keep the real driver; only fastlaunch's
calls are counted. The counting costs two clock reads per driver call: read the calls and the
differences between cases, not the absolute times.

    python benchmarks/driver_calls.py --out DIR [--calls 20000] [--driver .gpu/timed-cuda.so]

Writes DIR/driver-calls.md and DIR/driver-calls.json (per case: ``wall_us`` and
``driver``, ``{function: [calls, µs]}`` per call of the case)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.memory import LAUNCH_BLOCK, LAUNCH_ELEMENTS, LAUNCH_GRID  # noqa: E402

#: launches between synchronizations, none of which is timed
BATCH = 500


class TimedDriver:
    """The counting driver's counters (the library fastlaunch loaded: the same handle)."""

    def __init__(self, path: str) -> None:
        self.library = ctypes.CDLL(path)
        self.library.timed_cuda_name.restype = ctypes.c_char_p
        self.library.timed_cuda_calls.restype = ctypes.c_uint64
        self.library.timed_cuda_ns.restype = ctypes.c_uint64
        count = self.library.timed_cuda_count()
        self.names = [self.library.timed_cuda_name(i).decode() for i in range(count)]

    def reset(self) -> None:
        self.library.timed_cuda_reset()

    def read(self) -> dict[str, tuple[int, int]]:
        """``{function: (calls, ns)}`` of the functions called since the last reset."""
        read = {}
        for i, name in enumerate(self.names):
            calls = self.library.timed_cuda_calls(i)
            if calls:
                read[name] = (calls, self.library.timed_cuda_ns(i))
        return read


def launch_cases(source: str, empty: Callable[[], Any], kernel: Any) -> dict[str, Callable]:
    """Five new arrays from ``empty()`` alone, the same with a launch over them, and the
    launch over five arrays made once (``source`` names the arrays' library)."""
    grid, block = LAUNCH_GRID, LAUNCH_BLOCK
    a0, b0, c0, d0, e0 = (empty() for _ in range(5))

    def arrays_alone() -> None:
        _a, _b, _c, _d, _e = empty(), empty(), empty(), empty(), empty()

    def launch_new() -> None:
        a, b, c, d, e = empty(), empty(), empty(), empty(), empty()
        kernel[grid, block](a, b, c, d, e)

    def launch_reused(a=a0, b=b0, c=c0, d=d0, e=e0) -> None:
        kernel[grid, block](a, b, c, d, e)

    return {
        f"{source}: arrays_alone": arrays_alone,
        f"{source}: launch_new": launch_new,
        f"{source}: launch_reused": launch_reused,
    }


def cases(cuda: Any, kernel: Any, np: Any) -> dict[str, Callable[[], None]]:
    """The cases, under ``fastlaunch.install()`` (``cuda`` is numba.cuda): ``kernel`` takes
    five float32 arrays of ``LAUNCH_ELEMENTS``, as ``memory.make_elementwise``'s. The launches
    over numba arrays, and over CuPy arrays and torch tensors where those import."""
    grid, block = LAUNCH_GRID, LAUNCH_BLOCK

    def new() -> Any:
        return cuda.device_array(LAUNCH_ELEMENTS, dtype=np.float32)

    found = launch_cases("numba", new, kernel)
    for source, empty in other_sources().items():
        found.update(launch_cases(source, empty, kernel))
    a0, b0, c0, d0, e0 = (new() for _ in range(5))
    kept_stream = cuda.stream()
    host = np.arange(8192, dtype=np.float32)  # 32 KiB

    def stream_alone() -> None:
        _stream = cuda.stream()

    def stream_new(a=a0, b=b0, c=c0, d=d0, e=e0) -> None:
        stream = cuda.stream()
        kernel[grid, block, stream](a, b, c, d, e)

    def one_stream(a=a0, b=b0, c=c0, d=d0, e=e0, stream=kept_stream) -> None:
        kernel[grid, block, stream](a, b, c, d, e)

    def device_array() -> None:
        new()

    def slice_view(d=a0) -> None:
        d[1:-1]

    def to_device(host=host) -> None:
        cuda.to_device(host)

    return {
        **found,
        "stream_alone": stream_alone,
        "stream_new": stream_new,
        "one_stream": one_stream,
        "device_array": device_array,
        "d[1:-1]": slice_view,
        "to_device 32 KiB": to_device,
    }


def other_sources() -> dict[str, Callable[[], Any]]:
    """``cupy.empty`` and ``torch.empty`` of ``LAUNCH_ELEMENTS`` float32, where they import
    (on the GPU machine; not in the CPU tests)."""
    sources: dict[str, Callable[[], Any]] = {}
    try:
        import cupy

        sources["cupy"] = lambda: cupy.empty(LAUNCH_ELEMENTS, dtype=cupy.float32)
    except ImportError:
        pass
    try:
        import torch

        sources["torch"] = lambda: torch.empty(LAUNCH_ELEMENTS, dtype=torch.float32, device="cuda")
    except ImportError:
        pass
    return sources


def measure(
    case: Callable[[], None], calls: int, timed: TimedDriver, synchronize: Callable[[], None]
) -> dict[str, Any]:
    """``case`` run ``calls`` times (after ``BATCH`` untimed), in batches of ``BATCH`` with an
    untimed synchronization between: its wall µs per call and, per driver function, the calls
    and µs per call of the case (the synchronizations' own driver calls left out)."""
    for _ in range(BATCH):
        case()
    synchronize()
    spent = 0.0
    totals: dict[str, list[int]] = {}
    done = 0
    while done < calls:
        batch = min(BATCH, calls - done)
        timed.reset()
        start = time.perf_counter()
        for _ in range(batch):
            case()
        spent += time.perf_counter() - start
        for name, (count, ns) in timed.read().items():
            total = totals.setdefault(name, [0, 0])
            total[0] += count
            total[1] += ns
        synchronize()
        done += batch
    driver = {
        name: [count / calls, ns / calls / 1e3] for name, (count, ns) in sorted(totals.items())
    }
    return {"wall_us": spent / calls * 1e6, "driver": driver}


def markdown(results: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"# Driver calls per call ({meta['measured']})",
        "",
        f"{meta['calls']} calls a case, fastlaunch on the counting driver "
        "(benchmarks/timed_driver/timed_cuda.c); µs per call of the case.",
        "",
        "| case | wall µs | driver µs | driver calls (per call: count × function, µs) |",
        "|---|--:|--:|---|",
    ]
    for name, result in results.items():
        driver = result["driver"]
        spent = sum(us for _, us in driver.values())
        calls = ", ".join(
            f"{count:g}× {function} {us:.2f}" for function, (count, us) in driver.items()
        )
        lines.append(f"| {name} | {result['wall_us']:.2f} | {spent:.2f} | {calls} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("gpu-out"))
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--driver", default=".gpu/timed-cuda.so")
    args = parser.parse_args()
    driver = str(Path(args.driver).resolve())
    if os.environ.get("FASTLAUNCH_CUDA_DRIVER") != driver:
        os.environ["FASTLAUNCH_CUDA_DRIVER"] = driver  # read when fastlaunch loads its core
        os.execv(sys.executable, [sys.executable, *sys.argv])

    import numpy as np
    from numba import cuda

    import fastlaunch
    from benchmarks.memory import make_elementwise

    timed = TimedDriver(driver)
    fastlaunch.install()
    kernel = make_elementwise()
    results = {}
    for name, case in cases(cuda, kernel, np).items():
        results[name] = measure(case, args.calls, timed, cuda.synchronize)
        print(f"{name:20} {results[name]['wall_us']:8.2f} µs", flush=True)
    meta = {
        "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
        "calls": args.calls,
        "commit": os.environ.get("FASTLAUNCH_COMMIT", ""),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(results, meta)
    (args.out / "driver-calls.md").write_text(text)
    (args.out / "driver-calls.json").write_text(json.dumps({"meta": meta, "cases": results}))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
