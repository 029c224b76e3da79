"""The memory API stress's generator and model (``tests/memory_stress_model.py``) without a
GPU. The sequences ``tests/test_gpu_memory_stress.py`` runs are run here on ``LazyDevice``, a
NumPy stand-in of the device that keeps every piece of asynchronous work queued per stream and
runs it as late as CUDA's ordering allows (or early, at random, when its dependencies have
run): where the model synchronizes too little, such a device shows the stale bytes. As
numba-cuda (synchronous copies complete when they return), as fastlaunch means to be (copies up
to a staging slot return before they run; its launches and copies on non-blocking streams and
the array interface wait for that work), and as two broken variants the checks must catch."""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from memory_stress_model import (
    FEATURES,
    SIZES,
    Model,
    Op,
    category,
    ordered,
    run_sequence,
    tag,
)

#: small arrays for the stand-in (the same shape of sizes: below, at and above a slot)
SLOT = 1024
SMALL_SIZES = (1, 3, 64, 256, 1024, 1025, 1536, 3072)


@dataclass
class Work:
    stream: str
    run: Any
    deps: list[Work]
    done: bool = False


@dataclass
class LazyDevice:
    """One thread's device, CPU-side. ``mode``: ``numba`` (numba-cuda's semantics),
    ``fastlaunch`` (copies up to ``slot`` elements with no stream return before they run, on
    the legacy stream; launches and copies on non-blocking streams wait for pending legacy
    work; ``__cuda_array_interface__`` waits for it on the host), ``fastlaunch_f4`` (the same,
    but the interface waits only for arrays bound to no stream: the second review's F4), and
    ``early_copy_back`` (numba-cuda, but a synchronous copy back above a slot returns before it
    ran). ``eager``: the chance that a piece of work whose dependencies have run runs after an
    operation, before anything waits for it."""

    mode: str = "numba"
    seed: int = 0
    eager: float = 0.0
    slot: int = SLOT
    buffers: dict = field(default_factory=dict)
    slots: dict = field(default_factory=dict)
    hosts: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    queued: list[Work] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.fastlaunch = self.mode in ("fastlaunch", "fastlaunch_f4")

    # the device's queues
    def enqueue(self, stream: str, run: Any, after_legacy: bool = False) -> Work:
        deps = [w for w in self.queued if ordered(w.stream, stream)]
        if after_legacy:  # fastlaunch's cuStreamWaitEvent on the legacy stream's work
            deps += [w for w in self.queued if w.stream == "legacy" and w not in deps]
        work = Work(stream, run, deps)
        self.queued.append(work)
        return work

    def on(self, stream: str, run: Any) -> Work:
        """Work the memory API or a launch enqueues on ``stream``."""
        waits = self.fastlaunch and category(stream) == "nonblocking"
        return self.enqueue(stream, run, after_legacy=waits)

    def finish(self, targets: list[Work]) -> None:
        """Runs ``targets`` and everything they depend on, in the order it was queued."""
        need, stack = set(), list(targets)
        while stack:
            w = stack.pop()
            if id(w) not in need and not w.done:
                need.add(id(w))
                stack.extend(w.deps)
        for w in self.queued:
            if id(w) in need:
                w.run()
                w.done = True
        self.queued = [w for w in self.queued if not w.done]

    def wait(self, stream: str) -> None:
        self.finish([w for w in self.queued if stream == "all" or w.stream == stream])

    def progress(self) -> None:
        for w in list(self.queued):
            if not w.done and all(d.done for d in w.deps) and self.rng.random() < self.eager:
                self.finish([w])

    # the executor's interface
    def execute(self, op: Op) -> None:
        getattr(self, "op_" + op.kind)(op, **op.args)
        self.progress()

    def actual(self, target: tuple) -> np.ndarray:
        if target[0] == "host":
            return self.hosts[target[1]][: target[2]].copy()
        return self.results.pop(target[1])

    def host(self, spec: tuple) -> np.ndarray:
        if spec[0] not in self.hosts:
            self.hosts[spec[0]] = np.full(spec[2], np.nan, np.float32)
        return self.hosts[spec[0]]

    def cai_wait(self, bound: str | None) -> None:
        if self.mode == "fastlaunch" or (self.mode == "fastlaunch_f4" and bound is None):
            self.wait("legacy")

    # the operations
    def op_to_device(self, op, slot, buffer, n, host, seed, stream):
        h = self.host(host)[:n]
        h[:] = op.payload
        memory = np.full(n, np.nan, np.float32)
        self.slots[slot] = (memory, 0, n, stream)
        if stream is not None:
            self.on(stream, lambda: memory.__setitem__(slice(None), h))
            return
        if self.fastlaunch and n <= self.slot:  # staged: the bytes taken, the copy queued
            staged = h.copy()
            self.enqueue("legacy", lambda: memory.__setitem__(slice(None), staged))
        else:
            self.finish([self.enqueue("legacy", lambda: memory.__setitem__(slice(None), h))])
        h[:] = np.nan  # the executor's scribble

    def op_device_array(self, op, slot, buffer, n, stream):
        self.slots[slot] = (np.full(n, np.nan, np.float32), 0, n, stream)

    def op_copy_to_host(self, op, slot, n, dest, stream, on, sync, result):
        memory, lo, n, _ = self.slots[slot]
        target = np.empty(n, np.float32) if dest == "new" else self.host(dest)[:n]
        target[:] = np.nan
        if dest == "new":
            self.results[result] = target
        work = self.on(on, lambda: target.__setitem__(slice(None), memory[lo : lo + n]))
        if sync and not (self.mode == "early_copy_back" and n > self.slot):
            self.finish([work])

    def op_copy_to_device(self, op, slot, n, host, seed, stream, on, sync):
        memory, lo, n, _ = self.slots[slot]
        h = self.host(host)[:n]
        h[:] = op.payload
        if sync and self.fastlaunch and n <= self.slot:
            staged = h.copy()
            self.enqueue("legacy", lambda: memory.__setitem__(slice(lo, lo + n), staged))
        elif sync:
            work = self.enqueue("legacy", lambda: memory.__setitem__(slice(lo, lo + n), h))
            self.finish([work])
        else:
            self.on(on, lambda: memory.__setitem__(slice(lo, lo + n), h))
        if sync:
            h[:] = np.nan

    def op_setitem(self, op, slot, lo, hi, on, sync, host=None, seed=None, value=None):
        memory, base, _, _ = self.slots[slot]
        where = slice(base + lo, base + hi)
        if host is not None:
            source = self.host(host)[: hi - lo]
            source[:] = op.payload
        else:
            source = np.float32(value)
        if sync and host is not None and self.fastlaunch:
            staged = source.copy()
            self.enqueue("legacy", lambda: memory.__setitem__(where, staged))
        else:
            self.on(on, lambda: memory.__setitem__(where, source))
        if sync:  # numba-cuda synchronizes the default stream
            self.wait("legacy")
            if host is not None:
                source[:] = np.nan

    def op_kernel(self, op, out, inp, n, k, stream):
        o, olo, _, _ = self.slots[out]
        i, ilo, _, _ = self.slots[inp]

        def run():
            o[olo : olo + n] = np.float32(k) - i[ilo : ilo + n]

        self.on(stream or "legacy", run)

    def op_view(self, op, slot, of, lo, hi):
        memory, base, _, stream = self.slots[of]
        self.slots[slot] = (memory, base + lo, hi - lo, stream)

    def op_bind(self, op, slot, of, stream):
        memory, base, n, _ = self.slots[of]
        self.slots[slot] = (memory, base, n, stream)

    def op_free(self, op, slot):
        del self.slots[slot]

    def op_sync(self, op, stream, reason):
        self.wait(stream)

    def op_new_stream(self, op, name, old, new):
        pass

    def op_defer_enter(self, op):
        pass

    def op_defer_exit(self, op):
        pass

    def op_free_host(self, op, host):
        self.hosts.pop(host, None)

    def _library(self, library, slot, n, k, result=None):
        memory, lo, n, bound = self.slots[slot]
        if library == "cupy" and bound is not None:
            self.wait(bound)  # CuPy synchronizes the stream the interface exports
        self.cai_wait(bound)
        if result is None:

            def run():
                memory[lo : lo + n] = np.float32(k) - memory[lo : lo + n]

        else:
            out = self.results[result] = np.full(n, np.nan, np.float32)

            def run():
                out[:] = np.float32(k) - memory[lo : lo + n]

        self.enqueue(library, run)

    def op_cupy_read(self, op, slot, n, k, result):
        self._library("cupy", slot, n, k, result)

    def op_torch_read(self, op, slot, n, k, result):
        self._library("torch", slot, n, k, result)

    def op_cupy_write(self, op, slot, n, k):
        self._library("cupy", slot, n, k)

    def op_torch_write(self, op, slot, n, k):
        self._library("torch", slot, n, k)


