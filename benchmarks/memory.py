#!/usr/bin/env python3
"""Around the launch: numba-cuda's memory API, timed interleaved against fastlaunch's, CuPy's,
torch's and the driver's (through cuda.bindings), in one process.

usage: python3 benchmarks/memory.py [--out DIR] [--rounds 15] [--seconds 150] [--seed 0]
           [--libraries numba-cuda,fastlaunch,cupy,torch,driver,driver-own-pool,cupy-rawkernel]
           [--ops to_device,...]

What is timed (µs per call, host time; the context synchronized, untimed, before each batch):

- ``to_device``: a host NumPy array (32 KiB and 2 MiB of float64) to a new device array:
  ``cuda.to_device(a)``; CuPy ``asarray``; torch ``from_numpy(a).cuda()``; the driver
  ``cuMemAlloc`` + ``cuMemcpyHtoD`` + ``cuMemFree``. fastlaunch may return once the host bytes
  are staged (the copy runs on, ordered before every later use).
- ``device_array``: ``cuda.device_array(n)``; ``cupy.empty``; ``torch.empty``; the driver
  ``cuMemAllocAsync`` + ``cuMemFreeAsync`` (the device's current pool, which CuPy's and
  torch's stream-ordered allocators may share); ``driver-own-pool``: the same from a pool of
  one's own (``cuMemAllocFromPoolAsync``, what fastlaunch allocates from).
- ``copy_to_host``: ``d.copy_to_host()`` (a new host array); CuPy ``get()``; torch ``cpu()``;
  the driver ``cuMemcpyDtoH`` into an existing host buffer.
- ``stream``: ``cuda.stream()`` (and its release); ``cupy.cuda.Stream()``;
  ``torch.cuda.Stream()``; the driver ``cuStreamCreate`` + ``cuStreamDestroy``.
- ``slice``: ``d[1:-1]``; the same view of a CuPy array and a torch tensor.
- ``synchronize``: ``cuda.synchronize()``; ``cupy.cuda.Device().synchronize()``;
  ``torch.cuda.synchronize()``; the driver ``cuCtxSynchronize`` called from Python.
- ``tutorial_call``: a call shaped like numba-examples' Black-Scholes on 4096 float64 values:
  a stream, two ``device_array_like``, three ``to_device``, the kernel, two ``copy_to_host``,
  ``synchronize``. numba-cuda: its own memory API and kernel; fastlaunch: the same source with
  ``fastlaunch.install()``; cupy: CuPy's memory API (``asarray``, ``empty_like``, ``get``) with
  the fastlaunch kernel.
- ``host_args_call``: the same kernel called on the five host NumPy arrays (numba-cuda copies
  each in, then back): numba-cuda's kernel, and fastlaunch's.
- ``launch_new``: the cost fresh arrays add to a launch: "make five float32[4096] arrays, then
  launch one kernel over them" minus "make the five arrays alone" (see Differences below);
  both drop the arrays at the end, so what the launch adds to their free is in the share.
  The kernel: ``out[i] = a[i] + b[i] * c[i] - d[i]`` over the five arrays, grid 16 x block
  256. ``library`` is the arrays' source: ``numba-cuda``, ``cuda.device_array`` under
  ``fastlaunch.install()``; ``cupy``, ``cupy.empty``; ``torch``, ``torch.empty(...,
  device="cuda")``; those three launched by the same fastlaunch kernel, installed (so only the
  arrays' source differs); ``cupy-rawkernel``: ``cupy.empty`` arrays launched by a
  ``cupy.RawKernel`` of the same work in CUDA C (``k((16,), (256,), (a, b, c, d, e, n))``).
- ``launch_reused``: the same launch over five arrays made once and reused: the launch alone,
  the same four libraries.
- ``launch_between``: the launch of ``launch_reused`` run between makings of arrays: "make five
  arrays, then launch over the five reused ones" minus "make the five arrays alone". A launch
  amid other work finds less of itself in the caches than one in a loop of launches alone;
  ``launch_new - launch_between`` is what the new arrays add, ``launch_between -
  launch_reused`` what the making around it costs the launch either way.
- ``stream_new``: the cost a new stream adds to a launch: the launch on a new ``cuda.stream()``
  per call (installed: fastlaunch's pooled numba streams) minus the same launch on one reused
  ``cuda.stream()``, both over reused numba arrays (library ``numba-cuda``, installed).

- ``cai_read_fresh_cupy``, ``cai_read_fresh_torch``: another library reading a just-made array
  through ``__cuda_array_interface__``: a new ``cuda.to_device`` of 32 KiB of float32 (8192
  values) and then ``cupy.asarray(d)`` or ``torch.as_tensor(d, device="cuda")`` of it, the pair
  timed together (library ``numba-cuda``: plain; ``fastlaunch``: installed, where the read first
  waits on the host for the legacy work pending since the last read: the staged copy).
- ``cai_read_just_made_cupy``, ``cai_read_just_made_torch``: the read alone, of the just-made
  array: the pair minus ``cuda.to_device`` alone (a difference, below).
- ``cai_read_old_cupy``, ``cai_read_old_torch``: the same read, repeated, of one array made and
  synchronized when the rows were built (each batch's untimed warm-up read comes after the
  other variants' work, so the timed reads find nothing pending).
  The six rows are left out (said so) where CuPy or torch is missing.

Differences (``launch_new``, ``launch_between``, ``stream_new``, ``cai_read_just_made_*``):
the two halves are two variants, each timed in every round like any other (their own
batches, in the shuffled order; ``launch_new`` and ``launch_between`` share the arrays
alone, one variant subtracted from both). The row's median is
the median of the whole minus the median of the half subtracted (each median robust to slow
rounds on its own); its p10 and p90 are those of the per-round differences (whole minus half
of the same round), so a round slow for both cancels out. Being of different statistics, the
median may fall outside p10-p90 when the halves vary a lot: read ``whole_median_us`` and
``subtracted_median_us`` (in the JSON) beside it.

``--steps N`` also times the Black-Scholes-shaped call step by step under
``fastlaunch.install()`` (DIR/memory-steps.md): where its time goes.

numba-cuda's rows run with fastlaunch uninstalled and fastlaunch's with it installed (switched,
untimed, before each batch), so neither borrows the other's code; the fresh-object rows
(``launch_*``, ``stream_new``) name the arrays' source, and all but ``cupy-rawkernel`` run
installed. Each round runs every variant once, one batch each, in an order shuffled per
round; per variant the median, p10 and p90 over the rounds. Writes DIR/memory.md and
DIR/memory.json (``rows``: ``{"op", "bytes", "library", "median_us", "p10_us", "p90_us"}``,
and for a difference ``"whole_median_us"`` and ``"subtracted_median_us"``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import _percentile, apply_numpy_shim  # noqa: E402
from benchmarks.run import environment  # noqa: E402

SMALL, LARGE = 32 * 1024, 2 * 1024 * 1024
OPS = (
    "to_device",
    "device_array",
    "copy_to_host",
    "stream",
    "slice",
    "synchronize",
    "tutorial_call",
    "host_args_call",
    "launch_new",
    "launch_reused",
    "launch_between",
    "stream_new",
    "cai_read_fresh_cupy",
    "cai_read_just_made_cupy",
    "cai_read_old_cupy",
    "cai_read_fresh_torch",
    "cai_read_just_made_torch",
    "cai_read_old_torch",
)
LIBRARIES = (
    "numba-cuda",
    "fastlaunch",
    "cupy",
    "torch",
    "driver",
    "driver-own-pool",
    "cupy-rawkernel",
)
#: Elements of the Black-Scholes-shaped call (numba-examples' size is larger; a tutorial's).
OPTIONS = 4096
#: The fresh-object rows' arrays (float32) and launch: one thread per element.
LAUNCH_ELEMENTS, LAUNCH_GRID, LAUNCH_BLOCK = 4096, 16, 256


@dataclass
class Variant:
    op: str
    nbytes: int
    library: str
    call: Callable[[], Any]
    #: calls per timed batch: enough to outlast the timer's resolution, few for slow calls
    batch: int
    installed: bool
    seconds: list[float] = field(default_factory=list)
    #: a variant timed in the same rounds whose time this one's row subtracts (a difference:
    #: the share of the call that the two do not have in common)
    minus: Variant | None = None
    #: timed only to be another variant's ``minus``: no row of its own
    subtracted: bool = False


def difference(
    op: str,
    nbytes: int,
    library: str,
    whole: Callable[[], Any],
    part: Callable[[], Any],
    batch: int,
    installed: bool,
) -> list[Variant]:
    """A row of ``whole`` minus ``part``: two variants, each timed in every round like any
    other, so both see the same spells of the machine."""
    subtracted = Variant(op, nbytes, library, part, batch, installed, subtracted=True)
    return [Variant(op, nbytes, library, whole, batch, installed, minus=subtracted), subtracted]


def black_scholes_source() -> str:
    """numba-examples' Black-Scholes kernel, as a tutorial writes it."""
    return """
import math
from numba import cuda

RSQRT2PI = 0.39894228040143267793994605993438
A1, A2, A3 = 0.31938153, -0.356563782, 1.781477937
A4, A5 = -1.821255978, 1.330274429

def cnd(d):
    k = 1.0 / (1.0 + 0.2316419 * math.fabs(d))
    ret = RSQRT2PI * math.exp(-0.5 * d * d) * (
        k * (A1 + k * (A2 + k * (A3 + k * (A4 + k * A5)))))
    if d > 0:
        ret = 1.0 - ret
    return ret

def black_scholes(call, put, price, strike, years, riskfree, volatility):
    i = cuda.grid(1)
    if i >= price.shape[0]:
        return
    s, x, t = price[i], strike[i], years[i]
    sqrt_t = math.sqrt(t)
    d1 = (math.log(s / x) + (riskfree + 0.5 * volatility * volatility) * t) / (
        volatility * sqrt_t)
    d2 = d1 - volatility * sqrt_t
    cnd1 = cnd_device(d1)
    cnd2 = cnd_device(d2)
    expRT = math.exp(-1.0 * riskfree * t)
    call[i] = s * cnd1 - x * expRT * cnd2
    put[i] = x * expRT * (1.0 - cnd2) - s * (1.0 - cnd1)
"""


