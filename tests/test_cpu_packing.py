"""Packed kernel parameters equal numba-cuda's data model, for every supported type.

``_core.pack(param_types, args)`` returns the parameter buffer a launch of an overload with
these numba parameter types would pass (the plan built in Rust from the types): one 8-byte
slot per flattened kernel parameter, the value little-endian at the slot start and the
rest zero. The expectation is built from numba-cuda itself, independently of fastlaunch:

- how many parameters an argument flattens to, and each one's width: numba-cuda's CUDA
  data model through ``ArgPacker(dmm, [numba_type]).argument_types``;
- their values: arrays are ``meminfo = 0, parent = 0, nitems, itemsize, data, *shape,
  *strides_in_bytes``; scalars follow numba-cuda's ``_Kernel._prepare_args`` (a ctypes
  ``c_<type>(value)``, float16 as ``np.float16(value).view(np.uint16)``, complex as
  (real, imag), bool one byte). ``reference_scalar`` writes those rules down, and
  ``test_reference_scalar_is_numbas_own_prepare_args`` checks it against numba-cuda's
  ``_prepare_args`` itself (which runs without a GPU for scalars).

No GPU is needed: arrays are fake ``__cuda_array_interface__`` objects over host memory,
and nothing is dereferenced.
"""

from __future__ import annotations

import ctypes
import math
import re
import struct
import types as pytypes
import warnings

import numpy as np
import pytest
from arrays import DTYPES, FakeCAI
from llvmlite import ir
from numba.cuda import datamodel, types
from numba.cuda.datamodel.cuda_packer import ArgPacker
from numba.cuda.dispatcher import _Kernel
from numba.cuda.models import cuda_data_manager
from numba.cuda.np import numpy_support
from numba.cuda.typing.typeof import Purpose, typeof

from fastlaunch import KernelArgumentError, _core

SLOT = 8
# numba-cuda's CUDA target uses this chain (numba/cuda/target.py, CUDATargetContext).
DMM = cuda_data_manager.chain(datamodel.default_manager)


def cai_of(view: np.ndarray, explicit_strides: bool = True) -> FakeCAI:
    """A fake device array with ``view``'s dtype, shape, strides and (host) address."""
    return FakeCAI(
        view.shape,
        view.dtype.str,
        view.strides if explicit_strides else None,
        ptr=view.__array_interface__["data"][0],
    )


# -- the reference, from numba-cuda ------------------------------------------------------


def llvm_width(llvm_type: ir.Type) -> int:
    """Bytes of one flattened kernel parameter of this LLVM type (64-bit pointers)."""
    if isinstance(llvm_type, ir.PointerType):
        return 8
    if isinstance(llvm_type, ir.IntType):
        assert llvm_type.width % 8 == 0, llvm_type
        return llvm_type.width // 8
    if isinstance(llvm_type, ir.HalfType):
        return 2
    if isinstance(llvm_type, ir.FloatType):
        return 4
    if isinstance(llvm_type, ir.DoubleType):
        return 8
    raise AssertionError(f"unexpected parameter type {llvm_type}")


def param_widths(numba_types: list) -> list[int]:
    """The width of every flattened parameter of a kernel taking ``numba_types``."""
    return [llvm_width(t) for t in ArgPacker(DMM, list(numba_types)).argument_types]


def slots(numba_types: list, values: list[bytes]) -> bytes:
    """Our buffer for these flattened values: numba's parameter count and widths, one
    8-byte slot each, the value at the slot start, zero padding."""
    widths = param_widths(numba_types)
    assert len(values) == len(widths), (numba_types, values)
    out = b""
    for width, value in zip(widths, values, strict=True):
        assert len(value) == width, (numba_types, width, value)
        out += value.ljust(SLOT, b"\0")
    return out


def i64(value: int) -> bytes:
    return value.to_bytes(8, "little", signed=value < 0)


def reference_array(view: np.ndarray, ptr: int) -> list[bytes]:
    """numba's flattened array: meminfo, parent, nitems, itemsize, data, shape, strides."""
    fields = [0, 0, view.size, view.itemsize, ptr, *view.shape, *view.strides]
    return [i64(v) for v in fields]


