"""What verify of a PostgreSQL database reports when its rows were changed behind the backend's back (by
a superuser, triggers off): each changed column or table gives its own exact finding, and nothing else;
an untouched database gives none."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.pg import Schema
from helpers.pg_text import varied

from mnemo import InvalidInput, MnemoClient, StorageError
from mnemo.audit import verify_db
from mnemo.record import VerifyReport

OWNER = "owner"


def _made(pg: Schema) -> dict[str, Any]:
    """seq 0 genesis, 1 put a, 2 put b, 3 put a v2, 4 forget b."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        a = c.remember("alpha", tags=["t", "u"])
        b = c.remember("beta", tags=["t"])
        c.update(a.id, content="alpha 2", tags=["t", "u"])
        (payload_b,) = pg.sql("SELECT payload FROM mnemo_payloads WHERE seq = 2")[0]
        c.forget(b.id)
    return {"a": a.id, "b": b.id, "payload_b": bytes(payload_b)}


def _tampered(pg: Schema, *statements: str, params: Any = None) -> tuple[dict[str, Any], VerifyReport]:
    made = _made(pg)
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")  # no trigger stops this session
        for statement in statements:
            conn.execute(statement.format(**made), params)
    return made, verify_db(pg.url)


def _found(report: VerifyReport) -> list[tuple[str, str, int | None]]:
    assert not report.ok
    assert all(p.offset is None for p in report.problems)  # rows have no byte offsets
    return [(p.kind, p.message, p.seq) for p in report.problems]


def _tables(message: str) -> tuple[str, str, None]:
    return ("tables", message, None)


def test_an_untouched_database_has_no_findings(pg: Schema) -> None:
    _made(pg)
    report = verify_db(pg.url)
    assert report.ok and report.problems == () and (report.entries, report.head_seq) == (5, 4)
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        assert c.verify() == report


def test_a_stored_hash_that_is_not_the_hash_of_the_bytes(pg: Schema) -> None:
    _, report = _tampered(pg, "UPDATE mnemo_entries SET hash = sha256(raw || 'x') WHERE seq = 1")
    assert _found(report) == [("hash-column", "the stored hash of seq 1 is not SHA-256 of its entry bytes: the "
                                "row was changed after it was written", 1)]
    assert (report.entries, report.head_seq) == (5, 4)


def test_an_entry_that_does_not_decode_is_named_and_the_chain_goes_on_after_it(pg: Schema) -> None:
    _, report = _tampered(pg, "UPDATE mnemo_entries SET raw = '\\xc1'::bytea, hash = sha256('\\xc1'::bytea) "
                          "WHERE seq = 2")
    assert _found(report) == [("bad-entry", "the entry at seq 2 does not decode: entry is not valid msgpack: ", 2)]
    assert (report.entries, report.head_seq) == (4, 4)


def test_an_op_column_that_is_not_the_entrys_op(pg: Schema) -> None:
    _, report = _tampered(pg, "UPDATE mnemo_entries SET op = 'forget' WHERE seq = 1")
    assert _found(report) == [("row", "the row of seq 1 (forget) holds the entry of seq 1 (put)", 1)]


def test_a_seq_column_that_is_not_the_entrys_seq(pg: Schema) -> None:
    _, report = _tampered(pg, "UPDATE mnemo_entries SET seq = 9 WHERE seq = 4", "UPDATE mnemo_entries SET seq = 4 "
                          "WHERE seq = 3", "UPDATE mnemo_entries SET seq = 3 WHERE seq = 9")
    rows = [f for f in _found(report) if f[0] == "row"]
    assert rows == [("row", "the row of seq 3 (forget) holds the entry of seq 4 (forget)", 3),
                    ("row", "the row of seq 4 (put) holds the entry of seq 3 (put)", 4)]


def test_a_live_versions_payload_row_deleted_is_an_erasure_no_forget_names(pg: Schema) -> None:
    made, report = _tampered(pg, "DELETE FROM mnemo_payloads WHERE seq = 3")
    assert _found(report) == [("erased", f"payload of seq 3 (record {made['a']}) is erased, but no later forget "
                               "names the record", 3)]


