"""Semantic and hybrid recall on every backend: a paraphrase is found where words are not, scores are the cosine and
the documented fusion, ties and filters behave as in lexical recall, an unreadable scope changes no byte
of the results, a forget leaves results equal to a database that never held the record (a property
over random corpora) and no vector of it in any file, vectors are kept (in the snapshot, or the tables) for
the embedder that made them, and every bad input is refused with the database unchanged."""

from __future__ import annotations

import importlib.util
import socket
from collections.abc import Callable

import pytest

np = pytest.importorskip("numpy")

from helpers.acl import shared_and_hidden  # noqa: E402
from helpers.backends import is_pg, state, stored  # noqa: E402
from helpers.embedders import Answering, Concepts  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mnemo import MnemoClient, Recalled  # noqa: E402
from mnemo.client import reindex  # noqa: E402
from mnemo.errors import EmbedderError, EmbedderMismatch, InvalidInput  # noqa: E402
from mnemo.recall.fusion import ALPHA  # noqa: E402
from mnemo.storage.file.snapshot import read_snapshot  # noqa: E402

OWNER = "owner"


def shown(results: list[Recalled]) -> list[tuple[object, ...]]:
    """What a caller sees of results, ids and times aside (they differ between databases)."""
    return [(r.record.content, r.record.scope, repr(r.score), repr(r.lexical), repr(r.semantic), r.lines)
            for r in results]


def unit(vector: list[float]) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_a_paraphrase_is_found_by_meaning_where_words_find_nothing(db: str) -> None:
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        flying = c.remember("the user hates flying").id
        c.remember("the user likes pizza")
        c.remember("the deploy key rotates monthly")
        assert c.recall("air travel", mode="lexical") == []
        semantic = c.recall("air travel", mode="semantic", limit=1)
        hybrid = c.recall("air travel", limit=1)  # hybrid: the default with an embedder
    assert [r.record.id for r in semantic] == [flying] == [r.record.id for r in hybrid]
    assert semantic[0].lexical is None and hybrid[0].lexical == 0.0


def test_scores_are_the_cosine_and_the_documented_fusion(db: str) -> None:
    embedder = Concepts()
    texts = ["flying to the airport", "pizza for dinner", "a flight and a pizza", "the dog sleeps"]
    with MnemoClient(db, OWNER, embedder=embedder) as c:
        for text in texts:
            c.remember(text)
        query = "pizza flight"
        semantic = c.recall(query, mode="semantic", limit=4)
        hybrid = c.recall(query, mode="hybrid", limit=4)
        lexical = {r.record.content: r.score for r in c.recall(query, mode="lexical", limit=4)}
    vectors = {text: unit(embedder.embed([text])[0]) for text in texts}
    q = unit(embedder.embed([query])[0])
    cosines = {text: float(np.float32(vectors[text] @ q)) for text in texts}
    assert [(r.record.content, r.score) for r in semantic] == sorted(
        cosines.items(), key=lambda item: -item[1])
    for r in semantic:
        assert r.semantic == r.score
    low, high, best = min(cosines.values()), max(cosines.values()), max(lexical.values())
    expected = {text: ALPHA * (cos - low) / (high - low) + (1 - ALPHA) * lexical.get(text, 0.0) / best
                for text, cos in cosines.items()}
    assert [r.record.content for r in hybrid] == sorted(expected, key=lambda t: -expected[t])
    for r in hybrid:
        assert r.score == pytest.approx(expected[r.record.content], rel=1e-12)
        assert r.lexical == lexical.get(r.record.content, 0.0)
        assert r.semantic == pytest.approx(cosines[r.record.content], rel=1e-6)


def test_equal_scores_rank_the_newest_first_and_limit_cuts(db: str) -> None:
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        ids = [c.remember("pizza for dinner").id for _ in range(5)]
        c.remember("the dog sleeps")
        for mode in ("semantic", "hybrid"):
            assert [r.record.id for r in c.recall("food", mode=mode, limit=3)] == ids[::-1][:3]


def test_excluded_words_and_tag_filters_apply_in_every_mode(db: str) -> None:
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        plane = c.remember("a plane to lisbon", tags=["trip"]).id
        flight = c.remember("a flight to oslo").id
        c.remember("pizza night", tags=["trip"])
        for mode in ("semantic", "hybrid"):
            assert flight not in [r.record.id for r in c.recall("air travel -oslo", mode=mode)]
            unfiltered = {r.record.id: r.score for r in c.recall("air travel", mode=mode)}
            tagged = c.recall("air travel", mode=mode, tags=["trip"], limit=1)
            assert [r.record.id for r in tagged] == [plane]
            assert tagged[0].score == unfiltered[plane]  # a filter leaves the corpus, and the scores, as they are


