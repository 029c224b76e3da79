"""Arrays of records (structured dtypes, numba-cuda's xoroshiro128p random states among them),
of datetime64 and of timedelta64 on fastlaunch's own path, without a GPU: typed exactly as
numba-cuda types them (``typeof(array, Purpose.argument)``), one fingerprint per dtype, packed
as numba-cuda's own ``_prepare_args`` packs them, checked for alignment as other arrays are,
and launched, remembered, bound and captured by fastlaunch on the stand-in driver. Sources:
numba-cuda device arrays, host NumPy arrays and the ``cuda.In`` / ``Out`` hints around them
(staged copies), and CUDA Array Interface objects (datetimes only: numba-cuda types a CAI by
its typestr alone, so a structured one, ``"|V16"``, stays numba-cuda's). The kernels' reads
and writes are proven on the GPU (tests/test_gpu_records.py)."""

from __future__ import annotations

import itertools
import struct
import types as pytypes

import numpy as np
import pytest
from arrays import FakeCAI
from cuda.bindings import driver as bindings
from numba import cuda
from numba.cuda.cudadrv import driver as numba_driver
from numba.cuda.cudadrv.devicearray import DeviceNDArray
from numba.cuda.dispatcher import _Kernel
from numba.cuda.random import xoroshiro128p_dtype
from numba.cuda.typing.typeof import Purpose, typeof
from test_cpu_repeat import PRELUDE as REPEAT_PRELUDE

from fastlaunch import KernelArgumentError, _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.dispatcher import numba_type

PACKED = np.dtype([("x", np.int32), ("y", np.float64)])
ALIGNED = np.dtype([("x", np.int32), ("y", np.float64)], align=True)
NESTED = np.dtype([("v", np.float32, (3,)), ("inner", ALIGNED), ("n", np.int16)], align=True)
RECORDS = {
    "packed": PACKED,
    "aligned": ALIGNED,
    "nested": NESTED,
    "xoroshiro128p": xoroshiro128p_dtype,
}
DATETIMES = {
    unit or "generic": np.dtype(f"{kind}8[{unit}]" if unit else f"{kind}8")
    for kind, unit in itertools.product("Mm", ["", "Y", "D", "h", "s", "ms", "us", "ns", "as"])
}
DTYPES = {**RECORDS, **{f"{dtype.name}": dtype for dtype in DATETIMES.values()}}
POINTER = 0x7000_0000


def device_array(shape, dtype, pointer=POINTER, order="C"):
    """A numba-cuda device array over a made-up pointer (never dereferenced)."""
    dtype = np.dtype(dtype)
    strides = np.empty(shape, dtype, order=order).strides
    memory = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(pointer), 1 << 20)
    return DeviceNDArray(shape, strides, dtype, gpu_data=numba_driver.OwnedPointer(memory))


def strided_view(dtype):
    """``base[1:, ::2]`` of a (4, 6) array: layout 'A'."""
    dtype = np.dtype(dtype)
    memory = numba_driver.MemoryPointer(
        None, bindings.CUdeviceptr(POINTER + 6 * dtype.itemsize), 1 << 20
    )
    strides = (6 * dtype.itemsize, 2 * dtype.itemsize)
    return DeviceNDArray((3, 3), strides, dtype, gpu_data=numba_driver.OwnedPointer(memory))


SOURCES = {
    "numba-1d": lambda dtype: device_array((5,), dtype),
    "numba-2d-C": lambda dtype: device_array((3, 4), dtype),
    "numba-2d-F": lambda dtype: device_array((3, 4), dtype, order="F"),
    "numba-strided": strided_view,
    "host-1d": lambda dtype: np.zeros(5, dtype),
    "host-2d-F": lambda dtype: np.zeros((3, 4), dtype, order="F"),
    "host-empty": lambda dtype: np.zeros((0, 3), dtype),
    "host-read-only": lambda dtype: np.frombuffer(bytes(3 * np.dtype(dtype).itemsize), dtype),
    "cuda.In": lambda dtype: cuda.In(np.zeros(3, dtype)),
    "cuda.Out": lambda dtype: cuda.Out(np.zeros((2, 2), dtype)),
}


def numba_prepare_args(array) -> list[int]:
    """The parameters numba-cuda's own ``_Kernel._prepare_args`` appends for a device array
    (no GPU needed for one that is already on the device)."""
    kernelargs: list = []
    kernel = pytypes.SimpleNamespace(extensions=[])
    _Kernel._prepare_args(kernel, typeof(array, Purpose.argument), array, 0, [], kernelargs)
    return [int(arg) for arg in kernelargs]


