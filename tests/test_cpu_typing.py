"""Argument typing: fastlaunch's fingerprint fixes exactly the numba type numba-cuda gives.

``_core.classify(obj)`` returns the descriptor the miss path turns into a numba type
(``fastlaunch.dispatcher.numba_type``); it must equal
``numba.cuda.typing.typeof.typeof(obj, Purpose.argument)``. The one intended difference:
numba-cuda types every ``__cuda_array_interface__`` that reports strides as layout 'A'
(it compares strides against the dtype's *bit* width), while fastlaunch computes C/F/A
from the strides, as NumPy does.

The property tests (hypothesis) check the layout against NumPy's own contiguity flags,
the packed array against the shape and strides it was given, and that no CAI, however
malformed, makes ``classify`` raise anything but ``KernelArgumentError``.
"""

from __future__ import annotations

import ctypes
import math
import string
import struct

import numpy as np
import pytest
from arrays import DTYPES, FakeCAI
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from numba.cuda import types
from numba.cuda.np import numpy_support
from numba.cuda.typing.typeof import Purpose, typeof

from fastlaunch import KernelArgumentError, _core
from fastlaunch.dispatcher import numba_type


def numba_typeof(obj):
    return typeof(obj, Purpose.argument)


def ours(obj):
    return numba_type(_core.classify(obj))


def typestr(dtype: str) -> str:
    return np.dtype(dtype).str


def c_strides(shape, itemsize):
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.insert(0, step)
        step *= max(extent, 1)
    return tuple(strides)


def f_strides(shape, itemsize):
    strides, step = [], itemsize
    for extent in shape:
        strides.append(step)
        step *= max(extent, 1)
    return tuple(strides)


def numpy_layout(shape, strides, dtype) -> str:
    """numba's layout letter for these strides, from NumPy's own contiguity flags."""
    if strides is None:
        return "C"
    view = np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=shape, strides=strides)
    if view.flags.c_contiguous:
        return "C"
    return "F" if view.flags.f_contiguous else "A"


# -- scalars ---------------------------------------------------------------------------

SCALARS = [
    True,
    False,
    0,
    1,
    -1,
    2**31,
    2**63 - 1,
    -(2**63),
    2**63,
    2**64 - 1,
    0.0,
    -1.5,
    math.inf,
    math.nan,
    1j,
    complex(1, -2),
    *(np.dtype(d).type(1) for d in DTYPES),
    *(np.dtype(d).type(0) for d in DTYPES),
    np.float16(math.nan),
    np.uint64(2**64 - 1),
    np.int64(-(2**63)),
]


@pytest.mark.parametrize("value", SCALARS, ids=repr)
def test_scalars_type_as_numba_types_them(value):
    descriptor = _core.classify(value)
    assert descriptor[0] == "scalar"
    assert numba_type(descriptor) == numba_typeof(value)


@pytest.mark.parametrize(
    ("value", "name"),
    [(1, "int64"), (2**63, "uint64"), (True, "boolean"), (1.0, "float64"), (1j, "complex128")]
    + [(np.dtype(d).type(0), "boolean" if d == "bool" else d) for d in DTYPES],
    ids=repr,
)
def test_scalar_descriptors(value, name):
    assert _core.classify(value) == ("scalar", name)


# -- arrays without strides: exactly numba's types ---------------------------------------

SHAPES = [(), (0,), (1,), (7,), (3, 4), (0, 4), (4, 0), (1, 1), (2, 3, 4), (2, 1, 0, 3)]


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cai_without_strides_types_as_numba(dtype, shape, readonly):
    cai = FakeCAI(shape, typestr(dtype), None, readonly=readonly)
    assert _core.classify(cai) == ("array", dtype, len(shape), "C", readonly)
    assert ours(cai) == numba_typeof(cai)


@pytest.mark.parametrize("readonly", [True, np.True_, False, np.False_], ids=repr)
def test_readonly_flag(readonly):
    cai = FakeCAI((3,), "<f4", None, readonly=readonly)
    ty = ours(cai)
    assert ty == numba_typeof(cai)
    assert ty.mutable is not bool(readonly)
    assert ty == types.Array(types.float32, 1, "C", readonly=bool(readonly))


