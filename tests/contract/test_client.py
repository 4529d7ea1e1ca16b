"""Everyday behaviour of MnemoClient, checked against what the API promises and what the backend
holds, on both backends (the `db` fixture); what lands on disk is checked on the file backend."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from helpers.backends import entries, is_pg, payload, snapshot, write_once
from helpers.frames import check_chain, frame_spans, read_frames
from helpers.reopen import build_db, reopen_state

from mnemo import MemoryRecord, MnemoClient
from mnemo.chain.codec import (
    ZERO_HASH,
    decode_put_payload,
    decode_record_fields,
    pack_record_fields,
    payload_digest,
    unpackb,
)
from mnemo.errors import Closed, Conflict, LockTimeout, MnemoError, NotFound
from mnemo.record import RecordInfo, VerifyReport

AGENT = "agent-1"
HOME = f"agent:{AGENT}"


def assert_utc(dt: Any) -> None:
    assert dt.tzinfo is not None, "datetime is naive"
    assert dt.utcoffset() == timedelta(0), f"datetime is not UTC: {dt!r}"


# -- a new database, on disk -------------------------------------------------------------------------


def test_new_db_has_genesis(db: str) -> None:
    with MnemoClient(db, AGENT, durability="fsync") as c:
        chain = entries(db)
        assert len(chain) == 1
        genesis = chain[0]
        db_id = bytes.fromhex(c.db_id)
        assert len(db_id) == 16
        assert (genesis.seq, genesis.op, genesis.agent, genesis.prev) == (0, "genesis", AGENT, ZERO_HASH)
        assert genesis.body == {"db_id": db_id, "format": 1}
        assert payload(db, 0) is None
        assert c.head == (0, genesis.hash.hex())
        assert c.recovery == []
        report = c.verify()
        assert isinstance(report, VerifyReport)
        assert report.ok and report.problems == ()
        assert (report.entries, report.head_seq, report.head_hash) == (1, 0, genesis.hash.hex())


def test_remember_appends_exactly_one_entry_with_the_right_bytes(client: MnemoClient, db: str) -> None:
    before = entries(db)
    metadata = {"z": 1, "a": {"y": [1, "two", None, True, 2.5], "b": "c"}}
    rec = client.remember("hello wörld", tags=["b", "a"], metadata=metadata)
    chain = entries(db)
    assert chain[: len(before)] == before and len(chain) == len(before) + 1
    e = chain[-1]
    assert (e.seq, e.op, e.agent) == (rec.seq, "put", AGENT)
    assert e.prev == before[-1].hash
    assert e.hash.hex() == rec.hash == hashlib.sha256(e.raw).hexdigest()
    assert set(e.body) == {"digest", "id", "scope", "size", "ver"}
    assert (e.body["id"], e.body["ver"], e.body["scope"]) == (rec.id, 1, HOME)
    assert e.body["size"] == len("hello wörld".encode())
    stored = payload(db, rec.seq)
    assert stored is not None
    salt, packed = decode_put_payload(stored)
    assert packed == pack_record_fields("hello wörld", ["a", "b"], metadata)
    assert e.body["digest"] == payload_digest(salt, packed)
    assert decode_record_fields(packed) == ("hello wörld", ("a", "b"), metadata)
    assert client.head == (rec.seq, rec.hash)


def test_binary_content_is_packed_as_bin(client: MnemoClient, db: str) -> None:
    blob = bytes(range(256)) * 3
    rec = client.remember(blob, tags=["bin"])
    stored = payload(db, rec.seq)
    assert stored is not None
    _salt, packed = decode_put_payload(stored)
    content, _tags, _meta = decode_record_fields(packed)
    assert content == blob and isinstance(content, bytes)
    assert entries(db)[-1].body["size"] == len(blob)


# -- records ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    ["plain", "", "ünïcødé ✓ \U0001f600", "line\nbreaks\x00nul", b"", b"\x00\xffbinary", bytes(range(256))],
)
def test_round_trip_str_and_bytes(client: MnemoClient, db: str, content: str | bytes) -> None:
    rec = client.remember(content, tags=["t"], metadata={"k": "v"})
    assert rec.content == content and type(rec.content) is type(content)
    got = client.get(rec.id)
    assert got == rec
    assert type(got.content) is type(content)
    client.close()
    with MnemoClient(db, AGENT, durability="none") as again:
        reopened = again.get(rec.id)
        assert reopened == rec and type(reopened.content) is type(content)


def test_record_fields(client: MnemoClient) -> None:
    before = time.time()
    rec = client.remember("x", tags=["zeta", "alpha", "mid"], metadata={"n": 1})
    after = time.time()
    assert isinstance(rec, MemoryRecord)
    assert rec.version == 1
    assert rec.tags == ("alpha", "mid", "zeta") and isinstance(rec.tags, tuple)
    assert rec.metadata == {"n": 1}
    assert rec.scope == HOME
    assert rec.agent_id == AGENT
    assert_utc(rec.created_at)
    assert_utc(rec.updated_at)
    assert rec.created_at == rec.updated_at
    assert before - 1 <= rec.created_at.timestamp() <= after + 1
    assert rec.seq == 1, "the first record follows genesis at seq 0"
    assert len(rec.hash) == 64 and int(rec.hash, 16) >= 0
    with pytest.raises(AttributeError):
        rec.version = 2  # type: ignore[misc]


def test_defaults_no_tags_no_metadata(client: MnemoClient) -> None:
    rec = client.remember("bare")
    assert rec.tags == () and rec.metadata == {} and rec.scope == HOME
    assert client.get(rec.id) == rec


def test_explicit_scope(client: MnemoClient) -> None:
    rec = client.remember("shared", scope="team:x")
    assert rec.scope == "team:x"
    assert client.get(rec.id).scope == "team:x"


def test_ids_unique_and_time_ordered(client: MnemoClient, db: str) -> None:
    ids = [client.remember(f"r{i}").id for i in range(300)]
    assert len(set(ids)) == 300
    assert ids == sorted(ids), "ids do not sort in creation order"
    client.close()
    time.sleep(0.002)
    with MnemoClient(db, AGENT, durability="none") as again:
        later = again.remember("after reopen").id
    assert later > ids[-1]


def test_versions_and_history(client: MnemoClient) -> None:
    r1 = client.remember("v1", tags=["a"], metadata={"m": 1})
    time.sleep(0.002)
    r2 = client.update(r1.id, content="v2")
    r3 = client.update(r1.id, tags=["b", "a2"])
    r4 = client.update(r1.id, metadata={"m": 4})
    r5 = client.update(r1.id, content=b"v5", tags=[], metadata={})
    assert [r.version for r in (r1, r2, r3, r4, r5)] == [1, 2, 3, 4, 5]
    assert (r2.content, r2.tags, r2.metadata) == ("v2", ("a",), {"m": 1})
    assert (r3.content, r3.tags, r3.metadata) == ("v2", ("a2", "b"), {"m": 1})
    assert (r4.content, r4.tags, r4.metadata) == ("v2", ("a2", "b"), {"m": 4})
    assert (r5.content, r5.tags, r5.metadata) == (b"v5", (), {})
    for r in (r2, r3, r4, r5):
        assert r.id == r1.id
        assert r.created_at == r1.created_at
        assert r.updated_at > r1.updated_at
        assert r.seq > r1.seq
    assert [r.seq for r in (r1, r2, r3, r4, r5)] == list(range(r1.seq, r1.seq + 5))
    assert client.get(r1.id) == r5
    assert client.history(r1.id) == [r1, r2, r3, r4, r5]
    assert client.query(tags=["a"]) == []
    assert client.query(tags=["b"]) == []
    assert client.query() == [r5]


def test_update_expected_version(client: MnemoClient, db: str) -> None:
    r1 = client.remember("one")
    r2 = client.update(r1.id, content="two", expected_version=1)
    assert r2.version == 2
    before = snapshot(db)
    for wrong in (1, 3, 0, 99):
        with pytest.raises(Conflict) as exc:
            client.update(r1.id, content="lost", expected_version=wrong)
        assert str(exc.value)
    assert snapshot(db) == before
    assert client.get(r1.id) == r2
    assert client.update(r1.id, content="three", expected_version=2).version == 3


def test_update_keeps_scope_and_records_writer(db: str) -> None:
    with MnemoClient(db, AGENT, durability="none") as c:
        r1 = c.remember("x", scope="team:x")
        r2 = c.update(r1.id, content="y")
        assert r2.scope == "team:x" and r2.agent_id == AGENT


# -- queries ---------------------------------------------------------------------------------------


@pytest.fixture
def corpus(client: MnemoClient) -> list[MemoryRecord]:
    return [
        client.remember("r0", tags=["a", "b"]),
        client.remember("r1", tags=["b", "c"]),
        client.remember("r2", tags=["path:/notes/x.md"]),
        client.remember("r3", tags=["c", "path:/notes/sub/y.md"]),
        client.remember("r4", tags=["a"], scope="team:x"),
        client.remember("r5"),
    ]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, [0, 1, 2, 3, 4, 5]),
        ({"tags": ["b"]}, [0, 1]),
        ({"tags": ["a", "b"]}, [0]),
        ({"tags": ("b", "a")}, [0]),
        ({"tags": ["a", "c"]}, []),
        ({"any_tags": ["a", "c"]}, [0, 1, 3, 4]),
        ({"any_tags": ["zzz"]}, []),
        ({"tag_prefix": "path:/notes/"}, [2, 3]),
        ({"tag_prefix": "path:/notes/sub/"}, [3]),
        ({"tag_prefix": "path:/notes/x"}, [2]),
        ({"tag_prefix": "a"}, [0, 4]),
        ({"tag_prefix": ""}, [0, 1, 2, 3, 4]),
        ({"tags": ["c"], "tag_prefix": "path:"}, [3]),
        ({"tags": ["b"], "any_tags": ["a", "zzz"]}, [0]),
        ({"scope": "team:x"}, [4]),
        ({"scope": HOME}, [0, 1, 2, 3, 5]),
        ({"scope": HOME, "tags": ["a"]}, [0]),
        ({"scope": "nobody"}, []),
        ({"limit": 2}, [0, 1]),
        ({"any_tags": ["c", "a"], "limit": 3}, [0, 1, 3]),
        ({"limit": 0}, []),
        ({"tags": ["nonexistent"]}, []),
    ],
)
def test_query(
    client: MnemoClient, corpus: list[MemoryRecord], kwargs: dict[str, Any], expected: list[int]
) -> None:
    assert client.query(**kwargs) == [corpus[i] for i in expected]
    infos = client.list_records(**kwargs)
    assert [i.id for i in infos] == [corpus[i].id for i in expected]


def test_query_with_a_str_for_tags_does_not_split_it(client: MnemoClient, corpus: list[MemoryRecord]) -> None:
    # "ab" is not the tags ("a", "b"): either a refusal or a search for the tag "ab", which nothing has
    with contextlib.suppress(MnemoError):
        assert client.query(tags="ab") == []


def test_list_records_is_the_index_view(client: MnemoClient, corpus: list[MemoryRecord]) -> None:
    client.update(corpus[1].id, content="longer content é")
    infos = client.list_records()
    assert all(isinstance(i, RecordInfo) for i in infos)
    for info in infos:
        rec = client.get(info.id)
        content = rec.content.encode() if isinstance(rec.content, str) else rec.content
        assert (info.version, info.scope, info.tags, info.size, info.agent_id) == (
            rec.version,
            rec.scope,
            rec.tags,
            len(content),
            rec.agent_id,
        )
        assert (info.created_at, info.updated_at, info.seq) == (rec.created_at, rec.updated_at, rec.seq)


def test_query_after_update_follows_new_tags(client: MnemoClient, corpus: list[MemoryRecord]) -> None:
    r = client.update(corpus[0].id, tags=["fresh"])
    assert client.query(tags=["fresh"]) == [r]
    assert client.query(tags=["b"]) == [corpus[1]]
    assert client.query(tag_prefix="fre") == [r]


# -- forgetting ------------------------------------------------------------------------------------


def test_forget_one(client: MnemoClient, corpus: list[MemoryRecord], db: str) -> None:
    target = corpus[0]
    client.update(target.id, content="v2")
    assert client.forget(target.id, reason="asked to") == 1
    with pytest.raises(NotFound):
        client.get(target.id)
    with pytest.raises(NotFound):
        client.history(target.id)
    with pytest.raises(NotFound):
        client.update(target.id, content="again")
    with pytest.raises(NotFound):
        client.forget(target.id)
    assert target.id not in [r.id for r in client.query()]
    assert target.id not in [i.id for i in client.list_records()]
    assert client.query(tags=["a"]) == [corpus[4]]
    entry = entries(db)[-1]
    assert entry.op == "forget" and entry.agent == AGENT
    assert entry.body == {"ids": [target.id]}
    stored = payload(db, entry.seq)
    assert stored is not None and unpackb(stored) == {"reason": "asked to"}
    assert client.verify().ok


def test_forget_many_in_one_entry(client: MnemoClient, corpus: list[MemoryRecord], db: str) -> None:
    ids = [corpus[1].id, corpus[3].id, corpus[5].id]
    before = len(entries(db))
    assert client.forget(ids) == 3
    chain = entries(db)
    assert [e.op for e in chain[before:]] == ["forget"]
    assert sorted(chain[-1].body["ids"]) == sorted(ids)
    assert client.query() == [corpus[0], corpus[2], corpus[4]]


def test_forget_with_an_unknown_id_forgets_nothing(client: MnemoClient, corpus: list[MemoryRecord], db: str) -> None:
    before = snapshot(db)
    with pytest.raises(NotFound):
        client.forget([corpus[0].id, "no-such-id"])
    assert snapshot(db) == before
    assert client.get(corpus[0].id) == corpus[0]


def test_forget_where(client: MnemoClient, corpus: list[MemoryRecord], db: str) -> None:
    assert client.forget_where(tags=["b"], reason="cleanup") == 2
    assert [r.id for r in client.query()] == [corpus[i].id for i in (2, 3, 4, 5)]
    assert client.forget_where(tag_prefix="path:/notes/") == 2
    assert [r.id for r in client.query()] == [corpus[4].id, corpus[5].id]
    assert client.forget_where(scope="team:x") == 1
    assert client.query() == [corpus[5]]
    before = snapshot(db)
    assert client.forget_where(tags=["b"]) == 0
    assert snapshot(db) == before, "a forget_where that matched nothing wrote to the database"
    assert client.verify().ok


def test_forget_where_combines_filters(client: MnemoClient, corpus: list[MemoryRecord]) -> None:
    assert client.forget_where(tags=["c"], tag_prefix="path:") == 1
    assert [r.id for r in client.query()] == [corpus[i].id for i in (0, 1, 2, 4, 5)]


# -- transactions ----------------------------------------------------------------------------------


def test_transaction_commits_at_once(client: MnemoClient, db: str) -> None:
    old = client.remember("old", tags=["o"])
    gone = client.remember("gone", tags=["g"])
    before = len(entries(db))
    frames_before = 0 if is_pg(db) else len(read_frames(db))
    with client.transaction():
        a = client.remember("a", tags=["tx"])
        assert client.get(a.id) == a
        a2 = client.update(a.id, content="a2")
        assert client.get(a.id) == a2
        o2 = client.update(old.id, tags=["o", "p"])
        b = client.remember(b"b", tags=["tx"])
        assert client.forget(gone.id) == 1
        with pytest.raises(NotFound):
            client.get(gone.id)
        assert client.query(tags=["tx"]) == [a2, b]
        assert client.history(a.id) == [a, a2]
        assert len(entries(db)) == before, "a transaction's entries were visible before it committed"
    committed = entries(db)[before:]
    if not is_pg(db):  # on the file backend, one commit is one frame
        frames = read_frames(db)
        assert len(frames) == frames_before + 1 and list(frames[-1].entries) == committed
    assert [e.op for e in committed] == ["put", "put", "put", "put", "forget"]
    assert [e.seq for e in committed] == [a.seq, a2.seq, o2.seq, b.seq, b.seq + 1]
    assert client.head == (b.seq + 1, committed[-1].hash.hex())
    assert client.get(a.id) == a2 and client.get(old.id) == o2 and client.get(b.id) == b
    assert client.history(a.id) == [a, a2]
    with pytest.raises(NotFound):
        client.get(gone.id)
    check_chain(entries(db))
    assert client.verify().ok


def test_a_limit_inside_a_transaction_counts_what_it_leaves(client: MnemoClient) -> None:
    """A query with a limit inside a transaction counts the records as the transaction leaves them: a
    record it forgot, or whose tag it took away, takes no place among the first `limit`."""
    first, second, third = (client.remember(f"r{i}", tags=["t"]) for i in range(3))
    with client.transaction():
        client.forget(first.id)
        changed = client.update(second.id, tags=["u"])
        assert client.query(tags=["t"], limit=1) == [third]
        assert client.query(tag_prefix="t", limit=1) == [third]
        assert client.query(limit=1) == [changed]
        assert [r.id for r in client.list_records(tags=["t"], limit=2)] == [third.id]


def test_transaction_abort_writes_nothing(client: MnemoClient, db: str) -> None:
    keep = client.remember("keep", tags=["k"])
    spare = client.remember("spare")
    before = snapshot(db)
    head = client.head

    class Boom(Exception):
        pass

    with pytest.raises(Boom), client.transaction():
        new = client.remember("new", tags=["k"])
        client.update(keep.id, content="changed")
        client.forget(spare.id)
        assert [r.id for r in client.query(tags=["k"])] == [keep.id, new.id]
        raise Boom
    assert snapshot(db) == before
    assert client.head == head
    with pytest.raises(NotFound):
        client.get(new.id)
    assert client.get(keep.id) == keep
    assert client.get(spare.id) == spare
    assert client.query(tags=["k"]) == [keep]
    after = client.remember("after")
    assert after.seq == head[0] + 1
    check_chain(entries(db))


def test_transaction_aborted_by_a_mnemo_error(client: MnemoClient, db: str) -> None:
    r = client.remember("r")
    before = snapshot(db)
    with pytest.raises(Conflict), client.transaction():
        client.remember("first")
        client.update(r.id, content="x", expected_version=7)
    assert snapshot(db) == before
    assert client.query() == [r]


def test_empty_transaction_writes_nothing(client: MnemoClient, db: str) -> None:
    client.remember("r")
    before = snapshot(db)
    with client.transaction():
        pass
    assert snapshot(db) == before


def test_transaction_invisible_to_others_until_commit(client: MnemoClient, db: str) -> None:
    with MnemoClient(db, AGENT, readonly=True) as reader, client.transaction():
        r = client.remember("pending")
        with pytest.raises(NotFound):
            reader.get(r.id)
        assert reader.query() == []
    with MnemoClient(db, AGENT, readonly=True) as reader:
        assert reader.get(r.id) == r


def test_reads_inside_a_transaction_see_what_others_committed_before_it_and_its_own_writes(db: str) -> None:
    with MnemoClient(db, AGENT, durability="none") as c1, MnemoClient(db, AGENT, durability="none") as c2:
        r = c1.remember("a", tags=["t"])
        gone = c1.remember("g", tags=["t"])
        c2.update(r.id, content="b", tags=["u"])  # c1 has not read since
        c2.forget(gone.id)
        extra = c2.remember("x", tags=["u"])
        with c1.transaction():
            assert [x.content for x in c1.query(tags=["u"])] == ["b", "x"]
            assert c1.query(tags=["t"]) == [] and c1.get(r.id).content == "b"
            with pytest.raises(NotFound):
                c1.get(gone.id)
            assert c1.stats()["records"] == 2
            c1.update(r.id, content="c", tags=["t"])
            mine = c1.remember("m", tags=["u"])
            stats = c1.stats()  # its counts are of what the transaction's reads see, as the queries below
            assert (stats["records"], stats["versions"], stats["tags"]) == (3, 5, 2)
            assert [x.content for x in c1.query(tags=["t"])] == ["c"]
            assert [x.id for x in c1.query(tags=["u"])] == [extra.id, mine.id]
            assert [x.id for x in c1.query(tag_prefix="", limit=2)] == [r.id, extra.id]
            assert [v.content for v in c1.history(r.id)] == ["a", "b", "c"]
        assert [x.content for x in c2.query()] == ["c", "x", "m"]


def test_compact_waits_for_the_writer_lock(db: str) -> None:
    """compact() is a writer: it starts once a transaction in progress has committed."""
    with MnemoClient(db, AGENT, durability="none", lock_timeout=10) as c:
        keep = c.remember("kept")
        doomed = c.remember("FORGET-ME-" + os.urandom(4).hex())
        began = threading.Event()
        committed: list[float] = []

        def write_slowly() -> None:
            with c.transaction():  # it reads nothing: on PostgreSQL it holds the head row and no table lock
                c.remember("during")
                began.set()
                time.sleep(0.5)
            committed.append(time.monotonic())

        c.forget(doomed.id)
        t = threading.Thread(target=write_slowly)
        t.start()
        try:
            assert began.wait(10)
            c.compact()
            compacted = time.monotonic()
        finally:
            t.join(30)
        assert committed and committed[0] <= compacted
        with pytest.raises(NotFound):
            c.get(doomed.id)
        assert c.get(keep.id) == keep and c.verify().ok


# -- verify, stats, close --------------------------------------------------------------------------


def test_verify_healthy(client: MnemoClient, corpus: list[MemoryRecord]) -> None:
    client.update(corpus[0].id, content="v2")
    client.forget(corpus[1].id)
    report = client.verify()
    assert report.ok and report.problems == ()
    seq, head_hash = client.head
    assert (report.entries, report.head_seq, report.head_hash) == (seq + 1, seq, head_hash)


def test_stats_is_a_dict(client: MnemoClient, corpus: list[MemoryRecord]) -> None:
    stats = client.stats()
    assert isinstance(stats, dict) and stats


def test_context_manager_and_close(db: str) -> None:
    with MnemoClient(db, AGENT) as c:
        rec = c.remember("x")
    with pytest.raises(Closed):
        c.get(rec.id)
    with pytest.raises(Closed):
        c.remember("y")
    c.close()  # closing twice is harmless


# -- persistence and snapshots ---------------------------------------------------------------------


def test_persistence_across_reopen(db: str) -> None:
    records = build_db(db)
    first = reopen_state(db)
    assert first[0] == records
    assert reopen_state(db) == first


# -- several clients, durability, threads ----------------------------------------------------------


def test_two_clients_in_one_process_see_each_others_writes(db: str) -> None:
    with MnemoClient(db, AGENT, durability="none") as c1, MnemoClient(db, AGENT, durability="none") as c2:
        r = c1.remember("from c1", tags=["shared"])
        assert c2.get(r.id) == r
        r2 = c2.update(r.id, content="from c2")
        assert r2.seq == r.seq + 1
        assert c1.get(r.id) == r2
        assert c1.history(r.id) == [r, r2]
        s = c2.remember("c2 own", tags=["shared"])
        assert c1.query(tags=["shared"]) == [r2, s]
        assert c1.forget(s.id) == 1
        with pytest.raises(NotFound):
            c2.get(s.id)
        assert c2.query(tags=["shared"]) == [r2]
        assert c1.head == c2.head
    check_chain(entries(db))


@pytest.mark.parametrize("durability", ["fsync", "batch", "none"])
def test_durability_modes(db: str, durability: str) -> None:
    with MnemoClient(db, AGENT, durability=durability) as c, MnemoClient(db, AGENT, readonly=True) as reader:
        recs = []
        for i in range(30):
            recs.append(c.remember(f"r{i}", tags=[f"t{i % 3}"]))
            assert reader.get(recs[-1].id) == recs[-1]
        recs[0] = c.update(recs[0].id, content="changed")
        expected = c.query()
    with MnemoClient(db, AGENT, durability=durability) as again:
        assert again.query() == expected
        assert again.verify().ok
    check_chain(entries(db))


@pytest.fixture
def fsync_calls(db: str, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Times at which the storage layer made its writes durable: asked the OS to flush the log to disk,
    or (PostgreSQL) waited for the server to flush the WAL of its commits."""
    calls: list[float] = []
    if is_pg(db):
        from mnemo.storage.postgres.store import PostgresStore

        real_flush = PostgresStore._flush
        serial = threading.Lock()  # _flush runs under the store's own flush lock: this adds no waits

        def flush_spy(self: PostgresStore, ticket: int) -> None:
            with serial:
                before = self._flushed
                real_flush(self, ticket)
                if self._flushed > before:  # a flush was made, not shared with one before it
                    calls.append(time.monotonic())

        real_append = PostgresStore._append

        def append_spy(self: PostgresStore, batch: Any) -> int:
            # A blind append under "fsync" is made durable by the call itself (mnemo_put commits with
            # synchronous_commit on): the store then counts its commit as flushed.
            before = self._flushed
            ticket = real_append(self, batch)
            if self._flushed > before:
                calls.append(time.monotonic())
            return ticket

        monkeypatch.setattr(PostgresStore, "_flush", flush_spy)
        monkeypatch.setattr(PostgresStore, "_append", append_spy)
        return calls
    from mnemo.storage.file import logfile

    real = logfile._sync

    def spy(fd: int) -> None:
        real(fd)
        calls.append(time.monotonic())

    monkeypatch.setattr(logfile, "_sync", spy)
    return calls