def slots(raw: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(raw) // 8}q", raw))


# -- typing ------------------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_arrays_are_typed_as_numba_cuda_types_them(dtype, source):
    array = SOURCES[source](dtype)
    descriptor = _core.classify(array)
    assert descriptor[0] == "array"
    assert numba_type(descriptor) == typeof(array, Purpose.argument)


@pytest.mark.parametrize("dtype", DATETIMES.values(), ids=[d.name for d in DATETIMES.values()])
def test_cuda_array_interface_datetimes_are_typed_as_numba_cuda_types_them(dtype):
    interface = FakeCAI((4, 2), dtype.str)
    descriptor = _core.classify(interface)
    assert descriptor == ("array", dtype.name, 2, "C", False)
    assert numba_type(descriptor) == typeof(interface, Purpose.argument)


def test_one_dtype_has_one_fingerprint_and_every_other_its_own():
    fingerprints = {}
    for name, dtype in DTYPES.items():
        first, second = device_array((4,), dtype), device_array((4,), dtype, POINTER + 4096)
        assert _core.fingerprint((first,)) == _core.fingerprint((second,)), name
        assert _core.fingerprint((first,)) == _core.fingerprint((np.zeros(4, dtype),)), name
        fingerprints[_core.fingerprint((first,))] = name
    assert len(fingerprints) == len(DTYPES)
    # an array of records is no record, nor an array of its first field's type
    record = np.zeros(1, ALIGNED)[0]
    array = device_array((1,), ALIGNED)
    assert _core.fingerprint((array,)) != _core.fingerprint((record,))
    assert _core.fingerprint((array,)) != _core.fingerprint((device_array((1,), np.int32),))


def test_dtypes_numba_types_alike_share_one_fingerprint():
    """A dtype made afresh for each array (``device_array(n, dtype=[...])``) is another
    object each time: equal ones name one record type, so no launch misses for it."""
    fresh = [np.dtype([("x", np.int32), ("y", np.float64)], align=True) for _ in range(50)]
    assert len({id(dtype) for dtype in fresh}) > 1
    arrays = {_core.fingerprint((device_array((4,), dtype),)) for dtype in [ALIGNED, *fresh]}
    records = {_core.fingerprint((np.zeros(1, dtype)[0],)) for dtype in [ALIGNED, *fresh]}
    assert len(arrays) == len(records) == 1
    # a record array's np.record dtype is the same numba type
    recarray_dtype = np.recarray(1, dtype=ALIGNED).dtype
    assert typeof(device_array((4,), recarray_dtype)) == typeof(device_array((4,), ALIGNED))
    assert _core.fingerprint((device_array((4,), recarray_dtype),)) == _core.fingerprint(
        (device_array((4,), ALIGNED),)
    )


def test_equal_dtypes_aligned_differently_are_other_types():
    same_layout = np.dtype(
        {"names": ["x", "y"], "formats": [np.int32, np.float64], "offsets": [0, 8], "itemsize": 16}
    )
    assert same_layout == ALIGNED and not same_layout.isalignedstruct  # NumPy: equal
    packed, aligned = device_array((4,), same_layout), device_array((4,), ALIGNED)
    # numba-cuda 0.30 types them apart; 0.26 types both as aligned records (one type, which
    # two fingerprints naming it do not change)
    if numba_cuda.version()[:2] >= (0, 30):
        assert typeof(packed) != typeof(aligned)
    assert _core.fingerprint((packed,)) != _core.fingerprint((aligned,))
    assert numba_type(_core.classify(packed)) == typeof(packed)


def test_a_record_arrays_np_record_dtype_is_aligned_as_its_fields_are():
    """numba-cuda's ``to_device`` of a record array keeps its ``np.record`` dtype, whose
    ``alignment`` says 1 for an aligned struct: its fields' alignment is what counts."""
    recarray_dtype = np.recarray(1, dtype=NESTED).dtype
    assert recarray_dtype.alignment == 1 and recarray_dtype.isalignedstruct
    misaligned = device_array((4,), recarray_dtype, POINTER + 4)
    with pytest.raises(KernelArgumentError, match="not aligned to 8 bytes"):
        _core.classify(misaligned)


def test_record_arrays_and_records_of_one_dtype_name_the_same_type():
    array, record = device_array((2,), NESTED), np.zeros(1, NESTED)[0]
    array_descriptor, record_descriptor = _core.describe(_core.fingerprint((array, record)))
    assert array_descriptor[1] is record_descriptor[1] is NESTED  # by the dtype's id
    assert numba_type(array_descriptor).dtype == numba_type(record_descriptor)


def test_record_arrays_in_tuples_fingerprint_each_member():
    pair = (device_array((2,), ALIGNED), device_array((2,), "M8[ns]"))
    (descriptor,) = _core.describe(_core.fingerprint((pair,)))
    assert numba_type(descriptor) == typeof(pair, Purpose.argument)


# -- packing -----------------------------------------------------------------------------


@pytest.mark.parametrize("source", [name for name in SOURCES if name.startswith("numba")])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_device_arrays_pack_as_numba_cudas_prepare_args_does(dtype, source):
    array = SOURCES[source](dtype)
    packed = slots(_core.pack((typeof(array, Purpose.argument),), (array,)))
    assert packed == numba_prepare_args(array)
    meminfo, parent, nitems, itemsize, data, *dims = packed
    assert (meminfo, parent, nitems, itemsize) == (0, 0, array.size, np.dtype(dtype).itemsize)
    assert (data, dims) == (array.device_ctypes_pointer.value, [*array.shape, *array.strides])


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_host_arrays_pack_their_shape_strides_and_itemsize(dtype):
    array = np.zeros((3, 4), dtype)
    # not staged without a launch: the data slot holds the host address until then
    packed = slots(_core.pack((typeof(array, Purpose.argument),), (array,)))
    assert packed == [0, 0, 12, array.itemsize, array.ctypes.data, 3, 4, *array.strides]


# -- checks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, alignment",
    [(ALIGNED, 8), (NESTED, 8), (xoroshiro128p_dtype, 8), (np.dtype("M8[s]"), 8)],
    ids=["aligned", "nested", "xoroshiro128p", "datetime"],
)
def test_misaligned_data_and_strides_are_refused_naming_the_argument(dtype, alignment):
    misaligned = device_array((4,), dtype, POINTER + alignment // 2)
    with pytest.raises(KernelArgumentError, match=f"not aligned to {alignment} bytes") as error:
        _core.pack((types_of(misaligned),), (misaligned,))
    assert error.value.position == 0
    memory = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(POINTER), 1 << 20)
    stride = dtype.itemsize + alignment // 2
    strided = DeviceNDArray((4,), (stride,), dtype, gpu_data=numba_driver.OwnedPointer(memory))
    with pytest.raises(KernelArgumentError, match=f"not a multiple of {alignment}"):
        _core.pack((types_of(strided),), (strided,))


