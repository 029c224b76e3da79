"""The compile cache as a file store (``fastlaunch.cache.store``, ``entry``, ``settings``,
``stats``): atomic writes from many processes, corrupt, truncated and foreign files compiled
again (never a crash), an unwritable folder falling back to compiling with one warning, least
recently used entries evicted past the size bound, the environment variables, numba-cuda's own
``cache=True`` left to numba-cuda, and ``python -m fastlaunch cache``."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from cache_programs import REPORT, reports
from conftest import numba_stand_in_env

from fastlaunch.cache import entry, settings, stats, store

KEY = "ab" * 32


def test_an_entry_round_trips_and_refuses_anything_else():
    data = entry.encode(1, KEY, {"a": 1}, [("cubin", b"\x00\x01"), ("ptx", b"x"), ("ptx", b"y")])
    header, blobs = entry.decode(1, KEY, data)
    assert header["a"] == 1
    assert blobs == {"cubin": [b"\x00\x01"], "ptx": [b"x", b"y"]}
    refused = {
        "truncated": data[:-5],
        "too short": data[:10],
        "a flipped byte": data[:40] + bytes([data[40] ^ 1]) + data[41:],
        "foreign": b"\x7fELF" + os.urandom(200),
        "empty": b"",
    }
    for what, bad in refused.items():
        with pytest.raises(ValueError):
            entry.decode(1, KEY, bad)
        print(what, "refused")
    with pytest.raises(ValueError, match="format"):
        entry.decode(2, KEY, data)
    with pytest.raises(ValueError, match="another key"):
        entry.decode(1, "cd" * 32, data)


def test_writes_are_atomic_and_leave_no_temporary_files(tmp_path):
    assert store.read(str(tmp_path), KEY) is None
    assert store.write(str(tmp_path), KEY, b"one")
    assert store.write(str(tmp_path), KEY, b"two")
    assert store.read(str(tmp_path), KEY) == b"two"
    files = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert files == [KEY[2:] + ".flk"]


def _write_many(root: str, worker: int) -> None:
    for i in range(40):
        data = entry.encode(1, KEY, {"i": i}, [("cubin", os.urandom(2000))])
        store.write(root, KEY, data)  # all workers on one key
        own = f"{worker:02x}{i:02x}" * 16
        store.write(root, own, entry.encode(1, own, {"w": worker}, [("cubin", b"w")]))
        assert entry.decode(1, KEY, store.read(root, KEY) or b"")  # always a whole entry


def test_many_processes_write_at_once(tmp_path):
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_write_many, args=(str(tmp_path), w)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    assert entry.decode(1, KEY, store.read(str(tmp_path), KEY) or b"")
    count, _ = store.usage(str(tmp_path))
    assert count == 1 + 4 * 40
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_least_recently_used_entries_go_first(tmp_path, monkeypatch):
    root = str(tmp_path)
    for i in range(10):
        key = f"{i:02x}" * 32
        store.write(root, key, b"x" * 1000)
        os.utime(store.entry_path(root, key), (1000 + i, 1000 + i))
    store.touch(root, "00" * 32)  # used now: the newest
    assert store.evict(root, 5000) == 6  # down to 90% of 5000 bytes: 4 entries left
    left = sorted(Path(p).name[:2] for _, _, p in store.entries(root))
    assert left == ["00", "07", "08", "09"]
    monkeypatch.setenv(settings.ENV_SIZE, "3K")
    store.write(root, "aa" * 32, b"y" * 1000)  # a write evicts past the bound
    assert store.usage(root)[1] <= 3 * 1024


def test_an_unwritable_folder_warns_once_and_writes_nothing(tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    root = str(blocker / "cache")  # below a file: cannot be made, even by root
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not store.write(root, KEY, b"one")
        assert not store.write(root, "cd" * 32, b"two")
    assert [str(w.message) for w in caught if w.category is store.CacheWarning] == [
        next(str(w.message) for w in caught)
    ]
    assert "cannot write" in str(caught[0].message)
    assert store.read(root, KEY) is None


def test_settings_from_the_environment(monkeypatch, tmp_path):
    for name in (settings.ENV_CACHE, settings.ENV_DIR, settings.ENV_NUMBA_DIR, "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert settings.enabled()
    assert settings.directory() == str(tmp_path / ".cache" / "fastlaunch")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert settings.directory() == str(tmp_path / "xdg" / "fastlaunch")
    monkeypatch.setenv(settings.ENV_NUMBA_DIR, str(tmp_path / "numba"))
    assert settings.directory() == str(tmp_path / "numba" / "fastlaunch")
    monkeypatch.setenv(settings.ENV_DIR, str(tmp_path / "mine"))
    assert settings.directory() == str(tmp_path / "mine")
    for off in ("0", "off", "False", "no"):
        monkeypatch.setenv(settings.ENV_CACHE, off)
        assert not settings.enabled()
    monkeypatch.setenv(settings.ENV_CACHE, "1")
    assert settings.enabled()
    for text, size in (("", settings.DEFAULT_SIZE), ("2048", 2048), ("5M", 5 << 20)):
        monkeypatch.setenv(settings.ENV_SIZE, text)
        assert settings.size_limit() == size
    monkeypatch.setenv(settings.ENV_SIZE, "1.5GiB")
    assert settings.size_limit() == 3 << 29


def test_turned_off_a_kernel_keeps_numbas_null_cache(monkeypatch):
    import fastlaunch as fl

    monkeypatch.setenv(settings.ENV_CACHE, "0")

    @fl.jit
    def k(a):
        a[0] = 1

    assert type(k.dispatcher._cache).__name__ == "NullCache"
    monkeypatch.setenv(settings.ENV_CACHE, "1")

    @fl.jit(cache=True)
    def numbas(a):
        a[0] = 1

    assert type(numbas.dispatcher._cache).__name__ == "CUDACache"


def test_statistics_add_up_over_processes(tmp_path):
    root = str(tmp_path)
    source = (
        "import sys\nfrom fastlaunch.cache import stats\n"
        f"stats.count('hits', {root!r}); stats.count('misses', {root!r})\n"
        f"stats.uncachable('m.k', 'why', {root!r})\n"
    )
    for _ in range(2):
        subprocess.run([sys.executable, "-c", source], check=True)
    totals, kernels = stats.load(root)
    assert (totals["hits"], totals["misses"], totals["uncachable"]) == (2, 2, 2)
    assert kernels["m.k"]["reason"] == "why"


# -- through numba-cuda's compile, on the stand-in -------------------------------------------

PROGRAM = (
    textwrap.dedent(
        """
    import numpy as np
    from numba import cuda
    from numba.cuda import types
    import fastlaunch as fl

    def make(scale):
        @fl.jit
        def k(a, x):
            i = cuda.grid(1)
            if i < a.size:
                a[i] = x * scale
        return k

    a = cuda.device_array(8, np.float32)
    KERNELS = {}
    for n in range(3):
        kernel = make(float(n) + 0.5)
        kernel[1, 8](a, np.float32(1))
        KERNELS[f"k{n}"] = (kernel, (types.float32[::1], types.float32))
    """
    )
    + REPORT
)


def _run(folder: Path, cache: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True,
        text=True,
        timeout=300,
        env=numba_stand_in_env(folder, FASTLAUNCH_CACHE_DIR=cache, **env),
    )


def test_corrupt_truncated_and_foreign_entries_are_compiled_again(numba_stand_in, tmp_path):
    cache = str(tmp_path / "cache")
    first = _run(numba_stand_in, cache)
    assert first.returncode == 0, first.stderr
    paths = sorted(p for _, _, p in store.entries(cache))
    assert len(paths) == 3
    data = [Path(p).read_bytes() for p in paths]
    Path(paths[0]).write_bytes(data[0][:100] + bytes([data[0][100] ^ 0xFF]) + data[0][101:])
    Path(paths[1]).write_bytes(data[1][: len(data[1]) // 2])
    Path(paths[2]).write_bytes(b"\x7fELF" + os.urandom(300))
    second = _run(numba_stand_in, cache)
    assert second.returncode == 0, second.stderr
    for name, report in reports(second.stdout.splitlines()).items():
        assert (report["hits"], report["misses"], report["stores"]) == (0, 1, 1), name
    assert [Path(p).read_bytes() for p in paths] == data  # stored again, whole
    third = _run(numba_stand_in, cache)
    assert third.returncode == 0, third.stderr
    for name, report in reports(third.stdout.splitlines()).items():
        assert (report["hits"], report["misses"]) == (1, 0), name


def test_an_unwritable_cache_folder_compiles_with_one_warning(numba_stand_in, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    done = _run(numba_stand_in, str(blocker / "cache"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("fastlaunch's compile cache: cannot write") == 1
    for report in reports(done.stdout.splitlines()).values():
        assert (report["hits"], report["misses"], report["stores"]) == (0, 1, 0)


NUMBAS_CACHE = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from numba import cuda
    import fastlaunch as fl
    fl.install()

    @cuda.jit(cache=True)
    def k(a):
        a[0] = 1.5

    a = cuda.device_array(4, np.float32)
    k[1, 1](a)
    stats = k.stats
    info = fl.cache.info()
    print(json.dumps({
        "numba": [sum(stats.cache_hits.values()), sum(stats.cache_misses.values())],
        "ours": [info["process"]["hits"], info["process"]["misses"], info["process"]["stores"]],
        "directory": info["directory"],
        "cache": type(k.dispatcher._cache).__name__,
    }))
    """
)