def make_kernels() -> tuple[Any, Any]:
    """The Black-Scholes kernel compiled by numba-cuda and by fastlaunch."""
    from numba.cuda.decorators import jit as numba_jit

    import fastlaunch

    namespace: dict[str, Any] = {}
    exec(black_scholes_source(), namespace)
    namespace["cnd_device"] = numba_jit(device=True)(namespace["cnd"])
    return numba_jit(namespace["black_scholes"]), fastlaunch.jit(namespace["black_scholes"])


def elementwise_source() -> str:
    """The fresh-object rows' kernel: trivial work over five float32 arrays, so the launch,
    not the GPU, is what is timed."""
    return """
from numba import cuda

def elementwise(out, a, b, c, d):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] + b[i] * c[i] - d[i]
"""


#: ``elementwise_source``'s kernel in CUDA C, for ``cupy.RawKernel`` (``n``: the elements,
#: which numba's kernel reads from the array's shape).
ELEMENTWISE_C = r"""
extern "C" __global__ void elementwise(
    float* out, const float* a, const float* b, const float* c, const float* d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a[i] + b[i] * c[i] - d[i];
    }
}
"""


def make_elementwise() -> Any:
    """``elementwise_source``'s kernel compiled by fastlaunch: one kernel object for every
    array source, so the rows differ only in the arrays."""
    import fastlaunch

    namespace: dict[str, Any] = {}
    exec(elementwise_source(), namespace)
    return fastlaunch.jit(namespace["elementwise"])