def test_fsync_mode_syncs_before_returning(db: str, fsync_calls: list[float]) -> None:
    with MnemoClient(db, AGENT, durability="fsync") as c:
        for i in range(5):
            before = len(fsync_calls)
            c.remember(f"r{i}")
            assert len(fsync_calls) > before, "remember returned before an fsync"


def test_fsync_mode_makes_every_kind_of_write_durable_before_returning(db: str, fsync_calls: list[float]) -> None:
    """Not only a remember: an update, a transaction and a forget each return after a sync, the first
    write of a client that opened an existing database included."""
    with MnemoClient(db, AGENT, durability="fsync") as c:
        rec = c.remember("made by an earlier client")
    with MnemoClient(db, AGENT, durability="fsync") as c:
        def in_a_transaction() -> None:
            with c.transaction():
                c.update(rec.id, content="in a transaction")
                c.remember("beside it")

        writes = [lambda: c.update(rec.id, content="the first write of this client"), in_a_transaction,
                  lambda: c.remember("a remember"), lambda: c.forget(c.remember("to forget").id)]
        for write in writes:
            before = len(fsync_calls)
            write()
            assert len(fsync_calls) > before, "a write returned before a sync"


def test_none_mode_leaves_syncing_to_the_os(db: str, fsync_calls: list[float]) -> None:
    with MnemoClient(db, AGENT, durability="none") as c:
        before = len(fsync_calls)
        for i in range(20):
            c.update(c.remember(f"r{i}").id, content="x")
        assert len(fsync_calls) == before


