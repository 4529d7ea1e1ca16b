"""The index's snapshot form: its live rows as plain data, in id order, with fresh postings and tag
sets (nothing of a forgotten record), and an index filled back from that data, every field checked."""

from __future__ import annotations

import sys
from array import array
from itertools import islice
from typing import Any, cast

from ...chain.tree import HASH_SIZE
from ..types import Version
from .deferred import SnapshotParts
from .index_columns import COLUMNS, IndexData, Interned, SortedIds, TagSets, all_str, inconsistent
from .text_index import TextIndex
from .vector_index import VectorIndex, available

SNAPSHOT_LAYOUT = 4
# "vectors" is there only when the index has vectors (a store with an embedder made them)
OPTIONAL_KEYS = frozenset({"vectors"})
STATE_KEYS = frozenset({
    "layout", "byteorder", "rows", "id_blob", "id_width", "ids", "columns", "hashes", "older", "scopes",
    "agents", "tagset_tags", "tagset_lens", "tagset_refs", "posting_tags", "posting_lens", "posting_rows",
    "forgotten", "acl_frames", "head_seq", "head_hash", "entries", "text",
})


def _id_order(index: IndexData) -> tuple[list[int], SortedIds | None, list[str]]:
    """Live rows in id order, with their ids as a SortedIds blob (or, when the ids are not all
    ASCII of one width, as a list)."""
    base, nbase = index.base, index.base.n
    tail_ids = cast("list[str]", index.extra)  # checked below: no None
    if not index.base_dead and None not in index.extra and all(
        map(str.__lt__, tail_ids, islice(tail_ids, 1, None))
    ):
        # Ids begin with their creation time, so the rows are usually in id order already.
        packed = SortedIds.pack(tail_ids)
        if packed is not None and (
            not nbase or not tail_ids or (packed.width == base.width and tail_ids[0] > base.at(nbase - 1))
        ):
            width = base.width or packed.width
            return list(range(nbase + len(tail_ids))), SortedIds(base.blob + packed.blob, width), []
    extra = sorted((i, r) for r, i in enumerate(index.extra, nbase) if i is not None)
    if not index.base_dead:
        # The usual case: the records made since the last load sort after it (ids begin with
        # their creation time), so the base blob is reused as it is.
        tail = [i for i, _r in extra]
        packed = SortedIds.pack(tail)
        if packed is not None and (
            not nbase or not tail or (packed.width == base.width and tail[0] > base.at(nbase - 1))
        ):
            width = base.width or packed.width
            return [*range(nbase), *(r for _i, r in extra)], SortedIds(base.blob + packed.blob, width), []
    pairs = sorted([(base.at(r), r) for r in range(nbase) if r not in index.base_dead] + extra)
    ids = [i for i, _r in pairs]
    return [r for _i, r in pairs], SortedIds.pack(ids), ids


def to_state(index: IndexData) -> dict[str, Any]:
    """The index as plain data for the snapshot: live rows only, in id order, with fresh postings
    and tag sets, so nothing of a forgotten record is written."""
    try:
        return _to_state(index)
    except (IndexError, AssertionError, UnicodeError):
        raise inconsistent(-1) from None


def _to_state(index: IndexData) -> dict[str, Any]:
    order, sorted_ids, id_list = _id_order(index)
    identity = len(order) == index.base.n + len(index.extra) and order == list(range(len(order)))
    cols = index.cols
    if identity:
        out_cols = {name: col.tobytes() for name, col in cols.items()}
        hashes = bytes(index.hashes)
        older = index.older
    else:
        out_cols = {name: array(col.typecode, map(col.__getitem__, order)).tobytes() for name, col in cols.items()}
        hashes = b"".join(index.hashes[r * HASH_SIZE : (r + 1) * HASH_SIZE] for r in order)
        renumber = {row: new for new, row in enumerate(order)}
        older = {renumber[row]: versions for row, versions in index.older.items()}
    text = index.text.to_state(None if identity else renumber.__getitem__)
    vectors = None if index.vectors is None else index.vectors.to_state(None if identity else renumber.__getitem__)
    # Tag sets and postings are renumbered densely from the live rows.
    tagset_col = array("I", out_cols["tagset"])
    codes: dict[int, int] = {0: 0}
    tagsets: list[tuple[str, ...]] = [()]
    for code in tagset_col:
        if code not in codes:
            codes[code] = len(tagsets)
            value = index.tagsets.values[code]
            assert value is not None
            tagsets.append(value)
    tagset_col = array("I", map(codes.__getitem__, tagset_col))
    out_cols["tagset"] = tagset_col.tobytes()
    refs = [0] * len(tagsets)
    for code in tagset_col:
        refs[code] += 1
    postings = index.postings
    if not identity or index.stale_tags:
        postings = {}
        for new, code in enumerate(tagset_col):
            for tag in tagsets[code]:
                rows = postings.get(tag)
                if rows is None:
                    postings[tag] = array("I", (new,))
                else:
                    rows.append(new)
    # One array of every posting back to back, in tag order: it loads with one copy.
    posting_tags = sorted(postings)
    posting_rows = array("I")
    for tag in posting_tags:
        posting_rows.extend(postings[tag])
    return {
        "layout": SNAPSHOT_LAYOUT,
        "byteorder": sys.byteorder,
        "rows": len(order),
        "id_blob": sorted_ids.blob if sorted_ids is not None else b"",
        "id_width": sorted_ids.width if sorted_ids is not None else 0,
        "ids": [] if sorted_ids is not None else id_list,
        "columns": out_cols,
        "hashes": hashes,
        "older": [[row, [list(v) for v in versions]] for row, versions in older.items()],
        "scopes": index.scopes.values,
        "agents": index.agents.values,
        "tagset_tags": [t for ts in tagsets for t in ts],
        "tagset_lens": array("I", map(len, tagsets)).tobytes(),
        "tagset_refs": array("I", refs).tobytes(),
        "posting_tags": posting_tags,
        "posting_lens": array("I", map(len, map(postings.__getitem__, posting_tags))).tobytes(),
        "posting_rows": posting_rows.tobytes(),
        "forgotten": sorted(index.forgotten),
        "acl_frames": index.acl_frames.tobytes(),
        "head_seq": index.head_seq,
        "head_hash": index.head_hash,
        "entries": index.entries,
        "text": text,
        **({} if vectors is None else {"vectors": vectors}),
    }


