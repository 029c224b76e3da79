"""Aggregate launches per second with one Python thread per GPU (each inside
``with fastlaunch.gpus[i]``, on its own stream), against one thread on one GPU and against
the same number of threads all on GPU 0. An empty kernel taking one array, as in
benchmarks/threads.py.

    python3 benchmarks/multi_gpu.py [--seconds 1.0] [--gpus N] [--release-gil]

On a machine with one GPU it prints the one-GPU figure and says the rows for several
GPUs need several GPUs.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
from numba import cuda

import fastlaunch as fl
from fastlaunch import _core


def empty(a):
    pass


def aggregate_rate(kernel, devices: list[int], seconds: float) -> tuple[float, list[float]]:
    """Launches per second summed over one thread per entry of `devices` (each inside
    ``with gpus[device]``, on its own non-blocking stream), and each thread's own rate."""
    threads = len(devices)
    counts = [0] * threads
    elapsed = [0.0] * threads
    errors: list[BaseException] = []
    start_line = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        device = devices[index]
        try:
            with fl.gpus[device]:
                with cuda.gpus[device]:
                    array = cuda.device_array(128, np.float32)
                stream = fl.stream(non_blocking=True)
                launcher = kernel[1, 1, stream]
                for _ in range(256):  # warm: module loaded in this context, caches filled
                    launcher(array)
                stream.synchronize()
                start_line.wait()
                done = 0
                began = time.perf_counter()
                deadline = began + seconds
                while time.perf_counter() < deadline:
                    for _ in range(64):
                        launcher(array)
                    done += 64
                elapsed[index] = time.perf_counter() - began
                counts[index] = done
                stream.synchronize()
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            start_line.abort()

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    try:
        start_line.wait()
    except threading.BrokenBarrierError:
        pass
    began = time.perf_counter()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    total = sum(counts) / (time.perf_counter() - began)
    return total, [c / e for c, e in zip(counts, elapsed, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--gpus", type=int, default=0, help="GPUs to use (default: all)")
    parser.add_argument(
        "--release-gil", action="store_true", help="release the GIL around cuLaunchKernel"
    )
    options = parser.parse_args()
    if not fl.is_available():
        raise SystemExit(f"multi_gpu.py needs a CUDA GPU: {_core.unavailable_reason()}")
    count = len(fl.gpus) if options.gpus <= 0 else min(options.gpus, len(fl.gpus))
    _core.set_release_gil(options.release_gil)
    names = ", ".join(f"{d.id}: {d.name}" for d in list(fl.gpus)[:count])
    gil = "released" if options.release_gil else "held"
    print(f"GPUs {names}; GIL {gil} around the launch; {options.seconds:g} s per row")

    kernel = fl.jit("void(float32[::1])")(empty)
    rows = [("1 GPU, 1 thread", [0])]
    if count >= 2:
        rows.append((f"GPU 0, {count} threads", [0] * count))
        rows.append((f"{count} GPUs, 1 thread each", list(range(count))))
    results = [
        (label, *aggregate_rate(kernel, devices, options.seconds)) for label, devices in rows
    ]
    _core.set_release_gil(False)

    base = results[0][1]
    print(f"{'configuration':28} {'total (k/s)':>12} {'vs 1 GPU':>9}  per thread (k/s)")
    for label, total, per_thread in results:
        threads = " ".join(f"{r / 1e3:.1f}" for r in per_thread)
        print(f"{label:28} {total / 1e3:12.1f} {total / base:8.2f}x  {threads}")
    if count < 2:
        print(
            f"{'2 GPUs, 1 thread each':28} {'-':>12} {'-':>9}  "
            f"needs two GPUs (this machine has {len(fl.gpus)})"
        )


if __name__ == "__main__":
    main()
