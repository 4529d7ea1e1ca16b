"""The read path's shortcuts give exactly what the plain code gave: make_memory_record builds the same
MemoryRecord as its constructor, ns_to_datetime the same datetime, and read_packed still tells an
erased slot (NotFound) from a damaged one (IntegrityError with the slot's offset). Reads of what was
written, and of a damaged payload, on both backends."""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import random
from datetime import datetime, timezone
from pathlib import Path

import pytest
from helpers.backends import is_pg

from mnemo import MemoryRecord, MnemoClient
from mnemo.errors import IntegrityError, NotFound
from mnemo.record import make_memory_record, ns_to_datetime

AGENT = "agent-1"


def _fields(**changes: object) -> dict[str, object]:
    now = datetime(2025, 11, 30, 10, 53, 20, 123456, tzinfo=timezone.utc)
    values: dict[str, object] = {
        "id": "r1", "version": 2, "content": "text", "tags": ("a", "b"), "metadata": {"k": [1, {"x": None}]},
        "scope": "agent:agent-1", "agent_id": AGENT, "created_at": now, "updated_at": now, "seq": 7,
        "hash": "ab" * 32,
    }
    values.update(changes)
    return values


def test_make_memory_record_is_the_constructor() -> None:
    values = _fields()
    assert list(values) == [f.name for f in dataclasses.fields(MemoryRecord)], "a field was added or renamed"
    fast = make_memory_record(*values.values())  # type: ignore[arg-type]
    plain = MemoryRecord(**values)  # type: ignore[arg-type]
    assert type(fast) is MemoryRecord
    assert fast == plain and plain == fast
    assert fast != MemoryRecord(**_fields(seq=8))  # type: ignore[arg-type]
    assert repr(fast) == repr(plain)
    assert list(vars(fast).items()) == list(vars(plain).items())
    assert dataclasses.asdict(fast) == dataclasses.asdict(plain)
    assert pickle.loads(pickle.dumps(fast)) == plain
    assert copy.deepcopy(fast) == plain
    assert dataclasses.replace(fast, version=3) == MemoryRecord(**_fields(version=3))  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.version = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del fast.content
    for record in (fast, plain):  # metadata is a dict: neither is hashable
        with pytest.raises(TypeError):
            hash(record)


