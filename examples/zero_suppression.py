"""Zero suppression of a noisy waveform with a CUDA ufunc, the way numba's CUDA tutorials
teach it: a ``vectorize(target="cuda")`` function called on host NumPy arrays, then on device
arrays, many times. The same ufunc is timed with fastlaunch installed and with numba-cuda's
own calls (``fastlaunch.uninstall()``), and both results are checked against NumPy.

Run: ``python examples/zero_suppression.py``. Exits 0 when every result matches NumPy, 1
when one does not, and 77 (skipped) without a GPU.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np
from numba import cuda, vectorize

import fastlaunch

SKIPPED = 77  # the exit code the example tests read as "skipped"
NO_GPU = "no CUDA GPU here (`python -m fastlaunch info` says why)"
SAMPLES = 100_000
CALLS = 200


def make_ufuncs():
    @vectorize(["float32(float32, float32)"], target="cuda")
    def zero_suppress(value, threshold):
        return 0.0 if value < threshold else value

    @vectorize(["float32(float32, float32, float32)"], target="cuda")
    def pulses(t, period, amplitude):
        return max(math.sin(t / period) - 0.3, 0.0) * amplitude

    return zero_suppress, pulses


def waveform() -> np.ndarray:
    noise = np.random.default_rng(0).normal(0, 3, SAMPLES).astype(np.float32)
    t = np.arange(SAMPLES, dtype=np.float32)
    period = np.float32(SAMPLES / 23)
    signal = (np.maximum(np.sin(t / period) - np.float32(0.3), 0) * 100).astype(np.float32)
    return signal + noise


def timed(call) -> float:
    call()  # the first call compiles (and plans, installed)
    cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(CALLS):
        result = call()
    cuda.synchronize()
    del result
    return (time.perf_counter() - begin) / CALLS * 1e6


def run(label: str) -> tuple[bool, float, float]:
    zero_suppress, pulses = make_ufuncs()
    host = waveform()
    expected = np.where(host < 15.0, np.float32(0), host)
    device = cuda.to_device(host)
    t = np.arange(SAMPLES, dtype=np.float32)
    made = pulses(t, np.float32(SAMPLES / 23), np.float32(100.0))  # host in, host out
    ok = np.allclose(
        made, np.maximum(np.sin(t / np.float32(SAMPLES / 23)) - 0.3, 0) * 100, atol=1e-3
    )
    ok &= np.array_equal(zero_suppress(host, np.float32(15.0)), expected)
    ok &= np.array_equal(zero_suppress(device, 15.0).copy_to_host(), expected)
    host_us = timed(lambda: zero_suppress(host, np.float32(15.0)))
    device_us = timed(lambda: zero_suppress(device, 15.0))
    print(
        f"zero_suppression ({label}): µs per call: host arrays {host_us:.1f}, "
        f"device arrays {device_us:.1f}"
    )
    return bool(ok), host_us, device_us


def main() -> int:
    if not fastlaunch.is_available():
        print(f"skipped: {NO_GPU}", file=sys.stderr)
        return SKIPPED
    fastlaunch.uninstall()
    plain_ok, plain_host, plain_device = run("numba-cuda")
    with fastlaunch.install():
        fast_ok, fast_host, fast_device = run("fastlaunch installed")
    if not (plain_ok and fast_ok):
        print("zero_suppression: MISMATCH with NumPy", file=sys.stderr)
        return 1
    print(
        f"zero_suppression: {SAMPLES} samples, {plain_host / fast_host:.1f}x faster on host "
        f"arrays and {plain_device / fast_device:.1f}x on device arrays installed: matches NumPy"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