def reference_scalar(ty, value) -> list[bytes]:
    """numba-cuda's ``_prepare_args`` conversion of ``value`` for a parameter of type ``ty``,
    as the bytes of each flattened parameter."""
    if ty == types.boolean:
        # numba appends the value itself; the kernel reads its low byte.
        return [bytes([int(value) & 0xFF])]
    if isinstance(ty, types.Integer):
        return [bytes(getattr(ctypes, f"c_{ty}")(value))]
    if ty == types.float16:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow to inf is expected
            return [np.float16(value).view(np.uint16).tobytes()]
    if ty == types.float32:
        return [bytes(ctypes.c_float(value))]
    if ty == types.float64:
        return [bytes(ctypes.c_double(value))]
    if ty == types.complex64:
        return [bytes(ctypes.c_float(value.real)), bytes(ctypes.c_float(value.imag))]
    if ty == types.complex128:
        return [bytes(ctypes.c_double(value.real)), bytes(ctypes.c_double(value.imag))]
    raise AssertionError(f"no reference for {ty}")


def numba_prepare_args(ty, value) -> list[bytes]:
    """What numba-cuda's own ``_Kernel._prepare_args`` appends, as bytes (kinds that need no
    device: scalars, tuples of them, enum members, datetimes)."""
    kernelargs: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        kernel = pytypes.SimpleNamespace(extensions=[])
        # tuples and enum members recurse through the bound method
        kernel._prepare_args = lambda *a: _Kernel._prepare_args(kernel, *a)
        _Kernel._prepare_args(kernel, ty, value, 0, [], kernelargs)
    out = []
    for arg in kernelargs:
        if isinstance(arg, ctypes._SimpleCData):
            out.append(bytes(arg))
        else:  # a bool passed as is: the kernel reads its low byte
            out.append(bytes([int(arg) & 0xFF]))
    return out


def array_type(view: np.ndarray):
    """The numba type of a parameter taking ``view``. (Not ``typeof`` of the CAI object:
    numba-cuda 0.30.4 raises AttributeError typing a bool CAI with explicit strides.)"""
    return types.Array(numpy_support.from_dtype(view.dtype), view.ndim, "A")


def packed(numba_type, value) -> bytes:
    """fastlaunch's bytes for one argument, for a parameter of this numba type."""
    return _core.pack((numba_type,), (value,))


# -- arrays ------------------------------------------------------------------------------

BASE_SHAPES = {0: (), 1: (7,), 2: (3, 5), 3: (2, 3, 4)}


def layouts(ndim: int):
    """(name, make(dtype) -> view) for the layouts an ndim-dimensional array can have."""
    shape = BASE_SHAPES[ndim]
    every = (slice(None),) * ndim
    out = [("C", lambda dt: np.arange(math.prod(shape)).astype(dt).reshape(shape))]
    if ndim == 0:
        return out
    out += [
        (
            "strided",
            lambda dt: np.zeros(tuple(2 * s for s in shape), dt)[(slice(None, None, 2),) * ndim],
        ),
        ("negative", lambda dt: np.zeros(shape, dt)[(slice(None, None, -1),) * ndim]),
        ("negative-inner", lambda dt: np.zeros(shape, dt)[every[:-1] + (slice(None, None, -1),)]),
        ("zero-size", lambda dt: np.zeros((0,) + shape[1:], dt)),
        ("zero-size-inner", lambda dt: np.zeros(shape[:-1] + (0,), dt)),
        ("broadcast", lambda dt: np.broadcast_to(np.zeros(shape[-1:], dt), shape)),
        ("offset", lambda dt: np.zeros((shape[0] + 2,) + shape[1:], dt)[1:-1]),
    ]
    if ndim >= 2:
        out += [
            ("F", lambda dt: np.asfortranarray(np.zeros(shape, dt))),
            ("transposed", lambda dt: np.zeros(shape[::-1], dt).T),
            ("swapped", lambda dt: np.zeros(shape, dt).swapaxes(0, 1)),
        ]
    return out


ARRAY_CASES = [
    pytest.param(dtype, make, id=f"{dtype}-{ndim}d-{name}")
    for ndim in BASE_SHAPES
    for name, make in layouts(ndim)
    for dtype in DTYPES
]