def launch_variants(
    library: str, empty: Callable[[], Any], kernel: Any, installed: bool, rawkernel: bool = False
) -> list[Variant]:
    """``launch_new``, ``launch_between`` and ``launch_reused`` over arrays from ``empty()``
    (one new float32 array of ``LAUNCH_ELEMENTS``): ``kernel`` is the fastlaunch kernel, or
    with ``rawkernel`` a ``cupy.RawKernel`` of ``ELEMENTWISE_C``. The launch is written out in
    each function, not called through a helper, so no row pays a Python call the others do
    not."""
    import numpy as np

    nbytes = LAUNCH_ELEMENTS * 4
    grid, block = LAUNCH_GRID, LAUNCH_BLOCK
    grid1, block1, n = (LAUNCH_GRID,), (LAUNCH_BLOCK,), np.int32(LAUNCH_ELEMENTS)
    kept = tuple(empty() for _ in range(5))

    # the five arrays live together until the function returns, in both halves alike (the
    # same statement; the names unused here), so the pool sees the same allocations and frees
    # with and without the launch
    def arrays_alone() -> None:
        _a, _b, _c, _d, _e = empty(), empty(), empty(), empty(), empty()

    if rawkernel:

        def launch_new() -> None:
            a, b, c, d, e = empty(), empty(), empty(), empty(), empty()
            kernel(grid1, block1, (a, b, c, d, e, n))

        def launch_reused(a=kept[0], b=kept[1], c=kept[2], d=kept[3], e=kept[4]) -> None:
            kernel(grid1, block1, (a, b, c, d, e, n))

        def launch_between(a=kept[0], b=kept[1], c=kept[2], d=kept[3], e=kept[4]) -> None:
            _a, _b, _c, _d, _e = empty(), empty(), empty(), empty(), empty()
            kernel(grid1, block1, (a, b, c, d, e, n))

    else:

        def launch_new() -> None:
            a, b, c, d, e = empty(), empty(), empty(), empty(), empty()
            kernel[grid, block](a, b, c, d, e)

        def launch_reused(a=kept[0], b=kept[1], c=kept[2], d=kept[3], e=kept[4]) -> None:
            kernel[grid, block](a, b, c, d, e)

        def launch_between(a=kept[0], b=kept[1], c=kept[2], d=kept[3], e=kept[4]) -> None:
            _a, _b, _c, _d, _e = empty(), empty(), empty(), empty(), empty()
            kernel[grid, block](a, b, c, d, e)

    # one `arrays_alone` variant is subtracted from both differences
    new_rows = difference("launch_new", nbytes, library, launch_new, arrays_alone, 100, installed)
    alone = new_rows[1]
    between = Variant(
        "launch_between", nbytes, library, launch_between, 100, installed, minus=alone
    )
    return [
        *new_rows,
        between,
        Variant("launch_reused", nbytes, library, launch_reused, 200, installed),
    ]


def stream_variants(cuda: Any, kernel: Any, np: Any) -> list[Variant]:
    """``stream_new``: the fastlaunch kernel on a new ``cuda.stream()`` per call minus on one
    reused stream, over reused numba arrays. Made under ``fastlaunch.install()`` (the arrays
    and the reused stream are then fastlaunch's, as the rows' new streams are)."""
    nbytes = LAUNCH_ELEMENTS * 4
    grid, block = LAUNCH_GRID, LAUNCH_BLOCK
    a0, b0, c0, d0, e0 = (cuda.device_array(LAUNCH_ELEMENTS, dtype=np.float32) for _ in range(5))
    kept_stream = cuda.stream()

    def stream_new(a=a0, b=b0, c=c0, d=d0, e=e0) -> None:
        stream = cuda.stream()  # back in the pool when collected, at the return
        kernel[grid, block, stream](a, b, c, d, e)

    def one_stream(a=a0, b=b0, c=c0, d=d0, e=e0, stream=kept_stream) -> None:
        kernel[grid, block, stream](a, b, c, d, e)

    return difference("stream_new", nbytes, "numba-cuda", stream_new, one_stream, 100, True)


