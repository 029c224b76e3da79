"""cuda.core ``Buffer`` and ``StridedMemoryView`` arguments, without a GPU.

fastlaunch reads both itself (``read_buffer`` / ``read_view`` in
``rust/ext/src/classify/cuda_core.rs``) and must type them exactly as numba-cuda does
(``numba.cuda.typing.typeof``): a buffer as a writable 1-D C uint8 array, a view as an
array of its dtype, ndim, layout and read-only flag. One intended difference: numba-cuda
refuses views that are not contiguous, fastlaunch passes them with layout 'A'.

Device memory is faked: views come from NumPy arrays whose DLPack capsule is relabelled as
CUDA memory (never dereferenced), buffers from a ``Buffer`` subclass that answers the
questions cuda.core would otherwise ask the driver.
"""

from __future__ import annotations

import ctypes
import struct
import textwrap
from pathlib import Path

import numpy as np
import pytest
from arrays import DTYPES, PTR, FakeCAI
from numba.cuda import types
from numba.cuda.typing.typeof import Purpose, typeof

from fastlaunch import KernelArgumentError, _core
from fastlaunch.dispatcher import numba_type

core = pytest.importorskip("cuda.core")
StridedMemoryView = core.utils.StridedMemoryView
Buffer = core.Buffer

KDL_CUDA = 2

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def numba_typeof(obj):
    return typeof(obj, Purpose.argument)


def ours(obj):
    return numba_type(_core.classify(obj))


class OnDevice:
    """A DLPack producer over a NumPy array whose capsule says the memory is on CUDA device
    ``device_id``. Versioned capsules carry NumPy's read-only flag."""

    def __init__(self, array: np.ndarray, device_id: int = 0):
        self.array = array
        self.device_id = device_id

    def __dlpack_device__(self):
        return (KDL_CUDA, self.device_id)

    def __dlpack__(self, stream=None, max_version=None, **_kwargs):
        if max_version is not None and max_version >= (1, 0):
            capsule = self.array.__dlpack__(max_version=max_version)
            # DLManagedTensorVersioned: version (8 bytes), manager_ctx, deleter, flags, then
            # the DLTensor
            tensor = _get_pointer(capsule, b"dltensor_versioned") + 32
        else:
            capsule = self.array.__dlpack__()
            tensor = _get_pointer(capsule, b"dltensor")
        # DLTensor: void* data; DLDevice {int32 device_type; int32 device_id}; ...
        ctypes.c_int32.from_address(tensor + 8).value = KDL_CUDA
        ctypes.c_int32.from_address(tensor + 12).value = self.device_id
        return capsule


def device_view(array: np.ndarray, device_id: int = 0):
    return StridedMemoryView.from_dlpack(OnDevice(array, device_id), stream_ptr=-1)


class DeviceBuffer(Buffer):
    """A cuda.core Buffer on device 0 that never asks the driver where it lives."""

    @property
    def device_id(self):
        return 0

    @property
    def is_device_accessible(self):
        return True

    @property
    def is_host_accessible(self):
        return False


class HostBuffer(DeviceBuffer):
    @property
    def device_id(self):
        return -1

    @property
    def is_device_accessible(self):
        return False

    @property
    def is_host_accessible(self):
        return True


def make_buffer(cls=DeviceBuffer, ptr=PTR, size=4096):
    # Buffer.from_handle always makes a base Buffer; its classmethod _init makes `cls`.
    return cls._init(ptr, size)


def packed(args):
    """``args`` packed for the numba types they describe as."""
    param_types = tuple(numba_type(d) for d in _core.describe(_core.fingerprint(args)))
    raw = _core.pack(param_types, args)
    return struct.unpack(f"<{len(raw) // 8}q", raw)


# -- StridedMemoryView ---------------------------------------------------------------------


def contiguous_views(dtype):
    base = np.arange(24).astype(dtype)
    return {
        "1d": base,
        "2d-C": base.reshape(4, 6),
        "2d-F": np.asfortranarray(base.reshape(4, 6)),
        "3d-permuted": base.reshape(2, 3, 4).transpose(1, 0, 2),  # dense, neither C nor F
        "0d": base[3:4].reshape(()),
        "empty": base[:0].reshape(0, 3),
        "extent-1": base[:6].reshape(1, 6, 1),
    }