@pytest.mark.parametrize(("dtype", "make"), ARRAY_CASES)
def test_array_params_match_numbas_data_model(dtype, make):
    view = make(np.dtype(dtype))
    cai = cai_of(view)
    ty = array_type(view)
    widths = param_widths([ty])
    assert widths == [8] * (5 + 2 * view.ndim)
    ptr = cai.__cuda_array_interface__["data"][0]
    assert packed(ty, cai) == slots([ty], reference_array(view, ptr))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4), (2, 3, 4, 5)], ids=str)
def test_array_without_strides_packs_c_strides(dtype, shape):
    """``strides: None`` means C-contiguous: numba passes the C strides."""
    view = np.zeros(shape, dtype)
    cai = cai_of(view, explicit_strides=False)
    ty = typeof(cai, Purpose.argument)
    assert ty.layout == "C"
    c_strides = numpy_support.strides_from_shape(
        shape=shape, itemsize=view.itemsize, c_contiguous=True, f_contiguous=False
    )
    assert tuple(c_strides) == view.strides
    ptr = cai.__cuda_array_interface__["data"][0]
    assert packed(ty, cai) == slots([ty], reference_array(view, ptr))


# numba-cuda passes `strides_from_shape(c_contiguous=is_contiguous_c, f_contiguous=
# is_contiguous_f)` for a view without strides, and cuda.core reports such a view as both C
# and F contiguous when it has an extent of 1 or 0, which makes numba pass *Fortran* strides
# for it. Those strides never take part in an address (an extent-1 index is always 0; an
# empty array has no elements), so only the slots that can matter are compared here, and
# the exact bytes in the xfail below.
DEGENERATE_SHAPES = [(1, 4), (4, 1), (1, 1), (2, 1, 3), (3, 0), (0, 3), (0,), (2, 0, 3)]


def numba_implicit_strides(shape, itemsize):
    from cuda.core._layout import _StridedLayout

    layout = _StridedLayout(shape, None, itemsize)
    return numpy_support.strides_from_shape(
        shape=shape,
        itemsize=itemsize,
        c_contiguous=layout.is_contiguous_c,
        f_contiguous=layout.is_contiguous_f,
    )


@pytest.mark.parametrize("shape", DEGENERATE_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["int8", "float32", "complex128"])
def test_array_without_strides_degenerate_shapes(dtype, shape):
    itemsize = np.dtype(dtype).itemsize
    cai = FakeCAI(shape, np.dtype(dtype).str, None)
    ty = typeof(cai, Purpose.argument)
    got = struct.unpack(f"<{5 + 2 * len(shape)}q", packed(ty, cai))
    ndim = len(shape)
    nitems = math.prod(shape)
    assert got[: 5 + ndim] == (0, 0, nitems, itemsize, 0x7F00_0000_1000, *shape)
    expected = numba_implicit_strides(shape, itemsize)
    for d in range(ndim):
        if nitems and shape[d] > 1:  # a stride that takes part in addresses
            assert got[5 + ndim + d] == expected[d], d


@pytest.mark.xfail(
    strict=True,
    reason="fastlaunch passes C strides for extent-1 / empty dims of a CAI without strides; "
    "numba-cuda passes Fortran-order ones there (harmless: never used in an address)",
)
@pytest.mark.parametrize("shape", [(1, 4), (4, 1), (3, 0), (0, 3)], ids=str)
def test_array_without_strides_degenerate_shapes_exact_bytes(shape):
    cai = FakeCAI(shape, "<f4", None)
    ty = typeof(cai, Purpose.argument)
    values = [0, 0, math.prod(shape), 4, 0x7F00_0000_1000, *shape]
    values += numba_implicit_strides(shape, 4)
    assert packed(ty, cai) == slots([ty], [i64(v) for v in values])


@pytest.mark.parametrize("readonly", [False, True])
def test_readonly_array_packs_the_same(readonly):
    view = np.zeros((3, 4), "float32")
    cai = FakeCAI(view.shape, "<f4", view.strides, ptr=0x1000, readonly=readonly)
    ty = typeof(cai, Purpose.argument)
    assert ty.mutable is not readonly
    assert packed(ty, cai) == slots([ty], reference_array(view, 0x1000))