def numba_launch_variants(cuda: Any, kernel: Any, np: Any) -> list[Variant]:
    """The fresh-object rows over numba arrays; made under ``fastlaunch.install()``, so
    ``cuda.device_array`` and ``cuda.stream`` are fastlaunch's here and when timed."""
    return [
        *launch_variants(
            "numba-cuda",
            lambda: cuda.device_array(LAUNCH_ELEMENTS, dtype=np.float32),
            kernel,
            True,
        ),
        *stream_variants(cuda, kernel, np),
    ]


def cupy_launch_variants(kernel: Any) -> list[Variant]:
    import cupy

    return launch_variants(
        "cupy", lambda: cupy.empty(LAUNCH_ELEMENTS, dtype=cupy.float32), kernel, True
    )


def torch_launch_variants(kernel: Any) -> list[Variant]:
    import torch

    return launch_variants(
        "torch",
        lambda: torch.empty(LAUNCH_ELEMENTS, dtype=torch.float32, device="cuda"),
        kernel,
        True,
    )


def cupy_rawkernel_variants() -> list[Variant]:
    import cupy

    kernel = cupy.RawKernel(ELEMENTWISE_C, "elementwise")
    kernel.compile()  # compiled here, not in a round's warm-up call
    return launch_variants(
        "cupy-rawkernel",
        lambda: cupy.empty(LAUNCH_ELEMENTS, dtype=cupy.float32),
        kernel,
        False,
        rawkernel=True,
    )


def tutorial_inputs(np: Any) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(0)
    price = rng.uniform(5.0, 30.0, OPTIONS)
    strike = rng.uniform(1.0, 100.0, OPTIONS)
    years = rng.uniform(0.25, 10.0, OPTIONS)
    return price, strike, years


def numba_tutorial_call(cuda: Any, kernel: Any, np: Any) -> Callable[[], tuple[Any, Any]]:
    """The Black-Scholes-shaped call with numba-cuda's memory API (`cuda` is numba.cuda)."""
    price, strike, years = tutorial_inputs(np)
    blocks, threads = math.ceil(OPTIONS / 256), 256

    def tutorial_call() -> tuple[Any, Any]:
        stream = cuda.stream()
        d_price = cuda.to_device(price, stream)
        d_strike = cuda.to_device(strike, stream)
        d_years = cuda.to_device(years, stream)
        d_call = cuda.device_array_like(price, stream)
        d_put = cuda.device_array_like(price, stream)
        kernel[blocks, threads, stream](d_call, d_put, d_price, d_strike, d_years, 0.02, 0.30)
        call = d_call.copy_to_host(stream=stream)
        put = d_put.copy_to_host(stream=stream)
        stream.synchronize()
        return call, put

    return tutorial_call


