"""Pre-bound launches (`rust/ext/src/bound.rs`) against the stand-in driver, whose captures
count the kernel launches they see: `_submit_repeatedly(n)`, the benchmarks' in-process floor,
submits the bound launch exactly n times, and stops at the first refusal."""

from __future__ import annotations

from pathlib import Path

SUBMIT = """
import sys
import numpy as np
import fastlaunch as fl
from fastlaunch import _core
from fastlaunch.dispatcher import numba_type
sys.path.insert(0, {tests!r})
from test_cpu_core_objects import make_buffer

def k(buffer, scale):
    pass

kernel = fl.jit(k)
args = (make_buffer(), 2.0)
fingerprint = _core.fingerprint(args)
param_types = tuple(numba_type(d) for d in _core.describe(fingerprint))
kernel._register(fingerprint, 90, param_types, _core.CompiledKernel(b"image", "entry"))
stream = 0x5000
bound = kernel[1, 1, stream].bind(*args)
for times in (0, 1, 7):
    graph = _core.Graph(stream)
    with graph:
        bound._submit_repeatedly(times)
    print(times, graph.node_count)
try:
    bound._submit_repeatedly(-1)
except OverflowError:
    print("negative refused")
"""


def test_a_bound_launch_is_submitted_as_many_times_as_asked(run_on_stand_in):
    lines = run_on_stand_in(SUBMIT.format(tests=str(Path(__file__).parent)))
    assert lines == ["0 0", "1 1", "7 7", "negative refused"]
