"""Launches captured into a CUDA graph and replayed: the graph is recorded once with
torch's capture API (``torch.cuda.graph``), and each replay runs all its kernels with one
host call. fastlaunch launches on the capturing stream are captured like any other work.

Run: ``python examples/captured_graph.py``. Exits 0 when the result matches NumPy, 1 when
it does not, and 77 (skipped) without a GPU or without torch.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

import fastlaunch

SKIPPED = 77  # the exit code the example tests read as "skipped"
NO_GPU = "no CUDA GPU here (`python -m fastlaunch info` says why)"


@fastlaunch.jit
def axpy(y, a, x):
    i = cuda.grid(1)
    if i < y.size:
        y[i] += a * x[i]


@fastlaunch.jit
def scale(x, s):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= s


def step_numpy(x: np.ndarray, y: np.ndarray, a: float, s: float) -> None:
    """What one replay of the graph does, in NumPy."""
    y += a * x
    x *= s


def skip(why: str) -> int:
    print(f"skipped: {why}", file=sys.stderr)
    return SKIPPED


def main() -> int:
    if not fastlaunch.is_available():
        return skip(NO_GPU)
    try:
        import torch
    except ImportError:
        return skip("needs torch for its CUDA graph capture API (pip install torch)")
    if not torch.cuda.is_available():
        return skip("torch was built without CUDA or sees no GPU")

    n, threads, replays = 100_000, 256, 20
    a, s = 0.5, 0.9
    blocks = (n + threads - 1) // threads
    start_x = np.random.default_rng(0).random(n)
    x = torch.tensor(start_x, device="cuda")  # float64
    y = torch.zeros(n, dtype=torch.float64, device="cuda")

    # Compile both kernels before capturing: compiling (and loading the module) is not
    # something a capturing stream may do. Warm up on a side stream, as torch advises.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        axpy[blocks, threads, side](y, 0.0, x)
        scale[blocks, threads, side](x, 1.0)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        capturing = torch.cuda.current_stream()  # torch's capture stream
        axpy[blocks, threads, capturing](y, a, x)
        scale[blocks, threads, capturing](x, s)
    torch.cuda.synchronize()
    if torch.count_nonzero(y).item() != 0:
        print(
            "captured_graph: the capture ran the kernels instead of recording them",
            file=sys.stderr,
        )
        return 1

    for _ in range(replays):
        graph.replay()
    result_x, result_y = x.cpu().numpy(), y.cpu().numpy()

    expected_x, expected_y = start_x.copy(), np.zeros(n)
    for _ in range(replays):
        step_numpy(expected_x, expected_y, a, s)
    if not (np.allclose(result_x, expected_x) and np.allclose(result_y, expected_y)):
        print("captured_graph: MISMATCH against NumPy", file=sys.stderr)
        return 1
    print(
        f"captured_graph: 2 launches captured into a CUDA graph with torch.cuda.graph, "
        f"replayed {replays} times on {n} float64: matches NumPy"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
