"""The memory API inside a stream capture, beside numba-cuda's: copies on a capturing stream
are not staged (a graph would replay a staging slot's later contents), so each call either
works or raises what numba-cuda's raises; and a capture that worked replays the right data."""

from __future__ import annotations

import numpy as np
import pytest
from cuda.bindings import driver as bindings
from numba import cuda

import fastlaunch as fl
from fastlaunch import memory as flm
from fastlaunch.memory import transfers

pytestmark = pytest.mark.gpu

RELAXED = bindings.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED


def outcome_in_capture(stream, call):
    """What `call()` gives on `stream` while it is being captured: ('ok', None) or
    ('raised', its class); the capture is ended either way."""
    (status,) = bindings.cuStreamBeginCapture(int(stream.handle), RELAXED)
    assert status == bindings.CUresult.CUDA_SUCCESS
    try:
        call()
        result = ("ok", None)
    except Exception as error:  # compared with numba-cuda's below
        result = ("raised", type(error))
    bindings.cuStreamEndCapture(int(stream.handle))
    cuda.synchronize()
    return result


@pytest.mark.parametrize("nbytes", [8 * 1024, 4 << 20], ids=["staged size", "direct size"])
def test_copies_in_a_capture_do_as_numba_cudas_do(nbytes):
    host = np.arange(nbytes // 8, dtype=np.float64)
    plain_device, fast_device = cuda.to_device(host), fl.to_device(host)
    plain_stream, fast_stream = cuda.stream(), flm.stream()
    plain = outcome_in_capture(
        plain_stream, lambda: plain_device.copy_to_device(host, stream=plain_stream)
    )
    fast = outcome_in_capture(
        fast_stream, lambda: transfers.copy_to_device(fast_device, host, stream=fast_stream)
    )
    assert fast == plain
    back = np.empty_like(host)
    plain = outcome_in_capture(
        plain_stream, lambda: plain_device.copy_to_host(back, stream=plain_stream)
    )
    fast = outcome_in_capture(
        fast_stream, lambda: transfers.copy_to_host(fast_device, back, stream=fast_stream)
    )
    assert fast == plain


def test_a_captured_copy_replays_the_host_bytes_of_replay_time():
    """Where the driver captures a host-to-device copy, the graph reads the host array when
    it is replayed (as numba-cuda's capture does): never a staging slot's stale bytes."""
    host = np.arange(1024, dtype=np.float64)
    device = fl.to_device(np.zeros_like(host))
    stream = flm.stream()
    handle = int(stream.handle)
    bindings.cuStreamBeginCapture(handle, RELAXED)
    try:
        transfers.copy_to_device(device, host, stream=stream)
    except Exception:
        bindings.cuStreamEndCapture(handle)
        pytest.skip("the driver refuses a pageable copy in a capture (numba-cuda's copy alike)")
    status, graph = bindings.cuStreamEndCapture(handle)
    assert status == bindings.CUresult.CUDA_SUCCESS
    status, executable = bindings.cuGraphInstantiate(graph, 0)
    host[:] = -host  # changed after the capture
    fl.to_device(np.arange(1024.0) * 7)  # the staging ring reused meanwhile
    bindings.cuGraphLaunch(executable, handle)
    stream.synchronize()
    assert np.array_equal(transfers.copy_to_host(device), host)