def test_a_mode_needs_an_embedder_and_says_how_to_get_one(db: str) -> None:
    with MnemoClient(db, OWNER) as c:
        c.remember("the user hates flying")
        assert c.default_mode == "lexical"
        for mode in ("semantic", "hybrid"):
            needs = r"needs an embedder.*embedder='local'.*pip install -e '\.\[semantic\]'"
            with pytest.raises(InvalidInput, match=needs):
                c.recall("flying", mode=mode)
        with pytest.raises(InvalidInput, match="mode must be one of"):
            c.recall("flying", mode="fuzzy")
        assert [r.record.content for r in c.recall("flying")] == ["the user hates flying"]


def test_an_embedder_is_checked_when_the_client_is_made(db: str) -> None:
    class Nameless:
        dimension = 3

        def embed(self, texts: list[str]) -> None: ...

    with pytest.raises(InvalidInput, match="name must be"):
        MnemoClient(db, OWNER, embedder=Nameless())
    with pytest.raises(InvalidInput, match="embedder must be 'local' or an object"):
        MnemoClient(db, OWNER, embedder="remote")


def test_an_unreadable_scope_changes_no_byte_of_the_results(new_db: Callable[[], str]) -> None:
    readable = ["a flight to oslo", "pizza for dinner", "the dog sleeps", "a plane and a pizza"]
    secret = ["flying flying flight", "air travel plans", "planes at the airport", "pizza flight"] * 4
    plain, crowded = new_db(), new_db()
    for db, others in ((plain, []), (crowded, secret)):
        shared_and_hidden(db, OWNER, readable, others)
    results = {}
    for db in (plain, crowded):
        with MnemoClient(db, "reader", embedder=Concepts()) as r:
            results[db] = [shown(r.recall(q, mode=m, limit=50))
                           for q in ("air travel", "pizza", "flight -oslo") for m in ("semantic", "hybrid")]
    assert results[plain] == results[crowded]
    with MnemoClient(crowded, "other", embedder=Concepts()) as o:
        assert len(o.recall("air", mode="semantic", limit=50)) == len(secret)


WORDS = ["flying", "pizza", "dog", "deploy", "the", "blue", "note", "monday", "plane", "dinner"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join), min_size=2, max_size=9),
    data=st.data(),
)
def test_after_a_forget_results_equal_a_database_that_never_held_the_record(
    new_db: Callable[[], str], texts: list[str], data: st.DataObject,
) -> None:
    gone = data.draw(st.sets(st.integers(0, len(texts) - 1), min_size=1, max_size=len(texts) - 1))
    queries = data.draw(st.lists(st.sampled_from(WORDS + ["air travel", "food -pizza", "dog*"]), min_size=1,
                                 max_size=3))
    with MnemoClient(new_db(), OWNER, embedder=Concepts()) as forgot, \
            MnemoClient(new_db(), OWNER, embedder=Concepts()) as never:
        ids = []
        for i, text in enumerate(texts):
            ids.append(forgot.remember(text).id)
            if i == 0:
                forgot.recall("note", mode="semantic")  # some vectors made before the forget, some after
            if i not in gone:
                never.remember(text)
        forgot.forget([ids[i] for i in sorted(gone)])
        for query in queries:
            for mode in ("semantic", "hybrid"):
                assert shown(forgot.recall(query, mode=mode, limit=20)) == shown(
                    never.recall(query, mode=mode, limit=20)), (query, mode)


def test_a_transaction_ranks_its_own_writes_and_hides_what_it_replaced(db: str) -> None:
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        first = c.remember("a plane to lisbon").id
        replaced = c.remember("a flight to oslo").id
        with c.transaction() as t:
            new = t.remember("flying to rome").id
            t.update(replaced, content="pizza for dinner")
            assert {r.record.id for r in t.recall("air travel", mode="semantic", limit=2)} == {first, new}
            t.forget(first)
            assert [r.record.id for r in t.recall("air travel", mode="hybrid", limit=1)] == [new]
            inside = shown(t.recall("air travel", mode="hybrid"))
        assert shown(c.recall("air travel", mode="hybrid")) == inside


