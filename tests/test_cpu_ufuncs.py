"""fastlaunch's CUDA ufunc calls (``fastlaunch.ufuncs``) without a GPU: the plan a call makes
(numba-cuda's loop choice, broadcasting, scalar casts, host copies, which kernel, one launch
per call) and the stagers' indexing, checked by running the kernels' Python source over every
thread on NumPy arrays that stand in for device arrays. The launches themselves, and the
results side by side with numba-cuda, are proven on the GPU (tests/test_gpu_ufuncs.py)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numba.cuda
import numpy as np
import pytest
from numba.cuda.deviceufunc import GUFuncEngine, expand_gufunc_template
from numba.cuda.vectorizers import (
    CUDAGeneralizedUFunc,
    CUDAUFuncDispatcher,
    _gufunc_stager_source,
    vectorizer_stager_source,
)

from fastlaunch.ufuncs import arguments, kernels, stagers
from fastlaunch.ufuncs import install as ufuncs_install
from fastlaunch.ufuncs import plans as ufunc_plans
from fastlaunch.ufuncs import vectorize as calls

BLOCK = 64


class FakeCuda:
    """``numba.cuda`` as far as a stager's body uses it: ``grid(1)`` is the running thread."""

    def __init__(self) -> None:
        self.thread = threading.local()

    def grid(self, ndim: int) -> int:
        assert ndim == 1
        return self.thread.tid


FAKE_CUDA = FakeCuda()


class FakeDeviceArray:
    """A device array by the CUDA array interface, its bytes in a NumPy array."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.dtype, self.shape = host.dtype, host.shape

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "typestr": self.host.dtype.str,
            "shape": self.host.shape,
            "strides": None if self.host.flags.c_contiguous else self.host.strides,
            "data": (self.host.ctypes.data, False),
            "version": 3,
        }

    @property
    def ndim(self) -> int:
        return self.host.ndim

    @property
    def size(self) -> int:
        return self.host.size

    def reshape(self, *shape):
        return FakeDeviceArray(self.host.reshape(*shape))  # a view, as numba-cuda's

    def copy_to_host(self, ary=None, stream=0):
        if ary is None:
            return self.host.copy()
        ary[...] = self.host
        return ary


class FakeKernel:
    """A kernel that runs its Python function once per thread of the grid."""

    def __init__(self, py_func) -> None:
        self.py_func = py_func
        self.launches: list[tuple] = []

    def __getitem__(self, config):
        griddim, blockdim, stream = config

        def launch(*args):
            self.launches.append((griddim, blockdim, stream))
            self.arguments = args
            if any(hasattr(a, "gpu_data") for a in args):
                return  # numba-cuda's own arrays: no bytes here to compute on
            host = [a.host if isinstance(a, FakeDeviceArray) else a for a in args]
            for tid in range(griddim * blockdim):
                FAKE_CUDA.thread.tid = tid
                self.py_func(*host)

        return launch

    def forall(self, ntasks, stream=0):
        return self[(ntasks + BLOCK - 1) // BLOCK, BLOCK, stream]


def numba_stager(core):
    """numba-cuda's own kernel of a two-argument loop, over ``core``."""
    namespace = {"__cuda__": FAKE_CUDA, "__core__": core}
    exec(
        vectorizer_stager_source.format(
            name="f", args="a0, a1", argitems="a0[__tid__], a1[__tid__]"
        ),
        namespace,
    )
    return FakeKernel(namespace["__vectorized_f"])


def core(a, b):
    return a * 2 + b


LOOPS = [np.float32, np.float64, np.int64]


@pytest.fixture
def ufunc(ufunc_of):
    """A CUDA ufunc of three loops over ``core``, with fastlaunch's call in place."""
    return ufunc_of([((t, t), t) for t in LOOPS], core)


