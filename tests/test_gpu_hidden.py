"""The CPU suite's ``no_gpu`` tests on a machine with a GPU: each module's run in a child pytest
with every GPU hidden from the CUDA driver (``conftest.HIDE_GPUS``), so that what fastlaunch
does without a GPU is checked on every machine. Without a GPU those tests run in the CPU suite
itself, and these are skipped (``gpu``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HIDE_GPUS

TESTS = Path(__file__).resolve().parent

#: the modules with tests marked ``no_gpu``
MODULES = [
    "test_cpu_errors.py",
    "test_cpu_examples.py",
    "test_cpu_features.py",
    "test_cpu_graphs_clusters.py",
]

pytestmark = pytest.mark.gpu


def test_every_module_with_no_gpu_tests_is_listed():
    marked = sorted(
        path.name
        for path in TESTS.glob("test_cpu_*.py")
        if "pytest.mark.no_gpu" in path.read_text(encoding="utf-8")
    )
    assert marked == MODULES


@pytest.mark.parametrize("module", MODULES)
def test_no_gpu_tests_pass_with_the_gpus_hidden(module):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "no_gpu", module],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=TESTS,
        env={**os.environ, **HIDE_GPUS},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary, output[-6000:]
    # hidden GPUs must look like none: a test skipped here would mean the child still saw one
    assert "skipped" not in summary and "failed" not in summary, output[-6000:]
