"""Small columnar indexes (mnemo/storage/file/index.py) that the index's tests build and round-trip."""

from __future__ import annotations

from typing import Any

import msgpack

from mnemo.storage.file.index import Index, Version

IDS = [f"{i:032x}" for i in (1, 2, 3, 5, 8, 13, 21, 34, 55, 89)] + ["short-id", "ünïcode-id"]


def state_of(index: Index) -> dict[str, Any]:
    """The index's snapshot state as a later open reads it: through msgpack bytes and back."""
    state: dict[str, Any] = msgpack.unpackb(msgpack.packb(index.to_state(), use_bin_type=True), raw=False)
    return state


def roundtrip(index: Index) -> Index:
    """What a snapshot write and a later open do: plain data, msgpack bytes, and back."""
    return Index.from_state(index.db_id, state_of(index))


def three() -> Index:
    """Three records in scope "s", tagged ("a",), ("a", "b") and ("b",), in rows 0, 1 and 2."""
    index = Index(b"d" * 16)
    for i, (rec_id, tags) in enumerate(zip(IDS[:3], [("a",), ("a", "b"), ("b",)], strict=True)):
        index.put(rec_id, "s", tags, Version(1, i + 1, i, "x", 1, b"h" * 32, 100 * (i + 1), 30))
    return index


def loaded() -> Index:
    """three() as an open loads it from its snapshot (its rows in the base, not the tail)."""
    return roundtrip(three())
