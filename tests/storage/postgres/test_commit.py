"""The commit path on PostgreSQL: a remember is one call (mnemo_put) in which the server builds the
entry; its bytes must be the log file's for every seq and time, its ACL check must hold against a grant
or revoke the client has not seen, and it must be durable when it returns."""

from __future__ import annotations

import time
from pathlib import Path

import msgpack
import pytest
from helpers.pg import Schema

from mnemo import MnemoClient, PermissionDenied, StorageError
from mnemo.audit import read_chain
from mnemo.chain.codec import make_entry

OWNER = "owner"


def test_the_servers_integers_are_msgpacks(pg: Schema) -> None:
    MnemoClient(pg.url, OWNER).close()
    edges = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, time.time_ns(), 2**63 - 1]
    rows = pg.sql("SELECT v, mnemo_uint(v) FROM unnest(%s::bigint[]) v", [edges])
    assert [(v, bytes(b)) for v, b in rows] == [(v, msgpack.packb(v)) for v in edges]


def test_entries_built_by_the_server_are_the_log_files_across_integer_widths(pg: Schema, tmp_path: Path) -> None:
    """Seqs past 127 and 255 (one, two and three bytes of msgpack), a time from the past (the server
    keeps times from going back), and the same entries as a log file given the same seqs and times."""
    with MnemoClient(pg.url, OWNER) as c:
        for i in range(260):
            c.remember(f"n{i}", tags=["t"] if i % 2 else [])
        pg.sql("UPDATE mnemo_head SET ts_ns = ts_ns + 10000000000")  # a head ahead of this clock
        ahead = pg.sql("SELECT ts_ns FROM mnemo_head")[0][0]
        last = c.remember("after a clock behind")
        assert c.verify().ok
    chain = list(read_chain(pg.url))
    assert [item.entry.seq for item in chain] == list(range(262))
    assert chain[-1].entry.ts_ns == ahead and last.seq == 261
    for item, before in zip(chain[1:], chain, strict=False):
        e = item.entry
        again = make_entry(e.seq, e.ts_ns, before.entry.hash, e.op, e.agent, e.body)
        assert (again.raw, again.hash) == (e.raw, e.hash)
        assert e.ts_ns >= before.entry.ts_ns
    rows = pg.sql("SELECT v.seq, v.ts_ns, v.hash, v.entry_len, e.hash, length(e.raw) FROM mnemo_versions v "
                  "JOIN mnemo_entries e ON e.seq = v.seq ORDER BY v.seq")
    assert [(s, t, bytes(h), n) for s, t, h, n, _eh, _el in rows] == [
        (e.seq, e.ts_ns, e.hash, len(e.raw)) for e in (item.entry for item in chain[1:])
    ]


