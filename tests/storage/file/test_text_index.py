"""The file backend's text index (mnemo/storage/file/text_index.py): what a document's arrival and
departure change, its snapshot form (renumbered rows, pending rows, nothing of a departed document), a
forged snapshot refused or reported by verify, and an open that reads no text when the snapshot has it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mnemo import MnemoClient
from mnemo.storage.file import snapshot as snap
from mnemo.storage.file.text_index import TextIndex


def state_of(index: TextIndex) -> dict[str, Any]:
    return index.to_state(None)


def test_a_document_leaves_every_structure_and_its_words_the_vocabulary() -> None:
    text = TextIndex()
    text.add(0, 1, "dark mode dark")
    text.add(1, 1, "dark coffee")
    text.add(2, 2, "secretword")
    assert text.postings("dark", None) == {0: 2, 1: 1}
    assert text.postings("dark", {2}) == {}
    assert text.totals([1]) == (2, 5) and text.totals([1, 2]) == (3, 6)
    assert list(text.expand("s")) == ["secretword"]
    text.remove_row(2)
    assert "secretword" not in text.term_ids and list(text.expand("s")) == []
    assert text.totals([1, 2]) == (2, 5) and 2 not in text.scope_totals
    assert "secretword" not in repr(state_of(text))
    text.remove_row(0)
    assert text.postings("dark", None) == {1: 1}
    assert "mode" not in text.term_ids
    assert text.totals([1]) == (1, 2)


def test_a_changed_row_waits_for_its_text_and_a_forgotten_one_does_not() -> None:
    text = TextIndex()
    text.add(0, 1, "old words")
    text.changed(0)
    assert text.postings("old", None) == {} and text.pending == {0}
    text.added([1, 2])
    text.remove_row(2)
    read: list[int] = []

    def reader(row: int) -> tuple[int, str | None]:
        read.append(row)
        return 1, "new words" if row == 0 else None

    text.catch_up(reader)
    assert read == [0, 1] and not text.pending
    assert text.postings("new", None) == {text.row_doc[0]: 1}
    assert 1 not in text.row_doc  # not text: not a document


def test_the_snapshot_form_is_dense_and_renumbered() -> None:
    text = TextIndex()
    for row, words in enumerate(["b a", "gone gone", "c a"]):
        text.add(row, 0, words)
    text.remove_row(1)
    text.added([5])
    state = text.to_state({0: 1, 2: 0, 5: 2}.__getitem__)
    assert state["terms"] == ["a", "b", "c"]
    again = TextIndex.from_state(state, rows=3, scopes=1)
    assert again.postings("a", None) == {0: 1, 1: 1}
    assert again.row_doc == {1: 0, 0: 1} and again.pending == {2}
    assert again.describe(str, str) == {"1": ("0", 2, {"a": 1, "b": 1}), "0": ("0", 2, {"a": 1, "c": 1})}


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
    from mnemo.storage.file.search import Search

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
