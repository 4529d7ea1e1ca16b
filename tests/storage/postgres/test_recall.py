"""Recall on PostgreSQL: the text index in the database (mnemo_docs, mnemo_terms, mnemo_text_scopes),
written in the transaction of the entry that changes it on both commit paths, gone with a rolled-back
transaction, replaced by an update and deleted by a forget at once, off the disk after compaction, out
of pg_statistic, built by the migration from schema version 4 and by a copy, checked by verify; and the
same ids and scores as the log file's recall over the same chain, whatever the caller may read."""

from __future__ import annotations

import secrets
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.pg import AppRole, Schema
from helpers.pg_faults import damage_payload
from helpers.pg_server import (
    ROUTINES,
    database_directory,
    files_holding,
    undo_version_5,
    undo_version_8,
    undo_version_9,
    undo_version_11,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient, StorageError
from mnemo._native import speedups
from mnemo.audit import verify_db
from mnemo.client import writes as writes_module
from mnemo.errors import IntegrityError
from mnemo.recall import engine
from mnemo.recall.analysis import atoms, terms
from mnemo.recall.query import Phrase, occurrences
from mnemo.storage.postgres import schema as pg_schema
from mnemo.storage.postgres import sql as pg_sql
from mnemo.storage.postgres import text_phrases, text_recall, text_source
from mnemo.storage.postgres.sql import PREFETCH_POSTINGS
from mnemo.storage.postgres.text_index import POSITIONS_MAX, TERM_KEY, pack_places, positions_of
from mnemo.storage.postgres.text_recall import PREFETCH_SLACK

OWNER = "owner"
READER = "reader"


def _index(pg: Schema) -> dict[str, list[tuple[Any, ...]]]:
    """The text index's rows, in order."""
    return {
        "docs": pg.sql("SELECT seq, id, scope, length FROM mnemo_docs ORDER BY seq"),
        "terms": [(seq, term, tf, length, scope, None if places is None else bytes(places)) for seq, term, tf, length,
                  scope, places in pg.sql("SELECT seq, term, tf, length, scope, positions FROM mnemo_terms "
                                          "ORDER BY seq, term")],
        "scopes": pg.sql("SELECT scope, docs, length FROM mnemo_text_scopes ORDER BY scope"),
    }


def _expected(c: MnemoClient) -> dict[str, list[tuple[Any, ...]]]:
    """The rows the index must hold for what the client reads (every live record, for the owner): each
    text record's latest version, its terms counted, with where each stands among the text's atoms (their
    number plus one, then each one's gap from the one before, varints; NULL past POSITIONS_MAX), each
    scope's totals."""
    docs, rows = [], []
    scopes: dict[str, tuple[int, int]] = {}
    for r in sorted(c.query(), key=lambda r: r.seq):
        if not isinstance(r.content, str):
            continue
        found = terms(r.content)
        places = atoms(r.content)
        docs.append((r.seq, r.id, r.scope, len(found)))
        for term, tf in sorted(Counter(found).items()):
            at = [i for i, atom in enumerate(places) if atom == term]
            gaps = [b - a for a, b in zip([0, *at], at, strict=False)]
            packed = None if len(at) > POSITIONS_MAX else _varints(len(at) + 1, *gaps)
            rows.append((r.seq, term, tf, len(found), r.scope, packed))
        n, length = scopes.get(r.scope, (0, 0))
        scopes[r.scope] = (n + 1, length + len(found))
    return {"docs": docs, "terms": rows, "scopes": [(s, n, length) for s, (n, length) in sorted(scopes.items())]}


def _varints(*values: int) -> bytes:
    """Unsigned LEB128: 7 bits a byte, the lowest first, the high bit set on every byte but the last."""
    out = bytearray()
    for value in values:
        while True:
            out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
            value >>= 7
            if not value:
                break
    return bytes(out)


def _xmins(pg: Schema, table: str) -> set[str]:
    return {x for (x,) in pg.sql(f"SELECT DISTINCT xmin::text FROM {table}")}


# -- written with the entry, in its transaction ------------------------------------------------------------


def test_both_commit_paths_write_the_index_in_the_entrys_transaction(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        blind = c.remember("The Quick brown fox, quick_fox and quickFox", scope="team:a")  # mnemo_put
        (put_xmin,) = pg.sql("SELECT xmin::text FROM mnemo_entries WHERE seq = %s", [blind.seq])[0]
        assert _xmins(pg, "mnemo_docs") == _xmins(pg, "mnemo_terms") == {put_xmin}
        with c.transaction():  # mnemo_commit and mnemo_index_text
            c.remember("a second text: the fox again", scope="team:b")
            c.remember(b"bytes are not searched", scope="team:b")
            c.remember("", scope="team:b")  # text of no term: a document of length 0
        (commit_xmin,) = pg.sql("SELECT xmin::text FROM mnemo_entries WHERE seq = %s", [c.head[0]])[0]
        assert _xmins(pg, "mnemo_docs") == _xmins(pg, "mnemo_terms") == {put_xmin, commit_xmin}
        assert _index(pg) == _expected(c)
        assert _index(pg)["docs"][-1][3] == 0
        assert c.verify().ok


def test_a_rolled_back_transaction_leaves_no_index_row(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        kept = c.remember("kept words")
        before = _index(pg)
        with pytest.raises(RuntimeError), c.transaction():
            c.update(kept.id, content="replaced words")
            c.remember("never committed")
            c.forget(kept.id)
            raise RuntimeError("rolled back")
        assert _index(pg) == before == _expected(c)
        assert [h.record.id for h in c.recall("kept")] == [kept.id]
        assert c.recall("never") == c.recall("replaced") == []


def test_a_commit_the_server_refuses_writes_no_index_row(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """A put of an id that exists is refused by the insert of its record, on both commit paths (a
    remember's mnemo_put, a transaction's mnemo_commit): nothing of it is in the index either."""
    with MnemoClient(pg.url, OWNER) as c:
        other = c.remember("other words")
        monkeypatch.setattr(writes_module, "new_id", lambda: "0" * 31 + "1")
        c.remember("first words")
        before = _index(pg)
        with pytest.raises(StorageError, match="mnemo_records_pkey"):
            c.remember("second words")
        with pytest.raises(StorageError, match="mnemo_records_pkey"), c.transaction():
            c.update(other.id, content="third words")
            c.remember("fourth words")
        assert _index(pg) == before == _expected(c)
        assert c.recall("second") == c.recall("third") == c.recall("fourth") == []


def test_an_update_replaces_its_document_in_the_same_commit(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("alpha beta", scope="team:a")
        other = c.remember("alpha", scope="team:a")
        new = c.update(rec.id, content="gamma gamma delta")
        assert c.recall("beta") == []
        assert [h.record.id for h in c.recall("alpha")] == [other.id]
        assert [(h.record.id, h.record.version) for h in c.recall("gamma")] == [(rec.id, 2)]
        assert pg.sql("SELECT count(*) FROM mnemo_terms WHERE seq = %s", [rec.seq]) == [(0,)]
        assert _index(pg) == _expected(c)
        c.update(new.id, content=b"no longer text")
        assert c.recall("gamma") == []
        assert _index(pg) == _expected(c)
        assert pg.sql("SELECT scope, docs FROM mnemo_text_scopes") == [("team:a", 1)]
        assert c.verify().ok


def test_forget_deletes_the_index_rows_in_its_transaction(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        gone = c.remember("forget these words", scope="team:gone")
        c.update(gone.id, content="forget these words again")
        kept = c.remember("keep these words", scope="team:kept")
        c.forget(gone.id)
        (forget_xmin,) = pg.sql("SELECT xmin::text FROM mnemo_entries WHERE seq = %s", [c.head[0]])[0]
        assert pg.sql("SELECT count(*) FROM mnemo_terms t JOIN mnemo_versions v USING (seq) WHERE v.id = %s",
                      [gone.id]) == [(0,)]
        assert [d[1] for d in _index(pg)["docs"]] == [kept.id]
        assert _index(pg)["scopes"] == [("team:kept", 1, 3)]  # team:gone holds no document any more
        assert [h.record.id for h in c.recall("these")] == [kept.id]
        assert c.recall("forget") == []
        assert forget_xmin not in _xmins(pg, "mnemo_docs")
        assert c.verify().ok


def test_forget_then_compact_leaves_no_term_in_the_databases_files(pg: Schema) -> None:
    """The terms are stored folded (lower case), so they are not the payload's bytes: the forgotten
    text's words, a long word (stored out of line, and in the index by its first TERM_KEY characters)
    among them, and a word's positions, are on disk before the forget, and in no file of the database
    after compact."""
    base = database_directory(pg)
    if base is None:
        pytest.skip("the server's data directory is not readable by this user")
    word = "Zq" + secrets.token_hex(8).upper()
    long_word = "Lw" + secrets.token_hex(1500).upper()  # 3,002 characters: beyond a B-tree entry
    # the long word's first characters (the index's key, and its first chunk out of line) and its last ones
    needles = [word.lower().encode(), long_word.lower()[:TERM_KEY].encode(), long_word.lower()[-900:].encode()]
    # and where the word stands among the text's atoms (mnemo_terms.positions)
    placed = "pz" + secrets.token_hex(6)
    text = f"The code {word} and {long_word} " + " ".join(f"{placed} x y" for _ in range(POSITIONS_MAX))
    positions = positions_of(text, [placed])[placed]
    assert positions is not None and len(positions) > POSITIONS_MAX  # (a byte a place at least, and their number)
    needles.append(positions)
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember(text, tags=["secret"])
        kept = c.remember("kept")
        assert [h.record.id for h in c.recall(word)] == [rec.id]
        assert [h.record.id for h in c.recall(long_word[:300] + "*")] == [rec.id]  # a query is 1,000 characters
        pg.sql("CHECKPOINT")
        for needle in needles:
            assert files_holding(base, needle), "the test would prove nothing: the terms are not on disk"
        c.forget(rec.id)
        c.compact()
        pg.sql("CHECKPOINT")
        assert [needle for needle in needles if files_holding(base, needle)] == []
        assert c.get(kept.id).content == "kept" and c.verify().ok


def test_pg_statistic_holds_no_term_after_analyze(pg: Schema) -> None:
    word = "zqstat" + secrets.token_hex(6)
    with MnemoClient(pg.url, OWNER, durability="none") as c, c.transaction():
        for i in range(300):
            c.remember(f"{word} {word}_{i % 3} common text {i}", scope=f"team:{i % 3}")
    relations = pg.sql("SELECT c.oid FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace "
                       "AND c.relname LIKE 'mnemo%'")
    pg.sql("ANALYZE")
    sampled = pg.sql("SELECT s.starelid::regclass::text, concat_ws(' ', s.stavalues1::text, s.stavalues2::text, "
                     "s.stavalues3::text, s.stavalues4::text, s.stavalues5::text) FROM pg_statistic s "
                     "WHERE s.starelid = ANY(%s)", [[oid for (oid,) in relations]])
    assert any(table.endswith("mnemo_docs") for table, _values in sampled)  # ANALYZE did sample the tables
    assert [(table, values) for table, values in sampled if word in values] == []
    assert pg.sql("SELECT tablename, attname FROM pg_stats WHERE schemaname = current_schema() "
                  "AND (tablename = 'mnemo_terms' AND attname IN ('term', 'positions') "
                  "OR tablename = 'mnemo_terms_term')") == []


# -- built for what is there: the migration, a copy -----------------------------------------------------------


def _varied(c: MnemoClient) -> dict[str, str]:
    """Records of every kind: text in several scopes, bytes, an update, a forget, a long word."""
    a = c.remember("alpha beta gamma", scope="team:a", tags=["x"])
    b = c.remember("beta delta snake_case " + "Long" * 100, scope="team:b")
    c.remember(b"bytes alpha", scope="team:a")
    c.update(a.id, content="alpha beta beta")
    gone = c.remember("alpha forgotten", scope="team:a")
    c.forget(gone.id)
    return {"a": a.id, "b": b.id}


def test_a_version_4_database_migrates_and_builds_the_index(pg: Schema, app_role: AppRole) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        made = _varied(c)
        built = _index(pg)
        assert built == _expected(c)
        head = c.verify().head_hash
    undo_version_5(pg)
    assert pg.sql("SELECT to_regclass('mnemo_terms') IS NULL") == [(True,)]
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 4 to {pg_schema.SCHEMA_VERSION}"]
        assert _index(pg) == built
        assert c.verify().ok and c.verify().head_hash == head
    assert pg.routines() == ROUTINES
    # the application role, granted before the tables existed, writes and reads the index they hold
    with MnemoClient(app_role.url, OWNER) as c:
        assert [h.record.id for h in c.recall("beta")] == [made["a"], made["b"]]
        c.remember("written by the application role", scope="team:b")
        c.update(made["b"], content="updated by it")
        c.forget(made["a"])
        assert _index(pg) == _expected(c)
        assert c.verify().ok


def test_a_migration_leaves_out_a_payload_that_is_not_its_puts(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        made = _varied(c)
    undo_version_5(pg)
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE mnemo_payloads SET payload = set_byte(payload, 0, get_byte(payload, 0) # 1) "
                     "WHERE seq = (SELECT v.seq FROM mnemo_versions v JOIN mnemo_records r USING (id, ver) "
                     "WHERE r.id = %s)", [made["b"]])
    with MnemoClient(pg.url, OWNER) as c:
        assert [d[1] for d in _index(pg)["docs"]] == [made["a"]]
        assert not c.verify().ok


def test_a_copy_builds_the_index(pg: Schema, tmp_path: Path) -> None:
    src = str(tmp_path / "src.db")
    with MnemoClient(src, OWNER) as c:
        _varied(c)
        report = c.copy_to(pg.url)
        assert report.ok
    with MnemoClient(pg.url, OWNER) as c:
        assert _index(pg) == _expected(c)


def test_a_version_8_database_migrates_to_phrases_read_from_positions(pg: Schema, app_role: AppRole) -> None:
    """Version 9 adds mnemo_terms.positions, held by the terms' index too, and mnemo_index_text and
    mnemo_put take them: the rows already there are written again with their positions, recall answers as
    before, and the application role writes and forgets through the new routines."""
    with MnemoClient(pg.url, OWNER) as c:
        made = _varied(c)
        c.remember("gamma alpha beta " * (POSITIONS_MAX + 1) + "delta alpha", scope="team:c")  # (no positions kept)
        built = _index(pg)
        assert built == _expected(c)
        answers = _answers(c, "id")
        assert sum(map(len, answers)) > 20
    undo_version_9(pg)
    assert pg.sql("SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() "
                  "AND table_name = 'mnemo_terms' AND column_name = 'positions'") == [(0,)]
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 8 to {pg_schema.SCHEMA_VERSION}"]
        assert _index(pg) == built
        (definition,) = pg.sql("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                               "AND indexname = 'mnemo_terms_term'")[0]
        assert definition.endswith("USING btree (key, scope) INCLUDE (seq, tf, length, positions)")
        assert pg.sql("SELECT attstattarget, attstorage FROM pg_attribute WHERE attrelid = 'mnemo_terms'::regclass "
                      "AND attname = 'positions'") == [(0, "e")]
        assert _answers(c, "id") == answers
        assert c.verify().ok
    with MnemoClient(app_role.url, OWNER) as c:
        c.remember("beta alpha written after the migration", scope="team:b")
        c.update(made["b"], content="alpha beta updated after it")
        c.forget(made["a"])
        with c.transaction():
            c.remember("and alpha beta in a transaction", scope="team:a")
        assert _index(pg) == _expected(c)
        assert sorted(h.record.content for h in c.recall('"alpha beta" -gamma')) == [
            "alpha beta updated after it", "and alpha beta in a transaction"]
        assert c.verify().ok


def test_a_version_10_database_migrates_to_positions_packed_smaller(pg: Schema, app_role: AppRole) -> None:
    """Version 11 packs each term's positions as varints (text_index.pack_places) where version 9 packed
    4 bytes each: the rows of a version-10 database are written again so, and recall answers as before
    (phrases, from the positions, among them), then writes and forgets through the same routines."""
    with MnemoClient(pg.url, OWNER) as c:
        made = _varied(c)
        c.remember("gamma alpha beta " * (POSITIONS_MAX + 1) + "delta alpha", scope="team:c")  # (no positions kept)
        c.remember("alpha " + "filler " * 200 + "alpha beta", scope="team:a")  # (a gap of two bytes)
        built = _index(pg)
        assert built == _expected(c)
        answers = _answers(c, "id")
        assert sum(map(len, answers)) > 20
        phrases = [[(h.record.id, h.score) for h in c.recall(query)]
                   for query in ('"alpha beta"', '"beta gamma"', '"alpha filler"', '"filler alpha beta"')]
        assert all(phrases)
    undo_version_11(pg)
    assert pg.sql("SELECT positions FROM mnemo_terms WHERE term = 'alpha' AND seq = %s",
                  [made_seq(pg, made["a"])]) == [(b"\x00\x00\x00\x00",)]  # (version 9's packing)
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 10 to {pg_schema.SCHEMA_VERSION}"]
        assert _index(pg) == built
        assert pg.sql("SELECT positions FROM mnemo_terms WHERE term = 'alpha' AND seq = %s",
                      [made_seq(pg, made["a"])]) == [(pack_places([0]),)]
        assert _answers(c, "id") == answers
        assert [[(h.record.id, h.score) for h in c.recall(query)]
                for query in ('"alpha beta"', '"beta gamma"', '"alpha filler"', '"filler alpha beta"')] == phrases
        assert c.verify().ok
    with MnemoClient(app_role.url, OWNER) as c:
        _write_after_migration(pg, c, made, "alpha beta")
        assert c.verify().ok


def _write_after_migration(pg: Schema, c: MnemoClient, made: dict[str, str], words: str) -> None:
    """A remember, an update and a forget after a migration, each writing the index as the chain says."""
    c.remember(f"{words} written after the migration", scope="team:b")
    c.update(made["b"], content=f"{words} updated after it")
    c.forget(made["a"])
    assert _index(pg) == _expected(c)


def made_seq(pg: Schema, rec_id: str) -> int:
    """The seq of the document of record `rec_id`."""
    ((seq,),) = pg.sql("SELECT seq FROM mnemo_docs WHERE id = %s", [rec_id])
    return int(seq)


def test_a_phrase_is_decided_from_positions_and_only_its_hits_are_read(pg: Schema, tmp_path: Path) -> None:
    """The documents holding every word of a phrase are ranked from the words' positions: only the hits'
    texts are read, with the scores of the log file's recall (which reads every candidate's text); a
    document whose positions of a word are not kept is read for it."""
    texts = [f"alpha beta {i}" if i % 3 else f"beta alpha {i} alpha" for i in range(30)]
    texts += ["alpha beta " * (POSITIONS_MAX + 1), "beta " * (POSITIONS_MAX + 1) + "alpha"]
    with MnemoClient(pg.url, OWNER, durability="none") as p, MnemoClient(str(tmp_path / "f.db"), OWNER) as f:
        for c in (p, f):
            with c.transaction():
                for text in texts:
                    c.remember(text)
        for query in ('"alpha beta"', '"beta alpha" -"alpha beta"', '"beta beta" alpha', '"alpha gamma"'):
            _same([[(h.record.content, h.score) for h in p.recall(query, limit=3)]],
                  [[(h.record.content, h.score) for h in f.recall(query, limit=3)]])
        sent = _sent(p, lambda: p.recall('"alpha beta"', limit=3))
        # the index (with the positions), then the texts of the two documents whose positions are not all
        # kept, then the hits not among them: five texts at most, of the 32 documents holding both words
        assert 2 <= len(sent) <= 3
        assert sorted(sent[1][1][0]) == [r.seq for r in p.query()][-2:]
        assert sum(len(params[0]) for _sql, params in sent[1:]) <= 5
        hits = p.recall('"beta beta"', limit=3)  # its one document's positions of "beta" are not kept
        assert [h.record.content for h in hits] == [texts[-1]]
        assert p.verify().ok


def test_positions_written_by_hand_leave_the_phrase_to_the_texts(pg: Schema, tmp_path: Path) -> None:
    """Positions that do not decode (a count of places beyond the bytes), or that are wrong, are the index's
    doing: the phrase is found as the texts have it (the hits are checked against them), and verify names
    the rows."""
    texts = ["alpha beta gamma", "beta alpha", "alpha beta alpha beta", "gamma alpha"]
    with MnemoClient(pg.url, OWNER) as p, MnemoClient(str(tmp_path / "f.db"), OWNER) as f:
        for c in (p, f):
            for text in texts:
                c.remember(text)
        want = [(h.record.content, h.score) for h in f.recall('"alpha beta"')]
        pg.sql("UPDATE mnemo_terms SET positions = '\\x0500' WHERE term = 'alpha' AND seq = "
               "(SELECT min(seq) FROM mnemo_docs)")
        _same([[(h.record.content, h.score) for h in p.recall('"alpha beta"')]], [want])
        pg.sql("UPDATE mnemo_terms SET positions = '\\x0201' WHERE term = 'alpha'")
        # every document's "alpha" said to stand second: the first is found by none, nor is a false one served
        assert {h.record.content for h in p.recall('"alpha beta"')} <= {text for text, _score in want}
        assert not p.verify().ok


def test_a_version_7_database_migrates_to_postings_read_from_the_index(pg: Schema, app_role: AppRole) -> None:
    """Version 8 adds mnemo_terms.key (generated from the term) and replaces the terms' index by one on (key,
    scope) that holds the postings: the rows already there get their keys, recall answers as before, and
    the application role writes and forgets through the new index."""
    with MnemoClient(pg.url, OWNER) as c:
        made = _varied(c)
        built = _index(pg)
        answers = _answers(c, "id")
        assert sum(map(len, answers)) > 20
    undo_version_8(pg)
    assert pg.sql("SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() "
                  "AND table_name = 'mnemo_terms' AND column_name = 'key'") == [(0,)]
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 7 to {pg_schema.SCHEMA_VERSION}"]
        assert _index(pg) == built
        assert pg.sql("SELECT count(*), count(*) FILTER (WHERE key = left(term, %s)) FROM mnemo_terms",
                      [TERM_KEY]) == [(len(built["terms"]),) * 2]
        (definition,) = pg.sql("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                               "AND indexname = 'mnemo_terms_term'")[0]
        assert definition.endswith("USING btree (key, scope) INCLUDE (seq, tf, length, positions)")
        assert pg.sql("SELECT attstattarget FROM pg_attribute WHERE attrelid = 'mnemo_terms'::regclass "
                      "AND attname IN ('term', 'key', 'positions')") == [(0,), (0,), (0,)]
        assert _answers(c, "id") == answers
        assert c.verify().ok
    with MnemoClient(app_role.url, OWNER) as c:
        _write_after_migration(pg, c, made, "beta")
        assert [h.record.content for h in c.recall("beta")] == [
            "beta updated after it", "beta written after the migration"]
        assert c.verify().ok


# -- verify ---------------------------------------------------------------------------------------------------


def _made(pg: Schema) -> dict[str, Any]:
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        made = _varied(c)
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
    made = _made(pg)
    assert verify_db(pg.url).ok
    with pg.connect() as conn:
        conn.execute(statement.format(**made))
    report = verify_db(pg.url)
    assert not report.ok
    assert [(p.kind, p.message) for p in report.problems] == [("tables", m.format(**made)) for m in messages]


def test_a_term_row_the_application_role_adds_finds_nothing(pg: Schema, app_role: AppRole) -> None:
    """A row that gives a record a term its text does not hold, or moves a document into a scope a reader
    may read, makes no recall serve it: the hit is read and checked, and left out (verify names the row)."""
    with MnemoClient(app_role.url, OWNER) as c:
        c.grant(READER, "team:a", ["read"])
        made = _varied(c)
        secret = c.remember("secret plans", scope="team:b")
    app_role.sql("INSERT INTO mnemo_terms SELECT 'planted', seq, 1, length, scope FROM mnemo_docs WHERE id = %s",
                 [made["a"]])
    moved = "(SELECT seq FROM mnemo_docs WHERE id = %s)"  # the secret's postings, into the reader's scope
    app_role.sql(f"INSERT INTO mnemo_terms SELECT term, seq, tf, length, 'team:a' FROM mnemo_terms WHERE seq = {moved}",
                 [secret.id])
    app_role.sql(f"DELETE FROM mnemo_terms WHERE scope = 'team:b' AND seq = {moved}", [secret.id])
    with MnemoClient(app_role.url, READER) as r:
        assert r.recall("planted") == []
        assert r.recall("secret plans") == []
    with MnemoClient(app_role.url, OWNER) as c:
        assert c.recall("planted") == []
        assert [h.record.id for h in c.recall("secret")] == [secret.id]
        assert not c.verify().ok


# -- the same answers as the log file ------------------------------------------------------------------------

QUERIES = [
    "alpha", "beta", "alpha beta", "beta -gamma", '"alpha beta"', '"beta beta"', "al*", "be* -alpha", "snake",
    "snake_case", '"snake case"', "long*", "Long" * 100, "東京", "café", "nothing", '"beta alpha" delta', "-sna* beta",
    "state-of-the-art", "de*", "ga* gamma",
]
FILTERS: list[dict[str, Any]] = [
    {}, {"tags": ["x"]}, {"any_tags": ["x", "y"]}, {"scope": "team:a"}, {"scope": "team:*"}, {"limit": 2},
]


def _write(c: MnemoClient) -> None:
    """The same writes on any database: the ids differ between databases, the order does not."""
    c.grant(READER, "team:a", ["read"])
    c.grant(READER, "team:pub*", ["read"])
    words = ["alpha", "beta", "gamma", "delta", "alphabet", "betamax", "snake_case", "東京都に行く", "Café"]
    made = []
    for i in range(40):
        text = " ".join(words[(i * k + 3) % len(words)] for k in range(1, 2 + i % 6))
        if i % 9 == 0:
            text += " state of the art, state-of-the-art " + "Long" * 100
        if i % 10 == 5:  # (more places than positions are kept for: the phrases are found in the text)
            text += " beta alpha" * 40 + " alpha beta" * 30
        scope = ["team:a", "team:b", "team:pub", "team:public", f"agent:{OWNER}"][i % 5]
        tags = [["x"], ["y"], [], ["x", "z"]][i % 4]
        made.append(c.remember(text if i % 13 else text.encode(), scope=scope, tags=tags))
    for rec in made[::7]:
        c.update(rec.id, content=f"{rec.content!s} beta gamma alpha beta")
    c.forget([rec.id for rec in made[3::11]])


def _answers(c: MnemoClient, by: str) -> list[list[tuple[Any, float]]]:
    out = []
    for query in QUERIES:
        for options in FILTERS:
            out.append([(getattr(h.record, by), h.score) for h in c.recall(query, **options)])
    return out


def _same(left: list[list[tuple[Any, float]]], right: list[list[tuple[Any, float]]]) -> None:
    assert [[key for key, _ in hits] for hits in left] == [[key for key, _ in hits] for hits in right]
    for hits_l, hits_r in zip(left, right, strict=True):
        for (_, score_l), (_, score_r) in zip(hits_l, hits_r, strict=True):
            assert score_l == pytest.approx(score_r, abs=1e-9)


@pytest.fixture
def copied(pg: Schema, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A log file of _write's records and its copy on PostgreSQL: the same chain, the same ids."""
    src = str(tmp_path / "recall.db")
    with MnemoClient(src, OWNER, durability="none") as c:
        _write(c)
        assert c.copy_to(pg.url).ok
    yield src, pg.url


@pytest.mark.parametrize("agent", [OWNER, READER])
def test_recall_gives_the_ids_and_scores_of_the_log_file(copied: tuple[str, str], agent: str) -> None:
    """The same chain on both backends (a copy): the same ids, in the same order, with the same scores,
    for the owner and for a reader of some scopes only (whose statistics leave the others out)."""
    src, url = copied
    with MnemoClient(src, agent) as f, MnemoClient(url, agent) as p:
        answers = _answers(f, "id")
        assert sum(map(len, answers)) > 100
        _same(_answers(p, "id"), answers)


def test_recall_stays_the_log_files_as_both_go_on_writing(copied: tuple[str, str]) -> None:
    src, url = copied
    with MnemoClient(src, OWNER, durability="none") as f, MnemoClient(url, OWNER) as p:
        for c in (f, p):
            ids = [r.id for r in c.query(scope="team:a")]
            c.update(ids[0], content="alpha alpha alpha")
            c.forget(ids[1])
            c.remember("beta on both", scope="team:public")
            c.remember("gamma, written by the same call", scope="team:b")
        _same(_answers(p, "content"), _answers(f, "content"))
        with f.transaction(), p.transaction():  # each sees its own writes, over the committed index
            for c in (f, p):
                ids = [r.id for r in c.query(scope="team:a")]
                c.update(ids[0], content="delta in a transaction")
                c.forget(ids[1])
                c.remember("alpha in a transaction", scope="team:public")
            _same(_answers(p, "content"), _answers(f, "content"))
        with MnemoClient(src, READER) as fr, MnemoClient(url, READER) as pr:
            _same(_answers(pr, "content"), _answers(fr, "content"))


@pytest.mark.parametrize("agent", [OWNER, READER])
def test_recall_gives_the_same_floats_with_numpy_and_without(
    copied: tuple[str, str], agent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With numpy, the postings read are scored in bulk (engine.search_packed); without it, one by one
    (engine.scored): the same ids in the same order, with scores equal to the last bit. (Fewer postings
    than text_source.BULK are scored one by one with numpy too: here every recall is scored in bulk.)"""
    _src, url = copied
    bulk: list[int] = []
    packed = engine.search_packed

    def counted(*args: Any, **kwargs: Any) -> Any:
        bulk.append(1)
        return packed(*args, **kwargs)

    monkeypatch.setattr(engine, "search_packed", counted)
    with MnemoClient(url, agent) as p:
        p.recall("alpha")  # (one with fewer postings than BULK: one by one)
        assert not bulk
        monkeypatch.setattr(text_source, "BULK", 0)
        with_numpy = _answers(p, "id")
        assert len(bulk) == len(QUERIES) * len(FILTERS)  # every recall, in bulk
        monkeypatch.setattr(engine, "installed", lambda: False)
        without = _answers(p, "id")
    assert sum(map(len, with_numpy)) > 100
    assert without == with_numpy


def test_a_posting_written_twice_by_hand_scores_alike_with_numpy_and_without(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A term's postings listing a document twice (a row the application role could add): the later row
    counts, with numpy or without, and the document counts once in the term's document frequency."""
    with MnemoClient(pg.url, OWNER) as c:
        _write(c)
        pg.sql("INSERT INTO mnemo_terms (term, seq, tf, length, scope) SELECT term, seq, tf + 2, length, scope "
               "FROM mnemo_terms WHERE term IN ('beta', 'alphabet')")
        queries = [("beta", {}), ("al*", {}), ("beta alpha*", {"limit": 3}), ("be*", {"tags": ["x"]})]
        with_numpy = [[(h.record.id, h.score) for h in c.recall(q, **options)] for q, options in queries]
        monkeypatch.setattr(engine, "installed", lambda: False)
        without = [[(h.record.id, h.score) for h in c.recall(q, **options)] for q, options in queries]
        assert all(with_numpy) and without == with_numpy
        assert not c.verify().ok


def test_the_same_writes_on_both_backends_recall_alike(pg: Schema, tmp_path: Path) -> None:
    """Written through each backend's own commit paths (mnemo_put and mnemo_commit on PostgreSQL), not
    copied: the same contents and scores."""
    with MnemoClient(str(tmp_path / "f.db"), OWNER, durability="none") as f, MnemoClient(pg.url, OWNER) as p:
        for c in (f, p):
            _write(c)
        _same(_answers(p, "content"), _answers(f, "content"))
    with MnemoClient(str(tmp_path / "f.db"), READER) as f, MnemoClient(pg.url, READER) as p:
        _same(_answers(p, "content"), _answers(f, "content"))


# -- how it reads -----------------------------------------------------------------------------------------------


def _sent(c: MnemoClient, read: Callable[[], Any]) -> list[tuple[str, Any]]:
    """The statements (with their parameters) `read` sends on the store's read connection."""
    conn: Any = c._store._read  # type: ignore[attr-defined]
    execute, sent = conn.execute, []

    def spy(query: Any, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        sent.append((str(query), params))
        return execute(query, params, *args, **kwargs)

    conn.execute = spy
    try:
        read()
    finally:
        del conn.execute
    return sent


def _statements(c: MnemoClient, query: str) -> list[str]:
    return [sql for sql, _params in _sent(c, lambda: c.recall(query))]


def test_a_recall_reads_the_index_in_one_statement_and_its_hits_in_one_more(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        with c.transaction():
            for i in range(50):
                c.remember(f"alpha beta {i} alphabet", tags=[f"t{i % 3}"])
        # the index, which brings the head (read_fresh), then the hits
        for query in ("alpha al* -beta7 gamma", '"alpha beta"', "nothing"):
            sent = _statements(c, query)
            assert sent[0].startswith("SELECT hd.packed, q.* FROM (SELECT int8send(seq) || int8send(ts_ns) || "
                                      "int8send(acl_seq) || hash AS packed FROM mnemo_head LIMIT 1) hd ")
            assert "mnemo_terms" in sent[0]
            assert len(sent) == (1 if query == "nothing" else 2)


def test_the_index_is_read_by_key_without_statistics(pg: Schema) -> None:
    """On tables the planner has no statistics of, each term is found by its index (and, with tags, each
    document by its key): no sequential scan of the terms or the documents."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        c.grant(READER, "team:1", ["read"])
        for start in range(0, 2000, 500):
            with c.transaction():
                for i in range(start, start + 500):
                    c.remember(f"common words {i} w{i % 50} rare{i}", scope=f"team:{i % 7}", tags=[f"g{i % 5}"])
        assert pg.sql("SELECT count(*) FROM pg_stats WHERE schemaname = current_schema()") == [(0,)]
        with MnemoClient(pg.url, READER) as r:
            for client, query, options in ((c, "rare7", {}), (c, "w7", {"tags": ["g2"]}), (r, "rare8 w1*", {}),
                                           (c, '"words 17"', {"scope": "team:3"})):
                sent = _sent(client, lambda client=client, query=query, options=options: client.recall(
                    query, **options))
                index_reads = [(sql, params) for sql, params in sent if "mnemo_terms" in sql]
                assert len(index_reads) == 1
                plan = str(c._store._fetch("EXPLAIN " + index_reads[0][0], index_reads[0][1]))  # type: ignore[attr-defined]
                assert "Seq Scan on mnemo_terms" not in plan and "Seq Scan on mnemo_docs" not in plan, plan


def test_a_query_of_few_postings_reads_its_hits_with_the_index(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Words and prefixes of PREFETCH_POSTINGS postings at most: the best documents' records come with the
    index, ranked by the server, in one statement; the hits and scores are those of the hits read apart
    (the owner's and a reader's, whose corpus is one scope). More postings, an excluded word, a phrase,
    tags or an open transaction: the hits are read apart. Where the server's best are not the ranking's,
    those missing are read in one more statement, and the answer is the same."""
    with MnemoClient(pg.url, OWNER, durability="none") as c, MnemoClient(pg.url, READER) as r:
        c.grant(READER, "team:1", ["read"])
        with c.transaction():
            for i in range(PREFETCH_POSTINGS + 10):
                rare = f" rare rare{i % 3}" * (1 + i % 4) if i % 11 == 0 else ""
                c.remember(f"common words {i} w{i % 50}{rare}", scope=f"team:{i % 3}", tags=[f"g{i % 2}"])
        r.recall("common")  # (a recall that finds a newer ACL reads again)

        def answer(client: MnemoClient, query: str, **options: Any) -> tuple[list[tuple[str, float]], int]:
            found: list[Any] = []
            sent = _sent(client, lambda: found.extend(client.recall(query, **options)))
            return [(h.record.id, h.score) for h in found], len(sent)

        def apart(client: MnemoClient, query: str, **options: Any) -> list[tuple[str, float]]:
            with monkeypatch.context() as m:
                m.setattr(text_recall, "PREFETCH_MAX", 0)
                found, sent = answer(client, query, **options)
            assert sent == 2
            return found

        for client in (c, r):
            for query, options in (("rare", {}), ("rare1 rare2", {}), ("rare1*", {}), ("rar* w7", {"limit": 3}),
                                   ("rare", {"limit": 1}), ("rare", {"scope": "team:1"})):
                found, sent = answer(client, query, **options)
                assert found and (sent, found) == (1, apart(client, query, **options)), (query, options)
            for query, options in (("common", {}), ("rare -rare0", {}), ('"rare rare1"', {}),
                                   ("rare", {"tags": ["g1"]})):
                if client is r and query == "common":
                    continue  # (the reader's corpus, a third of the documents, holds fewer postings of it)
                found, sent = answer(client, query, **options)
                assert sent == 2 and found == apart(client, query, **options), (query, options)
        expected = [h.score for h in c.recall("rare")]
        asked: list[int] = []

        def recall_sql(*args: Any) -> tuple[str, list[Any]]:
            asked.append(args[-1])
            return pg_sql.recall_sql(*args)

        monkeypatch.setattr(text_recall, "recall_sql", recall_sql)
        with c.transaction():  # (its reads are on its own connection)
            assert [h.score for h in c.recall("rare")] == expected and asked == [0]
        # a word found with more postings than that is not counted again while it keeps them
        c.recall("common")
        c.recall("rare")
        assert asked == [0, 0, 10 + PREFETCH_SLACK]
        with MnemoClient(pg.url, OWNER) as fresh:
            fresh.recall("common")
            fresh.recall("common")
        assert asked[3:] == [10 + PREFETCH_SLACK, 0]
        monkeypatch.undo()
        # the server's order turned round: its best are the worst, and the best are read in one more
        monkeypatch.setattr(pg_sql, "_best_sql", _worst_first(pg_sql._best_sql))
        for client in (c, r):
            found, sent = answer(client, "rare", limit=4)
            assert sent == 2 and found == apart(client, "rare", limit=4)


def test_a_damaged_record_read_with_the_index_is_refused_only_when_it_is_a_hit(pg: Schema) -> None:
    """The statement reads `limit` + PREFETCH_SLACK records with the index; each is checked when it is a
    hit: one ranked past `limit` whose payload was damaged changes nothing, and refuses the recall that
    would serve it, as the hits read apart do."""
    with MnemoClient(pg.url, OWNER) as c:
        best = c.remember("rare rare rare")
        second = c.remember("rare rare and more")
        third = c.remember("rare and many more words besides")
        expected = [(h.record.id, h.score) for h in c.recall("rare")]
        assert [rec_id for rec_id, _score in expected] == [best.id, second.id, third.id]
        refusal = damage_payload(pg, c._store.path, third.seq)  # type: ignore[attr-defined]
        sent = _sent(c, lambda: c.recall("rare", limit=1))
        assert len(sent) == 1 and [(h.record.id, h.score) for h in c.recall("rare", limit=1)] == expected[:1]
        with pytest.raises(IntegrityError) as refused:
            c.recall("rare")
        assert str(refused.value) == refusal


def _worst_first(best_sql: Callable[..., tuple[str, list[Any]]]) -> Callable[..., tuple[str, list[Any]]]:
    def worst_sql(*args: Any) -> tuple[str, list[Any]]:
        sql, params = best_sql(*args)
        return sql.replace(" DESC", " ASC"), params
    return worst_sql


def test_the_index_read_is_planned_once_whatever_the_words(pg: Schema) -> None:
    """The statement that reads the index is planned for its values ten times (psycopg prepares it at its
    sixth run, and the server plans a prepared statement for its values five times), and from then on the
    server keeps one plan for any words (a generic plan): its
    parameters are read through subqueries whose values the planner does not look at, so no plan for
    given values costs less. The plans of the tests above, made for given values, are that plan."""
    with MnemoClient(pg.url, OWNER, durability="none") as c, MnemoClient(pg.url, READER) as r:
        c.grant(READER, "team:1", ["read"])
        with c.transaction():
            for i in range(300):
                c.remember(f"common words {i} w{i % 50} rare{i}", scope=f"team:{i % 7}")
        for client in (c, r):
            for i in range(14):
                assert client.recall(f"rare{i * 7 + 1} w{i}*")  # one statement, other words each time
            plans = client._store._fetch(  # type: ignore[attr-defined]
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
                ["%mnemo_terms%"])
            ((generic, custom),) = plans
            assert custom == 5 and generic >= 4, plans  # (a read again after a newer ACL: one more)


@pytest.mark.parametrize("numpy", [True, False])
def test_a_term_longer_than_the_index_key_is_found_whole(
    pg: Schema, tmp_path: Path, numpy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Terms longer than a key share their keys: each is found whole, by itself or by a prefix shorter
    than a key (two of them in one document among them), with the scores of the log file's recall."""
    if not numpy:
        monkeypatch.setattr(engine, "installed", lambda: False)
    shared = "k" * TERM_KEY
    with MnemoClient(pg.url, OWNER) as c, MnemoClient(str(tmp_path / "f.db"), OWNER) as f:
        for client in (f, c):  # the ids below are PostgreSQL's
            one = client.remember(f"{shared}one and more")
            two = client.remember(f"{shared}two")
            both = client.remember(f"{shared}two {shared}one kilo")
            short = client.remember("kkilo")
        assert {h.record.id for h in c.recall(f"{shared}one")} == {one.id, both.id}
        assert {h.record.id for h in c.recall(f"{shared}two")} == {two.id, both.id}
        assert {h.record.id for h in c.recall(f"{shared}*")} == {one.id, two.id, both.id}
        assert {h.record.id for h in c.recall(f"{shared}o*")} == {one.id, both.id}
        assert {h.record.id for h in c.recall("kk*")} == {one.id, two.id, both.id, short.id}
        queries = [f"{shared}one", f"{shared}*", f"{shared}o*", "kk*", f"kk* -{shared}two", f"{shared}one kilo"]
        _same([[(h.record.content, h.score) for h in c.recall(q)] for q in queries],
              [[(h.record.content, h.score) for h in f.recall(q)] for q in queries])
        assert c.verify().ok


def test_after_compact_the_postings_are_read_from_the_index_alone(pg: Schema) -> None:
    """compact leaves the terms' visibility map set: a term's postings (a word, a prefix's terms, a reader's
    scopes) are read by an index-only scan of mnemo_terms_term, with no row of the table fetched."""
    with MnemoClient(pg.url, OWNER, durability="none") as c, MnemoClient(pg.url, READER) as r:
        c.grant(READER, "team:1", ["read"])
        with c.transaction():
            for i in range(1000):
                c.remember(f"common words {i} w{i % 50} rare{i}", scope=f"team:{i % 7}")
        c.compact()
        r.recall("common")  # (a recall that finds a newer ACL reads again: one read is looked at below)
        for client, query in ((c, "common"), (c, "rare7 w3"), (r, "w1*"), (r, "common -rare8")):
            sent = _sent(client, lambda client=client, query=query: client.recall(query))
            ((sql, params),) = [(sql, params) for sql, params in sent if "mnemo_terms" in sql]
            plan = [line for (line,) in c._store._fetch(  # type: ignore[attr-defined]
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + sql, params)]
            read = [line for line in plan if " on mnemo_terms " in line and "never executed" not in line]
            assert read, plan
            assert all("Index Only Scan using mnemo_terms_term on mnemo_terms t" in line for line in read), plan
            # (a scan never executed, such as the prefetch's of a word of many postings, says 0 too)
            fetches = [line.strip() for line in plan if "Heap Fetches" in line]
            assert set(fetches) == {"Heap Fetches: 0"} and len(fetches) >= len(read), plan


def test_a_reader_of_named_scopes_compares_their_postings_scopes_by_equality(pg: Schema) -> None:
    """A reader granted scopes by name reads a term's postings with a condition on their scope that is
    equality alone (`scope = ANY(...)`), which the term index on (key, scope) can take as a bound (the
    planner does once the table is large: a reader of one scope of four then reads that scope's entries,
    not the four's); one granted a scope prefix too matches its patterns (LIKE). Both find exactly the
    records of their scopes."""
    with MnemoClient(pg.url, OWNER, durability="none") as c, MnemoClient(pg.url, READER) as r:
        c.grant(READER, "team:1", ["read"])
        with c.transaction():
            for i in range(400):
                c.remember(f"common words w{i % 10} {i}", scope=f"team:{i % 4}")
        c.compact()
        r.recall("common")  # (a recall that finds a newer ACL reads again: one read is looked at below)

        def terms_scan(client: MnemoClient) -> list[str]:
            sent = _sent(client, lambda: client.recall("common"))
            ((sql, params),) = [(sql, params) for sql, params in sent if "mnemo_terms" in sql]
            plan = [line.strip() for (line,) in c._store._fetch(  # type: ignore[attr-defined]
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + sql, params)]
            at = next(k for k, line in enumerate(plan) if "on mnemo_terms t " in line and "never executed" not in line)
            return plan[at:at + 4]

        scan = terms_scan(r)
        assert "actual rows=100 " in scan[0], scan  # team:1's 100 postings of 400
        assert any("(scope = ANY ($" in line for line in scan[1:3]) and "~~" not in " ".join(scan), scan
        assert sorted(h.record.content for h in r.recall("w7", limit=1000)) == sorted(
            f"common words w7 {i}" for i in range(400) if i % 10 == 7 and i % 4 == 1)
        c.grant(READER, "team:3*", ["read"])
        r.recall("common")
        scan = terms_scan(r)
        assert "actual rows=200 " in scan[0] and any("scope ~~ ANY ($" in line for line in scan[1:3]), scan
        assert sorted(h.record.content for h in r.recall("w7", limit=1000)) == sorted(
            f"common words w7 {i}" for i in range(400) if i % 10 == 7)


@pytest.mark.parametrize("query", ["alpha -zzz", "alpha", '"alpha one" alpha'])
def test_a_hit_changed_while_recall_reads_is_read_again(
    pg: Schema, monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    """Another writer commits between the read of the index and the read of the hits: the index is read
    again, and what is served is the record as it is then. A query of words and prefixes only reads its
    best hits with the index, in its snapshot: they are served as they were then, in one read."""
    with MnemoClient(pg.url, OWNER) as c, MnemoClient(pg.url, OWNER) as other:
        changed = c.remember("alpha one")
        dropped = c.remember("alpha two")
        store: Any = c._store
        real = store._read_text_index
        reads: list[int] = []

        def read_then_write(*args: Any, **kwargs: Any) -> Any:
            source = real(*args, **kwargs)
            if not reads:
                other.update(changed.id, content="alpha alpha three")
                other.update(dropped.id, content="no longer")
            reads.append(1)
            return source

        monkeypatch.setattr(store, "_read_text_index", read_then_write)
        hits = c.recall(query)
        monkeypatch.undo()
        if query == "alpha":
            assert len(reads) == 1
            assert sorted((h.record.id, h.record.content) for h in hits) == sorted(
                [(changed.id, "alpha one"), (dropped.id, "alpha two")])
            assert not c.recall("two")
            return
        assert len(reads) == 2
        assert [(h.record.id, h.record.content) for h in hits] == [(changed.id, "alpha alpha three")]
        assert [h.score for h in hits] == [h.score for h in c.recall(query)]


def test_recall_of_a_corpus_whose_totals_were_zeroed_by_hand_is_refused(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("alpha")
        pg.sql("UPDATE mnemo_text_scopes SET docs = 0, length = 0")
        with pytest.raises(IntegrityError, match="the text index disagrees with itself .*: run verify"):
            c.recall("alpha")
        c.remember("alpha again")  # a commit still goes through
        assert not c.verify().ok


def test_a_forget_commits_whatever_the_totals_row_says(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("alpha", scope="team:z")
        pg.sql("DELETE FROM mnemo_text_scopes")
        assert c.forget(rec.id) == 1
        assert pg.sql("SELECT count(*) FROM mnemo_terms") == [(0,)]
        assert c.verify().ok  # the forget took the scope's row, counted below zero, away


def test_the_schema_refuses_a_term_row_of_no_occurrence(pg: Schema) -> None:
    MnemoClient(pg.url, OWNER).close()
    with pytest.raises(psycopg.errors.CheckViolation):
        pg.sql("INSERT INTO mnemo_terms VALUES ('x', 1, 0, 1, 'team:a')")


@settings(max_examples=200, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from(["a", "b", "c"]), max_size=12), min_size=1, max_size=8),
       phrase=st.lists(st.sampled_from(["a", "b", "c"]), min_size=2, max_size=4),
       unkept=st.sets(st.integers(0, 7)), dense=st.sampled_from([0, text_phrases.DENSE]),
       spread=st.sampled_from([1, 5_000, -(1 << 40)]))
def test_a_phrase_decided_in_bulk_is_decided_one_document_at_a_time(
    docs: list[list[str]], phrase: list[str], unkept: set[int], dense: int, spread: int
) -> None:
    """TableSource.phrase with numpy (a table of a bit per place, or a sort of the places), without it, and
    by the C extension (its documents looked up by seq in a table indexed by seq, or, seqs far apart, in a
    hash table): the same starts, the same documents whose positions are not kept; and the starts are the
    phrase's."""
    places: dict[str, tuple[bytes, bytes, bytes, bytes]] = {}
    doc_of = {10 + k * spread: k for k in range(len(docs))}
    for atom in dict.fromkeys(phrase):
        seqs, counts, packed, lengths = b"", array("i"), array("i"), b""
        for seq, k in doc_of.items():
            words = docs[k]
            at = [i for i, word in enumerate(words) if word == atom]
            if at:
                seqs += seq.to_bytes(8, "big", signed=True)
                lengths += len(words).to_bytes(4, "big")
                counts.append(-1 if k in unkept else len(at))
                packed.extend([] if k in unkept else at)
        places[atom] = (seqs, counts.tobytes(), packed.tobytes(), lengths)
    if any(not seqs for seqs, _sizes, _packed, _lengths in places.values()):
        return  # (a word no document holds: TableSource.phrase answers before)
    atoms_ = tuple(phrase)
    one_by_one = text_phrases._phrase_python(atoms_, places)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(text_phrases, "DENSE", dense)
        found, unknown, lengths = text_phrases._phrase_numpy(atoms_, places)
    assert (found, sorted(unknown)) == (one_by_one[0], sorted(one_by_one[1]))
    assert lengths == {seq: len(docs[doc_of[seq]]) for seq in [*found, *unknown]}
    assert all(one_by_one[2][seq] == length for seq, length in lengths.items())
    if speedups is not None:  # the C extension's, in one pass
        native = speedups.phrase_starts(tuple(places[atom] for atom in atoms_))
        assert (native[0], sorted(native[1]), native[2]) == (found, sorted(unknown), lengths)
    for seq, k in doc_of.items():
        words = docs[k]
        starts = occurrences(Phrase(atoms_), words)
        holds_all = all(atom in words for atom in atoms_)
        if holds_all and k in unkept:
            assert seq in unknown and seq not in found
        else:
            assert seq not in unknown and found.get(seq, 0) == starts
