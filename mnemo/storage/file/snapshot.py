"""Index snapshots and the erasure journal: small checksummed sidecars written atomically."""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
import struct
from typing import Any

import msgpack

from ...chain.codec import unpackb
from .atomic import write_atomic

SNAP_MAGIC = b"MNEMOSNP"
SNAP_VERSION = 3
ERASE_MAGIC = b"MNEMOERS"
_BLOB = 1  # msgpack ext type: a raw section after the header, as (offset, length)
_BLOB_REF = struct.Struct(">QQ")
_INLINE_MAX = 1 << 16  # byte strings at least this long become raw sections
_PREFIX = struct.Struct(">IQ")  # after the magic (version 3): the version and the main part's length
DEFERRED_KEYS = ("text",)
"""Keys of the index's state written in parts of their own after the main part (version 3): an open
reads the main part only, and each of these when it is first wanted (index_snapshot.DeferredPart)."""


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


def remove(path: str) -> bool:
    """Remove the file at `path` if there is one; whether there was."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _pack(body: dict[str, Any]) -> bytearray:
    """header length u32 | msgpack header | raw sections: large byte strings in the body's maps (the
    index columns) go after the header, referenced by offset, so that reading them back copies them
    once."""
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
    out = bytearray(struct.pack(">I", len(header)))
    out += header
    for blob in blobs:
        out += blob
    return out


def _unpack(packed: memoryview) -> dict[str, Any] | None:
    """_pack's body, its raw sections as memoryviews into `packed`; None when it does not decode."""
    if len(packed) < 4:
        return None
    (header_len,) = struct.unpack(">I", packed[:4])
    if 4 + header_len > len(packed):
        return None
    blobs = packed[4 + header_len :]

    def section(code: int, ref: bytes) -> memoryview:
        offset, length = _BLOB_REF.unpack(ref)
        if code != _BLOB or offset + length > len(blobs):
            raise ValueError("snapshot section out of range")
        return blobs[offset : offset + length]

    try:
        body = msgpack.unpackb(packed[4 : 4 + header_len], raw=False, strict_map_key=False, ext_hook=section)
    except Exception:
        return None
    return body if isinstance(body, dict) else None


def encode_snapshot(body: dict[str, Any]) -> bytes:
    """Seal a snapshot body (version 3): magic | version u32 | main part length u64 | the main part (the
    body, each of its index's DEFERRED_KEYS replaced by a reference to its own part, and the SHA-256 of
    the file up to there) | the deferred parts, each sealed by its own SHA-256, which the main part's
    reference names too."""
    index = body.get("index")
    parts = bytearray()
    if isinstance(index, dict):
        index = dict(index)
        for key in DEFERRED_KEYS:
            if isinstance(index.get(key), dict) and "part" not in index[key]:
                part = _pack({key: index[key]})
                digest = hashlib.sha256(part).digest()
                index[key] = {"part": [len(parts), len(part) + 32, digest]}
                parts += part + digest
        body = {**body, "index": index}
    main = _pack(body)
    out = bytearray(SNAP_MAGIC)
    out += _PREFIX.pack(SNAP_VERSION, len(main) + 32)
    out += main
    out += hashlib.sha256(out).digest()
    out += parts
    return bytes(out)


def _main_end(prefix: bytes) -> int | None:
    """Where a version 3 snapshot's main part ends, from its first bytes; None for another version."""
    if len(prefix) < len(SNAP_MAGIC) + _PREFIX.size or prefix[: len(SNAP_MAGIC)] != SNAP_MAGIC:
        return None
    version, main_len = _PREFIX.unpack_from(prefix, len(SNAP_MAGIC))
    return len(SNAP_MAGIC) + _PREFIX.size + main_len if version == SNAP_VERSION else None


def _decode_main(data: bytes) -> dict[str, Any] | None:
    """The main part's body of a version 3 snapshot (`data` from its start to at least the main part's
    end), or, for a version 2 snapshot (the whole file), its body; None when damaged."""
    end = _main_end(data[: len(SNAP_MAGIC) + _PREFIX.size])
    if end is None:
        return _decode_v2(data)
    view = memoryview(data)
    if len(view) < end or end < len(SNAP_MAGIC) + _PREFIX.size + 32:
        return None
    if not hmac.compare_digest(hashlib.sha256(view[: end - 32]).digest(), view[end - 32 : end]):
        return None
    return _unpack(view[len(SNAP_MAGIC) + _PREFIX.size : end - 32])


def _decode_v2(data: bytes) -> dict[str, Any] | None:
    """Version 2: magic | version u32 (2) | header length u32 | header | raw sections | SHA-256."""
    inner = _unseal(SNAP_MAGIC, data)
    if inner is None or len(inner) < 8 or struct.unpack(">I", inner[:4])[0] != 2:
        return None
    return _unpack(inner[4:])


