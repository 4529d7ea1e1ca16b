"""Recall on every backend: BM25 scores equal a reference implementation's, the lines shown, ties, the
corpus is exactly what the caller may read (an unreadable scope changes no byte of the results),
updates and forgets take effect at once and leave scores as if the record never existed, a transaction
finds its own writes and a rolled-back one is never found, and bad queries change nothing."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable

import pytest
from helpers.acl import shared_and_hidden
from helpers.backends import is_pg, stored
from helpers.backends import state as snapshot_state
from rank_bm25 import BM25Okapi

from mnemo import MnemoClient, Recalled
from mnemo.errors import InvalidInput
from mnemo.recall.analysis import terms

OWNER = "owner"

CORPUS = [
    "The user prefers dark mode in every editor.",
    "Deploys go out on Tuesdays; never deploy on Friday.",
    "The user's cat is called Miso. Miso likes the dark.",
    "Project uses snake_case names and Python 3.11.\nTests run with pytest.",
    "Dark roast coffee, no sugar, every morning.",
    "The build cache lives in /var/cache/build; clear it when the build is odd.",
    "Café meetings on Fridays at the café near the station.",
    "東京都に住んでいます。京都にも行きます。",
]


class Reference(BM25Okapi):  # type: ignore[misc]
    """rank_bm25's Okapi BM25 with the IDF recall uses, ln(1 + (N - n + 0.5) / (n + 0.5)), k1 = 1.2."""

    def __init__(self, corpus: list[list[str]]) -> None:
        super().__init__(corpus, k1=1.2, b=0.75)

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


def fill(c: MnemoClient, texts: Iterable[str], scope: str | None = None) -> list[str]:
    return [c.remember(text, scope=scope).id for text in texts]


def shown(results: list[Recalled]) -> list[tuple[object, ...]]:
    """What a caller sees of results, ids and times aside (they differ between databases)."""
    return [(r.record.content, r.record.tags, r.record.scope, repr(r.score), r.lines) for r in results]


@pytest.mark.parametrize("query", ["dark", "dark mode", "the user", "miso dark coffee", "build cache", "cafe friday"])
def test_scores_equal_a_reference_bm25(db: str, query: str) -> None:
    with MnemoClient(db, OWNER) as c:
        ids = fill(c, CORPUS)
        results = c.recall(query, limit=20)
    reference = Reference([terms(text) for text in CORPUS])
    expected = reference.get_scores(terms(query))
    got = {r.record.id: r.score for r in results}
    assert got, query
    for rec_id, score in zip(ids, expected, strict=True):
        if score > 0:
            assert got.pop(rec_id) == pytest.approx(score, abs=1e-9)
    assert got == {}, "a record with no query word was found"
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)


def test_matching_lines_are_numbered_and_cut(db: str) -> None:
    long_line = "filler " * 40 + "needle at the end"
    text = "first line\nthe needle is here\n\n" + long_line + "\nlast needle needle"
    with MnemoClient(db, OWNER) as c:
        c.remember(text)
        (hit,) = c.recall("needle")
    assert hit.lines == ((2, "the needle is here"), (4, long_line[:200]), (5, "last needle needle"))
    assert hit.record.content == text


def test_lines_prefer_more_distinct_words(db: str) -> None:
    text = "\n".join(["alpha", "alpha beta", "gamma", "alpha beta gamma", "beta"])
    with MnemoClient(db, OWNER) as c:
        c.remember(text)
        (hit,) = c.recall("alpha beta gamma")
    assert hit.lines == ((1, "alpha"), (2, "alpha beta"), (4, "alpha beta gamma"))


def test_equal_scores_rank_the_newest_first(db: str) -> None:
    with MnemoClient(db, OWNER) as c:
        ids = fill(c, ["same words here"] * 3)
        results = c.recall("words")
    assert [r.record.id for r in results] == ids[::-1]
    assert len({r.score for r in results}) == 1


def test_the_result_is_the_record_as_get_returns_it(db: str) -> None:
    with MnemoClient(db, OWNER) as c:
        rec = c.remember("remember the milk", tags=["shopping"], metadata={"k": 1})
        c.update(rec.id, content="remember the milk and eggs")
        (hit,) = c.recall("milk")
        assert hit.record == c.get(rec.id)
        assert hit.record.version == 2


def test_phrases_exclusions_and_prefixes(db: str) -> None:
    with MnemoClient(db, OWNER) as c:
        fill(c, CORPUS)
        def found(query: str) -> list[str]:
            return [str(r.record.content) for r in c.recall(query, limit=20)]
        assert found('"dark mode"') == [CORPUS[0]]
        assert found('"mode dark"') == []
        assert set(found("dark -coffee")) == {CORPUS[0], CORPUS[2]}
        assert found('dark -"dark mode" -miso') == [CORPUS[4]]
        assert set(found("deploy*")) == {CORPUS[1]}
        assert found("snake") == [CORPUS[3]]
        assert found("snake_case") == [CORPUS[3]]
        assert found("3.11") == [CORPUS[3]]
        assert found("京都") == [CORPUS[7]]
        assert found("caf*") == [CORPUS[6]]