def simulate(
    mode: str,
    seed: int,
    threads: int = 3,
    steps: int = 300,
    eager: float = 0.0,
    required_syncs: bool = True,
    features=FEATURES,
) -> list[str]:
    problems = []
    for thread in range(threads):
        model = Model(
            thread,
            seed,
            features,
            sizes=SMALL_SIZES,
            slot_elements=SLOT,
            max_bytes=24 * SLOT * 4,
            required_syncs=required_syncs,
        )
        device = LazyDevice(mode, seed * 1000 + thread, eager)
        problem = run_sequence(model, device.execute, device.actual, steps)
        if problem is not None:
            problems.append(problem)
    return problems


@pytest.mark.parametrize("eager", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("mode", ["numba", "fastlaunch"])
def test_the_model_agrees_with_a_device_that_runs_work_as_late_as_cuda_allows(mode, eager):
    problems = [p for seed in range(3) for p in simulate(mode, seed, eager=eager)]
    assert not problems, "\n\n".join(problems)


def test_the_model_agrees_without_cupy_and_torch():
    problems = [p for seed in range(2) for p in simulate("numba", seed, features=frozenset())]
    assert not problems, "\n\n".join(problems)


def test_without_the_synchronizations_a_user_must_make_the_device_disagrees():
    """The model's ``required`` syncs are needed: leave them out and the lazy device shows
    stale bytes (so the GPU run, which makes only those, can see work that is late)."""
    problems = [p for seed in range(3) for p in simulate("numba", seed, required_syncs=False)]
    assert problems
    assert all("first differing index" in p for p in problems), problems


def test_a_copy_back_returning_before_its_bytes_is_caught():
    problems = simulate("early_copy_back", 0)
    assert problems
    assert "copy_to_host(" in problems[0] and "first differing index" in problems[0]
    assert problems[0].startswith("thread ")


class Scripted(Model):
    """A model that runs the given operations instead of drawing them."""

    def __init__(self, script: list[Op]) -> None:
        super().__init__(0, 0, sizes=SMALL_SIZES, slot_elements=SLOT)
        self.script = script

    def ops(self, steps: int):
        yield from self.script


def test_an_interface_that_does_not_wait_for_a_bound_arrays_copy_is_caught():
    """F4 of the second review: ``to_device`` staged on the legacy stream, then ``bind`` to a
    stream; the interface exports that stream and skips the wait, a consumer reads too soon.
    A scripted sequence, then the random ones (which find it in 2 of 72 thread sequences)."""
    script = [
        Op("to_device", {"slot": 1, "buffer": 2, "n": 8, "host": (3, "pageable", 16)}),
        Op("bind", {"slot": 4, "of": 1, "stream": "nb"}),
        Op("torch_read", {"slot": 4, "n": 8, "k": 1.0, "result": 5}),
        Op("sync", {"stream": "torch", "reason": "required"}),
    ]
    script[0].args.update(seed=7, stream=None)
    for mode, caught in (("fastlaunch", False), ("fastlaunch_f4", True)):
        device = LazyDevice(mode)
        problem = run_sequence(Scripted(script), device.execute, device.actual, 0)
        assert (problem is not None) == caught, problem
    assert "step 4 sync(stream='torch'" in problem and "torch_read(slot=4" in problem
    assert "first differing index 0 of 8" in problem
    problems = [p for seed in range(12) for p in simulate("fastlaunch_f4", seed, threads=6)]
    assert problems
    assert all("_read(" in p and "first differing index" in p for p in problems), problems


def test_the_sequences_repeat_for_a_seed_and_cover_the_memory_api():
    """The GPU test's own parameters (its sizes, 6 threads of 300 steps): the same operations
    for the same seed, and among them every kind of operation, copies synchronous and not,
    pageable, pinned and new, staged and not, kernels on every kind of stream."""

    def draw(seed: int, thread: int) -> tuple[list[str], collections.Counter]:
        model = Model(thread, seed, FEATURES)
        ops, counts = [], collections.Counter()
        for op in model.ops(300):
            model.apply(op)
            ops.append(op.describe())
            counts[tag(op)] += 1
        return ops, counts

    first, counts = draw(0, 0)
    assert draw(0, 0)[0] == first
    assert draw(1, 0)[0] != first and draw(0, 1)[0] != first
    for thread in range(1, 6):
        counts += draw(0, thread)[1]
    kinds = {t.split("/")[0] for t in counts}
    assert kinds >= {
        "to_device",
        "device_array",
        "copy_to_host",
        "copy_to_device",
        "view",
        "setitem",
        "kernel",
        "bind",
        "free",
        "defer_enter",
        "defer_exit",
        "new_stream",
        "free_host",
        "cupy_read",
        "cupy_write",
        "torch_read",
        "torch_write",
    }, sorted(counts)
    for size in ("staged", "unstaged"):
        for host in ("pageable", "pinned"):
            assert counts[f"to_device/sync/{host}/{size}"], (host, size)
            assert counts[f"copy_to_device/sync/{host}/{size}"], (host, size)
            assert counts[f"copy_to_host/sync/{host}/{size}"], (host, size)
            for stream in ("blocking", "nonblocking"):
                assert counts[f"copy_to_host/async-{stream}/{host}/{size}"], (host, size, stream)
        assert counts[f"copy_to_host/sync/new/{size}"]
        assert counts[f"setitem/sync/host/{size}"] + counts[f"setitem/async/host/{size}"]
    assert counts["setitem/sync/host/staged"] and counts["setitem/async/host/staged"]
    for stream in ("legacy", "blocking", "nonblocking"):
        assert counts[f"kernel/{stream}"] >= 20
    assert counts["sync/required"] and counts["sync/random"]
    assert max(SIZES) * 4 > 1 << 20 > min(SIZES) * 4