def test_vectors_are_kept_and_made_once(db: str) -> None:
    first = Concepts()
    with MnemoClient(db, OWNER, embedder=first) as c:
        for text in ["a flight to oslo", "pizza for dinner", "the dog sleeps"]:
            c.remember(text)
        before = shown(c.recall("air travel", mode="hybrid"))
        assert first.embedded == 3 + 1  # the records, then the query
    again = Concepts()
    with MnemoClient(db, OWNER, embedder=again) as c:
        assert shown(c.recall("air travel", mode="hybrid")) == before
        assert again.embedded == 1  # only the query: the vectors came from the snapshot, or the tables
        c.remember("flying home")
        c.recall("air travel", mode="semantic")
        assert again.embedded == 1 + 2  # the new record, and the query


def test_a_client_without_an_embedder_keeps_the_vectors_up_to_date(db: str) -> None:
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        gone = c.remember("a flight to oslo").id
        c.remember("pizza for dinner")
        c.recall("air", mode="semantic")
    with MnemoClient(db, OWNER) as c:  # lexical only: its forget and its write still reach the vectors
        c.forget(gone)
        c.remember("flying home")
    counting = Concepts()
    with MnemoClient(db, OWNER, embedder=counting) as c:
        assert [r.record.content for r in c.recall("air travel", mode="semantic")] == [
            "flying home", "pizza for dinner"]
        assert counting.embedded == 1 + 1  # the record written without an embedder, and the query


def test_another_embedder_is_refused_at_open_until_reindex(db: str) -> None:
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        c.remember("a flight to oslo")
        c.remember("pizza for dinner")
        c.recall("air", mode="semantic")

    class Other(Concepts):
        name = "test/other"

    with pytest.raises(EmbedderMismatch, match=r"made by the embedder 'test/concepts' \(dimension 32\), not by "
                                               r"'test/other' \(dimension 32\).*mnemo reindex DB"):
        MnemoClient(db, OWNER, embedder=Other())
    with MnemoClient(db, OWNER) as c:  # without an embedder it opens, and recalls lexically
        assert [r.record.content for r in c.recall("pizza")] == ["pizza for dinner"]
    seen: list[tuple[int, int]] = []
    assert reindex(db, OWNER, Other(), progress=lambda done, total: seen.append((done, total))) == 2
    assert seen[-1] == (2, 2)
    with MnemoClient(db, OWNER, embedder=Other()) as c:
        assert c.recall("air travel", mode="semantic", limit=1)[0].record.content == "a flight to oslo"
    with pytest.raises(EmbedderMismatch):
        MnemoClient(db, OWNER, embedder=Concepts())


def test_reindex_needs_admin(db: str) -> None:
    with MnemoClient(db, OWNER) as c:
        c.grant("reader", "team:x", ["read"])
    with pytest.raises(Exception, match="needs admin on"):
        reindex(db, "reader", Concepts())


@pytest.mark.parametrize(("answer", "said"), [
    (lambda n: np.full((n, 32), np.nan, dtype=np.float32), "NaN or infinity"),
    (lambda n: np.ones((n, 32), dtype=np.float64), "float64, not float32"),
    (lambda n: np.ones((n, 31), dtype=np.float32), "shape"),
    (lambda n: [[0.0] * 32] * n, "not a numpy array"),
])
def test_an_embedder_answering_badly_is_refused_and_changes_nothing(
    db: str, answer: Callable[[int], object], said: str
) -> None:
    embedder = Answering(answer)
    with MnemoClient(db, OWNER, embedder=embedder) as c:
        c.remember("a flight to oslo")
        c.recall("air travel", mode="hybrid")
        c.remember("pizza for dinner")
        embedder.armed = True
        with pytest.raises(EmbedderError, match=said):
            c.recall("air travel", mode="hybrid")
        assert [r.record.content for r in c.recall("pizza", mode="lexical")] == ["pizza for dinner"]
        embedder.armed = False  # the record left pending is embedded at the next recall
        assert [r.record.content for r in c.recall("air travel", mode="hybrid")] == [
            "a flight to oslo", "pizza for dinner"]
        assert c.verify().ok


