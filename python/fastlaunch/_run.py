"""``python -m fastlaunch run``: runs a program with fastlaunch installed, unedited.

As ``python -m cProfile`` does: ``run script.py [args...]`` runs the script as ``__main__``
with ``sys.argv`` set to ``[script.py, args...]`` and the script's folder first on
``sys.path``; ``run -m module [args...]`` runs a module as ``python -m module`` would.
Before the program starts, ``fastlaunch.install()`` makes ``numba.cuda.jit`` produce
fastlaunch kernels, and ``FASTLAUNCH_INSTALL=1`` is exported so that Python processes the
program starts (multiprocessing spawn workers, subprocesses) install it too, where the
fastlaunch wheel is installed (its ``fastlaunch_install.pth`` reads that variable).
"""

from __future__ import annotations

import os
import runpy
import sys

from fastlaunch import _installer as _install

USAGE = """usage: python -m fastlaunch run [--report] [--no-children] script.py [args...]
       python -m fastlaunch run [--report] [--no-children] -m module [args...]

  Runs a Python program with fastlaunch installed: numba.cuda.jit (and @cuda.jit) make
  fastlaunch kernels, in the program and in the libraries it uses.

  --report       at exit, print to stderr the kernels numba.cuda.jit made and how they
                 launched (also FASTLAUNCH_REPORT=1)
  --no-children  do not export FASTLAUNCH_INSTALL=1 to the processes the program starts"""


def run(argv: list[str]) -> int:
    """``argv``: the arguments after ``run``."""
    children = True
    while argv and argv[0].startswith("--"):
        option = argv.pop(0)
        if option == "--report":
            os.environ[_install.ENV_REPORT] = "1"
        elif option == "--no-children":
            children = False
        elif option in ("--help",):
            print(USAGE)
            return 0
        else:
            print(f"fastlaunch run: unknown option {option}\n{USAGE}", file=sys.stderr)
            return 2
    if argv[:1] == ["-h"]:
        print(USAGE)
        return 0
    module = None
    if argv[:1] == ["-m"]:
        if len(argv) < 2:
            print(f"fastlaunch run: -m needs a module name\n{USAGE}", file=sys.stderr)
            return 2
        module, args = argv[1], argv[2:]
    elif argv:
        args = argv[1:]
        script = argv[0]
    else:
        print(USAGE, file=sys.stderr)
        return 2

    if children:
        os.environ[_install.ENV_INSTALL] = "1"
    _install.install()

    if module is not None:
        sys.argv = [module, *args]  # runpy puts the module's file in argv[0]
        # sys.path[0] stays the current folder, as for python -m
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    if not os.path.exists(script):
        print(f"fastlaunch run: can't open file {script!r}", file=sys.stderr)
        return 2
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as python script.py does
    runpy.run_path(script, run_name="__main__")
    return 0
