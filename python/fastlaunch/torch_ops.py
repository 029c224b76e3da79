"""fastlaunch kernels as torch operators, for ``torch.compile``.

    axpy_op = fastlaunch.torch_op(axpy, mutates=["out"])

    @torch.compile(fullgraph=True, mode="reduce-overhead")
    def step(x, y):
        out = torch.empty_like(x)
        axpy_op[blocks, 256](out, 0.5, x, y)
        return out * 0.999

Every launch goes through one operator, ``torch.ops.fastlaunch.launch``, registered the
first time ``torch_op`` is called (so importing fastlaunch never imports torch). Its schema
carries the kernel (a number ``torch_op`` assigned), the launch configuration (grid, block,
dynamic shared memory) and the arguments split by kind: tensors the kernel writes (declared
mutated, ``Tensor(a!)[]``), tensors it only reads, floats, ints and bools. Dynamo puts the
call in the graph (no graph break); its fake implementation does nothing (a kernel returns
nothing and writes only the tensors declared mutated); the CUDA implementation launches the
kernel on torch's current stream, which inside torch's CUDA graphs is the capturing one.

numba kernels cannot say which arguments they write: ``mutates`` names them (parameter names
or positions). Without ``mutates`` every tensor argument is declared mutated, which is
always correct but makes torch.compile copy inputs back and keeps its CUDA graphs away from
steps that write their inputs; declare what the kernel writes to get both.

Arguments may be torch tensors (CUDA) and Python floats, ints and bools (typed by numba as
float64, int64 and bool; pass other scalar types as one-element tensors).
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Iterable
from typing import Any

from fastlaunch.errors import KernelArgumentError

__all__ = ["TorchOp", "torch_op"]

_lock = threading.Lock()
_kernels: list[Any] = []  # by the number the operator's calls carry
_registered = False

# Codes of the operator's ``order`` list: where each argument comes from.
_MUTATED, _INPUT, _FLOAT, _INT, _BOOL = range(5)

_SCHEMA = (
    "launch(int kernel, int[] grid, int[] block, int shared_memory, Tensor(a!)[] mutated, "
    "Tensor[] inputs, float[] floats, int[] ints, int[] order) -> ()"
)


def _torch() -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        import torch  # noqa: PLC0415 - only when a torch operator is asked for
    return torch


def _launch(
    kernel: int,
    grid: list[int],
    block: list[int],
    shared_memory: int,
    mutated: list[Any],
    inputs: list[Any],
    floats: list[float],
    ints: list[int],
    order: list[int],
) -> None:
    """The operator's CUDA implementation: the arguments put back in order, then a launch
    on torch's current stream."""
    torch = _torch()
    sources = (mutated, inputs, floats, ints, ints)
    taken = [0, 0, 0, 0]
    args: list[Any] = []
    for code in order:
        slot = code if code < _BOOL else _INT
        value = sources[code][taken[slot]]
        taken[slot] += 1
        args.append(bool(value) if code == _BOOL else value)
    stream = torch.cuda.current_stream().cuda_stream
    _kernels[kernel][tuple(grid), tuple(block), stream, shared_memory](*args)


def _launch_fake(*_args: Any) -> None:
    """Tracing: the kernel returns nothing and writes only the tensors declared mutated."""
    return None


def _register() -> None:
    global _registered
    with _lock:
        if _registered:
            return
        torch = _torch()
        library = torch.library.Library("fastlaunch", "DEF")  # noqa: TOR901 - kept for the process
        library.define(_SCHEMA)
        library.impl("launch", _launch, "CUDA")
        torch.library.register_fake("fastlaunch::launch", _launch_fake, lib=library)
        _register.library = library  # type: ignore[attr-defined]  # kept alive
        _registered = True


def _dims(value: Any, what: str) -> list[int]:
    dims = list(value) if isinstance(value, (tuple, list)) else [value]
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d > 0 for d in dims):
        raise ValueError(f"{what} must be a positive int or 1 to 3 of them, not {value!r}")
    return dims + [1] * (3 - len(dims))


