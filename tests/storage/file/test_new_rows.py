"""A transaction's new records as the index's columns: new_rows (mnemo/_readpath.c) against its twin
new_rows_twin (mnemo/storage/file/new_rows.py) on runs of staged puts with every kind of entry they must
stop at; the exact columns of a run; and a commit of such runs, mixed with other entries, leaving the index
a reopen rebuilds from the log. Under MNEMO_PURE_PYTHON=1 the C extension is not loaded: the tests that
call it are skipped, and the rest run on the twin."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo._native import readpath
from mnemo.chain.codec import Entry
from mnemo.storage.batch import Staged
from mnemo.storage.file.index import Index
from mnemo.storage.file.index_columns import SortedIds
from mnemo.storage.file.new_rows import NewRows, new_rows_twin

native = pytest.mark.skipif(readpath is None, reason="the C extension is not loaded (MNEMO_PURE_PYTHON or no build)")
I64 = 2**63

# what a staged put is made of, and each way an entry may differ from one new_rows takes
ODD = ["none"] * 8 + [
    "forget", "ver 2", "ver True", "ver 1.0", "id bytes", "no size", "no scope", "short hash", "tags list",
    "tag bytes", "text bytes", "held id", "held in the sorted ids", "forgotten id", "repeated id", "seq past i64",
    "ts under i64", "size past i64", "slot length past u32", "slot past i64", "not a tuple",
]


def _index() -> Index:
    """An index holding "r2" in its rows, "a1" and "a3" in its sorted ids, and "a2" forgotten."""
    index = Index(b"d" * 16)
    index.base = SortedIds(b"a1a2a3", 2)
    index.base_dead = {1}
    index.rows["r2"] = 3
    return index


def _staged(k: int, odd: str, raw_len: int, text: str | None) -> tuple[Any, Any]:
    """The k-th staged entry of a run and its slot: a put of version 1 of "n<k>", or as `odd` says."""
    body: dict[str, Any] = {"digest": b"d" * 32, "id": f"n{k}", "scope": "agent:a", "size": 10 + k, "ver": 1}
    op, tags, payload_text, entry_hash = "put", ("k", "t"), text, bytes([k]) * 32
    seq, ts, slot = 100 + k, 1_700_000_000_000_000_000 + k, (40 * k, 30 + k)
    extra: dict[str, Any] = {
        "forget": {"op": "forget"}, "short hash": {"entry_hash": b"h" * 31}, "tags list": {"tags": ["k"]},
        "tag bytes": {"tags": ("k", b"t")}, "text bytes": {"payload_text": b"text"},
        "seq past i64": {"seq": I64}, "ts under i64": {"ts": -I64 - 1}, "slot length past u32": {"slot": (0, 2**32)},
        "slot past i64": {"slot": (I64 - 1, 20)},
    }.get(odd, {})
    op, tags, payload_text = extra.get("op", op), extra.get("tags", tags), extra.get("payload_text", payload_text)
    entry_hash, seq, ts, slot = extra.get("entry_hash", entry_hash), extra.get("seq", seq), extra.get("ts", ts), \
        extra.get("slot", slot)
    changes: dict[str, Any] = {
        "ver 2": {"ver": 2}, "ver True": {"ver": True}, "ver 1.0": {"ver": 1.0}, "id bytes": {"id": b"n"},
        "held id": {"id": "r2"}, "held in the sorted ids": {"id": "a1"}, "forgotten id": {"id": "a2"},
        "repeated id": {"id": f"n{k - 1}"}, "size past i64": {"size": I64},
    }
    body.update(changes.get(odd, {}))
    for key in ("size", "scope"):
        if odd == f"no {key}":
            del body[key]
    entry = Entry(seq, ts, b"p" * 32, op, "agent-ä", body, b"e" * raw_len, entry_hash)
    staged: Any = Staged(entry, b"payload", tags, payload_text)
    return (list(staged) if odd == "not a tuple" else staged), slot


frames = st.lists(st.tuples(st.sampled_from(ODD), st.integers(1, 300), st.sampled_from([None, "some ✓ text"])),
                  max_size=12)


@native
@settings(max_examples=400, deadline=None)
@given(frame=frames, start=st.integers(0, 4), cut=st.integers(0, 3),
       offset=st.sampled_from([0, 4096, 10**12, I64 - 2**20]))
def test_new_rows_gives_what_its_twin_gives(frame: list[tuple[str, int, str | None]], start: int, cut: int,
                                            offset: int) -> None:
    index = _index()
    made = [_staged(k, *spec) for k, spec in enumerate(frame)]
    staged, slots = [s for s, _ in made], [slot for _, slot in made]
    if cut:  # fewer slots than entries: the run ends with them
        slots = slots[: len(slots) - cut]
    args = (staged, slots, start, offset, offset + 32)
    try:
        want: Any = new_rows_twin(*args, index.row_of_twin)
    except OverflowError as exc:
        want = type(exc)
    try:
        got: Any = readpath.new_rows(NewRows, *args, index.rows, index.base.blob, index.base.width, index.base_dead)
    except OverflowError as exc:
        got = type(exc)
    assert got == want
    if not isinstance(got, type):
        assert got.stop == _stop(frame, start, len(slots), offset) or offset > I64 - 2**21


def _stop(frame: list[tuple[str, int, str | None]], start: int, end: int, offset: int) -> int:
    """Where a run from `start` must stop: at the first entry that is not a put of a new id (a forgotten
    one is new) in the types new_rows takes, or whose id an entry of the run put before it."""
    seen: set[str] = set()
    for k in range(start, end):
        odd = frame[k][0]
        rec_id = {"forgotten id": "a2", "repeated id": f"n{k - 1}"}.get(odd, f"n{k}")
        plain = odd in ("none", "forgotten id", "repeated id") or (odd, offset) == ("slot past i64", 0)
        if not plain or rec_id in seen:
            return k
        seen.add(rec_id)
    return max(start, end)

def test_a_run_in_columns() -> None:
    index = _index()
    made = [_staged(k, odd, 10 * (k + 1), text) for k, (odd, text) in
            enumerate([("none", "a"), ("forgotten id", None), ("none", "c"), ("held id", "d"), ("none", "e")])]
    staged, slots = [s for s, _ in made], [slot for _, slot in made]
    run = index.new_rows(staged, slots, 0, 4096, 4096 + 32)
    assert run == NewRows(
        3, 4096 + 32 + 10 + 8 + 20 + 8 + 30 + 8, ["n0", "a2", "n2"], ["agent:a"] * 3, [("k", "t")] * 3,
        ["agent-ä"] * 3, ["a", None, "c"], array("q", [100, 101, 102]).tobytes(),
        array("q", [1_700_000_000_000_000_000 + k for k in range(3)]).tobytes(), array("q", [10, 11, 12]).tobytes(),
        array("q", [4096, 4136, 4176]).tobytes(), array("q", [4128, 4146, 4174]).tobytes(),
        array("I", [30, 31, 32]).tobytes(), array("I", [10, 20, 30]).tobytes(), bytes(32) + b"\1" * 32 + b"\2" * 32,
    )
    rest = index.new_rows(staged, slots, 4, 4096, 4096 + 32)
    assert (rest.stop, rest.ids, rest.entry_end) == (5, ["n4"], 4096 + 32 + 50 + 8)
    empty = index.new_rows(staged, slots, 3, 4096, 99)
    assert empty == NewRows(3, 99, [], [], [], [], [], b"", b"", b"", b"", b"", b"", b"", b"")
    with pytest.raises(ValueError, match="start must be 0 or more"):
        index.new_rows(staged, slots, -1, 4096, 99)


def test_a_transaction_of_runs_and_other_entries_leaves_the_index_a_reopen_builds(tmp_path: Path) -> None:
    db = tmp_path / "t.mnemo.db"
    with MnemoClient(db, "owner", durability="none") as c:
        old = c.remember("before", tags=["t"])
        with c.transaction():
            first = [c.remember(f"first {i}", tags=["t", f"path{i % 2}"]) for i in range(5)]
            c.update(old.id, "before, again")
            c.grant("other", "agent:owner", ["read"])
            again = c.update(first[2].id, "first 2, again", tags=["u"])
            last = [c.remember(f"last {i}", tags=["t"]) for i in range(3)]
            c.forget([first[0].id])
        store: Any = c._store
        live = {rec_id: store.index.get_rec(rec_id) for rec_id in store.index.live_ids()}
        assert [r.id for r in c.query(tags=["t"])] == [old.id, *[r.id for r in first[1:] if r.id != again.id],
                                                      *[r.id for r in last]]
        # recall's index holds the texts of the runs' records and the updates', not the forgotten one's
        assert {r.record.id for r in c.recall("first")} == {r.id for r in first[1:]}
        assert {r.record.content for r in c.recall("again")} == {"first 2, again", "before, again"}
    with MnemoClient(db, "owner", durability="none") as c:
        store = c._store
        assert {rec_id: store.index.get_rec(rec_id) for rec_id in store.index.live_ids()} == live
        assert c.verify().ok
