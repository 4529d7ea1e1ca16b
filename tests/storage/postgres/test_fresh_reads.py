"""Reads on PostgreSQL catch up with the head in their own round trip (read_fresh): a get, a history, a
query and a list_records each send one statement, which brings the head with the records (a recall, its
read of the text index); a grant or a revoke another client committed is applied by the very next read,
which is read again with the new ACL when the scopes it was made with are older."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from helpers.pg import Schema, sent_statements

from mnemo import IntegrityError, MnemoClient, RecordUnavailable

OWNER = "owner"
READER = "reader"


def _statements(c: MnemoClient, read: Callable[[], Any]) -> list[str]:
    """The statements `read` sends on the store's read connection."""
    return [sql for sql, _params in sent_statements(c, read)]


def test_each_read_is_one_round_trip_that_brings_the_head(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c, MnemoClient(pg.url, OWNER) as other:
        rec = c.remember("first", tags=["t"])
        c.update(rec.id, content="second", tags=["t"])
        later = other.remember("written by another client", tags=["t"])
        reads: list[Callable[[], Any]] = [
            lambda: c.get(rec.id), lambda: c.history(rec.id), lambda: c.query(tags=["t"]),
            lambda: c.list_records(tags=["t"]),
        ]
        for read in reads:
            sent = _statements(c, read)
            assert len(sent) == 1
            assert sent[0].startswith("SELECT hd.packed, q.* FROM (SELECT int8send(seq) || int8send(ts_ns) || "
                                      "int8send(acl_seq) || hash AS packed FROM mnemo_head LIMIT 1) hd ")
        assert c.head == other.head == (later.seq, later.hash)
        assert sorted(r.content for r in c.query(tags=["t"])) == ["second", "written by another client"]
        assert [r.content for r in c.history(rec.id)] == ["first", "second"]


def test_a_read_that_finds_nothing_still_catches_up(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c, MnemoClient(pg.url, OWNER) as other:
        later = other.remember("elsewhere", tags=["x"])
        assert c.query(tags=["none"]) == []
        with pytest.raises(RecordUnavailable):
            c.get("no-such-record")
        assert c.head == (later.seq, later.hash)


def test_a_grant_and_a_revoke_by_another_client_apply_to_the_next_read(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as owner, MnemoClient(pg.url, READER) as reader:
        rec = owner.remember("shared", tags=["s"], scope="team:a")
        with pytest.raises(RecordUnavailable):
            reader.get(rec.id)
        assert reader.query(tags=["s"]) == [] == reader.list_records(tags=["s"])
        owner.grant(READER, "team:a", ["read"])
        # the reader's scopes were made from the ACL it held: the read finds a newer one, and reads again
        assert reader.get(rec.id).content == "shared"
        owner.revoke(READER, "team:a", ["read"])
        assert [r.id for r in reader.query(tags=["s"])] == []
        owner.grant(READER, "team:a", ["read"])
        assert [r.id for r in reader.list_records(tags=["s"])] == [rec.id]
        owner.revoke(READER, "team:a", ["read"])
        with pytest.raises(RecordUnavailable):
            reader.history(rec.id)
        owner.grant(READER, "team:a", ["read"])
        assert [r.content for r in reader.query(tags=["s"])] == ["shared"]


def test_a_read_inside_a_transaction_reads_what_the_transaction_holds(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("before", tags=["t"])
        with c.transaction() as tx:
            tx.update(rec.id, content="staged", tags=["t"])
            assert tx.get(rec.id).content == "staged"
            assert [r.content for r in tx.query(tags=["t"])] == ["staged"]
        assert c.get(rec.id).content == "staged"


def test_only_the_read_brings_the_head_and_a_missing_head_row_fails_it(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("x", tags=["t"])
        c.get(rec.id)
        store: Any = c._store
        # the statement after a read is sent as it is (refresh's own)
        assert _statements(c, store.refresh) == ["SELECT seq, hash, ts_ns, acl_seq FROM mnemo_head"]
        with pg.connect() as conn:
            conn.execute("SET session_replication_role = replica")  # no trigger stops this session
            conn.execute("DELETE FROM mnemo_head")
        for read in (lambda: c.get(rec.id), lambda: c.query(tags=["t"])):
            with pytest.raises(IntegrityError) as info:
                read()
            assert str(info.value) == f"{store.path}: mnemo_head holds no row"


def test_a_recall_brings_the_head_with_its_read_of_the_index(pg: Schema) -> None:
    """A lexical recall's first statement reads the text index and the head together; a grant or a revoke
    another client committed applies to that very recall."""
    with MnemoClient(pg.url, OWNER) as owner, MnemoClient(pg.url, READER) as reader:
        rec = owner.remember("shared words", scope="team:a")
        assert reader.recall("shared") == []
        owner.grant(READER, "team:a", ["read"])
        assert [h.record.id for h in reader.recall("shared")] == [rec.id]  # read again with the new ACL
        later = owner.remember("more words", scope="team:a")
        for query in ("more", "more -less"):
            sent = _statements(reader, lambda query=query: reader.recall(query))
            # the index with the head, then the hit; with it, for a query of words of few postings
            assert len(sent) == (1 if query == "more" else 2)
            assert sent[0].startswith("SELECT hd.packed, q.* FROM (SELECT int8send(seq) || int8send(ts_ns) || "
                                      "int8send(acl_seq) || hash AS packed FROM mnemo_head LIMIT 1) hd ")
            assert "mnemo_terms" in sent[0] and all("mnemo_terms" not in sql for sql in sent[1:])
        assert [h.record.id for h in reader.recall("more")] == [later.id]
        assert reader._store.head() == (later.seq, bytes.fromhex(later.hash))
        owner.revoke(READER, "team:a", ["read"])
        assert reader.recall("shared") == []
