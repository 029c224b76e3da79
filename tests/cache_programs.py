"""What the compile cache's CPU tests run in fresh processes on the numba stand-in driver
(``conftest.numba_stand_in``): numba-cuda compiles and links for real there; nothing runs.

``REPORT`` is appended to a program: for each kernel named in ``KERNELS`` (name -> (kernel,
argument types)) it prints one JSON line: whether this process loaded it from the cache or
compiled it, its PTX (mangled names numbered by first appearance, so that two compiles of the
same code compare equal), digests of the cubin fastlaunch loaded and whether it holds given
bytes, and, with ``FRESH=1``, the PTX of a fresh compile of the same function, options and
types with no cache at all: a hit or a compile is not stale when its PTX is the fresh one
(extern declarations sorted: numba-cuda writes them in an order of string hashes, which
differs between processes).

The cubin digests of one kernel compare equal across processes only where its PTX does; the
tests compare them where the PTX has no extern declarations (or the entry is the same).
"""

from __future__ import annotations

import json
import re

REPORT = r"""
import hashlib as _hashlib, json as _json, os as _os, re as _re
from fastlaunch import _numba_compat as _compat
from fastlaunch.cache.numba_cache import current_cc as _current_cc

def _normal(ptx):
    # extern declarations come in an order of numba-cuda's sets (by string hashes, per process)
    externs = sorted(_re.findall(r"\.extern \.func[^;]*;", ptx))
    ptx = _re.sub(r"\.extern \.func[^;]*;", "", ptx) + "\n".join(externs)
    names = {}
    ptx = _re.sub(r"_Z\w+", lambda m: names.setdefault(m.group(0), f"SYM{len(names)}"), ptx)
    return "\n".join(line for line in ptx.splitlines() if line and not line.startswith("//"))

def _fresh(kernel, argtypes):
    from numba.cuda.dispatcher import CUDADispatcher
    dispatcher = CUDADispatcher(kernel.py_func, targetoptions=dict(kernel.targetoptions))
    return _normal(dispatcher.compile(argtypes).inspect_asm(_current_cc()))

for _name, (_kernel, _argtypes) in KERNELS.items():
    _dispatcher = _kernel.dispatcher
    _cache = _dispatcher._cache
    _overload = _dispatcher.overloads[_argtypes]
    _cubin = bytes(_compat.cubin(_overload, _current_cc()).code)
    _line = {
        "kernel": _name,
        "hits": getattr(_cache, "hits", None),
        "misses": getattr(_cache, "misses", None),
        "stores": getattr(_cache, "stores", None),
        "refusal": getattr(_cache, "refusal", None),
        "ptx": _normal(_overload.inspect_asm(_current_cc())),
        "cubin": _hashlib.sha256(_cubin).hexdigest(),
        "holds": {k: v in _cubin for k, v in globals().get("LOOK_FOR", {}).get(_name, {}).items()},
        "cc": list(_current_cc()),
    }
    if _os.environ.get("FRESH") == "1":
        _line["fresh"] = _fresh(_dispatcher, _argtypes)
    print("REPORT " + _json.dumps(_line))
"""


def reports(lines: list[str]) -> dict[str, dict]:
    """The ``REPORT`` lines a program printed, by kernel."""
    found = {}
    for line in lines:
        if line.startswith("REPORT "):
            report = json.loads(line[len("REPORT ") :])
            found[report["kernel"]] = report
    return found


def target(ptx: str) -> str:
    match = re.search(r"^\.target\s+(\S+)", ptx, re.M)
    return match.group(1) if match else ""
