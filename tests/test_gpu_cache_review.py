"""The launch-cache defects an outside review found (issue 32), pinned on the GPU: mapped and
managed arrays whose shape or dtype is assigned in place launch as numba-cuda launches them,
and a torch tensor given the negative bit through `.data =` is refused."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from numba import cuda

import fastlaunch as fl

pytestmark = pytest.mark.gpu


def form_of(a, out):
    out[0] = a.ndim
    out[1] = a.shape[0]
    out[2] = a.size


plain_form_of = cuda.jit(form_of)
fast_form_of = fl.jit(form_of)


def seen_by(kernel, a):
    out = cuda.device_array(3, np.int64)
    kernel[1, 1](a, out)
    cuda.synchronize()
    return out.copy_to_host().tolist()


@pytest.mark.parametrize("make", [cuda.mapped_array, cuda.managed_array], ids=["mapped", "managed"])
@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "shape", (4, 4)),
        lambda m: setattr(m, "dtype", np.int32),
        lambda m: setattr(m, "shape", (2, 8)),
    ],
    ids=["reshape", "dtype", "reshape-again"],
)
def test_host_backed_numba_arrays_changed_in_place_launch_as_they_are_now(make, change):
    """fastlaunch launches the array as it is now, as numba-cuda launches an array changed
    before its first launch. (numba-cuda itself keeps the type of an array's first launch in
    a cached property and goes on launching that type after the change, which on the H200
    gave stale shapes or crashed the process: a deliberate difference, docs/differences.md,
    not run here.)"""
    launched = make(16, np.float64)
    for _ in range(3):  # remembered by the caches, if anything is
        assert seen_by(fast_form_of, launched) == [1, 16, 16]
    change(launched)
    never_launched = make(16, np.float64)
    change(never_launched)
    now = [launched.ndim, launched.shape[0], launched.size]
    assert now != [1, 16, 16]
    assert seen_by(fast_form_of, launched) == now
    assert seen_by(plain_form_of, never_launched) == now


def fill(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = i


def test_a_mapped_array_changed_in_place_is_written_by_its_new_dtype():
    kernel = fl.jit(fill)
    m = cuda.mapped_array(16, np.float64)
    kernel[1, 16](m)
    cuda.synchronize()
    m.dtype = np.int32  # 32 int32 values over the same bytes
    kernel[1, 32](m)
    cuda.synchronize()
    assert m.tolist() == list(range(32))


def test_a_tensor_given_the_negative_bit_by_data_assignment_is_refused():
    torch = pytest.importorskip("torch")
    out = torch.zeros(4, device="cuda", dtype=torch.float32)
    t = torch.ones(4, device="cuda", dtype=torch.float32)
    fast_copy[1, 4](out, t)  # read once: found free of the bit
    x = torch.arange(4, device="cuda", dtype=torch.float32).to(torch.complex64) * 1j
    t.data = x.conj().imag
    assert t.is_neg() and t._base is None
    with pytest.raises(fl.KernelArgumentError, match="resolve_neg") as info:
        fast_copy[1, 4](out, t)
    assert info.value.position == 1
    fast_copy[1, 4](out, t.resolve_neg())
    torch.cuda.synchronize()
    assert torch.equal(out, t.resolve_neg())


def _copy(out, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i]


fast_copy = fl.jit(_copy)


ORDERED_AFTER_RESET = """
import numpy as np
from numba import cuda
import fastlaunch as fl

class OnStream:
    # an array its producer stream names (CUDA Array Interface v3): launches on another
    # stream wait for it through fastlaunch's per-context ordering event
    def __init__(self, array, handle):
        self.array = array
        self.__cuda_array_interface__ = dict(array.__cuda_array_interface__, stream=handle)

@fl.jit
def add_one(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1

for round in range(3):
    a = cuda.to_device(np.arange(64, dtype=np.float32))
    producer = fl.stream()  # destroyed before the reset (a numba Stream outliving it breaks
    add_one[2, 32](OnStream(a, producer.handle))  # numba-cuda's next context)
    add_one[2, 32](OnStream(a, producer.handle))
    assert (a.copy_to_host() == np.arange(64) + 2).all(), round
    del producer
    cuda.close()  # resets the primary context: the next one may get the same handle
print("ordered after reset")
"""


def test_launch_ordering_after_a_context_reset_uses_the_new_contexts_event():
    """The ordering events (and remembered launches) are keyed by the context's unique id:
    after `cuda.close()` the primary context may come back with its old handle, and an
    event of the destroyed context must not be recorded. Where numba-cuda itself cannot run
    the program, there is nothing to match."""

    def run(jit: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", ORDERED_AFTER_RESET.replace("@fl.jit", f"@{jit}")],
            capture_output=True,
            text=True,
            timeout=120,
        )

    numba_alone = run("cuda.jit")
    if numba_alone.returncode != 0:
        last_line = (numba_alone.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"numba-cuda itself does not run it after cuda.close(): {last_line}")
    done = run("fl.jit")
    assert done.returncode == 0, done.stderr
    assert "ordered after reset" in done.stdout
