"""fastlaunch's compile cache: each kernel is compiled once per machine, and never stale.

On by default (``FASTLAUNCH_CACHE=0`` turns it off; ``FASTLAUNCH_CACHE_DIR`` moves it; see
:mod:`fastlaunch.cache.settings` and ``docs/cache.md``). Every numba-cuda dispatcher that
fastlaunch launches, and has no ``cache=True`` of its own, compiles through it
(:mod:`fastlaunch.cache.numba_cache`). A kernel's key holds everything that decides its code
(:mod:`fastlaunch.cache.key`); what cannot be keyed is compiled as without a cache, and
``python -m fastlaunch cache`` says why.
"""

from __future__ import annotations

from typing import Any

from fastlaunch.cache import settings
from fastlaunch.cache.settings import CacheWarning


def enabled() -> bool:
    """Whether kernels compiled from now on use the cache."""
    return settings.enabled()


def set_enabled(on: bool | None) -> None:
    """Turns the cache on or off for kernels made from now on in this process (None: as the
    environment says, ``FASTLAUNCH_CACHE``)."""
    settings.override = on


def directory() -> str:
    """The cache's folder."""
    return settings.directory()


def info() -> dict[str, Any]:
    """Where the cache is, how large, and what it did: over every process that used the
    folder (``total``), in this one (``process``), and the kernels it could not cache."""
    from fastlaunch.cache import stats, store

    root = settings.directory()
    entries, size = store.usage(root)
    totals, uncachable = stats.load(root)
    process = stats.snapshot()
    for name in stats.COUNTERS:
        totals[name] += process[name]
    for kernel, reason in process["uncachable_kernels"].items():
        uncachable[kernel] = {"reason": reason, "last": "this process"}
    return {
        "enabled": settings.enabled(),
        "directory": root,
        "directory_from": settings.where_from(),
        "entries": entries,
        "bytes": size,
        "limit": settings.size_limit(),
        "total": totals,
        "process": process,
        "uncachable": uncachable,
    }


def clear() -> int:
    """Deletes every entry (and the statistics); returns how many there were."""
    from fastlaunch.cache import store

    return store.clear(settings.directory())


__all__ = ["CacheWarning", "clear", "directory", "enabled", "info", "set_enabled"]
