"""What the cache did: in this process (``snapshot()``), and over every process that used the
folder (``<dir>/stats.json`` and ``<dir>/uncachable.json``, merged at exit under a lock).

Counted: hits, misses, stores, uncachable compiles (with the reason, per kernel), entries that
were unreadable (corrupt, truncated, foreign: each then compiled), and the time a hit takes in
its steps (key, read, rebuild), for ``python -m fastlaunch cache`` and
``benchmarks/cold_start.py``."""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from typing import Any

COUNTERS = ("hits", "misses", "stores", "uncachable", "unreadable")
STEPS = ("key", "read", "rebuild", "save")
MAX_UNCACHABLE = 200

_lock = threading.Lock()
_counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
_seconds: dict[str, float] = dict.fromkeys(STEPS, 0.0)
_uncachable: dict[str, str] = {}  # kernel -> reason (this process)
_roots: set[str] = set()  # folders this process used
_registered = False


def count(name: str, root: str | None = None) -> None:
    with _lock:
        _counts[name] += 1
        if root is not None:
            _note_root(root)


def timed(step: str, seconds: float) -> None:
    with _lock:
        _seconds[step] += seconds


def uncachable(kernel: str, reason: str, root: str | None) -> None:
    with _lock:
        _counts["uncachable"] += 1
        if kernel not in _uncachable and len(_uncachable) < MAX_UNCACHABLE:
            _uncachable[kernel] = reason
        if root is not None:
            _note_root(root)


def _note_root(root: str) -> None:
    global _registered
    _roots.add(root)
    if not _registered:
        _registered = True
        atexit.register(save)


def snapshot() -> dict[str, Any]:
    """This process's counts, step times (ms) and uncachable kernels."""
    with _lock:
        return {
            **_counts,
            "ms": {step: seconds * 1e3 for step, seconds in _seconds.items()},
            "uncachable_kernels": dict(_uncachable),
        }


def reset() -> None:
    with _lock:
        for name in COUNTERS:
            _counts[name] = 0
        for step in STEPS:
            _seconds[step] = 0.0
        _uncachable.clear()


def load(root: str) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
    """The folder's totals and uncachable kernels (without this process's)."""
    totals = dict.fromkeys(COUNTERS, 0)
    kernels: dict[str, dict[str, Any]] = {}
    try:
        with open(os.path.join(root, "stats.json"), encoding="utf-8") as f:
            read = json.load(f)
        for name in COUNTERS:
            totals[name] = int(read.get(name, 0))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    try:
        with open(os.path.join(root, "uncachable.json"), encoding="utf-8") as f:
            read = json.load(f)
        if isinstance(read, dict):
            kernels = {str(k): v for k, v in read.items() if isinstance(v, dict)}
    except (OSError, ValueError):
        pass
    return totals, kernels


def save() -> None:
    """Adds this process's counts to each folder it used (under the folder's lock), once."""
    with _lock:
        counts = dict(_counts)
        kernels = dict(_uncachable)
        roots = list(_roots)
        for name in COUNTERS:
            _counts[name] = 0
        _uncachable.clear()
    if not any(counts.values()):
        return
    for root in roots:
        try:
            _merge(root, counts, kernels)
        except OSError:
            pass


def _merge(root: str, counts: dict[str, int], kernels: dict[str, str]) -> None:
    import fcntl

    if not os.path.isdir(root):
        return
    with open(os.path.join(root, "lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        totals, known = load(root)
        for name in COUNTERS:
            totals[name] += counts[name]
        now = time.strftime("%Y-%m-%d %H:%M:%S")
        for kernel, reason in kernels.items():
            known[kernel] = {"reason": reason, "last": now}
        if len(known) > MAX_UNCACHABLE:
            newest = sorted(known.items(), key=lambda item: str(item[1].get("last")))
            known = dict(newest[-MAX_UNCACHABLE:])
        _write_json(os.path.join(root, "stats.json"), totals)
        _write_json(os.path.join(root, "uncachable.json"), known)


def _write_json(path: str, value: Any) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1, sort_keys=True)
    os.replace(temporary, path)
