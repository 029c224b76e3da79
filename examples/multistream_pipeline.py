"""A chunked pipeline over several fastlaunch streams: each chunk's host-to-device copy,
kernel and device-to-host copy go to one stream, so copies on one stream overlap kernels
on the others. Events start all streams together, join them at the end and time the lot.

Copies use numba (pinned host memory, asynchronous on a numba view of the same stream:
``cuda.external_stream(stream.handle)``); launches use the fastlaunch stream itself.

Run: ``python examples/multistream_pipeline.py``. Exits 0 when the result matches NumPy,
1 when it does not, and 77 (skipped) without a GPU.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

import fastlaunch

SKIPPED = 77  # the exit code the example tests read as "skipped"
NO_GPU = "no CUDA GPU here (`python -m fastlaunch info` says why)"


@fastlaunch.jit
def polynomial(out, x, a, b, c):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i] = (a * v + b) * v + c


def skip(why: str) -> int:
    print(f"skipped: {why}", file=sys.stderr)
    return SKIPPED


def main() -> int:
    if not fastlaunch.is_available():
        return skip(NO_GPU)

    n_streams, n_chunks, chunk, threads = 4, 16, 1 << 20, 256
    a, b, c = np.float32(0.5), np.float32(-1.25), np.float32(3.0)

    host_in = cuda.pinned_array(n_chunks * chunk, np.float32)  # pinned: copies run async
    host_in[:] = np.random.default_rng(0).standard_normal(host_in.size, dtype=np.float32)
    host_out = cuda.pinned_array(host_in.size, np.float32)
    host_out[:] = np.nan

    streams = [fastlaunch.stream() for _ in range(n_streams)]
    numba_views = [cuda.external_stream(s.handle) for s in streams]
    # One input and one output buffer per stream: work on one stream runs in order, so a
    # buffer is reused only after that stream's previous chunk is done with it.
    d_in = [cuda.device_array(chunk, np.float32, stream=v) for v in numba_views]
    d_out = [cuda.device_array(chunk, np.float32, stream=v) for v in numba_views]

    start, stop = fastlaunch.event(), fastlaunch.event()
    start.record(streams[0])
    for s in streams[1:]:
        start.wait(s)  # every stream starts after `start`

    blocks = (chunk + threads - 1) // threads
    for k in range(n_chunks):
        lane = k % n_streams
        stream, view = streams[lane], numba_views[lane]
        part = slice(k * chunk, (k + 1) * chunk)
        d_in[lane].copy_to_device(host_in[part], stream=view)
        polynomial[blocks, threads, stream](d_out[lane], d_in[lane], a, b, c)
        d_out[lane].copy_to_host(host_out[part], stream=view)

    join = fastlaunch.stream()
    for s in streams:
        done = fastlaunch.event(timing=False)
        done.record(s)
        done.wait(join)  # join waits for every stream, on the GPU
    stop.record(join)
    stop.synchronize()  # the host waits once, for everything
    ms = start.elapsed_time(stop)

    v = np.asarray(host_in)
    expected = (a * v + b) * v + c
    if not np.allclose(host_out, expected, rtol=1e-5, atol=1e-5):
        bad = np.count_nonzero(~np.isclose(host_out, expected, rtol=1e-5, atol=1e-5))
        print(f"multistream_pipeline: MISMATCH in {bad} elements", file=sys.stderr)
        return 1
    mib = 2 * host_in.nbytes / 2**20
    print(
        f"multistream_pipeline: {n_chunks} chunks of {chunk} float32 over {n_streams} streams "
        f"(copy in, kernel, copy out; {mib:.0f} MiB moved) in {ms:.2f} ms: matches NumPy"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