def test_batch_mode_syncs_within_50ms(db: str, fsync_calls: list[float]) -> None:
    with MnemoClient(db, AGENT, durability="batch") as c:
        for i in range(3):
            time.sleep(0.12)
            before = len(fsync_calls)
            written = time.monotonic()
            c.remember(f"r{i}")
            assert len(fsync_calls) == before, "batch mode synced inside remember"
            deadline = written + 2.0
            while len(fsync_calls) == before and time.monotonic() < deadline:
                time.sleep(0.005)
            assert len(fsync_calls) > before, "batch mode never synced the write"
            assert fsync_calls[before] - written < 0.2


def test_threads_share_one_client(db: str, fsync_calls: list[float]) -> None:
    n_threads, per_thread = 8, 50
    results: list[list[MemoryRecord]] = [[] for _ in range(n_threads)]
    errors: list[BaseException] = []
    with MnemoClient(db, AGENT, durability="fsync") as c:
        barrier = threading.Barrier(n_threads)

        def work(k: int) -> None:
            try:
                barrier.wait()
                for i in range(per_thread):
                    results[k].append(c.remember(f"{k}:{i}", tags=[f"th{k}"]))
                    if i % 10 == 0:
                        c.query(tags=[f"th{k}"])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        every = [r for rs in results for r in rs]
        assert len(every) == n_threads * per_thread
        assert len(fsync_calls) < 0.9 * len(every), "concurrent writers did not share fsyncs"
        assert len({r.id for r in every}) == len(every)
        assert sorted(r.seq for r in every) == list(range(1, len(every) + 1))
        for k, rs in enumerate(results):
            assert [r.content for r in rs] == [f"{k}:{i}" for i in range(per_thread)]
            assert c.query(tags=[f"th{k}"]) == sorted(rs, key=lambda r: r.id)
        assert c.verify().ok
    chain = entries(db)
    check_chain(chain)
    assert len(chain) == 1 + n_threads * per_thread


