"""Every kind of kernel fastlaunch launches is compiled once per machine: a program run twice
in fresh processes compiles each kernel in the first and none in the second.

The program is given as ``python -c`` source (no file, as in a notebook), runs under
``fastlaunch.install()`` on the numba stand-in driver (numba-cuda compiles and links for real;
nothing runs), and has: a lazily compiled kernel, explicit signatures (one, and a list), a
kernel calling a device function given a signature, a cooperative kernel (grid sync: linked
with libcudadevrt), a kernel linking CUDA C++ (``link=``), ``specialize()``, a CUDA ufunc, a
gufunc, ``cuda.reduce``, a ``debug=True`` kernel raising an exception, one linking code with a
module setup callback, and one kernel the
cache cannot key (it freezes a global device array), which compiles in both runs and is
named, with its reason, by ``python -m fastlaunch cache``.

numba-cuda's own compiles are counted (``_Kernel.__init__``): a hit compiles nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cache_programs import REPORT, reports
from conftest import numba_stand_in_env

PROGRAM = (
    textwrap.dedent(
        """
    import json, os
    import numpy as np
    from numba import cuda, guvectorize, vectorize
    from numba.cuda import cg, types
    from numba.cuda import dispatcher as numba_dispatcher
    import fastlaunch as fl

    compiles = []
    _init = numba_dispatcher._Kernel.__init__
    def counted(self, py_func, *args, **kwargs):
        compiles.append(py_func.__name__)
        _init(self, py_func, *args, **kwargs)
    numba_dispatcher._Kernel.__init__ = counted

    fl.install()
    f32 = (types.float32[::1], types.float32)

    @cuda.jit
    def lazy(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = x * 1.25

    @cuda.jit("void(float32[::1], float32)")
    def explicit(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = x + 0.75

    @cuda.jit(["void(float32[::1], float32)", "void(float64[::1], float64)"])
    def explicit_list(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = x - 0.25

    @cuda.jit("float32(float32)", device=True)
    def triple(x):
        return x * 3.0

    @cuda.jit
    def calls_device(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = triple(x)

    @cuda.jit
    def cooperative(a):
        g = cg.this_grid()
        a[0] = 1.0
        g.sync()

    ext = cuda.declare_device("plus_seven", "float32(float32)")

    from numba.cuda import CUSource
    set_up = []
    def setup_callback(code):  # numba-cuda runs it when it loads the module
        set_up.append("set up")
    with_callback = CUSource(
        'extern "C" __device__ int plus_eight(float *r, float x) { *r = x + 8; return 0; }',
        setup_callback=setup_callback,
    )
    plus_eight = cuda.declare_device("plus_eight", "float32(float32)")

    @cuda.jit(link=[with_callback])
    def calls_back(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = plus_eight(x)

    @cuda.jit(link=[os.environ["EXT_CU"]])
    def linked(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = ext(x)

    @cuda.jit
    def specialized(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = x / 2

    @vectorize(["float32(float32, float32)"], target="cuda")
    def ufunc(x, y):
        return x * y + 1

    @guvectorize(["void(float32[:], float32[:])"], "(n)->()", target="cuda")
    def gufunc(x, out):
        total = 0.0
        for v in x:
            total += v
        out[0] = total

    total = cuda.reduce(lambda p, q: p + q)

    class TooFar(Exception):
        pass

    @cuda.jit(debug=True, opt=False)
    def debugged(a, x):
        i = cuda.grid(1)
        if i >= a.size:
            raise TooFar("past the end")
        a[i] = x

    frozen = cuda.to_device(np.arange(4, dtype=np.float32))

    @cuda.jit
    def freezes_a_device_array(a):
        a[0] = frozen[1]

    a = cuda.device_array(64, np.float32)
    b = cuda.device_array(64, np.float32)
    x = np.float32(2.0)
    lazy[1, 64](a, x)
    explicit[1, 64](a, x)
    explicit_list[1, 64](a, x)
    calls_device[1, 64](a, x)
    cooperative[1, 64](a)
    linked[1, 64](a, x)
    one = specialized.specialize(a, x)
    one[1, 64](a, x)
    ufunc(a, b)
    gufunc(cuda.device_array((8, 4), np.float32))
    total(a)
    freezes_a_device_array[1, 1](a)
    debugged[1, 64](a, x)
    calls_back[1, 64](a, x)
    (debug_overload,) = debugged.overloads.values()
    raised = [(c.__name__, args) for c, args, _ in debug_overload.call_helper.exceptions.values()]

    KERNELS = {k.__name__: (k, f32) for k in (lazy, explicit, explicit_list, calls_device, linked)}
    KERNELS["cooperative"] = (cooperative, (types.float32[::1],))
    info = fl.cache.info()["process"]
    print("COUNTS " + json.dumps({
        "compiles": compiles,
        "hits": info["hits"], "misses": info["misses"], "stores": info["stores"],
        "uncachable": info["uncachable_kernels"],
        "cooperative": bool(cooperative.overloads[(types.float32[::1],)].cooperative),
        "raised": raised,
        "set_up": set_up,
    }))
    """
    )
    + REPORT
)

KERNELS_COMPILED = [
    "lazy",
    "explicit",
    "explicit_list",
    "explicit_list",
    "calls_device",
    "cooperative",
    "linked",
    "specialized",
    "__vectorized_ufunc",
    "__gufunc_gufunc",
    "gpu_reduce_block_strided",
    "freezes_a_device_array",
    "debugged",
    "calls_back",
]


def _counts(lines: list[str]) -> dict:
    line = next(line for line in lines if line.startswith("COUNTS "))
    return json.loads(line[len("COUNTS ") :])


def _child(source: str, env: dict[str, str], cwd: Path) -> list[str]:
    """The lines `source` printed, run in a fresh process (which must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture(scope="module")
def runs(numba_stand_in: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("coverage")
    ext = folder / "ext.cu"
    ext.write_text(
        'extern "C" __device__ int plus_seven(float *r, float x) { *r = x + 7; return 0; }'
    )
    cache = folder / "cache"
    env = numba_stand_in_env(
        numba_stand_in, FASTLAUNCH_CACHE_DIR=str(cache), EXT_CU=str(ext), FRESH="1"
    )
    found = {}
    for run in ("first", "second"):
        lines = _child(PROGRAM, env, folder)
        found[run] = {"counts": _counts(lines), "reports": reports(lines)}
    info = subprocess.run(
        [sys.executable, "-m", "fastlaunch", "cache"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    found["info"] = info.stdout
    return found


def test_the_first_run_compiles_and_stores_every_kernel(runs):
    counts = runs["first"]["counts"]
    assert sorted(counts["compiles"]) == sorted(KERNELS_COMPILED)
    assert counts["hits"] == 0
    assert counts["stores"] == counts["misses"] == len(KERNELS_COMPILED) - 1
    assert counts["cooperative"]
    assert counts["raised"] == [["TooFar", ["past the end"]]]
    assert counts["set_up"] == ["set up"]


def test_the_second_run_compiles_nothing_but_what_cannot_be_keyed(runs):
    counts = runs["second"]["counts"]
    assert counts["compiles"] == ["freezes_a_device_array"]
    assert counts["hits"] == len(KERNELS_COMPILED) - 1
    assert (counts["misses"], counts["stores"]) == (0, 0)
    assert counts["cooperative"]
    # a debug kernel's table of the exceptions it raises, which its launches read back
    assert counts["raised"] == [["TooFar", ["past the end"]]]
    # linked code's setup callback ran when the loaded kernel's module was loaded
    assert counts["set_up"] == ["set up"]


def test_hits_are_the_code_a_fresh_compile_gives(runs):
    first, second = runs["first"]["reports"], runs["second"]["reports"]
    assert sorted(second) == sorted(
        ["lazy", "explicit", "explicit_list", "calls_device"] + ["linked", "cooperative"]
    )
    for name, report in second.items():
        assert report["hits"] >= 1 and report["misses"] == 0, name
        assert report["ptx"] == report["fresh"] == first[name]["ptx"], name
        assert report["cubin"] == first[name]["cubin"], name


def test_what_cannot_be_cached_is_named_with_its_reason(runs):
    for run in ("first", "second"):
        uncachable = runs[run]["counts"]["uncachable"]
        assert list(uncachable) == ["__main__.freezes_a_device_array"]
        assert "device array" in uncachable["__main__.freezes_a_device_array"]
    assert "__main__.freezes_a_device_array: a device array" in runs["info"]
    assert "not cached        1 kernel(s)" in runs["info"]
    hits = 2 * (len(KERNELS_COMPILED) - 1) - (len(KERNELS_COMPILED) - 1)
    assert f"hits / misses     {hits} / {len(KERNELS_COMPILED) - 1}" in runs["info"]


OVERLOADS = textwrap.dedent(
    """
    import numpy as np
    from numba import cuda
    import fastlaunch as fl

    def store(out, x):
        out[0] = x

    SIGNATURES = ["void(float64[::1], int32)", "void(float64[::1], float64)"]
    out = cuda.to_device(np.zeros(1))
    for x in (5, np.float32(1.5), True):  # a kernel each: the second and third are hits
        kernel = fl.jit(SIGNATURES)(store)
        try:
            kernel[1, 1](out, x)
            print("launched")
        except TypeError as error:
            print("TypeError", "Ambiguous" in str(error))
    from fastlaunch.cache import stats
    print("hits", stats.snapshot()["hits"])
    """
)


def test_overloads_loaded_from_the_cache_are_chosen_among_as_compiled_ones(
    numba_stand_in: Path, tmp_path: Path
):
    """A kernel with signatures whose overloads come from the cache picks among them as
    numba-cuda picks (its dispatcher reads every overload's ``objectmode``, which a loaded
    one has as a compiled one does): a conversion finds its overload, an ambiguous call
    raises numba-cuda's TypeError."""
    env = numba_stand_in_env(numba_stand_in, FASTLAUNCH_CACHE_DIR=str(tmp_path / "cache"))
    lines = _child(OVERLOADS, env, tmp_path)
    assert lines == ["launched", "launched", "TypeError True", "hits 4"]
