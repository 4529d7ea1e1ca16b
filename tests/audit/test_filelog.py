"""The auditor's reader of log files (mnemo/storage/file/reader.py): a window that holds at most a chunk, reads
each byte it serves from the file exactly once while it holds it, in any order of requests; a file that
grows while it is read (a frame being appended is not a torn one) or shrinks; frames too large to read
before their end marker is seen; and the scan's damaged stretches (where the chain resumes after one is
logfile.after_damage's, tested with it in tests/storage/file/test_logfile.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.frames import frame_spans, read_frames
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo import IntegrityError, MnemoClient
from mnemo.audit import read_log, verify_db
from mnemo.storage.file import reader as filelog
from mnemo.storage.file.framing import FrameError


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "db"
    with MnemoClient(path, "owner", durability="none") as c:
        for i in range(6):
            c.remember(f"record {i} " * (20 * i + 1))
    return path


@pytest.fixture
def fd(log: Path) -> Iterator[int]:
    fd = os.open(log, os.O_RDONLY)
    yield fd
    os.close(fd)


DATA = bytes(range(256)) * 40  # 10,240 bytes


def recorded_reads(win: filelog.Window) -> list[tuple[int, int]]:
    """(offset, n) of every read the window makes from the file from now on."""
    reads: list[tuple[int, int]] = []
    pread = win.pread

    def counting(offset: int, n: int) -> bytes:
        reads.append((offset, n))
        return pread(offset, n)

    win.pread = counting  # type: ignore[method-assign]
    return reads


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(DATA) + 10), st.integers(0, 3000)), min_size=1, max_size=12),
       st.sampled_from([16, 100, 4096]))
def test_a_window_serves_exactly_the_bytes_asked_for_in_any_order(requests: list[tuple[int, int]], chunk: int) -> None:
    """Forward, backward, overlapping or past the end: get() returns the file's bytes; the buffer holds
    no more than a chunk or the request; and bytes the buffer already holds are not read again."""
    import tempfile

    with tempfile.NamedTemporaryFile() as f:
        f.write(DATA)
        f.flush()
        mp = pytest.MonkeyPatch()
        mp.setattr(filelog, "CHUNK", chunk)
        try:
            win = filelog.Window(f.fileno(), len(DATA), f.name, None)
            reads = recorded_reads(win)
            for offset, n in requests:
                held = (win.start, win.start + len(win.buf))
                reads.clear()
                assert win.get(offset, n) == DATA[offset:offset + n]
                end = min(offset + n, len(DATA))
                if held[0] <= offset and end <= held[1]:
                    assert reads == []  # all of it was in the buffer
                else:
                    assert len(win.buf) <= max(n, chunk)
                    assert all(not (held[0] <= o < held[1]) or o == held[1] for o, _ in reads)
        finally:
            mp.undo()


def test_a_window_over_a_file_that_shrank_ends_where_the_file_now_ends(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filelog, "CHUNK", 64)
    path = tmp_path / "f"
    path.write_bytes(DATA)
    seen: list[tuple[int, int]] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        win = filelog.Window(fd, len(DATA), str(path), lambda done, total: seen.append((done, total)))
        assert win.get(0, 10) == DATA[:10] and seen == [(0, len(DATA))]
        os.truncate(path, 5000)
        assert win.get(4990, 100) == DATA[4990:5000]
        assert win.size == 5000 and seen[-1] == (4990, 5000)
    finally:
        os.close(fd)


def test_a_frame_appended_while_the_log_is_read_is_read_whole(log: Path, fd: int) -> None:
    data = log.read_bytes()
    spans = frame_spans(data)
    start, end = spans[-1]
    os.truncate(log, start)
    win = filelog.Window(fd, start, str(log), None)  # opened before the last frame was written
    with open(log, "ab") as f:
        f.write(data[start:])
    frame, ok = filelog._read_frame(win, start, lenient=False)
    assert (frame.offset, frame.length, ok, win.size) == (start, end - start, True, end)
    # ...but a frame still being written, its header or its body, is not whole yet, whether the window
    # knew of its header or not
    for known, cut in ((start, start + 10), (start, end - 1), (start + 30, end - 1)):
        log.write_bytes(data[:cut])
        win = filelog.Window(fd, known, str(log), None)
        with pytest.raises(FrameError) as torn:
            filelog._read_frame(win, start, lenient=False)
        assert torn.value.kind == "incomplete"
        if cut > start + 24:
            assert str(torn.value) == f"the file ends inside the frame at offset {start}"
            assert win.size == cut


def test_a_window_that_may_not_grow_reads_only_what_it_was_given(log: Path, fd: int) -> None:
    data = log.read_bytes()
    start, _end = frame_spans(data)[-1]
    win = filelog.Window(fd, start + 30, str(log), None, growable=False)
    assert win.grew() is False and win.size == start + 30
    with pytest.raises(FrameError, match=f"^the file ends inside the frame at offset {start}$"):
        filelog._read_frame(win, start, lenient=False)
    grows = filelog.Window(fd, start + 30, str(log), None)
    assert grows.grew() is True and grows.size == len(data)
    assert grows.grew() is False  # no larger than it was


def test_a_large_frame_without_its_end_marker_is_refused_before_it_is_read(log: Path, fd: int,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray(log.read_bytes())
    start, end = frame_spans(bytes(data))[-1]
    monkeypatch.setattr(filelog, "BIG_FRAME", end - start - 1)  # the last frame counts as large
    win = filelog.Window(fd, len(data), str(log), None)
    frame, ok = filelog._read_frame(win, start, lenient=False)
    assert frame.offset == start and ok
    data[end - 1] ^= 0x01  # the last byte of its end marker
    log.write_bytes(bytes(data))
    win = filelog.Window(fd, len(data), str(log), None)
    reads = recorded_reads(win)
    with pytest.raises(FrameError) as refused:
        filelog._read_frame(win, start, lenient=False)
    assert (refused.value.kind, str(refused.value)) == (
        "bad", f"frame at offset {start} has no end marker where its length says")
    assert (end - 4, 4) in reads and all(n <= filelog.CHUNK for _o, n in reads)


def test_a_read_the_disk_fails_is_an_unreadable_database_naming_the_offset(
    log: Path, fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read error (a bad sector: EIO) is UnreadableDatabase with the file, the offset and the reason,
    for the auditor to report; never bytes that are not the file's."""
    from mnemo.audit import UnreadableDatabase

    def failing(fd: int, offset: int, n: int) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(filelog, "pread", failing)
    win = filelog.Window(fd, os.fstat(fd).st_size, str(log), None)
    with pytest.raises(UnreadableDatabase) as info:
        win.get(100, 10)
    assert str(info.value) == f"cannot read {log} at offset 100: Input/output error"
    with pytest.raises(UnreadableDatabase) as info:
        list(read_log(log))
    assert str(info.value) == f"cannot read {log} at offset 0: Input/output error"