class TorchOp:
    """A kernel launched through ``torch.ops.fastlaunch.launch``: ``op[grid, block](*args)``
    or ``op[grid, block, shared_memory](*args)``."""

    def __init__(self, kernel: Any, mutates: Iterable[str | int] | None = None) -> None:
        if not hasattr(kernel, "py_func") or not hasattr(kernel, "__getitem__"):
            raise TypeError(
                f"torch_op() takes a fastlaunch kernel (@fastlaunch.jit), not "
                f"{type(kernel).__name__}"
            )
        names = list(inspect.signature(kernel.py_func).parameters)
        self.kernel = kernel
        self.names = names
        if mutates is None:
            self.mutates: frozenset[int] | None = None  # every tensor argument
        else:
            if isinstance(mutates, (str, int)):
                mutates = [mutates]
            positions = set()
            for m in mutates:
                if isinstance(m, str):
                    if m not in names:
                        raise ValueError(
                            f"mutates names {m!r}, which is not a parameter of "
                            f"{kernel.__name__}({', '.join(names)})"
                        )
                    positions.add(names.index(m))
                elif isinstance(m, int) and 0 <= m < len(names):
                    positions.add(m)
                else:
                    raise ValueError(
                        f"mutates takes parameter names or positions below {len(names)}, not {m!r}"
                    )
            self.mutates = frozenset(positions)
        _register()
        with _lock:
            self.number = len(_kernels)
            _kernels.append(kernel)
        torch = _torch()
        self.tensor_class = torch.Tensor
        self._operator = torch.ops.fastlaunch.launch

    def __getitem__(self, config: Any) -> _TorchLaunch:
        if not isinstance(config, tuple) or len(config) not in (2, 3):
            raise ValueError(
                "a torch operator launch is op[grid, block] or op[grid, block, shared_memory] "
                "(it runs on torch's current stream)"
            )
        shared = config[2] if len(config) == 3 else 0
        if not isinstance(shared, int) or shared < 0:
            raise ValueError(f"shared memory must be a non-negative int, not {shared!r}")
        return _TorchLaunch(self, _dims(config[0], "grid"), _dims(config[1], "block"), shared)

    def __repr__(self) -> str:
        return f"<fastlaunch.TorchOp {self.kernel.__name__} #{self.number}>"


class _TorchLaunch:
    __slots__ = ("block", "grid", "op", "shared")

    def __init__(self, op: TorchOp, grid: list[int], block: list[int], shared: int) -> None:
        self.op, self.grid, self.block, self.shared = op, grid, block, shared

    def __call__(self, *args: Any) -> None:
        op = self.op
        if len(args) != len(op.names):
            raise TypeError(
                f"{op.kernel.__name__} takes {len(op.names)} arguments, got {len(args)}"
            )
        tensor = op.tensor_class
        mutated: list[Any] = []
        inputs: list[Any] = []
        floats: list[float] = []
        ints: list[int] = []
        order: list[int] = []
        for i, a in enumerate(args):
            if isinstance(a, tensor):
                if op.mutates is None or i in op.mutates:
                    mutated.append(a)
                    order.append(_MUTATED)
                else:
                    inputs.append(a)
                    order.append(_INPUT)
            elif isinstance(a, bool):
                ints.append(int(a))
                order.append(_BOOL)
            elif isinstance(a, int):
                ints.append(a)
                order.append(_INT)
            elif isinstance(a, float):
                floats.append(a)
                order.append(_FLOAT)
            else:
                raise KernelArgumentError(
                    f"argument {i} ({op.names[i]!r}): a torch operator takes torch tensors "
                    f"and Python floats, ints and bools, not {type(a).__name__}",
                    i,
                    op.names[i],
                )
        op._operator(
            op.number, self.grid, self.block, self.shared, mutated, inputs, floats, ints, order
        )


def torch_op(kernel: Any, mutates: Iterable[str | int] | None = None) -> TorchOp:
    """``kernel`` as a torch operator, for use inside ``torch.compile``; see the module."""
    return TorchOp(kernel, mutates)