@pytest.fixture
def ufunc_of(monkeypatch):
    """Makes CUDA ufuncs of given loops (``[((argument types), result type), ...]``) over a
    two-argument core, with fastlaunch's call in place."""
    made_stagers: list[FakeKernel] = []

    def stager(ufunc, core, pattern):
        made_stagers.append(stagers.make(core, pattern, FakeKernel, FAKE_CUDA))
        return made_stagers[-1]

    monkeypatch.setattr(ufunc_plans, "device", lambda: 0)
    monkeypatch.setattr(kernels, "as_fastlaunch", lambda kernel: kernel)
    monkeypatch.setattr(calls, "_stager", stager)
    monkeypatch.setattr(kernels, "block_size", lambda kernel, example: BLOCK)
    monkeypatch.setattr(
        numba.cuda,
        "device_array",
        lambda shape, dtype, stream=0, order="C": FakeDeviceArray(
            np.full(shape, np.array(-7).astype(dtype), dtype, order=order)
        ),
    )
    monkeypatch.setattr(
        numba.cuda, "to_device", lambda host, stream=0: FakeDeviceArray(host.copy())
    )
    # numba-cuda's resolution wraps array-interface objects (with a context): taken as they are
    monkeypatch.setattr(numba.cuda, "as_cuda_array", lambda obj: obj)
    ufuncs_install.install()

    def make(signatures, core):
        loops = OrderedDict(
            (tuple(map(np.dtype, argtypes)), (np.dtype(restype), numba_stager(core)))
            for argtypes, restype in signatures
        )
        made = CUDAUFuncDispatcher(loops, core)
        made.made_stagers = made_stagers
        return made

    yield make
    ufuncs_install.uninstall()


def plans(ufunc):
    return list(ufunc._fastlaunch_plans.values())


def device(host):
    return FakeDeviceArray(np.array(host, copy=True, order="K"))


def test_one_dimensional_device_arrays_take_numba_cudas_own_kernel(ufunc):
    a, b = np.arange(100, dtype=np.float32), np.ones(100, np.float32)
    for _ in range(3):
        result = ufunc(device(a), device(b))
    assert isinstance(result, FakeDeviceArray)
    np.testing.assert_array_equal(result.host, a * 2 + b)
    (plan,) = plans(ufunc)
    assert plan.kernel is ufunc.functions[(np.dtype(np.float32),) * 2][1]
    assert (plan.griddim, plan.blockdim) == (2, BLOCK)
    assert len(plan.kernel.launches) == 3 and not ufunc.made_stagers


@pytest.mark.parametrize(
    "shapes",
    [
        [(4, 5), (5,)],
        [(4, 1), (4, 5)],
        [(2, 3, 4), (3, 1)],
        [(1, 3, 1), (2, 1, 4)],
        [(7,), (1,)],
        [(3, 4), (3, 4)],
    ],
)
def test_broadcasts_index_in_place_as_numpy_broadcasts(ufunc, shapes):
    a = np.arange(np.prod(shapes[0]), dtype=np.float64).reshape(shapes[0])
    b = (np.arange(np.prod(shapes[1]), dtype=np.float64) * 10).reshape(shapes[1])
    result = ufunc(device(a), device(b))
    np.testing.assert_array_equal(result.host, a * 2 + b)
    assert result.shape == np.broadcast_shapes(a.shape, b.shape)
    (stager,) = ufunc.made_stagers
    assert len(stager.launches) == 1


def test_non_contiguous_and_fortran_device_arrays(ufunc):
    a = np.arange(60.0).reshape(6, 10)
    result = ufunc(FakeDeviceArray(a[::2, ::3]), FakeDeviceArray(np.asfortranarray(a)[::2, ::3]))
    np.testing.assert_array_equal(result.host, a[::2, ::3] * 3)


def test_scalars_are_cast_to_the_loop_numba_cuda_chooses(ufunc):
    a = np.arange(10, dtype=np.float32)
    with np.errstate(over="ignore"):  # float64 scalar, float32 loop: inf, as numba-cuda casts
        result = ufunc(device(a), 1e40)
        assert result.dtype == np.float32
        np.testing.assert_array_equal(result.host, a * 2 + np.float32(1e40))
    (plan,) = plans(ufunc)
    assert plan.casts[1] is np.float32
    result = ufunc(3, device(np.arange(5)))  # an int against int64 arrays
    np.testing.assert_array_equal(result.host, 6 + np.arange(5))


# -- scalars, side by side with numba-cuda's own call (its code, over the same stand-ins) -----


def plus(a, b):
    return a + b  # over an array of zeros: the scalar as the loop got it, and no warning of its own


def numba_cudas_call(ufunc, args, kws=None):
    """numba-cuda's own ``CUDAUFuncDispatcher.__call__``, whatever is installed."""
    from numba.cuda.vectorizers import CUDAUFuncMechanism

    return CUDAUFuncMechanism.call(ufunc.functions, args, dict(kws or {}))


