"""The file backend's text index (mnemo/storage/file/text_index.py): what a document's arrival and
departure change, its snapshot form (renumbered rows, pending rows, nothing of a departed document), a
forged snapshot refused or reported by verify, and an open that reads no text when the snapshot has it."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.storage.file import postings, text_index
from mnemo.storage.file import snapshot as snap
from mnemo.storage.file.search import Search
from mnemo.storage.file.text_index import TextIndex


def state_of(index: TextIndex) -> dict[str, Any]:
    return index.to_state(None)


def test_a_document_leaves_every_structure_and_its_words_the_vocabulary() -> None:
    text = TextIndex()
    text.add(0, 1, "dark mode dark", 10)
    text.add(1, 1, "dark coffee", 11)
    text.add(2, 2, "secretword", 12)
    assert text.postings("dark", None) == {0: 2, 1: 1}
    assert text.postings("dark", text.scope_mask({2})) == {}
    assert text.totals([1]) == (2, 5) and text.totals([1, 2]) == (3, 6)
    assert list(text.expand("s")) == ["secretword"]
    text.remove_row(2)
    assert "secretword" not in text.vocab and list(text.expand("s")) == []
    assert text.totals([1, 2]) == (2, 5) and 2 not in text.scope_totals
    assert "secretword" not in repr(state_of(text))
    text.remove_row(0)
    assert text.postings("dark", None) == {1: 1}
    assert "mode" not in text.vocab
    assert text.totals([1]) == (1, 2)


def test_a_changed_row_waits_for_its_text_and_a_forgotten_one_does_not() -> None:
    text = TextIndex()
    text.add(0, 1, "old words", 5)
    text.changed(0)
    assert text.postings("old", None) == {} and text.pending == {0}
    text.added([1, 2])
    text.remove_row(2)
    read: list[int] = []

    def reader(row: int) -> tuple[int, int, str | None]:
        read.append(row)
        return 1, 6, "new words" if row == 0 else None

    text.catch_up(reader)
    assert read == [0, 1] and not text.pending
    assert text.postings("new", None) == {text.doc_of(0): 1}
    assert text.doc_of(1) is None  # not text: not a document


def test_the_snapshot_form_is_dense_and_renumbered() -> None:
    text = TextIndex()
    for row, words in enumerate(["b a", "gone gone", "c a"]):
        text.add(row, 0, words, 20 + row)
    text.remove_row(1)
    text.added([5])
    state = text.to_state({0: 1, 2: 0, 5: 2}.__getitem__)
    assert state["terms"] == ["a", "b", "c"]
    again = TextIndex.from_state(state, rows=3, scopes=1)
    assert again.postings("a", None) == {0: 1, 1: 1}
    assert [again.doc_of(row) for row in range(3)] == [1, 0, None] and again.pending == {2}
    assert again.describe(str, str) == {"1": ("0", 2, 20, {"a": 1, "b": 1}), "0": ("0", 2, 22, {"a": 1, "c": 1})}
    assert [again.norms(2.0, 2)[doc] for doc in (0, 1)] == [1.2, 1.2]
    assert [again.norms(4.0, 2)[doc] for doc in (0, 1)] == [1.2 * (0.25 + 0.75 * 0.5)] * 2
    assert again.norms(4.0, 2) is again.norms(4.0, 0)  # kept while the average is the same
    for _ in range(20):
        again.add(again.row_docs.buffer_info()[1], 0, "more words here", 99)
    few = again.norms(3.0, 1)
    assert [few[doc] for doc in range(22)] == [1.2 * (1 - 0.75 + 0.75 * length / 3.0) for length in again.doc_len]


@pytest.mark.parametrize("field", ["doc_row", "post_docs", "pending"])
def test_a_snapshot_naming_rows_or_documents_it_lacks_is_refused(tmp_path: Path, field: str) -> None:
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        c.remember("hello world")
        c.remember("second")
        if field != "pending":
            c.recall("hello")  # indexed: the snapshot holds documents
    body = snap.read_snapshot(str(db) + ".snap")
    assert body is not None
    text = body["index"]["text"]
    width = 8 if field in ("doc_row", "pending") else 4
    text[field] = (99).to_bytes(width, "little") + bytes(text[field])[width:]
    snap.write_snapshot(str(db) + ".snap", body)
    with MnemoClient(db, "x") as c:
        assert c._store.snapshot_refused is not None  # type: ignore[attr-defined]
        assert [r.record.content for r in c.recall("hello")] == ["hello world"]


def test_a_forged_term_is_reported_by_verify(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        rid = c.remember("hello world").id
        c.recall("hello")
    body = snap.read_snapshot(str(db) + ".snap")
    assert body is not None
    assert body["index"]["text"]["terms"] == ["hello", "world"]
    body["index"]["text"]["terms"] = ["hello", "xorld"]
    snap.write_snapshot(str(db) + ".snap", body)
    with MnemoClient(db, "x") as c:
        report = c.verify()
    assert not report.ok
    assert [p.message for p in report.problems if p.kind == "index"] == [
        f"the text index of record {rid} differs from its latest version's text: the index snapshot was altered"
    ]


def test_an_open_from_the_snapshot_reads_no_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        for i in range(20):
            c.remember(f"note {i} about topic{i % 3}")
        c.recall("note")

    def no_reads(self: Any, row: int) -> Any:
        raise AssertionError("text read from the log")

    monkeypatch.setattr(Search, "_row_text", no_reads)
    with MnemoClient(db, "x", durability="none") as c:
        assert c._store.snapshot_used  # type: ignore[attr-defined]
        assert len(c.recall("topic1")) == 7


def test_rows_written_before_a_snapshot_and_never_searched_are_found_after_it(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        rid = c.remember("written never searched").id
    body = snap.read_snapshot(str(db) + ".snap")
    assert body is not None and len(bytes(body["index"]["text"]["pending"])) == 8
    with MnemoClient(db, "x") as c:
        assert [r.record.id for r in c.recall("searched")] == [rid]


def _forged_text(db: Path, edit: Any) -> None:
    body = snap.read_snapshot(str(db) + ".snap")
    assert body is not None
    edit(body["index"]["text"])
    snap.write_snapshot(str(db) + ".snap", body)


def _indexed_db(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        c.remember("hello world")
        c.remember("second note")
        c.recall("hello")
    return db


def test_the_text_index_is_layout_2_and_another_layout_or_shape_is_refused(tmp_path: Path) -> None:
    db = _indexed_db(tmp_path)
    body = snap.read_snapshot(str(db) + ".snap")
    assert body is not None and body["index"]["text"]["layout"] == 2
    for n, edit in enumerate((
        lambda text: text.update(layout=3),
        lambda text: text.update(freq_bytes=2),
        lambda text: text.update(terms=[b"hello", "note", "second", "world"]),
        lambda text: text.update(doc_row=(2).to_bytes(8, "little") + bytes(text["doc_row"])[8:]),  # rows: 0 and 1
    )):
        db = _indexed_db(tmp_path / str(n))
        _forged_text(db, edit)
        with MnemoClient(db, "x") as c:
            assert c._store.snapshot_refused is not None  # type: ignore[attr-defined]
            assert [r.record.content for r in c.recall("hello")] == ["hello world"]
            assert c.verify().ok is False  # a snapshot refused at the log's head is reported


def test_a_document_whose_own_term_list_was_altered_is_reported_by_verify(tmp_path: Path) -> None:
    db = _indexed_db(tmp_path)
    _forged_text(db, lambda text: text.update(doc_terms=(1).to_bytes(4, "little") + bytes(text["doc_terms"])[4:]))
    with MnemoClient(db, "x") as c:
        problems = [p.message for p in c.verify().problems if p.kind == "index"]
    assert len(problems) == 1 and "differs from its latest version's text" in problems[0]


def test_verify_passes_with_departed_documents_and_bytes_content(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        a = c.remember("first words").id
        c.remember(b"bytes are not text")
        b = c.remember("to be forgotten").id
        c.recall("words")
        c.update(a, content="first words changed")
        c.forget(b)
        c.recall("words")
        report = c.verify()
        assert report.ok, report.problems
    with MnemoClient(db, "x", durability="none") as c:
        assert c.verify().ok


def test_a_record_another_client_forgot_before_this_one_caught_up_is_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "f.db"
    with MnemoClient(db, "x") as reader, MnemoClient(db, "x") as writer:
        reader.recall("anything")
        rid = writer.remember("fleeting thought").id
        reader._store.refresh()  # type: ignore[attr-defined]  # the row is known, its text not read yet
        writer.forget(rid)  # its slot is erased before the reader hears of the forget
        monkeypatch.setattr(type(reader._store), "refresh", lambda self: None)  # type: ignore[attr-defined]
        assert reader.recall("fleeting") == []
        monkeypatch.undo()
        assert reader.recall("fleeting") == []
        assert reader.recall("thought") == []


def test_a_hit_forgotten_between_ranking_and_reading_is_not_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    db = tmp_path / "f.db"
    with MnemoClient(db, "x") as reader, MnemoClient(db, "x") as writer:
        doomed = writer.remember("shared word, doomed").id
        kept = writer.remember("shared word, kept").id
        rank = Search._rank
        calls: list[int] = []

        def rank_then_forget(self: Any, *args: Any) -> Any:
            ranked = rank(self, *args)
            if not calls:
                writer.forget(doomed)  # erased by another client after the ranking
            calls.append(1)
            return ranked

        monkeypatch.setattr(Search, "_rank", rank_then_forget)
        assert [r.record.id for r in reader.recall("shared")] == [kept]
        assert len(calls) == 2


def test_a_client_that_only_searched_saves_the_index_it_built_when_it_closes(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        c.remember("indexed once")
    with MnemoClient(db, "x", durability="none") as c:
        assert len(c._store.index.text.pending) == 1  # type: ignore[attr-defined]
        c.recall("indexed")
    with MnemoClient(db, "x", durability="none", readonly=True) as c:
        assert not c._store.index.text.pending  # type: ignore[attr-defined]
        assert [r.record.content for r in c.recall("once")] == ["indexed once"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), max_size=50))
def test_column_max_is_max_with_and_without_the_extension(values: list[int]) -> None:
    column = array("I", values)
    assert text_index.column_max(column) == max(values, default=0)
    with patch.object(text_index, "speedups", None):
        assert text_index.column_max(column) == max(values, default=0)


@pytest.mark.skipif(text_index.speedups is None, reason="the C extension is not built")
def test_max_u32_takes_only_a_column_of_32_bit_codes() -> None:
    with pytest.raises(TypeError, match="format 'I'"):
        text_index.speedups.max_u32(array("q", [1]))


def test_frequencies_are_kept_as_bytes_until_one_passes_255_and_layout_1_is_still_read(tmp_path: Path) -> None:
    db = _indexed_db(tmp_path)
    text = snap.read_snapshot(str(db) + ".snap")["index"]["text"]  # type: ignore[index]
    assert text["freq_bytes"] == 1 and len(text["post_freqs"]) == len(text["post_docs"]) // 4
    with MnemoClient(db, "x") as c:
        c.remember("many " * 300)
        want = [(r.record.content[:20], r.score) for r in c.recall("many hello")]
    text = snap.read_snapshot(str(db) + ".snap")["index"]["text"]  # type: ignore[index]
    assert text["freq_bytes"] == 4 and len(text["post_freqs"]) == len(text["post_docs"])
    with MnemoClient(db, "x") as c:
        assert c._store.snapshot_refused is None  # type: ignore[attr-defined]
        assert [(r.record.content[:20], r.score) for r in c.recall("many hello")] == want

    def as_layout_1(text: dict[str, Any]) -> None:
        freqs = array("I")
        freqs.frombytes(bytes(text.pop("post_freqs")))
        assert text.pop("freq_bytes") == 4
        text.update(layout=1, post_freqs=freqs.tobytes())

    _forged_text(db, as_layout_1)
    with MnemoClient(db, "x") as c:
        assert c._store.snapshot_refused is None  # type: ignore[attr-defined]
        assert [(r.record.content[:20], r.score) for r in c.recall("many hello")] == want
        assert c.verify().ok


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10**6)), max_size=80))
def test_scope_totals_of_a_loaded_index_are_each_scopes_count_and_length(docs: list[tuple[int, int]]) -> None:
    want: dict[int, list[int]] = {}
    for scope, length in docs:
        want.setdefault(scope, [0, 0])
        want[scope][0] += 1
        want[scope][1] += length
    got = text_index._scope_totals(array("I", [s for s, _ in docs]), array("I", [n for _, n in docs]))
    assert got == want


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), max_size=40))
def test_frequencies_narrowed_for_the_snapshot_widen_back(values: list[int]) -> None:
    freqs = array("I", values)
    width, blob = text_index._narrowed(freqs)
    assert width == (1 if max(values, default=0) < 256 else 4)
    loaded = array("B" if width == 1 else "I")
    loaded.frombytes(blob)
    assert postings.widened(loaded) == freqs and postings.widened(loaded).typecode == "I"


def _held(c: MnemoClient) -> dict[int, Any]:
    return c._store.index.text.held  # type: ignore[attr-defined,no-any-return]


def test_the_catch_up_takes_what_this_process_wrote_without_reading_it_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with MnemoClient(tmp_path / "f.db", "x", durability="none") as c:
        a = c.remember("alpha written here").id
        c.remember(b"bytes are not held")
        with c.transaction():
            b = c.remember("beta in a transaction").id
        assert [t for _, _, t in _held(c).values()] == ["alpha written here", None, "beta in a transaction"]

        def unread(self: Any, row: int) -> Any:
            raise AssertionError("read back from the log")

        monkeypatch.setattr(Search, "_row_text", unread)
        assert [r.record.id for r in c.recall("alpha")] == [a]
        assert [r.record.id for r in c.recall("transaction")] == [b]
        assert _held(c) == {} and c._store.index.text.held_chars == 0  # type: ignore[attr-defined]


def test_held_text_goes_with_an_update_a_forget_or_a_rollback_before_any_catch_up(tmp_path: Path) -> None:
    with MnemoClient(tmp_path / "f.db", "x", durability="none") as c:
        kept = c.remember("first words").id
        c.update(kept, content="second words")
        gone = c.remember("secretword to forget").id
        c.forget(gone)
        with pytest.raises(RuntimeError), c.transaction():
            c.remember("rolledback words")
            raise RuntimeError
        assert [t for _, _, t in _held(c).values()] == ["second words"]
        assert [r.record.id for r in c.recall("words")] == [kept]
        assert c.recall("first") == [] and c.recall("secretword") == [] and c.recall("rolledback") == []


def test_held_text_is_bounded_and_the_rest_is_read_from_the_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_index, "HELD_CHARS", 20)
    with MnemoClient(tmp_path / "f.db", "x", durability="none") as c:
        ids = [c.remember(f"note number {i}").id for i in range(4)]  # 13 characters each
        assert len(_held(c)) == 1 and c._store.index.text.held_chars == 13  # type: ignore[attr-defined]
        assert sorted(r.record.id for r in c.recall("note")) == sorted(ids)


def test_held_text_gives_way_to_another_process_s_version(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as a, MnemoClient(db, "x", durability="none") as b:
        rec = a.remember("original wording").id
        b.update(rec, content="replacement wording")
        assert [r.record.content for r in a.recall("wording")] == ["replacement wording"]
        assert a.recall("original") == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2), st.none() | st.text(max_size=6)), max_size=12),
       st.sets(st.integers(0, 6)), st.integers(0, 20))
def test_hold_many_holds_what_hold_holds_one_by_one(
    items: list[tuple[int, int, str | None]], pending: set[int], limit: int
) -> None:
    one, many = TextIndex(), TextIndex()
    for index in (one, many):
        index.added(pending)
        index.hold(0, 1, 99, "held before")  # (when row 0 is pending: a row held again lets go of its text)
    held = [(row, scope, seq, text) for seq, (row, scope, text) in enumerate(items)]
    with patch.object(text_index, "HELD_CHARS", limit + len("held before")):
        for item in held:
            one.hold(*item)
        many.hold_many(*(list(column) for column in zip(*held, strict=True)) if held else ([], [], [], []))
    assert many.held == one.held and many.held_chars == one.held_chars


def test_add_many_indexes_runs_as_add_does_one_by_one_with_texts_not_ascii_and_none_between() -> None:
    found = [(1, 10, "dark mode"), (1, 11, None), (2, 12, "dark coffee café"), (1, 13, "snake_case x"),
             (2, 14, "ünïcode"), (2, 15, "tail end")]
    rows = [0, 1, 2, 5, 6, 9]  # a gap: rows 3, 4, 7 and 8 hold nothing
    one_by_one = TextIndex()
    for row, (scope, seq, text) in zip(rows, found, strict=True):
        if text is not None:
            one_by_one.add(row, scope, text, seq)
    in_runs = TextIndex()
    in_runs.add_many(rows, found, {})
    assert state_of(in_runs) == state_of(one_by_one)
    assert in_runs.scope_totals == one_by_one.scope_totals and list(in_runs.row_docs) == list(one_by_one.row_docs)


def test_a_catch_up_of_more_rows_than_a_chunk_indexes_each_as_one_by_one(tmp_path: Path) -> None:
    db = tmp_path / "db"
    with MnemoClient(str(db), "agent", durability="none") as c:
        with c.transaction():
            for i in range(text_index.CATCH_UP_CHUNK * 2 + 3):
                c.remember(f"memory {i} über" if i % 50 == 7 else f"memory {i}", tags=["t"])
            c.remember(b"bytes")
        n = text_index.CATCH_UP_CHUNK * 2 + 3
        assert len(c.recall("memory", limit=1000)) == n
        assert sorted(r.record.content for r in c.recall("über", limit=100)) == sorted(
            f"memory {i} über" for i in range(7, n, 50))
        caught = state_of(c._store.index.text)
    with MnemoClient(str(db), "agent", durability="none") as fresh:
        fresh._store.index.text = TextIndex()  # every row indexed again, by the rows one at a time
        fresh._store.index.text.added(fresh._store.index.live_rows())
        with patch.object(text_index, "CATCH_UP_CHUNK", 1):
            fresh.recall("memory")
        assert state_of(fresh._store.index.text) == caught
