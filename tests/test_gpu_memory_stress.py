"""A threaded differential stress of numba-cuda's memory API (issue 48): several Python
threads, each running its own seeded random sequence of ``cuda.to_device``, ``device_array``,
``copy_to_host`` (into new arrays, into pageable and pinned ones, with and without a stream),
``copy_to_device``, views and writes through them, ``d[a:b] = ...``, ``bind``, frees (some
inside ``cuda.defer_cleanup()``), kernel launches on the legacy stream, blocking
``cuda.stream()`` streams and non-blocking ones (a cuda.bindings stream through
``cuda.external_stream``, torch's and CuPy's side streams), and CuPy and torch reading and
writing the arrays through ``__cuda_array_interface__`` on their side streams, sizes below, at
and above a staging slot (1 MiB). Every byte read back is checked against a NumPy model kept
per thread (``tests/memory_stress_model.py``, which also says where the sequences synchronize:
where a user of numba-cuda must, and nowhere else, so that work fastlaunch leaves queued when
numba-cuda's has finished shows as stale bytes).

Each run is a child process: under ``fastlaunch.install()`` (the target) and, on the same
seeds, plain numba-cuda (the differential: it must agree with the model too; where it does
not, the model asks more than numba-cuda promises). A failure names the thread, the step, the
operation and the first differing index, with the operations before it.

Environment: ``FASTLAUNCH_STRESS_THREADS`` (6), ``FASTLAUNCH_STRESS_STEPS`` (300 per thread),
``FASTLAUNCH_STRESS_SEED`` (0), ``FASTLAUNCH_STRESS_ONLY`` (run only these threads' sequences,
e.g. ``3`` or ``1,4``: a failing thread's sequence alone), ``FASTLAUNCH_STRESS_LIBRARIES``
(``cupy,torch``; ``none`` leaves both out), ``FASTLAUNCH_STRESS_BUDGET_S`` (150: a child still
running then is reported as hung, with every thread's last operation and stack). The CPU test
of the generator and model: ``tests/test_cpu_memory_stress_model.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

THREADS = int(os.environ.get("FASTLAUNCH_STRESS_THREADS", "6"))
STEPS = int(os.environ.get("FASTLAUNCH_STRESS_STEPS", "300"))
SEED = int(os.environ.get("FASTLAUNCH_STRESS_SEED", "0"))
ONLY = os.environ.get("FASTLAUNCH_STRESS_ONLY", "")
LIBRARIES = os.environ.get("FASTLAUNCH_STRESS_LIBRARIES", "cupy,torch")
BUDGET_S = float(os.environ.get("FASTLAUNCH_STRESS_BUDGET_S", "150"))


def run_child(mode: str) -> dict:
    """This file run as a script in a fresh process (``mode``: installed or plain): its
    RESULT, with its exit status and the end of its stderr."""
    args = [mode, str(THREADS), str(STEPS), str(SEED), ONLY or "-", LIBRARIES, str(BUDGET_S)]
    # CuPy synchronizes the stream an array's interface exports (its default; the model
    # relies on it)
    env = {**os.environ, "CUPY_CUDA_ARRAY_INTERFACE_SYNC": "1"}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        capture_output=True,
        text=True,
        timeout=BUDGET_S + 120,
        env=env,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, (
        f"{mode}: no RESULT (exit {done.returncode})\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    result = json.loads(lines[-1][len("RESULT ") :])
    result["returncode"] = done.returncode
    result["stderr"] = done.stderr[-6000:]
    return result


@pytest.mark.parametrize("mode", ["installed", "plain"])
def test_threads_using_the_memory_api_read_back_what_a_numpy_model_holds(mode):
    result = run_child(mode)
    assert "setup" not in result, f"{mode}: could not run: {result['setup']}"
    assert "hang" not in result, (
        f"{mode}: still running after {BUDGET_S} s; each thread's last operation:\n"
        + "\n".join(f"  {t}: {where}" for t, where in sorted(result["hang"].items()))
        + f"\n{result['stderr']}"
    )
    header = (
        f"{mode}: {result['threads']} threads x {STEPS} steps, seed {SEED}, features "
        f"{result['features']} {result['notes'] or ''} ({result['seconds']:.1f} s)"
    )
    print(header)
    print("operations:", json.dumps(result["counts"], sort_keys=True))
    if mode == "plain":
        hint = (
            "plain numba-cuda disagrees with the model: the model (tests/memory_stress_model.py) "
            "asks more than numba-cuda promises there, or numba-cuda is wrong; the installed "
            "run's failures at the same thread and step are then no evidence against fastlaunch"
        )
    else:
        hint = (
            "does the plain run (-k plain) agree with the model on the same seed? Rerun one "
            "thread alone with FASTLAUNCH_STRESS_ONLY=<thread> (the same sequence, no other "
            "threads beside it)"
        )
    problems = result["problems"]
    assert not problems, f"{header}\n{hint}\n\n" + "\n\n".join(problems)
    assert result["returncode"] == 0, f"{header}: exit {result['returncode']}\n{result['stderr']}"
    if not ONLY and THREADS * STEPS >= 1000:  # what ran is what the CPU test says is drawn
        counts = result["counts"]
        assert counts.get("kernel/nonblocking") and counts.get("copy_to_host/sync/pinned/unstaged")


# --- the child process (this file run as a script) --------------------------------------------

#: the kernel: exact in float32 (integers), so results compare value for value
KERNEL = """
def minus(out, a, k):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = k - a[i]
"""


def child(mode: str, threads: int, steps: int, seed: int, only: str, libraries: str, budget: float):
    import collections
    import faulthandler
    import threading
    import time
    import traceback

    faulthandler.dump_traceback_later(budget + 60, exit=True)  # the last resort
    if mode == "installed":
        import fastlaunch

        fastlaunch.install()
    import numpy as np

    if not hasattr(np, "row_stack"):  # numba-cuda 0.30 names it; NumPy 2.5 dropped it
        np.row_stack = np.vstack
    import memory_stress_model as msm
    from numba import cuda

    def emit(result: dict) -> None:
        print("RESULT " + json.dumps(result), flush=True)

    if not cuda.is_available():
        emit({"setup": "no CUDA GPU"})
        return
    from cuda.bindings import driver as drv

    namespace = {"cuda": cuda}
    exec(KERNEL, namespace)  # the kernel's module is a global of its own, as numba-cuda wants
    minus = cuda.jit(namespace["minus"])

    libs: dict = {}
    features: set[str] = set()
    notes: dict[str, str] = {}
    # warm in this thread: numba-cuda's kernels compiled, CuPy's and torch's loaded
    warm = cuda.to_device(np.arange(256, dtype=np.float32))
    minus[1, 256](warm, warm, np.float32(1))
    stream = cuda.stream()
    minus[1, 256, stream](warm, warm, np.float32(1))
    warm.bind(stream)[0:2] = np.float32(3)  # numba-cuda's assignment kernel
    stream.synchronize()
    warm[0:2] = np.float32(3)
    cuda.synchronize()
    if "cupy" in libraries:
        try:
            import cupy

            x = cupy.asarray(warm)
            cupy.subtract(1.0, x)
            cupy.subtract(1.0, x, out=x)
            cupy.cuda.Device().synchronize()
            libs["cupy"] = cupy
            features.add("cupy")
        except Exception as error:  # not installed here, or not working: left out, said so
            notes["cupy"] = f"{type(error).__name__}: {error}"
    if "torch" in libraries:
        try:
            import torch

            tensor = torch.as_tensor(warm, device="cuda")
            _ = 1.0 - tensor
            tensor.neg_().add_(1.0)
            torch.cuda.synchronize()
            libs["torch"] = torch
            features.add("torch")
            if tensor.data_ptr() == warm.device_ctypes_pointer.value:
                features.add("torch_write")
            else:
                notes["torch_write"] = "torch.as_tensor copied the array: no writes through it"
        except Exception as error:
            notes["torch"] = f"{type(error).__name__}: {error}"
    cuda.synchronize()
    del warm, stream

    class Executor:
        """One thread's arrays, host arrays and streams: runs the model's operations."""

        def __init__(self) -> None:
            context = cuda.current_context()  # current on this thread from here on
            error, current = drv.cuCtxGetCurrent()
            if error == drv.CUresult.CUDA_SUCCESS and int(current) == 0:
                drv.cuCtxSetCurrent(drv.CUcontext(int(context.handle)))
            self.slots: dict = {}
            self.hosts: dict = {}
            self.results: dict = {}
            self.keep: dict = collections.defaultdict(list)
            self.defer: list = []
            self.streams = {"blocking0#0": cuda.stream(), "blocking1#0": cuda.stream()}
            flags = drv.CUstream_flags.CU_STREAM_NON_BLOCKING.value
            error, self.nb = drv.cuStreamCreate(flags)
            assert error == drv.CUresult.CUDA_SUCCESS, error
            self.streams["nb"] = cuda.external_stream(int(self.nb))
            self.cupy = libs.get("cupy")
            self.torch = libs.get("torch")
            if self.torch is not None:
                self.ts = self.torch.cuda.Stream()
                self.streams["torch"] = cuda.external_stream(self.ts.cuda_stream)
            if self.cupy is not None:
                self.cs = self.cupy.cuda.Stream(non_blocking=True)
                self.streams["cupy"] = cuda.external_stream(self.cs.ptr)

        def execute(self, op) -> None:
            getattr(self, "op_" + op.kind)(op, **op.args)

        def actual(self, target: tuple):
            if target[0] == "host":
                return self.hosts[target[1]][: target[2]]
            value = self.results.pop(target[1])
            if isinstance(value, np.ndarray):
                return value
            if self.cupy is not None and isinstance(value, self.cupy.ndarray):
                return self.cupy.asnumpy(value)
            return value.cpu().numpy()

        def close(self) -> None:
            while self.defer:
                self.defer.pop().__exit__(None, None, None)
            cuda.synchronize()
            self.slots.clear()
            self.results.clear()
            self.keep.clear()
            self.hosts.clear()
            self.streams.clear()
            drv.cuStreamDestroy(self.nb)

        def host(self, spec):
            key, kind, capacity = spec
            if key not in self.hosts:
                if kind == "pinned":
                    self.hosts[key] = cuda.pinned_array(capacity, dtype=np.float32)
                else:
                    self.hosts[key] = np.empty(capacity, np.float32)
            return self.hosts[key]

        def given(self, stream) -> dict:
            return {} if stream is None else {"stream": self.streams[stream]}

        def op_to_device(self, op, slot, buffer, n, host, seed, stream):
            h = self.host(host)[:n]
            h[:] = op.payload
            self.slots[slot] = cuda.to_device(h, **self.given(stream))
            if stream is None:  # numba-cuda's copy is synchronous: the bytes are taken
                h[:] = np.nan

        def op_device_array(self, op, slot, buffer, n, stream):
            self.slots[slot] = cuda.device_array(n, np.float32, **self.given(stream))

        def op_copy_to_host(self, op, slot, n, dest, stream, on, sync, result):
            d = self.slots[slot]
            if dest == "new":
                self.results[result] = d.copy_to_host(**self.given(stream))
            else:
                h = self.host(dest)[:n]
                h[:] = np.nan
                d.copy_to_host(h, **self.given(stream))

        def op_copy_to_device(self, op, slot, n, host, seed, stream, on, sync):
            h = self.host(host)[:n]
            h[:] = op.payload
            self.slots[slot].copy_to_device(h, **self.given(stream))
            if sync:
                h[:] = np.nan

        def op_setitem(self, op, slot, lo, hi, on, sync, host=None, seed=None, value=None):
            d = self.slots[slot]
            if host is None:
                d[lo:hi] = np.float32(value)
                return
            h = self.host(host)[: hi - lo]
            h[:] = op.payload
            d[lo:hi] = h
            if sync:
                h[:] = np.nan

        def op_kernel(self, op, out, inp, n, k, stream):
            grid = (n + 255) // 256
            if stream is None:
                minus[grid, 256](self.slots[out], self.slots[inp], np.float32(k))
            else:
                launch = minus[grid, 256, self.streams[stream]]
                launch(self.slots[out], self.slots[inp], np.float32(k))

        def op_view(self, op, slot, of, lo, hi):
            self.slots[slot] = self.slots[of][lo:hi]

        def op_bind(self, op, slot, of, stream):
            d = self.slots[of]
            self.slots[slot] = d.bind() if stream is None else d.bind(self.streams[stream])

        def op_free(self, op, slot):
            del self.slots[slot]

        def op_sync(self, op, stream, reason):
            if stream == "all":
                cuda.synchronize()
                self.keep.clear()
            elif stream == "legacy":
                cuda.default_stream().synchronize()
            elif stream == "cupy":
                self.cs.synchronize()
                self.keep.pop("cupy", None)
            elif stream == "torch":
                self.ts.synchronize()
                self.keep.pop("torch", None)
            else:
                self.streams[stream].synchronize()

        def op_new_stream(self, op, name, old, new):
            del self.streams[old]  # arrays bound to it keep it
            self.streams[new] = cuda.stream()

        def op_defer_enter(self, op):
            block = cuda.defer_cleanup()
            block.__enter__()
            self.defer.append(block)

        def op_defer_exit(self, op):
            self.defer.pop().__exit__(None, None, None)

        def op_free_host(self, op, host):
            del self.hosts[host]

        # CuPy and torch: what they read stays referenced until their stream is synchronized
        def op_cupy_read(self, op, slot, n, k, result):
            d = self.slots[slot]
            with self.cs:
                x = self.cupy.asarray(d)
                self.results[result] = self.cupy.subtract(k, x)
            self.keep["cupy"].append((d, x))

        def op_cupy_write(self, op, slot, n, k):
            d = self.slots[slot]
            with self.cs:
                x = self.cupy.asarray(d)
                self.cupy.subtract(k, x, out=x)
            self.keep["cupy"].append((d, x))

        def op_torch_read(self, op, slot, n, k, result):
            d = self.slots[slot]
            with self.torch.cuda.stream(self.ts):
                t = self.torch.as_tensor(d, device="cuda")
                self.results[result] = k - t
            self.keep["torch"].append((d, t))

        def op_torch_write(self, op, slot, n, k):
            d = self.slots[slot]
            with self.torch.cuda.stream(self.ts):
                t = self.torch.as_tensor(d, device="cuda")
                t.neg_().add_(k)
            self.keep["torch"].append((d, t))

    ids = [int(t) for t in only.split(",")] if only != "-" else list(range(threads))
    counts = {t: collections.Counter() for t in ids}
    progress: dict = {}
    problems: dict = {}

    def worker(thread: int) -> None:
        executor = None
        try:
            executor = Executor()
            model = msm.Model(thread, seed, features)
            problem = msm.run_sequence(
                model, executor.execute, executor.actual, steps, counts[thread], progress
            )
            if problem is not None:
                problems[thread] = problem
        except BaseException:
            problems[thread] = f"thread {thread}: " + traceback.format_exc()
        finally:
            if executor is not None:
                try:
                    executor.close()
                except BaseException:
                    problems.setdefault(
                        thread, f"thread {thread} closing: {traceback.format_exc()}"
                    )
            progress[thread] = "done"

    started = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in ids]
    for t in pool:
        t.start()
    for t in pool:
        t.join(max(0.0, started + budget - time.perf_counter()))
    if any(t.is_alive() for t in pool):
        emit({"hang": {str(k): v for k, v in progress.items() if v != "done"}})
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(3)
    total: collections.Counter = collections.Counter()
    for c in counts.values():
        total += c
    emit(
        {
            "threads": len(ids),
            "features": sorted(features),
            "notes": notes,
            "problems": [problems[t] for t in sorted(problems)],
            "counts": dict(total),
            "seconds": time.perf_counter() - started,
        }
    )


if __name__ == "__main__":
    mode_, threads_, steps_, seed_, only_, libraries_, budget_ = sys.argv[1:8]
    child(mode_, int(threads_), int(steps_), int(seed_), only_, libraries_, float(budget_))
