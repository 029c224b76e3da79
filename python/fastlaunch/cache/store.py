"""The cache's files: ``<dir>/kernels/<2 hex>/<key>.flk``, one per compiled kernel.

- Writes are atomic: a temporary file in the same folder, then ``os.replace``; readers see a
  whole old file, a whole new one, or none. Many processes may write the same entry at once
  (the last rename wins, and both wrote the same code).
- A read that fails for any reason is a miss.
- A folder that cannot be made or written to turns writing off for the process, with one
  warning; reading goes on where it can.
- Size is bounded (``settings.size_limit()``): after a write that takes the entries past it,
  the least recently used are deleted until they take 90% of it. A hit marks its entry used
  (its modification time); no entry is ever trusted or chosen by a time stamp.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings

from fastlaunch.cache import settings
from fastlaunch.cache.settings import CacheWarning

SUFFIX = ".flk"
KERNELS = "kernels"

_warned: set[str] = set()
_unwritable: set[str] = set()


def _warn_once(root: str, message: str) -> None:
    if root in _warned:
        return
    _warned.add(root)
    warnings.warn(f"fastlaunch's compile cache: {message}", CacheWarning, stacklevel=4)


def entry_path(root: str, key: str) -> str:
    return os.path.join(root, KERNELS, key[:2], key[2:] + SUFFIX)


def read(root: str, key: str) -> bytes | None:
    try:
        with open(entry_path(root, key), "rb") as f:
            return f.read()
    except OSError:
        return None


def touch(root: str, key: str) -> None:
    """Marks an entry used (least-recently-used eviction); best effort."""
    try:
        os.utime(entry_path(root, key))
    except OSError:
        pass


def remove(root: str, key: str) -> None:
    try:
        os.unlink(entry_path(root, key))
    except OSError:
        pass


def write(root: str, key: str, data: bytes) -> bool:
    """Stores an entry; False (after one warning per folder) where the folder cannot take
    it."""
    if root in _unwritable:
        return False
    path = entry_path(root, key)
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(handle, "wb") as f:
                f.write(data)
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
    except OSError as e:
        _unwritable.add(root)
        _warn_once(
            root,
            f"cannot write to {root} ({e.strerror or e}); kernels compile as without a cache "
            f"(set {settings.ENV_DIR} to a writable folder, or {settings.ENV_CACHE}=0)",
        )
        return False
    _after_write(root, len(data))
    return True


#: per folder: (bytes the entries took at this process's last look + what it wrote since,
#: writes since that look)
_estimates: dict[str, tuple[int, int]] = {}
#: a process looks at the whole folder again after this many writes (others write too)
LOOK_EVERY = 32


def _after_write(root: str, size: int) -> None:
    """Evicts past the size bound, looking at the whole folder only at this process's first
    write, every ``LOOK_EVERY`` writes, or when its estimate passes the bound."""
    limit = settings.size_limit()
    estimate = _estimates.get(root)
    if estimate is not None:
        total, writes = estimate[0] + size, estimate[1] + 1
        if total <= limit and writes < LOOK_EVERY:
            _estimates[root] = (total, writes)
            return
    _estimates[root] = (_evict(root, limit)[1], 0)


def entries(root: str) -> list[tuple[float, int, str]]:
    """(last use, size, path) of every entry."""
    found = []
    top = os.path.join(root, KERNELS)
    try:
        folders = list(os.scandir(top))
    except OSError:
        return found
    for folder in folders:
        if not folder.is_dir(follow_symlinks=False):
            continue
        try:
            for item in os.scandir(folder.path):
                if item.name.endswith(SUFFIX):
                    try:
                        info = item.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    found.append((info.st_mtime, info.st_size, item.path))
        except OSError:
            continue
    return found


def evict(root: str, limit: int) -> int:
    """Deletes the least recently used entries while they take more than ``limit`` bytes, down
    to 90% of it; returns how many it deleted. Another process deleting the same file at the
    same time is harmless."""
    return _evict(root, limit)[0]


def _evict(root: str, limit: int) -> tuple[int, int]:
    """(entries deleted, bytes the entries take after)."""
    found = entries(root)
    total = sum(size for _, size, _ in found)
    if total <= limit:
        return 0, total
    target = limit * 9 // 10
    deleted = 0
    for _, size, path in sorted(found):
        if total <= target:
            break
        try:
            os.unlink(path)
            deleted += 1
        except OSError:
            pass
        total -= size
    return deleted, total


def usage(root: str) -> tuple[int, int]:
    """(entries, bytes)."""
    found = entries(root)
    return len(found), sum(size for _, size, _ in found)


def clear(root: str) -> int:
    """Deletes every entry and the statistics; returns how many entries there were."""
    count = len(entries(root))
    shutil.rmtree(os.path.join(root, KERNELS), ignore_errors=True)
    for name in ("stats.json", "uncachable.json"):
        try:
            os.unlink(os.path.join(root, name))
        except OSError:
            pass
    _unwritable.discard(root)
    return count
