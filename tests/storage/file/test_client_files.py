"""The log file a client writes, and what it does on disk: the header and genesis frame, one frame a
write, the index snapshot beside it (written on close, discarded when it does not match the log), the
writer lock, the documented sibling files, and writes after a failed write or fsync. What is the
file's own; the same client behaviour on both backends is in tests/contract/test_client.py."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import payload
from helpers.frames import frame_spans, read_frames
from helpers.reopen import build_db, reopen_state

from mnemo import MnemoClient
from mnemo.errors import DurabilityError, LockTimeout
from mnemo.storage.file.framing import HEADER_SIZE, decode_file_header

AGENT = "agent-1"


def payload_of(path: Path, seq: int) -> bytes | None:
    """The payload bytes stored for the entry with this seq (None when the slot is empty or erased)."""
    data = path.read_bytes()
    for frame in read_frames(path):
        for entry, slot in zip(frame.entries, frame.slots, strict=True):
            if entry.seq == seq:
                if slot.state != "ok":
                    return None
                start, n = slot.payload_range()
                return data[start : start + n]
    raise AssertionError(f"no entry with seq {seq} in the log")


def snap_path(db: Path) -> Path:
    return Path(str(db) + ".snap")


def main_end(data: bytes) -> int:
    """Where a snapshot's main part ends (its deferred text part follows)."""
    return 20 + struct.unpack(">Q", data[12:20])[0]


def sealed(data: bytes) -> bool:
    """Whether both parts of a snapshot hold their checksums."""
    end = main_end(data)
    return (data[end - 32 : end] == hashlib.sha256(data[: end - 32]).digest()
            and data[-32:] == hashlib.sha256(data[end:-32]).digest())


def corrupt_flip(data: bytes) -> bytes:
    mid = main_end(data) // 2
    return data[:mid] + bytes([data[mid] ^ 0x40]) + data[mid + 1 :]


def rewrite_snapshot(snap: Path, change: Any) -> None:
    """Change the snapshot's body and recompute its checksum, as a tamperer would."""
    from mnemo.storage.file.snapshot import decode_snapshot, encode_snapshot

    data = snap.read_bytes()
    assert data[:8] == b"MNEMOSNP"
    body = decode_snapshot(data)
    assert body is not None
    change(body)
    snap.write_bytes(encode_snapshot(body))


def failing_sync(fd: int) -> None:
    raise OSError(errno.EIO, "Input/output error")


def test_snapshot_of_another_db_is_discarded(tmp_path: Path) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    build_db(a)
    build_db(b, n=10)
    expected = reopen_state(a)
    snap_path(a).write_bytes(snap_path(b).read_bytes())
    assert reopen_state(a, snapshot_used=False) == expected


def test_a_new_file_db_has_header_and_genesis_frame(db_path: Path) -> None:
    with MnemoClient(str(db_path), AGENT, durability="fsync") as c:
        data = db_path.read_bytes()
        db_id = decode_file_header(data[:HEADER_SIZE])
        assert c.db_id == db_id.hex()
        assert c.path is not None and Path(c.path) == db_path
        frames = read_frames(db_path)
        assert len(frames) == 1 and len(frames[0].entries) == 1
        genesis = frames[0].entries[0]
        assert genesis.body == {"db_id": db_id, "format": 1}
        assert frames[0].slots[0].state == "none"


def test_remember_appends_exactly_one_frame(db_path: Path) -> None:
    with MnemoClient(db_path, AGENT, durability="none") as client:
        before = db_path.read_bytes()
        rec = client.remember("hello wörld", tags=["b", "a"])
        after = db_path.read_bytes()
        assert after[: len(before)] == before, "the log was not only appended to"
        frames = read_frames(db_path)
        last = frames[-1]
        assert last.offset == len(before) and last.end == len(after)
        assert [e.seq for e in last.entries] == [rec.seq]
        assert payload_of(db_path, rec.seq) == payload(db_path, rec.seq)


def test_persistence_across_reopen_with_and_without_the_snapshot(db_path: Path) -> None:
    records = build_db(db_path)
    state = reopen_state(db_path, snapshot_used=True)
    assert state[0] == records
    snap_path(db_path).unlink()
    assert reopen_state(db_path, snapshot_used=False) == state


