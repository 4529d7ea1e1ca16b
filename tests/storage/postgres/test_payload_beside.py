"""Schema version 12 on PostgreSQL: each record's latest entry and payload kept on its row of mnemo_records
(the copy of its row of mnemo_payloads), so that a query's hit is one look-up by key (test_latest_beside.py
counts them); a trigger keeps each copy its payload row, for every role; the migration from version 11
fills the copies; a read serves the copy, checked as the row was, and verify compares it with the chain;
a forget and compact leave no byte of a forgotten version in the records' dead rows; and the copies are
never sampled into pg_statistic."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.pg import AppRole, Schema
from helpers.pg_reads import migrated_alike, read_loops, taken_back, written_after_a_migration
from helpers.pg_server import ROUTINES, database_directory, files_holding, undo_version_12

from mnemo import IntegrityError, MemoryRecord, MnemoClient

OWNER = "owner"
SAME_AS_PAYLOADS = ("SELECT count(*) FROM mnemo_records r JOIN mnemo_payloads p ON p.seq = r.seq "
                    "WHERE (r.raw, r.payload) = (p.raw, p.payload)")
COPY_REFUSED = ("mnemo: {} of record {} on mnemo_records is refused: its raw and payload must be those of the "
                "payload row of its seq (mnemo_payloads)")
NOT_SERVED = "{}: the payload of seq {} is not served: it does not match the digest its chain entry commits to"
OTHER_COPY = ("record {} holds another copy of its latest version's entry or payload than the chain's "
              "(seq {}: mnemo_records.raw, mnemo_records.payload)")


def _records(pg: Schema) -> list[Any]:
    return pg.sql("SELECT id, scope, ver, seq, hash, raw, payload FROM mnemo_records ORDER BY id")


def _superuser(pg: Schema, statement: str, params: Any = None) -> None:
    """`statement` run as a superuser who turned the triggers off for the session."""
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(statement, params)


def _one_and_two(app_role: AppRole) -> tuple[MemoryRecord, MemoryRecord]:
    """Two records, "one" and "two" tagged t, written by the application role."""
    with MnemoClient(app_role.url, OWNER) as c:
        return c.remember("one", tags=["t"]), c.remember("two", tags=["t"])


def _each_refused(app_role: AppRole, attempts: list[tuple[str, list[Any], str, str]]) -> None:
    """Each statement, run as the application role, is refused by the copies' trigger naming its op and record."""
    for statement, params, op, rec_id in attempts:
        assert app_role.refused((statement, params)) == COPY_REFUSED.format(op, rec_id)


# -- the migration ----------------------------------------------------------------------------------------------


