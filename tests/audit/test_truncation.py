"""What each mechanism finds when a log is cut short, as the README's threat model states it: a log cut
right after a signed checkpoint passes `verify(pubkey=...)`; only a head saved elsewhere
(`expect_head`) finds that truncation. The signature finds entries after the last signed checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

from helpers.frames import frame_spans, read_frames

from mnemo import MnemoClient
from mnemo.audit import load_private_key, public_key_bytes, verify_db

SEED = bytes(range(32))
PUB = public_key_bytes(load_private_key(SEED))


def _build(db: Path) -> tuple[int, tuple[int, str]]:
    """A signed log: puts, a checkpoint, more puts, a final checkpoint. Returns the first checkpoint's
    seq and the final head."""
    with MnemoClient(db, "owner", durability="none", signing_key=SEED) as c:
        c.remember("before the first checkpoint")
        first = c.checkpoint()
        assert first is not None
        c.remember("after it, one")
        c.remember("after it, two")
        c.checkpoint()
        head = c.head
    return first, head


def _cut_after_seq(db: Path, seq: int) -> None:
    """Truncate the log right after the frame holding entry `seq` (a clean cut at a frame boundary)."""
    data = db.read_bytes()
    frames = read_frames(db)
    (end,) = [end for (_start, end), f in zip(frame_spans(data), frames, strict=True)
              if any(e.seq == seq for e in f.entries)]
    os.truncate(db, end)


def test_a_log_cut_right_after_a_signed_checkpoint_passes_the_signature_check(tmp_path: Path) -> None:
    db = tmp_path / "signed.db"
    first, head = _build(db)
    assert verify_db(db, pubkey=PUB, expect_head=head).ok
    _cut_after_seq(db, first)  # the later puts and the final checkpoint are gone
    # The file, read as an auditor holding it would:
    assert verify_db(db).ok
    cut = verify_db(db, pubkey=PUB)
    assert cut.ok and cut.head_seq == first, "a signed checkpoint does not reveal this truncation"
    truncated = verify_db(db, pubkey=PUB, expect_head=head)
    assert not truncated.ok
    assert [(p.kind, p.seq) for p in truncated.problems] == [("expect-head", head[0])]
    assert "the log was truncated" in truncated.problems[0].message
    # ... and through a client, as its owner sees it
    with MnemoClient(db, "owner", readonly=True) as c:
        assert c.verify(pubkey=PUB).ok
        report = c.verify(expect_head=head)
        assert not report.ok and [p.kind for p in report.problems] == ["expect-head"]
        assert [r.content for r in c.query()] == ["before the first checkpoint"]


def test_a_cut_between_checkpoints_is_found_by_the_signature_check(tmp_path: Path) -> None:
    db = tmp_path / "signed.db"
    first, head = _build(db)
    _cut_after_seq(db, first + 1)  # one put after the first checkpoint stays, unsigned
    report = verify_db(db, pubkey=PUB)
    assert [(p.kind, p.seq) for p in report.problems] == [("unsigned", first + 1)]
    assert not verify_db(db, expect_head=head).ok
