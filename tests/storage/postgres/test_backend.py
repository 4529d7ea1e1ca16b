"""What is truly the PostgreSQL backend's own: the same chain bytes as the file, one order across
processes, append-only enforced by the database, erasure out of the data directory, faults of the
connection, schema versions, and a role that cannot rewrite history. (Behaviour shared with the file
backend is tested once for both, through the `db` fixture.)"""

from __future__ import annotations

import hashlib
import itertools
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import psycopg
import pytest
from helpers.backends import write_once
from helpers.frames import check_chain
from helpers.pg import AppRole, Schema, uri
from helpers.pg_faults import cannot_ask, kill_at_append, terminate
from helpers.pg_server import ROUTINES, database_directory, files_holding, undo_version_4
from helpers.procs import start_writer
from helpers.transparency_vectors import VECTORS, vector_log

from mnemo import MnemoClient, StorageError
from mnemo.audit import load_private_key, public_key_bytes, read_chain, verify_db
from mnemo.chain import codec as codec_module
from mnemo.chain.codec import Entry, decode_entry, decode_record_fields
from mnemo.cli import main as cli_main
from mnemo.errors import IntegrityError, InvalidInput, LockTimeout, NotFound, PermissionDenied
from mnemo.storage.postgres import commit as pg_commit
from mnemo.storage.postgres import grant_application_role
from mnemo.storage.postgres import schema as pg_schema
from mnemo.storage.postgres import store as pg_store

OWNER = "owner"
# The routines of a database of the current schema version, made new or migrated
def raws(db: str) -> list[bytes]:
    return [item.entry.raw for item in read_chain(db)]


# -- the same chain ----------------------------------------------------------------------------------------


def test_the_chain_vectors_pass_on_postgresql(pg: Schema, tmp_path: Path) -> None:
    """The contract's vector chain, copied into PostgreSQL: the same bytes, hashes and head, and it
    verifies there (the put forgotten in the vectors is copied without its payload)."""
    src = tmp_path / "vectors.db"
    src.write_bytes(vector_log())
    with MnemoClient(src, "owner", readonly=True) as c:
        report = c.copy_to(pg.url)
    assert (report.ok, report.head_seq, report.head_hash) == (True, 4, VECTORS[-1]["hash"])
    assert raws(pg.url) == [bytes.fromhex(v["entry_hex"]) for v in VECTORS]
    key = public_key_bytes(load_private_key(b"\x42" * 32))
    report = verify_db(pg.url, pubkey=key, expect_head=(4, VECTORS[-1]["hash"]))
    assert report.ok and report.checkpoints == 1 and report.erased == 1
    assert pg.sql("SELECT count(*) FROM mnemo_payloads p JOIN mnemo_entries e USING (seq) WHERE e.op = 'put'") == [(0,)]


def test_copy_in_both_directions_keeps_every_entry_and_every_erasure(pg: Schema, tmp_path: Path) -> None:
    src = tmp_path / "a.db"
    with MnemoClient(src, OWNER, durability="none") as c:
        ids = [c.remember(f"record {i}", tags=["t", f"n{i}"], metadata={"i": i}).id for i in range(30)]
        c.update(ids[0], content="version two")
        c.grant("bob", "team:*", ["read"])
        c.forget(ids[3:6], reason="asked")
        with c.transaction():
            c.remember("in a transaction", scope="team:x")
        head = c.head
        assert c.copy_to(pg.url).head_hash == head[1]
    back = tmp_path / "b.db"
    with MnemoClient(pg.url, OWNER) as p:
        assert p.head == head
        assert [r.content for r in p.history(ids[0])] == ["record 0", "version two"]
        assert {r.id for r in p.query(tags=["t"])} == set(ids) - set(ids[3:6])
        assert p.verify().ok
        assert p.copy_to(back).head_hash == head[1]
    assert raws(str(src)) == raws(pg.url) == raws(str(back))
    assert b"record 4" not in back.read_bytes()
    assert pg.sql("SELECT count(*) FROM mnemo_payloads WHERE payload::text LIKE '%record 4%'") == [(0,)]


def test_copy_refuses_a_destination_that_exists(pg: Schema, tmp_path: Path) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("there already")
    src = tmp_path / "s.db"
    with MnemoClient(src, OWNER, durability="none") as c:
        c.remember("x")
        before = raws(pg.url)
        with pytest.raises(Exception, match="already holds a Mnemo database"):
            c.copy_to(pg.url)
    assert raws(pg.url) == before


