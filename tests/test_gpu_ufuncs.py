"""CUDA ufuncs and ``cuda.reduce`` on fastlaunch's path (``fastlaunch.ufuncs``), side by side
with numba-cuda: each case runs on a ufunc made and called with fastlaunch installed and on a
twin made and called with it uninstalled (numba-cuda's own code throughout), and the two must
give the same kind of result (device or host array, NumPy scalar), dtype, shape and bytes, or
raise the same exception with the same message. Each case also says whether fastlaunch's
plan took it or numba-cuda's own call did."""

from __future__ import annotations

import math

import numba.cuda
import numpy as np
import pytest
from numba import cuda, vectorize

import fastlaunch
from fastlaunch.ufuncs import plans as ufunc_plans

pytestmark = pytest.mark.gpu

NUMBA_JIT = numba.cuda.jit
SIGNATURES = [
    "float32(float32, float32)",
    "float64(float64, float64)",
    "int64(int64, int64)",
    "complex128(complex128, complex128)",
]


@pytest.fixture(autouse=True)
def uninstalled_after():
    yield
    fastlaunch.uninstall()
    assert numba.cuda.jit is NUMBA_JIT


def make_add():
    @vectorize(SIGNATURES, target="cuda")
    def add(a, b):
        return a * 2 + b

    return add


def as_host(result):
    if isinstance(result, np.ndarray) or np.isscalar(result) or result is None:
        return ("host", result)
    return ("device", result.copy_to_host())


def outcome(call):
    try:
        return ("value", *as_host(call()))
    except Exception as error:  # the same class and message are expected
        return ("raised", type(error), str(error))


def both(make_ufunc, call):
    """(numba-cuda's outcome, fastlaunch's outcome, fastlaunch's ufunc)."""
    numba_ufunc = make_ufunc()
    expected = outcome(lambda: call(numba_ufunc))
    with fastlaunch.install():
        fast_ufunc = make_ufunc()
        got = outcome(lambda: call(fast_ufunc))
    return expected, got, fast_ufunc


def assert_same(expected, got):
    assert got[0] == expected[0], (expected, got)
    if expected[0] == "raised":
        assert got[1:] == expected[1:]
        return
    assert got[1] == expected[1]  # host or device
    e, g = np.asarray(expected[2]), np.asarray(got[2])
    assert (g.dtype, g.shape) == (e.dtype, e.shape)
    assert g.tobytes() == e.tobytes()


def planned(ufunc) -> list[bool]:
    """Per remembered key: whether a plan took it (False: numba-cuda's own call)."""
    return [plan is not None for plan in ufunc.__dict__.get("_fastlaunch_plans", {}).values()]


F32 = np.arange(4096, dtype=np.float32) / 7
F64 = np.linspace(-3, 3, 60, dtype=np.float64).reshape(6, 10)
I64 = np.arange(-50, 50, dtype=np.int64)
C128 = (np.arange(12) + 1j * np.arange(12)[::-1]).astype(np.complex128)

