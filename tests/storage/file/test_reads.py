"""Reads of the file store that meet a change under them: a record another client forgets between the
selection and the read is left out (never a hole in the list, never a word that it existed), and a
payload or entry damaged on disk after the open is named for what it is, in a frame of one entry or of
several."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.frames import flip_byte, put_slots

from mnemo import IntegrityError, MnemoClient
from mnemo.client import RecordUnavailable

OWNER = "owner"


def _forget_before_the_read(monkeypatch: pytest.MonkeyPatch, reader: MnemoClient, other: MnemoClient,
                            rec_id: str) -> list[str]:
    """The first time `reader` reads payloads, `other` forgets `rec_id` just before: after the reader
    picked its records from its index, before it reads their bytes."""
    store: Any = reader._store
    real = store._quick_packed
    done: list[str] = []

    def quick(items: Any) -> Any:
        if not done:
            done.append(rec_id)
            other.forget(rec_id)
        return real(items)

    monkeypatch.setattr(store, "_quick_packed", quick)
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


@pytest.mark.parametrize(("compactions", "served"), [(4, True), (5, False)])
def test_a_get_retries_four_times_while_compactions_move_the_log_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compactions: int, served: bool
) -> None:
    """A get whose read meets a compaction (the log replaced and followed between its look-up and its
    read) looks the record up again: it is served after four such races, and after a fifth it gives up
    as for an id it may not read, rather than loop for ever."""
    db = tmp_path / "c.db"
    with MnemoClient(db, OWNER, durability="none") as reader, MnemoClient(db, OWNER, durability="none") as other:
        rec = reader.remember("moved under the reader")
        reader.forget(reader.remember("gone " * 40).id)
        store: Any = reader._store
        real = store._quick_packed
        races: list[int] = []

        def quick(items: Any) -> Any:
            if len(races) < compactions:
                races.append(store.generation)
                other.compact()
                store.refresh()  # this store follows the new log before the read
            return real(items)

        monkeypatch.setattr(store, "_quick_packed", quick)
        if served:
            assert reader.get(rec.id).content == "moved under the reader"
        else:
            with pytest.raises(RecordUnavailable):
                reader.get(rec.id)
        assert len(races) == compactions and len(set(races)) == compactions
