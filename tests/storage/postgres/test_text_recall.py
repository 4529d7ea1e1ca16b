"""Recall by words on PostgreSQL (text_recall.py, text_source.py): the same ids and scores as the log
file's recall over the same chain, whatever the caller may read; the index and the hits read in few
statements; phrases decided from the positions; rows the application role wrote or the chain contradicts
served by no recall."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.pg import AppRole, Schema, sent_statements
from helpers.pg_faults import damage_payload
from helpers.pg_text import FILTERS, QUERIES, recall_answers, same_answers, varied

from mnemo import MnemoClient
from mnemo.errors import IntegrityError
from mnemo.recall import engine
from mnemo.storage.postgres import sql as pg_sql
from mnemo.storage.postgres import text_recall, text_source
from mnemo.storage.postgres.sql import PREFETCH_POSTINGS
from mnemo.storage.postgres.text_index import POSITIONS_MAX, TERM_KEY
from mnemo.storage.postgres.text_recall import PREFETCH_SLACK

OWNER = "owner"
READER = "reader"


# -- rows the chain does not bear out ----------------------------------------------------------------------------


def test_a_term_row_the_application_role_adds_finds_nothing(pg: Schema, app_role: AppRole) -> None:
    """A row that gives a record a term its text does not hold, or moves a document into a scope a reader
    may read, makes no recall serve it: the hit is read and checked, and left out (verify names the row)."""
    with MnemoClient(app_role.url, OWNER) as c:
        c.grant(READER, "team:a", ["read"])
        made = varied(c)
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
        answers = recall_answers(f, "id")
        assert sum(map(len, answers)) > 100
        same_answers(recall_answers(p, "id"), answers)


def test_recall_stays_the_log_files_as_both_go_on_writing(copied: tuple[str, str]) -> None:
    src, url = copied
    with MnemoClient(src, OWNER, durability="none") as f, MnemoClient(url, OWNER) as p:
        for c in (f, p):
            ids = [r.id for r in c.query(scope="team:a")]
            c.update(ids[0], content="alpha alpha alpha")
            c.forget(ids[1])
            c.remember("beta on both", scope="team:public")
            c.remember("gamma, written by the same call", scope="team:b")
        same_answers(recall_answers(p, "content"), recall_answers(f, "content"))
        with f.transaction(), p.transaction():  # each sees its own writes, over the committed index
            for c in (f, p):
                ids = [r.id for r in c.query(scope="team:a")]
                c.update(ids[0], content="delta in a transaction")
                c.forget(ids[1])
                c.remember("alpha in a transaction", scope="team:public")
            same_answers(recall_answers(p, "content"), recall_answers(f, "content"))
        with MnemoClient(src, READER) as fr, MnemoClient(url, READER) as pr:
            same_answers(recall_answers(pr, "content"), recall_answers(fr, "content"))


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
        with_numpy = recall_answers(p, "id")
        assert len(bulk) == len(QUERIES) * len(FILTERS)  # every recall, in bulk
        monkeypatch.setattr(engine, "installed", lambda: False)
        without = recall_answers(p, "id")
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
        same_answers(recall_answers(p, "content"), recall_answers(f, "content"))
    with MnemoClient(str(tmp_path / "f.db"), READER) as f, MnemoClient(pg.url, READER) as p:
        same_answers(recall_answers(p, "content"), recall_answers(f, "content"))


# -- phrases, from the positions --------------------------------------------------------------------------------


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
            same_answers([[(h.record.content, h.score) for h in p.recall(query, limit=3)]],
                  [[(h.record.content, h.score) for h in f.recall(query, limit=3)]])
        sent = sent_statements(p, lambda: p.recall('"alpha beta"', limit=3))
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
        same_answers([[(h.record.content, h.score) for h in p.recall('"alpha beta"')]], [want])
        pg.sql("UPDATE mnemo_terms SET positions = '\\x0201' WHERE term = 'alpha'")
        # every document's "alpha" said to stand second: the first is found by none, nor is a false one served
        assert {h.record.content for h in p.recall('"alpha beta"')} <= {text for text, _score in want}
        assert not p.verify().ok


# -- how it reads -----------------------------------------------------------------------------------------------


def _index_read_plan(client: MnemoClient, query: str) -> list[str]:
    """The lines of EXPLAIN ANALYZE of the statement in which `client.recall(query)` reads mnemo_terms."""
    sent = sent_statements(client, lambda: client.recall(query))
    ((sql, params),) = [(sql, params) for sql, params in sent if "mnemo_terms" in sql]
    return [line.strip() for (line,) in client._store._fetch(  # type: ignore[attr-defined]
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + sql, params)]


def _statements(c: MnemoClient, query: str) -> list[str]:
    return [sql for sql, _params in sent_statements(c, lambda: c.recall(query))]


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
                sent = sent_statements(client, lambda client=client, query=query, options=options: client.recall(
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
            sent = sent_statements(client, lambda: found.extend(client.recall(query, **options)))
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
        sent = sent_statements(c, lambda: c.recall("rare", limit=1))
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
        same_answers([[(h.record.content, h.score) for h in c.recall(q)] for q in queries],
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
            plan = _index_read_plan(client, query)
            read = [line for line in plan if " on mnemo_terms " in line and "never executed" not in line]
            assert read, plan
            assert all("Index Only Scan using mnemo_terms_term on mnemo_terms t" in line for line in read), plan
            # (a scan never executed, such as the prefetch's of a word of many postings, says 0 too)
            fetches = [line for line in plan if "Heap Fetches" in line]
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
            plan = _index_read_plan(client, "common")
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
