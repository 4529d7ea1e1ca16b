"""The text index's rows a commit writes on PostgreSQL (text_rows.py): written in the transaction of the
entry that changes it on both commit paths, gone with a rolled-back transaction, replaced by an update and
deleted by a forget at once, off the disk after compaction, out of pg_statistic."""

from __future__ import annotations

import secrets

import pytest
from helpers.pg import Schema
from helpers.pg_server import (
    database_directory,
    files_holding,
)
from helpers.pg_text import expected_rows, index_rows

from mnemo import MnemoClient, StorageError
from mnemo.client import writes as writes_module
from mnemo.storage.postgres.text_index import POSITIONS_MAX, TERM_KEY, positions_of

OWNER = "owner"


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
        assert index_rows(pg) == expected_rows(c)
        assert index_rows(pg)["docs"][-1][3] == 0
        assert c.verify().ok


def test_a_rolled_back_transaction_leaves_no_index_row(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        kept = c.remember("kept words")
        before = index_rows(pg)
        with pytest.raises(RuntimeError), c.transaction():
            c.update(kept.id, content="replaced words")
            c.remember("never committed")
            c.forget(kept.id)
            raise RuntimeError("rolled back")
        assert index_rows(pg) == before == expected_rows(c)
        assert [h.record.id for h in c.recall("kept")] == [kept.id]
        assert c.recall("never") == c.recall("replaced") == []


def test_a_commit_the_server_refuses_writes_no_index_row(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """A put of an id that exists is refused by the insert of its record, on both commit paths (a
    remember's mnemo_put, a transaction's mnemo_commit): nothing of it is in the index either."""
    with MnemoClient(pg.url, OWNER) as c:
        other = c.remember("other words")
        monkeypatch.setattr(writes_module, "new_id", lambda: "0" * 31 + "1")
        c.remember("first words")
        before = index_rows(pg)
        with pytest.raises(StorageError, match="mnemo_records_pkey"):
            c.remember("second words")
        with pytest.raises(StorageError, match="mnemo_records_pkey"), c.transaction():
            c.update(other.id, content="third words")
            c.remember("fourth words")
        assert index_rows(pg) == before == expected_rows(c)
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
        assert index_rows(pg) == expected_rows(c)
        c.update(new.id, content=b"no longer text")
        assert c.recall("gamma") == []
        assert index_rows(pg) == expected_rows(c)
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
        assert [d[1] for d in index_rows(pg)["docs"]] == [kept.id]
        assert index_rows(pg)["scopes"] == [("team:kept", 1, 3)]  # team:gone holds no document any more
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
