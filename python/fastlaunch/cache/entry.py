"""One cache entry's bytes: what rebuilds a compiled kernel without numba's typing pass.

Layout (no pickle: nothing in a cache file is ever run)::

    b"FLKCACHE"  u16 format  u16 0  32-byte key  u32 header length
    header: UTF-8 JSON (flags, options, link inputs, requirements, blob table)
    blobs: the linked cubin, the LLVM IR and PTX texts, the linker's log
    32-byte BLAKE2b of everything before it

``decode`` refuses (raises ``ValueError``) a file of another format, another key, a wrong
length or a wrong checksum: a truncated, corrupt or foreign file is a miss, never a crash and
never a wrong kernel."""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

MAGIC = b"FLKCACHE"
_HEAD = struct.Struct("<8sHH32sI")
_SUM = 32


def encode(format_: int, key: str, header: dict, blobs: list[tuple[str, bytes]]) -> bytes:
    table = []
    at = 0
    for name, data in blobs:
        table.append([name, at, len(data)])
        at += len(data)
    header = {**header, "blobs": table}
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    body = b"".join(
        [_HEAD.pack(MAGIC, format_, 0, bytes.fromhex(key), len(text)), text]
        + [data for _, data in blobs]
    )
    return body + hashlib.blake2b(body, digest_size=_SUM).digest()


def decode(format_: int, key: str, data: bytes) -> tuple[dict, dict[str, list[bytes]]]:
    """The header and the blobs (by name, in order) of an entry for ``key``."""
    if len(data) < _HEAD.size + _SUM:
        raise ValueError("truncated")
    magic, version, _, stored_key, length = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("not a fastlaunch cache entry")
    if version != format_:
        raise ValueError(f"format {version}, not {format_}")
    if stored_key != bytes.fromhex(key):
        raise ValueError("another key's entry")
    body, checksum = data[:-_SUM], data[-_SUM:]
    if hashlib.blake2b(body, digest_size=_SUM).digest() != checksum:
        raise ValueError("checksum mismatch")
    start = _HEAD.size
    header: dict[str, Any] = json.loads(body[start : start + length])
    blobs_at = start + length
    blobs: dict[str, list[bytes]] = {}
    for name, at, size in header["blobs"]:
        begin = blobs_at + at
        if begin + size > len(body):
            raise ValueError("truncated blob")
        blobs.setdefault(name, []).append(body[begin : begin + size])
    return header, blobs