def numba_api_variants(library: str, cuda: Any, kernel: Any, np: Any, sizes) -> list[Variant]:
    """The numba-cuda memory API as a tutorial uses it: `cuda` is numba.cuda, with
    fastlaunch installed (library "fastlaunch") or not ("numba-cuda")."""
    installed = library == "fastlaunch"
    out = []
    for nbytes in sizes:
        host = np.arange(nbytes // 8, dtype=np.float64)
        device = cuda.to_device(host)
        small = nbytes == SMALL
        out += [
            Variant(
                "to_device",
                nbytes,
                library,
                lambda h=host: cuda.to_device(h),
                200 if small else 10,
                installed,
            ),
            Variant(
                "device_array",
                nbytes,
                library,
                lambda n=host.size: cuda.device_array(n),
                200,
                installed,
            ),
            Variant(
                "copy_to_host",
                nbytes,
                library,
                lambda d=device: d.copy_to_host(),
                200 if small else 10,
                installed,
            ),
        ]
    sliced = cuda.to_device(np.arange(SMALL // 8, dtype=np.float64))
    out += [
        Variant("stream", 0, library, lambda: cuda.stream(), 200, installed),
        Variant("slice", 0, library, lambda d=sliced: d[1:-1], 500, installed),
        Variant("synchronize", 0, library, cuda.synchronize, 500, installed),
    ]
    price, strike, years = tutorial_inputs(np)
    blocks, threads = math.ceil(OPTIONS / 256), 256
    tutorial_call = numba_tutorial_call(cuda, kernel, np)
    call_out, put_out = np.empty(OPTIONS), np.empty(OPTIONS)

    def host_args_call() -> None:
        kernel[blocks, threads](call_out, put_out, price, strike, years, 0.02, 0.30)

    out += [
        Variant("tutorial_call", OPTIONS * 8, library, tutorial_call, 20, installed),
        Variant("host_args_call", OPTIONS * 8, library, host_args_call, 20, installed),
    ]
    return out


def interface_reader(consumer: str) -> Callable[[Any], Any]:
    """How ``consumer`` (cupy or torch) takes a numba array through
    ``__cuda_array_interface__``; raises ImportError where it is missing."""
    if consumer == "cupy":
        import cupy

        return cupy.asarray
    import torch

    if not torch.cuda.is_available():
        raise ImportError("torch without CUDA")

    def as_tensor(d: Any) -> Any:
        return torch.as_tensor(d, device="cuda")

    return as_tensor


def cai_variants(library: str, cuda: Any, np: Any, consumer: str) -> list[Variant]:
    """``cai_read_fresh_*``, ``cai_read_just_made_*`` and ``cai_read_old_*`` through
    ``consumer``: `cuda` is numba.cuda, with fastlaunch installed (library "fastlaunch") or not
    ("numba-cuda"). None where the consumer is missing here (said so)."""
    try:
        read = interface_reader(consumer)
    except ImportError as error:
        print(f"memory.py: {library}: cai_read_*_{consumer} not measured ({error})")
        return []
    is_installed = library == "fastlaunch"
    host = np.arange(SMALL // 4, dtype=np.float32)
    old = cuda.to_device(host)
    read(old)  # the consumer's first use (torch's CUDA start-up) here, not in a round
    cuda.synchronize()

    def fresh(h: Any = host) -> None:
        read(cuda.to_device(h))

    def to_device_alone(h: Any = host) -> None:
        cuda.to_device(h)

    def read_old(d: Any = old) -> None:
        read(d)

    return [
        Variant(f"cai_read_fresh_{consumer}", SMALL, library, fresh, 200, is_installed),
        *difference(
            f"cai_read_just_made_{consumer}",
            SMALL,
            library,
            fresh,
            to_device_alone,
            200,
            is_installed,
        ),
        Variant(f"cai_read_old_{consumer}", SMALL, library, read_old, 500, is_installed),
    ]


def cupy_variants(fast_kernel: Any, np: Any, sizes) -> list[Variant]:
    import cupy

    out = []
    for nbytes in sizes:
        host = np.arange(nbytes // 8, dtype=np.float64)
        device = cupy.asarray(host)
        small = nbytes == SMALL
        out += [
            Variant(
                "to_device",
                nbytes,
                "cupy",
                lambda h=host: cupy.asarray(h),
                200 if small else 10,
                False,
            ),
            Variant(
                "device_array",
                nbytes,
                "cupy",
                lambda n=host.size: cupy.empty(n, dtype=cupy.float64),
                200,
                False,
            ),
            Variant(
                "copy_to_host",
                nbytes,
                "cupy",
                lambda d=device: d.get(),
                200 if small else 10,
                False,
            ),
        ]
    sliced = cupy.arange(SMALL // 8, dtype=cupy.float64)
    device_handle = cupy.cuda.Device()
    out += [
        Variant("stream", 0, "cupy", lambda: cupy.cuda.Stream(), 200, False),
        Variant("slice", 0, "cupy", lambda d=sliced: d[1:-1], 500, False),
        Variant("synchronize", 0, "cupy", device_handle.synchronize, 500, False),
    ]
    price, strike, years = tutorial_inputs(np)
    blocks, threads = math.ceil(OPTIONS / 256), 256

    def tutorial_call() -> tuple[Any, Any]:
        stream = cupy.cuda.Stream()
        with stream:
            d_price = cupy.asarray(price)
            d_strike = cupy.asarray(strike)
            d_years = cupy.asarray(years)
            d_call = cupy.empty_like(d_price)
            d_put = cupy.empty_like(d_price)
            fast_kernel[blocks, threads, stream](
                d_call, d_put, d_price, d_strike, d_years, 0.02, 0.30
            )
            call = d_call.get(stream=stream)
            put = d_put.get(stream=stream)
        stream.synchronize()
        return call, put

    out.append(Variant("tutorial_call", OPTIONS * 8, "cupy", tutorial_call, 20, False))
    return out


def torch_variants(np: Any, sizes) -> list[Variant]:
    import torch

    out = []
    for nbytes in sizes:
        host = np.arange(nbytes // 8, dtype=np.float64)
        device = torch.from_numpy(host).cuda()
        small = nbytes == SMALL
        out += [
            Variant(
                "to_device",
                nbytes,
                "torch",
                lambda h=host: torch.from_numpy(h).cuda(),
                200 if small else 10,
                False,
            ),
            Variant(
                "device_array",
                nbytes,
                "torch",
                lambda n=host.size: torch.empty(n, dtype=torch.float64, device="cuda"),
                200,
                False,
            ),
            Variant(
                "copy_to_host",
                nbytes,
                "torch",
                lambda d=device: d.cpu(),
                200 if small else 10,
                False,
            ),
        ]
    sliced = torch.arange(SMALL // 8, dtype=torch.float64, device="cuda")
    out += [
        Variant("stream", 0, "torch", lambda: torch.cuda.Stream(), 200, False),
        Variant("slice", 0, "torch", lambda d=sliced: d[1:-1], 500, False),
        Variant("synchronize", 0, "torch", torch.cuda.synchronize, 500, False),
    ]
    return out


def check(result: Any) -> Any:
    """A cuda.bindings call's values, its error raised."""
    from cuda.bindings import driver

    error, *values = result if isinstance(result, tuple) else (result,)
    if error != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuda.bindings: {error}")
    return values[0] if len(values) == 1 else values


def driver_variants(np: Any, sizes) -> list[Variant]:
    """The driver through cuda.bindings, in numba-cuda's context (current on this thread)."""
    from cuda.bindings import driver

    out = []
    for nbytes in sizes:
        host = np.arange(nbytes // 8, dtype=np.float64)
        landing = np.empty_like(host)
        kept = check(driver.cuMemAlloc(nbytes))
        small = nbytes == SMALL

        def to_device(h: Any = host, n: int = nbytes) -> None:
            pointer = check(driver.cuMemAlloc(n))
            check(driver.cuMemcpyHtoD(pointer, h.ctypes.data, n))
            check(driver.cuMemFree(pointer))

        def pool_alloc(n: int = nbytes) -> None:
            pointer = check(driver.cuMemAllocAsync(n, 0))
            check(driver.cuMemFreeAsync(pointer, 0))

        def copy_to_host(p: Any = kept, h: Any = landing, n: int = nbytes) -> None:
            check(driver.cuMemcpyDtoH(h.ctypes.data, p, n))

        out += [
            Variant("to_device", nbytes, "driver", to_device, 200 if small else 10, False),
            Variant("device_array", nbytes, "driver", pool_alloc, 200, False),
            Variant("copy_to_host", nbytes, "driver", copy_to_host, 200 if small else 10, False),
        ]

    def stream() -> None:
        handle = check(driver.cuStreamCreate(0))
        check(driver.cuStreamDestroy(handle))

    out += [
        Variant("stream", 0, "driver", stream, 200, False),
        Variant("synchronize", 0, "driver", lambda: check(driver.cuCtxSynchronize()), 500, False),
    ]
    return out


def own_pool_variants(sizes) -> list[Variant]:
    """``device_array``'s driver calls from a pool of one's own (``cuMemPoolCreate``, what
    fastlaunch allocates from, keeping everything): beside the ``driver`` row (the device's
    current pool), what a pool of one's own costs."""
    from cuda.bindings import driver

    props = driver.CUmemPoolProps()
    props.allocType = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = 0
    pool = check(driver.cuMemPoolCreate(props))
    threshold = driver.cuuint64_t(2**64 - 1)
    attribute = driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    check(driver.cuMemPoolSetAttribute(pool, attribute, threshold))

    def pool_alloc(n: int) -> None:
        pointer = check(driver.cuMemAllocFromPoolAsync(n, pool, 0))
        check(driver.cuMemFreeAsync(pointer, 0))

    return [
        Variant("device_array", n, "driver-own-pool", lambda n=n: pool_alloc(n), 200, False)
        for n in sizes
    ]


def build(libraries: set[str], ops: set[str]) -> list[Variant]:
    apply_numpy_shim()
    import numpy as np
    from numba import cuda

    import fastlaunch

    fastlaunch.uninstall()
    numba_kernel, fast_kernel = make_kernels()
    elementwise = make_elementwise()
    cuda.synchronize()  # numba-cuda's context current on this thread, for the driver's rows
    sizes = (SMALL, LARGE)
    # per library, its groups of rows, each made on its own: a group that fails (the library
    # missing here, or the fresh-object rows) leaves the library's other rows measured
    makers: dict[str, list[Callable[[], list[Variant]]]] = {
        "numba-cuda": [
            lambda: numba_api_variants("numba-cuda", cuda, numba_kernel, np, sizes),
            lambda: installed(lambda: numba_launch_variants(cuda, elementwise, np)),
            lambda: cai_variants("numba-cuda", cuda, np, "cupy"),
            lambda: cai_variants("numba-cuda", cuda, np, "torch"),
        ],
        "fastlaunch": [
            lambda: installed(
                lambda: numba_api_variants("fastlaunch", cuda, fast_kernel, np, sizes)
            ),
            lambda: installed(lambda: cai_variants("fastlaunch", cuda, np, "cupy")),
            lambda: installed(lambda: cai_variants("fastlaunch", cuda, np, "torch")),
        ],
        "cupy": [
            lambda: cupy_variants(fast_kernel, np, sizes),
            lambda: cupy_launch_variants(elementwise),
        ],
        "torch": [lambda: torch_variants(np, sizes), lambda: torch_launch_variants(elementwise)],
        "driver": [lambda: driver_variants(np, sizes)],
        "driver-own-pool": [lambda: own_pool_variants(sizes)],
        "cupy-rawkernel": [cupy_rawkernel_variants],
    }
    variants = []
    for library in LIBRARIES:
        if library not in libraries:
            continue
        for make in makers[library]:
            try:
                made = make()
            except Exception as error:  # a library missing here: reported, not fatal
                print(f"memory.py: {library}: not measured ({type(error).__name__}: {error})")
                if isinstance(error, ImportError):
                    break  # its other groups would fail the same way
                continue
            variants += chosen(made, ops)
    return variants


def chosen(made: list[Variant], ops: set[str]) -> list[Variant]:
    """The variants of ``ops``, and the halves their differences subtract (timed even when
    their own op is not chosen: ``launch_between`` subtracts ``launch_new``'s)."""
    picked = [v for v in made if v.op in ops]
    for v in list(picked):
        if v.minus is not None and all(v.minus is not p for p in picked):
            picked.append(v.minus)
    return picked


def installed(make: Callable[[], list[Variant]]) -> list[Variant]:
    import fastlaunch

    fastlaunch.install()
    try:
        return make()
    finally:
        fastlaunch.uninstall()


def run(variants: list[Variant], rounds: int, seconds: float, seed: int) -> int:
    from numba import cuda

    import fastlaunch

    order = random.Random(seed)
    started = time.perf_counter()
    done = 0
    for _ in range(rounds):
        order.shuffle(variants)
        for variant in variants:
            if variant.installed:
                fastlaunch.install()
            else:
                fastlaunch.uninstall()
            variant.call()  # warm: a first call may compile or allocate
            cuda.synchronize()
            begin = time.perf_counter()
            for _ in range(variant.batch):
                variant.call()
            variant.seconds.append((time.perf_counter() - begin) / variant.batch)
        fastlaunch.uninstall()
        cuda.synchronize()
        done += 1
        if time.perf_counter() - started > seconds:
            break
    return done


#: the Black-Scholes-shaped call's steps, as ``tutorial_steps`` times them
STEPS = (
    "stream",
    "to_device x3",
    "device_array_like x2",
    "launch",
    "copy_to_host (call)",
    "copy_to_host (put)",
    "synchronize",
    "drop the arrays and stream",
)


def tutorial_steps(calls: int) -> dict[str, float]:
    """The Black-Scholes-shaped call under ``fastlaunch.install()``, each step timed on its
    own over ``calls`` calls: the median µs per step."""
    import numpy as np
    from numba import cuda

    import fastlaunch

    _, kernel = make_kernels()
    price, strike, years = tutorial_inputs(np)
    blocks, threads = math.ceil(OPTIONS / 256), 256
    spent: dict[str, list[float]] = {step: [] for step in STEPS}
    clock = time.perf_counter
    fastlaunch.install()
    try:
        for _ in range(calls + 1):  # the first call warms
            t0 = clock()
            stream = cuda.stream()
            t1 = clock()
            d_price = cuda.to_device(price, stream)
            d_strike = cuda.to_device(strike, stream)
            d_years = cuda.to_device(years, stream)
            t2 = clock()
            d_call = cuda.device_array_like(price, stream)
            d_put = cuda.device_array_like(price, stream)
            t3 = clock()
            kernel[blocks, threads, stream](d_call, d_put, d_price, d_strike, d_years, 0.02, 0.3)
            t4 = clock()
            d_call.copy_to_host(stream=stream)
            t5 = clock()
            d_put.copy_to_host(stream=stream)
            t6 = clock()
            stream.synchronize()
            t7 = clock()
            del stream, d_price, d_strike, d_years, d_call, d_put
            t8 = clock()
            marks = (t0, t1, t2, t3, t4, t5, t6, t7, t8)
            for step, begin, end in zip(STEPS, marks[:-1], marks[1:], strict=True):
                spent[step].append((end - begin) * 1e6)
        steps = {step: _percentile(sorted(us[1:]), 50) for step, us in spent.items()}
        steps.update(pieces(price))
    finally:
        fastlaunch.uninstall()
    return steps


def tutorial_profile(calls: int) -> str:
    """cProfile of ``calls`` Black-Scholes-shaped calls under ``fastlaunch.install()``: the
    functions by own time, then by cumulative time (profiling slows each Python call, so
    read it for where the time goes, not for how much)."""
    import cProfile
    import io
    import pstats

    import numpy as np
    from numba import cuda

    import fastlaunch

    _, kernel = make_kernels()
    call = numba_tutorial_call(cuda, kernel, np)
    fastlaunch.install()
    try:
        call()  # warm
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(calls):
            call()
        profile.disable()
    finally:
        fastlaunch.uninstall()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(25)
    return out.getvalue()


def pieces(host: Any) -> dict[str, float]:
    """What a ``to_device`` of ``host`` is made of, each timed alone (median µs of 15 batches):
    the Rust core's pool allocation and free, its staged copy, and the whole call."""
    from numba import cuda

    from fastlaunch import _core

    def timed(call: Callable[[], Any], batch: int = 200) -> float:
        batches = []
        for _ in range(15):
            begin = time.perf_counter()
            for _ in range(batch):
                call()
            batches.append((time.perf_counter() - begin) / batch * 1e6)
        return _percentile(sorted(batches), 50)

    address = _core.mem_alloc(host.nbytes)
    out = {
        "(piece) _core.mem_alloc + mem_free": timed(
            lambda: _core.mem_free(_core.mem_alloc(host.nbytes))
        ),
        "(piece) _core.copy_to_device, staged": timed(lambda: _core.copy_to_device(address, host)),
        "(piece) cuda.device_array_like": timed(lambda: cuda.device_array_like(host)),
        "(piece) cuda.to_device": timed(lambda: cuda.to_device(host)),
    }
    cuda.synchronize()
    _core.mem_free(address)
    return out


def rows(variants: list[Variant]) -> list[dict[str, Any]]:
    out = []
    for v in sorted(
        variants, key=lambda v: (OPS.index(v.op), v.nbytes, LIBRARIES.index(v.library))
    ):
        if v.subtracted:
            continue  # reported in the row it is subtracted from
        us = sorted(s * 1e6 for s in v.seconds)
        median, p10, p90 = (_percentile(us, q) for q in (50, 10, 90))
        extra: dict[str, float] = {}
        if v.minus is not None:
            # the difference of the medians; the spread from the rounds' own differences
            # (both halves run in every round, so pairing them by round is sound)
            part = sorted(s * 1e6 for s in v.minus.seconds)
            paired = sorted((w - p) * 1e6 for w, p in zip(v.seconds, v.minus.seconds, strict=True))
            median = _percentile(us, 50) - _percentile(part, 50)
            p10, p90 = _percentile(paired, 10), _percentile(paired, 90)
            extra = {
                "whole_median_us": round(_percentile(us, 50), 3),
                "subtracted_median_us": round(_percentile(part, 50), 3),
            }
        out.append(
            {
                "op": v.op,
                "bytes": v.nbytes,
                "library": v.library,
                "median_us": round(median, 3),
                "p10_us": round(p10, 3),
                "p90_us": round(p90, 3),
                **extra,
            }
        )
    return out


def markdown(table: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    env = meta["environment"]
    lines = [
        "# Around the launch: the memory API, interleaved",
        "",
        f"Measured {meta['measured']} with `python3 benchmarks/memory.py {meta['args']}`: "
        f"{meta['rounds']} rounds.",
        "",
        f"- GPU: {env.get('gpus', '?')}; CPU: {env.get('cpu', '?')}",
        "- Libraries: " + ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items()),
        "",
        "µs per call, median (p10–p90) over the rounds. `bytes` is the array's size (the "
        "Black-Scholes-shaped calls and the launch rows: one of their five arrays). What each "
        "library's row calls: the docstring of `benchmarks/memory.py`. `launch_new`, "
        "`launch_between` and `stream_new` are differences (the launch with new arrays, or "
        "over the reused ones after making new ones, minus the arrays alone; or on a new "
        "stream, minus the launch on one stream): the difference of the medians, and "
        "p10–p90 of the rounds' differences. Their columns, and `launch_reused`'s, name the "
        "arrays' source, launched by fastlaunch installed (`cupy-rawkernel`: by CuPy). "
        "`cai_read_*` read a numba array through `__cuda_array_interface__` (`cupy.asarray`, "
        "`torch.as_tensor`): `fresh` a new `to_device` and the read, timed together; "
        "`just_made` that minus the `to_device` alone (a difference); `old` an array made "
        "long before.",
        "",
    ]
    ops_sizes = sorted(
        {(r["op"], r["bytes"]) for r in table}, key=lambda k: (OPS.index(k[0]), k[1])
    )
    present = [lib for lib in LIBRARIES if any(r["library"] == lib for r in table)]
    lines.append("| op | bytes | " + " | ".join(present) + " |")
    lines.append("|---|--:|" + "--:|" * len(present))
    by_key = {(r["op"], r["bytes"], r["library"]): r for r in table}
    for op, nbytes in ops_sizes:
        cells = []
        for lib in present:
            r = by_key.get((op, nbytes, lib))
            cells.append(
                "" if r is None else f"{r['median_us']:.1f} ({r['p10_us']:.1f}–{r['p90_us']:.1f})"
            )
        lines.append(f"| {op} | {nbytes or '—'} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def interleaved_arguments(
    doc: str, libraries: tuple[str, ...], ops: tuple[str, ...], seconds: float
) -> argparse.ArgumentParser:
    """The arguments of an interleaved benchmark: where results go, how many rounds (bounded
    by ``seconds``), the shuffle's seed, and which libraries and ops are timed."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=seconds)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--libraries", default=",".join(libraries))
    parser.add_argument("--ops", default=",".join(ops))
    return parser


def measured(rounds: int) -> dict[str, Any]:
    """What a results file says of its run: when, with which arguments, how many rounds,
    on what machine."""
    return {
        "measured": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "args": " ".join(sys.argv[1:]),
        "rounds": rounds,
        "environment": environment(),
    }


def write_results(out: Path, stem: str, table: list, meta: dict[str, Any], text: str) -> None:
    """DIR/<stem>.md (``text``, also printed) and DIR/<stem>.json (``meta`` and the rows)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps({**meta, "rows": table}, indent=1) + "\n")
    print(text)


def main() -> int:
    parser = interleaved_arguments(__doc__, LIBRARIES, OPS, seconds=150.0)
    parser.add_argument(
        "--steps",
        type=int,
        default=0,
        help="also time the Black-Scholes-shaped call step by step, fastlaunch installed, "
        "over this many calls (memory-steps.md)",
    )
    args = parser.parse_args()
    variants = build(set(args.libraries.split(",")), set(args.ops.split(",")))
    done = run(variants, args.rounds, args.seconds, args.seed)
    table = rows(variants)
    meta = measured(done)
    write_results(args.out, "memory", table, meta, markdown(table, meta))
    if args.steps:
        steps = tutorial_steps(args.steps)
        lines = [
            f"Black-Scholes-shaped call under fastlaunch.install(), median µs per step over "
            f"{args.steps} calls ({meta['measured']}):",
            "",
            "| step | µs |",
            "|---|--:|",
            *(f"| {step} | {us:.1f} |" for step, us in steps.items() if step in STEPS),
            f"| all | {sum(steps[step] for step in STEPS):.1f} |",
            *(f"| {step} | {us:.1f} |" for step, us in steps.items() if step not in STEPS),
        ]
        lines += ["", "```", tutorial_profile(args.steps), "```"]
        (args.out / "memory-steps.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
