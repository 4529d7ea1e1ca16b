"""The hashed chain encoding (docs/FORMAT.md §1): canonical msgpack entries, payloads and their digests.

Every byte this module produces is part of the contract; tests/chain/test_vectors.py pins it. Where the
C extension mnemo._writepath is built, packing, a put's payload and digest and an entry's bytes and hash
are made by it (mnemo/_writepath.c), byte for byte what the pure-Python code here makes (its twin, which
packs whatever the extension leaves to it: tests/chain/test_writepath.py).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, NamedTuple

import msgpack

from .._native import writepath as _native
from ..validation import Limits, canonical_metadata, check_content, check_metadata_size, check_tags, file_path

FORMAT_VERSION = 1
ZERO_HASH = b"\x00" * 32
SALT_SIZE = 16  # a put payload is salt + packed fields
CHECKPOINT_DOMAIN = b"mnemo-checkpoint/v1"

OPS = ("genesis", "put", "forget", "grant", "revoke", "checkpoint")


def canonical(value: Any) -> Any:
    """Return value with every map's keys sorted, recursively, so equal data packs to equal bytes."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


# msgpack.packb builds a Packer per call, which costs more than packing a small entry: every write
# packs through this one instead. A Packer is not thread-safe, hence the lock (held only while packing).
_packer = msgpack.Packer(use_bin_type=True)
_packer_lock = threading.Lock()


def _pack(value: Any) -> bytes:
    """msgpack.packb(value, use_bin_type=True), byte for byte: by the extension, or by msgpack for a
    value the extension leaves to it (a type other than the plain ones, a subclass, an invalid str)."""
    if _native is not None:
        try:
            packed: bytes = _native.pack(value)
            return packed
        except Exception:  # left to the twin, which packs it or says what is wrong
            pass
    return pure_pack(value)


def pure_pack(value: Any) -> bytes:
    """_pack's pure-Python twin: msgpack's Packer, shared, under its lock."""
    with _packer_lock:
        packed: bytes = _packer.pack(value)
    return packed


def packb(value: Any) -> bytes:
    return _pack(canonical(value))


def pack_canonical(value: Any) -> bytes:
    """packb of a value already in canonical form (as validation returns it): no second pass."""
    return _pack(value)


def unpackb(data: bytes | memoryview) -> Any:
    # strict_map_key=False: metadata may be any JSON-compatible map, but keys are always str in practice.
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


class Entry(NamedTuple):
    """One decoded chain entry plus the exact bytes that were hashed. (A NamedTuple: replay builds
    one per entry, and tuples are several times cheaper to create than frozen dataclasses.)"""

    seq: int
    ts_ns: int
    prev: bytes
    op: str
    agent: str
    body: dict[str, Any]
    raw: bytes
    hash: bytes


# A NamedTuple made by tuple.__new__ straight from its fields: the class's own __new__ is Python code, which
# costs as much again as the entry's packing and hash (every write makes one).
new_tuple: Any = tuple.__new__


def make_entry(
    seq: int, ts_ns: int, prev: bytes, op: str, agent: str, body: dict[str, Any], trusted: bool = False
) -> Entry:
    """Build an entry. `trusted` skips canonicalising a body whose maps are built in sorted key order."""
    if not trusted:
        body = canonical(body)
    if _native is not None:
        try:
            raw, digest = _native.entry(seq, ts_ns, prev, op, agent, body)
            entry: Entry = new_tuple(Entry, (seq, ts_ns, prev, op, agent, body, raw, digest))
            return entry
        except Exception:  # left to the twin, as _pack leaves a value
            pass
    raw = pure_pack([FORMAT_VERSION, seq, ts_ns, prev, op, agent, body])
    return Entry(seq, ts_ns, prev, op, agent, body, raw, hashlib.sha256(raw).digest())


class EntryDecodeError(ValueError):
    pass


