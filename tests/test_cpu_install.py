"""Process-wide use without a GPU: ``fastlaunch.install()`` / ``uninstall()``, the context
manager, ``python -m fastlaunch run``, the ``FASTLAUNCH_INSTALL`` start-up hook
(``fastlaunch_install.pth``) and the NumPy 2.5 ``row_stack`` alias. Launches use the
stand-in driver."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numba.cuda
import pytest
from numba.cuda.dispatcher import CUDADispatcher
from numba.cuda.extending import is_jitted

import fastlaunch

ROOT = Path(__file__).resolve().parent.parent
PTH = ROOT / "python" / "wheel-data" / "purelib" / "fastlaunch_install.pth"
NUMBA_JIT = numba.cuda.jit


def body(a):
    pass


@pytest.fixture(autouse=True)
def never_left_installed():
    """Every test here ends with numba-cuda's own ``numba.cuda.jit`` (other test files
    rely on it)."""
    assert numba.cuda.jit is NUMBA_JIT
    yield
    fastlaunch.uninstall()
    assert numba.cuda.jit is NUMBA_JIT


def test_install_makes_numba_cuda_jit_make_fastlaunch_kernels():
    before = numba.cuda.jit(body)
    assert not fastlaunch.is_installed()
    fastlaunch.install()
    assert fastlaunch.is_installed()
    made = numba.cuda.jit(body)
    assert type(made) is fastlaunch.Kernel
    from numba.cuda import jit  # a name imported after install() is the installed one

    assert type(jit(body)) is fastlaunch.Kernel
    assert type(jit()(body)) is fastlaunch.Kernel  # decorator-factory form
    assert type(jit(lineinfo=True)(body)) is fastlaunch.Kernel
    assert made.targetoptions == NUMBA_JIT(body).targetoptions
    # a kernel made before install() stays what it was
    assert type(before) is not fastlaunch.Kernel and isinstance(before, CUDADispatcher)
    fastlaunch.uninstall()
    assert not fastlaunch.is_installed()
    assert numba.cuda.jit is NUMBA_JIT
    assert type(numba.cuda.jit(body)) is not fastlaunch.Kernel
    assert type(made) is fastlaunch.Kernel  # made while installed: stays fastlaunch's


def test_install_and_uninstall_are_idempotent():
    fastlaunch.install()
    installed = numba.cuda.jit
    fastlaunch.install()
    assert numba.cuda.jit is installed
    fastlaunch.uninstall()
    fastlaunch.uninstall()
    assert numba.cuda.jit is NUMBA_JIT


def test_numba_cuda_internals_keep_numbas_decorator():
    import numba.cuda.decorators

    with fastlaunch.install():
        assert numba.cuda.decorators.jit is NUMBA_JIT
        assert numba.cuda.jit.__wrapped__ is NUMBA_JIT
        assert numba.cuda.jit.__doc__ == NUMBA_JIT.__doc__


def test_device_functions_stay_numbas():
    with fastlaunch.install():
        for made in (numba.cuda.jit(device=True)(body), numba.cuda.jit(body, device=True)):
            assert type(made) is not fastlaunch.Kernel
            assert made.targetoptions["device"] is True
        assert fastlaunch._installer.installed_kernels() == []


def test_kernels_pass_isinstance_checks_against_numbas_dispatcher():
    with fastlaunch.install():
        made = numba.cuda.jit(body)
    assert isinstance(made, CUDADispatcher)
    assert issubclass(fastlaunch.Kernel, CUDADispatcher)
    assert is_jitted(made)
    assert is_jitted(fastlaunch.jit(body))  # fastlaunch.jit's kernels too
    # numba-cuda's dispatcher API through the kernel
    assert made.py_func is body
    assert made.overloads == {}
    assert callable(made.specialize) and callable(made.inspect_types)
    assert made.targetoptions["device"] is False


def test_context_manager_restores_what_it_found():
    with fastlaunch.install() as installation:
        assert installation and fastlaunch.is_installed()
        with fastlaunch.install():  # nested: leaves it installed
            pass
        assert fastlaunch.is_installed()
    assert not fastlaunch.is_installed()
    fastlaunch.install()
    with fastlaunch.install():
        pass
    assert fastlaunch.is_installed()  # was installed before the with: stays so


def test_context_manager_restores_on_an_exception():
    with pytest.raises(RuntimeError), fastlaunch.install():
        raise RuntimeError("inside")
    assert not fastlaunch.is_installed()


def test_install_from_many_threads():
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def flip(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(200):
                fastlaunch.install()
                assert isinstance(numba.cuda.jit(body), CUDADispatcher)
                if i % 2:
                    fastlaunch.uninstall()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=flip, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    fastlaunch.install()
    assert fastlaunch.is_installed()
    fastlaunch.uninstall()
    assert numba.cuda.jit is NUMBA_JIT  # never lost numba-cuda's own


def test_installed_kernels_and_report():
    with fastlaunch.install():
        k = numba.cuda.jit(body)
        assert k in fastlaunch._installer.installed_kernels()
        # a decorator factory's kernel counts once it is made (guvectorize makes its kernels
        # with cuda.jit(signature)(stager))
        factory = numba.cuda.jit(debug=True, opt=False)
        assert len(fastlaunch._installer.installed_kernels()) == 1
        made = factory(body)
        assert fastlaunch._installer.installed_kernels() == [k, made]
        text = fastlaunch._installer.report()
    assert "numba.cuda.jit made" in text and text.count("body: ") == 2


def test_the_report_counts_a_kernels_specializations():
    """forall (so vectorize) launches what ``specialize`` made of a kernel: numba-cuda keeps
    the specialization, which holds its fastlaunch kernel; the report counts it there."""
    with fastlaunch.install():
        k = numba.cuda.jit(body)

        class Specialization:  # numba-cuda's specialized dispatcher, as far as the report goes
            pass

        specialization = Specialization()
        specialization._fastlaunch_kernel = fastlaunch.jit(body)
        k.dispatcher.specializations[("float32",)] = specialization
        text = fastlaunch._installer.report()
    assert "body: 0 overload(s) launched by fastlaunch (in 1 specialization(s))" in text


def test_uninstall_leaves_a_later_replacement_alone(caplog):
    fastlaunch.install()

    def other(*args, **kwargs):
        return NUMBA_JIT(*args, **kwargs)

    numba.cuda.jit = other
    try:
        fastlaunch.uninstall()
        assert numba.cuda.jit is other
        assert "left as it is" in caplog.text
    finally:
        numba.cuda.jit = NUMBA_JIT


INSTALLED_LAUNCH = textwrap.dedent(
    """
    import numpy as np
    from numba import cuda
    import fastlaunch as fl
    from fastlaunch import _core
    from fastlaunch.dispatcher import numba_type

    assert fl.is_available(), _core.unavailable_reason()
    fl.install()

    @cuda.jit
    def scale(out, x, factor):
        pass

    assert type(scale) is fl.Kernel
    args = (np.float32(2.0), 3, 1.5)

    @cuda.jit
    def scalars(a, b, c):
        pass

    fingerprint = _core.fingerprint(args)
    param_types = tuple(numba_type(d) for d in _core.describe(fingerprint))
    scalars._register(fingerprint, 90, param_types, _core.CompiledKernel(b"image", "entry"))
    for _ in range(3):
        scalars[1, 32](*args)
    assert scalars.numba_launches == 0 and scalars.miss_count == 0
    print(fl._installer.report())
    """
)


def test_an_installed_kernel_launches_through_fastlaunch(run_on_stand_in):
    lines = run_on_stand_in(INSTALLED_LAUNCH)
    assert lines[0].startswith("fastlaunch: installed; numba.cuda.jit made 2 fastlaunch kernel")
    assert any("scalars: 1 overload(s)" in line and "0 launch(es)" in line for line in lines)


# -- python -m fastlaunch run ----------------------------------------------------------------

PROGRAM = """\
import os, sys
from numba import cuda
import fastlaunch

