"""Records (NumPy structured scalars) on fastlaunch's own path, without a GPU: typed exactly
as numba-cuda types them, one pointer parameter each (to a device copy made per launch and
copied back after it, numba-cuda's InOut default), and refused where a per-launch copy
cannot happen (bound launches, graph capture). The launch itself runs against the stand-in
driver; the copies are proven on the GPU (tests/test_gpu_records.py)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from numba.cuda import types
from numba.cuda.typing.typeof import Purpose, typeof

from fastlaunch import _core
from fastlaunch.dispatcher import numba_type

PACKED = np.dtype([("x", np.int32), ("y", np.float64)])
ALIGNED = np.dtype([("x", np.int32), ("y", np.float64)], align=True)
NESTED = np.dtype([("v", np.float32, (3,)), ("n", np.int16), ("c", np.complex64)])
RECORD_DTYPES = [PACKED, ALIGNED, NESTED]


def scalars(dtype: np.dtype) -> list:
    """An `np.void` from a structured array and an `np.record` from a record array."""
    array = np.zeros(2, dtype)
    return [array[1], np.rec.array(array)[0]]


@pytest.mark.parametrize("dtype", RECORD_DTYPES, ids=["packed", "aligned", "nested"])
def test_records_type_as_numba_types_them(dtype):
    for record in scalars(dtype):
        (descriptor,) = _core.describe(_core.fingerprint((record,)))
        assert descriptor[0] == "record"
        assert numba_type(descriptor) == typeof(record, Purpose.argument)


def test_one_record_dtype_has_one_fingerprint_and_others_their_own():
    a, b = np.zeros(2, ALIGNED)
    assert _core.fingerprint((a,)) == _core.fingerprint((b,))
    assert _core.fingerprint((a,)) != _core.fingerprint((np.zeros(1, PACKED)[0],))
    # tuples of records fingerprint each member
    pair = _core.fingerprint(((a, np.zeros(1, PACKED)[0]),))
    (descriptor,) = _core.describe(pair)
    assert [m[0] for m in descriptor[1]] == ["record", "record"]


def test_a_record_is_one_pointer_parameter():
    record_type = typeof(np.zeros(1, ALIGNED)[0], Purpose.argument)
    assert isinstance(record_type, types.Record)
    # not yet staged on a device (no launch): the pointer slot is 0
    packed = _core.pack((record_type, types.int64), (np.zeros(1, ALIGNED)[0], 7))
    assert packed == (0).to_bytes(8, "little") + (7).to_bytes(8, "little")


def test_unstructured_void_scalars_go_to_numba_cuda():
    with pytest.raises(TypeError, match="numba-cuda's own launch path"):
        record_type = typeof(np.zeros(1, ALIGNED)[0], Purpose.argument)
        _core.pack((record_type,), (np.void(b"\x01\x02"),))


LAUNCH = textwrap.dedent(
    """
    import numpy as np
    import fastlaunch as fl
    from fastlaunch import _core
    from fastlaunch.dispatcher import numba_type

    assert fl.is_available(), _core.unavailable_reason()

    def k(record, pair, scale):
        pass

    kernel = fl.jit(k)
    array = np.zeros(2, np.dtype([("x", np.int32), ("y", np.float64)], align=True))
    args = (array[0], (array[1], 3), 2.0)
    fingerprint = _core.fingerprint(args)
    param_types = tuple(numba_type(d) for d in _core.describe(fingerprint))
    kernel._register(fingerprint, 90, param_types, _core.CompiledKernel(b"image", "entry"))
    for _ in range(3):
        kernel[1, 1](*args)
    assert kernel.numba_launches == 0 and kernel.miss_count == 0
    print("launched")

    def r(record, scale):
        pass

    single = fl.jit(r)
    single_args = (array[0], 2.0)
    fingerprint = _core.fingerprint(single_args)
    descriptors = _core.describe(fingerprint)
    param_types = tuple(numba_type(d) for d in descriptors)
    single._register(fingerprint, 90, param_types, _core.CompiledKernel(b"image", "entry"))
    single[1, 1](*single_args)
    try:
        single[1, 1].bind(*single_args)
    except TypeError as e:
        print(e)
    """
)


def test_records_launch_on_the_fast_path_and_are_not_bound(run_on_stand_in):
    lines = run_on_stand_in(LAUNCH)
    assert lines[0] == "launched"
    assert len(lines) == 2
    assert "bound launches and graph argument updates take no records" in lines[1]
