"""A sum reduction on numba device arrays: each block sums its share in shared memory
(dynamic shared memory, sized at launch) and adds its partial sum to the total with one
atomic add. Then the same launch, pre-bound with ``.bind``, runs again without any
per-launch argument work.

Run: ``python examples/reduction.py``. Exits 0 when the sums match NumPy, 1 when they do
not, and 77 (skipped) without a GPU.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda, float64

import fastlaunch

SKIPPED = 77  # the exit code the example tests read as "skipped"
NO_GPU = "no CUDA GPU here (`python -m fastlaunch info` says why)"
THREADS = 256  # a power of two: the tree below halves it


@fastlaunch.jit
def block_sum(total, x):
    partial = cuda.shared.array(0, dtype=float64)  # dynamic: THREADS * 8 bytes at launch
    tid = cuda.threadIdx.x
    acc = 0.0
    for k in range(cuda.grid(1), x.size, cuda.gridsize(1)):  # grid-stride loop
        acc += x[k]
    partial[tid] = acc
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if tid < step:
            partial[tid] += partial[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        cuda.atomic.add(total, 0, partial[0])


def skip(why: str) -> int:
    print(f"skipped: {why}", file=sys.stderr)
    return SKIPPED


def main() -> int:
    if not fastlaunch.is_available():
        return skip(NO_GPU)

    n = 10_000_019
    host = np.random.default_rng(0).random(n, dtype=np.float32)
    expected = host.sum(dtype=np.float64)
    x = cuda.to_device(host)
    total = cuda.to_device(np.zeros(1, np.float64))

    blocks = 4 * fastlaunch.current_device().multiprocessor_count
    shared = THREADS * np.dtype(np.float64).itemsize
    block_sum[blocks, THREADS, 0, shared](total, x)  # grid, block, stream, dynamic shared
    once = total.copy_to_host()[0]

    repeats = 9
    launch = block_sum[blocks, THREADS, 0, shared].bind(total, x)  # classified and packed once
    for _ in range(repeats):
        launch()  # keeps adding to total
    again = total.copy_to_host()[0]

    ok = np.isclose(once, expected, rtol=1e-9) and np.isclose(
        again, (1 + repeats) * expected, rtol=1e-9
    )
    if not ok:
        print(
            f"reduction: MISMATCH: got {once!r} then {again!r}, NumPy says {expected!r} "
            f"and {(1 + repeats) * expected!r}",
            file=sys.stderr,
        )
        return 1
    print(
        f"reduction: sum of {n} float32 = {once:.6f} ({blocks} blocks x {THREADS} threads, "
        f"shared-memory tree + atomic add), then {repeats} bound relaunches: matches NumPy"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
