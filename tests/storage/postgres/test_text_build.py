"""The text index built on PostgreSQL for the records already there (text_build.py): by the migrations
from schema versions 4, 7, 8 and 10, and by a copy; a payload that is not its put's left out."""

from __future__ import annotations

from pathlib import Path

from helpers.pg import AppRole, Schema
from helpers.pg_server import (
    ROUTINES,
    undo_version_5,
    undo_version_8,
    undo_version_9,
    undo_version_11,
)
from helpers.pg_text import doc_seq, expected_rows, index_rows, recall_answers, varied

from mnemo import MnemoClient
from mnemo.storage.postgres import schema as pg_schema
from mnemo.storage.postgres.text_index import POSITIONS_MAX, TERM_KEY, pack_places

OWNER = "owner"


# -- built for what is there: the migration, a copy -----------------------------------------------------------


def test_a_version_4_database_migrates_and_builds_the_index(pg: Schema, app_role: AppRole) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        made = varied(c)
        built = index_rows(pg)
        assert built == expected_rows(c)
        head = c.verify().head_hash
    undo_version_5(pg)
    assert pg.sql("SELECT to_regclass('mnemo_terms') IS NULL") == [(True,)]
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 4 to {pg_schema.SCHEMA_VERSION}"]
        assert index_rows(pg) == built
        assert c.verify().ok and c.verify().head_hash == head
    assert pg.routines() == ROUTINES
    # the application role, granted before the tables existed, writes and reads the index they hold
    with MnemoClient(app_role.url, OWNER) as c:
        assert [h.record.id for h in c.recall("beta")] == [made["a"], made["b"]]
        c.remember("written by the application role", scope="team:b")
        c.update(made["b"], content="updated by it")
        c.forget(made["a"])
        assert index_rows(pg) == expected_rows(c)
        assert c.verify().ok


