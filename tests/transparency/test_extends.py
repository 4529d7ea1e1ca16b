"""`log_extends` at the bounds of a kept checkpoint: sizes 0, 1, the log's size and one past it, a note of
another origin under the database's default, and every field of the report, on both backends (the vector
chain copied into PostgreSQL); a damaged log on the file backend."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from helpers.transparency_vectors import ENTRIES, NOTE_5, ORIGIN, PUBKEY, SEED, write_vector_db

from mnemo.chain.tree import HashList, leaf_hash
from mnemo.transparency.extends import log_extends
from mnemo.transparency.note import Note, sign_checkpoint_note, sign_note_text

LEAVES = HashList([leaf_hash(e) for e in ENTRIES])
ROOT5 = LEAVES.root(5)


def b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


def note_of(size: int, origin: str = ORIGIN) -> str:
    return sign_checkpoint_note(origin, size, LEAVES.root(size), SEED)


def unsigned_size_note(size: int, root: bytes) -> str:
    """A note the log's key signed for a size sign_checkpoint_note refuses (say 0)."""
    text = f"{ORIGIN}\n{size}\n{b64(root)}\n"
    return str(Note(text, (sign_note_text(text, ORIGIN, SEED),)))


def kinds(report: Any) -> list[tuple[str, str]]:
    return [(p.kind, p.message) for p in report.problems]


def test_a_checkpoint_of_an_empty_tree_is_refused(vdb: Any) -> None:
    report = log_extends(vdb, unsigned_size_note(0, LEAVES.root(0)), PUBKEY)
    assert kinds(report) == [("size", "the checkpoint is of an empty tree; a Mnemo log never is")]
    assert not report.ok and report.checkpoint_size == 0 and report.consistency is None


def test_checkpoints_of_size_1_and_of_the_logs_size_are_extended(vdb: Any) -> None:
    for size in (1, 5):
        report = log_extends(vdb, note_of(size), PUBKEY)
        assert report.ok and kinds(report) == []
        assert report.consistency is not None and report.consistency.verifies()
        assert (report.consistency.old_size, report.consistency.new_size) == (size, 5)
        assert report.consistency.proof == tuple(LEAVES.consistency_proof(size, 5))


def test_a_checkpoint_one_past_the_log_is_refused(vdb: Any) -> None:
    leaves = HashList([leaf_hash(e) for e in ENTRIES] + [leaf_hash(b"later")])
    report = log_extends(vdb, sign_checkpoint_note(ORIGIN, 6, leaves.root(6), SEED), PUBKEY)
    assert kinds(report) == [("truncated", "the checkpoint covers 6 entries, the log holds only 5: it was cut back "
                                           "(or the checkpoint is of another database)")]
    assert report.consistency is None


def test_the_databases_own_origin_is_expected_by_default(vdb: Any) -> None:
    other = note_of(3, origin="example.com/x")  # the log's key, another log's name
    assert kinds(log_extends(vdb, other, PUBKEY)) == [
        ("origin", f"the checkpoint's origin is 'example.com/x', not {ORIGIN!r}")]
    assert log_extends(vdb, other, PUBKEY, origin="example.com/x").ok


def test_a_rewritten_root_at_the_checkpoints_size_is_named(vdb: Any) -> None:
    forged = sign_checkpoint_note(ORIGIN, 3, LEAVES.root(2), SEED)
    assert kinds(log_extends(vdb, forged, PUBKEY)) == [
        ("rewritten", f"the log's root at size 3 is {b64(LEAVES.root(3))}, not the checkpoint's "
                      f"{b64(LEAVES.root(2))}: entries below seq 3 were changed")]


def test_the_report_of_an_extended_checkpoint(vdb: Any) -> None:
    report = log_extends(vdb, note_of(3), PUBKEY)
    assert report.summary() == f"OK: the log (5 entries) extends the checkpoint of 3 entries of {ORIGIN}"
    assert report.to_json() == {
        "ok": True, "origin": ORIGIN, "tree_size": 5, "root": b64(ROOT5), "checkpoint_size": 3,
        "consistency": {"origin": ORIGIN, "old_size": 3, "new_size": 5, "old_root": b64(LEAVES.root(3)),
                        "new_root": b64(ROOT5), "consistency": [b64(h) for h in LEAVES.consistency_proof(3, 5)]},
        "problems": []}
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.ok = False  # type: ignore[misc]
    assert hash(report) == hash(log_extends(vdb, note_of(3), PUBKEY))


def test_the_report_of_a_note_that_does_not_parse(vdb: Any) -> None:
    report = log_extends(vdb, "garbage", PUBKEY)
    assert report.summary() == "FAILED: 1 problems"
    assert report.to_json() == {
        "ok": False, "origin": ORIGIN, "tree_size": 5, "root": b64(ROOT5), "checkpoint_size": None,
        "consistency": None,
        "problems": [{"kind": "note", "message": "the note has no blank line before its signature lines"}]}
    two = log_extends(vdb, note_of(3, origin="example.com/x"), b"\x01" * 32)
    assert two.summary() == "FAILED: 2 problems" and two.origin == "example.com/x"


def test_the_report_on_a_damaged_log(tmp_path: Path) -> None:
    vfile = write_vector_db(tmp_path / "vectors.db")
    data = bytearray(vfile.read_bytes())
    data[data.find(b"bob")] ^= 1
    vfile.write_bytes(bytes(data))
    report = log_extends(vfile, NOTE_5, PUBKEY)
    out = report.to_json()
    assert [p["kind"] for p in out["problems"]] == ["log"]
    assert {k: v for k, v in out.items() if k != "problems"} == {
        "ok": False, "origin": ORIGIN, "tree_size": None, "root": None, "checkpoint_size": 5, "consistency": None}
    # with the log unreadable, no origin is expected unless given: any origin the key signed passes that check
    other = log_extends(vfile, note_of(3, origin="example.com/x"), PUBKEY)
    assert [p.kind for p in other.problems] == ["log"] and other.origin == "example.com/x"
    nothing = log_extends(vfile, "garbage", PUBKEY)
    assert nothing.origin is None and nothing.checkpoint_size is None and nothing.log_root is None


def test_an_extends_report_is_a_value_that_cannot_be_changed(vdb: Any) -> None:
    import dataclasses

    report = log_extends(vdb, note_of(1), PUBKEY)
    assert report.ok
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.ok = False  # type: ignore[misc]
    assert log_extends(vdb, note_of(1), PUBKEY) == report
