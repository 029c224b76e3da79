"""The miss path's contract, Rust's side (``_core._KernelHooks._on_miss``): on a miss Rust
calls ``_on_miss`` once and registers what it returns, ``(param_types, target)``. With numba
parameter types, Rust builds the packing plan from them and asks ``target(packed)`` for what
to launch; with ``None``, ``target`` is numba-cuda's launch. Run against the stand-in driver
with a ``_core.Kernel`` whose ``_on_miss`` returns fixed answers (numba-cuda cannot compile
without a GPU); ``fastlaunch.Kernel._on_miss`` is tested on a GPU."""

from __future__ import annotations

import textwrap

MISS = textwrap.dedent(
    """
    import fastlaunch as fl
    from fastlaunch import _core
    from numba.cuda import types

    assert fl.is_available(), _core.unavailable_reason()

    class Raw(_core.Kernel):
        def __init__(self, param_types, make_target):
            self.param_types = param_types
            self.make_target = make_target
            self.descriptors = []
            self.asked = []
            self.launched = []

        def _on_miss(self, args, fingerprint, descriptors, compute_capability, configuration):
            self.descriptors.append(descriptors)
            if self.make_target is None:
                return self.param_types  # not a pair
            if self.param_types is None:
                return None, self.launch
            return self.param_types, self.target

        def target(self, packed):
            self.asked.append(packed)
            return self.make_target(self)

        def launch(self, args, griddim, blockdim, stream, sharedmem):
            self.launched.append((args, griddim, blockdim))

    def image(kernel):
        return _core.CompiledKernel(b"image", "entry")

    def python(kernel):
        return kernel.launch

    def run(kernel, *args):
        for _ in range(3):
            kernel[2, 32](*args)
        print(kernel.miss_count, kernel.overload_count, kernel.asked, len(kernel.launched))

    # packed: the plan built from the types, target(True) gives the loaded image
    packed = Raw((types.float64, types.UniTuple(types.int32, 2)), image)
    run(packed, 2.0, (1, 2))
    print(packed.descriptors)
    # a parameter type fastlaunch does not pack: target(False), numba-cuda's launch
    run(Raw((types.CPointer(types.float32), types.int64), python), 2.0, 1)
    # a tuple holding one: the same
    run(Raw((types.Tuple((types.int64, types.voidptr)),), python), (1, 2))
    # None: numba-cuda launches, target is its launch (never asked)
    none = Raw(None, image)
    run(none, 2.0)
    print(none.launched[0])
    # packed, and the target a callable (debug kernels): kept with the plan
    run(Raw((types.float32,), python), 1.5)
    # refused: types that do not fit the arguments, before any target is made
    for param_types, make_target in [
        ((types.float32[:],), image),
        ((types.float32, types.float32), image),
        ((types.CPointer(types.float32),), image),
        ((types.float32,), lambda kernel: 42),
        ("not a pair", None),
    ]:
        kernel = Raw(param_types, make_target)
        try:
            kernel[1, 1](2.0)
        except (TypeError, ValueError) as e:
            print(type(e).__name__, e, kernel.asked, kernel.overload_count)
    """
)


def test_rust_registers_what_on_miss_returns(run_on_stand_in):
    lines = run_on_stand_in(MISS)
    assert lines == [
        "1 1 [True] 0",
        "[[('scalar', 'float64'), ('tuple', [('scalar', 'int64'), ('scalar', 'int64')])]]",
        "1 1 [False] 3",
        "1 1 [False] 3",
        "1 1 [] 3",
        "((2.0,), (2, 1, 1), (32, 1, 1))",
        "1 1 [True] 3",
        "ValueError plan entry 0 (Array { ndim: 1 }) does not fit the argument's kind [] 0",
        "ValueError plan has 2 parameters, the arguments a different number [] 0",
        "ValueError a CompiledKernel target needs a packing plan [False] 0",
        "TypeError an overload's target must be a CompiledKernel or a callable [True] 0",
        "TypeError _on_miss must return a pair (param_types, target) [] 0",
    ]
