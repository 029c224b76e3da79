"""Host cost per kernel launch: fastlaunch against numba-cuda and the other launchers.

Method (docs/benchmarks.md). Each pytest-benchmark round is one batch of 256 back-to-back
launches, timed with ``time.perf_counter`` by ``benchmark.pedantic(batch, setup=sync,
rounds=N, iterations=1)``: the context synchronize runs in ``setup``, untimed, before every
round, so the queue never holds more than 256 launches and a round measures the host's cost,
not the GPU draining the queue. **Per-launch µs = round time / 256** (pytest-benchmark's own
table shows seconds per round; ``extra_info`` and ``run.py``'s report show µs per launch).
Each benchmark is warmed up first (compilation, first-call loading, one untimed batch) with
the launch callable bound to a local. Rounds: as many as fit in about one second, at least
50 and at most 200 (``FASTLAUNCH_BENCH_MIN_ROUNDS`` / ``_MAX_ROUNDS`` override).

Cases (arrays are 128-element float32; C's are 16×8, C order):

- A: no arguments; B: one ``float32[::1]``; C: three 2-D arrays + int, float, int, float;
  D: 26 ``float32[::1]`` (numba-cuda's ``test_many_args``); E16 / E256: float32 scalars.
- F: B and D in lazy-dispatch mode (``@jit``) and explicit-signature mode (``@jit(sig)``);
  the other cases use dispatch mode. Sources: numba device arrays, CuPy, torch.
- Spelling and arrays (recorded as ``spelling`` and ``arrays``): ``inline`` launches write
  ``kernel[1, 1](*args)`` on every call, as users and numba-cuda's docs do; ``reused``
  launches configure once (``cfg = kernel[1, 1]``) and call ``cfg(*args)``. ``fresh``
  arrays are each their own allocation; ``views`` are slices of one buffer. The headline is
  ``inline`` + ``views``: what a user gets.
- Launch shape ``[1, 1]``, except numba-cuda's own 12 ``test_kernel_launch`` cases
  (``test_one_arg`` / ``test_many_args`` × dispatch / signature × device_array / torch /
  cupy), reproduced with their kernels, arrays and ``[128, 128]`` for both numba-cuda and
  fastlaunch (timed with the batching above rather than one launch per round).

Peers, in the same process, each with the closest equivalent of the case:

- ``cuda.core.launch`` and raw ``cuda.bindings`` ``cuLaunchKernel``: empty PTX kernels with
  numba's parameter layout (an array is 7 or 9 8-byte values), values given as Python ints
  and floats (cuda.core packs them every call) or packed once (cuda.bindings);
- ``cuda.core.launch`` as its users write it for torch and CuPy arrays: an empty kernel
  taking one pointer per array, the pointers read on every call (``t.data_ptr()``,
  ``c.data.ptr``);
- CuPy ``RawKernel``: an empty ``extern "C" __global__`` kernel with the case's arguments in
  their natural C types (``float*`` per array);
- a torch eager op on the case's tensors (B: ``x.add_(1)``; C: ``torch.add(a, b, alpha=2,
  out=c)``; D: ``torch._foreach_add_`` over the 26 tensors, one fused launch);
- Triton: an empty ``@triton.jit`` kernel taking the same tensors and scalars, grid (1,)
  (Triton's own block of ``num_warps`` warps).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from benchmarks.harness import (
    CASES,
    POINTER_READS,
    PackedParams,
    cuda_core_by_hand,
    cupy_scalars,
    cupy_source,
    empty_kernel_ptx,
    make_inline_batch,
    make_statement_batch,
    numba_layout_values,
    numba_ptx_types,
    ptx_target,
    py_kernel,
    run_benchmark,
)

FASTLAUNCH = pytest.param("fastlaunch", marks=pytest.mark.fastlaunch, id="fastlaunch")
IMPLS = [FASTLAUNCH, pytest.param("numba", id="numba")]
SOURCES = ["numba", "cupy", "torch"]
MODES = ["dispatch", "signature"]


def _jit_matrix() -> list[tuple[str, str, str, str, str]]:
    """(case, source, mode, spelling, arrays): every spelling and kind of array in dispatch
    mode, the headline (inline, views) in signature mode."""
    variants = [(sp, ar) for sp in ("inline", "reused") for ar in ("fresh", "views")]
    rows = [("A", "none", "dispatch", sp, "fresh") for sp in ("inline", "reused")]
    for case in ("B", "C", "D"):
        rows += [(case, so, "dispatch", sp, ar) for so in SOURCES for sp, ar in variants]
    for case in ("B", "D"):
        rows += [(case, so, "signature", "inline", "views") for so in SOURCES]
    rows += [
        (e, "none", "dispatch", sp, "fresh") for e in ("E16", "E256") for sp in ("inline", "reused")
    ]
    return rows


JIT_MATRIX = [pytest.param(*row, id="-".join(row)) for row in _jit_matrix()]


@functools.cache
def jitted(impl: str, kernel_name: str, signature: str | None) -> Any:
    """The kernel compiled lazily by fastlaunch or numba-cuda (cached per test session)."""
    func = py_kernel(kernel_name)
    if impl == "fastlaunch":
        import fastlaunch

        jit = fastlaunch.jit
    else:
        from numba import cuda

        jit = cuda.jit
    return jit(func) if signature is None else jit(signature)(func)


def _data_pointer(array: Any) -> int:
    return int(array.__cuda_array_interface__["data"][0])


# ------------------------------------------------------------ fastlaunch and numba-cuda


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("case_id", "source", "mode", "spelling", "arrays"), JIT_MATRIX)
def test_jit(benchmark, sync, make_arrays, impl, case_id, source, mode, spelling, arrays):
    if impl == "numba" and spelling == "reused" and case_id not in ("A", "E16", "E256"):
        pytest.skip("numba-cuda caches configurations: measured inline only")
    case = CASES[case_id]
    signature = case.numba_signature() if mode == "signature" else None
    kernel = jitted(impl, f"empty_{case_id.lower()}", signature)
    args = (*make_arrays(source, case.n_arrays, case.shape, arrays), *case.scalars())
    run_benchmark(
        benchmark,
        kernel[1, 1],
        args,
        sync,
        batch=make_inline_batch(kernel, (1, 1), args) if spelling == "inline" else None,
        case=case_id,
        path=impl,
        source=source,
        mode=mode,
        spelling=spelling,
        arrays=arrays,
        grid=1,
        block=1,
    )


# --------------------------------------------------------------------------- peers

RAW_CASES = list(CASES)


def _load_ptx_function(cu: Any, case_id: str) -> tuple[Any, Any]:
    """(module, CUfunction) of the case's empty numba-layout kernel, via cuda.bindings."""
    from numba import cuda

    cuda.current_context()
    major, minor = cuda.get_current_device().compute_capability
    entry = f"empty_{case_id.lower()}"
    ptx = empty_kernel_ptx(entry, numba_ptx_types(CASES[case_id]), ptx_target((major, minor)))
    err, module = cu.cuModuleLoadData(ptx.encode() + b"\0")
    assert err == cu.CUresult.CUDA_SUCCESS, f"cuModuleLoadData: {err}"
    err, function = cu.cuModuleGetFunction(module, entry.encode())
    assert err == cu.CUresult.CUDA_SUCCESS, f"cuModuleGetFunction: {err}"
    return module, function


