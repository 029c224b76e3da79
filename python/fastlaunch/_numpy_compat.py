"""NumPy 2.5 for numba-cuda 0.30.x: restores ``numpy.row_stack`` when NumPy lacks it.

NumPy 2.5 removed ``np.row_stack`` (deprecated since 2.0 as an alias of ``np.vstack``).
numba-cuda 0.30.4 still registers a device implementation for it
(``numba/cuda/np/arrayobj.py``: ``overload(np.row_stack)(impl_np_vstack)``), and that module
is imported at the first compile, which then fails with ``AttributeError: module 'numpy'
has no attribute 'row_stack'``. Putting the alias back (the very function it used to be)
before that import is the smallest fix: nothing else in numba-cuda needs it, and with NumPy
< 2.5 nothing changes. Remove this module once numba-cuda no longer names ``row_stack``.

``apply()`` runs at ``import fastlaunch``: without importing NumPy then (fastlaunch's
import stays light), it adds the alias either at once (NumPy already imported) or just
before numba-cuda imports ``arrayobj`` (NumPy is imported by then).
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

_TRIGGER = "numba.cuda.np.arrayobj"


def restore_row_stack() -> bool:
    """Adds ``numpy.row_stack = numpy.vstack`` if NumPy lacks it; True when it did."""
    import numpy as np

    if hasattr(np, "row_stack"):
        return False
    np.row_stack = np.vstack  # type: ignore[attr-defined]
    return True


class _BeforeArrayobj(importlib.abc.MetaPathFinder):
    """Restores the alias when ``numba.cuda.np.arrayobj`` is about to be imported."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == _TRIGGER:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            restore_row_stack()
        return None  # the usual finders import the module


def apply() -> None:
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if not hasattr(numpy, "row_stack"):
            restore_row_stack()
        return
    if _TRIGGER in sys.modules:
        return
    if not any(isinstance(f, _BeforeArrayobj) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeArrayobj())
