"""What compiles and links a kernel, as part of every key: the versions of Python, numba,
numba-cuda, llvmlite, NumPy, cuda-core, cuda-bindings and fastlaunch (with the cache's format),
and the NVVM and nvJitLink libraries themselves (their API versions and the GNU build id of the
very files loaded: two builds of a library never share one), and libdevice by its bytes.

Read once per process (``common()``). What only some kernels use is asked for by those only
(``requirement``): NVRTC (CUDA C++ linked in: ``link=`` ``.cu`` files, numba-cuda's own
helpers) and libcudadevrt (cooperative kernels), recorded in their entries and checked on
load."""

from __future__ import annotations

import functools
import hashlib
import platform
import struct
import sys
from typing import Any

from fastlaunch import _numba_compat as numba_cuda

#: the layout of what the cache stores; a change makes every older entry a miss
FORMAT = 1


def _build_id(path: str) -> str:
    """The GNU build id of an ELF file (``.note.gnu.build-id``), read from its program
    headers without reading the file; or, lacking one, a digest of its bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only
                raise ValueError
            endian = "<" if head[5] == 1 else ">"
            phoff = struct.unpack_from(endian + "Q", head, 32)[0]
            phentsize, phnum = struct.unpack_from(endian + "HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(
                    endian + "IIQQQQ", table, i * phentsize
                )
                if p_type != 4:  # PT_NOTE
                    continue
                f.seek(p_offset)
                notes = f.read(p_filesz)
                at = 0
                while at + 12 <= len(notes):
                    namesz, descsz, kind = struct.unpack_from(endian + "III", notes, at)
                    name_at = at + 12
                    desc_at = name_at + ((namesz + 3) & ~3)
                    if kind == 3 and notes[name_at : name_at + namesz].rstrip(b"\0") == b"GNU":
                        return "build-id:" + notes[desc_at : desc_at + descsz].hex()
                    at = desc_at + ((descsz + 3) & ~3)
    except (OSError, ValueError, struct.error):
        pass
    return "bytes:" + file_digest(path)


@functools.cache
def file_digest(path: str) -> str:
    """A file's bytes, digested (once per process and path)."""
    h = hashlib.blake2b(digest_size=32)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError as e:
        return f"unreadable:{type(e).__name__}"
    return h.hexdigest()


@functools.cache
def common() -> tuple[tuple[str, str], ...]:
    """What every key holds of the toolchain (one process reads it once)."""
    import fastlaunch

    parts: list[tuple[str, str]] = [
        ("cache-format", str(FORMAT)),
        ("fastlaunch", fastlaunch.__version__),
        ("python", f"{sys.implementation.cache_tag} {sys.version}"),
        ("machine", platform.machine()),
    ]
    parts += numba_cuda.library_versions()
    nvvm_path, nvvm_version = numba_cuda.nvvm_library()
    parts.append(("nvvm", f"{nvvm_version} {_build_id(nvvm_path) if nvvm_path else 'unknown'}"))
    libdevice = numba_cuda.libdevice_path()
    parts.append(("libdevice", file_digest(libdevice) if libdevice else "unknown"))
    linker_path, linker_version = numba_cuda.linker_library()
    parts.append(
        ("nvjitlink", f"{linker_version} {_build_id(linker_path) if linker_path else 'none'}")
    )
    return tuple(parts)


@functools.cache
def requirement(name: str) -> str:
    """The identity of a part only some kernels link: ``nvrtc`` or ``cudadevrt``."""
    if name == "nvrtc":
        path, version = numba_cuda.nvrtc_library()
        return f"{version} {_build_id(path) if path else 'unknown'} {numba_cuda.include_paths()}"
    if name == "cudadevrt":
        path = numba_cuda.cudadevrt_path()
        return file_digest(path) if path else "unknown"
    raise ValueError(name)


def describe() -> list[tuple[str, Any]]:
    """``common()`` for ``python -m fastlaunch cache``."""
    return list(common())
