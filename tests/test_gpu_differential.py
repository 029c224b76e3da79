"""A seeded differential test: random kernels over random argument kinds, sources, layouts
and launch styles, launched by numba-cuda and by fastlaunch on the same inputs, and the
outputs compared bit for bit. On a mismatch the seed and the case are printed; run one seed
again with ``FASTLAUNCH_DIFF_SEEDS=17`` (or a range, ``0-199``)."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from arrays import CAIView
from numba import cuda
from numba.cuda.decorators import jit as numba_jit

import fastlaunch as fl

pytestmark = pytest.mark.gpu

N = 96  # output elements; every array argument has at least this many
DTYPES = ["float32", "float64", "int32", "int64", "uint8", "int16", "complex64", "float16"]


def seeds() -> list[int]:
    spec = os.environ.get("FASTLAUNCH_DIFF_SEEDS", "0-59")
    if "-" in spec:
        lo, hi = spec.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in spec.split(",")]


def host_array(rng: random.Random, dtype: str, ndim: int) -> np.ndarray:
    shape = (N,) if ndim == 1 else (8, N // 8 + rng.randint(0, 3))
    values = np.random.default_rng(rng.randint(0, 2**32)).uniform(-50, 50, size=shape)
    if dtype.startswith("complex"):
        values = values + 1j * values[..., ::-1]
    return values.astype(dtype)


def make_array(rng: random.Random, host: np.ndarray, source: str, layout: str):
    """The same values as a device array of ``source``, in ``layout`` (C, F or strided)."""
    if layout == "F":
        host = np.asfortranarray(host)
    if layout == "strided":
        doubled = np.repeat(host, 2, axis=-1)
        device = cuda.to_device(doubled)
        view = device[..., ::2]
    else:
        view = device = cuda.to_device(host)
    if source == "numba":
        return view
    if source == "cai":
        return CAIView(view)
    if source == "torch":
        import torch

        return torch.as_tensor(view, device="cuda")
    import cupy

    return cupy.asarray(view)


def scalar_value(rng: random.Random):
    kind = rng.choice(["int", "float", "bool", "complex", "np.float32", "np.int16", "np.uint8"])
    value = {
        "int": lambda: rng.randint(-(2**40), 2**40),
        "float": lambda: rng.uniform(-10, 10),
        "bool": lambda: rng.random() < 0.5,
        "complex": lambda: complex(rng.uniform(-3, 3), rng.uniform(-3, 3)),
        "np.float32": lambda: np.float32(rng.uniform(-10, 10)),
        "np.int16": lambda: np.int16(rng.randint(-1000, 1000)),
        "np.uint8": lambda: np.uint8(rng.randint(0, 255)),
    }[kind]()
    return kind, value


def element(name: str, ndim: int, rows: str) -> str:
    return f"{name}[i]" if ndim == 1 else f"{name}[i % 8, i // 8]"


def build_case(seed: int, sources: list[str]):
    """(description, kernel source, host-side argument builder)."""
    rng = random.Random(seed)
    params, terms, specs = [], [], []
    for k in range(rng.randint(1, 6)):
        kind = rng.choice(["array", "array", "scalar", "tuple"])
        name = f"p{k}"
        params.append(name)
        if kind == "array":
            dtype, ndim = rng.choice(DTYPES), rng.choice([1, 2])
            source, layout = rng.choice(sources), rng.choice(["C", "F", "strided"])
            if source == "cupy" and dtype == "float16":
                dtype = "float32"
            specs.append(("array", name, dtype, ndim, source, layout, rng.randint(0, 2**32)))
            terms.append(f"complex({element(name, ndim, '8')}) * {k + 1}")
        elif kind == "scalar":
            specs.append(("scalar", name, *scalar_value(rng)))
            terms.append(f"{name} * {k + 1}")
        else:
            dtype, source = rng.choice(["float32", "float64", "int64"]), rng.choice(sources)
            specs.append(("tuple", name, dtype, source, scalar_value(rng), rng.randint(0, 2**32)))
            terms.append(f"({name}[0][i] * {name}[1] + {k})")
    body = " + ".join(terms)
    src = f"def kernel(out, {', '.join(params)}):\n"
    src += "    i = cuda.grid(1)\n"
    src += f"    if i < out.size:\n        out[i] = {body}\n"
    style = rng.choice(["plain", "stream", "bound", "configured"])

    def arguments():
        built = []
        for spec in specs:
            if spec[0] == "array":
                _, _, dtype, ndim, source, layout, values_seed = spec
                host = host_array(random.Random(values_seed), dtype, ndim)
                built.append(make_array(rng, host, source, layout))
            elif spec[0] == "scalar":
                built.append(spec[3])
            else:
                _, _, dtype, source, (_, value), values_seed = spec
                host = host_array(random.Random(values_seed), dtype, 1)
                built.append((make_array(rng, host, source, "C"), value))
        return built

    description = f"seed {seed}: style {style}, args {specs}\n{src}"
    return description, src, arguments, style


def run_numba(src: str, arguments) -> np.ndarray:
    namespace = {"cuda": cuda}
    exec(src, namespace)
    kernel = numba_jit(namespace["kernel"])
    out = cuda.device_array(N, np.complex128)
    kernel[1, N](out, *arguments())
    cuda.synchronize()
    return out.copy_to_host()


def run_fastlaunch(src: str, arguments, style: str) -> np.ndarray:
    namespace = {"cuda": cuda}
    exec(src, namespace)
    kernel = fl.jit(namespace["kernel"])
    out = cuda.device_array(N, np.complex128)
    args = arguments()
    if style == "plain":
        kernel[1, N](out, *args)
    elif style == "stream":
        stream = fl.stream()
        kernel[1, N, stream](out, *args)
        stream.synchronize()
    elif style == "bound":
        launch = kernel[1, N].bind(out, *args)
        launch()
    else:
        configured = kernel.configure(1, N)
        configured(out, *args)
        configured(out, *args)
    fl.synchronize()
    return out.copy_to_host()


def available_sources() -> list[str]:
    sources = ["numba", "cai"]
    for module in ("torch", "cupy"):
        try:
            __import__(module)
            sources.append(module)
        except ImportError:
            pass
    return sources


def test_random_kernels_match_numba_bit_for_bit():
    sources = available_sources()
    failures = []
    for seed in seeds():
        description, src, arguments, style = build_case(seed, sources)
        try:
            expected = run_numba(src, arguments)
        except Exception as e:  # numba-cuda refuses the case: fastlaunch must refuse it too
            try:
                run_fastlaunch(src, arguments, style)
            except Exception:
                continue
            failures.append(f"{description}\nnumba-cuda raised {e!r}; fastlaunch launched")
            continue
        got = run_fastlaunch(src, arguments, style)
        if expected.view(np.uint8).tobytes() != got.view(np.uint8).tobytes():
            bad = np.flatnonzero(expected != got)[:4]
            failures.append(
                f"{description}\nfirst differences at {bad}: numba {expected[bad]}, "
                f"fastlaunch {got[bad]}"
            )
    assert not failures, "\n\n".join(failures)
