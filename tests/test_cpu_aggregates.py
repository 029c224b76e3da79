"""Tuples, named tuples, enum members and datetime/timedelta scalars: typed exactly as
numba types them, and packed exactly as numba-cuda's own ``_prepare_args`` passes them
(which runs without a GPU for these kinds). Arrays inside tuples pack as arrays do."""

from __future__ import annotations

import collections
import enum
import textwrap
from pathlib import Path

import numpy as np
import pytest
from arrays import FakeCAI
from numba.cuda import types
from numba.cuda.typing.typeof import typeof
from test_cpu_packing import numba_prepare_args, param_widths, reference_array, slots

from fastlaunch import KernelArgumentError, _core
from fastlaunch.dispatcher import numba_type


class Color(enum.IntEnum):
    RED = 1
    GREEN = -7


class Weight(enum.Enum):
    LIGHT = 0.5
    HEAVY = 2.25


class Flag(enum.Enum):
    ON = True
    OFF = False


Point = collections.namedtuple("Point", "x y")
Span = collections.namedtuple("Span", "start stop step")

VALUES = [
    (1, 2),
    (1, 2.5),
    (True, 3, 4.5, 1 + 2j),
    (np.float32(1.5), np.int8(-2), np.uint64(2**63)),
    ((1, (2.5, False)), 3),
    (),
    ((),),
    Point(1, 2),
    Point(1.5, -2),
    Span(np.int16(1), 2, np.float32(0.5)),
    (Point(1, 2), Point(3.5, 4.5)),
    Color.RED,
    Color.GREEN,
    Weight.HEAVY,
    Flag.ON,
    (Color.RED, Weight.LIGHT),
    np.datetime64("2020-01-01", "D"),
    np.datetime64("2020-01-01T10:00:00.123456789", "ns"),
    np.datetime64("NaT"),
    np.datetime64("NaT", "s"),
    np.datetime64(-5, "Y"),
    np.timedelta64(5, "s"),
    np.timedelta64(-3, "ms"),
    np.timedelta64(7),
    (np.datetime64(1, "us"), np.timedelta64(2, "h")),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_typed_as_numba_types_them(value):
    (descriptor,) = _core.describe(_core.fingerprint((value,)))
    assert numba_type(descriptor) == typeof(value)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_packed_as_numba_passes_them(value):
    ty = typeof(value)
    expected = slots([ty], numba_prepare_args(ty, value))
    assert _core.pack((ty,), (value,)) == expected


def test_arrays_inside_tuples_pack_as_arrays():
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    ptr = host.__array_interface__["data"][0]
    array = FakeCAI(host.shape, host.dtype.str, host.strides, ptr=ptr)
    value = (array, 2.5, (np.int32(4), array))
    array_type = types.Array(types.float32, 2, "C")
    ty = types.Tuple((array_type, types.float64, types.Tuple((types.int32, array_type))))
    (descriptor,) = _core.describe(_core.fingerprint((value,)))
    assert numba_type(descriptor) == ty
    expected = slots(
        [ty],
        [
            *reference_array(host, ptr),
            *numba_prepare_args(types.float64, 2.5),
            *numba_prepare_args(types.int32, 4),
            *reference_array(host, ptr),
        ],
    )
    assert len(param_widths([ty])) == 2 * (5 + 4) + 2
    assert _core.pack((ty,), (value,)) == expected


def test_enum_classes_are_part_of_the_type():
    class Other(enum.IntEnum):
        RED = 1

    assert _core.fingerprint((Color.RED,)) != _core.fingerprint((Other.RED,))
    assert _core.fingerprint((Color.RED,)) == _core.fingerprint((Color.GREEN,))
    assert _core.fingerprint((Point(1, 2),)) != _core.fingerprint(((1, 2),))


def test_tuples_follow_their_members_into_explicit_signatures():
    # a float64 member for an int64 parameter is refused as a lossy conversion, as a scalar is
    with pytest.raises(KernelArgumentError, match="^argument 0: cannot pass a float"):
        _core.pack((types.UniTuple(types.int64, 2),), ((1, 2.5),))
    pair = (types.UniTuple(types.float64, 2),)
    assert _core.pack(pair, ((1, 2),)) == _core.pack(pair, ((1.0, 2.0),))


@pytest.mark.parametrize(
    ("code", "expected"),
    [("<M8[ns]", ("datetime", "ns")), ("<m8", ("timedelta", "")), ("<M8[D]", ("datetime", "D"))],
)
def test_datetime_units_round_trip(code, expected):
    value = np.zeros((), code)[()]
    assert _core.classify(value) == expected


def test_datetime_multiples_are_refused_clearly():
    with pytest.raises(KernelArgumentError, match=r"datetime dtype <M8\[10s\] is not supported"):
        _core.classify(np.datetime64(1, "10s"))


def test_a_tuple_holding_an_unpacked_type_goes_to_numba():
    """Not packed by fastlaunch: the error (from ``_register``; a miss registers
    numba-cuda's launch instead) names the parameter and the member's type."""
    from fastlaunch import jit

    def k(a, b, t):
        pass

    kernel = jit(k)
    pointer_pair = types.Tuple((types.int64, types.CPointer(types.float32)))
    with pytest.raises(
        TypeError,
        match=r"^argument 2 \(t\): fastlaunch does not pack parameters of type float32\*$",
    ):
        kernel._register(b"", 90, (types.int64, types.int64, pointer_pair), lambda *a: None)
    assert kernel.overload_count == 0


def test_errors_name_the_argument_holding_the_tuple_member():
    with pytest.raises(KernelArgumentError, match=r"^argument 1: cannot pass a float"):
        _core.pack((types.int64, types.UniTuple(types.int64, 2)), (1, (2, 2.5)))


BOUND_TUPLES = textwrap.dedent(
    """
    import numpy as np
    from collections import namedtuple
    import fastlaunch as fl
    from fastlaunch import _core
    from fastlaunch.dispatcher import numba_type
    from arrays import FakeCAI

    def k(out, pair, point, scale):
        pass

    Point = namedtuple("Point", "x y")
    kernel = fl.jit(k)
    a, b, c, d = (FakeCAI((4,), "<f4", ptr=0x1000 * i) for i in range(1, 5))
    args = (a, (b, 3), Point(1.5, c), 2.0)
    fingerprint = _core.fingerprint(args)
    param_types = tuple(numba_type(desc) for desc in _core.describe(fingerprint))
    kernel._register(fingerprint, 90, param_types, _core.CompiledKernel(b"image", "entry"))
    stream = fl.stream()
    bound = kernel[1, 1, stream].bind(*args)
    assert bound.packed == _core.pack(param_types, args)
    bound()
    new_pair, new_point = (d, 5), Point(-1.0, a)
    bound.set_arg(1, new_pair)
    bound.set_arg(2, new_point)
    assert bound.packed == _core.pack(param_types, (a, new_pair, new_point, 2.0))
    bound.set_args(b, (c, 9), Point(4.0, d), 0.5)
    assert bound.packed == _core.pack(param_types, (b, (c, 9), Point(4.0, d), 0.5))
    try:
        bound.set_arg(1, (d, 5.0))
    except TypeError as e:
        print("refused:", e)
    import sys
    before = sys.getrefcount(stream)
    held = kernel[1, 1, stream].bind(*args)
    print("stream references held by a bound launch:", sys.getrefcount(stream) - before)
    """
)


def test_bound_launches_take_tuples_and_repack_them(run_on_stand_in):
    lines = run_on_stand_in(
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n" + BOUND_TUPLES
    )
    assert lines[0].startswith("refused:") and "same type" in lines[0]
    assert lines[1] == "stream references held by a bound launch: 1"
