"""What a new ``cuda.stream()`` object costs a launch (issue 39), on the stand-in driver
(``tests/stand_in_driver/fake_cuda.c``, built and loaded when ``FASTLAUNCH_CUDA_DRIVER`` is
not set): a kernel registered by hand over five ``device_array`` arguments, launched inline
on one stream, and on a new ``streams.stream()`` object each call; with ``stream()`` and its
release alone. Prints µs per call (the minimum over ``--repeats`` of the mean of ``--loops``
calls) and the driver's stream queries per launch (``fake_stream_queries``: on a GPU each
costs ~0.1–0.5 µs that the stand-in does not show)."""

from __future__ import annotations

import ctypes
import os
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.stand_in import (  # noqa: E402
    best_microseconds,
    stand_in_context,
    timing_arguments,
)


def main() -> None:
    arguments = timing_arguments(loops=100_000, repeats=7)

    import numpy as np

    import fastlaunch as fl
    from fastlaunch import _core
    from fastlaunch.dispatcher import numba_type
    from fastlaunch.memory import streams

    assert fl.is_available(), _core.unavailable_reason()
    stand_in_context()
    fake = ctypes.CDLL(os.environ["FASTLAUNCH_CUDA_DRIVER"])
    queries = getattr(fake, "fake_stream_queries", None)  # absent from older stand-ins
    if queries is not None:
        queries.restype = ctypes.c_size_t

    namespace: dict = {}
    exec("def k(a0, a1, a2, a3, a4):\n    pass\n", namespace)
    kernel = fl.jit(namespace["k"])
    args = tuple(fl.device_array(4096, np.float32) for _ in range(5))
    fingerprint = _core.fingerprint(args)
    types = tuple(numba_type(d) for d in _core.describe(fingerprint))
    kernel._register(fingerprint, 90, types, _core.CompiledKernel(b"fake image", "fake_entry"))
    names = {"k": kernel, "a": args, "streams": streams, "s0": streams.stream()}
    cases = [
        ("stream() + release", "streams.stream()"),
        ("k[16, 256, s0](*a) (one stream)", "k[16, 256, s0](*a)"),
        ("k[16, 256, stream()](*a) (new stream)", "k[16, 256, streams.stream()](*a)"),
    ]
    print(f"{'case':40} {'us/call':>8} {'stream queries':>15}")
    for name, statement in cases:
        timer = timeit.Timer(statement, globals=names)
        best = best_microseconds(timer, arguments)
        asked = "-"
        if queries is not None:
            before = queries()
            timer.timeit(1000)
            asked = f"{(queries() - before) / 1000:.1f}"
        print(f"{name:40} {best:8.3f} {asked:>15}")


if __name__ == "__main__":
    main()
