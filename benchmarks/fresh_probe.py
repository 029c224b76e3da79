"""What a new torch tensor or CuPy array costs a launch's read of it, part by part, on a GPU:
the Python calls a fresh tensor's read makes (``is_neg``, as a bound method and through the
descriptor), a weak reference to it, and the arrays' own making, each timed alone.

    python3 benchmarks/fresh_probe.py

Prints µs per call, the minimum over 7 repeats of the mean of 20,000 calls."""

from __future__ import annotations

import timeit
import weakref


def best(statement, setup_globals: dict, number: int = 20_000) -> float:
    timer = timeit.Timer(statement, globals=setup_globals)
    return min(timer.repeat(7, number)) / number * 1e6


def main() -> None:
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
    for name, us in rows.items():
        print(f"{name:32} {us:7.3f} µs")


if __name__ == "__main__":
    main()
