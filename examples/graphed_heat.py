"""A 2-D heat solver whose step (two kernels) is run by ``fastlaunch.graphed``: the first
call runs eagerly, the second captures a CUDA graph, every later call replays it with the
swapped (ping-pong) buffers put in place; ``steps=2`` puts two steps in one graph.

Run: ``python examples/graphed_heat.py``. Exits 0 when the results match NumPy, 1 when
they do not, and 77 (skipped) without a GPU.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

import fastlaunch

SKIPPED = 77  # the exit code the example tests read as "skipped"
NO_GPU = "no CUDA GPU here (`python -m fastlaunch info` says why)"


@fastlaunch.jit
def diffuse(out, u, k):
    i, j = cuda.grid(2)
    n, m = u.shape
    if 0 < i < n - 1 and 0 < j < m - 1:
        out[i, j] = u[i, j] + k * (
            u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4 * u[i, j]
        )


@fastlaunch.jit
def hold_edges(out, u):
    i, j = cuda.grid(2)
    n, m = u.shape
    if i < n and j < m and (i == 0 or j == 0 or i == n - 1 or j == m - 1):
        out[i, j] = u[i, j]


N, K = 128, 0.2
BLOCK = (16, 16)
GRID = ((N + 15) // 16, (N + 15) // 16)


def step(u, v):
    diffuse[GRID, BLOCK](v, u, K)
    hold_edges[GRID, BLOCK](v, u)
    return v, u  # the next step's arguments: the buffers swap


def step_numpy(u: np.ndarray) -> np.ndarray:
    v = u.copy()
    v[1:-1, 1:-1] = u[1:-1, 1:-1] + K * (
        u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    )
    return v


def skip(why: str) -> int:
    print(f"skipped: {why}", file=sys.stderr)
    return SKIPPED


def main() -> int:
    if not fastlaunch.is_available():
        return skip(NO_GPU)

    steps = 200
    start = np.zeros((N, N))
    start[N // 2 - 8 : N // 2 + 8, N // 2 - 8 : N // 2 + 8] = 100.0
    start[0, :] = 50.0  # a hot edge, held

    one = fastlaunch.graphed(step)
    two = fastlaunch.graphed(step, steps=2)
    results = []
    for graphed_step, calls in ((one, steps), (two, steps // 2)):
        u, v = cuda.to_device(start), cuda.to_device(start)
        for _ in range(calls):
            u, v = graphed_step(u, v)
        fastlaunch.synchronize()
        results.append(u.copy_to_host())

    eager_u, eager_v = cuda.to_device(start), cuda.to_device(start)
    for _ in range(steps):
        eager_u, eager_v = step(eager_u, eager_v)
    fastlaunch.synchronize()
    eager = eager_u.copy_to_host()

    expected = start
    for _ in range(steps):
        expected = step_numpy(expected)
    ok = all(np.array_equal(r, eager) for r in results) and np.allclose(eager, expected)
    counters = one.counters
    # 2 captures: one graph per arrangement of the two buffers (u, v) and (v, u)
    ok = ok and counters["captures"] == 2 and counters["replays"] == steps - 1
    ok = ok and two.counters["replays"] == steps // 2 - 1
    if not ok:
        print(f"graphed_heat: MISMATCH against NumPy or eager runs ({counters})", file=sys.stderr)
        return 1
    print(
        f"graphed_heat: {steps} steps of a 2-kernel heat solver on {N}x{N} float64, graphed "
        f"({counters['captures']} captures, {counters['replays']} replays; and 2 steps per "
        "graph), bit-identical to eager launches: matches NumPy"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