def strided_views(dtype):
    base = np.arange(24).astype(dtype)
    return {
        "slice": base.reshape(4, 6)[::2, 1::3],
        "negative": base[::-1],
        "broadcast": np.lib.stride_tricks.as_strided(base[:6], (4, 6), (0, base.itemsize)),
    }


def layout_letter(array: np.ndarray) -> str:
    if array.flags.c_contiguous:
        return "C"
    return "F" if array.flags.f_contiguous else "A"


CONTIGUOUS = [(d, name) for d in DTYPES for name in contiguous_views(d)]
STRIDED = [(d, name) for d in DTYPES for name in strided_views(d)]


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
@pytest.mark.parametrize(("dtype", "name"), CONTIGUOUS, ids=[f"{d}-{n}" for d, n in CONTIGUOUS])
def test_contiguous_views_type_as_numba_types_them(dtype, name, readonly):
    array = contiguous_views(dtype)[name]
    array.flags.writeable = not readonly  # NumPy's versioned DLPack capsule carries the flag
    view = device_view(array)
    assert view.readonly is readonly
    assert _core.classify(view) == ("array", dtype, array.ndim, layout_letter(array), readonly)
    assert ours(view) == numba_typeof(view)


@pytest.mark.parametrize(("dtype", "name"), STRIDED, ids=[f"{d}-{n}" for d, n in STRIDED])
def test_strided_views_are_layout_a_where_numba_refuses_them(dtype, name):
    array = strided_views(dtype)[name]
    view = device_view(array)
    assert _core.classify(view) == ("array", dtype, array.ndim, "A", False)
    # numba-cuda 0.30.4 types only contiguous views; fastlaunch packs any strides.
    with pytest.raises(ValueError, match="must be contiguous"):
        numba_typeof(view)