@cuda.jit
def k(a):
    pass

print("name", __name__)
print("argv", sys.argv)
print("path0", sys.path[0])
print("file", __file__)
print("kernel", type(k).__name__)
print("env", os.environ.get("FASTLAUNCH_INSTALL"))
print("main", sys.modules["__main__"].__dict__.get("k") is k)
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fastlaunch", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _lines(done: subprocess.CompletedProcess) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


def test_run_script(tmp_path: Path):
    folder = tmp_path / "prog"
    folder.mkdir()
    (folder / "prog.py").write_text(PROGRAM)
    done = _run("prog/prog.py", "--flag", "x", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = _lines(done)
    assert out["name"] == "__main__"
    assert out["argv"] == repr(["prog/prog.py", "--flag", "x"])
    assert out["path0"] == str(folder)
    assert out["file"] == "prog/prog.py"
    assert out["kernel"] == "Kernel"
    assert out["env"] == "1"  # exported to the processes the program starts
    assert out["main"] == "True"


def test_run_module(tmp_path: Path):
    (tmp_path / "progmod.py").write_text(PROGRAM)
    done = _run("-m", "progmod", "a", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    out = _lines(done)
    assert out["name"] == "__main__"
    assert out["argv"] == repr([str(tmp_path / "progmod.py"), "a"])
    assert out["kernel"] == "Kernel"


def test_run_exit_status_errors_and_options(tmp_path: Path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    done = _run("prog.py", cwd=tmp_path, env={"EXIT_WITH": "3"})
    assert done.returncode == 3
    (tmp_path / "fails.py").write_text("raise ValueError('from the program')\n")
    done = _run("fails.py", cwd=tmp_path)
    assert done.returncode == 1 and "ValueError: from the program" in done.stderr
    done = _run("missing.py", cwd=tmp_path)
    assert done.returncode == 2 and "can't open file" in done.stderr
    done = _run("--no-children", "--report", "prog.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _lines(done)["env"] == "None"
    assert "numba.cuda.jit made 1 fastlaunch kernel" in done.stderr
    done = _run(cwd=tmp_path)
    assert done.returncode == 2 and "usage" in done.stderr
    assert _run("--help", cwd=tmp_path).stdout.startswith("usage")


# -- FASTLAUNCH_INSTALL=1 at start-up (fastlaunch_install.pth) -------------------------------

STARTUP_CHILD = """\
import site, sys
site.addsitedir({site_dir!r})   # processes fastlaunch_install.pth as at start-up
print("early", "fastlaunch" in sys.modules, "numba.cuda" in sys.modules)
from numba import cuda
import fastlaunch

@cuda.jit
def k(a):
    pass

print("installed", fastlaunch.is_installed(), type(k).__name__)
"""


@pytest.mark.parametrize(
    ("value", "installed"), [("1", True), ("yes", True), ("0", False), ("", False), (None, False)]
)
def test_the_startup_hook(tmp_path: Path, value: str | None, installed: bool):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / PTH.name).write_text(PTH.read_text())
    env = {k: v for k, v in os.environ.items() if k != "FASTLAUNCH_INSTALL"}
    if value is not None:
        env["FASTLAUNCH_INSTALL"] = value
    done = subprocess.run(
        [sys.executable, "-c", STARTUP_CHILD.format(site_dir=str(site_dir))],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    out = _lines(done)
    # numba-cuda is never imported by the hook; fastlaunch only when asked for
    assert out["early"] == f"{installed} False"
    assert out["installed"] == (f"{installed} Kernel" if installed else "False CUDADispatcher")


def test_the_pth_file_is_one_import_line():
    # site runs .pth files in name order: numba-cuda's redirector and an editable install's
    # fastlaunch.pth (which puts fastlaunch on sys.path) come first
    assert sorted([PTH.name, "fastlaunch.pth", "_numba_cuda_redirector.pth"])[-1] == PTH.name
    lines = [line for line in PTH.read_text().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("import ")  # site runs only such lines
    assert 'data = "python/wheel-data"' in (ROOT / "pyproject.toml").read_text()


# -- NumPy 2.5: np.row_stack --------------------------------------------------------------


@pytest.mark.parametrize("numpy_first", [True, False], ids=["numpy-imported-first", "lazily"])
def test_row_stack_alias_for_numba_cuda(numpy_first: bool):
    """numba-cuda 0.30.4 names np.row_stack when its first compile imports arrayobj; NumPy
    2.5 removed it. Simulated here by deleting it."""
    remove = "import numpy as np; del np.row_stack; "
    source = (remove + "import fastlaunch; ") if numpy_first else ("import fastlaunch; " + remove)
    source += "import numba.cuda.np.arrayobj; print(np.row_stack is np.vstack)"
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    without = subprocess.run(
        [sys.executable, "-c", remove + "import numba.cuda.np.arrayobj"],
        capture_output=True,
        text=True,
    )
    assert "row_stack" in without.stderr  # the failure the alias prevents


SPAWNING_PROGRAM = """\
import multiprocessing as mp
import sys


def child():
    from numba import cuda

    @cuda.jit
    def k(a):
        pass

    return type(k).__name__


if __name__ == "__main__":
    from numba import cuda

    @cuda.jit
    def k(a):
        pass

    with mp.get_context("spawn").Pool(1) as pool:
        print(type(k).__name__, pool.apply(child))
"""


@pytest.mark.parametrize("value", ["1", "0"])
def test_startup_hook_in_a_fresh_environment_reaches_spawned_workers(tmp_path: Path, value: str):
    """A real interpreter start-up: a fresh venv whose site-packages holds the .pth (as a
    wheel install leaves it) and sees this environment's packages; FASTLAUNCH_INSTALL=1 is
    inherited by a multiprocessing spawn worker, which installs at its own start-up."""
    import site
    import venv

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = [p for p in site.getsitepackages() if Path(p, "numba_cuda").is_dir()][0]
    # this environment's packages, also where cuda-pathfinder looks (site.getsitepackages)
    Path(site_dir, "_this_env.pth").write_text(
        f"import site; site.addsitedir({ours!r}); site.getsitepackages = "
        f"lambda prefixes=None, _g=site.getsitepackages: [*_g(prefixes), {ours!r}]\n"
    )
    Path(site_dir, PTH.name).write_text(PTH.read_text())
    program = tmp_path / "spawning.py"
    program.write_text(SPAWNING_PROGRAM)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FASTLAUNCH_INSTALL")}
    done = subprocess.run(
        [str(python), str(program)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**env, "FASTLAUNCH_INSTALL": value},
    )
    assert done.returncode == 0, done.stderr
    expected = "Kernel Kernel" if value == "1" else "CUDADispatcher CUDADispatcher"
    assert done.stdout.strip() == expected


# -- workers (no GPU: what the kernels are; test_gpu_install.py launches them) --------------


@pytest.fixture
def workers_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    tests_dir = str(Path(__file__).resolve().parent)
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (tests_dir, path) if p))


def test_spawn_workers_with_install_as_initializer(workers_importable):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import install_workers

    with fastlaunch.install():
        shipped = install_workers._saxpy_source()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        1, mp_context=context, initializer=install_workers.install_in_worker
    ) as pool:
        made_there = pool.submit(install_workers.kernel_kind, 0).result(timeout=120)
        sent = pool.submit(install_workers.kernel_kind, 1, shipped).result(timeout=120)
    assert made_there["installed"] and made_there["kernel"] == "Kernel", made_there
    assert sent["kernel"] == "Kernel", sent


def test_dask_worker_plugin_installs(workers_importable):
    pytest.importorskip("distributed")
    import install_workers

    with fastlaunch.install():
        shipped = install_workers._saxpy_source()
    made_there, sent = install_workers.run_on_dask_workers(install_workers.kernel_kind, shipped)
    assert len({r["pid"] for r in made_there}) == 2
    for r in made_there + sent:
        assert r["installed"] and r["kernel"] == "Kernel", r


def test_info_reports_the_startup_hook():
    done = subprocess.run(
        [sys.executable, "-m", "fastlaunch", "info"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "FASTLAUNCH_INSTALL": "0"},
    )
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("start-up hook"))
    assert row.endswith("; FASTLAUNCH_INSTALL=0")
