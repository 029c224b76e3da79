"""Where fastlaunch's per-launch time goes, stage by stage (run on the GPU machine).

For each case: a plain Python call into the extension (the call's own cost), a pre-bound
launch (call + context check + ``cuLaunchKernel``: no classification or packing), and a
full launch (adds classification, fingerprint, overload lookup and packing). Subtracting
neighbours gives each stage; the C floor comes from ``.gpu/bin/launch-bench``.

    python3 benchmarks/stages.py [--batches 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from harness import BATCH, array_makers  # run as a script: benchmarks/ is on sys.path
from numba import cuda

import fastlaunch as fl
from fastlaunch import _core


def per_launch_us(call: Callable[[], object], batches: int) -> float:
    for _ in range(BATCH):
        call()
    fl.synchronize()
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(BATCH):
            call()
        samples.append((time.perf_counter() - start) / BATCH * 1e6)
        fl.synchronize()
    return statistics.median(samples)


def paired_us(
    full: Callable[[], object], bound: Callable[[], object], batches: int
) -> tuple[float, float, float]:
    """Medians of a full and a bound launch timed in alternating batches, and the median of
    their paired differences (what reading the arguments costs), so that the host's drift
    during the run lands on both alike."""
    for call in (full, bound):
        for _ in range(BATCH):
            call()
    fl.synchronize()
    samples: dict[Callable[[], object], list[float]] = {full: [], bound: []}
    for _ in range(batches):
        for call in (full, bound):
            start = time.perf_counter()
            for _ in range(BATCH):
                call()
            samples[call].append((time.perf_counter() - start) / BATCH * 1e6)
            fl.synchronize()
    differences = [f - b for f, b in zip(samples[full], samples[bound], strict=True)]
    return (
        statistics.median(samples[full]),
        statistics.median(samples[bound]),
        statistics.median(differences),
    )


def kernel(n_arrays: int, n_scalars: int, ndim: int) -> fl.Kernel:
    names = [f"a{i}" for i in range(n_arrays)] + [f"s{i}" for i in range(n_scalars)]
    source = f"def empty({', '.join(names)}):\n    pass\n"
    namespace: dict[str, object] = {}
    exec(source, namespace)  # noqa: S102 - a generated empty kernel with N parameters
    return fl.jit(namespace["empty"])


def access_costs(batches: int) -> None:
    """What reading one array costs through each library's own API, from Python (each
    figure includes ~0.04 µs of Python call), beside fastlaunch's whole classification."""
    probes: dict[str, Callable[[], object]] = {}
    try:
        import cupy

        c = cupy.zeros(128, np.float32)
        probes |= {
            "cupy .data.ptr": lambda: c.data.ptr,
            "cupy .shape": lambda: c.shape,
            "cupy .strides": lambda: c.strides,
            "cupy .dtype": lambda: c.dtype,
            "cupy .ndim (what a launch like the last reads)": lambda: c.ndim,
            "cupy __cuda_array_interface__": lambda: c.__cuda_array_interface__,
            "cupy get_current_stream().ptr": lambda: cupy.cuda.get_current_stream().ptr,
            "fastlaunch CuPy current stream, "
            + _core._cupy_current_stream()[1]: _core._cupy_current_stream,
            "fastlaunch fingerprint(cupy)": lambda: _core.fingerprint((c,)),
        }
    except ImportError:
        pass
    try:
        import torch

        t = torch.zeros(128, device="cuda")
        buffer = torch.zeros(4096, device="cuda")
        view = buffer[128:256]
        probes |= {
            "torch .data_ptr()": t.data_ptr,
            "torch ._base (not a view)": lambda: t._base,
            "torch .is_neg()": t.is_neg,
            "torch .stride()": t.stride,
            "fastlaunch fingerprint(torch)": lambda: _core.fingerprint((t,)),
            "fastlaunch fingerprint(torch view)": lambda: _core.fingerprint((view,)),
            "fastlaunch fingerprint(new torch view)": lambda: _core.fingerprint((buffer[:128],)),
            "torch buffer[:128] alone": lambda: buffer[:128],
        }
    except ImportError:
        pass
    d = cuda.device_array(128, np.float32)
    probes["fastlaunch fingerprint(numba)"] = lambda: _core.fingerprint((d,))
    probes |= held_probes()
    for name, probe in probes.items():
        print(f"{name:36} {per_launch_us(probe, batches):6.3f} µs")


