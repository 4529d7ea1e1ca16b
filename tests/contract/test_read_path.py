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

import msgpack
import pytest
from helpers.backends import is_pg
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo import MemoryRecord, MnemoClient
from mnemo.chain.codec import encode_put_payload, payload_digest
from mnemo.errors import IntegrityError, NotFound
from mnemo.record import make_memory_record, ns_to_datetime
from mnemo.storage import open_storage
from mnemo.storage.contract import ALL_SCOPES, Query

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
    as a superuser who turned the triggers off would, in its row and in its record's copy)."""
    if not is_pg(db):
        off, length = _slot(client, rec_id)
        _overwrite(Path(db), off + length - 1, bytes([Path(db).read_bytes()[off + length - 1] ^ 0x01]))
        return
    import psycopg

    seq = client.get(rec_id).seq
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # no user triggers
        for table in ("mnemo_payloads", "mnemo_records"):
            conn.execute(f"UPDATE {table} SET payload = overlay(payload placing "
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


@pytest.mark.parametrize("packed", [b"", b"\xc0"], ids=["salt-only", "one-byte"])
def test_a_put_payload_is_served_only_with_packed_fields_after_its_salt(db: str, packed: bytes) -> None:
    """The storage contract serves the packed bytes a put staged, on every read, from its first byte:
    a payload that is only a salt holds no record, even when the entry commits to it."""
    store = open_storage(db, AGENT, durability="none")
    try:
        salt = bytes(range(16))
        body = {"digest": payload_digest(salt, packed), "id": "r1", "scope": f"agent:{AGENT}", "size": 0, "ver": 1}
        with store.writing() as batch:
            batch.stage("put", AGENT, body, encode_put_payload(salt, packed))
        reads = (lambda: store.get("r1", ALL_SCOPES).packed,  # type: ignore[union-attr]
                 lambda: store.get("r1", ALL_SCOPES, payloads="all").packed,  # type: ignore[union-attr]
                 lambda: store.select(Query(), ALL_SCOPES)[0].packed)
        for read in reads:
            if packed:
                assert [bytes(p) for p in read()] == [packed]
            else:
                with pytest.raises(IntegrityError) as info:
                    read()
                assert str(info.value).endswith(" is not served: it is shorter than a salt and packed fields")
    finally:
        store.close()


@pytest.mark.parametrize("tags", [[5], "t"], ids=["not-strings", "not-a-list"])
def test_a_put_whose_packed_tags_do_not_read_is_selected_as_its_index_lists_it(db: str, tags: object) -> None:
    """A put whose entry commits to fields whose tags are not a list of strings (written by hand): a
    select finds it by the tags it was staged with and hands its fields over as they are, on both
    backends (PostgreSQL, which checks the index's tags against the put's, cannot, and does not guess);
    the client, which decodes them, says what is wrong."""
    store = open_storage(db, AGENT, durability="none")
    try:
        salt = bytes(range(16))
        packed = msgpack.packb(["content", tags, {}])
        body = {"digest": payload_digest(salt, packed), "id": "r1", "scope": f"agent:{AGENT}", "size": 7, "ver": 1}
        with store.writing() as batch:
            batch.stage("put", AGENT, body, encode_put_payload(salt, packed), ("t",))
        for payloads in (False, True):
            found = store.select(Query(tags=("t",)), ALL_SCOPES, payloads=payloads)
            assert [(f.rec.id, f.rec.tags, [bytes(p) for p in f.packed]) for f in found] == [
                ("r1", ("t",), [packed] if payloads else [])]
    finally:
        store.close()


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


def _checked_reads(client: MnemoClient) -> tuple[list[MemoryRecord], dict[str, list[MemoryRecord]]]:
    """Every live record's latest version and history, read one payload at a time through read_packed
    and built by _record: the plain path the batched reads must agree with."""
    store = client._store
    latest, histories = [], {}
    for found in store.select(Query(), client._scopes(), payloads=False):  # type: ignore[attr-defined]
        rec = found.rec
        packed = [store.read_packed(v, None, rec.id, rec.scope) for v in rec.versions]  # type: ignore[attr-defined]
        histories[rec.id] = [client._record(rec, v, p) for v, p in zip(rec.versions, packed, strict=True)]
        latest.append(histories[rec.id][-1])
    return latest, histories


def test_batched_reads_are_the_checked_reads(db_path: Path) -> None:
    rng = random.Random(16)
    with MnemoClient(db_path, AGENT, durability="none") as client:
        ids = []
        with client.transaction():  # one frame of many entries: entries and slots apart
            for i in range(200):
                content: str | bytes = os.urandom(rng.randrange(1, 600)) if i % 5 == 0 else "x" * rng.randrange(0, 900)
                ids.append(client.remember(content, tags=[f"t{i % 3}", "all"], metadata={"i": i, "z": [None]}).id)
        for i in range(50):  # frames of one entry: entry and slot adjacent
            ids.append(client.remember(f"single {i}", tags=["all", "single"]).id)
        for rec_id in rng.sample(ids, 60):
            client.update(rec_id, content=f"v2 of {rec_id}", tags=["all", "updated"])
        for rec_id in rng.sample(ids, 20):
            client.forget(rec_id)
        latest, histories = _checked_reads(client)
        assert len(latest) == 230
        assert client.query() == latest
        assert client.query(tags=["all"]) == latest
        for tag in ("t0", "single", "updated"):
            assert client.query(tags=[tag]) == [r for r in latest if tag in r.tags]
        for rec_id, history in histories.items():
            assert client.get(rec_id) == history[-1]
            assert client.history(rec_id) == history
        with client.transaction():  # staged versions are read from the transaction, not the file
            staged = client.update(latest[0].id, content="staged")
            assert client.query(tags=["all"]) == [staged] + latest[1:]
            assert client.history(latest[0].id) == histories[latest[0].id] + [staged]


_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3) | st.binary(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=8,
)
_FIELDS = st.tuples(st.text() | st.binary() | _ANY, st.lists(st.text(max_size=3)) | _ANY,
                    st.dictionaries(st.text(max_size=3), _ANY) | _ANY).map(list)