def test_forget_leaves_no_vector_of_the_forgotten_version_in_any_file(db: str) -> None:
    embedder = Concepts()
    secret_text, replaced_text = "zebra xylophone quokka", "walrus yodel"
    forgotten = unit(embedder.embed([secret_text])[0]).tobytes()
    replaced = unit(embedder.embed([replaced_text])[0]).tobytes()
    with MnemoClient(db, OWNER, embedder=embedder) as c:
        gone = c.remember(secret_text).id
        kept = c.remember(replaced_text).id
        c.remember("pizza for dinner")
        c.recall("zebra", mode="semantic")
    assert any(forgotten in data for data in stored(db).values())  # the snapshot (or a table) holds them
    if not is_pg(db):
        body = read_snapshot(f"{db}.snap")
        assert body is not None
        assert {"name": "test/concepts", "dimension": 32}.items() <= body["index"]["vectors"].items()
    with MnemoClient(db, OWNER, embedder=embedder) as c:
        c.update(kept, content="a flight to oslo")
        c.forget(gone)
        for name, data in stored(db).items():
            assert forgotten not in data and replaced not in data, name
        assert "zebra" not in [r.record.content for r in c.recall("zebra quokka", mode="semantic")]
    for name, data in stored(db).items():  # and in what the close saved
        assert forgotten not in data and replaced not in data, name


def test_verify_names_an_altered_vector(db: str) -> None:
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        c.remember("a flight to oslo")
        c.remember("pizza for dinner")
        c.recall("air", mode="semantic")
        assert c.verify().ok
        if is_pg(db):
            import psycopg

            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute("UPDATE mnemo_vectors SET vector = (SELECT vector FROM mnemo_vectors ORDER BY seq "
                             "DESC LIMIT 1) WHERE seq = (SELECT min(seq) FROM mnemo_vectors)")
        else:
            vectors = c._store.index.vectors  # type: ignore[attr-defined]
            vectors.vectors[0] = vectors.vectors[1]
        report = c.verify()
        assert not report.ok
        assert any("differs from the one its" in p.message for p in report.problems), report.problems


@pytest.mark.skipif(importlib.util.find_spec("wordllama") is None, reason="the `semantic` extra is not installed")
def test_the_local_embedder_recalls_a_paraphrase_with_the_network_unreachable(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("the network is unreachable in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    with MnemoClient(db, OWNER, embedder="local") as c:
        flying = c.remember("The user hates flying and takes the train instead.").id
        c.remember("The build cache lives in /var/cache/build.")
        c.remember("Standup is at nine on weekdays.")
        assert c.recall("air travel preferences", mode="lexical") == []
        assert c.recall("air travel preferences", mode="semantic", limit=1)[0].record.id == flying
    with MnemoClient(db, OWNER, embedder="local") as c:  # reopened: the same embedder, no more needed
        assert c.recall("air travel preferences", limit=1)[0].record.id == flying


def test_a_write_whose_embedder_fails_writes_nothing_on_postgres(db: str) -> None:
    if not is_pg(db):
        pytest.skip("a log file embeds at recall, not at write (above)")
    embedder = Answering(lambda n: np.full((n, 32), np.nan, dtype=np.float32))
    with MnemoClient(db, OWNER, embedder=embedder) as c:
        c.remember("a flight to oslo")
        before = state(db)
        embedder.armed = True
        with pytest.raises(EmbedderError, match="NaN or infinity"):
            c.remember("pizza for dinner")
        with pytest.raises(EmbedderError), c.transaction() as t:
            t.remember("a dog")
        assert state(db) == before
        embedder.armed = False
        assert [r.record.content for r in c.recall("pizza", mode="lexical")] == []


def test_a_read_only_open_embeds_nothing_and_its_recall_only_what_it_lacks(db: str) -> None:
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        for text in ["a flight to oslo", "pizza for dinner", "the dog sleeps"]:
            c.remember(text)
        c.recall("air", mode="semantic")
    counting = Concepts()
    with MnemoClient(db, OWNER, readonly=True, embedder=counting) as c:
        assert counting.embedded == 0  # the open reads the vectors (the snapshot, or the tables): no embed
        assert c.recall("air travel", mode="hybrid")[0].record.content == "a flight to oslo"
        assert counting.embedded == 1  # the query alone
    with MnemoClient(db, OWNER) as writer:  # still open: the file's snapshot does not hold what it writes
        writer.remember("flying home")
        writer.remember("a kitten")
        counting = Concepts()
        with MnemoClient(db, OWNER, readonly=True, embedder=counting) as c:
            assert counting.embedded == 0
            assert c.recall("air travel", mode="semantic", limit=1)[0].record.content == "flying home"
            assert counting.embedded == 2 + 1  # the two records written after the vectors kept, and the query
            c.recall("air travel", mode="semantic", limit=1)
            assert counting.embedded == 2 + 1 + 1  # and once only