def test_packed_records_take_any_address_as_numba_aligns_them_to_one_byte():
    assert PACKED.alignment == 1
    array = device_array((4,), PACKED, POINTER + 3)
    assert slots(_core.pack((types_of(array),), (array,)))[4] == POINTER + 3


def test_negative_extents_are_refused():
    with pytest.raises(KernelArgumentError, match="negative extent"):
        _core.classify(FakeCAI((-1,), "<M8[ns]", strides=(8,)))


def test_read_only_datetime_interfaces_are_read_only_arrays():
    interface = FakeCAI((4,), "<m8[us]", readonly=True)
    assert _core.classify(interface) == ("array", "timedelta64[us]", 1, "C", True)
    assert numba_type(_core.classify(interface)) == typeof(interface, Purpose.argument)


def types_of(array):
    return typeof(array, Purpose.argument)


NUMBA_CUDAS = "numba-cuda's own launch path"


@pytest.mark.parametrize(
    "make",
    [
        lambda: device_array((4,), "V8"),
        lambda: np.zeros(4, "V8"),
        lambda: FakeCAI((4,), "|V8"),
        lambda: FakeCAI((4,), "|V16"),  # a structured array's typestr: numba-cuda types raw bytes
        lambda: device_array((4,), "M8[10s]"),
        lambda: FakeCAI((4,), "<m8[7D]"),
        lambda: device_array((4,), ">M8[ns]"),
        lambda: np.zeros(4, np.dtype([("o", object)])),
    ],
    ids=[
        "numba-void",
        "host-void",
        "cai-void",
        "cai-structured",
        "numba-datetime-multiple",
        "cai-timedelta-multiple",
        "numba-big-endian-datetime",
        "host-object-record",
    ],
)
def test_what_numba_cuda_types_otherwise_stays_numba_cudas(make):
    with pytest.raises(TypeError, match=NUMBA_CUDAS):
        _core.classify(make())


def test_numba_cuda_types_a_structured_cuda_array_interface_by_its_typestr_alone():
    """Why such an interface stays numba-cuda's: its ``descr`` is not read, and the raw
    bytes its typestr names have no numba type."""
    host = np.zeros(4, ALIGNED)
    interface = FakeCAI((4,), host.__array_interface__["typestr"])
    interface.__cuda_array_interface__["descr"] = host.__array_interface__["descr"]
    with pytest.raises(Exception, match=r"\|V16"):
        typeof(interface, Purpose.argument)