def test_typestr_forms():
    """'<' (little-endian), '|' (not applicable) and '=' (native) are all accepted."""
    assert _core.classify(FakeCAI((2,), "|b1"))[1] == "bool"
    assert _core.classify(FakeCAI((2,), "|u1"))[1] == "uint8"
    assert _core.classify(FakeCAI((2,), "=f8"))[1] == "float64"
    assert _core.classify(FakeCAI((2,), "<c16"))[1] == "complex128"


# -- arrays with strides: the one intended difference ------------------------------------


def explicit_cases():
    """(dtype, shape, strides, our layout) for arrays that report their strides."""
    cases = []
    for dtype in DTYPES:
        size = np.dtype(dtype).itemsize
        cases += [
            (dtype, (5,), (size,), "C"),
            (dtype, (3, 4), c_strides((3, 4), size), "C"),
            (dtype, (2, 3, 4), c_strides((2, 3, 4), size), "C"),
            (dtype, (3, 4), f_strides((3, 4), size), "F"),
            (dtype, (2, 3, 4), f_strides((2, 3, 4), size), "F"),
            (dtype, (5,), (2 * size,), "A"),
            (dtype, (5,), (-size,), "A"),
            (dtype, (3, 4), (4 * size, 2 * size), "A"),
            (dtype, (3, 4), (0, size), "A"),  # broadcast
            (dtype, (2, 3, 4), (size, 8 * size, 2 * size), "A"),  # permuted
        ]
    return cases


@pytest.mark.parametrize(
    ("dtype", "shape", "strides", "layout"),
    explicit_cases(),
    ids=[f"{d}-{s}-{st}" for d, s, st, _ in explicit_cases()],
)
def test_cai_with_strides_layout_from_strides(dtype, shape, strides, layout):
    cai = FakeCAI(shape, typestr(dtype), strides)
    assert _core.classify(cai) == ("array", dtype, len(shape), layout, False)
    assert layout == numpy_layout(shape, strides, dtype)
    ty = ours(cai)
    assert ty == types.Array(numpy_support.from_dtype(np.dtype(dtype)), len(shape), layout)
    if dtype == "bool":
        # numba-cuda 0.30.4 cannot type a bool CAI with strides (Boolean has no bitwidth).
        with pytest.raises(AttributeError, match="bitwidth"):
            numba_typeof(cai)
        return
    # The intended difference: numba-cuda says 'A' however the strides are laid out ...
    theirs = numba_typeof(cai)
    assert theirs.layout == "A"
    # ... and agrees on everything else.
    assert theirs == ty.copy(layout="A")


def test_numba_mistypes_some_strided_arrays_as_c():
    """numba-cuda takes the bit width for the item size: a float32 array with a 32-byte
    stride looks C-contiguous to it. fastlaunch reads it as the strided array it is."""
    cai = FakeCAI((3,), "<f4", (32,))
    assert numba_typeof(cai).layout == "C"
    assert _core.classify(cai)[3] == "A"


def test_zero_dimensional_with_empty_strides_is_c_in_both():
    cai = FakeCAI((), "<f8", ())
    assert _core.classify(cai) == ("array", "float64", 0, "C", False)
    assert ours(cai) == numba_typeof(cai)


@pytest.mark.parametrize(
    ("shape", "strides"),
    [((0,), (4,)), ((0, 4), (16, 4)), ((3, 0), (7, 0)), ((2, 0, 3), (-4, 12, 0))],
    ids=str,
)
def test_empty_arrays_with_strides_are_c(shape, strides):
    """An empty array is contiguous whatever its strides (NumPy and numba agree)."""
    cai = FakeCAI(shape, "<f4", strides)
    assert _core.classify(cai)[3] == "C" == numpy_layout(shape, strides, "float32")


@pytest.mark.parametrize(
    ("shape", "strides", "layout"),
    [
        ((1, 4), (999, 4), "C"),  # extent 1: its stride places no constraint
        ((4, 1), (4, -3), "C"),
        ((1, 1), (0, 0), "C"),
        ((1,), (0,), "C"),
        ((4, 1), (4, 16), "C"),  # both C and F contiguous: C wins, as in numba
        ((1, 4, 1), (5, 1 * 4, 7), "C"),
        ((4, 3, 1), (4, 16, 1), "F"),
    ],
    ids=str,
)
def test_extent_one_strides_are_ignored(shape, strides, layout):
    cai = FakeCAI(shape, "<f4", strides)
    assert _core.classify(cai)[3] == layout == numpy_layout(shape, strides, "float32")