def test_cache_true_kernels_keep_numbas_own_cache_under_install(numba_stand_in, tmp_path):
    """numba-cuda's ``cache=True`` cache keeps its files, statistics and semantics; fastlaunch's
    cache leaves such kernels alone, and goes in NUMBA_CACHE_DIR's fastlaunch folder."""
    import json

    program = tmp_path / "prog.py"
    program.write_text(NUMBAS_CACHE)
    env = numba_stand_in_env(numba_stand_in, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    env.pop("FASTLAUNCH_CACHE_DIR")
    found = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(program)], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr
        found.append(json.loads(done.stdout.splitlines()[-1]))
    assert [f["numba"] for f in found] == [[0, 1], [1, 0]]
    assert [f["ours"] for f in found] == [[0, 0, 0], [0, 0, 0]]
    assert found[0]["directory"] == str(tmp_path / "numba" / "fastlaunch")
    assert found[0]["cache"] == "CUDACache"
    assert any(p.suffix == ".nbi" for p in (tmp_path / "numba").rglob("*"))


def test_the_command_line_reports_and_clears(tmp_path):
    env = {**os.environ, settings.ENV_DIR: str(tmp_path)}
    store.write(str(tmp_path), KEY, b"x" * 100)
    shown = subprocess.run(
        [sys.executable, "-m", "fastlaunch", "cache"], env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert f"directory         {tmp_path} (from {settings.ENV_DIR})" in shown.stdout
    assert "1 kernel(s)" in shown.stdout
    cleared = subprocess.run(
        [sys.executable, "-m", "fastlaunch", "cache", "clear"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert cleared.returncode == 0 and "removed 1 cached kernel(s)" in cleared.stdout
    assert store.usage(str(tmp_path)) == (0, 0)
    bad = subprocess.run(
        [sys.executable, "-m", "fastlaunch", "cache", "bogus"], env=env, capture_output=True
    )
    assert bad.returncode == 2
