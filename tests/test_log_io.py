"""The log's raw file access (storage/file/logfile.py) under the system's answers a healthy disk rarely
gives: short writes and reads are carried on, a write that makes no progress or fails and an fsync that
fails are DurabilityError, a lock held elsewhere is LockTimeout once the deadline passes; and the scans
recovery relies on (the next valid frame, the frame holding a seq, a whole frame with damaged length
fields) find exactly what FORMAT.md says they must."""

from __future__ import annotations

import errno
import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.frames import frame_spans, read_frames

from mnemo import MnemoClient
from mnemo.errors import DurabilityError, LockTimeout
from mnemo.storage.file import logfile
from mnemo.storage.file.framing import FRAME_END, FRAME_HEADER, FRAME_MAGIC, TRAILER
from mnemo.storage.file.logfile import (
    complete_with_damaged_length,
    find_next_frame,
    frame_holding,
    fsync_dir,
    lock_log,
    read_exact,
    sync,
    unlock_log,
    write_all,
)


@pytest.fixture
def fd(tmp_path: Path) -> Iterator[int]:
    descriptor = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield descriptor
    finally:
        os.close(descriptor)


def test_short_writes_are_carried_on_until_every_byte_is_written(fd: int, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwrite
    calls: list[int] = []

    def one_byte(f: int, data: bytes | memoryview, offset: int) -> int:
        calls.append(offset)
        assert len(calls) <= 5, f"a sixth write of five bytes, at {calls}"
        return real(f, bytes(data[:1]), offset)

    monkeypatch.setattr(os, "pwrite", one_byte)
    write_all(fd, b"hello", 3)
    monkeypatch.undo()
    assert calls == [3, 4, 5, 6, 7]
    assert read_exact(fd, 0, 100) == b"\x00\x00\x00hello"


def test_a_write_that_makes_no_progress_is_a_durability_error(fd: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def nothing(f: int, data: bytes | memoryview, offset: int) -> int:
        calls.append(offset)
        assert len(calls) == 1, "a write that made no progress was retried"
        return 0

    monkeypatch.setattr(os, "pwrite", nothing)
    with pytest.raises(DurabilityError, match="^write made no progress at offset 7$"):
        write_all(fd, b"abc", 7)
    assert calls == [7]


def test_a_failed_write_or_fsync_is_a_durability_error(fd: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", fail)
    with pytest.raises(DurabilityError, match=r"^write failed at offset 9: \[Errno 28\] No space left on device$"):
        write_all(fd, b"abc", 9)
    monkeypatch.setattr(logfile, "_sync", fail)
    with pytest.raises(DurabilityError, match=r"^fsync failed: \[Errno 28\] No space left on device$"):
        sync(fd)
    write_all(fd, b"", 0)  # nothing to write: no call at all


def test_fsync_dir_syncs_the_directory_that_holds_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.fsync
    synced: list[str] = []

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    fsync_dir(str(tmp_path / "db"))
    fsync_dir("db")  # a relative path: the working directory holds it
    assert synced == [str(tmp_path), str(tmp_path / "sub")]


def test_short_reads_are_carried_on_and_a_read_stops_at_the_end_of_the_file(fd: int,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    os.pwrite(fd, b"0123456789", 0)
    real = os.pread
    calls: list[tuple[int, int]] = []

    def three_bytes(f: int, n: int, offset: int) -> bytes:
        calls.append((n, offset))
        return real(f, min(n, 3), offset)

    monkeypatch.setattr(os, "pread", three_bytes)
    assert read_exact(fd, 1, 8) == b"12345678"
    assert calls == [(8, 1), (5, 4), (2, 7)]  # read on until the last byte, and no further
    calls.clear()
    assert read_exact(fd, 6, 100) == b"6789"
    assert calls == [(100, 6), (97, 9), (96, 10)]  # the end of the file: an empty read stops it
    calls.clear()
    calls.clear()
    assert read_exact(fd, 3, 4) == b"3456"  # the last read is of one byte
    assert read_exact(fd, 9, 1) == b"9"
    assert calls == [(4, 3), (1, 6), (1, 9)]
    calls.clear()
    assert read_exact(fd, 10, 5) == b""
    assert read_exact(fd, 2, 0) == b""
    assert calls == [(5, 10)]  # nothing to read: no call at all


def test_the_writer_lock_waits_until_its_deadline(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"x")
    a, b = os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)
    try:
        lock_log(a, time.monotonic() + 1, "the log")
        start = time.monotonic()
        with pytest.raises(LockTimeout, match="^could not take the writer lock on the log in time: another writer"):
            lock_log(b, start + 0.2, "the log")
        assert time.monotonic() - start >= 0.2
        with pytest.raises(LockTimeout):
            lock_log(b, time.monotonic(), "the log")  # a deadline already past: one try
        unlock_log(a)
        lock_log(b, time.monotonic(), "the log")  # free: taken at once, even with no time left
    finally:
        os.close(a)
        os.close(b)
    with pytest.raises(OSError) as exc:
        lock_log(a, time.monotonic() + 1, "the log")  # closed: an error other than "held", raised as it is
    assert exc.value.errno == errno.EBADF


class FakeClock:
    """time for lock_log: monotonic() is `now`, sleep() records its argument and moves `now` on."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert 0 < seconds <= 0.02 and len(self.sleeps) < 100, f"sleep({seconds}) after {self.sleeps}"
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def held(tmp_path: Path) -> Iterator[int]:
    """A descriptor of a log whose writer lock another descriptor holds."""
    path = tmp_path / "log"
    path.write_bytes(b"x")
    a, b = os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)
    lock_log(a, time.monotonic() + 1, "the log")
    try:
        yield b
    finally:
        os.close(a)
        os.close(b)


def test_a_lock_deadline_reached_exactly_is_a_timeout_with_no_wait(held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(100.0)
    monkeypatch.setattr(logfile, "time", clock)
    with pytest.raises(LockTimeout):
        lock_log(held, 100.0, "the log")
    assert clock.sleeps == []


def test_the_lock_retries_twice_as_late_each_time_up_to_20_ms_and_never_past_its_deadline(
        held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(100.0)
    monkeypatch.setattr(logfile, "time", clock)
    with pytest.raises(LockTimeout):
        lock_log(held, 100.1, "the log")
    sleeps = [round(s, 9) for s in clock.sleeps]
    assert sleeps[:8] == [0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.02, 0.02]
    assert all(s == 0.02 for s in sleeps[6:-1]) and 0 < sleeps[-1] <= 0.02
    assert clock.now == pytest.approx(100.1)  # the last wait ends at the deadline, not after it
    clock = FakeClock(200.0)
    monkeypatch.setattr(logfile, "time", clock)
    with pytest.raises(LockTimeout):
        lock_log(held, 200.0002, "the log")
    assert clock.sleeps == [pytest.approx(0.0002)]  # a deadline nearer than the first wait cuts it short


# -- the scans recovery relies on -----------------------------------------------------------------------


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "db"
    with MnemoClient(path, "owner", durability="none") as c:
        for i in range(5):
            c.remember(f"record {i} " * (i + 1))
    return path


def test_the_next_valid_frame_is_found_after_a_damaged_one(log: Path) -> None:
    data = log.read_bytes()
    spans = frame_spans(data)
    frames = read_frames(log)
    fd = os.open(log, os.O_RDONLY)
    try:
        start = spans[2][0]
        assert find_next_frame(fd, start, len(data)) == spans[3][0]
        assert find_next_frame(fd, start - 1, len(data)) == start
        assert find_next_frame(fd, start, len(data), min_seq=frames[3].entries[0].seq) == spans[3][0]
        assert find_next_frame(fd, start, len(data), min_seq=frames[-1].entries[0].seq) == spans[-1][0]
        assert find_next_frame(fd, start, len(data), min_seq=frames[-1].entries[0].seq + 1) is None
        assert find_next_frame(fd, spans[-1][0], len(data)) is None
        assert find_next_frame(fd, start, spans[3][1]) == spans[3][0]
        assert find_next_frame(fd, start, spans[3][1] - 1) is None  # the next frame does not fit in the range
        assert find_next_frame(fd, 0, len(data)) == 32  # from the file header on: the genesis frame, seq 0
    finally:
        os.close(fd)


def test_the_frame_holding_a_seq_is_found_by_its_header(log: Path) -> None:
    data = log.read_bytes()
    frames = read_frames(log)
    fd = os.open(log, os.O_RDONLY)
    try:
        for frame in frames:
            for e in frame.entries:
                found = frame_holding(fd, e.seq, 32, len(data))
                assert found is not None and found.offset == frame.offset and found.entries == frame.entries
        assert frame_holding(fd, frames[-1].entries[-1].seq + 1, 32, len(data)) is None
        last = frames[-1]
        assert frame_holding(fd, last.entries[0].seq, 32, last.offset) is None  # past the range
        assert frame_holding(fd, last.entries[0].seq, 32, last.offset + 23) is None  # not even its header
        assert frame_holding(fd, last.entries[0].seq, 32, last.offset + 24) is None  # its header alone
        assert frame_holding(fd, last.entries[0].seq, 32, last.offset + last.length - 1) is None  # 1 byte short
        whole = frame_holding(fd, last.entries[0].seq, 32, last.offset + last.length)
        assert whole is not None and whole.offset == last.offset and whole.entries == last.entries
    finally:
        os.close(fd)
    broken = bytearray(data)
    broken[frames[2].offset] ^= 0xFF  # the magic of the third frame: the walk stops there
    log.write_bytes(bytes(broken))
    fd = os.open(log, os.O_RDONLY)
    try:
        assert frame_holding(fd, frames[1].entries[0].seq, 32, len(data)) is not None
        assert frame_holding(fd, frames[3].entries[0].seq, 32, len(data)) is None
    finally:
        os.close(fd)


def test_a_whole_frame_with_damaged_length_fields_is_told_from_a_torn_one(log: Path) -> None:
    data = log.read_bytes()
    start, end = frame_spans(data)[-1]
    fd = os.open(log, os.O_RDWR)
    try:
        assert complete_with_damaged_length(fd, start, len(data))  # its own lengths are right too
        for field, value in ((16, 0xFFFF), (20, 0xFFFF), (16, 0)):
            os.pwrite(fd, struct.pack(">I", value), start + field)
            assert complete_with_damaged_length(fd, start, len(data)), (field, value)
            os.pwrite(fd, data[start + field:start + field + 4], start + field)
        os.ftruncate(fd, end - 1)  # a torn write: a prefix of the frame
        assert complete_with_damaged_length(fd, start, end - 1) is False
        os.ftruncate(fd, start + 31)
        assert complete_with_damaged_length(fd, start, start + 31) is False
        os.ftruncate(fd, len(data))
        os.pwrite(fd, data[start:end], start)
        os.pwrite(fd, struct.pack(">I", 5), start + 4)  # count: more entries than the frame holds
        assert complete_with_damaged_length(fd, start, len(data)) is False
        os.pwrite(fd, data[start + 4:start + 8], start + 4)
        os.pwrite(fd, bytes([data[end - 8] ^ 1]), end - 8)  # a bit of the checksum
        assert complete_with_damaged_length(fd, start, len(data)) is False
        os.pwrite(fd, data[end - 8:end - 7], end - 8)
        os.pwrite(fd, b"MNFX", end - 4)
        assert complete_with_damaged_length(fd, start, len(data)) is False
    finally:
        os.close(fd)


@pytest.mark.parametrize("chunk", [4, 5, 6, 7, 8, 11, 24, 31, 64])
def test_the_next_valid_frame_is_found_across_chunk_boundaries(log: Path, monkeypatch: pytest.MonkeyPatch,
                                                               chunk: int) -> None:
    """Read a few bytes at a time, a frame magic straddles two reads at every place it can: still found."""
    monkeypatch.setattr(logfile, "CHUNK", chunk)
    data = log.read_bytes()
    spans = frame_spans(data)
    frames = read_frames(log)
    fd = os.open(log, os.O_RDONLY)
    try:
        for k in range(len(spans) - 1):
            assert find_next_frame(fd, spans[k][0], len(data)) == spans[k + 1][0], k
        assert find_next_frame(fd, 32, len(data), min_seq=frames[-1].entries[0].seq) == spans[-1][0]
        assert find_next_frame(fd, 32, len(data), min_seq=frames[-1].entries[0].seq + 1) is None
    finally:
        os.close(fd)


def test_a_frame_is_found_by_its_first_seq_and_held_by_each_of_its_entries(tmp_path: Path) -> None:
    """In a frame of three entries (a transaction), min_seq is compared with its first seq; and the frame
    holding each of them is that frame."""
    path = tmp_path / "db"
    with MnemoClient(path, "owner", durability="none") as c:
        c.remember("before")
        with c.transaction():
            for i in range(3):
                c.remember(f"in the transaction {i}")
        c.remember("after")
    data = path.read_bytes()
    spans = frame_spans(data)
    frames = read_frames(path)
    tx = next(k for k, f in enumerate(frames) if len(f.entries) == 3)
    seqs = [e.seq for e in frames[tx].entries]
    fd = os.open(path, os.O_RDONLY)
    try:
        before = spans[tx - 1][0]
        assert find_next_frame(fd, before, len(data), min_seq=seqs[0]) == spans[tx][0]
        assert find_next_frame(fd, before, len(data), min_seq=seqs[1]) == spans[tx + 1][0]
        assert find_next_frame(fd, before, len(data), min_seq=seqs[2]) == spans[tx + 1][0]
        for seq in seqs:
            found = frame_holding(fd, seq, 32, len(data))
            assert found is not None and found.offset == spans[tx][0] and [e.seq for e in found.entries] == seqs
        assert frame_holding(fd, seqs[0] - 1, 32, len(data)).offset == spans[tx - 1][0]  # type: ignore[union-attr]
        assert frame_holding(fd, seqs[2] + 1, 32, len(data)).offset == spans[tx + 1][0]  # type: ignore[union-attr]
    finally:
        os.close(fd)


@pytest.mark.parametrize("chunk", [24, 25, 31, 47, 48, 64, 100])
def test_the_frame_holding_a_seq_is_found_across_chunk_boundaries(log: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  chunk: int) -> None:
    """The header walk reads a whole frame header at a time (so at least 24 bytes): wherever the reads
    fall, the frame holding each seq is found, and a seq past the last is held by none."""
    monkeypatch.setattr(logfile, "CHUNK", chunk)
    data = log.read_bytes()
    frames = read_frames(log)
    fd = os.open(log, os.O_RDONLY)
    try:
        for frame in frames:
            found = frame_holding(fd, frame.entries[0].seq, 32, len(data))
            assert found is not None and found.offset == frame.offset, chunk
        assert frame_holding(fd, frames[-1].entries[-1].seq + 1, 32, len(data)) is None
    finally:
        os.close(fd)


def test_a_damaged_length_is_judged_on_the_bytes_up_to_size_only(log: Path) -> None:
    """`size` is the file's size as the caller saw it: bytes appended since are not part of the frame."""
    data = log.read_bytes()
    start, end = frame_spans(data)[-2]
    fd = os.open(log, os.O_RDWR)
    try:
        assert complete_with_damaged_length(fd, start, end)
        assert complete_with_damaged_length(fd, start, end - 1) is False  # the last frame follows in the file
        assert complete_with_damaged_length(fd, start, end + 1) is False
        # A torn prefix shorter than a frame header whose last bytes happen to read as the end magic
        os.pwrite(fd, b"MNFE", start + 16)
        for size in (start + 8, start + 20, start + 31):
            assert complete_with_damaged_length(fd, start, size) is False, size
    finally:
        os.close(fd)


def test_entry_headers_walked_right_up_to_the_trailer_make_a_whole_frame(tmp_path: Path) -> None:
    """The walk may end exactly at the trailer: a frame whose last entry header is the last thing before it
    (an empty entry, no payload slots) and whose checksum holds is whole, damaged lengths or not."""
    raw = struct.pack(">II", 5, 0) + b"entry" + struct.pack(">II", 0, 0)  # two entries, the second empty
    head = struct.pack(">4sIQII", b"MNFR", 2, 7, len(raw), 0)
    trailer = struct.pack(">I", zlib.crc32(raw, zlib.crc32(head))) + b"MNFE"
    damaged = struct.pack(">4sIQII", b"MNFR", 2, 7, len(raw) + 1000, 0)  # its entries_len claims more
    path = tmp_path / "f"
    path.write_bytes(b"\x00" * 3 + damaged + raw + trailer)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert complete_with_damaged_length(fd, 3, 3 + 24 + len(raw) + 8)
        os.close(fd)
        path.write_bytes(b"\x00" * 3 + damaged + raw[:-8] + trailer)  # one entry short of its count
        fd = os.open(path, os.O_RDONLY)
        assert complete_with_damaged_length(fd, 3, 3 + 24 + len(raw) - 8 + 8) is False
        os.close(fd)
        fewer = struct.pack(">4sIQII", b"MNFR", 1, 7, len(raw), 0)  # count one entry short of the bytes
        path.write_bytes(b"\x00" * 3 + fewer + raw + trailer)
        fd = os.open(path, os.O_RDONLY)
        assert complete_with_damaged_length(fd, 3, 3 + 24 + len(raw) + 8) is False  # the walk stops short
    finally:
        os.close(fd)


def test_an_entry_that_runs_into_the_trailer_is_no_whole_frame(tmp_path: Path) -> None:
    """An entry whose length reaches into the trailer leaves no room for the next entry header: not whole,
    and no error."""
    raw = struct.pack(">II", 9, 0) + b"entry"  # it claims 4 bytes more than it has: those of the checksum
    head = struct.pack(">4sIQII", b"MNFR", 2, 7, len(raw), 0)
    trailer = struct.pack(">I", zlib.crc32(raw, zlib.crc32(head))) + b"MNFE"
    path = tmp_path / "f"
    path.write_bytes(head + raw + trailer)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert complete_with_damaged_length(fd, 0, 24 + len(raw) + 8) is False
    finally:
        os.close(fd)


def test_only_a_frame_of_entries_with_the_frame_magic_can_be_whole_with_damaged_lengths(log: Path) -> None:
    """Checksum and end magic right, yet no frame: one of no entries (a frame holds at least one), or one
    whose magic is not MNFR, each sealed with a CRC over its own header. frame_length refuses both as
    bad, so neither is a whole frame whose lengths alone were damaged."""
    data = log.read_bytes()
    start, end = frame_spans(data)[-1]
    empty_head = FRAME_HEADER.pack(FRAME_MAGIC, 0, 99, 0, 0)
    empty = empty_head + TRAILER.pack(zlib.crc32(empty_head), FRAME_END)
    frame = bytearray(data[start:end])
    frame[:4] = b"MNFX"
    body = bytes(frame[FRAME_HEADER.size : -TRAILER.size])
    frame[-TRAILER.size :] = TRAILER.pack(zlib.crc32(body, zlib.crc32(bytes(frame[: FRAME_HEADER.size]))), FRAME_END)
    fd = os.open(log, os.O_RDWR)
    try:
        assert complete_with_damaged_length(fd, start, end)  # the frame as written
        os.pwrite(fd, bytes(frame), start)
        assert complete_with_damaged_length(fd, start, end) is False
        os.ftruncate(fd, start)
        os.pwrite(fd, empty, start)
        assert len(empty) == 32 and complete_with_damaged_length(fd, start, start + 32) is False
    finally:
        os.close(fd)
