"""What the CUDA driver allows while a stream is captured in global mode (CUDA's default, and
torch.cuda.graph's): from the capturing thread and from another, each in the global and the
relaxed thread mode, a context synchronization, an event query, another stream's flags and a
legacy-stream synchronization. Each case prints the call's result and how the capture ended
(invalidated or not): what fastlaunch's memory path may do implicitly (docs/memory.md).

Run on the GPU machine (cuda.bindings only): python3 scripts/capture_probe.py
Its run of 2026-12-07: benchmarks/results/capture-probe-2026-12-07.txt."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as drv

GLOBAL = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
RELAXED = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
NON_BLOCKING = drv.CUstream_flags.CU_STREAM_NON_BLOCKING


def check(result: Any) -> Any:
    error = result[0] if isinstance(result, tuple) else result
    if error != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(error.name)
    return result[1] if isinstance(result, tuple) and len(result) == 2 else result


def name(result: Any) -> str:
    return (result[0] if isinstance(result, tuple) else result).name


def during_capture(
    flags: int, action: Callable[[Any, Any], str], other_thread: bool, thread_mode: Any
) -> tuple[str, str]:
    """`action(captured stream, event recorded before)` while the stream is captured."""
    captured = check(drv.cuStreamCreate(flags))
    event = check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    check(drv.cuEventRecord(event, 0))
    check(drv.cuCtxSynchronize())
    check(drv.cuStreamBeginCapture(captured, GLOBAL))
    out: dict[str, str] = {}

    def run() -> None:
        check(drv.cuCtxSetCurrent(CONTEXT))
        previous = None
        if thread_mode is not None:
            previous = drv.cuThreadExchangeStreamCaptureMode(thread_mode)[1]
        out["result"] = action(captured, event)
        if previous is not None:
            drv.cuThreadExchangeStreamCaptureMode(previous)

    if other_thread:
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    else:
        run()
    error, _graph = drv.cuStreamEndCapture(captured)
    return out["result"], error.name


check(drv.cuInit(0))
CONTEXT = check(drv.cuDevicePrimaryCtxRetain(check(drv.cuDeviceGet(0))))
check(drv.cuCtxSetCurrent(CONTEXT))
OTHER = check(drv.cuStreamCreate(NON_BLOCKING))
CASES: dict[str, Callable[[Any, Any], str]] = {
    "ctx sync": lambda captured, event: name(drv.cuCtxSynchronize()),
    "event query": lambda captured, event: name(drv.cuEventQuery(event)),
    "flags of other NB stream": lambda captured, event: name(drv.cuStreamGetFlags(OTHER)),
    "legacy stream sync": lambda captured, event: name(drv.cuStreamSynchronize(0)),
}
for flags_name, flags in (("blocking", 0), ("non-blocking", NON_BLOCKING)):
    for where in ("same thread", "other thread"):
        for mode_name, mode in (("thread global", None), ("thread relaxed", RELAXED)):
            for case, action in CASES.items():
                try:
                    result, end = during_capture(flags, action, where == "other thread", mode)
                except Exception as error:
                    result, end = f"EXC {error}", "?"
                print(
                    f"PROBE {flags_name} capture global | {where} {mode_name} | {case}: "
                    f"{result} -> end {end}",
                    flush=True,
                )
