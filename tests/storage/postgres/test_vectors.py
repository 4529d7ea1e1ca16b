"""Semantic recall's vectors in PostgreSQL's tables (mnemo/storage/postgres/vectors.py): written in the
commit that writes their record, gone from every file of the database after a forget and `compact`,
never sampled into pg_statistic, made for the records a version 5 database already holds, recorded with
their embedder (another is refused until reindex), and written by the application role too."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")

from helpers.embedders import Concepts  # noqa: E402
from helpers.pg import AppRole, Schema  # noqa: E402
from helpers.pg_server import database_directory, files_holding, undo_version_6  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.client import reindex  # noqa: E402
from mnemo.errors import EmbedderMismatch  # noqa: E402
from mnemo.storage.postgres import schema as pg_schema  # noqa: E402

OWNER = "owner"


def unit_bytes(text: str) -> bytes:
    vector = Concepts().embed([text])[0]
    return (vector / np.linalg.norm(vector)).astype("<f4").tobytes()


def test_a_commit_writes_its_vectors_in_its_own_transaction(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as c:
        first = c.remember("a flight to oslo")
        with c.transaction() as t:
            t.remember("pizza for dinner")
            t.update(first.id, content="a plane to lisbon")
    rows = pg.sql("SELECT v.seq, v.scope, v.vector, v.xmin::text, e.xmin::text FROM mnemo_vectors v "
                  "JOIN mnemo_entries e ON e.seq = v.seq ORDER BY v.seq")
    assert [bytes(vector) for _s, _c, vector, _x, _y in rows] == [unit_bytes("pizza for dinner"),
                                                                 unit_bytes("a plane to lisbon")]
    assert all(vx == ex for *_rest, vx, ex in rows)  # the entry's transaction wrote the vector
    assert pg.sql("SELECT name, dimension FROM mnemo_embedder") == [("test/concepts", 32)]


def test_forget_then_compact_leaves_no_vector_in_the_databases_files(pg: Schema) -> None:
    base = database_directory(pg)
    if base is None:
        pytest.skip("the server's data directory is not readable by this user")
    secret, replaced = "okapi narwhal axolotl", "tapir quetzal"
    needles = [unit_bytes(secret), unit_bytes(replaced)]
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as c:
        gone = c.remember(secret)
        kept = c.remember(replaced)
        pg.sql("CHECKPOINT")
        for needle in needles:
            assert files_holding(base, needle), "the test would prove nothing: the vectors are not on disk"
        c.update(kept.id, content="a flight to oslo")
        c.forget(gone.id)
        assert pg.sql("SELECT count(*) FROM mnemo_vectors") == [(1,)]  # gone with their documents at once
        c.compact()
        pg.sql("CHECKPOINT")
        assert [needle for needle in needles if files_holding(base, needle)] == []
        assert c.verify().ok


def test_pg_statistic_holds_no_vector_after_analyze(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, durability="none", embedder=Concepts()) as c, c.transaction():
        for i in range(200):
            c.remember(f"flight number {i} to the airport")
    pg.sql("ANALYZE")
    assert pg.sql("SELECT attname FROM pg_stats WHERE schemaname = current_schema() AND tablename = 'mnemo_vectors' "
                  "AND attname = 'vector'") == []


def test_a_version_5_database_migrates_and_embeds_what_it_holds(pg: Schema, app_role: AppRole) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        flight = c.remember("a flight to oslo").id
        c.remember("pizza for dinner")
    undo_version_6(pg)
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as c:
        assert c.recovery == [f"migrated the schema from version 5 to {pg_schema.SCHEMA_VERSION}"]
        assert pg.sql("SELECT count(*) FROM mnemo_vectors") == [(0,)]
        assert [r.record.id for r in c.recall("air travel", mode="semantic", limit=1)] == [flight]
        assert pg.sql("SELECT count(*) FROM mnemo_vectors") == [(2,)]  # made by the recall, and kept
        assert c.verify().ok
    # the application role, granted before the tables existed, writes and reads them
    with MnemoClient(app_role.url, OWNER, embedder=Concepts()) as c:
        dog = c.remember("the dog sleeps").id
        assert [r.record.id for r in c.recall("puppy", mode="hybrid", limit=1)] == [dog]
        c.forget(dog)
        assert c.verify().ok


def test_another_embedder_is_refused_until_reindex(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as c:
        c.remember("a flight to oslo")

    class Other(Concepts):
        name = "test/other"

    with pytest.raises(EmbedderMismatch, match="made by the embedder 'test/concepts'.*mnemo reindex DB"):
        MnemoClient(pg.url, OWNER, embedder=Other())
    seen: list[tuple[int, int]] = []
    assert reindex(pg.url, OWNER, Other(), progress=lambda done, total: seen.append((done, total))) == 1
    assert seen == [(1, 1)]
    assert pg.sql("SELECT name FROM mnemo_embedder") == [("test/other",)]
    with MnemoClient(pg.url, OWNER, embedder=Other()) as c:
        assert c.recall("air", mode="semantic")[0].record.content == "a flight to oslo"


def test_a_read_only_client_embeds_for_itself_and_writes_nothing(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:  # no embedder: no vector is written
        flight = c.remember("a flight to oslo").id
        c.remember("pizza for dinner")
    with MnemoClient(pg.url, OWNER, readonly=True, embedder=Concepts()) as c:
        assert [r.record.id for r in c.recall("air travel", mode="semantic", limit=1)] == [flight]
    assert pg.sql("SELECT count(*) FROM mnemo_vectors") == [(0,)]
    assert pg.sql("SELECT count(*) FROM mnemo_embedder") == [(0,)]