# name -> (call, whether fastlaunch's plan takes it; None: not even keyed)
CASES = {
    "device arrays": (lambda u: u(cuda.to_device(F32), cuda.to_device(F32[::-1].copy())), True),
    "device and float scalar": (lambda u: u(cuda.to_device(F32), 2.5), True),
    "float scalar and device": (lambda u: u(1e40, cuda.to_device(F32)), True),
    "device and int scalar": (lambda u: u(cuda.to_device(I64), 3), True),
    "device and numpy scalar": (lambda u: u(cuda.to_device(F32), np.float32(0.25)), True),
    "column and 2-d": (lambda u: u(cuda.to_device(F64[:, :1].copy()), cuda.to_device(F64)), True),
    "C and F": (lambda u: u(cuda.to_device(F64), cuda.to_device(np.asfortranarray(F64))), True),
    "strided view": (lambda u: u(cuda.to_device(F32)[::4], cuda.to_device(F32)[1::4]), True),
    "2-d strided view": (lambda u: u(cuda.to_device(F64)[::2, ::3], 1.0), True),
    "complex": (lambda u: u(cuda.to_device(C128), 1j), True),
    "host arrays": (lambda u: u(F32, F32), True),
    "host 2-d arrays": (lambda u: u(F64, F64), True),
    "host and scalar": (lambda u: u(F64, 2.0), True),
    "host and device": (lambda u: u(F32, cuda.to_device(F32)), True),
    "host F-order": (lambda u: u(np.asfortranarray(F64), F64), True),
    "scalars only": (lambda u: u(2.0, 3.0), True),
    "out=": (lambda u: u(cuda.to_device(F32), 1.0, out=cuda.device_array(4096, np.float32)), True),
    "out= 2-d": (lambda u: u(cuda.to_device(F64), 1.0, out=cuda.device_array((6, 10))), True),
    "stream=": (lambda u: u(cuda.to_device(F32), cuda.to_device(F32), stream=cuda.stream()), True),
    # numba-cuda's own call takes these
    "out= of another dtype": (
        lambda u: u(cuda.to_device(F32), 1.0, out=cuda.device_array(4096, np.float64)),
        False,
    ),
    "out= F-order 2-d": (  # numba-cuda writes it through a copy: its own call
        lambda u: u(cuda.to_device(F64), 1.0, out=cuda.device_array((6, 10), order="F")),
        False,
    ),
    "host with stream=": (lambda u: u(F32, F32, stream=cuda.stream()), False),
    "0-d host array": (lambda u: u(np.array(2.0), np.ones(3)), False),
    "zero-size": (lambda u: u(cuda.to_device(np.zeros(0)), 1.0), False),
    "no loop": (lambda u: u(cuda.to_device(np.ones(4, np.int8)), 1), False),
    "mixed dtypes": (lambda u: u(cuda.to_device(F32), cuda.to_device(F64[0])), False),
    "shapes do not broadcast": (lambda u: u(cuda.to_device(F64), cuda.to_device(F32[:7])), False),
    "list": (lambda u: u([1.0, 2.0], 1.0), False),
    # numba-cuda's own call at once, no key made: an out= no plan takes
    "host out=": (lambda u: u(F32, F32, out=np.empty(4096, np.float32)), None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_ufunc_call_gives_what_numba_cuda_gives(name):
    call, takes = CASES[name]
    expected, got, ufunc = both(make_add, call)
    assert_same(expected, got)
    assert planned(ufunc) == ([] if takes is None else [takes]), planned(ufunc)


# an argument with fewer dimensions than the call (NumPy: aligned with the trailing axes)
FEWER_DIMENSIONS = {
    "2-d and row": (F64, F64[0].copy()),
    "3-d and 2-d": (np.arange(24.0).reshape(2, 3, 4), np.arange(12.0).reshape(3, 4)),
    "host 2-d and row": (F64, F64[0].copy()),
}


@pytest.mark.parametrize("name", list(FEWER_DIMENSIONS))
def test_an_argument_of_fewer_dimensions_broadcasts_as_numpy_broadcasts_it(name):
    """A deliberate difference (docs/differences.md): numba-cuda's broadcast compares such an
    argument's axes with the call's leading ones and zeroes the strides of every axis that
    differs, so each element reads the argument's first element. fastlaunch's plan gives
    NumPy's result (CuPy's, and numba's CPU ufuncs')."""
    a, b = FEWER_DIMENSIONS[name]
    on_device = not name.startswith("host")

    def call(ufunc):
        result = ufunc(*((cuda.to_device(a), cuda.to_device(b)) if on_device else (a, b)))
        return result.copy_to_host() if on_device else result

    numba_outcome = outcome(lambda: call(make_add()))
    with fastlaunch.install():
        add = make_add()
        got = call(add)
    np.testing.assert_array_equal(got, a * 2 + b)
    assert planned(add) == [True]
    # numba-cuda's, as it stands
    assert numba_outcome[0] == "raised" or not np.array_equal(numba_outcome[2], a * 2 + b)


def test_a_plan_is_made_once_per_types_and_shapes_and_launches_once_per_call():
    with fastlaunch.install():
        add = make_add()
        a, b = cuda.to_device(F32), cuda.to_device(F32)
        for _ in range(3):
            add(a, b)
        add(a, 1.0)
        (first, second) = add._fastlaunch_plans.values()
        kernel = first.kernel
        misses = kernel.miss_count
        for _ in range(50):
            result = add(a, b)
        assert kernel.miss_count == misses  # no new compile, no numba-cuda launch
        assert kernel.numba_launches == 0
        np.testing.assert_array_equal(result.copy_to_host(), F32 * 2 + F32)
        assert len(add._fastlaunch_plans) == 2


def test_the_block_size_is_numba_cudas_forall_choice():
    with fastlaunch.install():
        add = make_add()
        a = cuda.to_device(F32)
        add(a, a)
        (plan,) = add._fastlaunch_plans.values()
        specialized = plan.kernel.dispatcher.specialize(a, a, cuda.device_array_like(a))
        forall = numba.cuda.dispatcher.ForAll(specialized, 4096, 0, 0, 0)
        assert plan.blockdim == forall._compute_thread_per_block(specialized)
        assert plan.griddim == math.ceil(4096 / plan.blockdim)


def test_out_is_returned_as_it_was_given():
    # a deliberate difference (docs/differences.md): numba-cuda returns a new array object
    # over out's memory; fastlaunch returns out itself
    with fastlaunch.install():
        add = make_add()
        out = cuda.device_array(4096, np.float32)
        assert add(cuda.to_device(F32), 1.0, out=out) is out
        np.testing.assert_array_equal(out.copy_to_host(), F32 * 2 + 1)


def test_cupy_and_torch_arrays_as_numba_cuda_takes_them():
    cupy = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    sources = {
        "cupy": lambda: cupy.asarray(F32),
        "torch": lambda: torch.from_numpy(F32.copy()).cuda(),
    }
    for make in sources.values():
        expected, got, ufunc = both(make_add, lambda u, make=make: u(make(), make()))
        assert_same(expected, got)
        assert planned(ufunc) == [True]


def test_a_ufunc_made_before_install_takes_the_plan_once_installed():
    add = make_add()
    a = cuda.to_device(F32)
    expected = add(a, a).copy_to_host()
    with fastlaunch.install():
        got = add(a, a).copy_to_host()
        assert planned(add) == [True]
    np.testing.assert_array_equal(got, expected)
    fastlaunch.uninstall()
    assert type(add).__call__.__module__ == "numba.cuda.vectorizers"


def test_a_ufunc_call_with_out_is_captured_in_a_graph():
    with fastlaunch.install():
        add = make_add()
        a = cuda.to_device(F32)
        out = cuda.device_array(4096, np.float32)
        add(a, 1.0, out=out)  # planned and compiled before the capture
        fastlaunch.synchronize()
        with fastlaunch.graph() as graph:
            add(a, 3.0, out=out)
        assert graph.captured and graph.node_count == 1
        graph.replay()
        graph.stream.synchronize()
        np.testing.assert_array_equal(out.copy_to_host(), F32 * 2 + 3)


# -- cuda.reduce ---------------------------------------------------------------------------------


def make_sum():
    return cuda.reduce(lambda a, b: a + b)


REDUCE_SIZES = [1, 5, 100, 128, 129, 1000, 4096, 8192 + 77, 100_000]


@pytest.mark.parametrize("size", REDUCE_SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_a_reduction_gives_what_numba_cuda_gives(size, dtype):
    host = (np.arange(size) % 97 - 40).astype(dtype) / (3 if dtype != np.int32 else 1)
    host = host.astype(dtype)
    expected, got, reduction = both(make_sum, lambda r: r(cuda.to_device(host)))
    assert_same(expected, got)
    assert type(got[2]) is type(expected[2])
    assert len(reduction._fastlaunch_plans) == 1


@pytest.mark.parametrize("size", [5, 128, 1000, 100_000])
def test_a_reduction_into_res_gives_what_numba_cuda_gives(size):
    host = np.arange(size, dtype=np.float32) / 11

    def call(r):
        res = cuda.to_device(np.full(3, -1, np.float32))
        assert r(cuda.to_device(host), res=res, init=2.5) is None
        return res

    expected, got, _ = both(make_sum, call)
    assert_same(expected, got)


@pytest.mark.parametrize("size", [1000, 8192 + 77])
def test_repeated_reductions_give_each_its_own_sum(size):
    """Calls on the default stream take back the partials of earlier ones (a plan's spares):
    each call, with or without res, over new values, gives what numba-cuda gives."""
    inputs = [np.arange(size, dtype=np.float64) * (k + 1) - k for k in range(6)]

    def calls(r):
        results = []
        for k, host in enumerate(inputs):
            if k % 2:
                res = cuda.device_array(1, np.float64)
                r(cuda.to_device(host), res=res)
                results.append(res.copy_to_host()[0])
            else:
                results.append(r(cuda.to_device(host)))
        return np.array(results)

    expected, got, reduction = both(make_sum, calls)
    assert_same(expected, got)
    (plan,) = reduction._fastlaunch_plans.values()
    assert len(plan.spares) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"size": 700},
        {"init": 10},
        {"stream": "new"},
        {"size": 0},
    ],
    ids=["size", "init", "stream", "size 0"],
)
def test_a_reduction_with_keywords_gives_what_numba_cuda_gives(kwargs):
    host = np.arange(1000, dtype=np.float64)

    def call(r):
        given = dict(kwargs)
        if given.get("stream") == "new":
            given["stream"] = cuda.stream()
        return r(cuda.to_device(host), **given)

    expected, got, _ = both(make_sum, call)
    assert_same(expected, got)