def test_pointer_and_strides_are_passed_unchanged():
    """Full 64-bit pointers, and negative and huge strides, are passed bit for bit."""
    ptr = 0xFFFF_FFFF_FFFF_FFF0
    cai = FakeCAI((2, 3), "<f8", (-(2**40), 2**33), ptr=ptr)
    got = struct.unpack("<9Q", _core.pack((types.float64[:, :],), (cai,)))
    assert got == (0, 0, 6, 8, ptr, 2, 3, 2**64 - 2**40, 2**33)


# -- scalars, typed as numba types them --------------------------------------------------

NUMPY_SCALARS = [
    np.bool_(True),
    np.bool_(False),
    *(
        getattr(np, name)(v)
        for name in ["int8", "int16", "int32", "int64"]
        for v in [0, 1, -1, np.iinfo(name).min, np.iinfo(name).max]
    ),
    *(
        getattr(np, name)(v)
        for name in ["uint8", "uint16", "uint32", "uint64"]
        for v in [0, 1, np.iinfo(name).max]
    ),
    *(
        getattr(np, name)(v)
        for name in ["float16", "float32", "float64"]
        for v in [
            0.0,
            -0.0,
            1.5,
            -2.25,
            1 / 3,
            float(np.finfo(name).max),
            float(np.finfo(name).tiny),
            float(np.finfo(name).smallest_subnormal),
            math.inf,
            -math.inf,
            math.nan,
        ]
    ),
    np.float16(np.uint16(0x7E01).view(np.float16)),  # a NaN payload
    *(getattr(np, name)(v) for name in ["complex64", "complex128"] for v in [0, 1 + 2j, -1.5j]),
    np.complex64(complex(math.inf, -math.nan)),
    np.complex128(complex(1e300, -1e-300)),
]

PYTHON_SCALARS = [
    True,
    False,
    0,
    1,
    -1,
    2**31,
    -(2**31) - 1,
    2**63 - 1,
    -(2**63),
    2**63,  # numba: uint64
    2**64 - 1,
    0.0,
    -0.0,
    1.5,
    1 / 3,
    1e300,
    5e-324,
    math.inf,
    -math.inf,
    math.nan,
    1 + 2j,
    complex(-0.0, math.inf),
    -1e300j,
]


@pytest.mark.parametrize("value", PYTHON_SCALARS + NUMPY_SCALARS, ids=repr)
def test_scalar_params_match_numbas_data_model(value):
    ty = typeof(value, Purpose.argument)
    assert packed(ty, value) == slots([ty], reference_scalar(ty, value))


CONVERSIONS = [
    # Python / NumPy ints and bools to every integer width: wrap like ctypes.
    *(
        (target, v)
        for target in ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
        for v in [
            0,
            1,
            -1,
            127,
            128,
            255,
            256,
            300,
            -129,
            2**31,
            2**32 + 5,
            2**63 - 1,
            -(2**63),
            2**63,
            2**64 - 1,
            True,
            False,
            np.int64(300),
            np.int8(-1),
            np.uint8(255),
            np.uint64(2**64 - 1),
            np.int16(-32768),
        ]
    ),
    # ints and floats to every float width (float16 rounds to nearest even).
    *(
        (target, v)
        for target in ["float16", "float32", "float64"]
        for v in [
            0,
            1,
            -1,
            2049,  # not a float16
            65519,
            65520,  # rounds to float16 inf
            -70000,
            2**24 + 1,  # not a float32
            2**53 + 1,  # not a float64
            2**63 + 2**39 + 1,
            2**64 - 1,
            -(2**63),
            True,
            1.5,
            1 / 3,
            -0.0,
            1e-8,
            6.1e-5,
            5.960464477539063e-08,  # smallest float16 subnormal
            2.9802322387695312e-08,  # half of it: a tie, to even (0)
            8.940696716308594e-08,  # 1.5 of it: a tie, to even (2)
            65504.0,
            1e39,
            -1e300,
            math.inf,
            -math.inf,
            math.nan,
            np.float16(1.5),
            np.float32(1 / 3),
            np.float64(1 / 3),
            np.int32(-7),
            np.uint64(2**64 - 1),
        ]
    ),
    # anything numeric to complex.
    *(
        (target, v)
        for target in ["complex64", "complex128"]
        for v in [
            0,
            3,
            -(2**63),
            2**64 - 1,
            True,
            1.5,
            1 / 3,
            1e300,
            math.inf,
            1 + 2j,
            complex(1 / 3, -1 / 7),
            np.float16(2.5),
            np.float32(-1.25),
            np.int8(-5),
            np.complex64(1 - 1j),
            np.complex128(complex(1e300, 1e-300)),
        ]
    ),
    # bools to bool.
    ("boolean", True),
    ("boolean", False),
    ("boolean", np.bool_(True)),
    ("boolean", np.bool_(False)),
    ("boolean", 0),
    ("boolean", 1),
]