@pytest.mark.parametrize("case_id", RAW_CASES)
def test_cuda_core(benchmark, sync, make_arrays, cuda_core, case_id):
    from cuda.core import Device, LaunchConfig, ObjectCode, launch

    case = CASES[case_id]
    device = Device(0)
    device.set_current()
    entry = f"empty_{case_id.lower()}"
    cc = tuple(device.compute_capability)
    ptx = empty_kernel_ptx(entry, numba_ptx_types(case), ptx_target((cc[0], cc[1])))
    kernel = ObjectCode.from_ptx(ptx.encode(), name=entry).get_kernel(entry)
    arrays = make_arrays("numba", case.n_arrays, case.shape)
    values = numba_layout_values(case, [_data_pointer(a) for a in arrays])
    stream = getattr(cuda_core, "LEGACY_DEFAULT_STREAM", None) or device.default_stream
    config = LaunchConfig(grid=1, block=1)
    run_benchmark(
        benchmark,
        launch,
        (stream, config, kernel, *values),
        sync,
        case=case_id,
        path="cuda.core",
        source="raw",
        mode="ints packed per call",
        grid=1,
        block=1,
    )


@pytest.mark.parametrize("arrays", ["fresh", "views"])
@pytest.mark.parametrize("source", list(POINTER_READS))
@pytest.mark.parametrize("case_id", ["B", "C", "D"])
def test_cuda_core_by_hand(benchmark, sync, make_arrays, cuda_core, case_id, source, arrays):
    """What a cuda.core user writes for torch or CuPy arrays: a kernel taking one pointer per
    array, launched with ``launch(s, cfg, k, t0.data_ptr(), ..., scalars)``."""
    case = CASES[case_id]
    tensors = make_arrays(source, case.n_arrays, case.shape, arrays)
    statement, names = cuda_core_by_hand(case, source, tensors)
    batch = make_statement_batch(statement, names)
    run_benchmark(
        benchmark,
        lambda: batch(),
        (),
        sync,
        batch=batch,
        case=case_id,
        path="cuda.core",
        source=source,
        mode=f"{POINTER_READS[source].format('x')} per call",
        spelling="inline",
        arrays=arrays,
        grid=1,
        block=1,
    )


