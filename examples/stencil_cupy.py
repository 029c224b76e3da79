"""A 2-D five-point stencil (Jacobi smoothing steps) on CuPy arrays, on CuPy's stream.

Run: ``python examples/stencil_cupy.py``. Exits 0 when the result matches NumPy, 1 when it
does not, and 77 (skipped) without a GPU or without CuPy.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

import fastlaunch

SKIPPED = 77  # the exit code the example tests read as "skipped"
NO_GPU = "no CUDA GPU here (`python -m fastlaunch info` says why)"


@fastlaunch.jit
def jacobi_step(out, u):
    j, i = cuda.grid(2)  # x runs along a row: neighbouring threads read neighbouring columns
    rows, cols = u.shape
    if 0 < i < rows - 1 and 0 < j < cols - 1:
        out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
    elif i < rows and j < cols:
        out[i, j] = u[i, j]  # the boundary stays fixed


def jacobi_numpy(u: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        nxt = u.copy()
        nxt[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u = nxt
    return u


def skip(why: str) -> int:
    print(f"skipped: {why}", file=sys.stderr)
    return SKIPPED


def main() -> int:
    if not fastlaunch.is_available():
        return skip(NO_GPU)
    try:
        import cupy
    except ImportError:
        return skip("needs CuPy (pip install cupy-cuda13x or cupy-cuda12x)")

    rows, cols, steps = 513, 769, 50
    rng = np.random.default_rng(0)
    start = rng.random((rows, cols))
    u = cupy.asarray(start)
    out = cupy.empty_like(u)

    threads = (32, 8)
    blocks = ((cols + threads[0] - 1) // threads[0], (rows + threads[1] - 1) // threads[1])
    stream = cupy.cuda.get_current_stream()
    step = jacobi_step[blocks, threads, stream]  # the configured launch can be kept and reused
    for _ in range(steps):
        step(out, u)
        u, out = out, u

    result = cupy.asnumpy(u)  # waits for CuPy's current stream
    if not np.allclose(result, jacobi_numpy(start, steps), rtol=1e-12, atol=1e-12):
        print("stencil_cupy: MISMATCH against NumPy", file=sys.stderr)
        return 1
    print(
        f"stencil_cupy: {steps} five-point Jacobi steps on a {rows}x{cols} float64 CuPy "
        f"array ({blocks[0]}x{blocks[1]} blocks of {threads[0]}x{threads[1]}): matches NumPy"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
