"""fastlaunch in torch programs, without a GPU: importing never imports torch or CuPy; the
capture-following switch the torch and CuPy hooks turn; ``torch_op``'s checks, and Dynamo
tracing a kernel as ``torch.ops.fastlaunch.launch`` with no graph break (meta tensors)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fastlaunch as fl
from fastlaunch import _core


def test_importing_fastlaunch_imports_neither_torch_nor_cupy():
    code = "import sys, fastlaunch; print('torch' in sys.modules, 'cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_followed_captures_nest_and_refuse_the_legacy_stream():
    assert _core.followed_capture() is None
    _core.follow_capture(0x1000)
    _core.follow_capture(0x2000)
    assert _core.followed_capture() == 0x2000
    assert _core.end_followed_capture()
    assert _core.followed_capture() == 0x1000
    assert _core.end_followed_capture()
    assert _core.followed_capture() is None
    assert not _core.end_followed_capture()
    for legacy in (0, 1):
        with pytest.raises(ValueError, match="legacy default stream"):
            _core.follow_capture(legacy)


def test_the_torch_hook_follows_a_capture_and_ends_even_when_it_fails():
    from fastlaunch import _capture_hooks

    class Cuda:
        @staticmethod
        def current_stream():
            return type("S", (), {"cuda_stream": 0x3000})()

    class CUDAGraph:
        def capture_begin(self):
            pass

        def capture_end(self):
            raise RuntimeError("operation failed during capture")

    Cuda.CUDAGraph = CUDAGraph
    torch = type("torch", (), {"cuda": Cuda})
    assert _capture_hooks.hook_torch(torch) and _capture_hooks.hook_torch(torch)
    g = CUDAGraph()
    g.capture_begin()
    assert _core.followed_capture() == 0x3000
    with pytest.raises(RuntimeError, match="during capture"):
        g.capture_end()
    assert _core.followed_capture() is None


@fl.jit
def axpy(out, a, x, y):
    pass


def test_torch_op_checks_its_declarations():
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="'result', which is not a parameter of axpy"):
        fl.torch_op(axpy, mutates=["result"])
    with pytest.raises(ValueError, match="positions below 4"):
        fl.torch_op(axpy, mutates=[7])
    with pytest.raises(TypeError, match="takes a fastlaunch kernel"):
        fl.torch_op(print)
    op = fl.torch_op(axpy, mutates="out")
    with pytest.raises(ValueError, match=r"op\[grid, block\]"):
        op[1]
    with pytest.raises(ValueError, match="grid must be a positive int"):
        op[0, 32]


def test_torch_op_refuses_other_arguments_by_name():
    torch = pytest.importorskip("torch")
    op = fl.torch_op(axpy, mutates=["out"])
    x = torch.empty(8, device="meta")
    with pytest.raises(fl.KernelArgumentError, match=r"argument 1 \('a'\).*not str"):
        op[1, 32](x, "half", x, x)
    with pytest.raises(TypeError, match="takes 4 arguments, got 3"):
        op[1, 32](x, 0.5, x)


def test_dynamo_traces_a_kernel_as_one_operator_without_graph_breaks():
    torch = pytest.importorskip("torch")
    op = fl.torch_op(axpy, mutates=["out"])

    def step(x, y):
        out = torch.empty_like(x)
        op[(2,), (32, 1)](out, 0.5, x, y)
        return out * 0.999

    x, y = torch.empty(64, device="meta"), torch.empty(64, device="meta")
    explained = torch._dynamo.explain(step)(x, y)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    code = explained.graphs[0].code
    assert "torch.ops.fastlaunch.launch" in code and "[2, 1, 1], [32, 1, 1], 0" in code
    assert torch.compile(step, fullgraph=True, backend="eager")(x, y).shape == (64,)
    schema = str(torch.ops.fastlaunch.launch.default._schema)
    assert "Tensor(a!)[] mutated" in schema and "Tensor[] inputs" in schema
