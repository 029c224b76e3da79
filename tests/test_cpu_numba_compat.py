"""The numba-cuda seam (``fastlaunch._numba_compat``): the one module that reaches into
numba-cuda's private internals, and what it does per numba-cuda version."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import fastlaunch
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.errors import NumbaCudaVersionError

PACKAGE = Path(fastlaunch.__file__).parent
#: numba-cuda's public modules, which any fastlaunch module may import
PUBLIC = {"numba", "numba.cuda"}


def _numba_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("numba"):
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names if a.name.startswith("numba")]
    return names


def test_only_the_seam_imports_numba_cuda_internals():
    outside = {
        path.name: private
        for path in sorted(PACKAGE.glob("*.py"))
        if path.name != "_numba_compat.py"
        and (private := [m for m in _numba_imports(path) if m not in PUBLIC])
    }
    assert outside == {}
    assert "numba.cuda.dispatcher" in _numba_imports(PACKAGE / "_numba_compat.py")


def test_importing_fastlaunch_imports_no_numba_cuda():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, fastlaunch\n"
            "print(sorted(m for m in sys.modules if m.startswith('numba')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_version_is_the_imported_numba_cuda():
    import numba_cuda as package

    assert numba_cuda.version_string() == package.__version__
    assert numba_cuda.version()[:2] == tuple(int(p) for p in package.__version__.split(".")[:2])
    assert numba_cuda.is_supported()
    assert numba_cuda.supported_range() == ">=0.26,<0.31"


def test_launch_config_api_from_0_30(monkeypatch):
    for version, has in [((0, 26, 0), False), ((0, 29, 9), False), ((0, 30, 0), True)]:
        monkeypatch.setattr(numba_cuda, "version", lambda v=version: v)
        assert numba_cuda.has_launch_config_api() is has


def test_launch_config_api_before_0_30_raises_naming_versions(monkeypatch):
    monkeypatch.setattr(numba_cuda, "version", lambda: (0, 28, 2))
    monkeypatch.setattr(numba_cuda, "version_string", lambda: "0.28.2")
    with pytest.raises(NumbaCudaVersionError) as raised:
        numba_cuda.require_launch_config_api("pre_launch_callbacks")
    assert isinstance(raised.value, NotImplementedError)
    assert (raised.value.feature, raised.value.needed, raised.value.installed) == (
        "pre_launch_callbacks",
        "0.30",
        "0.28.2",
    )
    assert str(raised.value) == (
        "pre_launch_callbacks needs numba-cuda 0.30 or newer; numba-cuda 0.28.2 is installed "
        "(pip install 'numba-cuda>=0.30')"
    )
    with pytest.raises(NumbaCudaVersionError, match="launch_config.args"):
        numba_cuda.current_launch_args()
    with pytest.raises(NumbaCudaVersionError, match="mark_launch_config_sensitive"):
        numba_cuda.launchconfig("mark_launch_config_sensitive()")


class _RecordingDispatcher:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def call(self, *args):
        self.calls.append(args)


@pytest.mark.parametrize("version", [(0, 26, 0), (0, 28, 2), (0, 30, 4)])
def test_handing_a_launch_to_numba_cuda_in_each_versions_form(monkeypatch, version):
    monkeypatch.setattr(numba_cuda, "version", lambda: version)
    dispatcher = _RecordingDispatcher()
    config = numba_cuda.launch_configuration(dispatcher, (2, 1, 1), (32, 1, 1), 0, 16)
    assert config.pre_launch_callbacks == []
    numba_cuda.dispatcher_call(dispatcher, (1, 2), config)
    if version >= (0, 30):  # call(args, launch_config)
        assert dispatcher.calls == [((1, 2), config)]
    else:  # call(args, griddim, blockdim, stream, sharedmem)
        assert dispatcher.calls == [((1, 2), (2, 1, 1), (32, 1, 1), 0, 16)]


def test_launch_args_are_current_only_from_0_30(monkeypatch):
    config = numba_cuda.launch_configuration(None, (1, 1, 1), (1, 1, 1), 0, 0)
    monkeypatch.setattr(numba_cuda, "version", lambda: (0, 26, 0))
    with numba_cuda.launch_args_current((1,)):
        pass  # 0.26 has no thread-local launch arguments to set
    monkeypatch.undo()
    if numba_cuda.has_launch_config_api():
        with numba_cuda.launch_args_current((7, 8)):
            assert config.args == (7, 8)  # numba-cuda's configuration reads the thread-local
            assert numba_cuda.current_launch_args() == (7, 8)
        assert numba_cuda.current_launch_args() is None


@pytest.mark.parametrize(
    ("numba_cuda_version", "numba", "refused"),
    [((0, 26, 0), "0.65.1", False), ((0, 28, 2), "0.66.0", True), ((0, 30, 4), "0.68.1", False)],
)
def test_numba_cuda_before_0_30_needs_numba_before_0_66(
    monkeypatch, numba_cuda_version, numba, refused
):
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(numba_cuda, "version", lambda: numba_cuda_version)
    monkeypatch.setattr(numba_cuda, "version_string", lambda: "0.28.2")
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: numba if name == "numba" else real(name)
    )
    if not refused:
        assert numba_cuda.numba_mismatch() is None
        return
    message = "numba-cuda 0.28.2 needs numba < 0.66 (numba 0.66.0 is installed)"
    assert numba_cuda.numba_mismatch().startswith(message)
    with pytest.raises(ImportError, match=r"needs numba < 0\.66"):
        numba_cuda.numba_jit()


def test_the_supported_range_is_what_pyproject_declares():
    """pip keeps numba-cuda 0.26.0 beside fastlaunch (make test also installs fastlaunch into
    a venv holding 0.26.0 and checks pip kept it)."""
    import tomllib

    from packaging.requirements import Requirement

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    project = pyproject["project"]
    requirements = [Requirement(r) for r in project["dependencies"]] + [
        Requirement(r) for extra in project["optional-dependencies"].values() for r in extra
    ]
    specifiers = {str(r.specifier) for r in requirements if r.name == "numba-cuda"}
    assert specifiers == {"<0.31,>=0.26"}
    (specifier,) = {r.specifier for r in requirements if r.name == "numba-cuda"}
    for kept in ["0.26.0", "0.26.1", "0.28.2", "0.29.0", "0.30.0", "0.30.4"]:
        assert specifier.contains(kept)
    for refused in ["0.25.9", "0.31.0"]:
        assert not specifier.contains(refused)
    assert numba_cuda.supported_range() == ">=0.26,<0.31"


def test_the_version_error_pickles_under_its_public_name():
    import pickle

    error = NumbaCudaVersionError("pre_launch_callbacks", "0.30", "0.28.2")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is NumbaCudaVersionError
    assert NumbaCudaVersionError.__module__ == "fastlaunch.errors"
    assert (again.feature, again.needed, again.installed, str(again)) == (
        "pre_launch_callbacks",
        "0.30",
        "0.28.2",
        str(error),
    )


def test_the_seam_does_not_import_the_errors_module():
    # errors builds its numba-cuda-derived classes from the seam: the seam must not import
    # errors back (a circle)
    imports = {
        node.module
        for node in ast.walk(ast.parse((PACKAGE / "_numba_compat.py").read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "fastlaunch.errors" not in imports
