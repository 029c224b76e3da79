"""The examples compile, and without a GPU each one says so and exits 77 (skipped)."""

from __future__ import annotations

import py_compile

import pytest
from test_gpu_examples import EXAMPLES, SKIPPED, output_of, run_example


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_compiles(path, tmp_path):
    py_compile.compile(str(path), cfile=str(tmp_path / "example.pyc"), doraise=True)


@pytest.mark.no_gpu  # with a GPU: run by test_gpu_hidden.py with the GPUs hidden
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_without_a_gpu_exits_77_and_says_why(path):
    done = run_example(path, timeout=120)
    assert done.returncode == SKIPPED, output_of(done)
    assert done.stderr.strip() == (
        "skipped: no CUDA GPU here (`python -m fastlaunch info` says why)"
    ), output_of(done)
    assert done.stdout == ""