def test_close_leaves_a_valid_snapshot_without_content(db_path: Path) -> None:
    with MnemoClient(db_path, AGENT) as c:
        c.remember("SECRET-CONTENT-4711", tags=["tagged"], metadata={"k": "META-VALUE-4711"})
    snap = snap_path(db_path).read_bytes()
    assert snap.startswith(b"MNEMOSNP") and struct.unpack(">I", snap[8:12]) == (3,)
    # the main part, sealed by the SHA-256 of the file up to its end, then the text part, sealed on its own
    assert sealed(snap)
    assert b"SECRET-CONTENT-4711" not in snap
    assert b"META-VALUE-4711" not in snap


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: None,
        lambda b: corrupt_flip(b),
        lambda b: b[: main_end(b) // 2],
        lambda b: b"",
        lambda b: b"MNEMOSNP" + bytes(range(200)),
        lambda b: b[: main_end(b) - 1] + bytes([b[main_end(b) - 1] ^ 1]) + b[main_end(b) :],
    ],
    ids=["deleted", "flipped", "truncated", "empty", "garbage", "bad-checksum"],
)
def test_damaged_snapshot_is_discarded(db_path: Path, damage: Any) -> None:
    build_db(db_path)
    expected = reopen_state(db_path)
    snap = snap_path(db_path)
    new = damage(snap.read_bytes())
    if new is None:
        snap.unlink()
    else:
        snap.write_bytes(new)
    log_before = db_path.read_bytes()
    assert reopen_state(db_path, snapshot_used=False) == expected
    assert db_path.read_bytes() == log_before
    assert snap.exists(), "the missing or damaged snapshot was not rebuilt"
    assert sealed(snap.read_bytes()), "the damaged snapshot was not rebuilt"
    assert reopen_state(db_path, snapshot_used=True) == expected


@pytest.mark.parametrize("damage", ["flipped", "truncated", "bad-checksum"])
def test_a_damaged_text_part_is_refused_alone_and_made_again_from_the_log(db_path: Path, damage: str) -> None:
    """The open loads the main part (its checksum holds) and the text part after it: refused, recall's
    index is made again from the log, the refusal is reported, and the next snapshot is sound."""
    with MnemoClient(db_path, AGENT, durability="none") as c:
        ids = [c.remember(f"note {i} about topic{i % 3}").id for i in range(40)]
        c.recall("note")
    snap = snap_path(db_path)
    data = snap.read_bytes()
    end = main_end(data)
    mid = (end + len(data)) // 2
    snap.write_bytes({"flipped": data[:mid] + bytes([data[mid] ^ 0x40]) + data[mid + 1 :],
                      "truncated": data[:mid],
                      "bad-checksum": data[:-1] + bytes([data[-1] ^ 1])}[damage])
    with MnemoClient(db_path, AGENT, durability="none") as c:
        assert c.stats()["snapshot_used"]
        assert [h.record.id for h in c.recall("topic1", limit=100)] == ids[1::3][::-1]
        assert c._store.snapshot_refused == {  # type: ignore[attr-defined]
            "flipped": "its text part: the snapshot's text part does not match its checksum",
            "truncated": "its text part: the snapshot's text part is cut short",
            "bad-checksum": "its text part: the snapshot's text part does not match its checksum",
        }[damage]
        c.remember("one more")  # the close writes a new snapshot
    assert sealed(snap.read_bytes())
    with MnemoClient(db_path, AGENT, readonly=True) as c:
        assert c._store.snapshot_refused is None  # type: ignore[attr-defined]
        assert [h.record.id for h in c.recall("topic1", limit=100)] == ids[1::3][::-1]


def test_snapshot_with_wrong_head_hash_is_discarded(db_path: Path) -> None:
    build_db(db_path)
    expected = reopen_state(db_path)
    rewrite_snapshot(snap_path(db_path), lambda body: body["index"].__setitem__("head_hash", b"\x01" * 32))
    assert reopen_state(db_path, snapshot_used=False) == expected


def test_snapshot_pointing_at_an_earlier_frame_is_discarded(db_path: Path) -> None:
    build_db(db_path)
    expected = reopen_state(db_path)
    spans = frame_spans(db_path.read_bytes())

    def back_one_frame(body: dict[str, Any]) -> None:
        body["frame_offset"], body["offset"] = spans[-2]

    rewrite_snapshot(snap_path(db_path), back_one_frame)
    assert reopen_state(db_path, snapshot_used=False) == expected