@pytest.mark.parametrize(
    ("target", "value"), CONVERSIONS, ids=[f"{t}<-{v!r}" for t, v in CONVERSIONS]
)
def test_explicit_signature_conversions_match_numba(target, value):
    ty = getattr(types, target)
    assert packed(ty, value) == slots([ty], reference_scalar(ty, value))


REFERENCE_CASES = [(getattr(types, t), v) for t, v in CONVERSIONS] + [
    (typeof(v, Purpose.argument), v) for v in PYTHON_SCALARS + NUMPY_SCALARS
]


@pytest.mark.parametrize(
    ("ty", "value"), REFERENCE_CASES, ids=[f"{t}<-{v!r}" for t, v in REFERENCE_CASES]
)
def test_reference_scalar_is_numbas_own_prepare_args(ty, value):
    """The reference above is what numba-cuda's ``_prepare_args`` really produces."""
    assert reference_scalar(ty, value) == numba_prepare_args(ty, value)


@pytest.mark.parametrize(
    "value",
    [
        -math.nan,
        struct.unpack("<d", struct.pack("<Q", 0x7FF8_0400_0000_0000))[0],  # quiet, payload
        struct.unpack("<d", struct.pack("<Q", 0xFFF0_0000_0000_0001))[0],  # signalling, -
    ],
    ids=["-nan", "nan-payload", "-snan"],
)
def test_float16_nan_sign_and_payload(value):
    assert packed(types.float16, value) == slots(
        [types.float16], reference_scalar(types.float16, value)
    )


REFUSED = [
    # floats (and float16s) to integers: ctypes refuses them too.
    *(
        (target, v, "a float")
        for target in ["int8", "int32", "int64", "uint8", "uint64"]
        for v in [1.5, 2.0, math.nan, np.float32(1.0), np.float16(1.0), np.float64(-3.0)]
    ),
    # complex to anything real.
    *(
        (target, v, "a complex")
        for target in ["float16", "float32", "float64", "int32", "uint8", "boolean"]
        for v in [1 + 2j, 3 + 0j, np.complex64(1), np.complex128(0)]
    ),
    # floats to bool (numba-cuda would pass the double's first byte).
    ("boolean", 1.5, "a float"),
    ("boolean", 0.0, "a float"),
    ("boolean", np.float16(1), "a float"),
]


@pytest.mark.parametrize(
    ("target", "value", "kind"), REFUSED, ids=[f"{t}<-{v!r}" for t, v, _ in REFUSED]
)
def test_explicit_signature_refuses_lossy_conversions(target, value, kind):
    with pytest.raises(
        KernelArgumentError,
        match=rf"^argument 0: cannot pass {kind} to a parameter of type {target}$",
    ) as info:
        packed(getattr(types, target), value)
    assert info.value.position == 0
    assert isinstance(info.value, TypeError)


# numba-cuda refuses these too (ctypes raises TypeError). Where it does not, fastlaunch
# refuses on purpose: a float to a bool parameter (numba passes the double's first byte)
# and a NumPy complex to a float parameter (numba drops the imaginary part silently).
NUMBA_REFUSES = [
    (t, v)
    for t, v, _ in REFUSED
    if t != "boolean" and not (t.startswith("float") and isinstance(v, np.complexfloating))
]


@pytest.mark.parametrize(
    ("target", "value"), NUMBA_REFUSES, ids=[f"{t}<-{v!r}" for t, v in NUMBA_REFUSES]
)
def test_numba_refuses_the_same_conversions(target, value):
    """Where numba-cuda's ctypes conversion refuses, so does fastlaunch (test above)."""
    with pytest.raises(TypeError):
        numba_prepare_args(getattr(types, target), value)