def test_limit_and_tag_filters(db: str) -> None:
    with MnemoClient(db, OWNER) as c:
        a = c.remember("apple pie recipe", tags=["food", "sweet"]).id
        b = c.remember("apple cider vinegar", tags=["food"]).id
        c.remember("apple laptop", tags=["tech"])
        everything = c.recall("apple", limit=3)
        assert len(everything) == 3
        assert [r.record.id for r in c.recall("apple", limit=1)] == [everything[0].record.id]
        assert {r.record.id for r in c.recall("apple", tags=["food"])} == {a, b}
        assert [r.record.id for r in c.recall("apple", tags=["food", "sweet"])] == [a]
        assert {r.record.id for r in c.recall("apple", any_tags=["sweet", "tech"])} - {a} != set()
        # tags keep hits; the corpus (and so each score) stays every readable record
        scores = {r.record.id: r.score for r in everything}
        assert all(scores[r.record.id] == r.score for r in c.recall("apple", tags=["food"]))


def test_bytes_content_is_not_searched(db: str) -> None:
    with MnemoClient(db, OWNER) as c:
        c.remember(b"binary word")
        assert c.recall("binary") == []
        text = c.remember("text word").id
        (hit,) = c.recall("word")
        assert hit.record.id == text


def test_an_update_stops_matching_at_once(db: str) -> None:
    with MnemoClient(db, OWNER) as c:
        rid = c.remember("the password hint is orange").id
        c.update(rid, content="the hint is now purple")
        assert c.recall("orange") == []
        assert [r.record.id for r in c.recall("purple")] == [rid]
        assert c.recall("hint")[0].record.version == 2


def test_scores_after_a_forget_equal_those_of_a_database_without_the_record(
    new_db: Callable[[], str]
) -> None:
    kept = ["dark mode everywhere", "dark chocolate", "light roast coffee", "mode of transport"]
    with MnemoClient(new_db(), OWNER) as with_forget, MnemoClient(new_db(), OWNER) as never:
        fill(with_forget, kept[:2])
        gone = with_forget.remember("dark dark dark mode mode secret").id
        fill(with_forget, kept[2:])
        fill(never, kept)
        with_forget.forget(gone)
        for query in ("dark", "mode", "dark mode", "secret", "coffee mode", "da*"):
            assert shown(with_forget.recall(query)) == shown(never.recall(query)), query
        assert with_forget.recall("secret") == []


def test_an_unreadable_scope_changes_no_byte_of_the_results(new_db: Callable[[], str]) -> None:
    readable = ["dark mode on", "the dark side", "coffee, dark", "light mode"]
    secret = ["dark dark dark", "dark mode secret", "mode mode mode dark"] * 5
    plain, crowded = new_db(), new_db()
    for db, others in ((plain, []), (crowded, secret)):
        shared_and_hidden(db, OWNER, readable, others)
    results = {}
    for db in (plain, crowded):
        with MnemoClient(db, "reader") as r:
            results[db] = [shown(r.recall(q, limit=50)) for q in ("dark", "mode", "dark mode", "secret", "mo*")]
    assert results[plain] == results[crowded]
    with MnemoClient(crowded, "other") as o:
        assert len(o.recall("dark", limit=50)) == len(secret)


def test_the_scope_argument_narrows_the_corpus(new_db: Callable[[], str]) -> None:
    db, alone = new_db(), new_db()
    with MnemoClient(db, OWNER) as c:
        fill(c, ["dark mode", "dark theme"], scope="team:a")
        fill(c, ["dark dark", "mode"], scope="team:b")
        in_a = c.recall("dark mode", scope="team:a")
        assert {r.record.scope for r in c.recall("dark", scope="team:*")} == {"team:a", "team:b"}
    with MnemoClient(alone, OWNER) as c:
        fill(c, ["dark mode", "dark theme"], scope="team:a")
        assert shown(c.recall("dark mode")) == shown(in_a)