def decode_entry(raw: bytes) -> Entry:
    """Decode hashed entry bytes; raises EntryDecodeError if they are not a well-formed v1 entry."""
    try:
        arr = unpackb(raw)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise EntryDecodeError(f"entry is not valid msgpack: {exc}") from None
    if not isinstance(arr, list) or len(arr) != 7:
        raise EntryDecodeError("entry is not an array of 7 items")
    version, seq, ts_ns, prev, op, agent, body = arr
    if version != FORMAT_VERSION:
        raise EntryDecodeError(f"unknown entry format version {version!r}")
    if not (isinstance(seq, int) and seq >= 0 and isinstance(ts_ns, int)):
        raise EntryDecodeError("entry seq or timestamp is not an integer")
    if not (isinstance(prev, bytes) and len(prev) == 32):
        raise EntryDecodeError("entry prev is not 32 bytes")
    if op not in OPS or not isinstance(agent, str) or not isinstance(body, dict):
        raise EntryDecodeError(f"entry op {op!r}, agent or body has the wrong type")
    return Entry(seq, ts_ns, prev, op, agent, body, raw, hashlib.sha256(raw).digest())


# -- payloads: what a person may ask to erase lives here, outside the hashed bytes ------------------


def pack_record_fields(content: str | bytes, tags: Any, metadata: dict[str, Any]) -> bytes:
    """The `packed` bytes a put's digest commits to: msgpack([content, sorted tags, sorted metadata])."""
    return pack_canonical_fields(content, sorted(tags), canonical(metadata) if metadata else {})


def pack_canonical_fields(content: str | bytes, sorted_tags: Any, canonical_metadata: dict[str, Any]) -> bytes:
    """pack_record_fields of fields already in canonical form (tags sorted and distinct, metadata as
    validation returns it), without sorting again. A tuple packs exactly as a list."""
    return _pack([content, sorted_tags, canonical_metadata])


def seal_fields(
    salt: bytes, content: str | bytes, sorted_tags: Any, canonical_metadata: dict[str, Any]
) -> tuple[bytes, bytes]:
    """(digest, payload) of a put of fields in canonical form: seal_put_payload(salt,
    pack_canonical_fields(content, sorted_tags, canonical_metadata)), in one call of the extension
    where it is built."""
    if _native is not None:
        try:
            sealed: tuple[bytes, bytes] = _native.seal_put(salt, content, sorted_tags, canonical_metadata)
            return sealed
        except Exception:  # left to the twin, as _pack leaves a value
            pass
    return seal_put_payload(salt, pure_pack([content, sorted_tags, canonical_metadata]))


CheckedPut = tuple["str | bytes", int, tuple[str, ...], "str | None", dict[str, Any], tuple[bytes, bytes]]
"""What checked_put returns: (content, its size in bytes, the tags distinct and sorted, the memory-tool
path they name or None, the metadata in canonical form, (digest, payload) of the put)."""


def checked_put(salt: bytes, content: Any, tags: Any, metadata: Any, limits: Limits) -> CheckedPut:
    """A new record's fields checked (InvalidInput naming what is wrong) and sealed with `salt`: in one
    call of the extension for the common input (mnemo/_writepath.c's seal_checked says which), else by
    checked_put_twin, which gives the same for that input and checks every other."""
    if _native is not None:
        fast = _native.seal_checked(salt, content, tags, metadata, limits.max_content_bytes, limits.max_tag_chars,
                                    limits.max_tags, limits.max_metadata_bytes)
        if fast is not None:
            size, tag_tuple, meta, digest, payload = fast
            return content, size, tag_tuple, None, meta, (digest, payload)
    return checked_put_twin(salt, content, tags, metadata, limits)