def _damages(path: Path, data: bytes) -> list[tuple[int, int | None, bool]]:
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        items = list(filelog.scan_log(filelog.Window(fd, len(data), str(path), None), lenient=True))
    finally:
        os.close(fd)
    return [(d.offset, d.resume, d.torn) for d in items if isinstance(d, filelog.Damage)]


def _unbounded(data: bytes, at: int, end: int) -> bytes:
    """The frame at..end with its entries length past the end of the file and its trailer broken: where
    it ends cannot be found, only the link of the next frame to its entries tells where it resumes."""
    data = data[:at + 16] + len(data).to_bytes(4, "big") + data[at + 20:]
    return data[:end - 4] + b"XXXX" + data[end:]


def test_the_frames_after_a_damaged_one_link_to_the_last_entry_read(tmp_path: Path) -> None:
    """The scan walks a damaged frame's entries from the last entry it read (the last of a transaction's
    frame; before the genesis, none), so the next frame, which links to them, is where it resumes even
    with more damage further on."""
    path = tmp_path / "db"
    with MnemoClient(path, "owner", durability="none") as c:
        with c.transaction():
            c.remember("one")
            c.remember("two")
        for i in range(4):
            c.remember(f"record {i}")
    data = path.read_bytes()
    spans = frame_spans(data)
    assert [len(f.entries) for f in read_frames(path)] == [1, 2, 1, 1, 1, 1]
    later = spans[4][0]
    broken = bytes(data[:later]) + b"XXXX" + bytes(data[later + 4:])
    for k in (2, 0):
        damaged = _unbounded(broken, *spans[k])
        assert _damages(path, damaged) == [(spans[k][0], spans[k + 1][0], False), (later, spans[5][0], False)]
        # verify, which reads part of the log by its fast path, resumes at the same frames
        resumed = [p.message.split("next good frame at offset ")[1].split(";")[0]
                   for p in verify_db(path).problems if p.kind == "bad-frame"]
        assert resumed == [str(spans[k + 1][0]), str(spans[5][0])]


