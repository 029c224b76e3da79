"""What a new torch tensor or CuPy array costs a launch's read of it, part by part, on a GPU:
the Python calls a fresh tensor's read makes (``is_neg``, as a bound method and through the
descriptor), a weak reference to it, and the arrays' own making, each timed alone; then, per
source, the launch of ``memory.py``'s ``launch_new`` kernel over five arrays:

- ``reused``: the same five arrays every call;
- ``rotating``: over 2,000 sets of five made before the timing, one set after another (new
  objects to the launch, with no making or dropping in the timed loop);
- ``make5``: making the five arrays alone, and dropping them;
- ``make5+launch``: making them and launching over them (``memory.py``'s ``launch_new``);
- ``make5+launch kept``: making the five arrays, dropping them, and launching over the reused
  five: the launch of ``reused``, run between makings as ``make5+launch``'s is;
- ``share``: ``make5+launch - make5``, the row ``memory.py`` reports; ``kept share``:
  ``make5+launch kept - make5``.

``rotating - reused`` is what fastlaunch's read of new objects adds; ``kept share - reused`` what
a launch costs more between makings of arrays than in a loop of launches alone (caches, the
allocators), new objects or not; ``share - kept share``, what new objects add there.

    python3 benchmarks/fresh_probe.py

Prints µs per call, the minimum over 7 repeats of the mean of 20,000 calls."""

from __future__ import annotations

import sys
import timeit
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROTATING_SETS = 2_000


def best(statement, setup_globals: dict, number: int = 20_000) -> float:
    timer = timeit.Timer(statement, globals=setup_globals)
    return min(timer.repeat(7, number)) / number * 1e6


def best_of(function: Callable[[], None], number: int = 20_000) -> float:
    return min(timeit.repeat(function, repeat=7, number=number)) / number * 1e6


def call_parts() -> dict[str, float]:
    import torch

    t = torch.empty(4096, device="cuda")
    is_neg = torch.Tensor.is_neg
    g = {"t": t, "torch": torch, "is_neg": is_neg, "weakref": weakref}
    rows = {
        "torch.empty(4096, cuda)": best("torch.empty(4096, device='cuda')", g),
        "t.is_neg()": best("t.is_neg()", g),
        "torch.Tensor.is_neg(t)": best("is_neg(t)", g),
        "weakref.ref(t)": best("weakref.ref(t)", g),
        "t.data_ptr()": best("t.data_ptr()", g),
    }
    try:
        import cupy

        a = cupy.empty(4096, dtype=cupy.float32)
        g.update(cupy=cupy, a=a)
        rows["cupy.empty(4096)"] = best("cupy.empty(4096, dtype=cupy.float32)", g)
        rows["weakref.ref(cupy array)"] = best("weakref.ref(a)", g)
    except ImportError:
        pass
    return rows


def launch_parts(source: str, empty: Callable[[], Any], kernel: Any) -> dict[str, float]:
    """The four timings of the docstring for arrays from ``empty()``, and ``share``."""
    from memory import LAUNCH_BLOCK, LAUNCH_GRID

    grid, block = LAUNCH_GRID, LAUNCH_BLOCK
    kept = tuple(empty() for _ in range(5))
    sets = [tuple(empty() for _ in range(5)) for _ in range(ROTATING_SETS)]
    position = [0]

    def reused(a=kept[0], b=kept[1], c=kept[2], d=kept[3], e=kept[4]) -> None:
        kernel[grid, block](a, b, c, d, e)

    def rotating() -> None:
        i = position[0]
        position[0] = i + 1 if i + 1 < ROTATING_SETS else 0
        a, b, c, d, e = sets[i]
        kernel[grid, block](a, b, c, d, e)

    def rotating_alone() -> None:
        i = position[0]
        position[0] = i + 1 if i + 1 < ROTATING_SETS else 0
        _a, _b, _c, _d, _e = sets[i]

    def make5() -> None:
        _a, _b, _c, _d, _e = empty(), empty(), empty(), empty(), empty()

    def make5_launch() -> None:
        a, b, c, d, e = empty(), empty(), empty(), empty(), empty()
        kernel[grid, block](a, b, c, d, e)

    def make5_launch_kept(a=kept[0], b=kept[1], c=kept[2], d=kept[3], e=kept[4]) -> None:
        _a, _b, _c, _d, _e = empty(), empty(), empty(), empty(), empty()
        kernel[grid, block](a, b, c, d, e)

    timings = {
        "reused": best_of(reused),
        "rotating": best_of(rotating) - best_of(rotating_alone),
        "make5": best_of(make5),
        "make5+launch": best_of(make5_launch),
        "make5+launch kept": best_of(make5_launch_kept),
    }
    timings["share"] = timings["make5+launch"] - timings["make5"]
    timings["kept share"] = timings["make5+launch kept"] - timings["make5"]
    return {f"{source} {name}": us for name, us in timings.items()}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from memory import make_elementwise

    rows = call_parts()
    kernel = make_elementwise()
    import torch

    rows.update(launch_parts("torch", lambda: torch.empty(4096, device="cuda"), kernel))
    try:
        import cupy

        rows.update(launch_parts("cupy", lambda: cupy.empty(4096, dtype=cupy.float32), kernel))
    except ImportError:
        pass
    from numba import cuda

    import fastlaunch

    with fastlaunch.install():
        rows.update(launch_parts("numba", lambda: cuda.device_array(4096, dtype="float32"), kernel))
    torch.cuda.synchronize()
    for name, us in rows.items():
        print(f"{name:32} {us:7.3f} µs")


if __name__ == "__main__":
    main()
