"""IPC handles of device arrays while installed. Memory from the driver's stream-ordered pool
cannot be exported through ``cuIpcGetMemHandle``, which numba-cuda's ``get_ipc_handle`` uses
(a pool would have to be made with an export handle type, and the other process would open
it with ``cuMemPoolImportPointer``, which numba-cuda's ``open_ipc_array`` does not). So
``get_ipc_handle()`` of an array over pool memory raises numba-cuda's ``CudaAPIError``
(``CUDA_ERROR_NOT_SUPPORTED``) saying so and how to share an array; arrays over any other
memory (numba-cuda's allocator, an EMM plugin's) get numba-cuda's handle as before."""

from __future__ import annotations

from typing import Any

from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.memory import allocation
from fastlaunch.memory.originals import original

MESSAGE = (
    "get_ipc_handle(): this array's memory comes from the driver's stream-ordered pool "
    "(fastlaunch's memory API), which cuIpcGetMemHandle cannot export. Make the array to "
    "share with numba-cuda's own allocator, DeviceNDArray(shape, strides, dtype) from "
    "numba.cuda.cudadrv.devicearray, and copy into it (d.copy_to_device(a)), or run with "
    "FASTLAUNCH_MEMORY_API=0 to keep numba-cuda's memory API"
)


def get_ipc_handle(self: Any) -> Any:
    """``DeviceNDArray.get_ipc_handle``: numba-cuda's, refused for pool memory."""
    if allocation.is_pool_memory(self.gpu_data):
        not_supported = numba_cuda.cudadrv_driver().binding.CUresult.CUDA_ERROR_NOT_SUPPORTED
        raise numba_cuda.cuda_api_error(int(not_supported), MESSAGE)
    return original(numba_cuda.memory_classes().DeviceNDArray, "get_ipc_handle")(self)