def test_a_transaction_finds_its_own_writes_and_a_rolled_back_one_is_never_found(
    new_db: Callable[[], str]
) -> None:
    db, after = new_db(), new_db()
    with MnemoClient(db, OWNER) as c:
        first = c.remember("alpha beta").id
        replaced = c.remember("alpha gamma").id
        with c.transaction() as t:
            new = t.remember("alpha delta").id
            t.update(replaced, content="epsilon only")
            inside = t.recall("alpha")
            assert {r.record.id for r in inside} == {first, new}
            assert [r.record.id for r in t.recall("epsilon")] == [replaced]
            t.forget(first)
            assert [r.record.id for r in t.recall("alpha")] == [new]
        assert shown(c.recall("alpha")) == shown(inside[:0] + [r for r in c.recall("alpha")])
        committed = shown(c.recall("alpha delta epsilon"))
        with pytest.raises(RuntimeError), c.transaction() as t:
            t.remember("zeta rolled back")
            assert [r.record.content for r in t.recall("zeta")] == ["zeta rolled back"]
            raise RuntimeError("roll back")
        assert c.recall("zeta") == []
    with MnemoClient(after, OWNER) as c:
        c.remember("alpha delta")
        c.remember("epsilon only")
        assert shown(c.recall("alpha delta epsilon")) == committed


def test_another_clients_writes_are_found_on_the_next_call(db: str) -> None:
    with MnemoClient(db, OWNER) as reader, MnemoClient(db, OWNER) as writer:
        assert reader.recall("newsflash") == []
        rid = writer.remember("newsflash from the writer").id
        assert [r.record.id for r in reader.recall("newsflash")] == [rid]
        writer.forget(rid)
        assert reader.recall("newsflash") == []


def test_results_survive_a_reopen(db: str) -> None:
    with MnemoClient(db, OWNER) as c:
        fill(c, CORPUS)
        c.forget(c.recall("coffee")[0].record.id)
        before = [shown(c.recall(q, limit=20)) for q in ("dark", "the user", "caf*", '"dark mode"')]
    with MnemoClient(db, OWNER) as c:
        assert [shown(c.recall(q, limit=20)) for q in ("dark", "the user", "caf*", '"dark mode"')] == before
        c.remember("dark horse")
        assert c.recall("horse")[0].record.content == "dark horse"


@pytest.mark.parametrize(("query", "message"), [
    ("", "the query is empty"),
    ("   ", "the query is empty"),
    ('"unclosed', "unclosed quote"),
    ("-only", "only"),
    ("c*", "too short"),
    ("x" * 1001, "over the limit of 1000"),
])
def test_a_bad_query_is_refused_and_changes_nothing(db: str, query: str, message: str) -> None:
    with MnemoClient(db, OWNER) as c:
        c.remember("something to find")
        before = snapshot_state(db)
        with pytest.raises(InvalidInput, match=message):
            c.recall(query)
        assert snapshot_state(db) == before


@pytest.mark.parametrize("bad", [{"limit": 0}, {"limit": 1001}, {"limit": True}, {"limit": "3"},
                                 {"scope": ""}, {"tags": "notalist"}])
def test_bad_arguments_are_refused(db: str, bad: dict[str, object]) -> None:
    with MnemoClient(db, OWNER) as c:
        c.remember("something")
        with pytest.raises(InvalidInput):
            c.recall("something", **bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="must be a string"):
            c.recall(b"something")  # type: ignore[arg-type]


def test_forget_leaves_no_word_of_the_forgotten_text_anywhere(db: str) -> None:
    secret = "zq" + uuid.uuid4().hex.translate(str.maketrans("0123456789", "ghijklmnop"))
    replaced = "zr" + uuid.uuid4().hex.translate(str.maketrans("0123456789", "ghijklmnop"))
    with MnemoClient(db, OWNER) as c:
        gone = c.remember(f"a note holding {secret} once").id
        kept = c.remember(f"a kept note, first {replaced}").id
        c.update(kept, content="a kept note, now different")
        assert [r.record.id for r in c.recall(secret)] == [gone]  # indexed
    with MnemoClient(db, OWNER) as c:  # reopened from what the close saved
        assert [r.record.id for r in c.recall(secret)] == [gone]
        assert c.recall(replaced) == []
        c.forget([gone, kept])
        if is_pg(db):
            c.compact()
        for name, data in stored(db).items():
            assert secret.encode() not in data, name
        assert c.recall(secret) == [] and c.recall("note") == []
    for name, data in stored(db).items():  # and in what the close saved
        assert secret.encode() not in data, name
        assert replaced.encode() not in data, name


def test_a_transaction_of_an_agent_that_cannot_read_every_scope(new_db: Callable[[], str]) -> None:
    db, after = new_db(), new_db()
    for path, in_transaction in ((db, True), (after, False)):
        with MnemoClient(path, OWNER) as c:
            c.grant("writer", "team:w", ["read", "write"])
            fill(c, ["hidden words", "words words words"], scope="team:secret")
        with MnemoClient(path, "writer") as w:
            rid = w.remember("some words here", scope="team:w").id
            w.remember("other words", scope="team:w")
            if in_transaction:
                with w.transaction() as t:
                    t.update(rid, content="changed words")
                    inside = shown(t.recall("words"))
            else:
                w.update(rid, content="changed words")
                outside = shown(w.recall("words"))
    assert inside == outside

