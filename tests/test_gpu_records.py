"""Records (NumPy structured scalars) and arrays of records, datetime64 and timedelta64 on the
GPU, launched by fastlaunch itself. A record: each launch copies it to the device, passes a
pointer to the copy, and copies it back after the kernel (numba-cuda's InOut default), so a
kernel's writes reach the host record and the array it views. Arrays of records (numba-cuda's
xoroshiro128p random states among them), datetimes and timedeltas: device arrays passed as
any other, host arrays over copies staged around the launch. Results are compared with
numba-cuda's own launch of the same kernel, and no launch goes through numba-cuda's path."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numba import cuda
from numba.cuda.core.errors import NumbaPerformanceWarning
from numba.cuda.decorators import jit as numba_jit
from numba.cuda.random import (
    create_xoroshiro128p_states,
    xoroshiro128p_normal_float32,
    xoroshiro128p_uniform_float32,
)

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


# -- arrays of records, datetimes and timedeltas -----------------------------------------

# Arrays whose every element keeps its fields at their natural alignment (numba reads the
# fields of packed records with their own alignment): a packed dtype (numba's "unaligned"
# array type) whose itemsize is a multiple of 8, and aligned ones.
PACKED_ELEMENTS = np.dtype([("y", np.float64), ("x", np.int32), ("pad", np.int32)])
ALIGNED_ELEMENTS = np.dtype([("y", np.float64), ("x", np.int32)], align=True)
NESTED_ELEMENTS = np.dtype(
    [("y", np.float64), ("v", np.float32, (3,)), ("n", np.int16)], align=True
)


def draw(states, uniform, normal):
    i = cuda.grid(1)
    if i < uniform.size:
        uniform[i] = xoroshiro128p_uniform_float32(states, i)
        normal[i] = xoroshiro128p_normal_float32(states, i)


def test_xoroshiro128p_states_draw_as_numba_cuda_draws_them():
    n = 1000
    kernel, reference = fl.jit(draw), numba_jit(draw)
    results = []
    for launcher in (kernel, reference):
        states = create_xoroshiro128p_states(n, seed=1234)
        uniform, normal = cuda.device_array(n, np.float32), cuda.device_array(n, np.float32)
        draws = []
        for _ in range(3):  # each launch advances the states it draws from
            launcher[4, 256](states, uniform, normal)
            draws.append(uniform.copy_to_host().tobytes() + normal.copy_to_host().tobytes())
        results.append((draws, states.copy_to_host().tobytes()))
    assert results[0] == results[1]
    draws = np.frombuffer(results[0][0][0][: 4 * n], np.float32)
    assert 0.0 <= draws.min() and draws.max() < 1.0 and len(set(results[0][0])) == 3
    assert kernel.numba_launches == 0


def update_records(records, k):
    i = cuda.grid(1)
    if i < records.size:
        records[i].x = records[i].x * 2 + i
        records[i].y = records[i].y + k


def update_nested(records, k):
    i = cuda.grid(1)
    if i < records.shape[0]:
        for j in range(records.shape[1]):
            records[i, j].v[1] = records[i, j].v[0] * k + records[i, j].n
            records[i, j].n += 1


def record_arrays(dtype, shape, source):
    """Host records with distinct fields, and the array a kernel gets: made with
    ``cuda.to_device``, filled into ``cuda.device_array(..., dtype=...)``, or the host
    array itself (staged by the launch)."""
    host = np.zeros(shape, dtype)
    for name in dtype.names:
        field = host[name]
        field[...] = np.arange(field.size).reshape(field.shape) % 97
    if source == "to_device":
        return host, cuda.to_device(host)
    if source == "device_array":
        device = cuda.device_array(shape, dtype=dtype)
        device.copy_to_device(host)
        return host, device
    return host, host


def as_host(array):
    return array if isinstance(array, np.ndarray) else array.copy_to_host()


@pytest.mark.parametrize("source", ["to_device", "device_array", "host"])
@pytest.mark.parametrize("dtype", [PACKED_ELEMENTS, ALIGNED_ELEMENTS], ids=["packed", "aligned"])
def test_kernels_write_record_array_fields_as_numba_cuda_does(dtype, source):
    kernel, reference = fl.jit(update_records), numba_jit(update_records)
    results = []
    for launcher in (kernel, reference):
        host, records = record_arrays(dtype, 100, source)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NumbaPerformanceWarning)  # host arrays' copies
            launcher[2, 64](records, 0.5)
            launcher[2, 64](records, 0.25)
        results.append(as_host(records).tobytes())
    assert results[0] == results[1]
    expected, _ = record_arrays(dtype, 100, "host")
    expected["x"] = expected["x"] * 4 + 3 * np.arange(100)
    expected["y"] += 0.75
    assert results[0] == expected.tobytes()
    assert kernel.numba_launches == 0


@pytest.mark.parametrize("source", ["to_device", "device_array", "host"])
def test_kernels_write_nested_record_arrays_as_numba_cuda_does(source):
    kernel, reference = fl.jit(update_nested), numba_jit(update_nested)
    results = []
    for launcher in (kernel, reference):
        host, records = record_arrays(NESTED_ELEMENTS, (6, 5), source)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NumbaPerformanceWarning)
            launcher[1, 8](records, 3.0)
        results.append(as_host(records).tobytes())
    assert results[0] == results[1]
    assert kernel.numba_launches == 0


def test_views_of_record_arrays_launch_with_their_layout():
    kernel, reference = fl.jit(update_nested), numba_jit(update_nested)
    results = []
    for launcher in (kernel, reference):
        _, records = record_arrays(NESTED_ELEMENTS, (8, 6), "to_device")
        launcher[1, 8](records[1::2, ::3], 1.0)  # layout 'A'
        launcher[1, 8](records.T, 2.0)  # layout 'F'
        results.append(records.copy_to_host().tobytes())
    assert results[0] == results[1]
    assert kernel.overload_count == 2 and kernel.numba_launches == 0


def shift_stamps(stamps, spans, out, gaps):
    i = cuda.grid(1)
    if i < stamps.size:
        out[i] = stamps[i] + spans[i]
        gaps[i] = out[i] - stamps[0]


@pytest.mark.parametrize("unit", ["D", "s", "ns"])
@pytest.mark.parametrize("source", ["to_device", "device_array", "host"])
def test_datetime_and_timedelta_arrays_compute_as_numba_cuda_does(unit, source):
    kernel, reference = fl.jit(shift_stamps), numba_jit(shift_stamps)
    stamps = np.datetime64("2024-01-01", unit) + np.arange(40).astype(f"m8[{unit}]") * 7
    spans = np.arange(40).astype(f"m8[{unit}]") * 3
    results = []
    for launcher in (kernel, reference):
        arrays = [stamps, spans, np.zeros(40, f"M8[{unit}]"), np.zeros(40, f"m8[{unit}]")]
        if source == "to_device":
            arrays = [cuda.to_device(a) for a in arrays]
        elif source == "device_array":
            devices = [cuda.device_array(a.shape, dtype=a.dtype) for a in arrays]
            for device, a in zip(devices, arrays, strict=True):
                device.copy_to_device(a)
            arrays = devices
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NumbaPerformanceWarning)
            launcher[1, 64](*arrays)
        results.append([as_host(a) for a in arrays[2:]])
    for fast, plain in zip(results[0], results[1], strict=True):
        assert fast.dtype == plain.dtype and fast.tobytes() == plain.tobytes()
    np.testing.assert_array_equal(results[0][0], stamps + spans)
    np.testing.assert_array_equal(results[0][1], stamps + spans - stamps[0])
    assert kernel.numba_launches == 0


def test_record_and_datetime_arrays_are_remembered_bound_and_captured():
    @fl.jit
    def bump(records, stamps, step):
        i = cuda.grid(1)
        if i < records.size:
            records[i].x += 1
            stamps[i] += step

    records = cuda.to_device(np.zeros(32, ALIGNED))
    stamps = cuda.to_device(np.zeros(32, "M8[s]"))
    step = np.timedelta64(1, "s")
    for _ in range(3):
        bump[1, 32](records, stamps, step)  # the second and third are launches like the last
    bound = bump[1, 32].bind(records, stamps, step)
    bound()
    fl.synchronize()
    graph = fl.graph()  # on a new non-blocking stream
    with graph:
        bump[1, 32, graph.stream](records, stamps, step)
    graph.replay()
    graph.replay()
    fl.synchronize()
    assert records.copy_to_host()["x"].tolist() == [6] * 32
    assert stamps.copy_to_host().astype(np.int64).tolist() == [6] * 32
    assert bump.numba_launches == 0 and bump.miss_count == 1


def test_fresh_dtypes_and_record_arrays_np_record_dtype_launch_one_overload():
    kernel, reference = fl.jit(update_records), numba_jit(update_records)
    results = []
    for launcher in (kernel, reference):
        outputs = []
        for _ in range(3):  # an equal dtype made afresh each time
            dtype = np.dtype([("y", np.float64), ("x", np.int32)], align=True)
            fresh = cuda.device_array(8, dtype=dtype)
            fresh.copy_to_device(np.zeros(8, fresh.dtype))
            launcher[1, 8](fresh, 1.5)
            outputs.append(fresh.copy_to_host().tobytes())
        host = np.rec.array(np.zeros(8, ALIGNED_ELEMENTS))  # to_device keeps its np.record dtype
        records = cuda.to_device(host)
        launcher[1, 8](records, 2.5)
        outputs.append(records.copy_to_host().tobytes())
        results.append(outputs)
    assert results[0] == results[1]
    assert kernel.miss_count == 1 and kernel.numba_launches == 0