def test_a_copy_of_a_file_database_holding_a_nul_tag_names_the_record_and_writes_nothing(
    pg: Schema, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32, item 9: a file database written before tags with a NUL were refused may hold one, which
    PostgreSQL's text cannot store. `mnemo copy` to PostgreSQL says which record holds it and what to
    do, leaves the destination without a table (not half a database, nor a psycopg error), and copies
    once the record is fixed as it says."""
    src = tmp_path / "old.mnemo.db"
    with MnemoClient(src, OWNER, durability="none") as c:
        c.remember("fine", tags=["t"])
        # the tag check of a version that let a NUL through (remember's checks are codec.checked_put_twin's,
        # where the C path leaves a tag with a NUL)
        with monkeypatch.context() as old_version:
            old_version.setattr(codec_module, "check_tags", lambda tags, limits, what="tags": tuple(sorted(tags)))
            bad = c.remember("old", tags=["a\x00b", "t"], scope="team:x")
    message = (
        f"record {bad.id!r} (scope 'team:x') has the tag 'a\\x00b', which holds a NUL character (U+0000): "
        f"PostgreSQL cannot store it, so nothing was written to {pg_store.display_name(pg.url)}. In the source, "
        "give the record tags without it (update(id, tags=...)) or forget it; then copy again"
    )
    with MnemoClient(src, OWNER) as c, pytest.raises(InvalidInput) as exc:
        c.copy_to(pg.url)
    assert str(exc.value) == message
    assert cli_main(["copy", str(src), pg.url]) != 0
    out, err = capsys.readouterr()
    assert message in err and "Traceback" not in err and "psycopg" not in err
    assert pg.sql("SELECT count(*) FROM pg_tables WHERE schemaname = %s", [pg.name]) == [(0,)]
    with MnemoClient(src, OWNER, durability="none") as c:
        c.update(bad.id, tags=["ab", "t"])
        assert c.copy_to(pg.url).ok
    with MnemoClient(pg.url, OWNER) as p:
        assert [r.content for r in p.query(tags=["t"])] == ["fine", "old"]


# -- many writers, one order ---------------------------------------------------------------------------------


def _release(procs: list[Any]) -> None:
    for p in procs:
        assert p.stdout.readline() == "READY\n", p.stderr.read()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()


def test_writers_in_four_processes_make_one_gap_free_chain(pg: Schema) -> None:
    MnemoClient(pg.url, OWNER).close()
    n = 120
    procs = [start_writer("bulk", pg.url, f"w{k}", "--durability", "fsync", "--tag", f"w{k}", "--count", str(n))
             for k in range(4)]
    try:
        _release(procs)
        acked = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            acked += [line for line in out.splitlines()[1:]]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    entries = [item.entry for item in read_chain(pg.url)]
    check_chain(entries)
    puts = [e.body["id"] for e in entries if e.op == "put"]
    assert sorted(puts) == sorted(acked) and len(puts) == 4 * n
    assert len({e.agent for e in entries[1:]}) == 4
    assert verify_db(pg.url).ok


def test_no_update_is_lost_between_processes(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("0")
        c.grant("w0", c.home_scope, ["read", "write"])
        c.grant("w1", c.home_scope, ["read", "write"])
    per = 40
    procs = [start_writer("counter", pg.url, f"w{k}", "--id", rec.id, "--count", str(per)) for k in range(2)]
    try:
        _release(procs)
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            p.kill()
            p.wait()
    with MnemoClient(pg.url, OWNER) as c:
        assert c.get(rec.id).content == str(2 * per)
        assert [r.version for r in c.history(rec.id)] == list(range(1, 2 * per + 2))


@pytest.mark.parametrize("write", ["remember", "update", "transaction"])
def test_a_writer_holding_the_head_row_makes_others_time_out(pg: Schema, write: str) -> None:
    """A remember waits for the head row inside its one call; an update or a transaction takes it first:
    each gives up after lock_timeout with LockTimeout, and writes again once the row is free."""
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("before")
    with pg.connect(autocommit=False) as holder, MnemoClient(pg.url, OWNER, lock_timeout=0.3) as c:
        holder.execute("SELECT 1 FROM mnemo_head FOR UPDATE")
        started = time.monotonic()
        with pytest.raises(LockTimeout) as info:
            write_once(c, write, rec.id)
        assert str(info.value) == f"could not take the writer lock on {c._store.path} in time: another writer holds it"
        assert 0.25 <= time.monotonic() - started < 5
        assert c.get(rec.id).content == "before"  # readers never wait for the writer lock
        holder.rollback()
        assert c.remember("after").seq == rec.seq + 1
        assert c.update(rec.id, content="and after").version == 2


def test_a_transaction_after_a_blind_write_still_holds_the_head_row(pg: Schema) -> None:
    """A new record's remember commits in one call of its own (the writer's connection in autocommit for
    it); a transaction after it on that connection is one again: it holds the head row until it ends."""
    with MnemoClient(pg.url, OWNER) as c, MnemoClient(pg.url, OWNER, lock_timeout=0.3) as other:
        rec = c.remember("blind")
        with c.transaction():
            c.update(rec.id, content="inside")
            with pytest.raises(LockTimeout):
                other.remember("while the transaction is open")
        assert other.remember("after").seq == rec.seq + 2
        assert c.get(rec.id).content == "inside"
        assert c.verify().ok


@pytest.mark.parametrize("change", ["grants", "revoke"])
def test_a_blind_write_that_keeps_losing_to_acl_changes_commits_under_the_head_row(
    pg: Schema, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A new record's remember is built on the head mnemo_put finds if the ACL is still the one its
    checks used; an ACL change in between has it checked again and tried again. Past eight tries it takes
    the head row and commits as any other write: checked on the ACL then in force, refused if that ACL
    took its permission away."""
    with MnemoClient(pg.url, OWNER) as admin:
        admin.grant("bob", "team:x", ["write"])
        start = admin.stats()["head_seq"]
        real = pg_commit._put_columns
        calls = []

        def acl_changes_first(batch: Any) -> list[Any]:
            calls.append(batch)
            if change == "revoke" and len(calls) == 3:
                admin.revoke("bob", "team:x")
            elif len(calls) <= 8:
                admin.grant(f"agent-{len(calls)}", "team:y", ["read"])
            return real(batch)

        monkeypatch.setattr(pg_commit, "_put_columns", acl_changes_first)
        with MnemoClient(pg.url, "bob") as bob:  # opened after the grant: its first remember is blind
            if change == "revoke":
                with pytest.raises(PermissionDenied) as info:
                    bob.remember("blind", scope="team:x")
                assert str(info.value) == "bob may not write in scope team:x"
                assert len(calls) == 3
                assert admin.stats()["head_seq"] == start + 3  # the grants and the revoke: no put
            else:
                rec = bob.remember("blind", scope="team:x")
                assert len(calls) == 8
                assert rec.seq == start + 9 == admin.stats()["head_seq"]
                assert admin.get(rec.id).content == "blind"
        assert admin.verify().ok