def test_a_forgets_payload_row_deleted_loses_only_its_reason(pg: Schema) -> None:
    _, report = _tampered(pg, "DELETE FROM mnemo_payloads WHERE seq = 4")
    assert report.ok and report.problems == ()


@pytest.mark.parametrize(("statement", "message"), [
    ("DELETE FROM mnemo_records WHERE id = '{a}'", "record {a} is only in the chain"),
    ("INSERT INTO mnemo_records SELECT '{b}', 'agent:owner', 1, 2, ts_ns, agent, size, hash, entry_len, payload_len "
     "FROM mnemo_records WHERE id = '{a}'", "record {b} is only in mnemo_records"),
    ("UPDATE mnemo_records SET ver = 1 WHERE id = '{a}'",
     "record {a} has another scope or version in mnemo_records than in the chain"),
    ("UPDATE mnemo_records SET scope = 'agent:mallory' WHERE id = '{a}'",
     "record {a} has another scope or version in mnemo_records than in the chain"),
    ("UPDATE mnemo_records SET hash = sha256(hash) WHERE id = '{a}'",
     "record {a} has another latest version in mnemo_records than in the chain (seq 3)"),
    ("UPDATE mnemo_records SET seq = 1, ts_ns = ts_ns - 1 WHERE id = '{a}'",
     "record {a} has another latest version in mnemo_records than in the chain (seq 3)"),
    ("UPDATE mnemo_records SET payload_len = payload_len + 1 WHERE id = '{a}'",
     "record {a} has another latest version in mnemo_records than in the chain (seq 3)"),
    ("UPDATE mnemo_payloads SET raw = raw || '\\x00'::bytea WHERE seq = 3",
     "the payload row of seq 3 holds other entry bytes than the chain's (mnemo_payloads.raw)"),
    ("UPDATE mnemo_records SET payload = payload || '\\x00'::bytea WHERE id = '{a}'",
     "record {a} holds another copy of its latest version's entry or payload than the chain's "
     "(seq 3: mnemo_records.raw, mnemo_records.payload)"),
    ("UPDATE mnemo_records SET raw = (SELECT raw FROM mnemo_entries WHERE seq = 1) WHERE id = '{a}'",
     "record {a} holds another copy of its latest version's entry or payload than the chain's "
     "(seq 3: mnemo_records.raw, mnemo_records.payload)"),
    ("UPDATE mnemo_records SET raw = NULL, payload = NULL WHERE id = '{a}'",
     "record {a} holds another copy of its latest version's entry or payload than the chain's "
     "(seq 3: mnemo_records.raw, mnemo_records.payload)"),
    ("UPDATE mnemo_payloads SET raw = (SELECT raw FROM mnemo_entries WHERE seq = 1) WHERE seq = 3",
     "the payload row of seq 3 holds other entry bytes than the chain's (mnemo_payloads.raw)"),
    ("DELETE FROM mnemo_versions WHERE id = '{a}' AND ver = 1",
     "version 1 of record {a} (seq 1) is missing from mnemo_versions or differs"),
    ("INSERT INTO mnemo_versions SELECT '{b}', 1, 2, ts_ns, agent, size, hash, entry_len, payload_len "
     "FROM mnemo_versions WHERE id = '{a}' AND ver = 1",
     "mnemo_versions holds version 1 of record {b} (seq 2), which the chain does not"),
    ("DELETE FROM mnemo_tags WHERE tag = 'u'", "record {a} is missing from the index of tag 'u'"),
    ("INSERT INTO mnemo_tags VALUES ('v', '{a}')",
     "mnemo_tags lists record {a} under tag 'v', which its latest version does not hold"),
    ("DELETE FROM mnemo_forgotten", "mnemo_forgotten differs from the ids the chain's forgets name"),
    ("INSERT INTO mnemo_forgotten VALUES ('{a}')", "mnemo_forgotten differs from the ids the chain's forgets name"),
    ("UPDATE mnemo_head SET seq = 3", "mnemo_head does not name the last entry of the chain"),
    ("UPDATE mnemo_head SET hash = sha256(hash)", "mnemo_head does not name the last entry of the chain"),
    ("INSERT INTO mnemo_payloads VALUES (77, '\\x00', '\\x00'), (78, '\\x00', '\\x00')",
     "2 payload rows belong to no entry"),
    ("INSERT INTO mnemo_tree VALUES (3, '\\x00')",
     "the tree state saved at size 3 (mnemo_tree) is not the tree over the entries"),
])
def test_a_derived_table_that_differs_from_the_chain(pg: Schema, statement: str, message: str) -> None:
    made, report = _tampered(pg, statement)
    assert _found(report) == [_tables(message.format(**made))]
    assert (report.entries, report.head_seq) == (5, 4)  # the chain itself is sound


