"""``benchmarks/graphed.py``'s torch and CuPy steps: a kernel ``out = 0.5 * x + y`` on 65536
floats, then ``y = out * 0.999`` by the framework (BENCHMARKS.md's S4), µs per step for each
way of running it beside the framework alone and numba-cuda."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from numba import cuda

N = 1 << 16
BLOCKS = N // 256


def _axpy(out, a, x, y):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def torch_rows(
    timed: Callable[..., dict], guarded: Callable[..., dict], steps: int, trials: int
) -> dict:
    import torch

    import fastlaunch as fl

    fl_axpy, nb_axpy = fl.jit(_axpy), cuda.jit(_axpy)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(N, device="cuda", generator=g)
    y0 = torch.rand(N, device="cuda", generator=g)
    sync = torch.cuda.synchronize
    rows: dict[str, dict] = {}

    def loop(step: Callable[[Any, Any, Any], Any]) -> Callable[[int], None]:
        out, y = torch.empty_like(x), y0.clone()

        def run(n: int) -> None:
            for _ in range(n):
                step(out, x, y)

        return run

    def torch_alone(out: Any, x: Any, y: Any) -> None:
        torch.add(y, x, alpha=0.5, out=out)
        y.copy_(out * 0.999)

    def eager(out: Any, x: Any, y: Any) -> None:
        fl_axpy[BLOCKS, 256](out, 0.5, x, y)
        y.copy_(out * 0.999)

    def numba_step(out: Any, x: Any, y: Any) -> None:
        nb_axpy[BLOCKS, 256](out, 0.5, x, y)
        y.copy_(out * 0.999)

    rows["torch alone"] = guarded(lambda: timed(loop(torch_alone), sync, steps, trials))
    rows["numba-cuda + torch op"] = guarded(lambda: timed(loop(numba_step), sync, steps, trials))
    rows["fastlaunch eager + torch op"] = guarded(lambda: timed(loop(eager), sync, steps, trials))
    rows["fastlaunch.graphed (captured by torch)"] = guarded(
        lambda: timed(loop(fl.graphed(eager)), sync, steps, trials)
    )

    def by_hand() -> dict:
        graph, out, y = torch.cuda.CUDAGraph(), torch.empty_like(x), y0.clone()
        eager(out, x, y)
        with torch.cuda.graph(graph):  # fastlaunch follows torch's capture
            eager(out, x, y)

        def run(n: int) -> None:
            for _ in range(n):
                graph.replay()

        return timed(run, sync, steps, trials)

    rows["torch.cuda.graph by hand, replayed"] = guarded(by_hand)
    op = fl.torch_op(fl_axpy, mutates=["out"])

    def functional(x: Any, y: Any) -> Any:
        out = torch.empty_like(x)
        op[BLOCKS, 256](out, 0.5, x, y)
        return out * 0.999

    def torch_functional(x: Any, y: Any) -> Any:
        return torch.add(y, x, alpha=0.5) * 0.999

    for name, fn, mode in (
        ("torch.compile (torch_op), default", functional, None),
        ("torch.compile (torch_op), reduce-overhead", functional, "reduce-overhead"),
        ("torch alone, torch.compile reduce-overhead", torch_functional, "reduce-overhead"),
    ):
        compiled = torch.compile(fn, fullgraph=True, mode=mode)

        def run(n: int, compiled: Any = compiled) -> None:
            y = y0.clone()
            for _ in range(n):  # y updated in place, as the other paths do
                y.copy_(compiled(x, y))

        rows[name] = guarded(lambda run=run: timed(run, sync, steps, trials))
    return rows


def cupy_rows(
    timed: Callable[..., dict], guarded: Callable[..., dict], steps: int, trials: int
) -> dict:
    import cupy

    import fastlaunch as fl

    fl_axpy, nb_axpy = fl.jit(_axpy), cuda.jit(_axpy)
    x = cupy.random.rand(N, dtype=cupy.float32)
    y0 = cupy.random.rand(N, dtype=cupy.float32)

    def sync() -> None:
        cupy.cuda.Device().synchronize()

    rows: dict[str, dict] = {}

    def loop(step: Callable[[Any, Any, Any], Any]) -> Callable[[int], None]:
        out, y = cupy.empty_like(x), y0.copy()

        def run(n: int) -> None:
            for _ in range(n):
                step(out, x, y)

        return run

    def cupy_alone(out: Any, x: Any, y: Any) -> None:
        cupy.multiply(x, 0.5, out=out)
        out += y
        cupy.multiply(out, 0.999, out=y)

    def eager(out: Any, x: Any, y: Any) -> None:
        fl_axpy[BLOCKS, 256](out, 0.5, x, y)
        cupy.multiply(out, 0.999, out=y)

    def numba_step(out: Any, x: Any, y: Any) -> None:
        nb_axpy[BLOCKS, 256](out, 0.5, x, y)
        cupy.multiply(out, 0.999, out=y)

    rows["CuPy alone"] = guarded(lambda: timed(loop(cupy_alone), sync, steps, trials))
    rows["numba-cuda + CuPy op"] = guarded(lambda: timed(loop(numba_step), sync, steps, trials))
    rows["fastlaunch eager + CuPy op"] = guarded(lambda: timed(loop(eager), sync, steps, trials))

    def graphed() -> dict:
        step = fl.graphed(eager)
        with warnings.catch_warnings():
            # a step that could not be captured would time the eager path: an error instead
            warnings.simplefilter("error", fl.GraphCaptureWarning)
            measured = timed(loop(step), sync, steps, trials)
        if step.counters["captures"] != 1:
            raise RuntimeError(f"not captured once by CuPy: {step.counters}")
        return measured

    rows["fastlaunch.graphed (captured by CuPy)"] = guarded(graphed)

    def by_hand() -> dict:
        out, y = cupy.empty_like(x), y0.copy()
        eager(out, x, y)
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()  # fastlaunch follows CuPy's capture
            eager(out, x, y)
            graph = stream.end_capture()

        def run(n: int) -> None:
            for _ in range(n):
                graph.launch(stream)

        return timed(run, stream.synchronize, steps, trials)

    rows["CuPy begin_capture by hand, replayed"] = guarded(by_hand)
    return rows