@pytest.mark.parametrize("case_id", RAW_CASES)
def test_cuda_bindings(benchmark, sync, make_arrays, cuda_driver, case_id):
    cu = cuda_driver
    case = CASES[case_id]
    module, function = _load_ptx_function(cu, case_id)
    arrays = make_arrays("numba", case.n_arrays, case.shape)
    values = numba_layout_values(case, [_data_pointer(a) for a in arrays])
    packed = PackedParams(values, numba_ptx_types(case))
    args = (function, 1, 1, 1, 1, 1, 1, 0, cu.CUstream(0), packed.address, 0)
    (err,) = cu.cuLaunchKernel(*args)
    assert err == cu.CUresult.CUDA_SUCCESS, f"cuLaunchKernel: {err}"
    run_benchmark(
        benchmark,
        cu.cuLaunchKernel,
        args,
        sync,
        case=case_id,
        path="cuda.bindings",
        source="raw",
        mode="packed once",
        grid=1,
        block=1,
    )
    del packed, module  # kept alive until here


@pytest.mark.parametrize("arrays", ["fresh", "views"])
@pytest.mark.parametrize("case_id", RAW_CASES)
def test_cupy_rawkernel(benchmark, sync, make_arrays, cupy, case_id, arrays):
    case = CASES[case_id]
    if arrays == "views" and not case.n_arrays:
        pytest.skip("no arrays")
    entry = f"empty_{case_id.lower()}"
    kernel = cupy.RawKernel(cupy_source(entry, case), entry)
    kernel.compile()
    made = make_arrays("cupy", case.n_arrays, case.shape, arrays)
    run_benchmark(
        benchmark,
        kernel,
        ((1,), (1,), (*made, *cupy_scalars(case))),
        sync,
        case=case_id,
        path="cupy.RawKernel",
        source="cupy",
        mode="C types",
        spelling="inline",
        arrays=arrays,
        grid=1,
        block=1,
    )


def _torch_op(torch: Any, case_id: str, tensors: list) -> tuple[Any, tuple, str]:
    if case_id == "B":
        return tensors[0].add_, (1,), "x.add_(1)"
    if case_id == "C":
        a, b, c = tensors
        op = functools.partial(torch.add, a, b, alpha=2.0, out=c)
        return op, (), "torch.add(a, b, alpha=2, out=c)"
    return torch._foreach_add_, (tensors, 1.0), "torch._foreach_add_(26 tensors, 1.0)"


@pytest.mark.parametrize("case_id", ["B", "C", "D"])
def test_torch_op(benchmark, sync, make_arrays, torch, case_id):
    case = CASES[case_id]
    tensors = make_arrays("torch", case.n_arrays, case.shape)
    launch, args, description = _torch_op(torch, case_id, tensors)
    run_benchmark(
        benchmark,
        launch,
        args,
        sync,
        case=case_id,
        path="torch op",
        source="torch",
        mode=description,
        grid=0,
        block=0,
    )


