"""Puts ``fastlaunch.ufuncs``' calls in place of numba-cuda's while fastlaunch is installed:
``CUDAUFuncDispatcher.__call__`` (every CUDA ufunc, made before or after ``install()``) and
``Reduce.__call__`` (``cuda.reduce``); ``uninstall()`` puts numba-cuda's back. The classes
stay numba-cuda's."""

from __future__ import annotations

from typing import Any

from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.ufuncs import reduce, vectorize

#: (class, numba-cuda's __call__) while installed
_saved: list[tuple[type, Any]] = []


def _ufunc_call(numba_call: Any) -> Any:
    def __call__(self: Any, *args: Any, **kws: Any) -> Any:
        return vectorize.call(self, args, kws, numba_call)

    __call__.__doc__ = numba_call.__doc__
    __call__._fastlaunch = True  # type: ignore[attr-defined]
    return __call__


def _reduce_call(numba_call: Any) -> Any:
    def __call__(self: Any, *args: Any, **kws: Any) -> Any:
        return reduce.call(self, args, kws, numba_call)

    __call__.__doc__ = numba_call.__doc__
    __call__._fastlaunch = True  # type: ignore[attr-defined]
    return __call__


def install() -> None:
    """Replaces the calls (idempotent)."""
    if _saved:
        return
    ufunc_class, reduce_class = numba_cuda.ufunc_classes()
    for cls, make in ((ufunc_class, _ufunc_call), (reduce_class, _reduce_call)):
        numba_call = vars(cls)["__call__"]
        _saved.append((cls, numba_call))
        cls.__call__ = make(numba_call)


def uninstall() -> None:
    """Puts numba-cuda's calls back, where fastlaunch's are still in place."""
    for cls, numba_call in _saved:
        if getattr(vars(cls).get("__call__"), "_fastlaunch", False):
            cls.__call__ = numba_call
    _saved.clear()


def is_installed() -> bool:
    return bool(_saved)