def test_a_read_that_fails_after_damage_is_an_unreadable_database(log: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemo.audit import UnreadableDatabase
    from mnemo.storage.file import logfile

    data = bytearray(log.read_bytes())
    second = frame_spans(bytes(data))[1][0]
    data[second] ^= 0xFF
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(bytes(data))

    def failing(fd: int, offset: int, n: int) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(logfile, "pread", failing)
    fd = os.open(damaged, os.O_RDONLY)
    try:
        with pytest.raises(UnreadableDatabase) as info:
            list(filelog.scan_log(filelog.Window(fd, len(data), str(damaged), None), lenient=True))
    finally:
        os.close(fd)
    assert str(info.value) == f"cannot read {damaged} after offset {second}: Input/output error"


def test_a_stray_byte_before_a_frame_is_the_only_damage(log: Path, tmp_path: Path) -> None:
    """A byte written between two frames: the scan reports damage at that byte and resumes at the very
    next one, where the frame begins, so no frame after it is lost."""
    data = log.read_bytes()
    spans = frame_spans(data)
    second = spans[1][0]
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(data[:second] + b"\x00" + data[second:])
    fd = os.open(damaged, os.O_RDONLY)
    try:
        win = filelog.Window(fd, len(data) + 1, str(damaged), None)
        items = list(filelog.scan_log(win, lenient=True))
    finally:
        os.close(fd)
    damages = [i for i in items if isinstance(i, filelog.Damage)]
    assert [(d.offset, d.resume, d.torn) for d in damages] == [(second, second + 1, False)]
    assert len(items) == len(spans) + 1  # every frame, and the one damaged stretch


def test_read_log_gives_every_entry_in_order_with_its_offset_and_payload(log: Path) -> None:
    data = log.read_bytes()
    frames = read_frames(log)
    want = []
    for frame in frames:
        off = frame.offset + 24
        for e, slot in zip(frame.entries, frame.slots, strict=True):
            payload = None
            if slot.state == "ok":
                start, length = slot.payload_range()
                payload = data[start:start + length]
            want.append((e.seq, e.raw, off, slot, payload))
            off += 8 + len(e.raw)
    got = [(i.entry.seq, i.entry.raw, i.offset, i.slot, i.payload) for i in read_log(log, payloads=True)]
    assert got == want and [g[0] for g in got] == list(range(len(got)))
    assert [(i.entry.seq, i.payload) for i in read_log(log)] == [(w[0], None) for w in want]


def test_read_log_stops_before_a_torn_last_frame_and_refuses_damage_elsewhere(log: Path) -> None:
    data = log.read_bytes()
    spans = frame_spans(data)
    seqs = [e.seq for f in read_frames(log) for e in f.entries]
    last = read_frames(log)[-1]
    log.write_bytes(data[: spans[-1][1] - 3])
    assert [i.entry.seq for i in read_log(log)] == seqs[: len(seqs) - len(last.entries)]
    damaged = bytearray(data)
    damaged[spans[2][0] + 30] ^= 0x01
    log.write_bytes(bytes(damaged))
    with pytest.raises(IntegrityError) as refused:
        list(read_log(log))
    assert str(refused.value).startswith(f"{log}: damaged frame at offset {spans[2][0]} (")
    assert str(refused.value).endswith("); run `mnemo verify` for the full report")
    assert refused.value.offset == spans[2][0]
    bad_header = bytearray(data)
    bad_header[0] ^= 0x01
    log.write_bytes(bytes(bad_header))
    with pytest.raises(IntegrityError, match=f"^{log}: bad file header: ") as refused:
        list(read_log(log))
    assert refused.value.offset == 0