@pytest.mark.parametrize("size", [100, 1000, 4096])
def test_a_reduction_of_a_host_array_gives_numba_cudas_value_and_warnings(size):
    import warnings

    host = (np.arange(size) % 13).astype(np.float64) / 7

    def call(r):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = r(host)
        names = [type(w.message).__name__ for w in caught if "Host array" in str(w.message)]
        return value, names

    expected = call(make_sum())
    with fastlaunch.install():
        reduction = make_sum()
        got = call(reduction)
        assert len(reduction._fastlaunch_plans) == 1
    assert type(got[0]) is type(expected[0]) and got[0] == expected[0]
    assert got[1] == expected[1]  # one NumbaPerformanceWarning per launch over the host array


def test_reductions_numba_cuda_takes_itself():
    for call in (
        lambda r: r(cuda.to_device(np.ones((4, 4)))),  # 2-d: numba-cuda's TypeError
        lambda r: r(cuda.to_device(np.zeros(0))),  # empty: init
    ):
        expected, got, reduction = both(make_sum, call)
        assert_same(expected, got)
        assert not reduction.__dict__.get("_fastlaunch_plans")


def test_a_reduction_of_a_non_contiguous_host_array_is_numba_cudas_call_over_a_copy():
    """numba-cuda's own call takes it; numba-cuda refuses the array, fastlaunch's kernels
    launch over a contiguous copy of it (a deliberate difference, docs/differences.md)."""
    host = np.arange(2000.0)[::2]
    expected, got, reduction = both(make_sum, lambda r: r(host))
    assert expected[0] == "raised", expected
    assert got[:2] == ("value", "host") and got[2] == host.sum(), got
    assert not reduction.__dict__.get("_fastlaunch_plans")


