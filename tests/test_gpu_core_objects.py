"""cuda.core ``Buffer`` and ``StridedMemoryView`` arguments on the GPU (issue 5): fastlaunch
packs them itself (``numba_launches`` stays 0), types them as numba-cuda does, and kernels
read and write the right bytes. Results are read back through numba (a buffer's bytes
through a ``__cuda_array_interface__`` of its pointer), not through fastlaunch."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from arrays import to_host
from numba import cuda
from numba.cuda.typing.typeof import Purpose, typeof

import fastlaunch as fl
from fastlaunch.dispatcher import numba_type

core = pytest.importorskip("cuda.core")
StridedMemoryView = core.utils.StridedMemoryView

pytestmark = pytest.mark.gpu


@pytest.fixture
def device():
    """cuda.core's current device (0 unless set), its primary context current."""
    dev = core.Device()
    dev.set_current()
    return dev


def allocate(dev, nbytes):
    """A device Buffer, its allocation complete (it is ordered on cuda.core's default stream,
    launches here on the legacy one)."""
    buffer = dev.allocate(nbytes, stream=dev.default_stream)
    dev.sync()
    return buffer


class _BufferBytes:
    def __init__(self, buffer):
        self.__cuda_array_interface__ = {
            "shape": (buffer.size,),
            "strides": None,
            "typestr": "|u1",
            "data": (int(buffer.handle), False),
            "version": 3,
        }


def buffer_bytes(buffer) -> np.ndarray:
    """A buffer's bytes, copied to the host by numba."""
    fl.synchronize()
    return cuda.as_cuda_array(_BufferBytes(buffer)).copy_to_host()


def same_type_as_numba(obj):
    return numba_type(fl._core.classify(obj)) == typeof(obj, Purpose.argument)


@fl.jit
def fill_bytes(buf, start):
    i = cuda.grid(1)
    if i < buf.size:
        buf[i] = (start + i) % 256


@fl.jit
def widen(out, buf):
    i = cuda.grid(1)
    if i < buf.size:
        out[i] = buf[i]


@fl.jit
def copy1d(out, a):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = a[i]


@fl.jit
def copy2d(out, a):
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j]


@fl.jit
def double_2d(a):
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        a[i, j] *= 2


@fl.jit
def index_2d(a):
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        a[i, j] = 10 * i + j


# -- Buffer --------------------------------------------------------------------------------


def test_device_buffers_are_filled_and_read_as_uint8(device):
    n = 1000
    buffer = allocate(device, n)
    assert fl._core.classify(buffer) == ("array", "uint8", 1, "C", False)
    assert same_type_as_numba(buffer)
    launches = fill_bytes.numba_launches
    fill_bytes[4, 256](buffer, 100)
    expected = ((100 + np.arange(n)) % 256).astype(np.uint8)
    np.testing.assert_array_equal(buffer_bytes(buffer), expected)
    # Read back in a kernel: bytes from 128 up stay positive (uint8, not int8).
    out = cuda.device_array(n, np.int32)
    widen[4, 256](out, buffer)
    np.testing.assert_array_equal(to_host(out), expected.astype(np.int32))
    misses = fill_bytes.miss_count
    for start in range(5):
        fill_bytes[4, 256](buffer, start)
    np.testing.assert_array_equal(buffer_bytes(buffer), ((4 + np.arange(n)) % 256))
    assert fill_bytes.miss_count == misses
    assert fill_bytes.numba_launches == launches == 0
    assert widen.numba_launches == 0
    buffer.close()


def test_bound_launches_take_buffers(device):
    buffer = allocate(device, 64)
    launch = fill_bytes[1, 64].bind(buffer, 7)
    launch()
    np.testing.assert_array_equal(buffer_bytes(buffer), (7 + np.arange(64)) % 256)


def test_pinned_host_buffers_are_device_accessible(device):
    """Pinned memory: device-accessible, and on no device (cuda.core's legacy pinned resource
    raises for its device_id), so no device is claimed for it."""
    try:
        buffer = core.LegacyPinnedMemoryResource().allocate(256)
    except Exception as e:  # whatever an older cuda.core raises
        pytest.skip(f"no pinned buffer: {e}")
    assert buffer.is_device_accessible and buffer.is_host_accessible
    fill_bytes[1, 256](buffer, 3)
    fl.synchronize()
    host = np.ctypeslib.as_array((ctypes.c_uint8 * 256).from_address(int(buffer.handle)))
    np.testing.assert_array_equal(host, (3 + np.arange(256)) % 256)
    assert fill_bytes.numba_launches == 0
    buffer.close()


# -- StridedMemoryView from DLPack / CUDA Array Interface producers ------------------------


def _sources():
    """name -> (host to device, fortran-ordered host to device, device to view)."""
    sources = {
        "numba": (
            cuda.to_device,
            lambda a: cuda.to_device(np.asfortranarray(a)),
            lambda d: StridedMemoryView.from_cuda_array_interface(d, stream_ptr=-1),
        )
    }
    try:
        import cupy

        sources["cupy"] = (
            cupy.asarray,
            lambda a: cupy.asfortranarray(cupy.asarray(a)),
            lambda d: StridedMemoryView.from_dlpack(d, stream_ptr=-1),
        )
    except ImportError:
        pass
    try:
        import torch

        sources["torch"] = (
            lambda a: torch.from_numpy(np.ascontiguousarray(a)).to("cuda"),
            lambda a: torch.from_numpy(np.ascontiguousarray(a.T)).to("cuda").T,
            lambda d: StridedMemoryView.from_dlpack(d, stream_ptr=-1),
        )
    except ImportError:
        pass
    return sources


