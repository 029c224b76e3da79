"""Host copies for ``check=True``: an array argument's contents copied to a NumPy array
(``_to_host``) and back (``_from_host``), through torch, CuPy or numba-cuda as the array
is one of theirs, so that the eager step and the replayed graph start from the same
inputs and their outputs can be compared bit for bit."""

from __future__ import annotations

import sys
from typing import Any


def _to_host(x: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(x, cupy.ndarray):
        return cupy.asnumpy(x)  # on CuPy's current stream, waited for
    from numba import cuda

    return cuda.as_cuda_array(x).copy_to_host()


def _from_host(x: Any, host: Any) -> None:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        with torch.no_grad():
            x.copy_(torch.from_numpy(host))
        return
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(x, cupy.ndarray):
        x.set(host)  # contiguous arrays (C or Fortran order), as for the others
        return
    from numba import cuda

    cuda.as_cuda_array(x).copy_to_device(host)