def test_layout_of_huge_broadcast_is_not_c():
    cai = FakeCAI((4, 2**60), "<c16", (0, 16))
    assert _core.classify(cai)[3] == "A"


# -- DLPack (NumPy's capsule, relabelled as CUDA memory) ---------------------------------

KDL_CPU, KDL_CUDA = 1, 2
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class FakeDLPack:
    """A DLPack producer over host memory that claims its tensor lives on a CUDA device
    (device type patched in NumPy's capsule; never dereferenced)."""

    def __init__(self, array: np.ndarray, device_type: int = KDL_CUDA):
        self.array = array
        self.device_type = device_type
        self.streams: list = []

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None, **_kwargs):
        self.streams.append(stream)
        capsule = self.array.__dlpack__()
        managed = _get_pointer(capsule, b"dltensor")
        # DLTensor: void* data; DLDevice {int32 device_type; int32 device_id}; ...
        ctypes.c_int32.from_address(managed + 8).value = self.device_type
        return capsule


def dlpack_views(dtype):
    base = np.arange(24).astype(dtype)
    return {
        "1d": base,
        "2d-C": base.reshape(4, 6),
        "2d-F": np.asfortranarray(base.reshape(4, 6)),
        "strided": base.reshape(4, 6)[::2, ::3],
        "negative": base[::-1],
        "0d": base[3:4].reshape(()),
        "empty": base[:0].reshape(0, 3),
        "broadcast": np.lib.stride_tricks.as_strided(base[:6], (4, 6), (0, base.itemsize)),
    }


DLPACK_CASES = [(d, name) for d in DTYPES for name in dlpack_views(d)]


@pytest.mark.parametrize(("dtype", "name"), DLPACK_CASES, ids=[f"{d}-{n}" for d, n in DLPACK_CASES])
def test_dlpack_producer(dtype, name):
    view = dlpack_views(dtype)[name]
    producer = FakeDLPack(view)
    layout = numpy_layout(view.shape, view.strides, dtype)
    assert _core.classify(producer) == ("array", dtype, view.ndim, layout, False)
    assert producer.streams == [1]  # the legacy default stream
    got = struct.unpack(f"<{5 + 2 * view.ndim}q", _core.pack((ours(producer),), (producer,)))
    ptr = view.__array_interface__["data"][0]
    assert got == (0, 0, view.size, view.itemsize, ptr, *view.shape, *view.strides)


def test_dlpack_on_the_host_is_refused():
    producer = FakeDLPack(np.zeros(3, "float32"), device_type=KDL_CPU)
    with pytest.raises(
        KernelArgumentError,
        match=r"^argument 0: .*FakeDLPack is not in CUDA memory \(DLPack device type 1\); "
        r"move it to the GPU first$",
    ):
        _core.classify(producer)


# -- fingerprints ------------------------------------------------------------------------


