"""Reads of the file store that meet a change under them: a record another client forgets between the
selection and the read is left out (never a hole in the list, never a word that it existed), a record a
compaction moves in the log between them is served all the same, and a payload or entry damaged on disk
after the open is named for what it is, in a frame of one entry or of several."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from helpers.descriptors import open_files_holding
from helpers.frames import flip_byte, put_slots

from mnemo import IntegrityError, MnemoClient
from mnemo.client import RecordUnavailable

OWNER = "owner"


def _forget_before_the_read(monkeypatch: pytest.MonkeyPatch, reader: MnemoClient, other: MnemoClient,
                            rec_id: str) -> list[str]:
    """The first time `reader` reads payloads (a get's or a query's records in one call, from the index's
    rows, _latest_rows, or from records, _latest; or any versions, _quick_packed), `other` forgets
    `rec_id` just before: after the reader picked its records from its index, before it reads their
    bytes."""
    store: Any = reader._store
    done: list[str] = []

    def before(real: Any) -> Any:
        def read(items: Any, *handle: Any) -> Any:
            if not done:
                done.append(rec_id)
                other.forget(rec_id)
            return real(items, *handle)
        return read

    for name in ("_latest", "_latest_rows", "_quick_packed"):
        monkeypatch.setattr(store, name, before(getattr(store, name)))
    return done


def test_a_query_leaves_out_a_record_forgotten_between_its_selection_and_its_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "q.db"
    with MnemoClient(db, OWNER, durability="none") as reader, MnemoClient(db, OWNER, durability="none") as other:
        first = reader.remember("first", tags=["t"])
        gone = reader.remember("forgotten under the reader", tags=["t"])
        last = reader.remember("last", tags=["t"])
        done = _forget_before_the_read(monkeypatch, reader, other, gone.id)
        found = reader.query(tags=["t"])
        assert done == [gone.id]
        assert [r.id for r in found] == [first.id, last.id]
        assert [r.content for r in found] == ["first", "last"]


def test_a_get_of_a_record_forgotten_under_it_says_what_a_missing_id_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal is the one for an id that never was: a get that lost the race to a forget does not
    say the record was forgotten (which would tell that it existed)."""
    db = tmp_path / "g.db"
    with MnemoClient(db, OWNER, durability="none") as reader, MnemoClient(db, OWNER, durability="none") as other:
        gone = reader.remember("forgotten under the reader")
        done = _forget_before_the_read(monkeypatch, reader, other, gone.id)
        with pytest.raises(RecordUnavailable) as info:
            reader.get(gone.id)
        assert done == [gone.id]
        assert str(info.value) == f"no record {gone.id!r} that you may read"