def test_readers_never_block_writers(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        for i in range(50):
            c.remember(f"r{i}")
        chain = c._store.log()  # a read in progress, holding its snapshot
        next(chain)
        started = time.monotonic()
        c.remember("written while a read is open")
        assert time.monotonic() - started < 5
        assert sum(1 for _ in chain) == 50  # the reader sees its snapshot: not the write after it
        chain.close()


# -- append-only, by the database too ------------------------------------------------------------------------


def test_the_schema_refuses_to_change_or_remove_entries(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("history")
    before = raws(pg.url)
    for statement in ("UPDATE mnemo_entries SET raw = raw || '\\x00'::bytea WHERE seq = 1",
                      "DELETE FROM mnemo_entries WHERE seq = 1",
                      "TRUNCATE mnemo_entries CASCADE",
                      "UPDATE mnemo_payloads SET payload = '\\x00'::bytea",
                      "TRUNCATE mnemo_payloads"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            pg.sql(statement)
    assert raws(pg.url) == before


def test_an_application_role_can_write_and_forget_but_not_rewrite(pg: Schema) -> None:
    role = f"mnemo_app_{secrets.token_hex(4)}"
    pg.sql(f'CREATE ROLE "{role}" LOGIN')
    try:
        with MnemoClient(pg.url, OWNER) as c:
            c.grant("agent-1", "team:x", ["read"])  # an entry, so ACL replay is exercised
        grant_application_role(pg.url, role)
        app = uri(pg_store.application_dsn(pg.database.dsn, role), pg.name)
        with MnemoClient(app, OWNER) as c:  # the database's owner agent, through the application role
            rec = c.remember("written by the application role", tags=["app"])
            c.update(rec.id, content="and updated")
            assert c.query(tags=["app"])[0].content == "and updated"
            assert c.forget(rec.id) == 1
            with pytest.raises(StorageError, match="only their owner may do"):
                c.compact()  # VACUUM FULL is the tables' owner's
        with psycopg.connect(pg_store.application_dsn(pg.database.dsn, role), autocommit=True,
                             options=f"-csearch_path={pg.name}") as conn:
            for statement in ("UPDATE mnemo_entries SET op = op", "DELETE FROM mnemo_entries",
                              "ALTER TABLE mnemo_entries DISABLE TRIGGER USER",
                              "UPDATE mnemo_meta SET schema_version = 1"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
        with MnemoClient(pg.url, OWNER) as c:
            assert c.verify().ok
    finally:
        pg.sql(f'DROP OWNED BY "{role}"')
        pg.sql(f'DROP ROLE IF EXISTS "{role}"')


SALT = bytes(range(16))
ERASURE_REFUSED = ("mnemo: DELETE of the payload of seq {} on mnemo_payloads is refused: a payload is erased only by "
                   "the transaction that appends a forget entry naming its record (client.forget)")


def _payloads(pg: Schema) -> list[tuple[int, bytes]]:
    return [(seq, bytes(payload)) for seq, payload in pg.sql("SELECT seq, payload FROM mnemo_payloads ORDER BY seq")]


def _forget_entry(pg: Schema, ids: list[str], agent: str = OWNER) -> Entry:
    """A forget of `ids` that continues the chain from its head, as a client would build it."""
    from mnemo.chain.codec import make_entry

    ((seq, head, ts),) = pg.sql("SELECT seq, hash, ts_ns FROM mnemo_head")
    return make_entry(seq + 1, ts + 1, bytes(head), "forget", agent, {"ids": ids})


def test_the_application_role_cannot_delete_a_payload_outside_a_forget(pg: Schema, app_role: AppRole) -> None:
    """A DELETE then an INSERT of a payload row is the UPDATE the schema refuses, by other means: the DELETE
    is refused (alone, beside the INSERT, after a forget of another record appended in the same transaction,
    and with a temporary table standing in for the chain on the search_path), the rows are unchanged, and
    forget still erases."""
    with MnemoClient(app_role.url, OWNER) as c:
        kept = c.remember("kept", tags=["k"])  # seq 1
        other = c.remember("another")  # seq 2
        c.forget(c.remember("forgotten").id, reason="asked")  # seq 3, and its forget at seq 4, with a reason
    before = _payloads(pg)
    assert [seq for seq, _ in before] == [1, 2, 4]
    attempts = [
        (["DELETE FROM mnemo_payloads WHERE seq = 1"], 1),
        (["DELETE FROM mnemo_payloads WHERE seq = 1", "INSERT INTO mnemo_payloads VALUES (1, '\\x00')"], 1),
        (["DELETE FROM mnemo_payloads"], 1),
        (["DELETE FROM mnemo_payloads WHERE seq = 4"], 4),  # the forget's reason
    ]
    for statements, seq in attempts:
        assert app_role.refused(*[(statement, None) for statement in statements]) == ERASURE_REFUSED.format(seq)
    forget = _forget_entry(pg, [other.id])
    append = ("INSERT INTO mnemo_entries VALUES (%s, 'forget', %s, %s)", [forget.seq, forget.raw, forget.hash])
    with app_role.connect() as conn, conn.transaction(force_rollback=True):  # what a forget of it may delete
        conn.execute(*append)
        assert conn.execute("DELETE FROM mnemo_payloads WHERE seq = 2 RETURNING seq").fetchall() == [(2,)]
    # the forget names the record of seq 2, not that of seq 1
    assert app_role.refused(append, ("DELETE FROM mnemo_payloads WHERE seq IN (1, 2)", None)) == \
        ERASURE_REFUSED.format(1)
    assert app_role.refused(
        ("CREATE TEMPORARY TABLE mnemo_entries AS SELECT * FROM mnemo_entries", None),
        ("INSERT INTO pg_temp.mnemo_entries VALUES (%s, 'forget', %s, %s)",
         [forget.seq, _forget_entry(pg, [kept.id]).raw, forget.hash]),
        (f'SET LOCAL search_path = pg_temp, "{pg.name}"', None),
        (f'DELETE FROM "{pg.name}".mnemo_payloads WHERE seq = 1', None),
    ) == ERASURE_REFUSED.format(1)
    assert _payloads(pg) == before
    with MnemoClient(app_role.url, OWNER) as c:
        assert c.get(kept.id).content == "kept"
        assert c.forget([kept.id, other.id]) == 2
        assert c.query() == []
        assert c.verify().ok
    assert _payloads(pg) == before[2:]  # only the reason of the first forget is left


def test_verify_finds_an_entry_a_superuser_edited_with_the_triggers_off(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("the original")
        c.remember("and after it")
    with pg.connect() as conn:
        conn.execute("ALTER TABLE mnemo_entries DISABLE TRIGGER USER")
        raw = bytes(conn.execute("SELECT raw FROM mnemo_entries WHERE seq = 1").fetchone()[0])
        forged = raw.replace(b"agent:owner", b"agent:ownex")
        conn.execute("UPDATE mnemo_entries SET raw = %s WHERE seq = 1", [forged])
        conn.execute("ALTER TABLE mnemo_entries ENABLE TRIGGER USER")
    report = verify_db(pg.url)
    kinds = {p.kind for p in report.problems}
    assert not report.ok and {"hash-column", "link"} <= kinds, report.problems
    assert any(p.seq == 1 for p in report.problems)


def test_verify_finds_derived_tables_that_disagree_with_the_chain(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("mine", tags=["t"])
        other = c.remember("kept")
        c.forget(other.id)
    pg.sql("UPDATE mnemo_records SET scope = 'agent:mallory' WHERE id = %s", [rec.id])
    pg.sql("INSERT INTO mnemo_tags (tag, id) VALUES ('injected', %s)", [rec.id])
    report = verify_db(pg.url)
    messages = [p.message for p in report.problems if p.kind == "tables"]
    assert any(rec.id in m and "scope" in m for m in messages), messages
    assert any("injected" in m for m in messages), messages
    with MnemoClient(pg.url, "mallory") as m, pytest.raises(IntegrityError, match="not the put of record"):
        m.get(rec.id)  # the entry it would be served as says agent:owner: mallory reads nothing


# -- forget erases, in the server's files too ----------------------------------------------------------------


def test_forget_then_compact_leaves_nothing_under_base(pg: Schema) -> None:
    base = database_directory(pg)
    if base is None:
        pytest.skip("the server's data directory is not readable by this user")
    secret = f"SECRET-{secrets.token_hex(8)}".encode()
    big = secret + b"-" + os.urandom(6000).hex().encode()  # TOASTed
    with MnemoClient(pg.url, OWNER) as c:
        small = c.remember(secret.decode() + " small", tags=[f"tag-{secret.decode()}"])
        large = c.remember(big.decode(), tags=["big"])
        kept = c.remember("kept")
        pg.sql("CHECKPOINT")
        assert files_holding(base, secret), "the test would prove nothing: the content is not on disk"
        c.forget([small.id, large.id])
        c.compact()
        pg.sql("CHECKPOINT")
        assert files_holding(base, secret) == []
        assert c.get(kept.id).content == "kept" and c.verify().ok


# -- faults ---------------------------------------------------------------------------------------------------


def _kill_at_commit(monkeypatch: pytest.MonkeyPatch, store: Any, land: bool) -> None:
    """The next commit's connection is killed by the server: before the commit is sent (land=False) or
    after it landed, before the answer came back (land=True). Writes go through update(), which holds
    the head row and commits at the end (a remember's blind append is one call: see the next tests)."""
    conn = store._writer()
    real = conn.commit

    def commit() -> None:
        pid = conn.info.backend_pid
        if land:
            real()
        terminate(store, pid)
        conn.execute("SELECT 1")  # raises: the server closed the connection
        raise AssertionError("the connection survived")

    monkeypatch.setattr(conn, "commit", commit)


def test_a_commit_the_server_cancels_is_its_error_and_writes_nothing(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit refused by the server with the connection still up (here an operator's cancel) is that
    error, not a lost connection to ask about: nothing is written, and the next write commits on the
    same connection."""
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("before")
        head = c.head
        store: Any = c._store
        conn = store._writer()
        real = conn.execute
        cancelled = {"n": 0}

        def execute(query: Any, params: Any = None, **kw: Any) -> Any:
            if "mnemo_commit" in str(query) and not cancelled["n"]:
                cancelled["n"] += 1
                real("SELECT pg_cancel_backend(pg_backend_pid()), pg_sleep(5)")  # raises QueryCanceled
            return real(query, params, **kw)

        monkeypatch.setattr(conn, "execute", execute)
        with pytest.raises(StorageError) as info:
            c.update(rec.id, content="cancelled")
        assert str(info.value) == (f"PostgreSQL at {store.path} cancelled the statement: canceling statement "
                                   "due to user request (a statement_timeout or an operator's cancel; the "
                                   "connection is still usable)")
        assert cancelled["n"] == 1 and c.head == head and not conn.broken
        assert c.update(rec.id, content="after").version == 2
        assert store._writer() is conn
        assert c.verify().ok


def test_a_read_past_the_statement_timeout_is_that_error_on_the_same_connection(pg: Schema) -> None:
    """A statement_timeout (an operator's, set for the session) cancels a read: the error says so, not
    that the server was lost, and the read is not retried on a new connection, which would only be
    cancelled again; the next read runs on the same one."""
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("kept")
        store: Any = c._store
        conn = store._reads()
        conn.execute("SET statement_timeout = 50")
        with pytest.raises(StorageError) as info:
            store._fetch("SELECT pg_sleep(2)")
        assert str(info.value) == (f"PostgreSQL at {store.path} cancelled the statement: canceling statement "
                                   "due to statement timeout (a statement_timeout or an operator's cancel; "
                                   "the connection is still usable)")
        assert store._reads() is conn and not conn.broken
        assert [r.content for r in c.query()] == ["kept"]


def test_a_commit_killed_before_it_landed_writes_nothing_and_says_so(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("before")
        head = c.head
        _kill_at_commit(monkeypatch, c._store, land=False)
        with pytest.raises(StorageError, match="did not land and nothing was written: it is safe to retry"):
            c.update(rec.id, content="lost with the connection")
        assert c.head == head
        again = c.update(rec.id, content="a retry")  # a fresh connection; exactly one entry more
        assert (again.seq, again.version) == (head[0] + 1, 2)
        assert c.verify().ok


def test_a_commit_that_landed_before_the_connection_died_is_reported_done(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("before")
        _kill_at_commit(monkeypatch, c._store, land=True)
        updated = c.update(rec.id, content="landed")  # no error: it is in the chain, once
        assert c.get(rec.id).content == "landed" and updated.version == 2
        assert [e.entry.op for e in read_chain(pg.url)].count("put") == 2
        assert c.verify().ok


@pytest.mark.parametrize("land", [False, True])
def test_a_blind_append_whose_connection_died_is_in_the_chain_exactly_once(
    pg: Schema, monkeypatch: pytest.MonkeyPatch, land: bool
) -> None:
    """A remember is one call; if its connection dies with the call in flight, the client asks whether it
    landed and, if not, tries it again: either way the record is in the chain once, and the call succeeds."""
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("before")
        killed = kill_at_append(monkeypatch, c._store, land)
        rec = c.remember("once")
        assert killed["done"]
        assert c.get(rec.id).content == "once" and rec.seq == 2
        assert [e.entry.body.get("id") for e in read_chain(pg.url)].count(rec.id) == 1
        assert c.verify().ok


@pytest.mark.parametrize("first", ["remember", "update"])
def test_killed_connections_are_replaced(pg: Schema, first: str) -> None:
    """What a restarted server does to a client: every connection it had is gone (the reader's, the
    writer's and the one that waits for flushes). The next read and the next write reconnect, whether
    that write is one call (a remember) or a transaction on the head row followed by a flush (an update),
    and the store goes on taking writes."""
    with MnemoClient(pg.url, OWNER, durability="fsync") as c:
        rec = c.remember("before")
        c.update(rec.id, content="warms the writer and the flush connections")
        assert c._store._sync is not None  # type: ignore[attr-defined]
        pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
               "AND pid <> pg_backend_pid()")
        time.sleep(0.1)
        assert c.get(rec.id).content == "warms the writer and the flush connections"
        if first == "update":
            assert c.update(rec.id, content="after").seq == rec.seq + 2
        else:
            assert c.remember("after").seq == rec.seq + 2
        assert c.update(rec.id, content="and again").version == (4 if first == "update" else 3)
        assert c.remember("still writing").seq == rec.seq + 4
        assert c.verify().ok


def test_a_cut_off_append_whose_ids_hold_other_puts_is_refused_as_damage(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remember whose call was cut off asks whether its put landed by the record's id. Should that id
    hold another put (another writer's, with other content), it is neither taken as this write nor
    retried over it: the call raises IntegrityError, and the chain keeps the other put alone."""
    import mnemo.client.writes as writes_module

    fixed = "0" * 31 + "1"
    with MnemoClient(pg.url, OWNER) as c, MnemoClient(pg.url, OWNER) as other:
        c.remember("before")
        store: Any = c._store
        kill_at_append(monkeypatch, store, land=False,
                        meanwhile=lambda: other.remember("another writer's"))  # takes the same id first
        monkeypatch.setattr(writes_module, "new_id", lambda: fixed)
        with pytest.raises(IntegrityError) as info:
            c.remember("this write")
        assert str(info.value) == f"{store.path}: the entries of records {[fixed]} are not the puts that made them"
    monkeypatch.undo()
    with MnemoClient(pg.url, OWNER) as again:
        assert sorted(r.content for r in again.query()) == ["another writer's", "before"]
        assert again.get(fixed).content == "another writer's"


def test_a_replaced_read_connection_holds_no_transaction_open(pg: Schema) -> None:
    """The read connection a client makes again, after the server ended the old one, runs each read on
    its own (autocommit), as the first did: no transaction is left open between reads, which would hold
    back compaction (it waits for every older transaction) and VACUUM."""
    with MnemoClient(pg.url, OWNER, lock_timeout=2) as c:
        rec = c.remember("before")
        c.update(rec.id, content="after")
        store: Any = c._store
        terminate(store, store._read.info.backend_pid)
        assert c.get(rec.id).content == "after"  # on a new read connection
        assert c.query()[0].id == rec.id
        open_ones = pg.sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND state LIKE 'idle in transaction%%'")
        assert open_ones == [(0,)]
        c.compact()
        assert [v.version for v in c.history(rec.id)] == [1, 2]


def test_a_cut_off_append_whose_fate_cannot_be_asked_is_a_clear_error(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remember's connection dies with the call in flight, and the fresh connection that would ask
    whether it landed fails too: the call raises StorageError (it neither claims the write nor retries
    it blindly), and once the server answers again the chain holds it at most once."""
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("before")
        store: Any = c._store
        killed = kill_at_append(monkeypatch, store, land=False)
        cannot_ask(monkeypatch, store, when=lambda: killed["done"])
        with pytest.raises(StorageError) as info:
            c.remember("in flight")
        assert str(info.value) == (f"PostgreSQL at {store.path} is unreachable or the connection was lost: "
                                   "server closed the connection unexpectedly")
        monkeypatch.undo()
    with MnemoClient(pg.url, OWNER) as again:
        assert [r.content for r in again.query()] == ["before"]
        assert again.verify().ok


def test_an_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(StorageError, match="unreachable"):
        MnemoClient("postgresql://nobody@127.0.0.1:1/none", OWNER)


def test_a_missing_database_is_a_clear_error(pg: Schema) -> None:
    missing = uri(pg.database.dsn.replace(pg.database.name, "mnemo_no_such_db"))
    with pytest.raises(StorageError, match="mnemo_no_such_db"):
        MnemoClient(missing, OWNER)
    with pytest.raises(NotFound, match="no Mnemo database"):
        MnemoClient(pg.url, OWNER, readonly=True)


# -- the schema's versions ---------------------------------------------------------------------------------


def test_a_newer_schema_is_refused(pg: Schema) -> None:
    MnemoClient(pg.url, OWNER).close()
    pg.sql("UPDATE mnemo_meta SET schema_version = %s", [pg_schema.SCHEMA_VERSION + 1])
    for readonly in (False, True):
        with pytest.raises(StorageError, match="newer than this version of Mnemo understands"):
            MnemoClient(pg.url, OWNER, readonly=readonly)


def test_an_older_schema_is_migrated_by_a_writer_and_refused_by_a_reader(pg: Schema) -> None:
    """A database made at schema version 1 (the tables, without version 2's triggers and settings)."""
    from mnemo.chain.codec import ZERO_HASH, make_entry

    genesis = make_entry(0, time.time_ns(), ZERO_HASH, "genesis", OWNER, {"db_id": b"\x07" * 16, "format": 1})
    with pg.connect(autocommit=False) as conn:
        conn.execute(pg_schema.MIGRATIONS[0])
        conn.execute("INSERT INTO mnemo_meta (schema_version, db_id) VALUES (1, %s)", [b"\x07" * 16])
        conn.execute("INSERT INTO mnemo_entries VALUES (0, 'genesis', %s, %s)", [genesis.raw, genesis.hash])
        conn.execute("INSERT INTO mnemo_head VALUES (true, 0, %s, %s, 0)", [genesis.hash, genesis.ts_ns])
        conn.commit()
    pg.sql("UPDATE mnemo_entries SET op = op")  # no trigger yet
    with pytest.raises(StorageError, match="open it once as a writer to migrate"):
        MnemoClient(pg.url, OWNER, readonly=True)
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 1 to {pg_schema.SCHEMA_VERSION}"]
        c.remember("after the migration")
        assert c.verify().ok
    assert pg.sql("SELECT schema_version FROM mnemo_meta") == [(pg_schema.SCHEMA_VERSION,)]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        pg.sql("UPDATE mnemo_entries SET op = op")
    # what the migrations leave is what a new database has: no routine left behind, none missing
    assert pg.routines() == ROUTINES


def test_a_version_3_database_migrates_and_then_refuses_a_payload_delete(pg: Schema, app_role: AppRole) -> None:
    """Version 3 let any role that may delete payload rows delete them; once the owner has opened it (a
    migration creates functions: the application role cannot), the application role's DELETE is refused,
    its forgets still erase, and the chain is as it was."""
    with MnemoClient(app_role.url, OWNER) as c:
        kept = c.remember("kept")
        gone = c.remember("to be forgotten")
        head = c.verify().head_hash
    undo_version_4(pg)
    app_role.sql("BEGIN; DELETE FROM mnemo_payloads WHERE seq = 1; ROLLBACK")  # version 3: not refused
    with pytest.raises(StorageError) as refused_migration:
        MnemoClient(app_role.url, OWNER)
    assert str(refused_migration.value) == (
        f"PostgreSQL at {pg_store.display_name(app_role.url)} refused: permission denied for schema {pg.name} (a role "
        "with more privileges is needed for this, see docs/POSTGRES.md)")
    assert pg.sql("SELECT schema_version FROM mnemo_meta") == [(3,)]
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 3 to {pg_schema.SCHEMA_VERSION}"]
        assert c.verify().head_hash == head
    assert pg.routines() == ROUTINES
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        app_role.sql("DELETE FROM mnemo_payloads WHERE seq = 1")
    assert str(refused.value).splitlines()[0] == ERASURE_REFUSED.format(1)
    with MnemoClient(app_role.url, OWNER) as c:
        assert c.forget(gone.id) == 1
        assert [r.id for r in c.query()] == [kept.id]
        assert c.verify().ok
    assert [seq for seq, _ in _payloads(pg)] == [1]


# The record ids the erasure guard reads in entries `r` of ops `op`: a put's id, a forget's ids
_IDS = ("ARRAY(SELECT convert_from(i, 'UTF8') FROM (SELECT mnemo_entry_str({r}, 'put', 'id') "
        "WHERE {op} = 'put' UNION ALL SELECT mnemo_forget_ids({r}) WHERE {op} = 'forget') x(i) WHERE i IS NOT NULL)")


def _entry_ids(pg: Schema, raw: bytes, op: str) -> list[str]:
    [(ids,)] = pg.sql("SELECT " + _IDS.format(r="%(r)s::bytea", op="%(op)s::text"), {"r": raw, "op": op})
    return list(ids)


def test_the_schema_reads_the_record_ids_of_an_entry_as_it_is_read(pg: Schema) -> None:
    """mnemo_entry_str and mnemo_forget_ids, which the erasure guard reads the chain with, find what
    decode_entry does, in entries of every integer and string width msgpack gives their fields."""
    from mnemo.chain.codec import make_entry

    MnemoClient(pg.url, OWNER).close()
    ids = [f"r{i}-é" for i in range(17)]  # an array of 16 elements or more has a header of its own
    cases = []
    for seq, agent in itertools.product([0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1],
                                        ["a", "a" * 31, "a" * 32, "é" * 127, "a" * 256, "a" * 65536]):
        body = {"digest": b"\x02" * 32, "id": ids[seq % 17], "scope": "s" * 40, "size": seq, "ver": 2**31}
        cases.append((make_entry(seq, seq, b"\x01" * 32, "put", agent, body), "put"))
        cases.append((make_entry(seq, seq, b"\x03" * 32, "forget", agent, {"ids": ids[: seq % 18]}), "forget"))
    raws = [(e.raw, op) for e, op in cases]
    ids_sql = ("SELECT " + _IDS.format(r="u.r", op="u.op") + " FROM unnest(%s::bytea[], %s::text[]) WITH ORDINALITY "
               "u(r, op, k) ORDER BY k")
    found = pg.sql(ids_sql, [[r for r, _ in raws], [op for _, op in raws]])
    for (entry, op), (got,) in zip(cases, found, strict=True):
        body = decode_entry(entry.raw).body
        assert got == ([body["id"]] if op == "put" else body["ids"]), (entry.seq, len(entry.agent))
    other = {"put": "forget", "forget": "put"}
    assert pg.sql(ids_sql, [[r for r, _ in raws], [other[op] for _, op in raws]]) == [([],)] * len(raws)


def test_the_schema_reads_a_payloads_digest_length_and_tags_as_they_are_read(pg: Schema) -> None:
    """mnemo_payload_summary, which a listing checks a record's tags by without its content, gives the
    payload's SHA-256 and length, and the bytes of exactly the tags decode_record_fields reads, whatever
    the width of the content before them; no tags where the payload is not a salt and three fields."""
    from mnemo.chain.codec import pack_record_fields

    MnemoClient(pg.url, OWNER).close()
    contents: list[str | bytes] = ["", "a" * 31, "é" * 16, "a" * 255, "a" * 256, "a" * 65536, b"", b"x" * 255,
                                   b"x" * 256, b"x" * 65536]
    tag_lists = [[], ["t"], [f"tag-{i}-é" for i in range(16)], ["t" * 300]]
    payloads = [SALT + pack_record_fields(content, tags, {"k": [1, {"n": None}]})
                for content in contents for tags in tag_lists]
    # laid out otherwise: no salt, no fields, two fields, fields cut in the content or the tags, no array
    # (the tags are read as far as they go: what follows them is the client's to find wrong)
    cut = {b"": None, SALT: None, SALT + b"\x92\xa0\x90": None, SALT + b"\x93\xa5abc": None,
           SALT + b"\x93\xa1a\x91": None, SALT + b"\xc1\xa1a": None, SALT + b"\x93\xa1a\x91\xa1t": b"\x91\xa1t"}
    rows = pg.sql("SELECT s FROM unnest(%s::bytea[]) WITH ORDINALITY u(p, k), mnemo_payload_summary(u.p) s ORDER BY k",
                  [payloads + list(cut)])
    for payload, (summary,) in zip(payloads + list(cut), rows, strict=True):
        digest, length, tags = summary
        assert (bytes(digest), int.from_bytes(length, "big")) == (hashlib.sha256(payload).digest(), len(payload))
        if payload in cut:
            assert tags == cut[payload], payload
        else:
            assert list(msgpack.unpackb(tags)) == list(decode_record_fields(payload[16:])[1]), payload[:40]


def _hand_made(body: bytes, op: bytes = b"\xa3put", fields: bytes = b"\x97") -> bytes:
    """An entry's bytes around a body packed by hand: [1, 1, 1, prev, op, "a", body]."""
    return fields + b"\x01\x01\x01\xc4\x20" + b"\x00" * 32 + op + b"\xa1a" + body


@pytest.mark.parametrize(("raw", "op", "ids"), [
    # values of every other kind and width before the key, skipped whole
    (_hand_made(b"\x83\xa1a" + msgpack.packb([[1, {"b": b"x"}], 1.5, None, True, False, -5, -200, -40000, -(2**33),
                                             200, 70000, 2**33, b"x" * 300, b"x" * 70000, "s" * 70000,
                                             list(range(20)), [0] * 70000, {str(i): i for i in range(20)},
                                             {str(i): 0 for i in range(70000)}])
                + b"\xa1e" + msgpack.packb([msgpack.ExtType(i, b"x" * n) for i, n in
                                             enumerate([1, 2, 3, 4, 8, 16, 20, 300, 70000])])
                + b"\xa2id\xa2r1"), "put", ["r1"]),
    (_hand_made(b"\x82\xa1f" + msgpack.packb(1.5, use_single_float=True) + b"\xa2id\xda\x00\x02r2"), "put", ["r2"]),
    # headers wider than they need be: an array of 7 in 16 bits, a map of 1 in 16, a string of 2 in 32
    (_hand_made(b"\xde\x00\x01\xa2id\xdb\x00\x00\x00\x02r3", fields=b"\xdc\x00\x07"), "put", ["r3"]),
    (_hand_made(b"\x81\xa3ids\xdd\x00\x00\x00\x02\xa1x\xd9\x01y", b"\xa6forget"), "forget", ["x", "y"]),
    (_hand_made(b"\x82\xa2id\xa2r1\xa2id\xa2r2"), "put", ["r2"]),  # a key given twice: the last
    (_hand_made(b"\x82\xa3ids\x91\xa1x\xa3ids\x92\xa1y\xa1z", b"\xa6forget"), "forget", ["y", "z"]),  # the last
    (_hand_made(b"\x81\xa3ids\x93\xa1x\x05\xa1y", b"\xa6forget"), "forget", ["x", "y"]),  # not an id: left out
    (_hand_made(b"\x81\xa2id\xa2r1") + b"\x00", "put", []),  # bytes after the entry
    (_hand_made(b"\x81\xa2id\xa2r1", fields=b"\x96"), "put", []),  # six fields
    (_hand_made(b"\x81\xa2id\xa2r1")[:-1], "put", []),  # cut short
    (_hand_made(b"\x81\xa2id\x05"), "put", []),  # an id that is no string
    (_hand_made(b"\x82\xa1a\xc1\xa2id\xa2r1"), "put", []),  # a byte that begins no value
    (_hand_made(b"\x81\xa2id\xd9\xffr1"), "put", []),  # a string longer than what is left
    (_hand_made(b"\x81\xa3ids\xdd\xff\xff\xff\xff\xa1x", b"\xa6forget"), "forget", []),  # 2**32 - 1 ids claimed
    (_hand_made(b"\x81\xa2id\xa2r1", b"\xa6forget"), "put", []),  # an op of another name
    (_hand_made(b"\x91\xa2r1"), "put", []),  # a body that is no map
    (b"\x97", "put", []),
])
def test_the_schema_reads_the_ids_of_hand_made_entries_as_they_are_read(
    pg: Schema, raw: bytes, op: str, ids: list[str]
) -> None:
    MnemoClient(pg.url, OWNER).close()
    assert _entry_ids(pg, raw, op) == ids
    if ids:  # what the entry names when it is read
        body = decode_entry(raw).body
        assert ids == ([body["id"]] if op == "put" else [i for i in body["ids"] if isinstance(i, str)])


def test_two_creators_at_once_make_one_database(pg: Schema) -> None:
    errors: list[BaseException] = []
    heads: list[tuple[int, str]] = []

    def create() -> None:
        try:
            with MnemoClient(pg.url, OWNER) as c:
                heads.append(c.head)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(heads)) == 1 and heads[0][0] == 0


def test_non_admins_see_neither_head_nor_verify(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("owner's")
    with MnemoClient(pg.url, "bob") as b:
        with pytest.raises(PermissionDenied):
            b.head  # noqa: B018
        assert b.stats()["head_seq"] is None and b.stats()["records"] == 0


def test_the_cli_works_on_a_dsn(pg: Schema, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mnemo.cli import main

    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("through the cli", tags=["cli"])
    assert main(["verify", pg.url]) == 0
    assert main(["ls", pg.url, "--json"]) == 0
    assert main(["cat", pg.url, rec.id]) == 0
    assert main(["log", pg.url, "--limit", "1"]) == 0
    dest = tmp_path / "copy.db"
    assert main(["copy", pg.url, str(dest)]) == 0
    out = capsys.readouterr().out
    assert "through the cli" in out and rec.id in out
    assert raws(str(dest)) == raws(pg.url)


def test_the_tree_head_is_the_same_on_both_backends_and_saved_states_are_checked(pg: Schema, tmp_path: Path) -> None:
    from mnemo.storage.postgres.chain import TREE_SAVE_EVERY
    from mnemo.transparency import read_tree

    src = tmp_path / "t.db"
    with MnemoClient(src, OWNER, durability="none") as c:
        with c.transaction():
            for i in range(TREE_SAVE_EVERY + 10):
                c.remember(f"r{i}")
        c.copy_to(pg.url)
        head = c.tree_head()
    with MnemoClient(pg.url, OWNER) as p:
        assert p.tree_head() == head
        p.remember("one more")
        assert p.tree_head()[0] == head[0] + 1
    auditor = read_tree(str(src))  # the auditor's tree, from the file's bytes
    assert (auditor.size, auditor.root()) == head
    saved = pg.sql("SELECT size FROM mnemo_tree")
    assert saved and saved[0][0] == head[0] + 1  # saved on close
    assert verify_db(pg.url).ok
    pg.sql("UPDATE mnemo_tree SET range = %s", [b"\x00" * 8 + b"\x01"])
    report = verify_db(pg.url)
    assert not report.ok and any("mnemo_tree" in p.message for p in report.problems)
    with MnemoClient(pg.url, OWNER) as p:  # a saved state that is no compact range is not used
        assert p.tree_head()[0] == head[0] + 1


def test_mnemo_mcp_and_the_cli_never_print_a_dsns_password(pg: Schema, capsys: pytest.CaptureFixture[str]) -> None:
    """The DSN names the database in what `mnemo mcp` announces on stderr and in every CLI message,
    with its password left out (the server trusts this connection, so any password opens it)."""
    import subprocess
    import sys

    from helpers.procs import subprocess_env

    from mnemo.cli import main

    secret = "s3cret-" + secrets.token_hex(4)
    assert pg.url.startswith("postgresql://postgres@")
    url = pg.url.replace("postgresql://postgres@", f"postgresql://postgres:{secret}@", 1)
    env = {k: v for k, v in subprocess_env().items() if k not in ("MNEMO_AGENT", "MNEMO_MCP_TOKENS")}
    proc = subprocess.run([sys.executable, "-m", "mnemo", "mcp", "--db", url, "--agent", "a"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert secret not in proc.stderr + proc.stdout
    assert "mnemo mcp: serving postgresql://postgres@" in proc.stderr
    for argv in (["verify", url], ["verify", url, "--json"], ["stats", url], ["ls", url, "--json"]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 0, (argv, err)
        assert secret not in out + err, (argv, out)
    missing = url.replace(pg.database.name, pg.database.name + "_missing")
    for argv in (["mcp", "--db", missing, "--agent", "a"], ["ls", missing], ["verify", missing]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code != 0 and err, argv
        assert secret not in out + err, (argv, err)


def test_a_dsn_is_shown_without_its_password() -> None:
    from mnemo.storage.contract import shown_name

    assert shown_name("postgresql://u:pw@h:5/d?options=-csearch_path%3Ds&password=pw2&sslmode=require") == (
        "postgresql://u@h:5/d?options=-csearch_path%3Ds&sslmode=require"
    )
    assert shown_name("postgres://u:p%40ss@h1:5,h2:6/d") == "postgres://u@h1:5,h2:6/d"
    assert shown_name("postgresql:///d?host=/run/pg&PASSWORD=x") == "postgresql:///d?host=/run/pg"
    assert shown_name("postgres://h/d") == "postgres://h/d"
    assert shown_name("/tmp/x:y@z.db") == "/tmp/x:y@z.db"  # a file path is shown as given


def test_a_live_versions_payload_row_deleted_behind_the_stores_back_is_named(pg: Schema) -> None:
    """The payload gone from both places a latest version's is kept (its row, and its record's copy since
    schema version 12)."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        rid = c.remember("kept", tags=["k"]).id
        (seq,) = pg.sql("SELECT seq FROM mnemo_versions WHERE id = %s", [rid])[0]
        with pg.connect() as conn:
            conn.execute("SET session_replication_role = replica")  # no trigger stops this session
            conn.execute("DELETE FROM mnemo_payloads WHERE seq = %s", [seq])
            conn.execute("UPDATE mnemo_records SET raw = NULL, payload = NULL WHERE seq = %s", [seq])
        for read in (lambda: c.get(rid), lambda: c.query(tags=["k"])):
            with pytest.raises(IntegrityError) as refused:
                read()
            assert str(refused.value) == (f"{c._store.path}: the payload of record {rid} version 1 (seq {seq}) is "
                                          "missing, though the record is live")


def test_a_live_versions_entry_row_deleted_behind_the_stores_back_is_named_by_verify(pg: Schema) -> None:
    """A read finds a record's latest entry beside its payload (schema version 10), checked against the
    record's chain hash as before, and does not read mnemo_entries: the entry row a superuser deleted with
    the triggers off is the chain's damage, which verify names, while the record reads as it was written."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        kept = c.remember("kept", tags=["k"])
        c.remember("after it")
        with pg.connect() as conn:
            conn.execute("SET session_replication_role = replica")  # no trigger stops this session
            conn.execute("DELETE FROM mnemo_entries WHERE seq = %s", [kept.seq])
        assert c.get(kept.id) == kept
        assert c.query(tags=["k"]) == [kept]
        report = c.verify()
        assert not report.ok
        assert [(p.kind, p.message) for p in report.problems][:1] == [
            ("seq", "seq jumps from 0 to 2: entry 1 is missing")]
        assert [(p.kind, p.seq) for p in report.problems][1:] == [("link", 2)]


def test_open_postgres_opens_a_writer_unless_told_otherwise(pg: Schema) -> None:
    from mnemo.storage.postgres import open_postgres

    with MnemoClient(pg.url, OWNER, durability="none"):
        pass  # the schema and its genesis
    for kwargs, readonly in (({}, False), ({"readonly": True}, True)):
        store = open_postgres(pg.url, OWNER, **kwargs)  # type: ignore[arg-type]
        try:
            assert store.readonly is readonly
        finally:
            store.close()


# -- psycopg's errors, as the MnemoError a caller can act on --------------------------------------------------


def test_storage_error_maps_each_kind_of_psycopg_error() -> None:
    from psycopg import errors as pg_errors

    where = "postgresql://db.example/mnemo"
    lock = pg_store.storage_error(pg_errors.LockNotAvailable("canceling statement due to lock timeout"), where)
    assert type(lock) is LockTimeout
    assert str(lock) == f"could not take the writer lock on {where} in time: another writer holds it"
    denied = pg_store.storage_error(pg_errors.InsufficientPrivilege("permission denied for table x\nDETAIL"), where)
    assert type(denied) is StorageError
    assert str(denied) == (f"PostgreSQL at {where} refused: permission denied for table x (a role with more "
                           "privileges is needed for this, see docs/POSTGRES.md)")
    lost = pg_store.storage_error(psycopg.OperationalError("server closed the connection\nunexpectedly"), where)
    assert type(lost) is StorageError
    assert str(lost) == f"PostgreSQL at {where} is unreachable or the connection was lost: server closed the connection"
    other = pg_store.storage_error(pg_errors.UndefinedTable(""), where)
    assert type(other) is StorageError and str(other) == f"PostgreSQL at {where} failed: UndefinedTable"
    ours = IntegrityError("already ours")
    assert pg_store.storage_error(ours, where) is ours  # a MnemoError passes through as it is


def test_a_read_whose_fresh_connection_is_lost_too_is_a_clear_error(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read retries once on a fresh connection when the server dropped the old one; if the server drops
    that one as well, the read raises StorageError (and the next read, the server answering again, works)."""
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("kept")
        store: Any = c._store
        real_connect = store._connect

        def connect_then_lose(*args: Any, **kw: Any) -> Any:
            conn = real_connect(*args, **kw)
            terminate(store, conn.info.backend_pid)
            return conn

        terminate(store, store._read.info.backend_pid)
        monkeypatch.setattr(store, "_connect", connect_then_lose)
        with pytest.raises(StorageError) as info:
            c.get(rec.id)
        assert str(info.value).startswith(f"PostgreSQL at {store.path} is unreachable or the connection was lost: ")
        monkeypatch.undo()
        assert c.get(rec.id).content == "kept"


def _delete_rows(pg: Schema, table: str) -> None:
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")  # no trigger stops this session
        conn.execute(f"DELETE FROM {table}")


@pytest.mark.parametrize(("table", "why"), [
    ("mnemo_head", "mnemo_head holds no row"),
    ("mnemo_meta", "mnemo_meta holds no row"),
])
def test_a_schema_missing_its_one_row_does_not_open(pg: Schema, table: str, why: str) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("before")
        path = c._store.path
    _delete_rows(pg, table)
    for readonly in (False, True):
        with pytest.raises(IntegrityError) as info:
            MnemoClient(pg.url, OWNER, readonly=readonly)
        assert str(info.value) == f"{path}: {why}"


def test_a_head_row_before_any_entry_does_not_open(pg: Schema) -> None:
    """A head row that names no entry (seq -1: the chain's state before its genesis) is damage too."""
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("before")
        path = c._store.path
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE mnemo_head SET seq = -1, acl_seq = -1")
    for readonly in (False, True):
        with pytest.raises(IntegrityError) as info:
            MnemoClient(pg.url, OWNER, readonly=readonly)
        assert str(info.value) == f"{path}: the chain holds no genesis entry"
    with pg.connect() as conn:
        assert conn.execute("SELECT count(*) FROM mnemo_entries").fetchone() == (2,)  # untouched


def test_an_open_client_whose_head_row_is_deleted_refuses_to_read_or_write(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("before")
        _delete_rows(pg, "mnemo_head")
        expected = f"{c._store.path}: mnemo_head holds no row"

        def in_a_transaction() -> None:
            with c.transaction():  # takes the head row first
                c.remember("inside")

        for call in (in_a_transaction, lambda: c.get(rec.id), lambda: c.update(rec.id, content="after")):
            with pytest.raises(IntegrityError) as info:
                call()
            assert str(info.value) == expected


def test_a_read_inside_a_transaction_whose_connection_died_is_a_clear_error(pg: Schema) -> None:
    """Reads inside a transaction go through its connection (its view of the head row it holds): if the
    server drops that connection, the read raises StorageError rather than answer from elsewhere, the
    transaction commits nothing, and the client writes again afterwards."""
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("before")
        head = c.head
        with pytest.raises(StorageError) as info, c.transaction():
            c.update(rec.id, content="in the transaction")
            terminate(c._store, c._store._write.info.backend_pid)  # type: ignore[attr-defined]
            c.get(rec.id)
        assert str(info.value).startswith(f"PostgreSQL at {c._store.path} is unreachable or the connection was lost: ")
        assert c.head == head and c.get(rec.id).content == "before"
        assert c.update(rec.id, content="after").version == 2


@pytest.mark.parametrize("ahead", [-1, 0])
def test_the_tree_state_is_saved_once_it_is_a_full_interval_ahead(pg: Schema, ahead: int) -> None:
    """A store saves the compact range of the tree it computed (on close) once it is TREE_SAVE_EVERY
    entries or more ahead of the last one saved, not before."""
    from mnemo.storage.postgres.chain import TREE_SAVE_EVERY

    entries = TREE_SAVE_EVERY + ahead
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        with c.transaction():
            for i in range(entries - 1):  # and the genesis
                c.remember(f"r{i}")
        assert c.tree_head()[0] == entries
    assert pg.sql("SELECT size FROM mnemo_tree") == ([(entries,)] if ahead >= 0 else [])


def test_a_dsn_whose_schema_is_missing_is_a_clear_error_and_creates_nothing(pg: Schema) -> None:
    """A search_path naming a schema that does not exist would have the tables made nowhere (PostgreSQL
    creates in the first schema of the path that exists, or refuses with its own words): refused first."""
    dsn = uri(pg.database.dsn, f"{pg.name}_missing")
    with pytest.raises(StorageError) as info:
        MnemoClient(dsn, OWNER)
    assert str(info.value) == f"{pg_store.display_name(dsn)}: the first schema of the search_path does not exist"
    assert pg.sql(f"SELECT 1 FROM pg_namespace WHERE nspname = '{pg.name}_missing'") == []
    with MnemoClient(pg.url, OWNER) as c:  # the schema of its own is untouched: its first open creates it
        assert c.stats()["head_seq"] == 0


def test_a_saved_tree_range_whose_row_lies_about_its_size_is_not_used(pg: Schema) -> None:
    """mnemo_tree is a cache: a saved range whose own size is not the one its row gives (here one of
    ten leaves filed at size 1, for a chain of three entries) is dropped, and the tree read from the
    entries, which gives the root a store without that row gives."""
    from mnemo.chain.tree import CompactRange

    with MnemoClient(pg.url, OWNER) as c:
        c.remember("one")
        c.remember("two")
        expected = c.tree_head()
    forged = CompactRange()
    forged.add_entries(bytes([i]) * 40 for i in range(10))
    pg.sql("DELETE FROM mnemo_tree")
    pg.sql("INSERT INTO mnemo_tree (size, range) VALUES (1, %s)", [forged.to_bytes()])
    with MnemoClient(pg.url, OWNER, readonly=True) as c:
        assert c.tree_head() == expected == (3, expected[1])


def test_granting_an_application_role_on_a_missing_schema_is_a_clear_error(pg: Schema) -> None:
    role = f"mnemo_app_{secrets.token_hex(4)}"
    pg.sql(f'CREATE ROLE "{role}" LOGIN')
    try:
        dsn = uri(pg.database.dsn, f"{pg.name}_missing")
        with pytest.raises(StorageError) as info:
            grant_application_role(dsn, role)
        assert str(info.value) == f"{pg_store.display_name(dsn)}: the first schema of the search_path does not exist"
    finally:
        pg.sql(f'DROP ROLE "{role}"')


def test_granting_an_application_role_on_a_schema_without_mnemo_tables_grants_nothing(pg: Schema) -> None:
    """All or nothing, in one transaction: the schema's usage granted first is undone with the failed
    grant on a table that is not there."""
    role = f"mnemo_app_{secrets.token_hex(4)}"
    pg.sql(f'CREATE ROLE "{role}" LOGIN')
    try:
        first_table = next(iter(pg_schema.APPLICATION_PRIVILEGES))
        with pytest.raises(StorageError) as info:
            grant_application_role(pg.url, role)
        assert str(info.value) == (f'PostgreSQL at {pg_store.display_name(pg.url)} failed: relation "{first_table}" '
                                   "does not exist")
        assert pg.sql("SELECT has_schema_privilege(%s, %s, 'USAGE')", [role, pg.name]) == [(False,)]
    finally:
        pg.sql(f'DROP OWNED BY "{role}"')
        pg.sql(f'DROP ROLE "{role}"')
