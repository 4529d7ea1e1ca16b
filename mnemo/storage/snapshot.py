"""Index snapshots and the erasure journal: small checksummed sidecars written atomically."""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from typing import Any

import msgpack

from .codec import packb, unpackb
from .logfile import fsync_dir, sync, write_all

SNAP_MAGIC = b"MNEMOSNP"
SNAP_VERSION = 1
ERASE_MAGIC = b"MNEMOERS"


def _seal(magic: bytes, body: bytes) -> bytes:
    data = magic + body
    return data + hashlib.sha256(data).digest()


def _unseal(magic: bytes, data: bytes) -> bytes | None:
    if len(data) < len(magic) + 32 or data[: len(magic)] != magic:
        return None
    if hashlib.sha256(data[:-32]).digest() != data[-32:]:
        return None
    return data[len(magic) : -32]


def write_atomic(path: str, data: bytes, durable: bool = True) -> None:
    """Write via `path.tmp` and rename. Callers hold the writer lock, so one fixed temp name is safe,
    and a writer that opens after a crash knows which leftover to remove."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data, 0)  # retries short writes
        if durable:
            sync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path)


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def write_snapshot(path: str, body: dict[str, Any]) -> None:
    # Plain msgpack: a snapshot is sealed by its own checksum, never hashed into the chain, so its
    # maps need no canonical key order (canonicalising a million records would double the cost).
    data = msgpack.packb(body, use_bin_type=True)
    write_atomic(path, _seal(SNAP_MAGIC, struct.pack(">I", SNAP_VERSION) + data), durable=False)


def read_snapshot(path: str) -> dict[str, Any] | None:
    """The snapshot body, or None when it is missing, damaged or of another version."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    inner = _unseal(SNAP_MAGIC, data)
    if inner is None or struct.unpack(">I", inner[:4])[0] != SNAP_VERSION:
        return None
    try:
        body = unpackb(inner[4:])
    except Exception:
        return None
    return body if isinstance(body, dict) else None


def write_erase_journal(path: str, db_id: bytes, regions: list[tuple[int, int]]) -> None:
    write_atomic(path, _seal(ERASE_MAGIC, packb({"db_id": db_id, "regions": regions})))


def read_erase_journal(path: str, db_id: bytes | None = None) -> list[tuple[int, int]] | None:
    """Regions of an interrupted erasure; None if there is no journal. A damaged journal, or one of
    another database (when db_id is given), is empty."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    inner = _unseal(ERASE_MAGIC, data)
    if inner is None:
        return []
    try:
        body = unpackb(inner)
        if db_id is not None and body["db_id"] != db_id:
            return []
        return [(int(o), int(n)) for o, n in body["regions"]]
    except Exception:
        return []
