"""The text index's postings (mnemo/storage/file/postings.py), each implementation (the C extension's
compressed one and its pure-Python twin) against a model: documents added and removed in any order,
reads filtered by scope, the snapshot's columns exported and loaded back; the two give the same bytes,
and each loads what the other wrote; a departing document leaves nothing of itself behind."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import pytest
from helpers.native_fuzz import fuzz
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mnemo._native import speedups
from mnemo.storage.file import postings
from mnemo.storage.file.postings import PostingStore, PyPostings
from mnemo.storage.file.vocabulary import PyVocabulary, Vocabulary

KINDS: list[Any] = [PyPostings]
if speedups is not None:
    KINDS.append(speedups.Postings)
kinds = pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__module__.rsplit(".", 1)[-1])
# each postings with the vocabulary it is used with (the C extension's add_text takes only its own)
PAIRS: list[tuple[Any, Any]] = [(PyPostings, PyVocabulary)]
if speedups is not None:
    PAIRS.append((speedups.Postings, speedups.Vocabulary))
pairs = pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p[0].__module__.rsplit(".", 1)[-1])


def columns(store: PostingStore, ntids: int, ndocs: int, live: list[int] | None = None) -> tuple[bytes, ...]:
    """The store exported with every term id below `ntids` (in order, empty ones too) and the documents
    of `live` (default: all), renumbered densely."""
    live = list(range(ndocs)) if live is None else live
    dense = array("q", [-1]) * ndocs
    for new, doc in enumerate(live):
        dense[doc] = new
    return store.export(range(ntids), dense, live, array("q", range(ntids)))


def load(kind: Any, cols: tuple[bytes, ...], freq_code: str = "I") -> PostingStore:
    lens, docs, freqs, doc_lens, ids = (array("I") for _ in range(5))
    for column, blob in zip((lens, docs, freqs, doc_lens, ids), cols, strict=True):
        column.frombytes(blob)
    if freq_code == "B":
        freqs = array("B", freqs)
    store: PostingStore = kind.load(lens, docs, freqs, doc_lens, ids)
    return store


@kinds
def test_add_get_remove(kind: Any) -> None:
    store: PostingStore = kind()
    store.add(0, [3, 1], [2, 1])
    store.add(1, [1], [5])
    store.add(2, [0, 3], [1, 300])
    assert store.get(1, None) == {0: 1, 1: 5}
    assert store.get(3, None) == {0: 2, 2: 300}
    assert [store.count(t) for t in range(5)] == [1, 2, 0, 2, 0]
    assert store.tids(0) == [1, 3] and store.tids(2) == [0, 3] and store.tids(9) == []
    assert store.get(2, None) == {} and store.get(99, None) == {}
    scope_of = array("I", [0, 1, 1])
    assert store.get(3, (scope_of, b"\x00\x01")) == {2: 300}
    assert store.get(3, (scope_of, b"\x01")) == {0: 2}  # a scope past the mask's end is not kept
    assert store.remove(0) == [] and store.remove(0) == []
    assert store.get(3, None) == {2: 300} and store.tids(0) == []
    assert store.remove(1) == [1]  # term 1's posting emptied
    assert store.count(1) == 0 and store.get(1, None) == {}
    store.add(3, [1], [7])  # a freed term id used again
    assert store.get(1, None) == {3: 7}


@kinds
def test_a_posting_of_many_documents_and_large_gaps_and_frequencies(kind: Any) -> None:
    store: PostingStore = kind()
    want = {}
    for doc in range(3000):
        tf = 1 + (doc * 7919) % 70000
        store.add(doc, [5, doc + 10], [tf, 1])
        want[doc] = tf
    for doc in range(0, 3000, 3):
        store.remove(doc)
        del want[doc]
    assert store.get(5, None) == want
    assert store.count(5) == len(want) and store.count(13) == 0 and store.count(14) == 1


@kinds
def test_add_refuses_what_breaks_its_preconditions(kind: Any) -> None:
    store: PostingStore = kind()
    store.add(0, [1], [1])
    with pytest.raises(ValueError):
        store.add(1, [2, 3], [1])  # lengths differ
    assert store.get(2, None) == {} and store.tids(1) == []
    if kind is PyPostings:
        return  # (the twin asserts the rest)
    with pytest.raises(ValueError):
        store.add(5, [1], [1])  # not the next document
    with pytest.raises(ValueError):
        store.add(1, [2, 2], [1, 1])  # a term twice
    with pytest.raises(ValueError):
        store.add(1, [2], [0])  # a frequency of 0
    with pytest.raises(ValueError):
        store.add(1, [2, 3], [1])  # lengths differ
    with pytest.raises((ValueError, OverflowError)):
        store.add(1, [-1], [1])
    assert store.get(1, None) == {0: 1} and store.tids(1) == []  # nothing of a refused add stays
    store.add(1, [2], [1])
    assert store.get(2, None) == {1: 1}


@pairs
def test_add_text_counts_looks_up_and_posts_an_ascii_text_in_one_call(pair: tuple[Any, Any]) -> None:
    store: PostingStore = pair[0]()
    vocab: Vocabulary = pair[1]()
    assert vocab.add("cat") == 0
    # terms: the, cat, sat, on, the, mat, snake_case, snake, case, the, file.py, file, py, 3.11, 3, 11
    text = "The CAT sat on the mat: snake_case, the file.py (3.11)"
    assert store.add_text(0, vocab, text) == 16
    new_terms = ["the", "sat", "on", "mat", "snake_case", "snake", "case", "file.py", "file", "py", "3.11", "3",
                 "11"]
    assert [vocab.term(t) for t in range(1, 14)] == new_terms  # new terms' ids in the order they first occur
    assert store.get(0, None) == {0: 1} and store.get(vocab.get("the") or 0, None) == {0: 3}
    assert store.tids(0) == list(range(14))
    assert store.add_text(1, vocab, "") == 0 and store.tids(1) == []  # a document of no terms
    assert store.add_text(2, vocab, "the mat") == 2
    assert store.get(1, None) == {0: 3, 2: 1} and store.count(4) == 2


@pairs
def test_add_text_refuses_a_text_that_is_not_ascii_and_the_wrong_document_changing_nothing(
        pair: tuple[Any, Any]) -> None:
    store: PostingStore = pair[0]()
    vocab: Vocabulary = pair[1]()
    assert store.add_text(0, vocab, "the café") is None
    with pytest.raises(ValueError):
        store.add_text(1, vocab, "the cat")  # the next document is 0
    assert vocab.id_space() == 0 and store.tids(0) == []
    assert store.add_text(0, vocab, "the cat") == 2 and vocab.ids(["the", "cat"]) == [0, 1]


@pairs
def test_add_text_gives_new_terms_the_ids_add_would_give_freed_ones_first(pair: tuple[Any, Any]) -> None:
    store: PostingStore = pair[0]()
    vocab: Vocabulary = pair[1]()
    store.add_text(0, vocab, "alpha beta gamma delta")
    store.add_text(1, vocab, "alpha")
    for tid in store.remove(0):  # beta, gamma and delta leave: ids 1, 2, 3 are free
        vocab.drop(tid)
    assert store.add_text(2, vocab, "epsilon alpha zeta eta theta") == 5
    # Vocabulary.add gives the id freed last first (3, then 2, then 1), then the next one (4)
    assert vocab.ids(["epsilon", "zeta", "eta", "theta", "alpha"]) == [3, 2, 1, 4, 0]
    assert store.get(0, None) == {1: 1, 2: 1} and store.get(4, None) == {2: 1} and store.tids(2) == [0, 1, 2, 3, 4]


@pytest.mark.skipif(speedups is None, reason="the C extension is not built")
def test_the_native_add_text_takes_only_the_native_vocabulary() -> None:
    assert speedups is not None
    with pytest.raises(TypeError):
        speedups.Postings().add_text(0, PyVocabulary(), "the cat")


@pytest.mark.slow  # with the sanitized build it needs; .ci/run runs it (-m slow)
@pytest.mark.skipif(speedups is None, reason="the C extension is not built")
def test_add_text_of_the_native_postings_survives_a_brief_fuzzing_run(tmp_path: Path) -> None:
    guided, sanitized = fuzz(tmp_path, 300, 300, target="indextext", unit="runs")
    assert guided.runs >= 300 and sanitized.runs >= 300
    assert guided.corpus > 4  # it found inputs beyond the seeds


@kinds
def test_load_refuses_frequencies_of_zero_and_the_native_one_postings_out_of_order(kind: Any) -> None:
    good = (array("I", [2]).tobytes(), array("I", [0, 1]).tobytes(), array("I", [1, 1]).tobytes(),
            array("I", [1, 1]).tobytes(), array("I", [0, 0]).tobytes())
    assert load(kind, good).get(0, None) == {0: 1, 1: 1}
    zero = (*good[:2], array("I", [1, 0]).tobytes(), *good[3:])
    with pytest.raises(ValueError):
        load(kind, zero)
    if kind is not PyPostings:
        unordered = (good[0], array("I", [1, 0]).tobytes(), *good[2:])
        with pytest.raises(ValueError):
            load(kind, unordered)


def test_the_twin_loaded_from_a_snapshot_takes_out_what_it_changes_and_keeps_nothing_of_what_left() -> None:
    store = PyPostings()
    for doc, tids in enumerate([[0, 1], [1, 2], [2, 3, 4]]):
        store.add(doc, tids, [1] * len(tids))
    loaded = load(PyPostings, columns(store, 5, 3))
    assert isinstance(loaded, PyPostings)
    assert loaded.get(1, None) == {0: 1, 1: 1} and loaded.docs == [None] * 5  # nothing sliced yet
    assert loaded.remove(2) == [3, 4]  # its terms' postings taken out and changed
    assert loaded.get(2, None) == {1: 1}
    assert loaded._loaded is not None
    post_docs, _, _, ids, starts = loaded._loaded
    assert 2 not in post_docs  # the departed document is in no loaded posting
    assert list(ids[starts[2]:starts[3]]) == [0, 0, 0]  # nor is its list of terms
    loaded.add(3, [1], [1])
    assert loaded.get(1, None) == {0: 1, 1: 1, 3: 1}


def test_the_native_postings_where_they_are_built_else_the_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    cols = [array("I", [1]), array("I", [0]), array("I", [3]), array("I", [1]), array("I", [0])]
    made, loaded = postings.new_postings(), postings.load_postings(*cols)
    assert type(made) is type(loaded) is (PyPostings if speedups is None else speedups.Postings)
    assert loaded.get(0, None) == {0: 3}
    monkeypatch.setattr(postings, "_NATIVE", None)
    made, loaded = postings.new_postings(), postings.load_postings(*cols)
    assert isinstance(made, PyPostings) and isinstance(loaded, PyPostings) and loaded.get(0, None) == {0: 3}


@pytest.mark.skipif(speedups is None, reason="the C extension is not built")
def test_the_native_postings_zero_what_a_departing_document_leaves() -> None:
    store = speedups.Postings()
    store.add(0, [0, 1], [3, 1])
    store.add(1, [0, 1], [200, 1])
    store.add(2, [0, 1], [9, 1])
    assert store._buffer(0) == b"\x00\x03" + b"\x01\xc8\x01" + b"\x01\x09" + b"\x00"
    store.remove(1)
    # the next entry is written over the two, its gap (1 + 1) widened to fill them: nothing after it
    # moves, and nothing of 200's varint (c8 01) is left
    assert store._buffer(0) == b"\x00\x03" + b"\x82\x80\x80\x00\x09" + b"\x00"
    assert store.get(0, None) == {0: 3, 2: 9}
    assert store._doc_buffer(1) == b""


@pytest.mark.skipif(speedups is None, reason="the C extension is not built")
def test_the_native_postings_rewrite_the_entries_after_in_the_same_bytes_when_the_merged_one_is_over_ten() -> None:
    store = speedups.Postings()
    for doc, tf in enumerate((1, 300_000_001, 300_000_000, 7)):
        store.add(doc, [0], [tf])
    before = store._buffer(0)
    assert bytes.fromhex("81c6868f01") in before  # 300,000,001
    store.remove(1)  # its gap and frequency and the next one's: 1 + 5 + 1 + 5 bytes, over ten
    # the merged entry (gap 2, 300,000,000) and the one after it (gap 1, 7) take up the 16 bytes, each
    # varint widened: nothing after them moves, and nothing of 300,000,001 is left
    assert store._buffer(0) == bytes.fromhex("0001" "8280808000" "80c6868f01" "818000" "07")
    assert store.get(0, None) == {0: 1, 2: 300_000_000, 3: 7}


@pytest.mark.skipif(speedups is None, reason="the C extension is not built")
def test_the_native_postings_move_the_rest_up_when_nothing_after_can_take_the_bytes() -> None:
    store = speedups.Postings()
    for doc, tf in enumerate((1, 300_000_001, 300_000_000)):
        store.add(doc, [0], [tf])
    before = store._buffer(0)
    store.remove(1)  # over ten bytes merged, and no entry after them to widen
    after = store._buffer(0)
    assert len(after) == len(before)  # the buffer keeps its size: the tail is zeroed, not left
    assert after == bytes.fromhex("0001" "02" "80c6868f01") + b"\x00" * (len(before) - 8)
    assert store.get(0, None) == {0: 1, 2: 300_000_000}


def test_a_run_of_documents_leaving_the_front_of_a_long_posting_leaves_it_as_it_reads() -> None:
    """Documents taken out one after another from the front of a long posting (its entries widened to
    take up the bytes each departing one leaves, then written back narrow and the rest moved up when they
    are wide already): every read gives exactly the documents left, on every implementation."""
    stores, left = [kind() for kind in KINDS], {}
    for doc in range(3000):
        tf = 1 + doc % 5 + (doc % 89 == 0) * 70_000
        for store in stores:
            store.add(doc, [0], [tf])
        left[doc] = tf
    for doc in range(1200):
        for store in stores:
            store.remove(doc)
        del left[doc]
        if doc % 97 == 0 or doc > 1180:
            for store in stores:
                assert store.get(0, None) == left, doc
                assert store.count(0) == len(left)
    for store in stores:
        for doc in (2999, 1500, 1200):
            store.remove(doc)
        assert store.get(0, None) == {d: tf for d, tf in left.items() if d not in (2999, 1500, 1200)}


def test_documents_leave_a_long_posting_from_anywhere_and_it_reads_the_same() -> None:
    """Entries taken out of a posting of thousands, where its marks are and between them, singly and in
    runs, first and last: every read afterwards gives exactly the documents left, and every
    implementation exports the same columns."""
    stores, left = [kind() for kind in KINDS], {}
    for doc in range(5000):
        tf = 1 + doc % 3 + (doc % 97 == 0) * 300
        for store in stores:
            store.add(doc, [0, 1 + doc % 2], [tf, 1])
        left[doc] = tf
    phases = [range(0, 5000, 64), range(1, 5000, 64), range(2000, 2300), [4999, 0, 4998, 1],
              range(3, 5000, 7), range(5000)]
    for gone in phases:
        for doc in gone:
            if doc in left:
                for store in stores:
                    store.remove(doc)
                del left[doc]
        for store in stores:
            assert store.get(0, None) == left
            assert store.get(1, None) == {doc: 1 for doc in left if doc % 2 == 0}
        exported = {columns(store, 3, 5000, sorted(left)) for store in stores}
        assert len(exported) == 1


@pytest.mark.skipif(speedups is None, reason="the C extension is not built")
def test_the_native_postings_zero_a_departing_document_s_term_ids_and_compact_their_arena() -> None:
    store = speedups.Postings()
    store.add(0, [1, 2], [1, 1])
    store.add(1, [300, 1000], [1, 1])  # its term ids: 300 (ac 02) and a gap of 700 (bc 05)
    store.add(2, [3], [1])
    assert b"\xac\x02\xbc\x05" in store._arena()
    store.remove(1)
    assert b"\xac\x02" not in store._arena() and b"\xbc\x05" not in store._arena()
    assert store.tids(0) == [1, 2] and store.tids(2) == [3]
    # many documents leave: the arena is rewritten without their holes, and what stays reads the same
    for doc in range(3, 6003):
        store.add(doc, list(range(doc % 7, 2000, 97)), [1] * len(range(doc % 7, 2000, 97)))
    before = len(store._arena())
    for doc in range(3, 6003):
        if doc % 5:
            store.remove(doc)
    assert len(store._arena()) < before // 2
    for doc in range(5, 6003, 5):
        assert store.tids(doc) == list(range(doc % 7, 2000, 97))
    assert store.tids(0) == [1, 2] and store.get(1000, None) == {}


class Model(RuleBasedStateMachine):
    """Both implementations driven alike, each compared with a dict model after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[int, dict[int, int]] = {}  # live doc -> tid -> tf
        self.ndocs = 0
        self.stores: list[PostingStore] = []

    @initialize()
    def start(self) -> None:
        self.stores = [kind() for kind in KINDS]

    @rule(tids=st.lists(st.integers(0, 40), unique=True, max_size=8), data=st.data())
    def add(self, tids: list[int], data: st.DataObject) -> None:
        tfs = [data.draw(st.one_of(st.integers(1, 3), st.integers(1, 2**32 - 1))) for _ in tids]
        for store in self.stores:
            store.add(self.ndocs, tids, tfs)
        self.model[self.ndocs] = dict(zip(tids, tfs, strict=True))
        self.ndocs += 1

    @precondition(lambda self: self.ndocs > 0)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        doc = data.draw(st.integers(0, self.ndocs - 1))
        held = self.model.pop(doc, {})
        emptied = sorted(t for t in held if not any(t in other for other in self.model.values()))
        for store in self.stores:
            assert sorted(store.remove(doc)) == emptied

    @rule()
    def trim(self) -> None:
        for store in self.stores:
            store.trim()

    @rule(code=st.sampled_from(["I", "B"]))
    def reload(self, code: str) -> None:
        """Export, then load into every kind (a snapshot of one read by the other): frequencies as
        bytes when they fit."""
        live = sorted(self.model)
        cols = columns(self.stores[0], 41, self.ndocs, live)
        for store in self.stores[1:]:
            assert columns(store, 41, self.ndocs, live) == cols  # the same bytes
        freqs = array("I")
        freqs.frombytes(cols[2])
        if code == "B" and max(freqs, default=0) > 255:
            code = "I"
        # the loaded documents are numbered densely: renumber the model
        self.model = {new: self.model[doc] for new, doc in enumerate(live)}
        self.ndocs = len(live)
        self.stores = [load(kind, cols, code) for kind in KINDS]

    @invariant()
    def agree(self) -> None:
        for store in self.stores:
            for tid in range(41):
                want = {d: held[tid] for d, held in self.model.items() if tid in held}
                assert store.get(tid, None) == want
                assert store.count(tid) == len(want)
            for doc in range(self.ndocs):
                assert store.tids(doc) == sorted(self.model.get(doc, {}))
            scope_of = array("I", [d % 3 for d in range(self.ndocs)])
            assert store.get(7, (scope_of, b"\x01\x00\x01")) == {
                d: held[7] for d, held in self.model.items() if 7 in held and d % 3 != 1}


