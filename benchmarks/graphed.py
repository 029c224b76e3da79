#!/usr/bin/env python3
"""Whole steps replayed from CUDA graphs (``fastlaunch.graphed``) against eager launches.

usage: python3 benchmarks/graphed.py --out DIR [--steps 2000] [--trials 7] [--quick]

Cases (float32, the same kernels for every path):

a. heat: a 2-kernel heat step on 128x128 (diffuse + hold edges), ping-pong buffers;
b. eight: an 8-kernel step on 4096-element arrays (same arrays every call);
c. loop: 1000 heat steps (ping-pong), timed as one loop.

Paths: eager fastlaunch; ``fastlaunch.graphed`` (1 step per graph, 2 steps per graph, and for
the loop 100 and 1000 steps per graph); numba-cuda (``cuda.jit``); and the floor: the same
work captured by hand with cuda.bindings (``cuStreamBeginCapture`` around fastlaunch
launches) and replayed with ``cuGraphLaunch`` from Python, with 1 step, 2 steps and (loop)
the whole loop per graph. A graph of 1 step replays without re-pointing anything (it is the
floor of ``graphed`` at 1 step per call, which re-points the swapped buffers on each call).

Per path: wall time per step (loop of N steps, then synchronise; median of trials) and host
time per step (the same loop before the synchronise). Writes ``graphed.md``, ``graphed.json``
and ``graphed.png`` to DIR.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numba import cuda

N = 128
BLOCK2 = (16, 16)
GRID2 = (N // 16, N // 16)
SMALL = 4096
THREADS = 256
BLOCKS = SMALL // THREADS


def diffuse(out, u, k):
    i, j = cuda.grid(2)
    n, m = u.shape
    if 0 < i < n - 1 and 0 < j < m - 1:
        out[i, j] = u[i, j] + k * (
            u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4 * u[i, j]
        )


def hold_edges(out, u):
    i, j = cuda.grid(2)
    n, m = u.shape
    if i < n and j < m and (i == 0 or j == 0 or i == n - 1 or j == m - 1):
        out[i, j] = u[i, j]


def axpy(out, a, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = out[i] * 0.5 + a * x[i]


def kernels(jit: Callable[..., Any]) -> dict[str, Any]:
    """The same Python kernels, compiled by ``jit`` (fastlaunch's or numba-cuda's)."""
    return {"diffuse": jit(diffuse), "hold_edges": jit(hold_edges), "axpy": jit(axpy)}


def make_steps(k: dict[str, Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    diffuse, hold_edges, axpy = k["diffuse"], k["hold_edges"], k["axpy"]
    coefficient = np.float32(0.2)
    scale = np.float32(0.25)

    def heat(u, v, stream=0):
        diffuse[GRID2, BLOCK2, stream](v, u, coefficient)
        hold_edges[GRID2, BLOCK2, stream](v, u)
        return v, u

    def eight(a, b, c, d, stream=0):
        for out, x in ((a, b), (b, c), (c, d), (d, a), (a, c), (b, d), (c, a), (d, b)):
            axpy[BLOCKS, THREADS, stream](out, scale, x)

    return heat, eight


def guarded(measure: Callable[[], dict]) -> dict:
    """One path's measurement, or the error that stopped it (the other paths go on)."""
    try:
        return measure()
    except Exception as error:  # report and go on
        print(f"graphed.py: {type(error).__name__}: {error}", file=sys.stderr)
        return {
            "wall_us": math.nan,
            "host_us": math.nan,
            "error": f"{type(error).__name__}: {error}",
        }


