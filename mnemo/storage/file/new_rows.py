"""A transaction's new records as the index's columns: the run of staged puts of records no row holds,
taken from the staged entries themselves in one pass (mnemo/_readpath.c's new_rows, whose twin is
new_rows_twin), for Index.put_new to append in bulk."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

_I64 = range(-(2**63), 2**63)
_U32 = range(2**32)
ENTRY_HEADER_SIZE = 8  # framing.ENTRY_HEADER.size: an entry's lengths before its bytes


class NewRows(NamedTuple):
    """Version 1 of new records, column by column, in the order they were staged. The int columns are
    the bytes of an array of the index's column (index_columns.COLUMNS: "q" for seq, ts, size, slot_off
    and entry_off; "I" for slot_len and entry_len), so that each extends its column in one copy."""

    stop: int  # the first staged entry not in the run (the caller's general path applies it)
    entry_end: int  # the entry offset after the run's last entry (entry_pos when the run is empty)
    ids: list[str]
    scopes: list[str]
    tags: list[tuple[str, ...]]
    agents: list[str]
    texts: list[str | None]  # each put's content when it is text (recall's index holds it)
    seq: bytes
    ts: bytes
    size: bytes
    slot_off: bytes
    entry_off: bytes
    slot_len: bytes
    entry_len: bytes
    hashes: bytes  # the entries' hashes, 32 bytes each


def new_rows_twin(
    staged: Sequence[Any], slots: Sequence[Any], start: int, offset: int, entry_pos: int,
    row_of: Callable[[str], int | None],
) -> NewRows:
    """The run of `staged` (Staged tuples: entry, payload, tags, text) from `start` on, whose slots in the
    frame are `slots` ((position, length) from the frame's start, which is at `offset` in the log) and whose
    first entry is at `entry_pos`, that put version 1 of records no row holds (`row_of` says None) and that
    no earlier entry of the run puts. An entry is taken only in the exact types a staged put has: a tuple
    of 4 whose entry is a tuple of 8 with op `put` (str), an exact str agent, an exact dict body holding
    ver (the int 1), id and scope (exact str) and size (an i64 int), i64 ints seq and ts, bytes raw and
    a 32-byte hash, an exact tuple of exact str tags, a text that is None or an exact str, and a slot of
    two ints whose offset in the log (offset + position) is an i64 and whose length a u32; the entry's
    length fits a u32 and the offset after it an i64. The run stops at the first entry that is not so, or
    at the end of the shorter of `staged` and `slots`. The pure-Python twin of mnemo/_readpath.c's
    new_rows."""
    if start < 0:
        raise ValueError("new_rows: start must be 0 or more")
    if offset not in _I64 or entry_pos not in _I64:
        raise OverflowError("new_rows: offset and entry_pos must be i64")
    ids: list[str] = []
    scopes: list[str] = []
    tag_sets: list[tuple[str, ...]] = []
    agents: list[str] = []
    texts: list[str | None] = []
    wide: list[list[int]] = [[], [], [], [], []]  # seq, ts, size, slot_off, entry_off
    slot_lens: list[int] = []
    entry_lens: list[int] = []
    hashes = bytearray()
    seen: set[str] = set()
    pos, i, end = entry_pos, start, min(len(staged), len(slots))
    while i < end:
        put = _plain_put(staged[i], slots[i], offset, pos)
        if put is None:
            break
        rec_id, scope, tags, agent, text, fields, slot_len, entry_len, entry_hash = put
        if rec_id in seen or row_of(rec_id) is not None:
            break
        seen.add(rec_id)
        for column, value in zip(wide, fields, strict=True):
            column.append(value)
        ids.append(rec_id)
        scopes.append(scope)
        tag_sets.append(tags)
        agents.append(agent)
        texts.append(text)
        slot_lens.append(slot_len)
        entry_lens.append(entry_len)
        hashes += entry_hash
        pos += entry_len + ENTRY_HEADER_SIZE
        i += 1
    seq, ts, size, slot_off, entry_off = (array("q", column).tobytes() for column in wide)
    return NewRows(i, pos, ids, scopes, tag_sets, agents, texts, seq, ts, size, slot_off, entry_off,
                   array("I", slot_lens).tobytes(), array("I", entry_lens).tobytes(), bytes(hashes))

def _plain_put(item: Any, slot: Any, offset: int, pos: int) -> tuple[Any, ...] | None:
    """(id, scope, tags, agent, text, (seq, ts, size, slot_off, entry_off), slot_len, entry_len, hash) of
    a staged put of version 1 in the exact types new_rows_twin takes, else None."""
    if not (isinstance(item, tuple) and len(item) == 4 and isinstance(slot, tuple) and len(slot) == 2):
        return None
    entry, _payload, tags, text = item
    if not (isinstance(entry, tuple) and len(entry) == 8 and type(tags) is tuple
            and (text is None or type(text) is str)):
        return None
    seq, ts, _prev, op, agent, body, raw, entry_hash = entry
    if not (type(op) is str and op == "put" and type(agent) is str and type(body) is dict and type(raw) is bytes
            and type(entry_hash) is bytes and len(entry_hash) == 32 and all(type(t) is str for t in tags)):
        return None
    ver, rec_id, scope, size = body.get("ver"), body.get("id"), body.get("scope"), body.get("size")
    slot_pos, slot_len = slot
    if not (type(ver) is int and ver == 1 and type(rec_id) is str and type(scope) is str
            and all(type(v) is int and v in _I64 for v in (size, seq, ts, slot_pos))
            and type(slot_len) is int and slot_len in _U32 and offset + slot_pos in _I64
            and len(raw) in _U32 and pos + len(raw) + ENTRY_HEADER_SIZE in _I64):
        return None
    return rec_id, scope, tags, agent, text, (seq, ts, size, offset + slot_pos, pos), slot_len, len(raw), entry_hash
