"""Overload selection with explicit signatures, against numba-cuda's own choice.

Both pick, among the signatures, the one whose conversions from the argument types are
best (fewest unsafe, then safe, then promoting conversions; exact matches need none), and
refuse an ambiguous or impossible call. fastlaunch applies numba's rule
(``typingctx.resolve_overload``) to its own argument types, which differ in one place: a
``__cuda_array_interface__`` array with strides is typed with the layout of its strides,
where numba-cuda says ``A`` — so a C-contiguous CAI array matches a ``[:, ::1]`` signature
under fastlaunch and nothing under numba-cuda (docs/differences.md)."""

from __future__ import annotations

import enum

import numpy as np
import pytest
from arrays import CAIView
from numba import cuda
from numba.cuda.decorators import jit as numba_jit

import fastlaunch as fl

pytestmark = pytest.mark.gpu


class Flag(enum.IntFlag):
    A = 1
    B = 2


def strided_cai(host):
    """``host`` on the device behind a CUDA Array Interface that reports its C strides."""
    return CAIView(cuda.to_device(host), explicit_strides=True)


def store(out, x):
    out[0] = x


def store_first(out, x):
    out[0] = x[0, 0]


SCALAR_SIGS = ["void(float64[::1], int32)", "void(float64[::1], float64)"]
SCALAR_SIGS_2 = ["void(float64[::1], int64)", "void(float64[::1], float32)"]
ARRAY_SIGS = ["void(float64[::1], int64[:, ::1])", "void(float64[::1], float32[:, ::1])"]
ARRAY_SIGS_A = ["void(float64[::1], int64[:, :])", "void(float64[::1], uint32[:, :])"]


def cases():
    int2d = lambda: cuda.to_device(np.arange(6, dtype=np.int64).reshape(2, 3))  # noqa: E731
    u32 = lambda: strided_cai(np.arange(6, dtype=np.uint32).reshape(2, 3))  # noqa: E731
    return [
        ("int", store, SCALAR_SIGS, lambda: 5, None),
        ("float", store, SCALAR_SIGS, lambda: 2.5, None),
        ("bool", store, SCALAR_SIGS, lambda: True, None),
        ("np.float32", store, SCALAR_SIGS, lambda: np.float32(1.5), None),
        ("int 2**53+1", store, SCALAR_SIGS, lambda: 2**53 + 1, None),
        ("int 2**53+1 / int64", store, SCALAR_SIGS_2, lambda: 2**53 + 1, None),
        ("np.int16", store, SCALAR_SIGS_2, lambda: np.int16(7), None),
        ("complex", store, SCALAR_SIGS, lambda: 1 + 2j, None),
        ("IntFlag", store, SCALAR_SIGS_2, lambda: Flag.B, None),
        ("int64 2-D numba", store_first, ARRAY_SIGS, int2d, None),
        ("uint32 2-D CAI, C sigs", store_first, ARRAY_SIGS, u32, None),
        ("uint32 2-D CAI, A sigs", store_first, ARRAY_SIGS_A, u32, None),
        # numba-cuda types the CAI array 'A' and finds no C signature; fastlaunch finds none
        # either (its dtype matches neither C signature) — see the layout case below.
        (
            "float32 2-D CAI vs [:, ::1]",
            store_first,
            ARRAY_SIGS,
            lambda: strided_cai(np.ones((2, 3), np.float32)),
            "layout",
        ),
    ]


def outcome(kernel, make_arg):
    out = cuda.to_device(np.full(1, -1.0))
    try:
        kernel[1, 1](out, make_arg())
        cuda.synchronize()
    except Exception as e:
        return ("raised", type(e).__name__)
    return ("stored", float(out.copy_to_host()[0]))


@pytest.mark.parametrize(
    ("name", "func", "sigs", "make_arg", "difference"), cases(), ids=lambda v: str(v)[:30]
)
def test_overload_choice_matches_numba(name, func, sigs, make_arg, difference):
    theirs = outcome(numba_jit(sigs)(func), make_arg)
    ours = outcome(fl.jit(sigs)(func), make_arg)
    print(f"{name}: numba-cuda {theirs}, fastlaunch {ours}")
    if difference == "layout":
        # fastlaunch sees a C array and launches the float32 overload; numba-cuda sees 'A'.
        assert theirs == ("raised", "TypeError")
        assert ours == ("stored", 1.0)
    else:
        assert ours == theirs


def _body(a):
    pass


# numba-cuda compiles eagerly for the current device's compute capability.
@pytest.mark.parametrize(
    "signatures",
    ["void(float32[::1])", ["void(float32[::1])"], ["void(float32[::1])", "void(float64[::1])"]],
    ids=repr,
)
def test_eager_compilation(signatures):
    k = fl.jit(signatures)(_body)
    assert type(k) is fl.Kernel
    expected = [signatures] if isinstance(signatures, str) else signatures
    assert len(k.overloads) == len(k.signatures) == len(expected)
