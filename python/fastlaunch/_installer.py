"""Process-wide use: ``fastlaunch.install()`` makes ``numba.cuda.jit`` make fastlaunch kernels.

After ``install()``, every ``@cuda.jit`` kernel made in the process, in the program or in a
library built on numba-cuda, is a :class:`fastlaunch.Kernel`, until ``uninstall()``:

- what is replaced is the attribute ``numba.cuda.jit``, which is what ``cuda.jit(...)``,
  ``@cuda.jit`` and ``from numba.cuda import jit`` (run after the call) read;
- ``numba.cuda.decorators.jit`` stays numba-cuda's: numba-cuda's typing machinery builds
  device functions with it, and fastlaunch compiles through it;
- kernels made before ``install()`` stay numba-cuda's, and a name bound by
  ``from numba.cuda import jit`` *before* the call keeps numba-cuda's decorator;
- ``device=True`` still makes numba-cuda's device functions;
- under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) nothing is replaced.

Both calls are idempotent and thread-safe. ``install()`` also returns a context manager
that puts back the state it found (``with fastlaunch.install(): ...``, for tests).

``python -m fastlaunch run script.py`` installs before running a program; the environment
variable ``FASTLAUNCH_INSTALL=1`` installs at interpreter start-up in every process that
sees it (through ``fastlaunch_install.pth``, shipped in the wheel), so worker processes a
program starts get fastlaunch too. ``FASTLAUNCH_INSTALL=0`` (or unset) turns that off. The
file's name sorts after ``_numba_cuda_redirector.pth`` and after the ``fastlaunch.pth`` of an
editable install, which must run first (site runs ``.pth`` files in name order).
"""

from __future__ import annotations

import atexit
import collections
import functools
import logging
import os
import sys
import threading
import weakref
from typing import Any

from fastlaunch._after_import import run_after_import

_log = logging.getLogger("fastlaunch")

#: the environment variable the start-up hook reads (see ``fastlaunch_install.pth``)
ENV_INSTALL = "FASTLAUNCH_INSTALL"
#: set to 1 for a summary of the kernels ``numba.cuda.jit`` made, printed at exit
ENV_REPORT = "FASTLAUNCH_REPORT"
#: set to 0 to leave numba-cuda's memory API (to_device, device_array, ...) numba-cuda's own
#: while installed (``fastlaunch.memory``; on by default)
ENV_MEMORY = "FASTLAUNCH_MEMORY_API"
#: set to 0 to leave numba-cuda's CUDA ufunc and ``cuda.reduce`` calls numba-cuda's own while
#: installed (``fastlaunch.ufuncs``; on by default; their kernels launch through fastlaunch
#: either way)
ENV_UFUNCS = "FASTLAUNCH_UFUNCS"

_OFF = ("", "0", "false", "no", "off")

_lock = threading.RLock()
_original: Any = None  # numba-cuda's numba.cuda.jit, while installed
_installed_jit: Any = None  # the function put in its place
_kernels: list[weakref.ref] = []  # kernels the installed jit made (for the report)
_made = 0  # how many the installed jit made in all
_callers: collections.Counter[str] = collections.Counter()  # calls per calling module
_report_registered = False


def _env_on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in _OFF


def _env_off(name: str) -> bool:
    """Whether ``name`` is set, to an off value (unset: not off)."""
    value = os.environ.get(name)
    return value is not None and value.strip().lower() in _OFF


def is_installed() -> bool:
    """Whether ``numba.cuda.jit`` currently makes fastlaunch kernels."""
    cuda = sys.modules.get("numba.cuda")
    return cuda is not None and _installed_jit is not None and cuda.jit is _installed_jit


class Installation:
    """What ``install()`` returns: as a context manager, it puts back on exit the state
    ``install()`` found (so a nested ``with`` inside an installed process leaves it
    installed)."""

    def __init__(self, was_installed: bool) -> None:
        self.was_installed = was_installed

    def __enter__(self) -> Installation:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.was_installed:
            uninstall()

    def __bool__(self) -> bool:
        return is_installed()

    def __repr__(self) -> str:
        state = "installed" if is_installed() else "not installed"
        return f"<fastlaunch installation: {state}>"


def install() -> Installation:
    """Makes ``numba.cuda.jit`` produce fastlaunch kernels for all code in the process.

    Imports ``numba.cuda`` (numba-cuda) if it was not imported yet. Idempotent and
    thread-safe. Returns a context manager that undoes this call on exit (when it was the
    call that installed).
    """
    import numba.cuda as cuda

    from fastlaunch import _numpy_compat, dispatcher
    from fastlaunch.memory import install as memory_install
    from fastlaunch.ufuncs import install as ufuncs_install

    _numpy_compat.apply()
    with _lock:
        global _original, _installed_jit
        was = is_installed()
        if was:
            return Installation(True)
        if cuda.config.ENABLE_CUDASIM:
            _log.warning(
                "fastlaunch.install(): the CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1); "
                "numba.cuda.jit stays the simulator's"
            )
            return Installation(True)
        dispatcher.register_as_numba_dispatcher()
        original = cuda.jit
        _original = original
        _installed_jit = _make_installed_jit(original)
        cuda.jit = _installed_jit
        if not _env_off(ENV_MEMORY):
            memory_install.install()
        if not _env_off(ENV_UFUNCS):
            ufuncs_install.install()
        _log.debug("installed: numba.cuda.jit makes fastlaunch kernels")
        if _env_on(ENV_REPORT):
            _register_report()
        return Installation(False)