@pytest.mark.parametrize(
    "view_of",
    [lambda d: contiguous_views(d), lambda d: strided_views(d)],
    ids=["contiguous", "strided"],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_views_pack_pointer_shape_and_byte_strides(dtype, view_of):
    for array in view_of(dtype).values():
        view = device_view(array)
        got = packed((view,))
        ptr = array.__array_interface__["data"][0]
        assert got == (0, 0, array.size, array.itemsize, ptr, *array.shape, *array.strides)


@pytest.mark.parametrize(
    ("shape", "strides", "byte_strides", "layout"),
    [
        ((3, 4), None, (16, 4), "C"),
        ((2, 3, 4), None, (48, 16, 4), "C"),
        ((5,), None, (4,), "C"),
        ((), None, (), "C"),
        ((0, 3), None, (12, 4), "C"),
        ((3, 4), (4, 1), (16, 4), "C"),
        ((3, 4), (1, 3), (4, 12), "F"),
        ((2, 3, 4), (1, 8, 2), (4, 32, 8), "A"),  # permuted, dense
        ((3, 4), (8, 2), (32, 8), "A"),  # strided
        ((3, 4), (0, 1), (0, 4), "A"),  # broadcast
        ((1, 4), (99, 1), (396, 4), "C"),  # extent 1: its stride places no constraint
    ],
    ids=str,
)
def test_views_of_buffers_strides_count_elements(shape, strides, byte_strides, layout):
    """``from_buffer`` views report the strides they were given, in elements, or None for
    C-contiguous ones: packed as byte strides."""
    buffer = make_buffer()
    view = StridedMemoryView.from_buffer(buffer, shape, strides, dtype=np.dtype(np.float32))
    assert view.strides == strides
    assert _core.classify(view) == ("array", "float32", len(shape), layout, False)
    assert packed((view,)) == (
        0,
        0,
        int(np.prod(shape)),
        4,
        PTR,
        *shape,
        *byte_strides,
    )
    if view._layout.is_contiguous_any:  # numba-cuda types dense views only
        assert ours(view) == numba_typeof(view)
    else:
        with pytest.raises(ValueError, match="must be contiguous"):
            numba_typeof(view)


def test_read_only_views_of_buffers():
    view = StridedMemoryView.from_buffer(
        make_buffer(), (3, 4), dtype=np.dtype(np.int16), is_readonly=True
    )
    assert _core.classify(view) == ("array", "int16", 2, "C", True)
    assert ours(view) == numba_typeof(view) == types.Array(types.int16, 2, "C", readonly=True)
    writable = StridedMemoryView.from_buffer(make_buffer(), (3, 4), dtype=np.dtype(np.int16))
    assert _core.fingerprint((view,)) != _core.fingerprint((writable,))


def test_views_without_a_dtype_are_refused_naming_the_argument():
    view = StridedMemoryView.from_buffer(make_buffer(), (3, 4), itemsize=4)
    assert view.dtype is None
    with pytest.raises(
        KernelArgumentError,
        match=r"^argument 1: cuda\.core\._memoryview\.StridedMemoryView has no dtype "
        r"\(made from a Buffer with an itemsize only\); give it a dtype$",
    ):
        _core.fingerprint((1.0, view))


def test_structured_views_go_to_numbas_launch_path():
    record = np.dtype([("a", np.float32), ("b", np.int32)])
    view = StridedMemoryView.from_buffer(make_buffer(), (4,), dtype=record)
    with pytest.raises(TypeError, match="passed by numba-cuda's own launch path"):
        _core.classify(view)


def test_views_of_host_memory_are_refused_naming_the_argument():
    host = StridedMemoryView.from_dlpack(np.zeros(3, np.float32), stream_ptr=-1)
    assert not host.is_device_accessible
    with pytest.raises(
        KernelArgumentError,
        match=r"^argument 2: cuda\.core\._memoryview\.StridedMemoryView is not in CUDA memory "
        r"\(is_device_accessible is False\); move it to the GPU first$",
    ):
        _core.fingerprint((1, 2.0, host))
    try:
        # cuda.core asks the driver for the current device here
        host = StridedMemoryView.from_array_interface(np.zeros((2, 2), np.float64))
    except Exception as e:  # whatever cuda.core raises without libcuda
        pytest.skip(f"StridedMemoryView.from_array_interface needs a driver: {e}")
    with pytest.raises(KernelArgumentError, match="is not in CUDA memory"):
        _core.classify(host)


def test_views_of_host_buffers_are_refused():
    view = StridedMemoryView.from_buffer(make_buffer(HostBuffer), (8,), dtype=np.dtype(np.uint8))
    assert not view.is_device_accessible
    with pytest.raises(KernelArgumentError, match="StridedMemoryView is not in CUDA memory"):
        _core.classify(view)


def test_subclasses_of_views_are_read_as_views():
    class Labelled(StridedMemoryView):
        pass

    view = Labelled.from_dlpack(OnDevice(np.zeros((2, 3), np.float32)), stream_ptr=-1)
    assert type(view) is Labelled
    assert _core.classify(view) == ("array", "float32", 2, "C", False)


def test_look_alikes_outside_cuda_core_are_generic_dlpack_producers():
    """Only cuda.core's own classes (and their subclasses) are recognised by name."""
    calls = []

    class StridedMemoryView(OnDevice):  # the name is the point
        def __dlpack__(self, stream=None, **kwargs):
            calls.append(stream)
            return super().__dlpack__(stream, **kwargs)

    array = np.zeros(4, np.int32)
    assert _core.classify(StridedMemoryView(array)) == ("array", "int32", 1, "C", False)
    assert calls == [1]  # asked through __dlpack__(stream=...), as any producer


# -- Buffer --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 7, 4096])
def test_buffers_type_as_numba_types_them(size):
    buffer = make_buffer(size=size)
    assert _core.classify(buffer) == ("array", "uint8", 1, "C", False)
    assert ours(buffer) == numba_typeof(buffer) == types.Array(types.uint8, 1, "C")
    assert packed((buffer,)) == (0, 0, size, 1, PTR, size, 1)


def test_buffers_share_the_overload_of_uint8_arrays():
    """Same numba type, same fingerprint: one compiled overload serves both."""
    assert _core.fingerprint((make_buffer(size=64),)) == _core.fingerprint((FakeCAI((64,), "|u1"),))


def test_base_buffers_are_recognised():
    """``Buffer.from_handle`` makes cuda.core's own class, which asks the driver whether its
    memory is device-accessible: without a driver the failure names the argument, with one
    a pointer it does not know is host memory, refused."""
    buffer = Buffer.from_handle(PTR, 16)
    assert type(buffer) is Buffer
    try:
        buffer.is_device_accessible  # noqa: B018 - cuda.core asks the driver
    except Exception:  # whatever cuda.core raises without libcuda
        with pytest.raises(KernelArgumentError, match=r"^argument 0: .*\.is_device_accessible"):
            _core.classify(buffer)
        return
    # With a driver, a host pointer it does not know is not device-accessible.
    with pytest.raises(KernelArgumentError, match="is not in CUDA memory"):
        _core.classify(buffer)


def test_buffers_in_host_memory_are_refused_naming_the_argument():
    with pytest.raises(
        KernelArgumentError,
        match=r"^argument 1: .*HostBuffer is not in CUDA memory \(is_device_accessible is "
        r"False\); move it to the GPU first$",
    ):
        _core.fingerprint((make_buffer(), make_buffer(HostBuffer)))


def test_closed_buffers_are_empty():
    buffer = make_buffer(size=64)
    buffer.close()
    assert packed((buffer,)) == (0, 0, 0, 1, 0, 0, 1)


def test_buffers_and_views_mix_with_other_arguments():
    view = device_view(np.zeros((3, 4), np.float64, order="F"))
    args = (make_buffer(), 2.5, view, FakeCAI((5,), "<i4"), np.int8(3))
    assert [numba_type(d) for d in _core.describe(_core.fingerprint(args))] == [
        types.Array(types.uint8, 1, "C"),
        types.float64,
        types.Array(types.float64, 2, "F"),
        types.Array(types.int32, 1, "C"),
        types.int8,
    ]


# -- the launch path, against the stand-in driver ------------------------------------------

LAUNCH = textwrap.dedent(
    """
    import sys
    import numpy as np
    import fastlaunch as fl
    from fastlaunch import _core
    from fastlaunch.dispatcher import numba_type
    sys.path.insert(0, {tests!r})
    from test_cpu_core_objects import DeviceBuffer, device_view, make_buffer

    assert fl.is_available(), _core.unavailable_reason()

    def k(view, buffer, scale):
        pass

    kernel = fl.jit(k)
    args = (device_view(np.zeros((4, 6), np.float32)[:, ::2]), make_buffer(), 2.0)
    fingerprint = _core.fingerprint(args)
    param_types = tuple(numba_type(d) for d in _core.describe(fingerprint))
    kernel._register(fingerprint, 90, param_types, _core.CompiledKernel(b"image", "entry"))
    for _ in range(3):
        kernel[1, 1](*args)
    kernel[1, 1].bind(*args)()
    assert kernel.numba_launches == 0 and kernel.miss_count == 0, kernel.numba_launches
    print("launched")

    class OnDevice1(DeviceBuffer):
        device_id = property(lambda self: 1)

    view_on_1 = device_view(np.zeros((4, 6), np.float32)[:, ::2], device_id=1)
    for refused in ((view_on_1, args[1], 2.0), (args[0], make_buffer(OnDevice1), 2.0)):
        try:
            kernel[1, 1](*refused)
        except fl.KernelArgumentError as e:
            print(e)
        else:
            print("accepted")
    """
)


def test_launches_take_the_fast_path_and_check_devices(run_on_stand_in):
    """Against the stand-in driver (tests/stand_in_driver, one device): views and buffers are
    packed by fastlaunch, and one that names device 1 is refused by the device check."""
    lines = run_on_stand_in(LAUNCH.format(tests=str(Path(__file__).parent)))
    assert lines[0] == "launched"
    refusal = (
        "its memory is on device 1 (the device its source names) but the launch is on device 0"
    )
    assert len(lines) == 3
    assert lines[1].startswith("argument 0 (view): ") and refusal in lines[1]
    assert lines[2].startswith("argument 1 (buffer): ") and refusal in lines[2]
