"""Running fastlaunch's own set-up right after a module of another library is imported
(``numba.cuda`` for ``FASTLAUNCH_INSTALL``, torch and CuPy for following their graph
captures), so that start-up never imports those libraries itself."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from typing import Any


class _RunAfterImport(importlib.abc.MetaPathFinder):
    """Finds ``name`` through the other finders and runs ``callback(module)`` once the module
    has executed; then leaves ``sys.meta_path``. A failing callback is reported on stderr,
    prefixed with ``what``, and never breaks the program's own import."""

    def __init__(self, name: str, callback: Callable[[Any], None], what: str) -> None:
        self.name = name
        self._callback = callback
        self._what = what
        self._busy = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name or self._busy:
            return None
        self._busy = True  # numba-cuda's redirecting finder walks sys.meta_path again
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
        finally:
            self._busy = False
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or exec_module is None:
            return spec
        callback, what = self._callback, self._what

        def exec_then_call_back(module: Any) -> None:
            exec_module(module)
            try:
                callback(module)
            except Exception as e:  # never break the program's own import
                print(f"fastlaunch: {what} failed: {e!r}", file=sys.stderr)

        loader.exec_module = exec_then_call_back  # type: ignore[union-attr]
        return spec


def run_after_import(name: str, callback: Callable[[Any], None], what: str) -> None:
    """Runs ``callback(module)`` right after ``name`` is first imported (once, however often
    this is asked)."""
    if not any(isinstance(f, _RunAfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _RunAfterImport(name, callback, what))