def test_a_changed_version_row_is_missing_and_extra(pg: Schema) -> None:
    made, report = _tampered(pg, "UPDATE mnemo_versions SET entry_len = entry_len + 1 WHERE id = '{a}' AND ver = 2")
    assert _found(report) == [
        _tables(f"version 2 of record {made['a']} (seq 3) is missing from mnemo_versions or differs"),
        _tables(f"mnemo_versions holds version 2 of record {made['a']} (seq 3), which the chain does not"),
    ]


def test_a_forgotten_puts_payload_put_back_is_named(pg: Schema) -> None:
    made = _made(pg)
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("INSERT INTO mnemo_payloads SELECT 2, %s, raw FROM mnemo_entries WHERE seq = 2",
                     [made["payload_b"]])
    assert _found(verify_db(pg.url)) == [_tables("the payload of seq 2 is still stored, though a forget names its "
                                                 "record")]


def test_saved_trees_larger_than_the_chain_are_each_named(pg: Schema) -> None:
    _, report = _tampered(pg, "INSERT INTO mnemo_tree VALUES (9, '\\x00'), (12, '\\x00')")
    assert _found(report) == [_tables("mnemo_tree saves a tree of 9 entries, more than the chain holds"),
                              _tables("mnemo_tree saves a tree of 12 entries, more than the chain holds")]


def test_the_tables_are_compared_only_once_the_chain_is_sound(pg: Schema) -> None:
    """A damaged chain says nothing sure about what the tables must hold: only the chain's findings."""
    _, report = _tampered(pg, "UPDATE mnemo_entries SET hash = sha256(raw || 'x') WHERE seq = 1",
                          "DELETE FROM mnemo_records")
    assert [f[0] for f in _found(report)] == ["hash-column"]


def test_progress_reports_the_end_once(pg: Schema) -> None:
    _made(pg)
    calls: list[tuple[int, int]] = []
    with MnemoClient(pg.url, OWNER, durability="none", readonly=True) as c:
        store: Any = c._store
        report = store.verify(None, None, lambda done, total: calls.append((done, total)))
    assert report.ok and calls == [(5, 5)]


@pytest.mark.parametrize("pubkey", [b"k" * 31, b"k" * 33, "k" * 32])
def test_a_public_key_must_be_32_raw_bytes(pg: Schema, pubkey: Any) -> None:
    _made(pg)
    with MnemoClient(pg.url, OWNER, durability="none", readonly=True) as c:
        store: Any = c._store
        with pytest.raises(InvalidInput) as exc:
            store.verify(pubkey, None)
        assert str(exc.value) == "pubkey must be a raw 32-byte Ed25519 public key"
        report = store.verify(b"k" * 32, None)  # a key of the right size is taken, and checked
        assert [(p.kind, p.message) for p in report.problems] == [
            ("unsigned", "no checkpoint in the log is signed by the given key")]



