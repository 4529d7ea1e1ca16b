"""A client's cache of the vectors of mnemo_vectors (mnemo/storage/postgres/vectors.py, VectorCache): a
recall reads only what changed since the last (the vectors and departures stamped after the cache's
stamp, the documents written since without a vector), another client's update or forget is honoured at
the next recall (its version never scored again, its vector zeroed in the cache), a compact that pruned
departures makes a cache that had not read them read everything again, a reindex elsewhere is an
EmbedderMismatch at the next recall, a version 6 database migrates with its vectors kept, and a remember
embeds before it takes the head row, so that another writer never waits on a model."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

np = pytest.importorskip("numpy")

from helpers.embedders import Concepts  # noqa: E402
from helpers.pg import Schema  # noqa: E402
from helpers.pg_server import undo_version_7  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.client import reindex  # noqa: E402
from mnemo.errors import EmbedderMismatch  # noqa: E402
from mnemo.storage.postgres import schema as pg_schema  # noqa: E402
from mnemo.storage.postgres.vectors import CHANGES, PRUNE  # noqa: E402

OWNER = "owner"


def cache_of(client: MnemoClient) -> Any:
    return client._store._cache  # type: ignore[attr-defined]


def changes_read(client: MnemoClient, monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[Any, ...]]]:
    """The rows each CHANGES statement of `client` answers, as they come (the store's own reads, recorded)."""
    store = client._store  # type: ignore[attr-defined]
    seen: list[list[tuple[Any, ...]]] = []
    fetch = store._fetch

    def recording(sql: str, *args: Any, **kwargs: Any) -> Any:
        rows = fetch(sql, *args, **kwargs)
        if sql == CHANGES:
            seen.append([tuple(row) for row in rows])
        return rows

    monkeypatch.setattr(store, "_fetch", recording)
    return seen


def test_a_recall_reads_only_what_changed(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as writer:
        for text in ["a flight to oslo", "pizza for dinner", "the dog sleeps"]:
            writer.remember(text)
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as reader, \
            MnemoClient(pg.url, OWNER, embedder=Concepts()) as other:
        seen = changes_read(reader, monkeypatch)
        reader.recall("air", mode="hybrid")
        assert sorted(row[0] for row in seen[-1]) == ["e", "h", "v", "v", "v"]  # a first read: every vector
        reader.recall("air", mode="hybrid")
        assert sorted(row[0] for row in seen[-1]) == ["e", "h"]  # nothing changed: no vector read
        other.remember("flying home")
        reader.recall("air", mode="hybrid")
        assert [(row[0], bytes(row[5]) == unit_bytes("flying home")) for row in seen[-1] if row[0] == "v"] == [
            ("v", True)]
        assert len(seen) == 3


def unit_bytes(text: str) -> bytes:
    vector = Concepts().embed([text])[0]
    return (vector / np.linalg.norm(vector)).astype("<f4").tobytes()


def test_another_clients_forget_and_update_are_honoured_at_the_next_recall(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as reader, \
            MnemoClient(pg.url, OWNER, embedder=Concepts()) as other:
        flight = other.remember("a flight to oslo")
        plane = other.remember("a plane to rome")
        other.remember("pizza for dinner")
        assert {r.record.id for r in reader.recall("air travel", mode="semantic", limit=2)} == {flight.id, plane.id}
        cache = cache_of(reader)
        old_slot = cache.slot_of[flight.seq]
        other.forget(flight.id)
        edited = other.update(plane.id, "pizza in rome")
        found = reader.recall("air travel", mode="semantic")
        assert [r.record.content for r in found] == ["pizza in rome", "pizza for dinner"]  # (equal: newest first)
        assert flight.seq not in cache.slot_of and plane.seq not in cache.slot_of
        assert edited.seq in cache.slot_of
        # no row of the matrix holds the vector of a version that left (the forgotten one's slot is zeroed,
        # the replaced one's taken by the new version)
        gone = [np.frombuffer(unit_bytes(text), dtype="<f4") for text in ("a flight to oslo", "a plane to rome")]
        assert not any(np.array_equal(row, vector) for row in cache.matrix for vector in gone)
        assert not cache.matrix[old_slot].any() or cache.slot_seq[old_slot] == edited.seq


def test_a_cache_older_than_a_pruned_departure_reads_everything_again(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as reader, \
            MnemoClient(pg.url, OWNER, embedder=Concepts()) as other:
        flight = other.remember("a flight to oslo")
        other.remember("pizza for dinner")
        reader.recall("air", mode="semantic")
        before = cache_of(reader)
        other.forget(flight.id)
        pg.sql(PRUNE)  # as compact does: the departure is gone from mnemo_vectors_gone
        assert pg.sql("SELECT count(*) FROM mnemo_vectors_gone") == [(0,)]
        assert [r.record.content for r in reader.recall("air", mode="semantic")] == ["pizza for dinner"]
        after = cache_of(reader)
        assert after is not before and flight.seq not in after.slot_of and len(after.slot_of) == 1


def test_a_reindex_elsewhere_is_an_embedder_mismatch_at_the_next_recall(pg: Schema) -> None:
    class Other(Concepts):
        name = "test/other"

    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as reader:
        reader.remember("a flight to oslo")
        reader.recall("air", mode="semantic")
        assert reindex(pg.url, OWNER, Other()) == 1
        with pytest.raises(EmbedderMismatch, match=r"made by the embedder 'test/other' \(dimension 32\), not by "
                                                   r"'test/concepts' \(dimension 32\)"):
            reader.recall("air", mode="semantic")
    with MnemoClient(pg.url, OWNER, embedder=Other()) as again:
        assert [r.record.content for r in again.recall("air", mode="semantic")] == ["a flight to oslo"]


def test_a_version_6_database_migrates_with_its_vectors(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as c:
        flight = c.remember("a flight to oslo").id
        c.remember("pizza for dinner")
    undo_version_7(pg)
    vectors = pg.sql("SELECT seq, vector FROM mnemo_vectors ORDER BY seq")
    counting = Concepts()
    with MnemoClient(pg.url, OWNER, embedder=counting) as c:
        assert c.recovery == [f"migrated the schema from version 6 to {pg_schema.SCHEMA_VERSION}"]
        assert pg.sql("SELECT seq, vector FROM mnemo_vectors ORDER BY seq") == vectors
        assert [r.record.id for r in c.recall("air travel", mode="semantic", limit=1)] == [flight]
        assert counting.embedded == 1  # the query: the vectors were kept
        c.forget(flight)
        assert pg.sql("SELECT count(*) FROM mnemo_vectors_gone") == [(1,)]
        assert [r.record.content for r in c.recall("air travel", mode="semantic")] == ["pizza for dinner"]
        assert c.verify().ok


class Blocking(Concepts):
    """Concepts, whose embed waits until `release` is set (once `armed`), saying when it started."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.started, self.release = threading.Event(), threading.Event()

    def embed(self, texts: Sequence[str]) -> Any:
        if self.armed:
            self.started.set()
            assert self.release.wait(30)
        return super().embed(texts)


def test_a_remember_embeds_before_taking_the_head_row(pg: Schema) -> None:
    slow = Blocking()
    with MnemoClient(pg.url, OWNER, embedder=slow, lock_timeout=5) as first, \
            MnemoClient(pg.url, OWNER, embedder=Concepts(), lock_timeout=5) as second:
        slow.armed = True
        out: list[Any] = []
        thread = threading.Thread(target=lambda: out.append(first.remember("a flight to oslo")))
        thread.start()
        try:
            assert slow.started.wait(10)
            t0 = time.monotonic()
            other = second.remember("pizza for dinner")  # not behind the embed: the head row is free
            waited = time.monotonic() - t0
        finally:
            slow.release.set()
            thread.join(30)
        assert waited < 2 and other.seq == 1  # committed first, while the other's model call was running
        assert out and out[0].seq == 2
        assert pg.sql("SELECT seq, vector FROM mnemo_vectors ORDER BY seq") == [
            (1, unit_bytes("pizza for dinner")), (2, unit_bytes("a flight to oslo"))]


def test_compact_prunes_the_departures_and_records_the_last_stamp(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as reader, \
            MnemoClient(pg.url, OWNER, embedder=Concepts()) as other:
        flight = other.remember("a flight to oslo")
        other.remember("pizza for dinner")
        reader.recall("air", mode="semantic")
        before = cache_of(reader)
        other.forget(flight.id)
        [(stamp,)] = pg.sql("SELECT stamp FROM mnemo_vectors_gone")
        other.compact()
        assert pg.sql("SELECT count(*) FROM mnemo_vectors_gone") == [(0,)]
        assert pg.sql("SELECT pruned FROM mnemo_vector_state") == [(stamp,)]
        assert [r.record.content for r in reader.recall("air", mode="semantic")] == ["pizza for dinner"]
        after = cache_of(reader)
        assert after is not before and flight.seq not in after.slot_of  # read again whole
        reader.recall("air", mode="semantic")
        assert cache_of(reader) is after  # and kept from then on


@pytest.mark.parametrize("bad", [b"\x00\x00\x80", np.full(32, np.nan, dtype="<f4").tobytes()])
def test_a_bad_vector_row_is_refused_at_the_first_read_naming_it(pg: Schema, bad: bytes) -> None:
    from mnemo.errors import IntegrityError

    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as c:
        c.remember("a flight to oslo")
        second = c.remember("pizza for dinner")
    pg.sql("UPDATE mnemo_vectors SET vector = %s WHERE seq = %s", [bad, second.seq])
    before = pg.sql("SELECT seq, vector FROM mnemo_vectors ORDER BY seq")
    with MnemoClient(pg.url, OWNER, embedder=Concepts()) as c:
        with pytest.raises(IntegrityError, match=rf"mnemo_vectors holds a bad row \(the vector of seq {second.seq} "
                                                 r"is not 32 finite float32 values\): run verify"):
            c.recall("air", mode="semantic")
        assert [r.record.content for r in c.recall("flight", mode="lexical")] == ["a flight to oslo"]  # reads none
    assert pg.sql("SELECT seq, vector FROM mnemo_vectors ORDER BY seq") == before