def scalar_outcome(call):
    """What a call gave (its dtype and bytes) or raised (class and message), and the warnings
    it gave (class and message, each one: ``always``)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call()
            host = result.host if isinstance(result, FakeDeviceArray) else np.asarray(result)
            got = ("value", host.dtype, host.tobytes())
        except Exception as error:
            got = ("raised", type(error), str(error))
    return (*got, [(w.category, str(w.message)) for w in caught])


def _int_edges() -> list:
    edges = []
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        info = np.iinfo(t)
        edges += [info.min - 1, info.min, info.max, info.max + 1]
    return sorted(set(edges)) + [2**64, 2**65, -(2**63) - 1, -(2**64)]


#: scalars at and past every dtype's edge: Python ints, floats, complex and bools, and NumPy
#: scalars of each width
EDGE_SCALARS = [
    *_int_edges(),
    float("nan"),
    float("inf"),
    -float("inf"),
    -0.0,
    2.5,
    1e10,
    1e300,
    2.0**63,
    2.0**64,
    1 + 2j,
    complex(float("nan"), 1),
    True,
    False,
    np.int8(-1),
    np.int16(300),
    np.int32(-(2**31)),
    np.int64(2**40),
    np.int64(-(2**63)),
    np.uint8(255),
    np.uint16(65535),
    np.uint32(2**32 - 1),
    np.uint64(2**63),
    np.uint64(2**64 - 1),
    np.float16(65504),
    np.float32(3e38),
    np.float32("nan"),
    np.float64("nan"),
    np.float64(1e10),
    np.float64(-0.0),
    np.float64(1e300),
    np.complex64(1 + 2j),
    np.complex128(complex(3, float("nan"))),
    np.longlong(7),
]

EDGE_LOOPS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
EDGE_LOOPS += ["float16", "float32", "float64", "complex64", "complex128", "bool"]


@pytest.mark.parametrize("loop", EDGE_LOOPS)
def test_scalars_reach_the_loop_as_numba_cudas_array_of_them_gives_them(ufunc_of, loop):
    """numba-cuda casts a scalar with ``np.array([x], dtype=loop)``: the same value, or the
    same exception (``OverflowError`` past an integer's range, ``ValueError`` for a NaN into
    an integer, ``TypeError`` for a complex into a real), and the same warnings, once each
    (a ``ComplexWarning`` for a NumPy complex into a real loop, ``RuntimeWarning`` overflows).
    A plan made for one value of a scalar's key casts every later value the same way."""
    ufunc = ufunc_of([((t, t), t) for t in EDGE_LOOPS], plus)
    zeros = np.zeros(3, loop)
    differences = []
    for scalar in EDGE_SCALARS:
        for args in ((device(zeros), scalar), (scalar, zeros)):
            expected = scalar_outcome(lambda args=args: numba_cudas_call(ufunc, args))
            got = scalar_outcome(lambda args=args: ufunc(*args))
            if got != expected:
                differences.append((scalar, expected, got))
    assert differences == []


def test_every_scalar_cast_a_plan_makes_is_the_arrays_cast():
    """A plan casts a Python scalar by the loop's type (``np.float32(x)``), four times faster
    than the array numba-cuda makes, and every other scalar through that array: over every
    edge and every NumPy number type, the same value, exception and warnings."""
    from fastlaunch.ufuncs.vectorize import scalar_cast

    def cast_outcome(cast, value):
        return scalar_outcome(lambda: np.asarray(cast(value)))

    dtypes = [np.dtype(code) for code in "?bBhHiIlLqQefdFD"]
    differences = [
        (value, dtype)
        for value in EDGE_SCALARS + [2**1024, 1e-300, 5e-324, 3.5e38, complex(1e300, 1e300)]
        for dtype in dtypes
        if cast_outcome(scalar_cast(type(value), dtype), value)
        != cast_outcome(lambda v, dtype=dtype: np.array([v], dtype=dtype)[0], value)
    ]
    assert differences == []