def test_stale_snapshot_replays_the_tail(db_path: Path) -> None:
    build_db(db_path)
    old_snap = snap_path(db_path).read_bytes()
    with MnemoClient(db_path, AGENT, durability="none") as c:
        new = c.remember("later", tags=["late"])
        c.update(new.id, content="later still")
        first = c.query()[0]
        c.forget(first.id)
    expected = reopen_state(db_path)
    snap_path(db_path).write_bytes(old_snap)
    state = reopen_state(db_path, snapshot_used=True)
    assert state == expected
    assert first.id not in state[0] and state[0][new.id].content == "later still"


def test_snapshot_ahead_of_the_log_is_discarded(db_path: Path) -> None:
    build_db(db_path)
    old_log = db_path.read_bytes()
    expected = reopen_state(db_path)
    with MnemoClient(db_path, AGENT, durability="none") as c:
        c.remember("beyond the old log")
    db_path.write_bytes(old_log)
    assert reopen_state(db_path, snapshot_used=False) == expected


def test_lock_timeout_when_another_writer_holds_the_lock(db_path: Path) -> None:
    with MnemoClient(db_path, AGENT, durability="fsync", lock_timeout=0.3) as c:
        rec = c.remember("before")
        before = db_path.read_bytes()
        fd = os.open(db_path, os.O_RDONLY)  # the writer lock is an flock on the log file itself
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            started = time.monotonic()
            with pytest.raises(LockTimeout):
                c.remember("blocked")
            waited = time.monotonic() - started
            assert 0.25 <= waited < 3.0
            assert db_path.read_bytes() == before
            assert c.get(rec.id) == rec, "a read waited for the writer lock"
            with MnemoClient(db_path, AGENT, readonly=True) as reader:
                assert reader.get(rec.id) == rec
        finally:
            os.close(fd)
        assert c.remember("after").seq == rec.seq + 1
        assert c.verify().ok


def test_sibling_files_are_the_documented_ones(db_path: Path) -> None:
    with MnemoClient(db_path, AGENT) as c:
        c.remember("x")
    names = {p.name for p in db_path.parent.iterdir()}
    allowed = {db_path.name + suffix for suffix in ("", ".snap", ".leaves")}
    assert db_path.name in names and names <= allowed, names


def test_an_fsync_failure_stops_writes(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemo.storage.file import logfile

    with MnemoClient(db_path, AGENT, durability="fsync") as c:
        kept = c.remember("kept")
        monkeypatch.setattr(logfile, "_sync", failing_sync)
        with pytest.raises(DurabilityError):
            c.remember("unsure")
        after_failure = db_path.read_bytes()
        monkeypatch.undo()
        for write in (lambda: c.remember("refused"), lambda: c.update(kept.id, content="no"),
                      lambda: c.forget(kept.id)):
            with pytest.raises(DurabilityError):
                write()
        assert db_path.read_bytes() == after_failure
        assert c.get(kept.id) == kept
    with MnemoClient(db_path, AGENT, durability="fsync") as again:
        assert again.get(kept.id) == kept
        again.remember("a fresh client writes again")
        assert again.verify().ok


def test_a_failed_sync_in_batch_mode_stops_later_writes(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemo.storage.file import logfile

    with MnemoClient(db_path, AGENT, durability="batch") as c:
        c.remember("first")
        monkeypatch.setattr(logfile, "_sync", failing_sync)
        c.remember("not yet synced")
        time.sleep(0.3)
        with pytest.raises(DurabilityError):
            c.remember("after the failed sync")
        monkeypatch.undo()


def test_a_failed_write_leaves_the_log_as_it_was(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with MnemoClient(db_path, AGENT, durability="fsync") as c:
        kept = c.remember("kept")
        before = db_path.read_bytes()
        real_pwrite = os.pwrite

        def half_then_full(fd: int, data: Any, offset: int) -> int:
            if len(data) > 8:
                real_pwrite(fd, bytes(data[: len(data) // 2]), offset)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "pwrite", half_then_full)
        with pytest.raises(DurabilityError):
            c.remember("does not fit " * 20)
        monkeypatch.undo()
        assert db_path.read_bytes() == before
        with pytest.raises(DurabilityError):
            c.remember("refused after the failure")
        assert c.query() == [kept]
    with MnemoClient(db_path, AGENT) as again:
        assert again.recovery == []
        assert again.query() == [kept]