def test_ns_to_datetime_is_the_plain_conversion() -> None:
    rng = random.Random(8)
    samples = [0, 1, 999, 1000, 1001, 999_999_999, 1_000_000_000, 1_764_500_000_123_456_789]
    samples += [rng.randrange(0, 4_102_444_800 * 10**9) for _ in range(20_000)]
    for ts in samples:
        got = ns_to_datetime(ts)
        want = datetime.fromtimestamp(ts // 1000 / 1_000_000, tz=timezone.utc)
        assert got == want and got.tzinfo is want.tzinfo and got.microsecond == (ts // 1000) % 1_000_000, ts


def test_records_read_back_are_what_was_written(db: str) -> None:
    with MnemoClient(db, AGENT, durability="none") as client:
        first = client.remember("one", tags=["t"], metadata={"b": 1, "a": [2]})
        second = client.update(first.id, content="two")
        other = client.remember(b"\x00bytes", tags=["t", "u"])
        assert first.created_at == first.updated_at
        assert client.query(tags=["t"]) == [second, other]
        assert client.get(first.id) == second
        assert client.history(first.id) == [first, second]
        got = client.get(first.id)
        assert got.created_at == first.created_at and got.updated_at == second.updated_at
        assert got.created_at != got.updated_at
        infos = {i.id: i for i in client.list_records(tags=["t"])}
        assert infos[first.id].created_at == first.created_at
        assert infos[first.id].updated_at == second.updated_at
        assert infos[other.id].created_at == infos[other.id].updated_at == other.created_at


def _damage_payload(db: str, client: MnemoClient, rec_id: str) -> None:
    """Flip the last byte of the latest payload of `rec_id`, where the backend keeps it (on PostgreSQL,
    as a superuser who turned the triggers off would)."""
    if not is_pg(db):
        off, length = _slot(client, rec_id)
        _overwrite(Path(db), off + length - 1, bytes([Path(db).read_bytes()[off + length - 1] ^ 0x01]))
        return
    import psycopg

    seq = client.get(rec_id).seq
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # no user triggers
        conn.execute("UPDATE mnemo_payloads SET payload = overlay(payload placing "
                     "set_byte('\\x00'::bytea, 0, get_byte(payload, length(payload) - 1) # 1) "
                     "from length(payload)) WHERE seq = %s", [seq])


def test_a_damaged_payload_is_an_integrity_error_on_every_read(db: str) -> None:
    with MnemoClient(db, AGENT, durability="none") as client:
        damaged = client.remember("to be damaged", tags=["d"])
        client.update(damaged.id, content="to be damaged, version 2")
        fine = client.remember("untouched", tags=["d", "f"])
        _damage_payload(db, client, damaged.id)
        reads = (lambda: client.get(damaged.id), lambda: client.query(tags=["d"]), lambda: client.history(damaged.id))
        for read in reads:
            with pytest.raises(IntegrityError):
                read()
        assert client.get(fine.id) == fine
        assert client.query(tags=["f"]) == [fine]
        assert not client.verify().ok


def _slot(client: MnemoClient, rec_id: str) -> tuple[int, int]:
    rec = client._store.index.get_rec(rec_id)  # type: ignore[attr-defined]
    assert rec is not None
    return rec.latest.slot_off, rec.latest.slot_len


def _overwrite(db_path: Path, offset: int, data: bytes) -> None:
    fd = os.open(db_path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def test_an_erased_slot_is_not_found_and_a_damaged_one_names_its_offset(db_path: Path) -> None:
    with MnemoClient(db_path, AGENT, durability="none") as client:
        erased = client.remember("to be zeroed", tags=["e"])
        damaged = client.remember("to be damaged", tags=["d"])
        fine = client.remember("untouched", tags=["d", "f"])
        off, length = _slot(client, erased.id)
        _overwrite(db_path, off, bytes(length))
        rec = client._store.index.get_rec(erased.id)  # type: ignore[attr-defined]
        assert rec is not None
        with pytest.raises(NotFound):
            client._store.read_packed(rec.latest, None, rec.id, rec.scope)  # type: ignore[attr-defined]
        doff, dlen = _slot(client, damaged.id)
        last = db_path.read_bytes()[doff + dlen - 1]
        _overwrite(db_path, doff + dlen - 1, bytes([last ^ 0x01]))
        with pytest.raises(IntegrityError) as exc:
            client.get(damaged.id)
        assert exc.value.offset == doff
        with pytest.raises(IntegrityError) as exc:
            client.query(tags=["d"])
        assert exc.value.offset == doff
        assert client.get(fine.id) == fine
        assert client.query(tags=["f"]) == [fine]


def test_a_slot_whose_crc_is_zero_is_read(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CRC of 0 sends the read down the erased-slot check; a live slot passes it."""
    import types
    import zlib

    import mnemo.storage.file.framing as framing  # where the slot CRC is checked

    with MnemoClient(db_path, AGENT, durability="none") as client:
        rec = client.remember("crc zero", tags=["t"])
        off, length = _slot(client, rec.id)
        payload = db_path.read_bytes()[off + 4 : off + length]
        _overwrite(db_path, off, bytes(4))  # the CRC field 0, and the payload's CRC taken as 0 too
        fake = types.SimpleNamespace(crc32=lambda data, *a: 0 if data == payload else zlib.crc32(data, *a))
        monkeypatch.setattr(framing, "zlib", fake)
        assert client.get(rec.id) == rec
        monkeypatch.undo()


def test_a_slot_with_a_valid_crc_but_unreadable_fields_names_its_offset(db_path: Path) -> None:
    """Packed fields that are not msgpack, under a CRC recomputed to match (only a forger makes such a
    slot): reads raise IntegrityError with the slot's offset, never a msgpack exception. (The payload no
    longer matches the digest its chain entry commits to, which every read checks first.)"""
    import zlib

    with MnemoClient(db_path, AGENT, durability="none") as client:
        rec = client.remember("soon garbage", tags=["g"])
        off, length = _slot(client, rec.id)
        salt = db_path.read_bytes()[off + 4 : off + 20]
        body = salt + b"\xc1" * (length - 20)  # 0xc1: a byte msgpack never uses
        _overwrite(db_path, off, zlib.crc32(body).to_bytes(4, "big") + body)
        before = db_path.read_bytes()
        for read in (lambda: client.get(rec.id), lambda: client.query(tags=["g"]), lambda: client.history(rec.id)):
            with pytest.raises(IntegrityError, match="does not match the digest its chain entry commits to") as exc:
                read()
            assert exc.value.offset == off
        assert db_path.read_bytes() == before
