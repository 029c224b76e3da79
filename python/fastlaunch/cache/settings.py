"""Where the compile cache lives and whether it is on: read from the environment at each use,
so a program (or a test) may change them before its kernels compile.

- ``FASTLAUNCH_CACHE``: ``0`` / ``off`` / ``false`` / ``no`` turns the cache off (on when
  unset);
- ``FASTLAUNCH_CACHE_DIR``: the folder (made on first store);
- ``NUMBA_CACHE_DIR``: where ``FASTLAUNCH_CACHE_DIR`` is unset, the cache goes in its
  ``fastlaunch`` subfolder (numba-cuda's own ``cache=True`` files go beside it, in the same
  folder, as numba-cuda puts them there);
- otherwise ``$XDG_CACHE_HOME/fastlaunch`` or ``~/.cache/fastlaunch``;
- ``FASTLAUNCH_CACHE_SIZE``: the most the entries may take, in bytes or with a ``K``, ``M`` or
  ``G`` suffix (1 GiB when unset); the least recently used go first.
"""

from __future__ import annotations

import os

ENV_CACHE = "FASTLAUNCH_CACHE"
ENV_DIR = "FASTLAUNCH_CACHE_DIR"
ENV_SIZE = "FASTLAUNCH_CACHE_SIZE"
ENV_NUMBA_DIR = "NUMBA_CACHE_DIR"

DEFAULT_SIZE = 1 << 30
_OFF = ("0", "off", "false", "no")
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class CacheWarning(UserWarning):
    """The compile cache could not be used as configured (kernels compile as without it)."""


#: set by ``fastlaunch.cache.set_enabled`` (None: the environment decides)
override: bool | None = None


def enabled() -> bool:
    """Whether kernels compiled from now on use the cache."""
    if override is not None:
        return override
    return os.environ.get(ENV_CACHE, "").strip().lower() not in _OFF


def directory() -> str:
    """The cache's folder (it may not exist yet)."""
    chosen = os.environ.get(ENV_DIR, "").strip()
    if chosen:
        return os.path.abspath(os.path.expanduser(chosen))
    numba = os.environ.get(ENV_NUMBA_DIR, "").strip()
    if numba:
        return os.path.join(os.path.abspath(os.path.expanduser(numba)), "fastlaunch")
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(
        os.path.expanduser("~"), ".cache"
    )
    return os.path.join(base, "fastlaunch")


def where_from() -> str:
    """Which setting chose ``directory()``, for ``python -m fastlaunch cache``."""
    if os.environ.get(ENV_DIR, "").strip():
        return ENV_DIR
    if os.environ.get(ENV_NUMBA_DIR, "").strip():
        return f"{ENV_NUMBA_DIR} (its fastlaunch subfolder)"
    if os.environ.get("XDG_CACHE_HOME", "").strip():
        return "XDG_CACHE_HOME"
    return "the default"


def size_limit() -> int:
    """The most bytes the entries may take (``FASTLAUNCH_CACHE_SIZE``)."""
    text = os.environ.get(ENV_SIZE, "").strip().lower().removesuffix("b").removesuffix("i")
    if not text:
        return DEFAULT_SIZE
    factor = _UNITS.get(text[-1], 1)
    if text[-1] in _UNITS:
        text = text[:-1]
    try:
        return max(0, int(float(text) * factor))
    except ValueError:
        return DEFAULT_SIZE