SOURCES = _sources()
VIEWS = ["1d", "2d-C", "2d-F", "strided"]


def _view(source, kind):
    """(view, the NumPy array it shows)."""
    to_device, to_device_fortran, as_view = SOURCES[source]
    base = np.arange(20 * 30, dtype=np.float32).reshape(20, 30)
    if kind == "1d":
        return as_view(to_device(base.ravel())), base.ravel()
    if kind == "2d-C":
        return as_view(to_device(base)), base
    if kind == "2d-F":
        return as_view(to_device_fortran(base)), np.asfortranarray(base)
    return as_view(to_device(base)[::2, 1::3]), base[::2, 1::3]


def _layout(array: np.ndarray) -> str:
    if array.flags.c_contiguous:
        return "C"
    return "F" if array.flags.f_contiguous else "A"


@pytest.mark.parametrize("kind", VIEWS)
@pytest.mark.parametrize("source", list(SOURCES))
def test_views_are_read_with_their_layout(device, source, kind):
    view, expected = _view(source, kind)
    assert fl._core.classify(view) == ("array", "float32", expected.ndim, _layout(expected), False)
    if kind == "strided":
        with pytest.raises(ValueError, match="must be contiguous"):
            typeof(view, Purpose.argument)  # numba-cuda refuses; fastlaunch launches it
    else:
        assert same_type_as_numba(view)
    out = cuda.device_array(expected.shape, np.float32)
    if expected.ndim == 1:
        copy1d[3, 256](out, view)
    else:
        copy2d[(4, 4), (8, 8)](out, view)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), expected)
    assert copy1d.numba_launches == copy2d.numba_launches == 0


@pytest.mark.parametrize("source", list(SOURCES))
def test_kernels_write_through_strided_views(device, source):
    to_device, _, as_view = SOURCES[source]
    base = np.arange(20 * 30, dtype=np.float32).reshape(20, 30)
    array = to_device(base)
    double_2d[(4, 4), (8, 8)](as_view(array[::2, 1::3]))
    fl.synchronize()
    expected = base.copy()
    expected[::2, 1::3] *= 2
    np.testing.assert_array_equal(to_host(array), expected)
    assert double_2d.numba_launches == 0


# -- StridedMemoryView of a Buffer ---------------------------------------------------------


@pytest.mark.parametrize(("strides", "order"), [(None, "C"), ((4, 1), "C"), ((1, 3), "F")], ids=str)
def test_views_of_buffers(device, strides, order):
    buffer = allocate(device, 3 * 4 * 4)
    view = StridedMemoryView.from_buffer(buffer, (3, 4), strides, dtype=np.dtype(np.float32))
    assert fl._core.classify(view) == ("array", "float32", 2, order, False)
    assert same_type_as_numba(view)
    index_2d[(1, 1), (4, 4)](view)
    flat = buffer_bytes(buffer).view(np.float32)
    got = flat.reshape((3, 4), order=order)
    np.testing.assert_array_equal(got, 10 * np.arange(3)[:, None] + np.arange(4))
    assert index_2d.numba_launches == 0


def test_read_only_views_are_typed_read_only(device):
    buffer = allocate(device, 16 * 4)
    fill = StridedMemoryView.from_buffer(buffer, (16,), dtype=np.dtype(np.int32))
    read_only = StridedMemoryView.from_buffer(
        buffer, (16,), dtype=np.dtype(np.int32), is_readonly=True
    )
    assert fl._core.classify(read_only) == ("array", "int32", 1, "C", True)
    assert same_type_as_numba(read_only)

    @fl.jit
    def iota(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = i

    iota[1, 16](fill)
    out = cuda.device_array(16, np.int32)
    copy1d[1, 16](out, read_only)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), np.arange(16))


def test_views_of_host_memory_are_refused_naming_the_argument(device):
    for host in (
        StridedMemoryView.from_array_interface(np.zeros((4, 4), np.float32)),
        StridedMemoryView.from_dlpack(np.zeros((4, 4), np.float32), stream_ptr=-1),
    ):
        with pytest.raises(
            fl.KernelArgumentError,
            match=r"^argument 0 \(a\): .*StridedMemoryView is not in CUDA memory "
            r"\(is_device_accessible is False\)",
        ):
            double_2d[1, 1](host)


def test_buffers_and_views_mix_with_other_arrays(device):
    buffer = allocate(device, 256)
    fill_bytes[1, 256](buffer, 0)
    view = StridedMemoryView.from_buffer(buffer, (256,), dtype=np.dtype(np.uint8))
    out = cuda.device_array(256, np.int32)

    @fl.jit
    def add(out, a, b):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    add[1, 256](out, buffer, view)
    np.testing.assert_array_equal(to_host(out), 2 * np.arange(256))
    assert add.numba_launches == 0


# -- several GPUs --------------------------------------------------------------------------


@pytest.mark.skipif(not fl.is_available() or len(fl.gpus) < 2, reason="needs two GPUs")
def test_a_buffer_on_another_device_is_reached_or_refused():
    """A buffer names its device: launched on device 0, a buffer on device 1 is read over
    peer access where the driver allows it, else refused before the launch."""
    other = core.Device(1)
    other.set_current()
    buffer = allocate(other, 128)
    core.Device(0).set_current()
    with fl.gpus[0]:
        try:
            fill_bytes[1, 128](buffer, 1)
        except fl.KernelArgumentError as e:
            assert "its memory is on device 1 (the device its source names)" in str(e)
            return
        fl.synchronize()
    with fl.gpus[1]:
        np.testing.assert_array_equal(buffer_bytes(buffer), (1 + np.arange(128)) % 256)
