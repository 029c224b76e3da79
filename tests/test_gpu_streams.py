"""Streams and ordering on the GPU: a slow producer on one stream, a fastlaunch consumer
on another; the consumer reads the finished data and the host never blocks."""

from __future__ import annotations

import time

import numpy as np
import pytest
from arrays import to_host
from numba import cuda

import fastlaunch as fl
from fastlaunch import _core

pytestmark = pytest.mark.gpu

N = 1 << 16
SLEEP_ROUNDS = 200  # each thread sleeps ~200 x 100 us: the producer runs ~20 ms


@cuda.jit
def slow_fill(out, value, rounds):
    i = cuda.grid(1)
    for _ in range(rounds):
        cuda.nanosleep(100_000)
    if i < out.size:
        out[i] = value


@fl.jit
def copy(out, a):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = a[i]


def _warm_up(out, produced):
    """Compiles `copy` for these argument types before anything is timed."""
    copy[N // 256, 256](out, produced)
    fl.synchronize()


def _consume(out, produced, stream):
    start = time.perf_counter()
    copy[N // 256, 256, stream](out, produced)
    return time.perf_counter() - start


def _check(out, consumer, launch_seconds):
    consumer.synchronize()
    np.testing.assert_array_equal(to_host(out), np.full(N, 7, np.float32))
    # The producer still runs for ~20 ms when the consumer is submitted: the launch call
    # must return long before (it ordered on the GPU, it did not wait on the host).
    assert launch_seconds < 0.005, f"the launch blocked the host for {launch_seconds * 1e3:.1f} ms"


def test_torch_producer_stream():
    torch = pytest.importorskip("torch")
    produced = torch.zeros(N, dtype=torch.float32, device="cuda")
    out = cuda.to_device(np.zeros(N, np.float32))
    consumer = fl.stream(non_blocking=True)
    producer = torch.cuda.Stream()
    _warm_up(out, produced)
    with torch.cuda.stream(producer):
        slow_fill[N // 256, 256, cuda.external_stream(producer.cuda_stream)](
            produced, 7.0, SLEEP_ROUNDS
        )
        seconds = _consume(out, produced, consumer)
    _check(out, consumer, seconds)


def test_cupy_producer_stream():
    cupy = pytest.importorskip("cupy")
    produced = cupy.zeros(N, dtype=cupy.float32)
    out = cuda.to_device(np.zeros(N, np.float32))
    consumer = fl.stream(non_blocking=True)
    _warm_up(out, produced)
    with cupy.cuda.Stream(non_blocking=True) as producer:
        slow_fill[N // 256, 256, cuda.external_stream(producer.ptr)](produced, 7.0, SLEEP_ROUNDS)
        seconds = _consume(out, produced, consumer)
    _check(out, consumer, seconds)


class _Interface:
    """A CUDA Array Interface v3 view naming its producer stream."""

    def __init__(self, array, stream_handle):
        cai = dict(array.__cuda_array_interface__)
        cai["stream"] = stream_handle
        self.__cuda_array_interface__ = cai


def test_numba_producer_stream_through_the_array_interface():
    producer = cuda.stream()
    produced = cuda.to_device(np.zeros(N, np.float32))
    out = cuda.to_device(np.zeros(N, np.float32))
    consumer = fl.stream(non_blocking=True)
    # the handle as the launch path reads it (numba-cuda 0.26's `handle` is not an int)
    view = _Interface(produced, _core.stream_handle(producer))
    _warm_up(out, view)
    slow_fill[N // 256, 256, producer](produced, 7.0, SLEEP_ROUNDS)
    seconds = _consume(out, view, consumer)
    _check(out, consumer, seconds)


def test_follow_policy_launches_on_torchs_current_stream():
    torch = pytest.importorskip("torch")
    produced = torch.zeros(N, dtype=torch.float32, device="cuda")
    out = torch.zeros(N, dtype=torch.float32, device="cuda")
    producer = torch.cuda.Stream()
    copy[N // 256, 256](out, produced)
    torch.cuda.synchronize()
    fl.set_default_stream_policy("follow")
    try:
        with torch.cuda.stream(producer):
            slow_fill[N // 256, 256, cuda.external_stream(producer.cuda_stream)](
                produced, 7.0, SLEEP_ROUNDS
            )
            copy[N // 256, 256](out, produced)  # no stream given: torch's current one
            assert not producer.query()  # still running: the launch went behind it
        producer.synchronize()
    finally:
        fl.set_default_stream_policy("legacy")
    assert (out == 7).all()


_KEEP: list = []  # owners of streams passed by raw handle: a handle must outlive its launches


def _cuda_core_stream():
    from cuda.core import Device

    device = Device()
    device.set_current()
    return device.create_stream()


@pytest.mark.parametrize(
    "make",
    [
        lambda: 0,
        lambda: None,
        lambda: fl.stream(),
        lambda: fl.default_stream(),
        lambda: fl.legacy_default_stream(),
        lambda: fl.per_thread_default_stream(),
        lambda: fl.external_stream(_KEEP.append(fl.stream(non_blocking=True)) or _KEEP[-1].handle),
        lambda: cuda.stream(),
        lambda: cuda.default_stream(),
        lambda: __import__("torch").cuda.Stream(),
        lambda: __import__("cupy").cuda.Stream(),
        lambda: _cuda_core_stream(),
        lambda: _KEEP.append(fl.stream()) or _KEEP[-1].handle,
    ],
    ids=[
        "zero",
        "none",
        "fastlaunch",
        "default",
        "legacy",
        "per-thread",
        "external",
        "numba",
        "numba-default",
        "torch",
        "cupy",
        "cuda.core",
        "raw-int",
    ],
)
def test_every_stream_kind_launches(make):
    try:
        stream = make()
    except ImportError:
        pytest.skip("library missing")
    a = cuda.to_device(np.arange(256, dtype=np.float32))
    out = cuda.to_device(np.zeros(256, np.float32))
    copy[1, 256, stream](out, a)
    fl.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(256, dtype=np.float32))


def test_events_time_a_kernel():
    stream = fl.stream()
    start, end = fl.event(), fl.event()
    out = cuda.to_device(np.zeros(N, np.float32))
    start.record(stream)
    slow_fill[N // 256, 256, cuda.external_stream(stream.handle)](out, 1.0, 20)
    end.record(stream)
    end.synchronize()
    assert end.query() and stream.query()
    assert start.elapsed_time(end) > 1.0  # 20 x 100 us of sleeping, at least


def test_event_wait_orders_two_streams():
    first, second = fl.stream(non_blocking=True), fl.stream(non_blocking=True)
    produced = cuda.to_device(np.zeros(N, np.float32))
    out = cuda.to_device(np.zeros(N, np.float32))
    slow_fill[N // 256, 256, cuda.external_stream(first.handle)](produced, 7.0, SLEEP_ROUNDS)
    done = fl.event(timing=False)
    done.record(first)
    done.wait(second)
    copy[N // 256, 256, second](out, produced)
    second.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 7, np.float32))


def test_stream_arguments_are_checked():
    with pytest.raises(TypeError, match="__cuda_stream__"):
        copy[1, 1, "not a stream"]
    with pytest.raises(ValueError, match="negative"):
        copy[1, 1, -5]


def test_launches_are_captured_into_framework_graphs():
    torch = pytest.importorskip("torch")
    x = torch.arange(256, dtype=torch.float32, device="cuda")
    out = torch.zeros(256, dtype=torch.float32, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        copy[1, 256, side](out, x)  # compile and warm up outside the capture
    side.synchronize()
    out.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        stream = torch.cuda.current_stream()
        copy[1, 256, stream](out, x)
    torch.cuda.synchronize()
    assert (out == 0).all()  # captured, not run
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x)
