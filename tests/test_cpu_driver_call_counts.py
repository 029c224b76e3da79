"""What each fresh-object call of the memory API asks of the driver, pinned: the cases of
``benchmarks/driver_calls.py`` (and interface reads of a fresh and an old array), each run
under ``install()`` on the counting driver (``benchmarks/timed_driver``) over the stand-in, the
driver functions each call makes counted. A change that adds a driver call to one of these
paths fails here; one that removes a call updates the count (and says why in its commit).

Counts are per call of the case, over 40 calls after 500 untimed ones, in steady state: the
freed-block cache full, the staging slots made. ``cuThreadExchangeStreamCaptureMode`` runs in
pairs around a wait that must not break another thread's capture (``Driver::relaxed``)."""

from __future__ import annotations

import json
from pathlib import Path

from test_cpu_timed_driver import CASES, run_counted, timed_driver  # noqa: F401 (a fixture)

SOURCE = (
    CASES
    + """
import json
_core.set_pool_release_threshold(0, allocation.KEEP_EVERYTHING)  # as allocation.context() does
host = np.arange(8192, dtype=np.float32)
old = cuda.to_device(host)
cuda.synchronize()
found["interface of a fresh to_device"] = lambda: cuda.to_device(host).__cuda_array_interface__
found["interface of an old array"] = lambda: old.__cuda_array_interface__
back = np.empty_like(host)
found["copy_to_host 32 KiB"] = lambda: old.copy_to_host(back)
found["to_device and copy_to_host 32 KiB"] = lambda: cuda.to_device(host).copy_to_host(back)
price = np.arange(4096, dtype=np.float64)
def tutorial_memory():  # benchmarks/memory.py's Black-Scholes-shaped call, its launch left out
    stream = cuda.stream()
    d_price = cuda.to_device(price, stream)
    d_strike = cuda.to_device(price, stream)
    d_years = cuda.to_device(price, stream)
    d_call = cuda.device_array_like(price, stream)
    d_put = cuda.device_array_like(price, stream)
    d_call.copy_to_host(stream=stream)
    d_put.copy_to_host(stream=stream)
    stream.synchronize()
found["Black-Scholes-shaped memory calls"] = tutorial_memory
counts = {}
for name, case in found.items():
    driver = measure(case, 40, timed, cuda.synchronize)["driver"]
    counts[name] = {function: round(calls, 2) for function, (calls, _) in driver.items()}
print(json.dumps(counts))
"""
)

CONTEXT = {"cuCtxGetCurrent": 1.0, "cuCtxGetId": 1.0}

