"""numba-cuda's higher-level calls on fastlaunch's launch path, while fastlaunch is installed:
CUDA ufuncs (``vectorize(target="cuda")``) and ``cuda.reduce``.

numba-cuda works each call out afresh in Python: it inspects and converts every argument,
chooses the loop, broadcasts, allocates, asks the driver for a block size and slices. Here
that work is done once per argument types and shapes (a *plan*, remembered on the ufunc or
reduction object), and a call pays for its allocations and launches only. What a plan does
not cover goes to numba-cuda's own code, unchanged:

- ``arguments.py``: what a call's arguments are, and the key a plan is remembered by;
- ``stagers.py``: the kernels that index arrays of any dimensions and broadcast in place;
- ``vectorize.py``: a ufunc call;
- ``reduce.py``: a ``cuda.reduce`` call;
- ``install.py``: puts the calls in place of numba-cuda's, and back.
"""