def timed(run_n: Callable[[int], None], sync: Callable[[], None], n: int, trials: int) -> dict:
    """Median wall and host µs per step of ``run_n(n)`` over ``trials`` runs."""
    run_n(max(4, n // 10))  # warm: compiles (the first call of a graphed step is eager)
    run_n(max(4, n // 10))  # and captures
    sync()
    walls, hosts = [], []
    for _ in range(trials):
        t0 = time.perf_counter()
        run_n(n)
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        walls.append((t2 - t0) / n * 1e6)
        hosts.append((t1 - t0) / n * 1e6)
    return {"wall_us": statistics.median(walls), "host_us": statistics.median(hosts)}


class HandGraph:
    """Work captured with cuda.bindings on a stream of its own, replayed by cuGraphLaunch."""

    def __init__(self, capture: Callable[[int], None]) -> None:
        from cuda.bindings import driver as cu

        self.cu = cu
        err, self.stream = cu.cuStreamCreate(0)
        self.check(err)
        handle = int(self.stream)
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        self.check(cu.cuStreamBeginCapture(self.stream, mode)[0])
        try:
            capture(handle)
        finally:
            err, self.graph = cu.cuStreamEndCapture(self.stream)
        self.check(err)
        err, self.exec = cu.cuGraphInstantiate(self.graph, 0)
        self.check(err)

    def check(self, err: Any) -> None:
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuda.bindings: {err}")

    def replayer(self) -> Callable[[int], None]:
        launch, exec_, stream = self.cu.cuGraphLaunch, self.exec, self.stream

        def run(n: int) -> None:
            for _ in range(n):
                launch(exec_, stream)

        return run

    def sync(self) -> None:
        self.check(self.cu.cuStreamSynchronize(self.stream)[0])


def bench(args: argparse.Namespace) -> dict:
    import fastlaunch as fl

    fl_heat, fl_eight = make_steps(kernels(fl.jit))
    nb_heat, nb_eight = make_steps(kernels(cuda.jit))
    sync = fl.synchronize
    steps, trials = args.steps, args.trials
    rng = np.random.default_rng(0)
    field = rng.random((N, N)).astype(np.float32)
    vectors = [rng.random(SMALL).astype(np.float32) for _ in range(4)]
    results: dict[str, dict] = {"heat": {}, "eight": {}, "loop": {}}

    def pair():
        return [cuda.to_device(field), cuda.to_device(field)]

    def four():
        return [cuda.to_device(v) for v in vectors]

    # -- (a) heat step, per step
    def loop_of(step: Callable[..., Any], per_call: int = 1) -> Callable[[int], None]:
        buffers = pair()

        def run(n: int) -> None:
            u, v = buffers
            for _ in range(n // per_call):
                u, v = step(u, v)
            buffers[:] = [u, v]

        return run

    heat, eight, loop_results = results["heat"], results["eight"], results["loop"]
    heat["fastlaunch eager"] = guarded(lambda: timed(loop_of(fl_heat), sync, steps, trials))
    heat["numba-cuda"] = guarded(lambda: timed(loop_of(nb_heat), sync, steps, trials))
    heat["graphed, 1 step/graph"] = guarded(
        lambda: timed(loop_of(fl.graphed(fl_heat)), sync, steps, trials)
    )
    heat["graphed, 2 steps/graph"] = guarded(
        lambda: timed(loop_of(fl.graphed(fl_heat, steps=2), 2), sync, steps, trials)
    )

    def hand_heat(per_graph: int, n: int, trials: int) -> dict:
        u, v = pair()

        def capture(stream: int) -> None:
            a, b = u, v
            for _ in range(per_graph):
                a, b = fl_heat(a, b, stream)

        hand = HandGraph(capture)
        replay = hand.replayer()
        return timed(lambda count: replay(max(1, count // per_graph)), hand.sync, n, trials)

    for per_graph in (1, 2):
        heat[f"hand-captured, {per_graph} step/graph"] = guarded(
            lambda per_graph=per_graph: hand_heat(per_graph, steps, trials)
        )

    # -- (b) eight kernels, per step (per kernel: divide by 8)
    def calls(step: Callable[..., Any], arrays: list[Any]) -> Callable[[int], None]:
        def run(n: int) -> None:
            for _ in range(n):
                step(*arrays)

        return run

    arrays, nb_arrays = four(), four()
    eight["fastlaunch eager"] = guarded(lambda: timed(calls(fl_eight, arrays), sync, steps, trials))
    eight["numba-cuda"] = guarded(lambda: timed(calls(nb_eight, nb_arrays), sync, steps, trials))
    eight["graphed"] = guarded(
        lambda: timed(calls(fl.graphed(fl_eight), arrays), sync, steps, trials)
    )

    def hand_eight() -> dict:
        hand = HandGraph(lambda stream: fl_eight(*arrays, stream))
        return timed(hand.replayer(), hand.sync, steps, trials)

    eight["hand-captured"] = guarded(hand_eight)

    # -- (c) a loop of 1000 heat steps, timed per loop (reported per step)
    loop = 1000
    loop_trials = max(3, trials)
    for name, step, per_call in (
        ("fastlaunch eager", fl_heat, 1),
        ("numba-cuda", nb_heat, 1),
        ("graphed, 2 steps/graph", fl.graphed(fl_heat, steps=2), 2),
        ("graphed, 100 steps/graph", fl.graphed(fl_heat, steps=100), 100),
        ("graphed, 1000 steps/graph", fl.graphed(fl_heat, steps=1000), 1000),
    ):
        run = loop_of(step, per_call)
        loop_results[name] = guarded(
            lambda run=run: timed(lambda n: run(loop), sync, loop, loop_trials)
        )
    loop_results["hand-captured, 1000 steps/graph"] = guarded(
        lambda: hand_heat(loop, loop, loop_trials)
    )
    # -- (d) and (e): a kernel and a framework operation per step (graphed_frameworks.py)
    for case, rows in (("torch", "torch_rows"), ("cupy", "cupy_rows")):
        try:
            import graphed_frameworks

            results[case] = getattr(graphed_frameworks, rows)(timed, guarded, steps, trials)
        except ImportError as error:
            results[case] = {
                "not measured": {"wall_us": math.nan, "host_us": math.nan, "error": str(error)}
            }
    return results


def targets(results: dict) -> list[str]:
    try:
        return _targets(results)
    except Exception as error:  # a path missing: the table still says what was measured
        return [f"not computed ({type(error).__name__}: {error})"]


def _targets(results: dict) -> list[str]:
    heat, eight, loop = results["heat"], results["eight"], results["loop"]
    lines = []
    eager = heat["fastlaunch eager"]["wall_us"]
    for k in (1, 2):
        graphed = heat[f"graphed, {k} step{'s' if k > 1 else ''}/graph"]["wall_us"]
        floor = heat[f"hand-captured, {k} step/graph"]["wall_us"]
        lines.append(
            f"(a) heat, {k} step(s) per graph: eager / graphed = {eager / graphed:.2f}x "
            f"(target >= 3); graphed / hand-captured = {graphed / floor:.2f}x (target <= 1.25)"
        )
    per_kernel = eight["graphed"]["host_us"] / 8
    lines.append(f"(b) eight: graphed host time per kernel = {per_kernel:.3f} us (target <= 0.4)")
    best_loop = min(v["wall_us"] for k, v in loop.items() if k.startswith("graphed"))
    hand_loop = loop["hand-captured, 1000 steps/graph"]["wall_us"]
    lines.append(
        f"(c) loop: best graphed / hand-captured = {best_loop / hand_loop:.2f}x (target <= 1.2)"
    )
    return lines


def write(results: dict, out: Path, environment: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "graphed.json").write_text(json.dumps({"env": environment, **results}, indent=1))
    md = ["# fastlaunch.graphed: µs per step (median)", ""]
    md += [f"- {k}: {v}" for k, v in environment.items()] + [""]
    titles = {
        "heat": "(a) 2-kernel heat step, 128x128 float32, ping-pong",
        "eight": "(b) 8-kernel step, 4096 float32 (host µs per kernel = host / 8)",
        "loop": "(c) 1000 heat steps (per step)",
        "torch": "(d) torch step: axpy kernel, then y.copy_(out * 0.999), 65536 float32",
        "cupy": "(e) CuPy step: axpy kernel, then y = out * 0.999, 65536 float32",
    }
    for case, title in titles.items():
        if case not in results:
            continue
        md += [f"## {title}", "", "| path | wall µs/step | host µs/step |", "|---|--:|--:|"]
        for name, m in results[case].items():
            note = f" ({m['error']})" if "error" in m else ""
            md.append(f"| {name}{note} | {m['wall_us']:.2f} | {m['host_us']:.2f} |")
        md.append("")
    md += ["## targets (issue 17)", ""] + [f"- {line}" for line in targets(results)]
    (out / "graphed.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as error:
        print(f"graphed.py: no chart ({error})")
        return
    cases = {case: title for case, title in titles.items() if case in results}
    fig, axes = plt.subplots(1, len(cases), figsize=(5.5 * len(cases), 5))
    for ax, (case, title) in zip(axes, cases.items(), strict=True):
        names = list(results[case])
        walls = [results[case][n]["wall_us"] for n in names]
        hosts = [results[case][n]["host_us"] for n in names]
        y = np.arange(len(names))
        ax.barh(y - 0.2, walls, 0.4, label="wall")
        ax.barh(y + 0.2, hosts, 0.4, label="host")
        ax.set_yticks(y, names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("µs per step")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "graphed.png", dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="200 steps, 3 trials")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.trials = 200, 3
    import fastlaunch as fl

    if not fl.is_available():
        print("graphed.py: no CUDA GPU (python -m fastlaunch info says why)", file=sys.stderr)
        return 77
    gpu = fl.gpus[0]
    environment = {
        "gpu": gpu.name,
        "driver": fl.driver_version(),
        "fastlaunch": fl.__version__,
        "python": sys.version.split()[0],
        "steps": args.steps,
        "trials": args.trials,
    }
    results = bench(args)
    write(results, args.out, environment)
    return 0


if __name__ == "__main__":
    sys.exit(main())
