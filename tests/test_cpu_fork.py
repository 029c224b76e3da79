"""A child forked after its parent initialised CUDA (through fastlaunch, or through numba-cuda's
driver: `fastlaunch/_fork.py`) gets `CudaForkedError` from every fastlaunch call needing the
driver, which is also numba-cuda's `CudaDriverError` ("CUDA initialized before forking"), as
numba-cuda raises there, and pickles (a worker's result); the parent goes on. On the stand-in
driver."""

from __future__ import annotations

CHILD = """
pid = os.fork()
if pid == 0:
    try:
        call()
        print("child: no error")
    except BaseException as raised:
        error = pickle.loads(pickle.dumps(raised))  # as a worker sends it to its parent
        print("child:", type(error).__name__, isinstance(error, fl.CudaUnavailableError),
              isinstance(error, NumbaCudaDriverError),
              "CUDA initialized before forking" in str(error))
    sys.stdout.flush()
    os._exit(0)
os.waitpid(pid, 0)
call()
print("parent ok")
"""

PRELUDE = """
import os, pickle, sys
import numpy as np
from numba.cuda.cudadrv.error import CudaDriverError as NumbaCudaDriverError
import fastlaunch as fl
from fastlaunch import _core
"""


def test_after_fastlaunch_initialised_cuda(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
def call():
    _core.mem_free(_core.mem_alloc(8))
call()
"""
        + CHILD
    )
    assert lines == ["child: CudaForkedError True True True", "parent ok"]


def test_after_numba_cuda_initialised_cuda(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
from numba.cuda.cudadrv import driver as numba_driver
numba_driver.driver.pid = os.getpid()  # as numba-cuda's initialisation leaves it
def call():
    _core.device_count()
"""
        + CHILD
    )
    assert lines == ["child: CudaForkedError True True True", "parent ok"]
