"""Index snapshots and the erasure journal: small checksummed sidecars written atomically."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import stat
import struct
from typing import Any

import msgpack

from ...chain.codec import packb, unpackb
from .atomic import write_atomic

SNAP_MAGIC = b"MNEMOSNP"
SNAP_VERSION = 2
ERASE_MAGIC = b"MNEMOERS"
_BLOB = 1  # msgpack ext type: a raw section after the header, as (offset, length)
_BLOB_REF = struct.Struct(">QQ")
_INLINE_MAX = 1 << 16  # byte strings at least this long become raw sections


def _seal(magic: bytes, body: bytes) -> bytes:
    data = magic + body
    return data + hashlib.sha256(data).digest()


def _unseal(magic: bytes, data: bytes) -> memoryview | None:
    # Views, not slices: a snapshot can be a hundred megabytes, and each slice would copy it.
    view = memoryview(data)
    if len(data) < len(magic) + 32 or view[: len(magic)] != magic:
        return None
    if not hmac.compare_digest(hashlib.sha256(view[:-32]).digest(), view[-32:]):
        return None
    return view[len(magic) : -32]


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def encode_snapshot(body: dict[str, Any]) -> bytes:
    """Seal a snapshot body. Large byte strings in its maps (the index columns) go after the msgpack
    header as raw sections, referenced by offset, so that reading them back copies them once."""
    blobs: list[bytes | bytearray | memoryview] = []
    size = 0

    def lift(obj: Any) -> Any:
        nonlocal size
        if isinstance(obj, dict):
            return {k: lift(v) for k, v in obj.items()}
        if isinstance(obj, (bytes, bytearray, memoryview)) and len(obj) >= _INLINE_MAX:
            ref = msgpack.ExtType(_BLOB, _BLOB_REF.pack(size, len(obj)))
            blobs.append(obj)
            size += len(obj)
            return ref
        return obj

    # Plain msgpack: a snapshot is sealed by its own checksum, never hashed into the chain, so its
    # maps need no canonical key order (canonicalising a million records would double the cost).
    header = msgpack.packb(lift(body), use_bin_type=True)
    out = bytearray(SNAP_MAGIC)
    out += struct.pack(">II", SNAP_VERSION, len(header))
    out += header
    for blob in blobs:
        out += blob
    out += hashlib.sha256(out).digest()
    return bytes(out)


def decode_snapshot(data: bytes) -> dict[str, Any] | None:
    """The body of a sealed snapshot, or None when it is damaged or of another version. Raw sections
    come back as memoryviews into `data`."""
    inner = _unseal(SNAP_MAGIC, data)
    if inner is None or len(inner) < 8:
        return None
    version, header_len = struct.unpack(">II", inner[:8])
    if version != SNAP_VERSION or 8 + header_len > len(inner):
        return None
    blobs = inner[8 + header_len :]

    def section(code: int, ref: bytes) -> memoryview:
        offset, length = _BLOB_REF.unpack(ref)
        if code != _BLOB or offset + length > len(blobs):
            raise ValueError("snapshot section out of range")
        return blobs[offset : offset + length]

    try:
        body = msgpack.unpackb(inner[8 : 8 + header_len], raw=False, strict_map_key=False, ext_hook=section)
    except Exception:
        return None
    return body if isinstance(body, dict) else None


def write_snapshot(path: str, body: dict[str, Any], mode: int | None = None) -> None:
    write_atomic(path, encode_snapshot(body), durable=False, mode=mode)


def _read_regular(path: str) -> bytes | None:
    """The bytes of a sidecar, or None if it is missing or not a regular file (never blocking on a FIFO:
    the open is non-blocking, and what was opened is checked)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def read_snapshot(path: str) -> dict[str, Any] | None:
    """The snapshot body, or None when it is missing, damaged, not a regular file or of another version."""
    data = _read_regular(path)
    return None if data is None else decode_snapshot(data)


def write_erase_journal(path: str, db_id: bytes, regions: list[tuple[int, int]]) -> None:
    write_atomic(path, _seal(ERASE_MAGIC, packb({"db_id": db_id, "regions": regions})))


def read_erase_journal(path: str, db_id: bytes | None = None) -> list[tuple[int, int]] | None:
    """Regions of an interrupted erasure; None if there is no journal. A damaged journal, or one of
    another database (when db_id is given), is empty."""
    if not os.path.lexists(path):
        return None
    data = _read_regular(path)
    if data is None:
        return []  # there, but unreadable or not a regular file: read as a damaged journal is
    inner = _unseal(ERASE_MAGIC, data)
    if inner is None:
        return []
    try:
        body = unpackb(bytes(inner))
        if db_id is not None and body["db_id"] != db_id:
            return []
        return [(int(o), int(n)) for o, n in body["regions"]]
    except Exception:
        return []
