"""Each program in examples/ runs, in its own process, and checks its own result.

An example exits 0 when its result matches NumPy, 77 when it cannot run here (no GPU, or
an optional library such as torch or CuPy missing: the test is skipped with its message),
and anything else on a mismatch or error (the test fails and shows its output).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
SKIPPED = 77


def run_example(path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(path)],
        cwd=ROOT,
        env=dict(os.environ),  # PYTHONPATH and the rest, as this process has them
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def output_of(done: subprocess.CompletedProcess[str]) -> str:
    return f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}"


def test_there_are_examples():
    assert len(EXAMPLES) >= 5, EXAMPLES


@pytest.mark.gpu
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_and_verifies(path: Path):
    done = run_example(path, timeout=600)
    if done.returncode == SKIPPED:
        pytest.skip(f"{path.name}: {done.stderr.strip() or done.stdout.strip()}")
    assert done.returncode == 0, f"{path.name} exited {done.returncode}\n{output_of(done)}"
    assert "matches NumPy" in done.stdout, output_of(done)