def test_fingerprint_round_trips_through_describe():
    args = (
        FakeCAI((3, 4), "<f4"),
        FakeCAI((3, 4), "<f4", (4, 12), readonly=True),
        np.int8(1),
        2.0,
        True,
        FakeCAI((), "<c8"),
        2**64 - 1,
    )
    fingerprint = _core.fingerprint(args)
    assert isinstance(fingerprint, bytes)
    assert _core.describe(fingerprint) == [_core.classify(a) for a in args]
    assert [numba_type(d) for d in _core.describe(fingerprint)] == [
        types.Array(types.float32, 2, "C"),
        types.Array(types.float32, 2, "F", readonly=True),
        types.int8,
        types.float64,
        types.boolean,
        types.Array(types.complex64, 0, "C"),
        types.uint64,
    ]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (FakeCAI((3, 4), "<f4", ptr=0x1000), FakeCAI((30, 40), "<f4", ptr=0x2004)),
        (FakeCAI((3,), "<f4", (8,)), FakeCAI((5,), "<f4", (-4,))),
        (1, -(2**63)),
        (1.0, math.nan),
        (np.float16(1), np.float16(2)),
    ],
    ids=["shape+pointer", "strides", "int", "float", "float16"],
)
def test_fingerprint_ignores_values(a, b):
    assert _core.fingerprint((a,)) == _core.fingerprint((b,))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (FakeCAI((3, 4), "<f4"), FakeCAI((3, 4), "<f8")),
        (FakeCAI((3, 4), "<f4"), FakeCAI((12,), "<f4")),
        (FakeCAI((3, 4), "<f4"), FakeCAI((3, 4), "<f4", (4, 12))),
        (FakeCAI((3, 4), "<f4"), FakeCAI((3, 4), "<f4", (32, 8))),
        (FakeCAI((3, 4), "<f4"), FakeCAI((3, 4), "<f4", readonly=True)),
        (1, 2**63),
        (1, True),
        (1, 1.0),
        (1.0, np.float32(1)),
        (1j, np.complex64(1j)),
        (np.int8(1), np.uint8(1)),
    ],
    ids=repr,
)
def test_fingerprint_separates_types(a, b):
    assert _core.fingerprint((a,)) != _core.fingerprint((b,))
    assert _core.fingerprint((a, b)) != _core.fingerprint((b, a))


@pytest.mark.parametrize(
    "fingerprint", [b"\x00", b"\x0f", b"\xff", b"\x80\x0b\x01", b"\x80\x63\x01\x00"]
)
def test_describe_refuses_malformed_fingerprints(fingerprint):
    with pytest.raises(ValueError, match="^malformed fingerprint$"):
        _core.describe(fingerprint)


def test_describe_empty():
    assert _core.describe(b"") == []
    assert _core.fingerprint(()) == b""


# -- properties --------------------------------------------------------------------------

extents = st.one_of(st.sampled_from([0, 1]), st.integers(0, 6))


