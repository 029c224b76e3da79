"""Puts ``fastlaunch.ufuncs``' calls in place of numba-cuda's while fastlaunch is installed:
``CUDAUFuncDispatcher.__call__`` (every CUDA ufunc, made before or after ``install()``),
``CUDAGeneralizedUFunc.__call__`` (gufuncs) and ``Reduce.__call__`` (``cuda.reduce``);
``uninstall()`` puts numba-cuda's back. The classes stay numba-cuda's."""

from __future__ import annotations

from typing import Any

from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.ufuncs import gufunc, reduce, vectorize

#: (class, numba-cuda's __call__, whether the class defines it or inherits it) while installed
_saved: list[tuple[type, Any, bool]] = []


def _replacing(numba_call: Any, call: Any) -> Any:
    """A ``__call__`` that runs ``call(self, args, kws, numba_call)``."""

    def __call__(self: Any, *args: Any, **kws: Any) -> Any:
        return call(self, args, kws, numba_call)

    __call__.__doc__ = numba_call.__doc__
    __call__._fastlaunch = True  # type: ignore[attr-defined]
    return __call__


def install() -> None:
    """Replaces the calls (idempotent)."""
    if _saved:
        return
    ufunc_class, gufunc_class, reduce_class = numba_cuda.ufunc_classes()
    calls = (
        (ufunc_class, vectorize.call),
        (gufunc_class, gufunc.call),
        (reduce_class, reduce.call),
    )
    for cls, call in calls:  # CUDAGeneralizedUFunc inherits GeneralizedUFunc's __call__
        numba_call = cls.__call__
        _saved.append((cls, numba_call, "__call__" in vars(cls)))
        cls.__call__ = _replacing(numba_call, call)


def uninstall() -> None:
    """Puts numba-cuda's calls back, where fastlaunch's are still in place."""
    for cls, numba_call, own in _saved:
        if not getattr(vars(cls).get("__call__"), "_fastlaunch", False):
            continue  # replaced again since: left alone
        if own:
            cls.__call__ = numba_call
        else:
            del cls.__call__
    _saved.clear()


def is_installed() -> bool:
    return bool(_saved)