def decode_part(ref: Any, data: bytes | memoryview, key: str) -> Any:
    """The state of the deferred `key` from its part's bytes `data`, as the main part's reference `ref`
    names it; ValueError when it is not that part or does not decode."""
    _offset, length, digest = ref
    view = memoryview(data)
    if len(view) != length or length < 32 or not isinstance(digest, bytes):
        raise ValueError(f"the snapshot's {key} part is cut short")
    if not (hmac.compare_digest(hashlib.sha256(view[:-32]).digest(), view[-32:])
            and hmac.compare_digest(bytes(view[-32:]), digest)):
        raise ValueError(f"the snapshot's {key} part does not match its checksum")
    body = _unpack(view[:-32])
    if body is None or set(body) != {key}:
        raise ValueError(f"the snapshot's {key} part does not decode")
    return body[key]


def part_refs(body: dict[str, Any]) -> dict[str, Any]:
    """The deferred parts a main part's body refers to: key -> (offset after the main part, length,
    SHA-256)."""
    index = body.get("index")
    if not isinstance(index, dict):
        return {}
    return {key: index[key]["part"] for key in DEFERRED_KEYS
            if isinstance(index.get(key), dict) and "part" in index[key]}


def decode_snapshot(data: bytes) -> dict[str, Any] | None:
    """The whole body of a sealed snapshot, its deferred parts read back into its index, or None when
    any of it is damaged or of another version. Raw sections come back as memoryviews into `data`."""
    body = _decode_main(data)
    if body is None:
        return None
    end = _main_end(data[: len(SNAP_MAGIC) + _PREFIX.size])
    try:
        for key, ref in part_refs(body).items():
            assert end is not None  # (a version 2 body refers to no part)
            offset, length = int(ref[0]), int(ref[1])
            body["index"][key] = decode_part(ref, memoryview(data)[end + offset : end + offset + length], key)
    except (ValueError, TypeError, IndexError):
        return None
    return body


def write_snapshot(path: str, body: dict[str, Any], mode: int | None = None) -> None:
    write_atomic(path, encode_snapshot(body), durable=False, mode=mode)


def _open_regular(path: str) -> int | None:
    """A descriptor of the sidecar at `path`, or None if it is missing or not a regular file (never
    blocking on a FIFO: the open is non-blocking, and what was opened is checked)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        return None
    return fd


def _read_all(fd: int, size: int, offset: int = 0) -> bytes:
    """`size` bytes at `offset` (fewer at the end of the file)."""
    chunks: list[bytes] = []
    while size > 0:
        chunk = os.pread(fd, min(size, 1 << 30), offset)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _read_regular(path: str) -> bytes | None:
    """The bytes of a sidecar, or None if it is missing or not a regular file."""
    fd = _open_regular(path)
    if fd is None:
        return None
    try:
        return _read_all(fd, os.fstat(fd).st_size)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_snapshot(path: str) -> dict[str, Any] | None:
    """The whole snapshot body, or None when it is missing, damaged, not a regular file or of another
    version."""
    data = _read_regular(path)
    return None if data is None else decode_snapshot(data)


def open_snapshot(path: str) -> tuple[dict[str, Any], int | None, int] | None:
    """The main part's body of the snapshot at `path` (for a version 2 snapshot, the whole body), with,
    when it refers to deferred parts, a descriptor of the file to read them from and where the main part
    ends (the caller closes the descriptor); None when it is missing, damaged, not a regular file or of
    another version. Only the main part is read."""
    fd = _open_regular(path)
    if fd is None:
        return None
    keep = False
    try:
        head = _read_all(fd, len(SNAP_MAGIC) + _PREFIX.size)
        end = _main_end(head)
        data = _read_all(fd, os.fstat(fd).st_size) if end is None else _read_all(fd, end)
        body = _decode_main(data)
        if body is None:
            return None
        keep = end is not None and bool(part_refs(body))
        return body, (fd if keep else None), (end or 0)
    except OSError:
        return None
    finally:
        if not keep:
            os.close(fd)


def read_part(fd: int, end: int, ref: Any, key: str) -> Any:
    """The deferred `key`'s state, read from the snapshot open as `fd` whose main part ends at `end`
    (ValueError, TypeError or OSError when it cannot be)."""
    offset, length = int(ref[0]), int(ref[1])
    return decode_part(ref, _read_all(fd, length, end + offset), key)


def read_erase_journal(path: str, db_id: bytes | None = None) -> list[tuple[int, int]] | None:
    """Regions of an interrupted erasure, from the journal an earlier version wrote (Mnemo's erasure
    writes none now: docs/FORMAT.md §4); None if there is no journal. A damaged journal, or one of
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