@st.composite
def array_specs(draw):
    """A CAI array NumPy could describe: dtype, shape (0-4 dims, zeros included), strides
    (none, C, F, permuted, element multiples of either sign or zero, arbitrary bytes)."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    size = dtype.itemsize
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(extents, min_size=ndim, max_size=ndim)))
    kind = draw(st.sampled_from(["none", "C", "F", "permuted", "elements", "bytes"]))
    if kind == "none":
        strides = None
    elif kind == "C":
        strides = c_strides(shape, size)
    elif kind == "F":
        strides = f_strides(shape, size)
    elif kind == "permuted":
        order = draw(st.permutations(range(ndim)))
        base = c_strides(tuple(shape[i] for i in order), size)
        strides = [0] * ndim
        for position, axis in enumerate(order):
            strides[axis] = base[position]
        strides = tuple(strides)
    elif kind == "elements":
        strides = tuple(size * draw(st.integers(-8, 8)) for _ in shape)
    else:
        strides = tuple(draw(st.integers(-100, 100)) for _ in shape)
    readonly = draw(st.booleans())
    ptr = draw(st.integers(1, 2**64 - 1))
    return dtype, shape, strides, readonly, ptr


def element_misaligned(dtype, shape, strides, ptr) -> bool:
    """Whether some element of a non-empty array is not aligned as numba's data model
    aligns it (a complex number as its parts)."""
    align = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    if math.prod(shape) == 0:
        return False
    steps = strides if strides is not None else ()
    return ptr % align != 0 or any(e > 1 and s % align for e, s in zip(shape, steps, strict=False))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(array_specs())
@example((np.dtype("float32"), (4, 1), (4, 16), False, 1))
@example((np.dtype("bool"), (0, 3), (-5, 0), True, 2**64 - 1))
@example((np.dtype("complex128"), (2, 3), (48, 16), False, 8))
def test_property_layout_and_packing(spec):
    dtype, shape, strides, readonly, ptr = spec
    ndim = len(shape)
    cai = FakeCAI(shape, dtype.str, strides, ptr=ptr, readonly=readonly)
    if element_misaligned(dtype, shape, strides, ptr):
        with pytest.raises(KernelArgumentError, match="align"):
            _core.classify(cai)
        return
    layout = numpy_layout(shape, strides, dtype)
    assert _core.classify(cai) == ("array", dtype.name, ndim, layout, readonly)

    ty = ours(cai)
    if strides is None or ndim == 0:
        assert ty == numba_typeof(cai)
    elif dtype != np.bool_:  # numba-cuda cannot type bool CAIs with strides
        assert ty.copy(layout="A") == numba_typeof(cai).copy(layout="A")

    nslots = 5 + 2 * ndim
    raw = _core.pack((ty,), (cai,))
    assert len(raw) == 8 * nslots
    got = struct.unpack(f"<{nslots}Q", raw)
    nitems = math.prod(shape)
    assert got[:5] == (0, 0, nitems, dtype.itemsize, ptr)
    assert got[5 : 5 + ndim] == shape
    packed_strides = struct.unpack(f"<{ndim}q", raw[8 * (5 + ndim) :])
    if strides is not None:
        assert packed_strides == strides
    else:  # C-contiguous: the strides that take part in addresses are C strides
        assert numpy_layout(shape, packed_strides, dtype) == "C"
        for d in range(ndim):
            if nitems and shape[d] > 1:
                assert packed_strides[d] == dtype.itemsize * math.prod(shape[d + 1 :])


_ABSENT = object()
ints = st.one_of(
    st.integers(-3, 8),
    st.integers(-(2**65), 2**65),
    st.sampled_from([2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63)]),
)
int_lists = st.lists(ints, max_size=5)
junk = st.one_of(st.none(), st.text(string.printable, max_size=3), st.floats(), st.booleans())
TYPESTRS = [np.dtype(d).str for d in DTYPES] + [
    ">f4",
    ">i8",
    "<V8",
    "<M8[ns]",
    "<m8",
    "|O",
    "<U3",
    "|S4",
    "<f",
    "<f16",
    "<f04",
    "=i4",
    "|b1",
    "<b2",
    "",
]


@st.composite
def malformed_cais(draw):
    """A valid CAI with up to three of its entries broken or missing, or no dict at all.
    (ASCII typestrs only: see the xfail below.)"""
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    interface = {
        "shape": shape,
        "strides": draw(st.one_of(st.none(), st.tuples(*[st.integers(-64, 64) for _ in shape]))),
        "typestr": draw(st.sampled_from([np.dtype(d).str for d in DTYPES])),
        "data": (draw(st.integers(0, 2**64 - 1)), draw(st.booleans())),
        "version": 3,
    }
    broken = {
        "shape": st.one_of(int_lists.map(tuple), int_lists, ints, junk),
        "strides": st.one_of(int_lists.map(tuple), int_lists, ints, junk),
        "typestr": st.one_of(
            st.sampled_from(TYPESTRS), st.text(string.printable, max_size=6), ints, junk
        ),
        "data": st.one_of(
            st.tuples(ints, st.booleans()),
            st.tuples(ints, ints),
            st.tuples(ints),
            st.lists(st.one_of(ints, st.booleans()), max_size=3),
            ints,
            junk,
        ),
        "mask": st.one_of(st.none(), st.just("mask")),
        "version": st.one_of(st.integers(0, 3), junk),
    }
    for key in draw(st.sets(st.sampled_from(sorted(broken)), max_size=3)):
        value = draw(st.one_of(st.just(_ABSENT), broken[key]))
        if value is _ABSENT:
            interface.pop(key, None)
        else:
            interface[key] = value
    if draw(st.sampled_from([False] * 19 + [True])):
        interface = draw(st.one_of(junk, st.just([]), st.just(())))
    obj = type("Producer", (), {})()
    obj.__cuda_array_interface__ = interface
    return obj


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(malformed_cais())
def test_property_classify_raises_only_kernel_argument_error(obj):
    try:
        descriptor = _core.classify(obj)
    except KernelArgumentError as e:
        assert e.position == 0
        assert str(e).startswith("argument 0: ")
        return
    except TypeError as e:
        # Structured typestrs, and datetimes fastlaunch does not pack (multiples of a unit,
        # big-endian), are numba-cuda's to pass ('V', 'M', 'm').
        assert str(e).startswith("these arguments are passed by numba-cuda's own launch path")
        assert obj.__cuda_array_interface__["typestr"][1:2] in ("V", "M", "m")
        return
    kind, dtype, ndim, layout, readonly = descriptor
    # numeric dtypes, and datetime64/timedelta64 (generic or a plain unit: fastlaunch packs them)
    datetime = isinstance(dtype, str) and dtype.startswith(("datetime64", "timedelta64"))
    assert kind == "array" and (dtype in DTYPES or datetime) and layout in "CFA"
    assert isinstance(readonly, bool)
    raw = _core.pack((numba_type(descriptor),), (obj,))
    assert len(raw) == 8 * (5 + 2 * ndim)


@pytest.mark.parametrize("bad", ["<é4", "|€", "<\u00e98"])
def test_non_ascii_typestr_is_an_argument_error(bad):
    try:
        _core.classify(FakeCAI((1,), bad))
    except KernelArgumentError as e:
        assert "is not supported" in str(e)
    except BaseException as e:  # a Rust panic arrives as pyo3's PanicException
        pytest.fail(f"{type(e).__name__}: {e}")
    else:
        pytest.fail("accepted")


# -- subclasses of int, float and complex: typed as numba-cuda types their base ------------


class Meters(float):
    pass


class Count(int):
    pass


class Phase(complex):
    pass


@pytest.mark.parametrize(
    "value",
    [Meters(2.5), Count(7), Count(2**63), Count(-(2**63)), Phase(1 - 2j)],
    ids=repr,
)
def test_number_subclasses_type_as_their_base(value):
    assert numba_type(_core.classify(value)) == numba_typeof(value)


@pytest.mark.parametrize(
    ("value", "param_type", "expected"),
    [
        (Meters(2.5), types.float64, struct.pack("<d", 2.5)),
        (Count(-7), types.int64, struct.pack("<q", -7)),
        (Count(2**64 - 1), types.uint64, struct.pack("<Q", 2**64 - 1)),
        (Phase(1 - 2j), types.complex128, struct.pack("<dd", 1.0, -2.0)),
    ],
    ids=repr,
)
def test_number_subclasses_pack_their_value(value, param_type, expected):
    assert _core.pack((param_type,), (value,)) == expected


def test_number_subclass_too_large_is_an_argument_error():
    with pytest.raises(KernelArgumentError, match="too large"):
        _core.classify(Count(2**64))


# -- misaligned arrays: refused before a kernel could fault on them ------------------------


@pytest.mark.parametrize(
    ("typestr", "ptr", "strides"),
    [
        ("<f4", 0x10001, None),
        ("<f8", 0x10004, None),
        ("<i2", 0x10003, None),
        ("<c8", 0x10002, None),
        ("<c16", 0x10004, None),
        ("<f4", 0x10000, (6,)),
    ],
)
def test_misaligned_cai_is_refused(typestr, ptr, strides):
    with pytest.raises(KernelArgumentError, match="align"):
        _core.classify(FakeCAI((4,), typestr, strides=strides, ptr=ptr))


@pytest.mark.parametrize(
    ("typestr", "ptr", "shape", "strides"),
    [
        ("<c16", 0x10008, (4,), None),  # complex128's parts are 8-byte aligned, as numba's
        ("|u1", 0x10001, (4,), None),
        ("<f4", 0x10001, (0,), None),  # empty: nothing is read
        ("<f4", 0x10000, (1, 4), (6, 4)),  # an extent of 1: its stride is never used
    ],
)
def test_aligned_or_empty_cai_is_accepted(typestr, ptr, shape, strides):
    assert _core.classify(FakeCAI(shape, typestr, strides=strides, ptr=ptr))[0] == "array"


def test_cuda_array_interface_v2_is_accepted_without_a_stream():
    """A deliberate difference: numba-cuda 0.30.4 refuses v2 objects (``BufferError``);
    fastlaunch takes them as v3 with no stream (no ordering is added)."""
    cai = FakeCAI((4,), "<f4")
    cai.__cuda_array_interface__["version"] = 2
    cai.__cuda_array_interface__.pop("stream", None)
    assert _core.classify(cai) == ("array", "float32", 1, "C", False)