#: per call of each case: {driver function: calls}
EXPECTED = {
    # five device_array() and their frees: per allocation a context read and a capture check,
    # per free the same; one mark for the five (the first follows a free, the others share it)
    "numba: arrays_alone": {
        "cuCtxGetCurrent": 10.0,
        "cuCtxGetId": 10.0,
        "cuEventRecord": 1.0,
        "cuStreamIsCapturing": 10.0,
    },
    "numba: launch_new": {
        "cuCtxGetCurrent": 11.0,
        "cuCtxGetId": 11.0,
        "cuEventRecord": 1.0,
        "cuLaunchKernel": 1.0,
        "cuStreamIsCapturing": 10.0,
    },
    "numba: launch_reused": {**CONTEXT, "cuLaunchKernel": 1.0},
    # a pooled stream: the launch asks its capture state, its return to the pool too
    "stream_alone": {"cuCtxGetCurrent": 1.0, "cuCtxGetId": 2.0, "cuStreamIsCapturing": 1.0},
    "stream_new": {
        "cuCtxGetCurrent": 2.0,
        "cuCtxGetId": 3.0,
        "cuLaunchKernel": 1.0,
        "cuStreamIsCapturing": 2.0,
    },
    "one_stream": {**CONTEXT, "cuLaunchKernel": 1.0, "cuStreamIsCapturing": 1.0},
    "device_array": {
        "cuCtxGetCurrent": 2.0,
        "cuCtxGetId": 2.0,
        "cuEventRecord": 1.0,
        "cuStreamIsCapturing": 2.0,
    },
    "d[1:-1]": {},
    # made and filled in one call: a context read and a capture check for both (and the
    # free's); the copy's mark, which its slot waits for too (no event of the slot's own); a slot is
    # claimed once its mark is known done: the newest mark asked (relaxed) and seen done
    # tells the four slots free, so one copy in four asks (9 of 40: a synchronization between
    # the batches tells them all done)
    "to_device 32 KiB": {
        "cuCtxGetCurrent": 2.0,
        "cuCtxGetId": 2.0,
        "cuEventQuery": 0.23,
        "cuEventRecord": 1.0,
        "cuMemcpyHtoDAsync_v2": 1.0,
        "cuStreamIsCapturing": 2.0,
        "cuThreadExchangeStreamCaptureMode": 0.45,
    },
    # as to_device, and the read's query of the copy's mark (the newest: its slot then needs
    # no query); the block, read by another library, is held on its free until a
    # synchronization (between the batches, not counted)
    "interface of a fresh to_device": {
        "cuCtxGetCurrent": 2.0,
        "cuCtxGetId": 3.0,
        "cuEventQuery": 1.0,
        "cuEventRecord": 1.0,
        "cuMemAllocFromPoolAsync": 1.0,
        "cuMemcpyHtoDAsync_v2": 1.0,
        "cuStreamIsCapturing": 1.0,
        "cuThreadExchangeStreamCaptureMode": 2.0,
    },
    # its copy known done: nothing, as numba-cuda's dictionary
    "interface of an old array": {},
    # a copy back on stream 0: one synchronous copy into a slot (relaxed), no event
    "copy_to_host 32 KiB": {
        **CONTEXT,
        "cuMemcpyDtoH_v2": 1.0,
        "cuStreamIsCapturing": 1.0,
        "cuThreadExchangeStreamCaptureMode": 2.0,
    },
    # and after a to_device: the copy back runs after its mark, which it then knows done
    # (as every mark before it): no query for any slot
    "to_device and copy_to_host 32 KiB": {
        "cuCtxGetCurrent": 3.0,
        "cuCtxGetId": 3.0,
        "cuEventRecord": 1.0,
        "cuMemcpyDtoH_v2": 1.0,
        "cuMemcpyHtoDAsync_v2": 1.0,
        "cuStreamIsCapturing": 3.0,
        "cuThreadExchangeStreamCaptureMode": 2.0,
    },
    # on a pooled (blocking) stream: its five blocks reused from the last call's frees, one
    # mark after those frees, which the stream follows on the GPU with no wait of its own;
    # a staged copy to the device records its slot's event (and reads the stream's id, which
    # that event is then known by); a copy back is enqueued and its stream synchronized
    # (relaxed), after which every slot's copy on that stream is known done: no slot is
    # queried or waited for; the five frees and the stream's return ask their capture state
    "Black-Scholes-shaped memory calls": {
        "cuCtxGetCurrent": 14.0,
        "cuCtxGetId": 15.0,
        "cuEventRecord": 4.0,
        "cuMemcpyDtoHAsync_v2": 2.0,
        "cuMemcpyHtoDAsync_v2": 3.0,
        "cuStreamGetId": 6.0,
        "cuStreamIsCapturing": 14.0,
        "cuStreamSynchronize": 3.0,
        "cuThreadExchangeStreamCaptureMode": 4.0,
    },
}


def test_fresh_object_calls_make_the_driver_calls_pinned(timed_driver: Path, stand_in_driver):  # noqa: F811
    lines = run_counted(SOURCE, timed_driver, stand_in_driver)
    assert json.loads(lines[-1]) == EXPECTED


def test_a_synchronization_tells_free_only_the_slots_whose_copies_it_covered(
    timed_driver: Path,  # noqa: F811
    stand_in_driver,
):
    """Four staged copies on stream `a` fill the four staging slots. A synchronization of
    another stream, or of `a` once its handle went to a new stream (a new id), says nothing of
    them: each next copy asks its slot's event. One of `a` itself, or of the context, tells
    them all free: the next four copies ask nothing."""
    lines = run_counted(
        CASES
        + """
import ctypes
fake = ctypes.CDLL(os.environ["TIMED_CUDA_REAL"])
host = np.arange(8192, dtype=np.float32)
a, b = cuda.stream(), cuda.stream()
def asks_after(synchronize):
    kept = [cuda.to_device(host, a) for _ in range(4)]  # (kept: no free between)
    synchronize()
    timed.reset()
    kept += [cuda.to_device(host, b) for _ in range(4)]
    counted = timed.read()
    cuda.synchronize()
    return sum(counted.get(f, (0, 0))[0] for f in ("cuEventQuery", "cuEventSynchronize"))
def reborn():
    fake.fake_stream_reborn(ctypes.c_void_p(_core.memory_stream_handle(a)))
    a.synchronize()
print(asks_after(b.synchronize), asks_after(reborn), asks_after(a.synchronize),
      asks_after(cuda.synchronize))
""",
        timed_driver,
        stand_in_driver,
    )
    assert lines[-1] == "4 4 0 0"