def checked_put_twin(salt: bytes, content: Any, tags: Any, metadata: Any, limits: Limits) -> CheckedPut:
    """checked_put in Python: each check of mnemo/validation.py in turn, then seal_fields."""
    content, size = check_content(content, limits)
    tag_tuple = check_tags(tags, limits)
    path = file_path(tag_tuple)
    meta = canonical_metadata(metadata)
    sealed = seal_fields(salt, content, tag_tuple, meta)
    check_metadata_size(meta, limits, len(sealed[1]) - SALT_SIZE)
    return content, size, tag_tuple, path, meta, sealed


def payload_digest(salt: bytes, packed: bytes) -> bytes:
    return hashlib.sha256(salt + packed).digest()


def seal_put_payload(salt: bytes, packed: bytes) -> tuple[bytes, bytes]:
    """(digest, payload) of a put: the payload is exactly the bytes the digest hashes, so one
    concatenation serves both."""
    payload = encode_put_payload(salt, packed)
    return hashlib.sha256(payload).digest(), payload


def encode_put_payload(salt: bytes, packed: bytes) -> bytes:
    """A put's payload: the 16-byte salt followed by the packed fields, nothing else."""
    return salt + packed


def decode_put_payload(data: bytes) -> tuple[bytes, bytes]:
    """Return (salt, packed) of a put payload; raises ValueError if malformed."""
    if len(data) < SALT_SIZE + 1:
        raise ValueError("put payload is shorter than a salt and packed fields")
    return data[:SALT_SIZE], data[SALT_SIZE:]


def encode_forget_payload(reason: str | None) -> bytes:
    return packb({"reason": reason})


def decode_record_fields(packed: bytes | memoryview) -> tuple[str | bytes, tuple[str, ...], dict[str, Any]]:
    obj = unpackb(packed)
    if not (isinstance(obj, list) and len(obj) == 3):
        raise ValueError("packed record fields are not an array of 3")
    content, tags, metadata = obj
    if not isinstance(content, (str, bytes)) or not isinstance(tags, list) or not isinstance(metadata, dict):
        raise ValueError("packed record fields have the wrong types")
    return content, tuple(tags), metadata


def checkpoint_message(db_id: bytes, seq: int, head: bytes) -> bytes:
    return CHECKPOINT_DOMAIN + db_id + seq.to_bytes(8, "big") + head


def served_put_problem(
    raw: bytes | memoryview, chain_hash: bytes, rec_id: str, ver: int, scope: str, payload: bytes | memoryview
) -> str | None:
    """Why `payload` may not be served as version `ver` of record `rec_id` in `scope`, or None: `raw`
    (the entry bytes the index points at) must hash to `chain_hash`, be the put of exactly that
    record, version and scope, and commit by its digest to exactly these payload bytes, which hold a
    salt and at least one byte of packed fields."""
    return served_digest_problem(raw, chain_hash, rec_id, ver, scope, hashlib.sha256(payload).digest(), len(payload))


def served_digest_problem(
    raw: bytes | memoryview, chain_hash: bytes, rec_id: str, ver: int, scope: str, payload_digest: bytes,
    payload_len: int,
) -> str | None:
    """served_put_problem of a payload known by its SHA-256 and its length, as the server that stores it
    computed them (PostgreSQL checks what it does not send this way)."""
    if hashlib.sha256(raw).digest() != chain_hash:
        return "its entry does not hash to the chain hash of that version"
    try:
        arr = unpackb(raw)
        op, body = arr[4], arr[6]
        fields = (body["id"], body["ver"], body["scope"]) if op == "put" and isinstance(body, dict) else None
        digest = body["digest"] if fields is not None else None
    except Exception:  # msgpack raises several unrelated types on garbage
        return "its entry does not decode"
    if fields != (rec_id, ver, scope):
        return f"its entry is not the put of record {rec_id} version {ver} in scope {scope}"
    if payload_digest != digest:
        return "it does not match the digest its chain entry commits to"
    if payload_len < SALT_SIZE + 1:  # an entry can commit to such a payload, but it holds no record
        return "it is shorter than a salt and packed fields"
    return None