def test_a_revoke_the_writer_has_not_seen_refuses_its_put(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as owner:
        owner.grant("w", "team:x", ["write"])
        with MnemoClient(pg.url, "w") as w:
            w.remember("allowed", scope="team:x")
            owner.revoke("w", "team:x")
            head = owner.head
            with pytest.raises(PermissionDenied, match="w may not write in scope team:x"):
                w.remember("refused", scope="team:x")  # its ACL was the one before the revoke
            assert owner.head == head
            assert w.remember("its own scope").seq == head[0] + 1  # on the ACL it has learnt



def test_a_commit_the_server_refuses_writes_nothing_and_the_writer_goes_on(pg: Schema) -> None:
    """The rows and the COMMIT of a read-modify-write go in one round trip: a refusal of the rows is
    the StorageError with the server's reason, nothing of the batch is written, the head row is free."""
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("v1")
        head = c.head
        pg.sql("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
               "$$ BEGIN RAISE EXCEPTION 'refused by a test trigger'; END; $$")
        pg.sql("CREATE TRIGGER refuse BEFORE INSERT ON mnemo_versions FOR EACH ROW EXECUTE FUNCTION refuse()")
        with pytest.raises(StorageError, match="failed: refused by a test trigger"):
            c.update(rec.id, content="v2")
        assert c.head == head and pg.sql("SELECT seq FROM mnemo_head") == [(head[0],)]
        pg.sql("DROP TRIGGER refuse ON mnemo_versions")
        assert c.update(rec.id, content="v2").seq == head[0] + 1
        assert c.get(rec.id).content == "v2" and c.verify().ok




def _pipelined(monkeypatch: pytest.MonkeyPatch, c: MnemoClient) -> list[bool]:
    """For each mnemo_commit the client's writer connection sends from now on: was it in a pipeline."""
    from psycopg import pq

    conn = c._store._writer()  # type: ignore[attr-defined]
    commits: list[bool] = []
    real = conn.execute

    def execute(query: object, *args: object, **kw: object) -> object:
        if "mnemo_commit(" in str(query):
            commits.append(conn.pgconn.pipeline_status != pq.PipelineStatus.OFF)
        return real(query, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(conn, "execute", execute)
    return commits


def test_a_commit_of_more_than_a_mebibyte_is_sent_outside_a_pipeline(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg's pipeline mode can stop sending a query of several MB part way and wait for its answer
    for ever (store.PIPELINE_MAX_BYTES; whether it does depends on timing, so a test that only commits a
    large transaction may pass either way). A commit whose entries, payloads and tags come to more than
    1 MiB is therefore sent without a pipeline; smaller ones keep the one round trip."""
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("small")
        commits = _pipelined(monkeypatch, c)
        c.update(rec.id, content="still small")
        with c.transaction():
            big = [c.remember(bytes([i]) * 600_000).id for i in range(2)]  # 1.2 MB of payloads
        c.update(rec.id, content="small again")
        assert commits == [True, False, True]
        assert [len(c.get(i).content) for i in big] == [600_000, 600_000]
        assert c.verify().ok


def test_the_pipeline_limit_counts_the_entry_the_payload_and_the_tags(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both sides of the limit: a commit of exactly PIPELINE_MAX_BYTES (its entries' bytes, their
    payloads' and their tag rows') is pipelined, one byte more is not."""
    from mnemo.storage.postgres.store import PIPELINE_MAX_BYTES

    tags = [f"tag-{i:03d}-" + "x" * 40 for i in range(100)]  # 4,800 characters of tag rows

    def put(c: MnemoClient, n: int) -> int:  # one put in a transaction, which commits by mnemo_commit
        with c.transaction():
            return c.remember(b"\x00" * n, tags=tags).seq

    with MnemoClient(pg.url, OWNER) as c:
        commits = _pipelined(monkeypatch, c)
        seq = put(c, 70_000)  # content sizes from 65,536 on pack alike: the same overhead as below
        item = next(i for i in read_chain(pg.url, payloads=True) if i.entry.seq == seq)
        assert item.payload is not None
        overhead = len(item.entry.raw) + len(item.payload) + sum(map(len, tags)) - 70_000
        put(c, PIPELINE_MAX_BYTES - overhead)
        put(c, PIPELINE_MAX_BYTES - overhead + 1)
        assert commits == [True, True, False]
        assert c.verify().ok


def test_a_lone_writers_remember_is_made_durable_by_its_own_call(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under durability "fsync", a remember while no other write of this process is in progress commits
    with synchronous_commit on, in its one call: no separate flush follows it. A write on the head row
    (an update) commits without waiting and is flushed after."""
    from mnemo.storage.postgres.store import PostgresStore

    flushes: list[int] = []
    real = PostgresStore._flush

    def spy(self: PostgresStore, ticket: int) -> None:
        before = self._flushed
        real(self, ticket)
        if self._flushed > before:  # a flush was made here
            flushes.append(ticket)

    monkeypatch.setattr(PostgresStore, "_flush", spy)
    with MnemoClient(pg.url, OWNER, durability="fsync") as c:
        recs = [c.remember(f"r{i}") for i in range(5)]
        assert flushes == []
        c.update(recs[0].id, content="changed")
        assert len(flushes) == 1