def test_missing_and_extra_version_rows_are_named_in_seq_order(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        a = c.remember("a")  # seq 1: a v1
        c.update(a.id, content="a2")  # seq 2: a v2
        b = c.remember("b")  # seq 3: b v1
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE mnemo_versions SET id = id || 'x'")
    assert _found(verify_db(pg.url)) == [
        _tables(f"version 1 of record {a.id} (seq 1) is missing from mnemo_versions or differs"),
        _tables(f"version 2 of record {a.id} (seq 2) is missing from mnemo_versions or differs"),
        _tables(f"version 1 of record {b.id} (seq 3) is missing from mnemo_versions or differs"),
        _tables(f"mnemo_versions holds version 1 of record {a.id}x (seq 1), which the chain does not"),
        _tables(f"mnemo_versions holds version 2 of record {a.id}x (seq 2), which the chain does not"),
        _tables(f"mnemo_versions holds version 1 of record {b.id}x (seq 3), which the chain does not"),
    ]


def test_at_most_twenty_stored_payloads_of_forgotten_puts_are_named(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        with c.transaction():
            ids = [c.remember(f"r{i}").id for i in range(22)]
        kept = pg.sql("SELECT seq, payload FROM mnemo_payloads ORDER BY seq")
        assert len(kept) == 22
        c.forget(ids)
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        for seq, payload in kept:
            conn.execute("INSERT INTO mnemo_payloads SELECT seq, %s, raw FROM mnemo_entries WHERE seq = %s",
                         [payload, seq])
    found = _found(verify_db(pg.url))
    assert len(found) == 20
    assert {f[1] for f in found} <= {f"the payload of seq {seq} is still stored, though a forget names its record"
                                     for seq, _ in kept}



def test_progress_is_reported_every_4096_entries(pg: Schema, tmp_path: Any) -> None:
    source = tmp_path / "many.db"
    with MnemoClient(source, OWNER, durability="none") as c:
        with c.transaction():
            for i in range(4094):  # with the genesis: 4095 entries
                c.remember(f"r{i}")
        c.copy_to(pg.url)

    def progress_of_verify() -> list[tuple[int, int]]:
        calls: list[tuple[int, int]] = []
        with MnemoClient(pg.url, OWNER, durability="none", readonly=True) as c:
            store: Any = c._store
            assert store.verify(None, None, lambda done, total: calls.append((done, total))).ok
        return calls

    assert progress_of_verify() == [(4095, 4095)]
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        c.remember("4096")
        c.remember("4097")
    assert progress_of_verify() == [(4096, 4097), (4097, 4097)]


def test_a_database_error_during_verify_is_a_storage_error(pg: Schema) -> None:
    _made(pg)
    with MnemoClient(pg.url, OWNER, durability="none", readonly=True) as c:
        pg.sql("DROP TABLE mnemo_tree")
        with pytest.raises(StorageError) as exc:
            c.verify()
        assert "mnemo_tree" in str(exc.value)


def test_version_rows_are_named_in_seq_order_whatever_their_times(pg: Schema, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """Entries of one moment share a time (a clock that did not move, or moved back, gives each the time
    of the last), and a row's ts_ns can be anything someone wrote there: the findings still follow seq."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        import mnemo.storage.batch

        monkeypatch.setattr(mnemo.storage.batch.time, "time_ns", lambda: 1)
        with c.transaction():
            ids = [c.remember(f"m{i}").id for i in range(8)]
        monkeypatch.undo()
    times = pg.sql("SELECT DISTINCT ts_ns FROM mnemo_versions")
    assert len(times) == 1  # one time for all eight
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE mnemo_versions SET id = id || 'x', ts_ns = 100 - seq")
    assert _found(verify_db(pg.url)) == [
        _tables(f"version 1 of record {rid} (seq {n}) is missing from mnemo_versions or differs")
        for n, rid in enumerate(ids, 1)
    ] + [
        _tables(f"mnemo_versions holds version 1 of record {rid}x (seq {n}), which the chain does not")
        for n, rid in enumerate(ids, 1)
    ]


# -- the text index ----------------------------------------------------------------------------------------


def _text_made(pg: Schema) -> dict[str, Any]:
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        made = varied(c)
        a = c.get(made["a"])
        made["seq"] = a.seq
        return made


@pytest.mark.parametrize(("statement", "messages"), [
    ("UPDATE mnemo_terms SET tf = 5 WHERE term = 'beta' AND seq = {seq}",
     ["mnemo_terms gives record {a} (seq {seq}) term 'beta' 5 times, its text holds it 2 times"]),
    ("DELETE FROM mnemo_terms WHERE term = 'alpha' AND seq = {seq}",
     ["record {a} (seq {seq}) is missing from the postings of term 'alpha' (mnemo_terms)"]),
    ("INSERT INTO mnemo_terms VALUES ('planted', {seq}, 1, 3, 'team:a')",
     ["mnemo_terms lists record {a} (seq {seq}) under term 'planted', which its text does not hold"]),
    ("INSERT INTO mnemo_terms VALUES ('alpha', {seq}, 1, 3, 'team:a')",
     ["mnemo_terms lists record {a} (seq {seq}) under term 'alpha' more than once"]),
    ("UPDATE mnemo_terms SET term = 'alpha' WHERE term = 'beta' AND seq = {seq}",
     ["mnemo_terms lists record {a} (seq {seq}) under term 'alpha' more than once",
      "record {a} (seq {seq}) is missing from the postings of term 'beta' (mnemo_terms)"]),
    ("INSERT INTO mnemo_terms VALUES ('alpha', 9999, 1, 3, 'team:a')",
     ["mnemo_terms lists seq 9999 under term 'alpha', which its text does not hold"]),
    ("UPDATE mnemo_docs SET length = 7 WHERE seq = {seq}",
     ["mnemo_docs gives the document of seq {seq} another record, scope or length than the chain (record {a} in "
      "scope 'team:a', 3 terms)"]),
    ("UPDATE mnemo_docs SET scope = 'team:b' WHERE seq = {seq}",
     ["mnemo_docs gives the document of seq {seq} another record, scope or length than the chain (record {a} in "
      "scope 'team:a', 3 terms)"]),
    ("DELETE FROM mnemo_docs WHERE seq = {seq}",
     ["record {a} (seq {seq}) is missing from the text index (mnemo_docs)"]),
    ("INSERT INTO mnemo_docs VALUES (3, 'ghost', 'team:a', 2)",
     ["mnemo_docs indexes seq 3 (record ghost), which is not the latest version of a live record whose content is "
      "text"]),
    ("UPDATE mnemo_text_scopes SET docs = docs + 1 WHERE scope = 'team:a'",
     ["mnemo_text_scopes counts 2 documents of 3 terms in scope 'team:a', the chain 1 of 3"]),
    ("DELETE FROM mnemo_text_scopes WHERE scope = 'team:a'",
     ["mnemo_text_scopes counts 0 documents of 0 terms in scope 'team:a', the chain 1 of 3"]),
    ("UPDATE mnemo_terms SET positions = '\\x00000000' WHERE term = 'beta' AND seq = {seq}",
     ["mnemo_terms gives record {a} (seq {seq}) other positions of term 'beta' than its text has"]),
    ("UPDATE mnemo_terms SET positions = NULL WHERE term = 'alpha' AND seq = {seq}",
     ["mnemo_terms gives record {a} (seq {seq}) other positions of term 'alpha' than its text has"]),
    ("UPDATE mnemo_terms SET scope = 'team:b' WHERE term = 'beta' AND seq = {seq}",
     ["mnemo_terms gives record {a} (seq {seq}) another length or scope under term 'beta' than its document has "
      "(3 terms, scope 'team:a')"]),
])
def test_verify_names_each_row_of_the_text_index_that_the_chain_does_not_give(
    pg: Schema, statement: str, messages: list[str]
) -> None:
    made = _text_made(pg)
    assert verify_db(pg.url).ok
    with pg.connect() as conn:
        conn.execute(statement.format(**made))
    report = verify_db(pg.url)
    assert not report.ok
    assert [(p.kind, p.message) for p in report.problems] == [("tables", m.format(**made)) for m in messages]