@pytest.mark.parametrize("in_frame", [1, 3], ids=["alone-in-its-frame", "one-of-three-in-a-frame"])
def test_a_payload_damaged_after_the_open_is_refused_as_damaged(tmp_path: Path, in_frame: int) -> None:
    db = tmp_path / "s.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        with c.transaction() as tx:
            ids = [tx.remember(f"record {i} " * 5).id for i in range(in_frame)]
        target = ids[in_frame // 2]
        entry_slot = put_slots(db)[target][1]
        flip_byte(db, entry_slot.offset + entry_slot.length - 3)
        with pytest.raises(IntegrityError) as info:
            c.get(target)
        assert str(info.value) == f"{db}: payload slot damaged at offset {entry_slot.offset}"
        assert info.value.offset == entry_slot.offset
        assert [c.get(i).content for i in ids if i != target] == [f"record {i} " * 5 for i in range(in_frame)
                                                                   if ids[i] != target]
        store: Any = c._store
        assert store._handles.current.users == 0, "a read still holds the log, or let go of it twice"


@pytest.mark.parametrize("in_frame", [1, 3], ids=["alone-in-its-frame", "one-of-three-in-a-frame"])
def test_an_entry_damaged_after_the_open_stops_its_payload_being_served(tmp_path: Path, in_frame: int) -> None:
    """The payload is served only as the put its chain entry is: once that entry's bytes change on
    disk, the payload (whose own checksum still holds) is refused, naming the slot and why."""
    db = tmp_path / "e.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        with c.transaction() as tx:
            ids = [tx.remember(f"record {i} " * 5).id for i in range(in_frame)]
        target = ids[in_frame // 2]
        entry, slot = put_slots(db)[target]
        data = db.read_bytes()
        assert data.count(entry.raw) == 1
        flip_byte(db, data.index(entry.raw) + len(entry.raw) - 2)
        with pytest.raises(IntegrityError) as info:
            c.get(target)
        assert str(info.value).startswith(f"{db}: the payload at offset {slot.offset} is not served: ")
        assert info.value.offset == slot.offset


def _compact_before_each_read(monkeypatch: pytest.MonkeyPatch, reader: MnemoClient, other: MnemoClient,
                              by: str) -> list[int]:
    """Before each read of payloads by `reader` (after it took its records, and their offsets, from its
    index, before it reads their bytes), a compaction replaces the log: one by another thread of the
    reader's own client, or one by `other` that the reader follows at once. Returns the reader's
    generation after each compaction, one per read."""
    store: Any = reader._store
    races: list[int] = []

    def before(real: Any) -> Any:
        def read(items: Any, *handle: Any) -> Any:
            if by == "this client":
                compactor = threading.Thread(target=reader.compact)
                compactor.start()
                compactor.join()
            else:
                other.compact()
                store.refresh()  # this store follows the new log before the read
            races.append(store.generation)
            return real(items, *handle)
        return read

    for name in ("_latest", "_latest_rows", "_quick_packed"):  # (see _forget_before_the_read)
        monkeypatch.setattr(store, name, before(getattr(store, name)))
    return races


def _replaced_logs_open(other: MnemoClient) -> list[str]:
    """Descriptors of this process on a log a compaction replaced (unlinked, still holding payloads),
    once `other` too has followed the new log."""
    other.query()
    return [t for t in open_files_holding(b"under the reader") if t.endswith("(deleted)")]


@pytest.mark.parametrize("by", ["this client", "another client"])
def test_a_get_is_served_through_the_log_its_look_up_found_the_record_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    """A compaction between a get's look-up (the record and its offsets, from the index) and its read
    moves the record in the log. The read goes through the log those offsets are in, kept open for it:
    the record is served by that one read, however often compactions come between a look-up and its
    read, and the replaced log is closed once the read is over. (A read of the new log at the old
    offsets fails; a get that then looked the record up again met another compaction each time, and
    after five said that the live record was not there.)"""
    db = tmp_path / "c.db"
    with MnemoClient(db, OWNER, durability="none") as reader, MnemoClient(db, OWNER, durability="none") as other:
        reader.forget(reader.remember("gone " * 40).id)  # before the record: the first compaction moves it
        rec = reader.remember("moved under the reader")
        offset = put_slots(db)[rec.id][1].offset
        races = _compact_before_each_read(monkeypatch, reader, other, by)
        assert reader.get(rec.id).content == "moved under the reader"
        assert put_slots(db)[rec.id][1].offset < offset, "the test would prove nothing"
        assert len(races) == 1, "a compaction cost the get another read"
        assert _replaced_logs_open(other) == []


@pytest.mark.parametrize("by", ["this client", "another client"])
def test_a_query_serves_every_record_a_compaction_moves_between_its_selection_and_its_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    """As for a get: the records a query selected are read through the log their offsets are in, so a
    compaction between the selection and the read leaves none of them out. (A record whose read failed
    was looked up again by a get, which then met a compaction at each read, and after five was left
    out of the answer.)"""
    db = tmp_path / "q.db"
    with MnemoClient(db, OWNER, durability="none") as reader, MnemoClient(db, OWNER, durability="none") as other:
        reader.forget(reader.remember("gone " * 40).id)  # before the records: the first compaction moves them
        recs = [reader.remember(f"{i} under the reader", tags=["t"]) for i in range(3)]
        offsets = {r.id: put_slots(db)[r.id][1].offset for r in recs}
        races = _compact_before_each_read(monkeypatch, reader, other, by)
        found = reader.query(tags=["t"])
        assert sorted((r.id, r.content) for r in found) == sorted((r.id, r.content) for r in recs)
        assert all(put_slots(db)[i][1].offset < off for i, off in offsets.items()), "the test would prove nothing"
        assert len(races) == 1, "a compaction cost the query another read"
        assert _replaced_logs_open(other) == []


@pytest.mark.parametrize("by", ["this client", "another client"])
def test_a_recall_serves_every_hit_a_compaction_moves_between_its_ranking_and_its_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    """As for a query: recall reads its hits through the log their offsets are in, so a compaction
    between the ranking and the read leaves none of them out and costs no second ranking."""
    db = tmp_path / "r.db"
    with MnemoClient(db, OWNER, durability="none") as reader, MnemoClient(db, OWNER, durability="none") as other:
        reader.forget(reader.remember("gone " * 40).id)  # before the records: the first compaction moves them
        recs = [reader.remember(f"{i} under the reader") for i in range(3)]
        offsets = {r.id: put_slots(db)[r.id][1].offset for r in recs}
        races = _compact_before_each_read(monkeypatch, reader, other, by)
        found = reader.recall("reader")
        assert sorted((r.record.id, r.record.content) for r in found) == sorted((r.id, r.content) for r in recs)
        assert all(put_slots(db)[i][1].offset < off for i, off in offsets.items()), "the test would prove nothing"
        assert len(races) == 1, "a compaction cost the recall another read"
        assert _replaced_logs_open(other) == []