def test_a_python_int_is_keyed_by_the_numpy_type_numba_cuda_gives_it(ufunc_of):
    """numba-cuda resolves a Python int by ``np.asarray(x).dtype``: int64, uint64 from 2**63,
    object past uint64 (and below int64). Given an int64 and a uint64 loop, 2**63 takes the
    uint64 one and 2**64 neither (numba-cuda's TypeError): a plan for one is not the other's."""
    ufunc = ufunc_of([(("float64", "int64"), "float64"), (("float64", "uint64"), "float64")], plus)
    zeros = device(np.zeros(4))
    for scalar in (5, 2**63, 2**64, -(2**63), -(2**63) - 1, 2**63 - 1, 2**64 - 1, -(2**70)):
        expected = scalar_outcome(lambda scalar=scalar: numba_cudas_call(ufunc, (zeros, scalar)))
        got = scalar_outcome(lambda scalar=scalar: ufunc(zeros, scalar))
        assert got == expected, scalar
    with pytest.raises(TypeError, match="ambiguous"):
        ufunc(zeros, 2**64)
    assert ufunc(zeros, 2**63).host[0] == 2.0**63
    for value in (0, -(2**63), 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 2**200):
        assert arguments.int_dtype(value) == np.asarray(value).dtype, value
    keys = {arguments.key_of(v) for v in (1, -(2**63), 2**63 - 1)}
    assert len(keys) == 1
    assert len({arguments.key_of(v) for v in (1, 2**63, 2**64, -(2**63) - 1)}) == 3


def test_scalar_keys_are_what_numba_cuda_resolves_by():
    """Every other scalar's NumPy type follows from its class, but a timedelta's unit is its
    value's: numba-cuda's own call takes those."""
    import enum

    class Level(enum.IntEnum):  # an int subclass: NumPy types it by its value too
        LOW = 1
        HIGH = 2**63

    assert arguments.key_of(Level.HIGH) != arguments.key_of(Level.LOW)
    assert np.asarray(Level.HIGH).dtype == np.uint64
    assert arguments.kind_of(np.timedelta64) == arguments.OTHER
    assert arguments.kind_of(np.datetime64) == arguments.OTHER
    assert arguments.key_of(True) != arguments.key_of(1)
    assert arguments.key_of(np.float64(1.0)) != arguments.key_of(1.0)  # cast differently


