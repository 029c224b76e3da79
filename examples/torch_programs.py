"""fastlaunch in a torch program, three ways, each checked against eager bit for bit:

1. ``fastlaunch.graphed``: a step with a kernel and torch operations, captured by torch;
2. ``torch.cuda.graph``: a kernel launched with no stream follows torch's capture;
3. ``torch.compile(fullgraph=True, mode="reduce-overhead")`` through ``fastlaunch.torch_op``.

    python examples/torch_programs.py
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

import fastlaunch as fl

SKIPPED = 77  # the exit code the example tests read as "skipped"

N = 1 << 16


@fl.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def skip(why: str) -> int:
    print(f"skipped: {why}", file=sys.stderr)
    return SKIPPED


def step(out, x, y):
    axpy[N // 256, 256](out, 0.5, x, y)
    y.copy_(out * 0.999)


def main() -> int:
    if not fl.is_available():
        return skip("no CUDA GPU here (`python -m fastlaunch info` says why)")
    try:
        import torch
    except ImportError:
        return skip("needs torch (pip install torch)")
    if not torch.cuda.is_available():
        return skip("torch was built without CUDA or sees no GPU")
    x = torch.rand(N, device="cuda")
    y = torch.rand(N, device="cuda")
    out = torch.empty_like(x)
    e_out, e_y = out.clone(), y.clone()

    graphed = fl.graphed(step)  # 1
    for _ in range(20):
        graphed(out, x, y)
        step(e_out, x, e_y)
    torch.cuda.synchronize()
    assert torch.equal(y, e_y) and graphed.counters["replays"] == 19, graphed.counters

    g = torch.cuda.CUDAGraph()  # 2
    with torch.cuda.graph(g):
        step(out, x, y)
    for _ in range(5):
        g.replay()
        step(e_out, x, e_y)
    torch.cuda.synchronize()
    assert torch.equal(y, e_y)

    op = fl.torch_op(axpy, mutates=["out"])  # 3

    def functional(x, y):
        result = torch.empty_like(x)
        op[N // 256, 256](result, 0.5, x, y)
        return result * 0.999

    compiled = torch.compile(functional, fullgraph=True, mode="reduce-overhead")
    for _ in range(5):
        got = compiled(x, y).clone()
        assert torch.equal(got, functional(x, y))
    host_x, host_y = x.cpu().numpy(), e_y.cpu().numpy()  # one more step, against NumPy
    step(out, x, e_y)
    expected = ((0.5 * host_x + host_y) * np.float32(0.999)).astype(np.float32)
    np.testing.assert_allclose(e_y.cpu().numpy(), expected, rtol=1e-6)
    print("torch programs: graphed, torch.cuda.graph and torch.compile agree with eager;")
    print("the step matches NumPy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
