"""verify and the text index's rows it has yet to index: verify compares the documents the index holds
with the records' text, checks the text this process holds for a pending row against the log, and
reports a live record with text that is neither indexed nor pending; it indexes nothing itself, so a
database recall never read is verified without reading its text twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mnemo import MnemoClient

ALTERED = "the index snapshot was altered"


def _row(c: MnemoClient, rec_id: str) -> int:
    store: Any = c._store
    row = store.index.row_of(rec_id)
    assert row is not None
    return int(row)


def test_verify_leaves_the_rows_recall_has_yet_to_index_pending(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with MnemoClient(db, "x", durability="none") as c:
        for i in range(5):
            c.remember(f"note {i}")
    with MnemoClient(db, "x", durability="none") as c:
        text = c._store.index.text  # type: ignore[attr-defined]
        assert len(text.pending) == 5 and not text.held
        assert c.verify().ok
        assert len(text.pending) == 5 and len(text.doc_row) == 0
        assert [r.record.content for r in c.recall("note 3")][0] == "note 3"


def test_a_record_whose_document_is_neither_indexed_nor_pending_is_reported(tmp_path: Path) -> None:
    db = tmp_path / "n.db"
    with MnemoClient(db, "x", durability="none") as c:
        kept = c.remember("hello world").id
        lost = c.remember("goodbye world").id
        c.recall("world")
        text = c._store.index.text  # type: ignore[attr-defined]
        text.remove_row(_row(c, lost))  # as a forged snapshot would leave it: no document, not pending
        assert _row(c, lost) not in text.pending and text.doc_of(_row(c, kept)) is not None
        report = c.verify()
    assert not report.ok
    assert [p.message for p in report.problems if p.kind == "index"] == [
        f"the text index of record {lost} differs from its latest version's text: {ALTERED}"
    ]


def test_text_held_for_a_pending_row_that_differs_from_the_log_is_reported(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with MnemoClient(db, "x", durability="none") as c:
        rid = c.remember("what the log says").id
        text = c._store.index.text  # type: ignore[attr-defined]
        row = _row(c, rid)
        assert row in text.pending and text.held[row][2] == "what the log says"
        assert c.verify().ok
        scope, seq, _ = text.held[row]
        text.held[row] = (scope, seq, "what the log does not say")
        report = c.verify()
    assert not report.ok
    assert [p.message for p in report.problems if p.kind == "index"] == [
        f"the text index of record {rid} differs from its latest version's text: {ALTERED}"
    ]