def test_a_cast_that_warns_warns_once_as_numba_cudas_does(ufunc_of):
    import warnings

    ufunc = ufunc_of([(("float32", "float32"), "float32")], plus)
    for scalar in (np.complex128(1 + 2j), np.float64(1e300)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ufunc(device(np.zeros(3, np.float32)), scalar)
        assert len(caught) == 1, [str(w.message) for w in caught]


def test_scalars_only_resolve_and_cast_as_numba_cuda_does(ufunc_of):
    ufunc = ufunc_of([((t, t), t) for t in ("int32", "int64", "uint64", "float64")], plus)
    pairs = [(1, 2), (2**63, 1), (2**63, np.uint64(1)), (np.int32(1), np.int32(2**31 - 1))]
    pairs += [(2**64, 2.0), (np.float64(1), 1.5), (np.int32(5), 2**40), (True, np.int32(1))]
    for args in pairs:
        expected = scalar_outcome(lambda args=args: numba_cudas_call(ufunc, args))
        assert scalar_outcome(lambda args=args: ufunc(*args)) == expected, args


def test_host_arrays_are_copied_and_the_result_comes_back_to_the_host(ufunc):
    a = np.arange(30.0).reshape(5, 6)
    result = ufunc(a, a)
    assert type(result) is np.ndarray
    np.testing.assert_array_equal(result, a * 3)
    result = ufunc(2.0, 3.0)  # scalars alone: a one-element host array, as numba-cuda gives
    assert type(result) is np.ndarray and result.shape == (1,) and result[0] == 7.0
    result = ufunc(a, device(a))  # one device input: the result stays there
    assert isinstance(result, FakeDeviceArray)


def test_a_plan_is_remembered_per_types_and_shapes(ufunc):
    a = device(np.ones(8, np.float32))
    ufunc(a, a)
    ufunc(a, a)
    ufunc(a, 1.0)
    ufunc(device(np.ones(9, np.float32)), a if False else device(np.ones(9, np.float32)))
    ufunc(device(np.ones(8)), device(np.ones(8)))
    assert len(plans(ufunc)) == 4


def test_calls_numba_cuda_refuses_are_numba_cudas_own(ufunc):
    with pytest.raises(TypeError, match="No matching version"):
        ufunc(device(np.ones(3, np.int8)), 1)
    with pytest.raises(ValueError, match="failed to broadcast"):
        ufunc(device(np.ones((2, 3))), device(np.ones(4)))
    assert plans(ufunc) == [None, None]


def test_calls_a_plan_does_not_cover_go_to_numba_cudas_own_call(ufunc):
    a = np.arange(5.0)
    out = np.empty(5)
    assert ufunc(a, a, out=out) is not None  # a host out=: numba-cuda's call
    np.testing.assert_array_equal(out, a * 3)
    ufunc([1.0, 2.0], 1.0)  # a list: numba-cuda's call, remembered as such
    np.testing.assert_array_equal(ufunc(np.ones(3), 1.0, stream=1), 3)  # host with a stream
    assert plans(ufunc) == [None, None]  # the host out= has no key


def test_argument_kinds():
    assert arguments.kind_of(np.ndarray) == arguments.HOST_ARRAY
    for scalar in (int, float, complex, bool, np.float32, np.int8, np.complex64):
        assert arguments.kind_of(scalar) == arguments.SCALAR
    assert arguments.kind_of(np.bool_) == arguments.OTHER  # numba-cuda makes it a 0-d array
    assert arguments.kind_of(list) == arguments.OTHER
    assert arguments.kind_of(FakeDeviceArray) == arguments.CAI_ARRAY
    assert arguments.key_of(2**63) != arguments.key_of(1)  # its NumPy dtype differs


def test_a_calls_keys_are_each_arguments_key():
    """``keys_of`` reads numba-cuda's arrays inline: the same key as ``key_of`` gives."""
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    numba_array = DeviceNDArray((4, 3), (8, 32), np.float64, gpu_data=object())  # F-order
    mixed = (numba_array, np.ones(3), 2.5, FakeDeviceArray(np.ones(2, np.int8)), [1], numba_array)
    assert arguments.keys_of(mixed) == tuple(map(arguments.key_of, mixed))
    assert arguments.keys_of(mixed)[0] == (arguments.NUMBA_ARRAY, np.float64, (4, 3), (8, 32))


def test_an_interface_giving_its_strides_as_a_list_still_keys():
    class ListStrides(FakeDeviceArray):
        @property
        def __cuda_array_interface__(self) -> dict:
            interface = dict(super().__cuda_array_interface__)
            interface["strides"] = list(self.host.strides)
            return interface

    key = arguments.key_of(ListStrides(np.ones((2, 3))))
    assert key[4] == (24, 8)
    assert hash(key) == hash(arguments.key_of(ListStrides(np.ones((2, 3)))))


def test_install_replaces_the_calls_and_uninstall_puts_them_back():
    from numba.cuda.kernels.reduction import Reduce
    from numba.cuda.vectorizers import CUDAGeneralizedUFunc

    before = {cls: dict(vars(cls)) for cls in (CUDAUFuncDispatcher, CUDAGeneralizedUFunc, Reduce)}
    numba_calls = {cls: cls.__call__ for cls in before}
    ufuncs_install.install()
    ufuncs_install.install()
    for cls, numba_call in numba_calls.items():
        assert cls.__call__ is not numba_call and cls.__call__._fastlaunch
    assert ufuncs_install.is_installed()
    ufuncs_install.uninstall()
    for cls, numba_call in numba_calls.items():
        assert cls.__call__ is numba_call
        assert dict(vars(cls)) == before[cls]  # an inherited __call__ is inherited again
    assert not ufuncs_install.is_installed()


@pytest.mark.parametrize(
    "shapes, out_shape, expected",
    [
        ([(3,), None], (3,), (1, ((False,), None))),
        ([(4, 1), (5,)], (4, 5), (2, ((False, True), (False,)))),
        ([(1, 1), (2, 2)], (2, 2), (2, ((True, True), (False, False)))),
    ],
)
def test_stager_patterns(shapes, out_shape, expected):
    assert stagers.pattern_of(shapes, out_shape) == expected


def test_stagers_compile_for_the_gpu():
    """The generated source is a kernel numba-cuda compiles (the core here is an operator
    numba-cuda types itself: compiling a device function needs a GPU's compute capability)."""
    import operator

    from numba import cuda, float32, float64, types

    for shapes, out_shape, argtypes in [
        ([(8,), None], (8,), (float32[::1], float32, float32[::1])),
        ([(4, 1), (5,)], (4, 5), (float64[:, ::1], float64[::1], float64[:, ::1])),
        ([(2, 3, 4), (3, 4)], (2, 3, 4), (float64[:, :, :], float64[:, :], float64[:, :, ::1])),
    ]:
        namespace = {"__cuda__": cuda, "__core__": operator.add}
        exec(stagers.source("stager", stagers.pattern_of(shapes, out_shape)), namespace)
        ptx, restype = cuda.compile_ptx(namespace["stager"], argtypes, cc=(8, 0))
        assert restype == types.void and ".entry" in ptx


# -- gufuncs ------------------------------------------------------------------------------------


def dot_core(a, b, out):
    total = 0.0
    for i in range(a.shape[0]):
        total += a[i] * b[i]
    out[0] = total


@pytest.fixture
def dot(ufunc):
    """A ``(n),(n)->()`` gufunc of one float32 loop over ``dot_core`` (the ``ufunc`` fixture's
    stand-ins in place)."""
    from numba import float32

    argtypes = [float32[:], float32[:], float32[:]]
    source = expand_gufunc_template(_gufunc_stager_source, [1, 1], [0], "dot", argtypes)
    namespace = {"__cuda__": FAKE_CUDA, "__core__": dot_core}
    exec(source, namespace)
    kernel = FakeKernel(namespace["__gufunc_dot"])
    f32 = np.dtype(np.float32)
    kernelmap = OrderedDict({(f32, f32): ((f32,), kernel)})
    return CUDAGeneralizedUFunc(kernelmap, GUFuncEngine.from_signature("(n),(n)->()"), dot_core)


def test_a_gufunc_over_device_arrays_launches_its_kernel_once_per_call(dot):
    a = np.arange(256 * 16, dtype=np.float32).reshape(256, 16) / 100
    b = np.ones((256, 16), np.float32)
    for _ in range(3):
        result = dot(device(a), device(b))
    assert isinstance(result, FakeDeviceArray) and result.shape == (256,)
    np.testing.assert_allclose(result.host, (a * b).sum(1), rtol=1e-6)
    (plan,) = plans(dot)
    assert (plan.griddim, plan.blockdim) == (4, BLOCK)
    assert len(plan.kernel.launches) == 3


def test_a_gufunc_over_host_arrays_returns_host_arrays(dot):
    a = np.arange(48, dtype=np.float32).reshape(3, 16)
    result = dot(a, a)
    assert type(result) is np.ndarray
    np.testing.assert_allclose(result, (a * a).sum(1))
    assert plans(dot)[0] is not None


def test_gufunc_calls_a_plan_does_not_cover_are_numba_cudas_own(dot):
    a = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    result = dot(device(a), device(a))  # two loop dimensions: numba-cuda reshapes
    np.testing.assert_allclose(result.host, (a * a).sum(-1))
    b = np.arange(32, dtype=np.float64).reshape(2, 16)
    np.testing.assert_allclose(dot(b, b), (b * b).sum(1))  # cast to the float32 loop
    assert plans(dot) == [None, None]
    with pytest.raises(TypeError, match="accepts 2 positional arguments"):
        dot(device(a))


# -- out= of numba-cuda's own arrays --------------------------------------------------------------


class FakeGpuData:
    """A numba-cuda device array's memory, as far as building an array reads it."""

    class _Pointer:
        value = 0x10000

    device_ctypes_pointer = _Pointer()


def numba_array(shape, dtype=np.float32, order="C"):
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    dtype = np.dtype(dtype)
    strides = tuple(int(s) for s in np.empty(shape, dtype, order=order).strides)
    return DeviceNDArray(shape, strides, dtype, gpu_data=FakeGpuData())


def test_out_of_the_calls_shape_and_dtype_is_written_and_returned(ufunc):
    a, out = numba_array((40,)), numba_array((40,))
    assert ufunc(a, 1.0, out=out) is out  # numba-cuda returns a new array over out
    (plan,) = plans(ufunc)
    assert plan.kernel.arguments[-1] is out and plan.kernel.arguments[0] is a
    assert plan.kernel.arguments[1] == np.float32(1.0)
    assert ufunc(a, 2.0, out=out) is out and len(plans(ufunc)) == 1


def numba_calls_of(ufunc, *args, **kws) -> int:
    """How many times fastlaunch's call handed ``ufunc(*args, **kws)`` to numba-cuda's."""
    handed = []
    calls.call(ufunc, args, kws, lambda *given, **named: handed.append(1))
    return len(handed)


@pytest.mark.parametrize(
    "shape, out",
    [
        ((40,), lambda: numba_array((40,), np.float64)),  # another dtype than the loop's
        ((40,), lambda: numba_array((41,))),  # another shape
        ((4, 10), lambda: numba_array((4, 10), order="F")),  # numba-cuda writes a copy
    ],
    ids=["dtype", "shape", "F-order 2-d"],
)
def test_an_out_a_plan_cannot_write_is_numba_cudas_call(ufunc, shape, out):
    assert numba_calls_of(ufunc, numba_array(shape), 1.0, out=out()) == 1
    assert plans(ufunc) == [None]