def test_the_plans_a_ufunc_keeps_are_bounded(monkeypatch):
    monkeypatch.setattr(ufunc_plans, "MAX_PLANS", 8)
    with fastlaunch.install():
        add = make_add()
        for n in range(1, 21):
            result = add(cuda.to_device(np.ones(n, np.float32)), 1.0)
            np.testing.assert_array_equal(result.copy_to_host(), 3)
        assert len(add._fastlaunch_plans) <= 8


# -- gufuncs ---------------------------------------------------------------------------------------


def make_dot():
    from numba import guvectorize

    @guvectorize(
        ["void(float32[:], float32[:], float32[:])", "void(float64[:], float64[:], float64[:])"],
        "(n),(n)->()",
        target="cuda",
    )
    def dot(a, b, out):
        total = a[0] * 0
        for i in range(a.shape[0]):
            total += a[i] * b[i]
        out[0] = total

    return dot


M32 = (np.arange(256 * 16, dtype=np.float32) / 9).reshape(256, 16)
M64 = (np.arange(4 * 3 * 5, dtype=np.float64) - 7).reshape(4, 3, 5)

GUFUNC_CASES = {
    "device": (lambda g: g(cuda.to_device(M32), cuda.to_device(M32)), True),
    "host": (lambda g: g(M32, M32), True),
    "host and device": (lambda g: g(M32, cuda.to_device(M32)), True),
    "out=": (
        lambda g: g(
            cuda.to_device(M32), cuda.to_device(M32), out=cuda.device_array(256, np.float32)
        ),
        True,
    ),
    "stream=": (lambda g: g(cuda.to_device(M32), cuda.to_device(M32), stream=cuda.stream()), True),
    "F-order and view": (
        lambda g: g(cuda.to_device(np.asfortranarray(M32)), cuda.to_device(M32)[:, ::1]),
        True,
    ),
    "cupy": (lambda g: g(_cupy().asarray(M32), _cupy().asarray(M32)), True),
    # numba-cuda's own call
    "two loop dimensions": (lambda g: g(cuda.to_device(M64), cuda.to_device(M64)), False),
    "a pinned input": (lambda g: g(cuda.to_device(M32), cuda.to_device(M32[0].copy())), False),
    "a cast to the loop": (lambda g: g(M32.astype(np.int32), M32.astype(np.int32)), False),
    "positional out": (
        lambda g: g(cuda.to_device(M32), cuda.to_device(M32), cuda.device_array(256, np.float32)),
        False,
    ),
    "wrong core shapes": (
        lambda g: g(cuda.to_device(M32), cuda.to_device(M32[:, :8].copy())),
        False,
    ),
}


def _cupy():
    return pytest.importorskip("cupy")


@pytest.mark.parametrize("name", list(GUFUNC_CASES))
def test_a_gufunc_call_gives_what_numba_cuda_gives(name):
    call, takes = GUFUNC_CASES[name]
    expected, got, gufunc = both(make_dot, call)
    assert_same(expected, got)
    # None: no key (numba-cuda's own call at once)
    assert planned(gufunc) == ([] if takes is None else [takes]), planned(gufunc)