def test_a_version_11_database_migrates_and_reads_every_record_back(pg: Schema, app_role: AppRole) -> None:
    made, taken = taken_back(pg, undo_version_12)
    columns = pg.sql("SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                     "AND table_name = 'mnemo_records' ORDER BY ordinal_position")
    assert [name for (name,) in columns] == ["id", "scope", "ver", "seq", "ts_ns", "agent", "size", "hash",
                                             "entry_len", "payload_len"]
    migrated_alike(pg, 11, taken)
    assert pg.sql("SELECT count(*) FROM mnemo_records") == pg.sql(SAME_AS_PAYLOADS) == [(3,)]
    assert pg.sql("SELECT attname, attstattarget, attstorage, attnotnull FROM pg_attribute "
                  "WHERE attrelid = 'mnemo_records'::regclass AND attname IN ('raw', 'payload') ORDER BY 1") == [
        ("payload", 0, "e", False), ("raw", 0, "e", False)]
    assert pg.routines() == ROUTINES  # what the migration leaves is what a new database has
    with MnemoClient(app_role.url, OWNER) as c:  # the application role writes the copies too
        written_after_a_migration(c, made)
    assert pg.sql("SELECT count(*) FROM mnemo_records") == pg.sql(SAME_AS_PAYLOADS) == [(4,)]


def test_a_record_whose_payload_row_is_gone_migrates_without_a_copy_and_is_named(pg: Schema) -> None:
    """Damage of version 11 (a live version's payload row deleted by a superuser) does not stop the
    migration: the record gets no copy, its reads say the payload is missing, and verify names both."""
    with MnemoClient(pg.url, OWNER) as c:
        kept = c.remember("kept", tags=["k"])
        lost = c.remember("lost", tags=["k"])
    undo_version_12(pg)
    _superuser(pg, "DELETE FROM mnemo_payloads WHERE seq = %s", [lost.seq])
    with MnemoClient(pg.url, OWNER) as c:
        assert pg.sql("SELECT id, raw IS NULL, payload IS NULL FROM mnemo_records ORDER BY seq") == [
            (kept.id, False, False), (lost.id, True, True)]
        assert c.get(kept.id) == kept
        with pytest.raises(IntegrityError) as refused:
            c.get(lost.id)
        assert str(refused.value) == (f"{c._store.path}: the payload of record {lost.id} version 1 (seq {lost.seq}) "
                                      "is missing, though the record is live")
        messages = [p.message for p in c.verify().problems]
        assert OTHER_COPY.format(lost.id, lost.seq) not in messages  # (the chain's own damage comes first)
        assert any(f"seq {lost.seq}" in m for m in messages), messages


# -- the copy is the payload row, for every role --------------------------------------------------------------------


def test_a_copy_other_than_its_payload_row_is_refused_for_every_role(pg: Schema, app_role: AppRole) -> None:
    """The application role keeps mnemo_records, and could otherwise put on a record's row content that no
    payload row holds, with an entry of its own making and its hash: the trigger refuses any row whose copy
    is not the payload row of its seq, byte for byte (also with a table of the caller's standing in for
    mnemo_payloads on the search_path, and for the owner), and the rows are unchanged."""
    one, two = _one_and_two(app_role)
    before = _records(pg)
    attempts = [
        ("UPDATE mnemo_records SET payload = payload || '\\x00'::bytea WHERE id = %s", [one.id], "UPDATE", one.id),
        ("UPDATE mnemo_records SET raw = (SELECT raw FROM mnemo_entries WHERE seq = 2) WHERE id = %s", [one.id],
         "UPDATE", one.id),
        ("UPDATE mnemo_records SET seq = %s WHERE id = %s", [two.seq, one.id], "UPDATE", one.id),
        ("UPDATE mnemo_records SET raw = NULL WHERE id = %s", [one.id], "UPDATE", one.id),
        ("INSERT INTO mnemo_records SELECT 'forged', scope, ver, seq, ts_ns, agent, size, hash, entry_len, "
         "payload_len, raw, overlay(payload PLACING '\\x00'::bytea FROM 20) FROM mnemo_records WHERE id = %s",
         [two.id], "INSERT", "forged"),
        ("INSERT INTO mnemo_records (id, scope, ver, seq, ts_ns, agent, size, hash, entry_len, payload_len, raw, "
         "payload) SELECT id || 'x', scope, ver, seq, ts_ns, agent, size, hash, entry_len, payload_len, raw, "
         "payload || '\\x00'::bytea FROM mnemo_records WHERE id = %s ON CONFLICT (id) DO NOTHING", [one.id],
         "INSERT", one.id + "x"),
    ]
    _each_refused(app_role, attempts)
    assert app_role.refused(
        ("CREATE TEMPORARY TABLE mnemo_payloads AS SELECT seq, raw, payload || '\\x00'::bytea AS payload "
         "FROM mnemo_payloads", None),
        (f'SET LOCAL search_path = pg_temp, "{pg.name}"', None),
        (f"UPDATE \"{pg.name}\".mnemo_records SET payload = payload || '\\x00'::bytea WHERE id = %s", [one.id]),
    ) == COPY_REFUSED.format("UPDATE", one.id)
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        pg.sql("UPDATE mnemo_records SET payload = payload || '\\x00'::bytea")
    assert str(refused.value).splitlines()[0] == COPY_REFUSED.format("UPDATE", min(one.id, two.id))
    assert _records(pg) == before
    with MnemoClient(app_role.url, OWNER) as c:
        assert sorted(r.content for r in c.query(tags=["t"])) == ["one", "two"]
        assert c.verify().ok


def test_a_null_copy_beside_its_payload_row_is_refused_for_every_role(pg: Schema, app_role: AppRole) -> None:
    """A NULL copy means the payload of its seq is gone (erased with its record, or lost before the
    migration): one set NULL while the payload row of its seq is there would hide a stored payload behind
    "missing", and is refused for the application role and the owner alike, on UPDATE and on INSERT, with
    the row unchanged and every record read back. A NULL copy a superuser puts in with the triggers off
    fails the record's reads as a missing payload, and verify names it."""
    one, two = _one_and_two(app_role)
    before = _records(pg)
    attempts = [
        ("UPDATE mnemo_records SET raw = NULL, payload = NULL WHERE id = %s", [one.id], "UPDATE", one.id),
        ("UPDATE mnemo_records SET raw = NULL, payload = NULL, seq = %s WHERE id = %s", [two.seq, one.id],
         "UPDATE", one.id),
        ("INSERT INTO mnemo_records (id, scope, ver, seq, ts_ns, agent, size, hash, entry_len, payload_len) "
         "SELECT 'hidden', scope, ver, seq, ts_ns, agent, size, hash, entry_len, payload_len "
         "FROM mnemo_records WHERE id = %s", [two.id], "INSERT", "hidden"),
    ]
    _each_refused(app_role, attempts)
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        pg.sql("UPDATE mnemo_records SET raw = NULL, payload = NULL WHERE id = %s", [two.id])
    assert str(refused.value).splitlines()[0] == COPY_REFUSED.format("UPDATE", two.id)
    assert _records(pg) == before
    with MnemoClient(app_role.url, OWNER) as c:
        assert sorted(r.content for r in c.query(tags=["t"])) == ["one", "two"]
        assert c.verify().ok
    _superuser(pg, "UPDATE mnemo_records SET raw = NULL, payload = NULL WHERE id = %s", [one.id])
    with MnemoClient(pg.url, OWNER) as c:
        with pytest.raises(IntegrityError) as missing:
            c.get(one.id)
        assert str(missing.value) == (f"{c._store.path}: the payload of record {one.id} version 1 (seq {one.seq}) "
                                      "is missing, though the record is live")
        assert c.get(two.id) == two
        report = c.verify()
        assert [(p.kind, p.message) for p in report.problems] == [("tables", OTHER_COPY.format(one.id, one.seq))]


# -- what a read serves, what verify names ------------------------------------------------------------------------


def test_a_payload_row_damaged_alone_leaves_the_checked_copy_served_and_verify_names_it(pg: Schema) -> None:
    """A read takes a latest version's entry and payload from its record's copy (schema version 12), checked
    against the record's chain hash and the entry's digest as before; the payload row a superuser changed
    with the triggers off is the chain's damage, which verify names."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        kept = c.remember("kept, and read from its copy", tags=["k"])
        _superuser(pg, "UPDATE mnemo_payloads SET payload = overlay(payload PLACING '\\x00'::bytea FROM 20) "
                   "WHERE seq = %s", [kept.seq])
        assert c.get(kept.id) == kept
        assert c.query(tags=["k"]) == [kept]
        assert [r.content for r in c.history(kept.id)] == [kept.content]
        report = c.verify()
        assert not report.ok
        assert [p.seq for p in report.problems if p.kind != "tables"] == [kept.seq]


def test_a_copy_damaged_alone_fails_every_read_of_it_and_verify_names_it(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        damaged = c.remember("damaged in its copy", tags=["k"])
        fine = c.remember("untouched", tags=["k", "f"])
        _superuser(pg, "UPDATE mnemo_records SET payload = overlay(payload PLACING '\\x00'::bytea FROM 20) "
                   "WHERE id = %s", [damaged.id])
        for read in (lambda: c.get(damaged.id), lambda: c.query(tags=["k"]), lambda: c.history(damaged.id),
                     lambda: c.list_records(tags=["k"])):
            with pytest.raises(IntegrityError) as refused:
                read()
            assert str(refused.value) == NOT_SERVED.format(c._store.path, damaged.seq)
        assert c.query(tags=["f"]) == [fine]
        report = c.verify()
        assert [(p.kind, p.message) for p in report.problems] == [("tables", OTHER_COPY.format(damaged.id,
                                                                                                damaged.seq))]


def test_a_limited_query_reads_the_copies_of_the_records_it_keeps_only(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a limit, the candidates are sorted without their copies, and the copy of each record the limit
    keeps is read after it, from the row found (by its ctid: no index is descended again)."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        made = sorted((r.id, r.content) for r in (c.remember(f"r{i}", tags=["hit"]) for i in range(6)))
        loops = read_loops(c, monkeypatch, lambda: c.query(tags=["hit"], limit=2))
        assert loops == {"mnemo_tags_pkey": 1, "mnemo_records_pkey": 6, "tid: mnemo_records": 2,
                         "mnemo_versions_pkey": 0}
        assert [(r.id, r.content) for r in c.query(tags=["hit"], limit=2)] == made[:2]
        assert [(r.id, r.content) for r in c.query(tags=["hit"])] == made


# -- erasure ------------------------------------------------------------------------------------------------------


def _relation_file(pg: Schema, base: Path, relation: str) -> bytes:
    ((path,),) = pg.sql("SELECT pg_relation_filepath(%s)", [relation])
    return (base.parents[1] / path).read_bytes()  # the path is relative to the data directory


def test_an_updated_record_forgotten_then_compacted_leaves_no_copy_in_any_file(pg: Schema) -> None:
    """An update replaces the record's row, leaving the former version's copy in a dead row of
    mnemo_records (and of its TOAST table, for a large payload); the forget deletes the row; compact
    rewrites mnemo_records with the payloads, and after a checkpoint no file of the database (under base/)
    holds either version."""
    base = database_directory(pg)
    if base is None:
        pytest.skip("the server's data directory is not readable by this user")
    first = f"SECRET-FIRST-{secrets.token_hex(8)}"
    second = f"SECRET-SECOND-{secrets.token_hex(8)}"
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember(first + " small", tags=["t"])
        c.update(rec.id, content=second + "-" + os.urandom(6000).hex())  # TOASTed
        c.update(rec.id, content="the third version")
        kept = c.remember("kept")
        pg.sql("CHECKPOINT")
        assert first.encode() in _relation_file(pg, base, "mnemo_records"), "the test would prove nothing"
        ((toast,),) = pg.sql("SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'mnemo_records'::regclass")
        assert second.encode() in _relation_file(pg, base, toast), "the test would prove nothing"
        c.forget(rec.id)
        c.compact()
        pg.sql("CHECKPOINT")
        assert files_holding(base, first.encode()) == files_holding(base, second.encode()) == []
        assert c.get(kept.id).content == "kept" and c.verify().ok


def test_pg_statistic_holds_no_copy_after_analyze(pg: Schema) -> None:
    word = "zqcopy" + secrets.token_hex(6)
    with MnemoClient(pg.url, OWNER, durability="none") as c, c.transaction():
        for i in range(300):
            c.remember(f"{word} {i % 3}", scope=f"team:{i % 3}")
    pg.sql("ANALYZE mnemo_records")
    sampled = pg.sql("SELECT attname FROM pg_stats WHERE schemaname = current_schema() AND tablename = "
                     "'mnemo_records' ORDER BY attname")
    assert ("scope",) in sampled  # ANALYZE did sample the table
    assert ("raw",) not in sampled and ("payload",) not in sampled
    values = pg.sql("SELECT concat_ws(' ', s.stavalues1::text, s.stavalues2::text, s.stavalues3::text, "
                    "s.stavalues4::text, s.stavalues5::text) FROM pg_statistic s "
                    "WHERE s.starelid = 'mnemo_records'::regclass")
    assert [v for (v,) in values if word in v or word.encode().hex() in v] == []