def test_threads_with_a_client_each(db: str) -> None:
    MnemoClient(db, AGENT).close()
    n_threads, per_thread = 4, 50
    errors: list[BaseException] = []
    barrier = threading.Barrier(n_threads)

    def work(k: int) -> None:
        try:
            with MnemoClient(db, f"agent-{k}", durability="none") as c:
                barrier.wait()
                for i in range(per_thread):
                    c.remember(f"{k}:{i}", tags=[f"th{k}"])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    chain = entries(db)
    check_chain(chain)
    assert len(chain) == 1 + n_threads * per_thread
    with MnemoClient(db, AGENT) as c:
        for k in range(n_threads):
            assert [r.content for r in c.query(tags=[f"th{k}"])] == [f"{k}:{i}" for i in range(per_thread)]
        assert c.verify().ok


def test_no_lost_updates_between_threads(db: str) -> None:
    with MnemoClient(db, AGENT, durability="none") as c:
        counter = c.remember("0")
        conflicts = [0]

        def bump(times: int) -> None:
            with MnemoClient(db, AGENT, durability="none") as mine:
                done = 0
                while done < times:
                    cur = mine.get(counter.id)
                    try:
                        mine.update(
                            counter.id, content=str(int(str(cur.content)) + 1), expected_version=cur.version
                        )
                    except Conflict:
                        conflicts[0] += 1
                        continue
                    done += 1

        threads = [threading.Thread(target=bump, args=(50,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        final = c.get(counter.id)
        assert (final.content, final.version) == ("200", 201)


# -- the writer lock -------------------------------------------------------------------------------


@pytest.mark.parametrize("write", ["remember", "update", "transaction", "compact"])
def test_a_thread_waiting_past_lock_timeout_for_another_threads_transaction_times_out(db: str, write: str) -> None:
    """One client's threads take turns as the writer: a write that waits longer than lock_timeout for
    another thread's open transaction gives up with LockTimeout, writing nothing, and writes once the
    transaction is over."""
    with MnemoClient(db, AGENT, durability="none", lock_timeout=0.3) as c:
        rec = c.remember("before")
        opened, release = threading.Event(), threading.Event()

        def hold() -> None:
            with c.transaction():
                c.update(rec.id, content="inside")
                opened.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert opened.wait(30)
            before = entries(db)
            started = time.monotonic()
            with pytest.raises(LockTimeout) as info:
                write_once(c, write, rec.id)
            assert str(info.value) == "another thread held the writer lock for over 0.3 s"
            assert 0.25 <= time.monotonic() - started < 5
            assert entries(db) == before
        finally:
            release.set()
            holder.join(30)
        assert c.get(rec.id).content == "inside"
        assert c.remember("after").seq == rec.seq + 2


@pytest.mark.parametrize("how", ["readonly", "create=False"])
def test_opening_a_database_that_does_not_exist_without_creating_it_is_not_found(db: str, how: str) -> None:
    with pytest.raises(NotFound) as info:
        if how == "readonly":
            MnemoClient(db, AGENT, readonly=True)
        elif is_pg(db):
            from mnemo.storage.postgres.store import PostgresStore

            PostgresStore(db, AGENT, create=False)
        else:
            from mnemo.storage.file.store import FileStore

            FileStore(db, AGENT, create=False)
    assert str(info.value).startswith("no Mnemo database at ")
    with MnemoClient(db, AGENT, durability="none") as c:  # nothing was made: this open creates it
        assert c.stats()["head_seq"] == 0


def test_a_process_that_never_closes_its_batch_mode_client_still_exits(db: str) -> None:
    """durability="batch" syncs from a thread of its own: a program that ends without closing the
    client exits all the same (the thread does not hold the interpreter open), its writes committed."""
    import subprocess
    import sys

    from helpers.procs import subprocess_env

    code = ("import sys\nfrom mnemo import MnemoClient\n"
            "c = MnemoClient(sys.argv[1], 'agent-1', durability='batch')\n"
            "c.remember('written, never closed')\n")
    done = subprocess.run([sys.executable, "-c", code, db], env=subprocess_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with MnemoClient(db, AGENT, readonly=True) as c:
        assert [r.content for r in c.query()] == ["written, never closed"]


def test_opening_does_not_write_to_a_clean_database(db: str) -> None:
    build_db(db)
    before = snapshot(db)
    with MnemoClient(db, AGENT) as c:
        c.query()
        c.verify()
    assert snapshot(db) == before
    if not is_pg(db):
        assert frame_spans(before)[-1][1] == len(before)


# -- write and fsync failures ----------------------------------------------------------------------


@pytest.mark.timeout(120)  # a commit that never ends fails here, instead of holding the run
def test_a_transaction_of_many_megabytes_commits_whole(db: str) -> None:
    # 20 records of 900 kB: on PostgreSQL far more than one pipelined query can carry (PIPELINE_MAX_BYTES;
    # pipelined, 16 of them already hang, with psycopg 3.3.9)
    contents = [bytes([i]) * 900_000 for i in range(20)]
    with MnemoClient(db, AGENT) as c:
        with c.transaction():
            ids = [c.remember(content, tags=[f"big-{i}"]).id for i, content in enumerate(contents)]
        assert [c.get(rec_id).content for rec_id in ids] == contents
        assert c.verify().ok
    with MnemoClient(db, AGENT, readonly=True) as c:
        assert [c.get(rec_id).content for rec_id in ids] == contents


def test_the_log_gives_payloads_only_when_asked(db: str) -> None:
    """The storage contract's log(): every entry from `since` on, in seq order, payload bytes only when
    asked for."""
    with MnemoClient(db, "a", durability="none") as c:
        rid = c.remember("hello").id
        c.update(rid, content="again")
        plain = list(c._store.log())
        assert [i.entry.seq for i in plain] == list(range(len(plain))) and len(plain) >= 3
        assert all(i.payload is None for i in plain)
        full = list(c._store.log(payloads=True))
        assert [i.entry.raw for i in full] == [i.entry.raw for i in plain]
        puts = [i for i in full if i.entry.op == "put"]
        assert len(puts) == 2 and all(i.payload for i in puts)
        assert [i.entry.seq for i in c._store.log(since=2)] == [i.entry.seq for i in plain][2:]
