"""Scalars in CUDA ufunc calls and ``cuda.reduce`` on fastlaunch's path, side by side with
numba-cuda (issue 48): scalars at and past every dtype's edge (Python ints, floats, complex and
bools, NumPy scalars of each width) into a loop of every integer width, float32, float64 and
complex128. numba-cuda casts a scalar with ``np.array([x], dtype=loop)``; fastlaunch's plan
must give the loop the same value, or raise the same exception (class and message), with the
same warnings (each one counted); and a plan made for one scalar must not be reused for
another that numba-cuda resolves differently (a Python int's NumPy type: int64, uint64 from
2**63, object from 2**64).

Each ufunc is made once, without fastlaunch, and called through numba-cuda's own code, then
with fastlaunch installed (its plans wrap the same compiled kernels), so the whole module
compiles a few dozen small kernels. numba-cuda's low-occupancy warnings are left out of the
comparison: fastlaunch gives that one once per kernel (docs/differences.md)."""

from __future__ import annotations

import warnings

import numba.cuda
import numpy as np
import pytest
from numba import cuda, vectorize

import fastlaunch

pytestmark = pytest.mark.gpu

NUMBA_JIT = numba.cuda.jit

LOOPS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
LOOPS += ["float32", "float64", "complex128"]


def _int_edges() -> list:
    edges = set()
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        info = np.iinfo(t)
        edges |= {int(info.min) - 1, int(info.min), int(info.max), int(info.max) + 1}
    return sorted(edges) + [2**64, 2**65, -(2**63) - 1, -(2**64)]


NAN, INF = float("nan"), float("inf")

#: Python scalars at and past every edge, then NumPy scalars of each width
SCALARS = [
    *_int_edges(),
    NAN,
    INF,
    -INF,
    -0.0,
    2.5,
    1e10,
    1e300,
    2.0**63,
    2.0**64,
    1 + 2j,
    complex(NAN, 1),
    True,
    False,
    np.int8(-128),
    np.int8(-1),
    np.int16(300),
    np.int32(-(2**31)),
    np.int32(2**31 - 1),
    np.int64(2**40),
    np.int64(-(2**63)),
    np.uint8(255),
    np.uint16(65535),
    np.uint32(2**32 - 1),
    np.uint64(2**63),
    np.uint64(2**64 - 1),
    np.float16(65504),
    np.float16(-0.0),
    np.float32(3e38),
    np.float32(NAN),
    np.float64(NAN),
    np.float64(-INF),
    np.float64(1e10),
    np.float64(-0.0),
    np.float64(1e300),
    np.complex64(1 + 2j),
    np.complex128(complex(3, NAN)),
]


@pytest.fixture(autouse=True)
def uninstalled_after():
    yield
    fastlaunch.uninstall()
    assert numba.cuda.jit is NUMBA_JIT


@pytest.fixture(scope="module")
def edge_ufunc():
    """``a + b`` over one loop per dtype of ``LOOPS``, made once (numba-cuda's own kernels)."""

    @vectorize([f"{t}({t}, {t})" for t in LOOPS], target="cuda")
    def plus(a, b):
        return a + b

    return plus


@pytest.fixture(scope="module")
def signed_or_unsigned():
    """Two loops a Python int chooses between by its NumPy type: int64 and uint64."""

    @vectorize(["float64(float64, int64)", "float64(float64, uint64)"], target="cuda")
    def plus(a, b):
        return a + b

    return plus


def _is_performance_warning(warning: warnings.WarningMessage) -> bool:
    return any(cls.__name__ == "NumbaPerformanceWarning" for cls in warning.category.__mro__)


def outcome(call):
    """What a call gave (where, dtype, shape and bytes) or raised (class and message), and
    every warning it gave but numba-cuda's performance warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call()
            if isinstance(result, np.ndarray) or np.isscalar(result):
                where, host = "host", np.asarray(result)
            else:
                where, host = "device", result.copy_to_host()
            got = ("value", where, host.dtype, host.shape, host.tobytes())
        except Exception as error:
            got = ("raised", type(error), str(error))
    kept = [(w.category, str(w.message)) for w in caught if not _is_performance_warning(w)]
    return (*got, kept)


def side_by_side(ufunc, calls):
    """numba-cuda's outcome of each call (fastlaunch uninstalled), then fastlaunch's (the
    same ufunc, installed: one plan per key, reused by the calls after)."""
    fastlaunch.uninstall()
    expected = [outcome(lambda call=call: call(ufunc)) for call in calls]
    with fastlaunch.install():
        got = [outcome(lambda call=call: call(ufunc)) for call in calls]
    return expected, got


def differences(labels, expected, got):
    return [(label, e, g) for label, e, g in zip(labels, expected, got, strict=True) if e != g]


def identity_array(loop: str, n: int = 5) -> np.ndarray:
    """Elements ``e`` with ``e + x == x`` bit for bit in the loop (-0.0 for floats: +0.0 and
    -0.0 come through), so the result shows the scalar as the loop got it."""
    dtype = np.dtype(loop)
    if dtype.kind in "fc":
        return np.full(n, -0.0, dtype) if dtype.kind == "f" else np.full(n, complex(-0.0, -0.0))
    return np.zeros(n, dtype)


@pytest.mark.parametrize("loop", LOOPS)
def test_scalars_at_and_past_the_edges_give_what_numba_cuda_gives(edge_ufunc, loop):
    """A device array of ``loop`` chooses that loop; each scalar then reaches it as
    numba-cuda's one-element array gives it, or raises what that raises, warning as often."""
    array = cuda.to_device(identity_array(loop))
    calls = [lambda u, s=scalar: u(array, s) for scalar in SCALARS]
    expected, got = side_by_side(edge_ufunc, calls)
    assert differences(SCALARS, expected, got) == []
    # the cases the review found: overflows and a NaN into an integer loop raise
    if loop == "int32":
        by_scalar = dict(zip(map(repr, SCALARS), got, strict=True))
        assert by_scalar[repr(np.int64(2**40))][:2] == ("raised", OverflowError)
        assert by_scalar[repr(np.uint64(2**63))][:2] == ("raised", OverflowError)
        assert by_scalar[repr(NAN)][:2] == ("raised", ValueError)
        assert by_scalar[repr(np.float64(NAN))][:2] == ("raised", ValueError)
    if loop == "float32":  # a complex into a real loop warns at most once (NumPy 2.5: never)
        index = SCALARS.index(next(s for s in SCALARS if type(s) is np.complex64))
        assert len(got[index][-1]) <= 1