def held_probes() -> dict[str, Callable[[], object]]:
    """``HeldArgs.holds`` over 26 arrays of each source: the proof a launch like the last (and
    a graphed call) makes that the same objects come back unchanged; the torch figure less
    the numba one, over 26, is what reading a tensor again through torch's DLPack exchange
    API costs."""
    sources: dict[str, tuple[object, ...]] = {
        "numba": tuple(cuda.device_array(128, np.float32) for _ in range(26))
    }
    try:
        import torch

        sources["torch"] = tuple(torch.zeros(128, device="cuda") for _ in range(26))
    except ImportError:
        pass
    probes: dict[str, Callable[[], object]] = {}
    for source, args in sources.items():
        held = _core.step_form(args, None, 0)[3]
        if held is not None and held.holds(args):
            probes[f"fastlaunch HeldArgs.holds, 26 {source}"] = lambda h=held, a=args: h.holds(a)
    return probes


def ordering_cost(batches: int) -> None:
    """The ordering step: a CUDA Array Interface v3 input produced on another stream makes
    each launch record an event there and wait on it (two driver calls)."""
    array = cuda.device_array(128, np.float32)
    consumer = fl.stream(non_blocking=True)
    producer = fl.stream(non_blocking=True)

    class Produced:
        def __init__(self, stream_handle: int) -> None:
            interface = dict(array.__cuda_array_interface__)
            interface["stream"] = stream_handle
            self.__cuda_array_interface__ = interface

    k = kernel(1, 0, 1)
    same, other = Produced(consumer.handle), Produced(producer.handle)
    launcher = k[1, 1, consumer]
    same_us = per_launch_us(lambda: launcher(same), batches)
    other_us = per_launch_us(lambda: launcher(other), batches)
    print(
        f"ordering: CAI input on the launch stream {same_us:.2f} µs, on another stream "
        f"{other_us:.2f} µs: the ordering step costs {other_us - same_us:.2f} µs"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=50)
    batches = parser.parse_args().batches
    rows = []
    noop = per_launch_us(_core.ordering_enabled, batches)
    rows.append(("python -> rust call (no launch)", "-", noop, None, None))
    cases = [("A", 0, 0, 1), ("B", 1, 0, 1), ("C", 3, 4, 2), ("D", 26, 0, 1)]
    for case, n_arrays, n_scalars, ndim in cases:
        k = kernel(n_arrays, n_scalars, ndim)
        for source, make in array_makers().items() if n_arrays else [("-", None)]:
            shape = (128,) if ndim == 1 else (16, 8)
            arrays = [make(shape) for _ in range(n_arrays)] if make else []
            scalars = [3, 1.5, 7, 2.5][:n_scalars]
            args = (*arrays, *scalars)
            launcher = k[1, 1]
            bound = launcher.bind(*args)

            def full(launcher=launcher, args=args) -> None:
                launcher(*args)

            rows.append((case, source, *paired_us(full, bound, batches)))
            if case == "D":  # the same without asking the producers' current streams
                fl.set_ordering(False)
                try:
                    rows.append(("D, ordering off", source, *paired_us(full, bound, batches)))
                finally:
                    fl.set_ordering(True)
    access_costs(batches)
    ordering_cost(batches)
    print(f"{'case':32} {'source':6} {'full µs':>8} {'bound µs':>9} {'args µs':>8}")
    for case, source, full, prebound, args_us in rows:
        bound_text = "" if prebound is None else f"{prebound:9.2f}"
        args_text = "" if args_us is None else f"{args_us:8.2f}"
        print(f"{case:32} {source:6} {full:8.2f} {bound_text:>9} {args_text:>8}")


if __name__ == "__main__":
    main()
