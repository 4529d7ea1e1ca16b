"""A read of the log from a seq on (`log(since)`) starts at a frame marked near it: it gives exactly the
entries a read of the whole log gives from that seq on, on logs of one-entry frames and of transactions,
as the log grows, after a compaction writes a new file, before a write in progress, and at damage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.frames import flip_byte, frame_spans, read_frames

from mnemo import IntegrityError, MnemoClient
from mnemo.audit import read_log
from mnemo.storage.file import frame_marks
from mnemo.storage.file.frame_marks import FrameMarks
from mnemo.storage.file.framing import HEADER_SIZE

AGENT = "admin"


@pytest.fixture(autouse=True)
def close_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Marks a few frames apart, so that a small log has many."""
    monkeypatch.setattr(frame_marks, "MARK_SPACING", 600)


def _fill(client: MnemoClient, rounds: int) -> None:
    for i in range(rounds):
        client.remember(f"alone {i}", tags=["t"])
        if i % 4 == 0:
            with client.transaction():
                for k in range(5):
                    client.remember(f"together {i}.{k}", tags=["t"])
        if i % 7 == 3:
            client.forget(client.remember(f"gone {i}").id)


def _seqs(client: MnemoClient, since: int) -> list[int]:
    return [e.seq for e in client.log(since=since)]