@given(_FIELDS | _ANY)
@settings(max_examples=300, deadline=None)
def test_records_built_in_one_loop_are_those_of_record(value: object) -> None:
    """Whatever the packed fields hold, the query's loop builds what _record builds, or raises what it
    raises."""
    from mnemo.chain.codec import packb
    from mnemo.storage.contract import Found, Rec, Version

    client = _OFFLINE
    version = Version(3, 9, 1_764_500_000_123_456_789, AGENT, 4, b"h" * 32, 100, 40, 50, 30)
    first = version._replace(ver=1, ts_ns=1_700_000_000_000_000_000)
    for versions in ((version,), (first, version)):
        rec = Rec("r1", "scope", ("a",), versions)
        packed = packb(value)
        try:
            want: object = client._record(rec, version, packed)
        except IntegrityError as exc:
            want = str(exc)
        try:
            got: object = client._latest_records([Found(rec, (packed,))])[0]
        except IntegrityError as exc:
            got = str(exc)
        assert got == want


@pytest.mark.parametrize(("packed", "why"), [
    (b"\x05", "packed record fields are not an array of 3"),
    (b"\x92\xa1x\x90", "packed record fields are not an array of 3"),
    (b"\x93\xa1x\xa1y\x80", "packed record fields have the wrong types"),
    (b"\x93\x05\x90\x80", "packed record fields have the wrong types"),
    (b"\x93\xa1x\x90\x90", "packed record fields have the wrong types"),
])
def test_fields_that_do_not_decode_are_an_integrity_error_saying_why(packed: bytes, why: str) -> None:
    """A payload whose fields are not [content, tags, metadata] of the right types: every read of it
    (a version, the latest of a query's records) says which record and version, what is wrong, and
    where the payload is."""
    from mnemo.storage.contract import Found, Rec, Version

    version = Version(3, 9, 1_764_500_000_123_456_789, AGENT, 4, b"h" * 32, 100, 40, 50, 30)
    rec = Rec("r1", "scope", ("a",), (version,))
    for read in (lambda: _OFFLINE._record(rec, version, packed),
                 lambda: _OFFLINE._latest_records([Found(rec, (packed,))])):
        with pytest.raises(IntegrityError) as info:
            read()
        assert str(info.value) == f"nowhere: unreadable payload of record r1 version 3: {why}"
        assert info.value.offset == 100
    staged = version._replace(slot_off=-1)  # a version staged in an open transaction has no offset yet
    with pytest.raises(IntegrityError) as info:
        _OFFLINE._record(rec._replace(versions=(staged,)), staged, packed)
    assert info.value.offset is None


class _Offline(MnemoClient):
    """A client with no database, for what builds records from bytes alone."""

    def __init__(self) -> None:
        self._store = type("NoStore", (), {"path": "nowhere"})()  # type: ignore[assignment]


_OFFLINE = _Offline()