def load_state(index: IndexData, state: dict[str, Any], parts: SnapshotParts | None = None) -> None:
    """Fill a new, empty index with to_state()'s data. Raises (ValueError, KeyError, TypeError,
    IndexError, UnicodeError) on anything inconsistent, so a malformed snapshot is never half used. A
    part the state refers to instead of holding (snapshot.DEFERRED_KEYS) is loaded from `parts` in a
    thread of its own, and refused on its own (IndexData.text)."""
    if state["layout"] != SNAPSHOT_LAYOUT or state["byteorder"] != sys.byteorder:
        raise ValueError("snapshot of another layout or byte order")
    if not STATE_KEYS <= state.keys() <= STATE_KEYS | OPTIONAL_KEYS:
        raise ValueError("snapshot state has missing or unknown fields")
    n = state["rows"]
    if state["id_width"]:
        index.base = SortedIds(bytes(state["id_blob"]), state["id_width"])
        if index.base.n != n or not index.base.blob.isascii():
            raise ValueError("snapshot ids do not match its rows")
    else:
        ids = state["ids"]
        if len(ids) != n or not all_str(ids):
            raise ValueError("snapshot ids do not match its rows")
        index.extra = list(ids)
        index.rows = dict(zip(ids, range(n), strict=True))
        if len(index.rows) != n:
            raise ValueError("snapshot ids repeat")
    index.live = n
    for name, tc in COLUMNS.items():
        col = array(tc)
        col.frombytes(state["columns"][name])
        if len(col) != n:
            raise ValueError(f"snapshot column {name} has {len(col)} rows, expected {n}")
        index.cols[name] = col
    index.hashes = bytearray(state["hashes"])
    if len(index.hashes) != n * HASH_SIZE:
        raise ValueError("snapshot hashes have the wrong length")
    scopes, agents = state["scopes"], state["agents"]
    if not (all_str(scopes) and all_str(agents)):
        raise TypeError("snapshot scopes or agents are not strings")
    index.scopes = Interned(list(scopes))
    index.agents = Interned(list(agents))
    flat, lens, refs = state["tagset_tags"], array("I"), array("I")
    lens.frombytes(state["tagset_lens"])
    refs.frombytes(state["tagset_refs"])
    if not all_str(flat) or sum(lens) != len(flat) or not lens or lens[0]:
        raise TypeError("snapshot tag sets are malformed")
    if len(refs) != len(lens) or sum(refs) != n:
        raise ValueError("snapshot tag sets and their counts disagree")
    values: list[tuple[str, ...] | None] = []
    pos = 0
    for k in lens:
        values.append(tuple(flat[pos : pos + k]))
        pos += k
    index.tagsets = TagSets(values, refs.tolist())
    for row, versions in state["older"]:
        if not 0 <= row < n:
            raise IndexError("snapshot history names an unknown row")
        index.older[row] = tuple(Version(*v) for v in versions)
    tags = state["posting_tags"]
    lens, rows = array("I"), array("I")
    lens.frombytes(state["posting_lens"])
    rows.frombytes(state["posting_rows"])
    if len(lens) != len(tags) or lens.count(0) or sum(lens) != len(rows) or not all_str(tags):
        raise ValueError("snapshot postings are malformed")
    postings, pos = index.postings, 0
    for tag, k in zip(tags, lens, strict=True):  # lengths checked equal above
        postings[tag] = rows[pos : pos + k]
        pos += k
    index.sorted_tags = sorted(tags)
    if len(postings) != len(tags):
        raise ValueError("snapshot posting tags repeat")
    index.forgotten = set(state["forgotten"])
    index.acl_frames.frombytes(state["acl_frames"])
    index.head_seq = state["head_seq"]
    index.head_hash = state["head_hash"]
    index.entries = state["entries"]
    text, scopes = state["text"], len(index.scopes.values)
    if isinstance(text, dict) and "part" in text:
        if parts is None:
            raise ValueError("the snapshot's text part cannot be read")
        index.defer_text(parts.load("text", text["part"], lambda part: TextIndex.from_state(part, n, scopes)))
    else:
        index.text = TextIndex.from_state(text, n, scopes)
    # Without numpy (no `semantic` extra) the vectors are left out: this store cannot keep them up to
    # date, and its next snapshot is written without them (they are made again by one that can).
    if "vectors" in state and available():
        index.vectors = VectorIndex.from_state(state["vectors"], n, len(index.scopes.values))
