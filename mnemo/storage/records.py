"""A read's `MemoryRecord`, made from a record's index entry and the packed fields read and checked for
one of its versions: what both backends' reads and the client build records with. The file backend's
C read path (mnemo/_readpath.c, `read_latest`) builds the same records in one call; `record_of` is its
pure-Python twin's."""

from __future__ import annotations

from typing import Any

from ..chain.codec import unpackb
from ..record import MemoryRecord, make_memory_record, ns_to_datetime
from .types import Rec, Version


def record_of(rec: Rec, version: Version, packed: bytes | memoryview) -> MemoryRecord | None:
    """Version `version` of `rec` as a MemoryRecord, its fields decoded from `packed`; None where they
    do not decode as [content (str or bytes), tags (an array), metadata (a map)]: the caller then says
    what is wrong (decode_record_fields). created_at is the first version's time, updated_at this
    one's; for a first version both are one datetime (they are immutable)."""
    try:
        obj: Any = unpackb(packed)
    except Exception:  # msgpack raises several unrelated types on garbage
        return None
    if type(obj) is not list or len(obj) != 3:
        return None
    content, tags, metadata = obj
    if type(content) not in (str, bytes) or type(tags) is not list or type(metadata) is not dict:
        return None
    ts = version.ts_ns
    updated = ns_to_datetime(ts)
    first = rec.versions[0].ts_ns
    return make_memory_record(
        rec.id, version.ver, content, tuple(tags), metadata, rec.scope, version.agent,
        updated if first == ts else ns_to_datetime(first), updated, version.seq, version.hash.hex(),
    )