def uninstall() -> None:
    """Puts numba-cuda's ``numba.cuda.jit`` back. Idempotent and thread-safe. Kernels made
    while installed stay fastlaunch kernels."""
    global _original, _installed_jit
    with _lock:
        cuda = sys.modules.get("numba.cuda")
        if _installed_jit is None:
            return
        from fastlaunch.memory import install as memory_install
        from fastlaunch.ufuncs import install as ufuncs_install

        if cuda is not None:
            if cuda.jit is _installed_jit:
                cuda.jit = _original
            else:  # replaced again since (a mock, another tool): leave theirs alone
                _log.warning(
                    "fastlaunch.uninstall(): numba.cuda.jit was replaced after install(); "
                    "left as it is"
                )
        memory_install.uninstall()
        ufuncs_install.uninstall()
        _original = _installed_jit = None
        _log.debug("uninstalled: numba.cuda.jit is numba-cuda's again")


def _make_installed_jit(original: Any) -> Any:
    from fastlaunch.dispatcher import jit as fastlaunch_jit

    @functools.wraps(original)
    def jit(func_or_sig: Any = None, *signatures: Any, **options: Any) -> Any:
        _callers[sys._getframe(1).f_globals.get("__name__", "?")] += 1
        made = fastlaunch_jit(func_or_sig, *signatures, **options)
        return made if options.get("device") else _noted(made)

    jit._fastlaunch_installed = True  # type: ignore[attr-defined]
    return jit


def _noted(made: Any) -> Any:
    """Counts the kernels the installed jit makes: ``made`` itself, or, for a decorator
    factory (``cuda.jit("sig")``, ``cuda.jit(debug=True)``; numba-cuda's guvectorize uses
    the first), the kernel it makes later."""
    from fastlaunch.dispatcher import Kernel

    if isinstance(made, Kernel) or not callable(made):
        _note(made)
        return made

    @functools.wraps(made)
    def decorator(func: Any) -> Any:
        return _noted(made(func))

    return decorator


def _note(made: Any) -> None:
    from fastlaunch.dispatcher import Kernel

    global _made
    if isinstance(made, Kernel):
        with _lock:
            _made += 1
            _kernels.append(weakref.ref(made))
            if len(_kernels) > 4096:  # keep the list bounded: drop the dead
                _kernels[:] = [r for r in _kernels if r() is not None]
        _log.debug("numba.cuda.jit made fastlaunch kernel %s", made.__qualname__)


def installed_callers() -> dict[str, int]:
    """Calls of the installed ``numba.cuda.jit`` per calling module (numba-cuda's own
    modules among them: vectorize, reductions, ...)."""
    with _lock:
        return dict(_callers)


def installed_kernels() -> list[Any]:
    """The live kernels that ``numba.cuda.jit`` made while installed (oldest first).

    Decorator factories (``@cuda.jit(debug=True)``, ``@cuda.jit("sig")``) count once their
    kernel is made."""
    with _lock:
        return [k for k in (r() for r in _kernels) if k is not None]


def report() -> str:
    """A summary of the kernels ``numba.cuda.jit`` made while installed: per kernel its
    overloads registered with fastlaunch and its launches that went through numba-cuda's
    own path (host arrays, ``debug=True``, ...)."""
    kernels = installed_kernels()
    state = "installed" if is_installed() else "not installed"
    lines = [f"fastlaunch: {state}; numba.cuda.jit made {_made} fastlaunch kernel(s)"]
    for k in kernels[:50]:
        # forall (so vectorize) launches the kernels `specialize` makes: count them here
        family = [k, *_specialized(k)]
        overloads = sum(member.overload_count for member in family)
        misses = sum(member.miss_count for member in family)
        numba_launches = sum(member.numba_launches for member in family)
        through = f" (in {len(family) - 1} specialization(s))" if len(family) > 1 else ""
        lines.append(
            f"fastlaunch:   {k.__qualname__}: {overloads} overload(s) launched by "
            f"fastlaunch{through}, {misses} miss(es), {numba_launches} launch(es) through "
            "numba-cuda's path"
        )
    if len(kernels) > 50:
        lines.append(f"fastlaunch:   ... and {len(kernels) - 50} more")
    return "\n".join(lines)


def _specialized(kernel: Any) -> list[Any]:
    """The fastlaunch kernels made of ``kernel``'s numba-cuda specializations (what
    ``specialize`` returns, and ``forall`` launches)."""
    specializations = getattr(kernel.dispatcher, "specializations", None) or {}
    made = (s.__dict__.get("_fastlaunch_kernel") for s in specializations.values())
    return [m for m in made if m is not None]


def _register_report() -> None:
    global _report_registered
    if not _report_registered:
        _report_registered = True
        atexit.register(lambda: print(report(), file=sys.stderr, flush=True))


# -- start-up: FASTLAUNCH_INSTALL=1 (fastlaunch_install.pth) ---------------------------------


def install_at_startup() -> None:
    """What ``fastlaunch_install.pth`` runs when ``FASTLAUNCH_INSTALL`` is on: installs now
    if ``numba.cuda`` is already imported, else as soon as it is."""
    if not _env_on(ENV_INSTALL):
        return
    if "numba.cuda" in sys.modules:
        install()
    else:
        run_after_import("numba.cuda", lambda _: install(), "FASTLAUNCH_INSTALL: install()")
    if _env_on(ENV_REPORT):
        _register_report()


__all__ = [
    "ENV_INSTALL",
    "ENV_REPORT",
    "ENV_UFUNCS",
    "Installation",
    "install",
    "install_at_startup",
    "installed_callers",
    "installed_kernels",
    "is_installed",
    "report",
    "uninstall",
]