@pytest.mark.parametrize("case_id", ["B", "C", "D", "E16"])
def test_triton(benchmark, sync, make_arrays, triton, case_id):
    case = CASES[case_id]
    kernel = triton.jit(py_kernel(f"empty_{case_id.lower()}"))
    tensors = make_arrays("torch", case.n_arrays, case.shape)
    run_benchmark(
        benchmark,
        kernel[(1,)],
        (*tensors, *case.scalar_values),
        sync,
        case=case_id,
        path="triton",
        source="torch",
        mode="dispatch",
        grid=1,
        block=0,
    )


# ------------------------------------------------ numba-cuda's own test_kernel_launch

SUITE_SOURCES = {"device_array": "numba", "torch": "torch", "cupy": "cupy"}
SUITE_SIGNATURES = {
    "one_arg": "void(float32[::1])",
    "many_args": "void(" + ", ".join(["float32[::1]"] * 26) + ")",
}
SUITE_MATRIX = [
    pytest.param(impl, jit, array, marks=marks, id=f"{impl}-{jit}-{array}")
    for impl, marks in [("numba", ()), ("fastlaunch", pytest.mark.fastlaunch)]
    for jit in MODES
    for array in SUITE_SOURCES
]


def _suite(benchmark, sync, make_arrays, name, n_arrays, impl, jit, array_func):
    signature = SUITE_SIGNATURES[name] if jit == "signature" else None
    kernel = jitted(impl, name, signature)
    arrays = make_arrays(SUITE_SOURCES[array_func], n_arrays, (128,))
    run_benchmark(
        benchmark,
        kernel[128, 128],
        arrays,
        sync,
        case=name,
        path=impl,
        source=SUITE_SOURCES[array_func],
        mode=jit,
        grid=128,
        block=128,
    )


@pytest.mark.parametrize(("impl", "jit", "array_func"), SUITE_MATRIX)
def test_one_arg(benchmark, sync, make_arrays, impl, jit, array_func):
    _suite(benchmark, sync, make_arrays, "one_arg", 1, impl, jit, array_func)


@pytest.mark.parametrize(("impl", "jit", "array_func"), SUITE_MATRIX)
def test_many_args(benchmark, sync, make_arrays, impl, jit, array_func):
    _suite(benchmark, sync, make_arrays, "many_args", 26, impl, jit, array_func)


# ------------------------------------------------- pre-bound launches and CUDA graphs

BOUND_CASES = ["A", "B", "C", "D"]


@pytest.mark.fastlaunch
@pytest.mark.parametrize("case_id", BOUND_CASES)
def test_bound(benchmark, sync, make_arrays, case_id):
    """``kernel[1, 1].bind(*args)``: packed once, each call only submits."""
    case = CASES[case_id]
    kernel = jitted("fastlaunch", f"empty_{case_id.lower()}", None)
    source = "numba" if case.n_arrays else "none"
    arrays = make_arrays(source, case.n_arrays, case.shape)
    bound = kernel[1, 1].bind(*arrays, *case.scalars())
    run_benchmark(
        benchmark,
        bound,
        (),
        sync,
        case=case_id,
        path="fastlaunch.bind",
        source=source,
        mode="bound",
        grid=1,
        block=1,
    )


@pytest.mark.fastlaunch
@pytest.mark.parametrize("kernels", [1, 8, 64])
def test_graph_replay(benchmark, sync, kernels):
    """``g.replay()`` of a graph of ``kernels`` case-A launches; reported per kernel."""
    import fastlaunch

    kernel = jitted("fastlaunch", "empty_a", None)
    launcher = kernel[1, 1]
    launcher()  # compiled and loaded before capture
    sync()
    graph = fastlaunch.graph()
    with graph:
        for _ in range(kernels):
            launcher()
    assert len(graph.launches) == kernels
    replay = graph.replay
    run_benchmark(
        benchmark,
        replay,
        (),
        sync,
        case="A",
        path="fastlaunch.graph",
        source="none",
        mode=f"graph of {kernels}",
        kernels=kernels,
        grid=1,
        block=1,
    )