def test_a_read_from_any_seq_is_the_whole_read_from_there(tmp_path: Path) -> None:
    with MnemoClient(tmp_path / "m.db", AGENT, durability="none") as client:
        _fill(client, 30)
        whole = client.log()
        head = client.head[0]
        assert [e.seq for e in whole] == list(range(head + 1))
        for since in [head, 0, 1, 57, head - 1, 3, head // 2, head + 1, head + 50, *range(0, head + 2, 5)]:
            assert client.log(since=since) == [e for e in whole if e.seq >= since], since
            assert [i.entry for i in read_log(tmp_path / "m.db", since=since)] == whole[since:], since
        marks = client._store._frame_marks  # type: ignore[attr-defined]
        assert len(marks._offsets) > 5  # the reads above did start from marks
        spans = {start for start, _end in frame_spans((tmp_path / "m.db").read_bytes())}
        assert set(marks._offsets) <= spans  # every mark is where a frame starts


def test_the_marks_follow_the_log_as_it_grows_and_as_a_compaction_rewrites_it(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with MnemoClient(db, AGENT, durability="none") as client:
        _fill(client, 20)
        middle = client.head[0] // 2
        before = client.log(since=middle)
        _fill(client, 20)  # appended after the walk
        grown = client.log()
        assert client.log(since=middle) == grown[middle:]
        assert client.log(since=len(grown) - 3) == grown[-3:]
        old_file = os.stat(db).st_ino
        client.compact()
        assert os.stat(db).st_ino != old_file  # a new file, where the frames after a forget moved
        compacted = client.log()
        assert [e.seq for e in compacted] == [e.seq for e in grown]  # the same entries, at new offsets
        for since in (1, middle, len(grown) - 2):
            assert client.log(since=since) == compacted[since:]
        assert before == grown[middle : middle + len(before)]


def test_another_client_s_appends_are_read(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with MnemoClient(db, AGENT, durability="none") as reader, MnemoClient(db, AGENT, durability="none") as writer:
        _fill(writer, 10)
        since = reader.head[0] - 4
        assert _seqs(reader, since) == list(range(since, since + 5))
        _fill(writer, 10)
        assert _seqs(reader, since) == list(range(since, writer.head[0] + 1))


def test_a_frame_being_written_ends_the_walk_and_the_read(tmp_path: Path) -> None:
    """Half a frame at the end (a write in progress, or torn): the read stops before it, from a mark as
    from the start."""
    db = tmp_path / "m.db"
    with MnemoClient(db, AGENT, durability="none") as client:
        _fill(client, 12)
        head = client.head[0]
    data = db.read_bytes()
    start, end = frame_spans(data)[-1]
    with open(db, "ab") as f:
        f.write(data[start : start + (end - start) // 2])
    with MnemoClient(db, AGENT, readonly=True) as reader:
        assert _seqs(reader, head - 2) == [head - 2, head - 1, head]
        assert _seqs(reader, 0) == list(range(head + 1))


def test_damage_after_the_mark_is_reported_as_a_whole_read_reports_it(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with MnemoClient(db, AGENT, durability="none") as client:
        _fill(client, 12)
        head = client.head[0]
    spans = frame_spans(db.read_bytes())
    start, _end = spans[-3]
    flip_byte(db, start)  # the frame's magic
    with MnemoClient(db, AGENT, readonly=True) as reader:
        with pytest.raises(IntegrityError) as whole:
            reader.log()
        with pytest.raises(IntegrityError) as near:
            reader.log(since=head)
    assert str(near.value) == str(whole.value)
    assert f"damaged frame at offset {start}" in str(near.value)


def test_a_walk_stops_at_a_header_out_of_order(tmp_path: Path) -> None:
    """A header that does not name the next seq is not walked past: the start found is before it."""
    db = tmp_path / "m.db"
    with MnemoClient(db, AGENT, durability="none") as client:
        _fill(client, 12)
    spans = frame_spans(db.read_bytes())
    bad_start = spans[len(spans) // 2][0]
    flip_byte(db, bad_start + 8 + 7)  # the low byte of the frame's first seq
    fd = os.open(db, os.O_RDONLY)
    try:
        marks = FrameMarks()
        st = os.fstat(fd)
        start = marks.start(fd, (st.st_ino, st.st_dev), st.st_size, 10**9)
    finally:
        os.close(fd)
    assert HEADER_SIZE <= start < bad_start and marks._end == bad_start


def _frames(db: Path) -> list[tuple[int, int, int, int]]:
    """(offset, end, first seq, entries) of every frame, read independently of the walk."""
    data = db.read_bytes()
    return [(start, end, frame.entries[0].seq, len(frame.entries))
            for (start, end), frame in zip(frame_spans(data), read_frames(db), strict=True)]


def _model(frames: list[tuple[int, int, int, int]], since: int, spacing: int) -> tuple[list[int], int, int]:
    """The marks (offsets), where the walk ends and the start a walk up to `since` gives."""
    marks: list[tuple[int, int]] = []
    last, end = HEADER_SIZE, HEADER_SIZE
    for offset, frame_end, first, _count in frames:
        if first > since:
            break
        if offset - last >= spacing:
            marks.append((first, offset))
            last = offset
        end = frame_end
    start = max((offset for first, offset in marks if first <= since), default=HEADER_SIZE)
    return [offset for _first, offset in marks], end, start


def _walk(db: Path, marks: FrameMarks, since: int) -> int:
    fd = os.open(db, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        return marks.start(fd, (st.st_ino, st.st_dev), st.st_size, since)
    finally:
        os.close(fd)


@pytest.mark.parametrize("chunk", [1 << 20, 100, 24, 37])
def test_the_walk_marks_the_frames_it_should_and_goes_no_further_than_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Each mark is the first frame at least MARK_SPACING bytes after the one before; a walk goes as far
    as the frame holding `since` and no further (to the end of the file when `since` is past the head);
    the start is the last mark at or before `since`. Read in chunks of any size, headers across their
    edges included."""
    monkeypatch.setattr(frame_marks, "WALK_CHUNK", chunk)
    db = tmp_path / "m.db"
    with MnemoClient(db, AGENT, durability="none") as client:
        _fill(client, 16)
        head = client.head[0]
    frames = _frames(db)
    assert frames[-1][1] == db.stat().st_size
    # 600 bytes, and the distance of the fourth frame from the first: a frame exactly that far is marked
    for spacing in (600, frames[3][0] - HEADER_SIZE):
        monkeypatch.setattr(frame_marks, "MARK_SPACING", spacing)
        shared = FrameMarks()
        furthest = 0
        for since in [1, 2, 7, 8, 30, head // 2, head - 1, 3, head, head + 1]:
            fresh = FrameMarks()
            offsets, end, start = _model(frames, since, spacing)
            assert _walk(db, fresh, since) == start, since
            assert (fresh._offsets, fresh._end) == (offsets, end), since
            assert fresh._seqs == [first for offset, _e, first, _c in frames if offset in offsets]
            # one kept across reads walks on from where it stopped, and never back
            furthest = max(furthest, since)
            assert _walk(db, shared, since) == start, since
            assert (shared._offsets, shared._end) == _model(frames, furthest, spacing)[:2], since
        assert shared._end == db.stat().st_size and shared._next_seq == head + 1
        assert frames[3][0] in shared._offsets or spacing == 600


def test_a_walk_stops_at_a_frame_of_no_entries(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with MnemoClient(db, AGENT, durability="none") as client:
        _fill(client, 8)
    frames = _frames(db)
    offset = frames[len(frames) // 2][0]
    with open(db, "r+b") as f:
        f.seek(offset + 4)
        f.write(b"\0\0\0\0")  # its count
    marks = FrameMarks()
    _walk(db, marks, 10**9)
    assert marks._end == offset
