"""A hypothesis state machine for recall: remembers, updates, forgets, transactions (committed and rolled
back), grants and revokes, on each backend, against a model that ranks the records each agent may read
by BM25 (mnemo.recall.bm25 over the model's own corpus). After every step, each agent's recall of a
few queries returns the model's ids, in the model's order, with the model's scores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import hypothesis.strategies as st
from helpers.budget import examples
from hypothesis import Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from mnemo import MnemoClient
from mnemo.recall.analysis import analyse
from mnemo.recall.bm25 import Candidate, Corpus, rank
from mnemo.recall.query import Query, parse

OWNER = "owner"
READER = "reader"
SHARED = "team:shared"
WORDS = ["dark", "mode", "coffee", "cat", "snake_case", "dark-mode", "东京"]
QUERIES = ["dark", "dark mode", "coffee -cat", '"dark mode"', "sn*", "snake", "东京", "cat coffee dark"]

texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=6).map(" ".join)
contents = st.one_of(texts, texts.map(str.encode))


@dataclass
class Doc:
    content: str | bytes
    scope: str
    seq: int


class Abort(Exception):
    pass


class RecallMachine(RuleBasedStateMachine):
    def __init__(self, new_db: Callable[[], str]) -> None:
        super().__init__()
        self.path = new_db()
        self.owner = MnemoClient(self.path, OWNER, durability="none")
        self.reader = MnemoClient(self.path, READER, durability="none")
        self.docs: dict[str, Doc] = {}
        self.reader_may_read = False

    def teardown(self) -> None:
        self.reader.close()
        self.owner.close()

    def scope_for(self, shared: bool) -> str:
        return SHARED if shared else f"agent:{OWNER}"

    @rule(content=contents, shared=st.booleans())
    def remember(self, content: str | bytes, shared: bool) -> None:
        rec = self.owner.remember(content, scope=self.scope_for(shared))
        self.docs[rec.id] = Doc(content, rec.scope, rec.seq)

    @precondition(lambda self: self.docs)
    @rule(data=st.data(), content=contents)
    def update(self, data: st.DataObject, content: str | bytes) -> None:
        rid = data.draw(st.sampled_from(sorted(self.docs)))
        rec = self.owner.update(rid, content=content)
        self.docs[rid] = Doc(content, rec.scope, rec.seq)

    @precondition(lambda self: self.docs)
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.docs)))
        self.owner.forget(rid)
        del self.docs[rid]

    @rule(items=st.lists(st.tuples(contents, st.booleans()), min_size=1, max_size=3), commit=st.booleans(),
          forget_first=st.booleans())
    def transaction(self, items: list[tuple[str | bytes, bool]], commit: bool, forget_first: bool) -> None:
        staged = dict(self.docs)
        try:
            with self.owner.transaction() as t:
                if forget_first and staged:
                    gone = sorted(staged)[0]
                    t.forget(gone)
                    del staged[gone]
                for content, shared in items:
                    rec = t.remember(content, scope=self.scope_for(shared))
                    staged[rec.id] = Doc(content, rec.scope, rec.seq)
                for query in QUERIES[:3]:  # inside, the transaction's own view
                    self.check(t, staged, everything=True, query=query)
                if not commit:
                    raise Abort
        except Abort:
            return
        self.docs = staged

    @precondition(lambda self: not self.reader_may_read)
    @rule()
    def grant(self) -> None:
        self.owner.grant(READER, SHARED, ["read"])
        self.reader_may_read = True

    @precondition(lambda self: self.reader_may_read)
    @rule()
    def revoke(self) -> None:
        self.owner.revoke(READER, SHARED)
        self.reader_may_read = False

    def check(self, client: MnemoClient, docs: dict[str, Doc], everything: bool, query: str) -> None:
        parsed = parse(query)
        corpus = {
            rid: doc for rid, doc in docs.items()
            if isinstance(doc.content, str) and (everything or (self.reader_may_read and doc.scope == SHARED))
        }
        analysed = {rid: analyse(str(doc.content)) for rid, doc in corpus.items()}
        candidates: list[Candidate[object]] = []
        freqs_seen: dict[int, str] = {}
        for rid, doc in corpus.items():
            feats = parsed.features(analysed[rid])
            if feats:
                candidates.append(Candidate(doc.seq, len(analysed[rid].terms), dict(feats)))
                freqs_seen[doc.seq] = rid
        full_freqs: dict[object, int] = {}
        # n(q) counts every document of the corpus holding q, whether or not it is excluded
        for rid in corpus:
            for clause in parsed.include:
                for feature in Query((clause,), ()).features(analysed[rid]) or {}:
                    full_freqs[feature] = full_freqs.get(feature, 0) + 1
        total = sum(len(a.terms) for a in analysed.values())
        expected: list[tuple[str, float]] = []
        if corpus and candidates:
            ranked = rank(candidates, Corpus(len(corpus), total / len(corpus), full_freqs), 10)
            expected = [(freqs_seen[s.candidate.seq], s.score) for s in ranked]
        got = [(r.record.id, r.score) for r in client.recall(query)]
        assert [g[0] for g in got] == [e[0] for e in expected], query
        for (_, a), (_, b) in zip(got, expected, strict=True):
            assert abs(a - b) <= 1e-9 * max(1.0, abs(b)), query

    @invariant()
    def recall_agrees_with_the_model(self) -> None:
        for query in QUERIES:
            self.check(self.owner, self.docs, everything=True, query=query)
            self.check(self.reader, self.docs, everything=False, query=query)


def test_recall_agrees_with_a_bm25_model(backend: str, new_db: Callable[[], str]) -> None:
    run_state_machine_as_test(lambda: RecallMachine(new_db), settings=settings(
        max_examples=examples(30 if backend == "file" else 10),  # the default run half (helpers.budget)
        stateful_step_count=12,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
    ))