# -- launches on the stand-in driver -----------------------------------------------------

PRELUDE = (
    REPEAT_PRELUDE
    + """
from numba import cuda
from numba.cuda.random import xoroshiro128p_dtype

RECORD = np.dtype([("x", np.int32), ("y", np.float64)], align=True)

def slots(raw):
    return list(struct.unpack(f"<{len(raw) // 8}q", raw))

states = device_array((64,), 0x1000_0000, xoroshiro128p_dtype)
records = device_array((4, 3), 0x2000_0000, RECORD)
stamps = device_array((5,), 0x3000_0000, "M8[ns]")
spans = device_array((5,), 0x4000_0000, "m8[s]")
DEVICE_ARGS = (states, records, stamps, spans, 2.5)
"""
)


def test_device_record_and_datetime_arrays_are_launched_and_remembered_by_fastlaunch(
    run_on_stand_in,
):
    lines = run_on_stand_in(
        PRELUDE
        + """
kernel = kernel_for(len(DEVICE_ARGS))
types = register(kernel, DEVICE_ARGS)
before = _core._remembered_launches()[1]
for _ in range(4):
    kernel[1, 1](*DEVICE_ARGS)
    assert _core._submitted() == _core.pack(types, DEVICE_ARGS)
print(kernel.numba_launches, kernel.miss_count, _core._remembered_launches()[1] - before)
print(*_core._remembered_checks(), sep=",")
other = device_array((64,), 0x5000_0000, xoroshiro128p_dtype)
kernel[1, 1](other, *DEVICE_ARGS[1:])  # another array of the same type: read, same overload
print(slots(_core._submitted())[4] == 0x5000_0000, kernel.miss_count)
misaligned = device_array((64,), 0x5000_0004, xoroshiro128p_dtype)
try:
    kernel[1, 1](misaligned, *DEVICE_ARGS[1:])
except fl.KernelArgumentError as error:
    print(error.position, error.name, "not aligned to 8 bytes" in str(error))
"""
    )
    assert lines == [
        "0 0 3",
        "numba array,numba array,numba array,numba array,scalar",
        "True 0",
        "0 a0 True",
    ]


def test_device_record_and_datetime_arrays_are_bound_and_captured(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
kernel = kernel_for(len(DEVICE_ARGS))
types = register(kernel, DEVICE_ARGS)
bound = kernel[1, 1].bind(*DEVICE_ARGS)
print(bound.packed == _core.pack(types, DEVICE_ARGS))
bound()
other = device_array((64,), 0x5000_0000, xoroshiro128p_dtype)
bound.set_arg(0, other)
print(slots(bound.packed)[4] == 0x5000_0000)
try:
    bound.set_arg(1, device_array((4, 3), 0x6000_0000, np.dtype([("x", np.int32)])))
except fl.KernelArgumentError as error:
    print("same type" in str(error))
graph = _core.Graph(0x5000)
with graph:
    kernel[1, 1, 0x5000](*DEVICE_ARGS)
(launch,) = graph.launches
launch.set_arg(2, device_array((5,), 0x7000_0000, "M8[ns]"))
print(graph.node_count, kernel.numba_launches)
"""
    )
    # another record dtype is another type
    assert lines == ["True", "True", "True", "1 0"]


def test_host_record_and_datetime_arrays_are_staged_by_fastlaunch(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
host_records = np.zeros(6, RECORD)
host_records["x"] = np.arange(6)
host_stamps = np.arange(4).astype("datetime64[D]")
host_states = np.zeros((2, 3), xoroshiro128p_dtype, order="F")
args = (host_records, host_stamps, host_states)
kernel = kernel_for(len(args))
types = register(kernel, args)
kernel[1, 1](*args)
submitted = slots(_core._submitted())
for array in args:
    meminfo, parent, nitems, itemsize, data, *rest = submitted[: 5 + 2 * array.ndim]
    submitted = submitted[5 + 2 * array.ndim :]
    assert (nitems, itemsize) == (array.size, array.itemsize)
    assert data not in (0, array.ctypes.data)  # a device copy's address
    assert rest == [*array.shape, *array.strides]
print(kernel.numba_launches, kernel.miss_count)
print(host_records["x"].tolist(), host_stamps.astype(np.int64).tolist())
"""
    )
    assert lines == ["0 0", "[0, 1, 2, 3, 4, 5] [0, 1, 2, 3]"]