def test_refusal_names_the_position():
    with pytest.raises(
        KernelArgumentError, match=r"^argument 2: cannot pass a float to a parameter of type int32$"
    ) as info:
        _core.pack((types.int32, types.float32, types.int32), (1, 1, 1.5))
    assert info.value.position == 2
    assert info.value.name == ""


# -- several arguments together ----------------------------------------------------------


def test_mixed_signature_matches_numbas_flattening():
    """The notes' verified signature, less tuples, records and enums (not supported yet)."""
    a = np.zeros((3, 4), "float32")[:, ::2]
    b = np.zeros(5, "int16")
    cai_a, cai_b = cai_of(a), cai_of(b, explicit_strides=False)
    args = (
        cai_a,
        np.int32(-5),
        np.uint8(200),
        np.float16(1.5),
        2.5,
        np.complex64(1 - 2j),
        3 + 4j,
        True,
        cai_b,
        -(2**40),
    )
    argtypes = [typeof(v, Purpose.argument) for v in args]
    assert argtypes[1:4] == [types.int32, types.uint8, types.float16]
    values = reference_array(a, cai_a.__cuda_array_interface__["data"][0])
    for ty, v in zip(argtypes[1:8], args[1:8], strict=True):
        values += reference_scalar(ty, v)
    values += reference_array(b, cai_b.__cuda_array_interface__["data"][0])
    values += reference_scalar(types.int64, args[9])
    assert len(param_widths(argtypes)) == 9 + 1 + 1 + 1 + 1 + 2 + 2 + 1 + 7 + 1
    assert _core.pack(tuple(argtypes), args) == slots(argtypes, values)


def test_no_arguments_pack_to_nothing():
    assert _core.pack((), ()) == b""


# -- parameter types that do not fit the arguments (internal API) -----------------------


@pytest.mark.parametrize(
    ("param_types", "args", "error", "message"),
    [
        ((types.float32[:, :],), (FakeCAI((3,), "<f4"),), ValueError, r"plan entry 0 .* not fit"),
        ((types.int32,), (FakeCAI((3,), "<f4"),), ValueError, r"plan entry 0 .* does not fit"),
        ((types.float32[:],), (1,), ValueError, r"plan entry 0 .* does not fit"),
        ((types.int32,), (1, 2), ValueError, r"arguments outnumber the plan's parameters"),
        (
            (types.int32, types.int32),
            (1,),
            ValueError,
            r"plan has 2 parameters, the arguments a different",
        ),
        (
            (types.UniTuple(types.int32, 2),),
            (1,),
            ValueError,
            r"plan has 2 parameters, the arguments a different",
        ),
        ((types.Integer("int128"),), (1,), ValueError, r'unsupported parameter type "int128"'),
    ],
)
def test_plan_mismatches_are_errors(param_types, args, error, message):
    with pytest.raises(error, match=message):
        _core.pack(param_types, args)


@pytest.mark.parametrize(
    ("numba_type", "slots_per_value"),
    [
        (types.boolean, [1]),
        (types.NPDatetime("s"), [1]),
        (types.NPTimedelta("ms"), [1]),
        (types.UniTuple(types.float64, 3), [1, 1, 1]),
        (types.Tuple((types.int8, types.complex128)), [1, 2]),
    ],
    ids=str,
)
def test_parameter_types_flatten_as_numba_passes_them(numba_type, slots_per_value):
    """Booleans and datetimes are one parameter; tuples flatten into their members."""
    values = (1,) * len(slots_per_value) if len(slots_per_value) > 1 else 1
    assert len(_core.pack((numba_type,), (values,))) == 8 * sum(slots_per_value)


@pytest.mark.parametrize(
    "numba_type",
    [
        types.CPointer(types.float32),
        types.CPointer(types.int64),
    ],
    ids=str,
)
def test_parameter_types_rust_does_not_pack_go_to_numba(numba_type):
    """Such overloads are launched by numba-cuda's own ``_Kernel.launch`` (``_core.pack``
    refuses them; a miss registers numba-cuda's launch)."""
    with pytest.raises(
        TypeError,
        match=rf"^argument 3 \(arg3\): fastlaunch does not pack parameters of type "
        rf"{re.escape(str(numba_type))}$",
    ):
        _core.pack((types.int32, types.int32, types.int32, numba_type), (1, 2, 3, 0))