def test_a_python_int_takes_the_loop_of_its_numpy_type(signed_or_unsigned):
    """2**63 is uint64 to NumPy, 2**64 and -2**63-1 are objects: numba-cuda picks the uint64
    loop for the first and finds the loops ambiguous for the others (its TypeError); a plan
    made for one is never run for another, in either order."""
    array = cuda.to_device(np.zeros(7))
    values = [2**63, 2**64, 5, -(2**63), -(2**63) - 1, 2**64 - 1, 2**63 - 1, 2**63]
    values += [5.0, True, np.int64(5), np.uint64(5), np.uint8(5), 2**100]
    for order in (values, values[::-1]):
        signed_or_unsigned.__dict__.pop("_fastlaunch_plans", None)  # plans made in this order
        calls = [lambda u, v=v: u(array, v) for v in order]
        expected, got = side_by_side(signed_or_unsigned, calls)
        assert differences(order, expected, got) == []
    kinds = dict(zip(map(repr, values), got[::-1], strict=True))
    assert kinds[repr(2**64)][:2] == ("raised", TypeError)
    assert kinds[repr(2**63)][0] == "value"


SCALAR_PAIRS = [
    (1, 2),
    (2**63, 1),
    (2**64, 1),
    (np.float32(1.5), np.float32(2)),
    (np.int8(100), np.int8(100)),
    (np.uint64(2**64 - 1), np.uint64(1)),
    (np.int32(5), 2**40),
    (1.5, 2.5),
]


def test_calls_of_scalars_alone_give_what_numba_cuda_gives(edge_ufunc):
    calls = [lambda u, pair=pair: u(*pair) for pair in SCALAR_PAIRS]
    expected, got = side_by_side(edge_ufunc, calls)
    assert differences(SCALAR_PAIRS, expected, got) == []


def test_host_arrays_with_scalars_give_what_numba_cuda_gives(edge_ufunc):
    host = identity_array("int16")
    scalars = [2**15 - 1, 2**15, np.int32(2**15), np.float64(NAN), np.complex64(1j), 1e10]
    calls = [lambda u, s=s: u(host, s) for s in scalars]
    expected, got = side_by_side(edge_ufunc, calls)
    assert differences(scalars, expected, got) == []


# -- cuda.reduce -----------------------------------------------------------------------------------


def _sum(a, b):
    return a + b


@pytest.fixture(scope="module")
def reduction():
    return cuda.reduce(_sum)


INITS = [0, 2**31, 2**40, np.int64(2**40), np.float64(NAN), 1.5, True, -(2**31) - 1]


def test_a_reductions_init_is_cast_as_numba_cuda_casts_it(reduction):
    """numba-cuda casts ``init`` with the array's type (``np.int32(init)``): the same value
    (``np.int64(2**40)`` wraps there too), exception and warnings."""
    array = cuda.to_device(np.arange(1000, dtype=np.int32))
    calls = [lambda r, init=init: r(array, init=init) for init in INITS]
    expected, got = side_by_side(reduction, calls)
    assert differences(INITS, expected, got) == []


@pytest.mark.parametrize("stream", ["new", "default"])
def test_a_reduction_of_a_host_array_on_a_stream_gives_what_numba_cuda_gives(reduction, stream):
    """numba-cuda 0.30's launch reads a host argument through DLPack with the launch's stream,
    which NumPy refuses ("NumPy only supports stream=None."); on the default stream it runs."""
    host = np.arange(1000, dtype=np.float64)

    def call(r):
        return r(host, stream=cuda.stream() if stream == "new" else cuda.default_stream())

    expected, got = side_by_side(reduction, [call])
    assert got == expected
    if stream == "new":
        assert expected[0][0] == "raised" and "stream=None" in expected[0][2], expected
