#!/usr/bin/env python3
"""numba-cuda's higher-level calls: CUDA ufuncs, gufuncs, ``cuda.reduce`` and a kernel over
``cuda.random`` states, timed interleaved under numba-cuda, under fastlaunch installed, and
against CuPy's same work, in one process.

usage: python3 benchmarks/ufuncs.py [--out DIR] [--rounds 15] [--seconds 120] [--seed 0]
           [--libraries numba-cuda,fastlaunch,cupy,explicit] [--ops vectorize_device,...]

What is timed (µs per call, host time; the context synchronized, untimed, before each batch),
over 4096 float32 values unless said:

- ``vectorize_device``: ``add(da, db)`` of a ``vectorize(target="cuda")`` ufunc on two device
  arrays (a new device array back); CuPy ``ca + cb``.
- ``vectorize_out``: ``add(da, db, out=dout)``; CuPy ``cupy.add(ca, cb, out=cc)``.
- ``vectorize_scalar``: ``add(da, 2.0)``; CuPy ``ca + 2.0``.
- ``vectorize_broadcast``: ``add(d2d, row)``, a 64 x 64 array and a row of 64; CuPy the same.
- ``vectorize_host``: ``add(a, b)`` on host arrays (a host array back); ``explicit``: the same
  work spelled out under fastlaunch: two ``to_device``, a ``device_array``, the kernel,
  ``copy_to_host``.
- ``guvectorize_device``: a ``(n),(n)->()`` dot gufunc over 256 x 16 device arrays; CuPy
  ``(cm * cm).sum(1)``; ``explicit``: a ``@cuda.jit`` kernel doing the same work into a new
  ``device_array``, launched by fastlaunch installed.
- ``reduce_device``: ``cuda.reduce(lambda a, b: a + b)(da)`` (a host scalar back); CuPy
  ``float(ca.sum())``.
- ``reduce_res``: the same with ``res=`` a device array (nothing back); CuPy ``ca.sum()``.
- ``random_kernel``: a kernel drawing ``xoroshiro128p_uniform_float32`` from 4096
  ``create_xoroshiro128p_states`` into a float32 array; ``explicit``: a kernel of the same
  shape over two plain float32 arrays of the same size, launched by fastlaunch installed.

numba-cuda's rows run with fastlaunch uninstalled, fastlaunch's and ``explicit`` installed
(switched, untimed, before each batch). Each round runs every variant once, one batch each,
in an order shuffled per round; per variant the median, p10 and p90 over the rounds. Writes
DIR/ufuncs.md and DIR/ufuncs.json (``rows``: ``{"op", "library", "median_us", "p10_us",
"p90_us"}``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import _percentile, apply_numpy_shim  # noqa: E402
from benchmarks.memory import (  # noqa: E402
    Variant,
    interleaved_arguments,
    measured,
    run,
    write_results,
)

OPS = (
    "vectorize_device",
    "vectorize_out",
    "vectorize_scalar",
    "vectorize_broadcast",
    "vectorize_host",
    "guvectorize_device",
    "reduce_device",
    "reduce_res",
    "random_kernel",
)
LIBRARIES = ("numba-cuda", "fastlaunch", "cupy", "explicit")
N = 4096
BATCH = 100


def make_calls(np: Any, cuda: Any) -> dict[str, Any]:
    """The ufunc, gufunc, reduction and kernels, made with whatever ``numba.cuda.jit`` is now
    (numba-cuda's, or fastlaunch's when installed)."""
    from numba import float32, guvectorize, vectorize
    from numba.cuda.random import xoroshiro128p_uniform_float32

    @vectorize(["float32(float32, float32)"], target="cuda")
    def add(a, b):
        return a + b

    @guvectorize(["void(float32[:], float32[:], float32[:])"], "(n),(n)->()", target="cuda")
    def dot(a, b, out):
        total = float32(0)
        for i in range(a.shape[0]):
            total += a[i] * b[i]
        out[0] = total

    @cuda.jit
    def add_kernel(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    @cuda.jit
    def dot_kernel(a, b, out):
        row = cuda.grid(1)
        if row < out.size:
            total = float32(0)
            for i in range(a.shape[1]):
                total += a[row, i] * b[row, i]
            out[row] = total

    @cuda.jit
    def draw(states, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = xoroshiro128p_uniform_float32(states, i)

    @cuda.jit
    def draw_plain(states, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = states[i] * float32(0.5)

    return {
        "add": add,
        "dot": dot,
        "sum": cuda.reduce(lambda a, b: a + b),
        "add_kernel": add_kernel,
        "dot_kernel": dot_kernel,
        "draw": draw,
        "draw_plain": draw_plain,
    }


def numba_variants(library: str, np: Any, cuda: Any, installed: bool) -> list[Variant]:
    from numba.cuda.random import create_xoroshiro128p_states

    made = make_calls(np, cuda)
    add, dot, total, draw = made["add"], made["dot"], made["sum"], made["draw"]
    host = np.arange(N, dtype=np.float32)
    da, db, dout = cuda.to_device(host), cuda.to_device(host), cuda.device_array(N, np.float32)
    d2d = cuda.to_device(host.reshape(64, 64))
    row = cuda.to_device(host[:64].copy())
    dm = cuda.to_device(host.reshape(256, 16))
    dres = cuda.device_array(1, np.float32)
    states = create_xoroshiro128p_states(N, seed=1)
    drawn = cuda.device_array(N, np.float32)
    blocks = (N + 255) // 256
    calls: dict[str, Callable[[], Any]] = {
        "vectorize_device": lambda: add(da, db),
        "vectorize_out": lambda: add(da, db, out=dout),
        "vectorize_scalar": lambda: add(da, 2.0),
        "vectorize_broadcast": lambda: add(d2d, row),
        "vectorize_host": lambda: add(host, host),
        "guvectorize_device": lambda: dot(dm, dm),
        "reduce_device": lambda: total(da),
        "reduce_res": lambda: total(da, res=dres),
        "random_kernel": lambda: draw[blocks, 256](states, drawn),
    }
    return [Variant(op, 0, library, call, BATCH, installed) for op, call in calls.items()]


def explicit_variants(np: Any, cuda: Any) -> list[Variant]:
    made = make_calls(np, cuda)
    add_kernel, dot_kernel, draw_plain = made["add_kernel"], made["dot_kernel"], made["draw_plain"]
    host = np.arange(N, dtype=np.float32)
    dm = cuda.to_device(host.reshape(256, 16))
    plain_in, plain_out = cuda.to_device(host), cuda.device_array(N, np.float32)
    blocks = (N + 255) // 256

    def vectorize_host() -> Any:
        a, b = cuda.to_device(host), cuda.to_device(host)
        out = cuda.device_array(N, np.float32)
        add_kernel[blocks, 256](a, b, out)
        return out.copy_to_host()

    def guvectorize_device() -> Any:
        out = cuda.device_array(256, np.float32)
        dot_kernel[1, 256](dm, dm, out)
        return out

    calls: dict[str, Callable[[], Any]] = {
        "vectorize_host": vectorize_host,
        "guvectorize_device": guvectorize_device,
        "random_kernel": lambda: draw_plain[blocks, 256](plain_in, plain_out),
    }
    return [Variant(op, 0, "explicit", call, BATCH, True) for op, call in calls.items()]


def cupy_variants(np: Any) -> list[Variant]:
    import cupy

    host = np.arange(N, dtype=np.float32)
    ca, cb, cc = cupy.asarray(host), cupy.asarray(host), cupy.empty(N, np.float32)
    c2d, crow = cupy.asarray(host.reshape(64, 64)), cupy.asarray(host[:64])
    cm = cupy.asarray(host.reshape(256, 16))
    calls: dict[str, Callable[[], Any]] = {
        "vectorize_device": lambda: ca + cb,
        "vectorize_out": lambda: cupy.add(ca, cb, out=cc),
        "vectorize_scalar": lambda: ca + 2.0,
        "vectorize_broadcast": lambda: c2d + crow,
        "guvectorize_device": lambda: (cm * cm).sum(1),
        "reduce_device": lambda: float(ca.sum()),
        "reduce_res": lambda: ca.sum(),
    }
    return [Variant(op, 0, "cupy", call, BATCH, False) for op, call in calls.items()]


def build(libraries: set[str], ops: set[str]) -> list[Variant]:
    apply_numpy_shim()
    import numpy as np
    from numba import cuda

    import fastlaunch

    def installed(make: Callable[[], list[Variant]]) -> list[Variant]:
        fastlaunch.install()
        try:
            return make()
        finally:
            fastlaunch.uninstall()

    fastlaunch.uninstall()
    makers: dict[str, Callable[[], list[Variant]]] = {
        "numba-cuda": lambda: numba_variants("numba-cuda", np, cuda, False),
        "fastlaunch": lambda: installed(lambda: numba_variants("fastlaunch", np, cuda, True)),
        "cupy": lambda: cupy_variants(np),
        "explicit": lambda: installed(lambda: explicit_variants(np, cuda)),
    }
    variants = []
    for library in LIBRARIES:
        if library not in libraries:
            continue
        try:
            made = makers[library]()
        except Exception as error:  # a library missing here: reported, not fatal
            print(f"ufuncs.py: {library}: not measured ({type(error).__name__}: {error})")
            continue
        variants += [v for v in made if v.op in ops]
    return variants


def rows(variants: list[Variant]) -> list[dict[str, Any]]:
    out = []
    for v in sorted(variants, key=lambda v: (OPS.index(v.op), LIBRARIES.index(v.library))):
        us = sorted(s * 1e6 for s in v.seconds)
        out.append(
            {
                "op": v.op,
                "library": v.library,
                "median_us": round(_percentile(us, 50), 3),
                "p10_us": round(_percentile(us, 10), 3),
                "p90_us": round(_percentile(us, 90), 3),
            }
        )
    return out


def markdown(table: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    env = meta["environment"]
    present = [lib for lib in LIBRARIES if any(r["library"] == lib for r in table)]
    by_key = {(r["op"], r["library"]): r for r in table}
    lines = [
        "# numba-cuda's ufuncs, gufuncs, reductions and random kernels, interleaved",
        "",
        f"Measured {meta['measured']} with `python3 benchmarks/ufuncs.py {meta['args']}`: "
        f"{meta['rounds']} rounds.",
        "",
        f"- GPU: {env.get('gpus', '?')}; CPU: {env.get('cpu', '?')}",
        "- Libraries: " + ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items()),
        "",
        "µs per call, median (p10–p90) over the rounds; what each row calls: the docstring of "
        "`benchmarks/ufuncs.py`.",
        "",
        "| op | " + " | ".join(present) + " |",
        "|---|" + "--:|" * len(present),
    ]
    for op in OPS:
        cells = []
        for lib in present:
            r = by_key.get((op, lib))
            cells.append(
                "" if r is None else f"{r['median_us']:.1f} ({r['p10_us']:.1f}–{r['p90_us']:.1f})"
            )
        if any(cells):
            lines.append(f"| {op} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    args = interleaved_arguments(__doc__, LIBRARIES, OPS, seconds=120.0).parse_args()
    variants = build(set(args.libraries.split(",")), set(args.ops.split(",")))
    done = run(variants, args.rounds, args.seconds, args.seed)
    table = rows(variants)
    meta = measured(done)
    write_results(args.out, "ufuncs", table, meta, markdown(table, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
