"""Records (NumPy structured scalars) on the GPU, launched by fastlaunch itself: each launch
copies the record to the device, passes a pointer to the copy, and copies it back after the
kernel (numba-cuda's InOut default), so a kernel's writes reach the host record and the
array it views. Results are compared with numba-cuda's own launch of the same kernel."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from numba.cuda.decorators import jit as numba_jit

import fastlaunch as fl

pytestmark = pytest.mark.gpu

# numba refuses misaligned fields in kernels, so the packed layout keeps each field at its
# natural alignment and differs from the aligned one only in the padding at the end.
PACKED = np.dtype([("y", np.float64), ("x", np.int32)])
ALIGNED = np.dtype([("y", np.float64), ("x", np.int32)], align=True)
NESTED = np.dtype([("y", np.float64), ("v", np.float32, (3,)), ("n", np.int16)])


def scale_record(out, record, k):
    out[0] = record.y * k
    record.y = record.y + k
    record.x = record.x * 2


@pytest.mark.parametrize("dtype", [PACKED, ALIGNED], ids=["packed", "aligned"])
@pytest.mark.parametrize("as_record_array", [False, True], ids=["void", "record"])
def test_kernels_read_and_write_records_as_numba_cuda_does(dtype, as_record_array):
    kernel = fl.jit(scale_record)
    reference = numba_jit(scale_record)
    results = []
    for launcher in (kernel, reference):
        host = np.zeros(3, dtype)
        host["x"], host["y"] = [1, 2, 3], [0.5, 1.5, 2.5]
        if as_record_array:
            host = np.rec.array(host)
        out = cuda.to_device(np.zeros(1, np.float64))
        launcher[1, 1](out, host[1], 4.0)
        launcher[1, 1](out, host[1], 4.0)
        results.append((out.copy_to_host()[0], host["x"].tolist(), host["y"].tolist()))
    assert results[0] == results[1]
    assert results[0] == (5.5 * 4.0, [1, 8, 3], [0.5, 9.5, 2.5])
    assert kernel.numba_launches == 0


def test_nested_records_and_records_in_tuples():
    @fl.jit
    def total(out, pair):
        record, factor = pair
        out[0] = (record.v[0] + record.v[1] + record.v[2] + record.n + record.y) * factor
        record.v[1] = -1.0

    host = np.zeros(1, NESTED)
    host[0] = (0.5, [1.0, 2.0, 3.0], 4)
    out = cuda.to_device(np.zeros(1, np.float64))
    total[1, 1](out, (host[0], 2.0))
    assert out.copy_to_host()[0] == 21.0
    assert host["v"][0].tolist() == [1.0, -1.0, 3.0]
    assert total.numba_launches == 0


def test_records_on_a_stream_of_their_own_and_many_launches():
    @fl.jit
    def bump(record):
        record.x += 1

    stream = fl.stream()
    host = np.zeros(1, ALIGNED)
    free_before = cuda.current_context().get_memory_info()[0]
    for _ in range(2000):
        bump[1, 1, stream](host[0])
    assert host["x"][0] == 2000  # each launch waited for its copy back
    stream.synchronize()
    free_after = cuda.current_context().get_memory_info()[0]
    assert free_before - free_after < 64 << 20  # the copies went back to the pool


def test_explicit_signatures_take_their_record_type():
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    record_type = numpy_support.from_dtype(ALIGNED)
    kernel = fl.jit(types.void(types.float64[::1], record_type, types.float64))(scale_record)
    host = np.zeros(1, ALIGNED)
    host[0] = (1.0, 3)
    out = cuda.to_device(np.zeros(1, np.float64))
    kernel[1, 1](out, host[0], 2.0)
    assert out.copy_to_host()[0] == 2.0 and host["x"][0] == 6
    with pytest.raises(fl.KernelArgumentError, match="expects Record"):
        kernel[1, 1](out, np.zeros(1, PACKED)[0], 2.0)


def test_records_are_refused_in_graph_capture_and_bound_launches():
    @fl.jit
    def bump(record):
        record.x += 1

    host = np.zeros(1, ALIGNED)
    bump[1, 1](host[0])
    with pytest.raises(TypeError, match="take no records"):
        bump[1, 1].bind(host[0])
    graph = fl.graph()
    with pytest.raises(TypeError, match="while capturing a graph"):
        with graph:
            bump[1, 1](host[0])
    bump[1, 1](host[0])  # the capture ended cleanly
    assert host["x"][0] == 2


def test_records_of_read_only_arrays_are_read_and_not_written_back():
    kernel = fl.jit(scale_record)
    host = np.zeros(2, ALIGNED)
    host[1] = (1.5, 3)
    host.flags.writeable = False
    out = cuda.to_device(np.zeros(1, np.float64))
    kernel[1, 1](out, host[1], 2.0)
    assert out.copy_to_host()[0] == 3.0
    assert (host[1]["y"], host[1]["x"]) == (1.5, 3)  # the kernel's writes stay on the device
    assert kernel.numba_launches == 0
