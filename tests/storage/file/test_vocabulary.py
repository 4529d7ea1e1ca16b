"""The text index's vocabulary (mnemo/storage/file/vocabulary.py), each implementation (the C
extension's arena and hash table, and its pure-Python twin) against a model: terms added and dropped in
any order, their ids reused, looked up, expanded by prefix and ordered for the snapshot, and loaded
back; a term that leaves leaves nothing of itself behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.native_fuzz import fuzz
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mnemo._native import speedups
from mnemo.storage.file import vocabulary
from mnemo.storage.file.vocabulary import PyVocabulary, Vocabulary

KINDS: list[Any] = [PyVocabulary]
if speedups is not None:
    KINDS.append(speedups.Vocabulary)
kinds = pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__module__.rsplit(".", 1)[-1])


@kinds
def test_add_get_drop_reuse_expand(kind: Any) -> None:
    vocab: Vocabulary = kind()
    assert [vocab.add(t) for t in ["beta", "alpha", "alphabet", "é", "東京"]] == [0, 1, 2, 3, 4]
    assert vocab.get("alpha") == 1 and vocab.get("gamma") is None and "beta" in vocab and "x" not in vocab
    assert vocab.ids(["alphabet", "nope", "東京"]) == [2, None, 4]
    assert vocab.expand("alpha") == ["alpha", "alphabet"] and vocab.expand("") == ["alpha", "alphabet", "beta",
                                                                                   "é", "東京"]
    assert [vocab.term(i) for i in vocab.ordered()] == ["alpha", "alphabet", "beta", "é", "東京"]
    vocab.drop(1)
    assert vocab.get("alpha") is None and vocab.term(1) is None and vocab.expand("alph") == ["alphabet"]
    assert vocab.add("alpha") == 1  # the freed id, for the term that came back
    assert vocab.expand("alph") == ["alpha", "alphabet"] and vocab.id_space() == 5
    with pytest.raises(ValueError):
        vocab.add("beta")
    with pytest.raises(ValueError):
        vocab.drop(9)
    assert vocab.get("\ud800") is None  # a str no UTF-8 holds is no term
    assert vocab.term(99) is None and vocab.term(vocab.id_space()) is None and vocab.term(-1) is None


@kinds
def test_load_gives_each_term_its_position_and_refuses_a_repeated_one(kind: Any) -> None:
    vocab: Vocabulary = kind.load(["a", "b", "c"])
    assert vocab.ids(["c", "a"]) == [2, 0] and vocab.ordered() == [0, 1, 2] and vocab.expand("b") == ["b"]
    assert vocab.add("bb") == 3 and vocab.expand("b") == ["b", "bb"]
    with pytest.raises(ValueError):
        kind.load(["a", "a"])
    if kind is not PyVocabulary:  # the twin does not look (verify names a forged snapshot either way)
        with pytest.raises(ValueError):
            kind.load(["b", "a"])
        with pytest.raises(UnicodeEncodeError):
            kind.load(["a", "\ud800"])


def test_the_native_vocabulary_where_it_is_built_else_the_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    made, loaded = vocabulary.new_vocabulary(), vocabulary.load_vocabulary(["a", "b"])
    assert type(made) is type(loaded) is (PyVocabulary if speedups is None else speedups.Vocabulary)
    assert made.add("x") == 0 and loaded.get("b") == 1
    monkeypatch.setattr(vocabulary, "_NATIVE", None)
    made, loaded = vocabulary.new_vocabulary(), vocabulary.load_vocabulary(["a", "b"])
    assert isinstance(made, PyVocabulary) and isinstance(loaded, PyVocabulary) and loaded.get("b") == 1


@pytest.mark.skipif(speedups is None, reason="the C extension is not built")
def test_the_native_vocabulary_zeroes_a_term_that_leaves_and_compacts_its_arena() -> None:
    vocab = speedups.Vocabulary()
    for term in ["keep", "secretword", "other"]:
        vocab.add(term)
    vocab.drop(vocab.get("secretword"))
    assert b"secretword" not in vocab._arena() and b"keep" in vocab._arena()
    for i in range(20000):
        vocab.add(f"term{i:06d}")
    before = len(vocab._arena())
    for i in range(20000):
        if i % 10:
            vocab.drop(vocab.get(f"term{i:06d}"))
    assert len(vocab._arena()) < before // 2
    assert vocab.expand("term00001") == [f"term{i:06d}" for i in range(10, 20, 10)]
    assert vocab.get("keep") == 0 and vocab.get("term000500") is not None and vocab.get("term000501") is None


WORDS = st.sampled_from(["a", "ab", "abc", "b", "ba", "é", "éa", "z", "東", "東京", "", "a\x00"])


class Model(RuleBasedStateMachine):
    """Every implementation driven alike, each compared with a dict model after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, int] = {}
        self.vocabs: list[Vocabulary] = []

    @initialize()
    def start(self) -> None:
        self.vocabs = [kind() for kind in KINDS]

    @rule(term=WORDS)
    def add(self, term: str) -> None:
        if term in self.model:
            return
        got = {vocab.add(term) for vocab in self.vocabs}
        assert len(got) == 1  # the same id from each
        self.model[term] = got.pop()

    @rule(term=WORDS)
    def drop(self, term: str) -> None:
        tid = self.model.pop(term, None)
        if tid is not None:
            for vocab in self.vocabs:
                vocab.drop(tid)

    @rule(prefix=st.sampled_from(["", "a", "ab", "é", "東", "z", "q"]))
    def expand(self, prefix: str) -> None:
        want = sorted(t for t in self.model if t.startswith(prefix))
        for vocab in self.vocabs:
            assert vocab.expand(prefix) == want

    @rule()
    def reload(self) -> None:
        terms = sorted(self.model)
        self.model = {t: i for i, t in enumerate(terms)}
        self.vocabs = [kind.load(terms) for kind in KINDS]

    @invariant()
    def agree(self) -> None:
        for vocab in self.vocabs:
            assert [vocab.term(i) for i in vocab.ordered()] == sorted(self.model)
            assert all(vocab.get(t) == i and vocab.term(i) == t for t, i in self.model.items())


TestVocabularyModel = Model.TestCase
TestVocabularyModel.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)


@pytest.mark.slow  # with the sanitized build it needs; .ci/run runs it (-m slow)
@pytest.mark.skipif(speedups is None, reason="the C extension is not built")
def test_the_native_vocabulary_survives_a_brief_fuzzing_run(tmp_path: Path) -> None:
    guided, sanitized = fuzz(tmp_path, 300, 300, target="vocabulary", unit="runs")
    assert guided.runs >= 300 and sanitized.runs >= 300
    assert guided.corpus > 4  # it found inputs beyond the seeds
