"""Aggregate launches per second from 1, 2, 4 and 8 Python threads, each on its own stream,
for fastlaunch (GIL held, and released, around the driver call) and numba-cuda.

    python3 benchmarks/threads.py [--seconds 1.0]
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


def aggregate_rate(make_launch, threads: int, seconds: float) -> float:
    """Launches per second summed over `threads` threads launching for `seconds` each."""
    counts = [0] * threads
    start_line = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        launch = make_launch()
        for _ in range(256):
            launch()
        start_line.wait()
        done = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for _ in range(64):
                launch()
            done += 64
        counts[index] = done

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    start_line.wait()
    began = time.perf_counter()
    for t in pool:
        t.join()
    return sum(counts) / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.0)
    seconds = parser.parse_args().seconds
    fast, slow = fl.jit("void(float32[::1])")(empty), cuda.jit("void(float32[::1])")(empty)

    def fastlaunch_launch():
        stream = fl.stream(non_blocking=True)
        array = cuda.device_array(128, np.float32)
        launcher = fast[1, 1, stream]
        return lambda: launcher(array)

    def numba_launch():
        stream = cuda.stream()
        array = cuda.device_array(128, np.float32)
        launcher = slow[1, 1, stream]
        return lambda: launcher(array)

    rows = []
    for name, make, release in [
        ("fastlaunch, GIL held", fastlaunch_launch, False),
        ("fastlaunch, GIL released", fastlaunch_launch, True),
        ("numba-cuda", numba_launch, False),
    ]:
        _core.set_release_gil(release)
        rates = [aggregate_rate(make, n, seconds) for n in (1, 2, 4, 8)]
        rows.append((name, rates))
    _core.set_release_gil(False)
    print(f"{'launcher':26} " + " ".join(f"{n:>2} thr (k/s)" for n in (1, 2, 4, 8)) + "  4 thr / 1")
    for name, rates in rows:
        cells = " ".join(f"{r / 1e3:12.1f}" for r in rates)
        print(f"{name:26} {cells}  {rates[2] / rates[0]:8.2f}x")


if __name__ == "__main__":
    main()