TestPostingsModel = Model.TestCase
TestPostingsModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


@pytest.mark.slow  # with the sanitized build it needs; .ci/run runs it (-m slow)
@pytest.mark.skipif(speedups is None, reason="the C extension is not built")
def test_the_native_postings_survive_a_brief_fuzzing_run(tmp_path: Path) -> None:
    guided, sanitized = fuzz(tmp_path, 300, 300, target="postings", unit="runs")
    assert guided.runs >= 300 and sanitized.runs >= 300
    assert guided.corpus > 4  # it found inputs beyond the seeds


@pairs
def test_add_texts_adds_each_text_as_add_text_does_up_to_the_first_that_is_not_ascii(pair: tuple[Any, Any]) -> None:
    one_by_one: PostingStore = pair[0]()
    vocab_one: Vocabulary = pair[1]()
    texts = ["The CAT sat", "", "snake_case file.py 3.11 the cat", "café au lait", "after it"]
    lengths = [one_by_one.add_text(doc, vocab_one, text) for doc, text in enumerate(texts[:3])]
    in_one: PostingStore = pair[0]()
    vocab: Vocabulary = pair[1]()
    assert in_one.add_texts(0, vocab, texts) == lengths == [3, 0, 11]  # stopped at the text that is not ASCII
    assert columns(in_one, 12, 3) == columns(one_by_one, 12, 3)
    assert [vocab.term(t) for t in range(12)] == [vocab_one.term(t) for t in range(12)]
    assert in_one.add_texts(3, vocab, []) == [] and in_one.add_texts(3, vocab, ["ü"]) == []
    with pytest.raises(ValueError, match="the next document is 3"):
        in_one.add_texts(4, vocab, ["x"])  # the first text fails: it raises, nothing added
    assert in_one.tids(3) == []


@pairs
def test_add_texts_returns_what_it_added_before_a_failing_text(pair: tuple[Any, Any]) -> None:
    store: PostingStore = pair[0]()
    vocab: Vocabulary = pair[1]()
    texts: Any = ["one two", 5, "three"]  # the second is not a str: added alone, it raises
    assert store.add_texts(0, vocab, texts) == [2]
    with pytest.raises((TypeError, AttributeError)):  # (the extension's and the twin's refusal of an int)
        store.add_text(1, vocab, texts[1])
    assert store.add_texts(1, vocab, ["three"]) == [1]