def test_a_migration_leaves_out_a_payload_that_is_not_its_puts(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        made = varied(c)
    undo_version_5(pg)
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE mnemo_payloads SET payload = set_byte(payload, 0, get_byte(payload, 0) # 1) "
                     "WHERE seq = (SELECT v.seq FROM mnemo_versions v JOIN mnemo_records r USING (id, ver) "
                     "WHERE r.id = %s)", [made["b"]])
    with MnemoClient(pg.url, OWNER) as c:
        assert [d[1] for d in index_rows(pg)["docs"]] == [made["a"]]
        assert not c.verify().ok


def test_a_copy_builds_the_index(pg: Schema, tmp_path: Path) -> None:
    src = str(tmp_path / "src.db")
    with MnemoClient(src, OWNER) as c:
        varied(c)
        report = c.copy_to(pg.url)
        assert report.ok
    with MnemoClient(pg.url, OWNER) as c:
        assert index_rows(pg) == expected_rows(c)


def test_a_version_8_database_migrates_to_phrases_read_from_positions(pg: Schema, app_role: AppRole) -> None:
    """Version 9 adds mnemo_terms.positions, held by the terms' index too, and mnemo_index_text and
    mnemo_put take them: the rows already there are written again with their positions, recall answers as
    before, and the application role writes and forgets through the new routines."""
    with MnemoClient(pg.url, OWNER) as c:
        made = varied(c)
        c.remember("gamma alpha beta " * (POSITIONS_MAX + 1) + "delta alpha", scope="team:c")  # (no positions kept)
        built = index_rows(pg)
        assert built == expected_rows(c)
        answers = recall_answers(c, "id")
        assert sum(map(len, answers)) > 20
    undo_version_9(pg)
    assert pg.sql("SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() "
                  "AND table_name = 'mnemo_terms' AND column_name = 'positions'") == [(0,)]
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 8 to {pg_schema.SCHEMA_VERSION}"]
        assert index_rows(pg) == built
        (definition,) = pg.sql("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                               "AND indexname = 'mnemo_terms_term'")[0]
        assert definition.endswith("USING btree (key, scope) INCLUDE (seq, tf, length, positions)")
        assert pg.sql("SELECT attstattarget, attstorage FROM pg_attribute WHERE attrelid = 'mnemo_terms'::regclass "
                      "AND attname = 'positions'") == [(0, "e")]
        assert recall_answers(c, "id") == answers
        assert c.verify().ok
    with MnemoClient(app_role.url, OWNER) as c:
        c.remember("beta alpha written after the migration", scope="team:b")
        c.update(made["b"], content="alpha beta updated after it")
        c.forget(made["a"])
        with c.transaction():
            c.remember("and alpha beta in a transaction", scope="team:a")
        assert index_rows(pg) == expected_rows(c)
        assert sorted(h.record.content for h in c.recall('"alpha beta" -gamma')) == [
            "alpha beta updated after it", "and alpha beta in a transaction"]
        assert c.verify().ok


def test_a_version_10_database_migrates_to_positions_packed_smaller(pg: Schema, app_role: AppRole) -> None:
    """Version 11 packs each term's positions as varints (text_index.pack_places) where version 9 packed
    4 bytes each: the rows of a version-10 database are written again so, and recall answers as before
    (phrases, from the positions, among them), then writes and forgets through the same routines."""
    with MnemoClient(pg.url, OWNER) as c:
        made = varied(c)
        c.remember("gamma alpha beta " * (POSITIONS_MAX + 1) + "delta alpha", scope="team:c")  # (no positions kept)
        c.remember("alpha " + "filler " * 200 + "alpha beta", scope="team:a")  # (a gap of two bytes)
        built = index_rows(pg)
        assert built == expected_rows(c)
        answers = recall_answers(c, "id")
        assert sum(map(len, answers)) > 20
        phrases = [[(h.record.id, h.score) for h in c.recall(query)]
                   for query in ('"alpha beta"', '"beta gamma"', '"alpha filler"', '"filler alpha beta"')]
        assert all(phrases)
    undo_version_11(pg)
    assert pg.sql("SELECT positions FROM mnemo_terms WHERE term = 'alpha' AND seq = %s",
                  [doc_seq(pg, made["a"])]) == [(b"\x00\x00\x00\x00",)]  # (version 9's packing)
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 10 to {pg_schema.SCHEMA_VERSION}"]
        assert index_rows(pg) == built
        assert pg.sql("SELECT positions FROM mnemo_terms WHERE term = 'alpha' AND seq = %s",
                      [doc_seq(pg, made["a"])]) == [(pack_places([0]),)]
        assert recall_answers(c, "id") == answers
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
    assert index_rows(pg) == expected_rows(c)


def test_a_version_7_database_migrates_to_postings_read_from_the_index(pg: Schema, app_role: AppRole) -> None:
    """Version 8 adds mnemo_terms.key (generated from the term) and replaces the terms' index by one on (key,
    scope) that holds the postings: the rows already there get their keys, recall answers as before, and
    the application role writes and forgets through the new index."""
    with MnemoClient(pg.url, OWNER) as c:
        made = varied(c)
        built = index_rows(pg)
        answers = recall_answers(c, "id")
        assert sum(map(len, answers)) > 20
    undo_version_8(pg)
    assert pg.sql("SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() "
                  "AND table_name = 'mnemo_terms' AND column_name = 'key'") == [(0,)]
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 7 to {pg_schema.SCHEMA_VERSION}"]
        assert index_rows(pg) == built
        assert pg.sql("SELECT count(*), count(*) FILTER (WHERE key = left(term, %s)) FROM mnemo_terms",
                      [TERM_KEY]) == [(len(built["terms"]),) * 2]
        (definition,) = pg.sql("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                               "AND indexname = 'mnemo_terms_term'")[0]
        assert definition.endswith("USING btree (key, scope) INCLUDE (seq, tf, length, positions)")
        assert pg.sql("SELECT attstattarget FROM pg_attribute WHERE attrelid = 'mnemo_terms'::regclass "
                      "AND attname IN ('term', 'key', 'positions')") == [(0,), (0,), (0,)]
        assert recall_answers(c, "id") == answers
        assert c.verify().ok
    with MnemoClient(app_role.url, OWNER) as c:
        _write_after_migration(pg, c, made, "beta")
        assert [h.record.content for h in c.recall("beta")] == [
            "beta updated after it", "beta written after the migration"]
        assert c.verify().ok
