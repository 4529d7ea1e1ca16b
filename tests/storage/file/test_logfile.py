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
from helpers.frames import forged_put_frame, frame_spans, read_frames

from mnemo import MnemoClient
from mnemo.errors import DurabilityError, LockTimeout
from mnemo.storage.file import logfile
from mnemo.storage.file.framing import FRAME_END, FRAME_HEADER, FRAME_MAGIC, TRAILER
from mnemo.storage.file.logfile import (
    AfterDamage,
    after_damage,
    complete_with_damaged_length,
    frame_holding,
    frames_after,
    fsync_dir,
    lock_log,
    pread,
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
    assert pread(fd, 100, 0) == b"\x00\x00\x00hello"


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
    assert pread(fd, 8, 1) == b"12345678"
    assert calls == [(8, 1), (5, 4), (2, 7)]  # read on until the last byte, and no further
    calls.clear()
    assert pread(fd, 100, 6) == b"6789"
    assert calls == [(100, 6), (97, 9), (96, 10)]  # the end of the file: an empty read stops it
    calls.clear()
    calls.clear()
    assert pread(fd, 4, 3) == b"3456"  # the last read is of one byte
    assert pread(fd, 1, 9) == b"9"
    assert calls == [(4, 3), (1, 6), (1, 9)]
    calls.clear()
    assert pread(fd, 5, 10) == b""
    assert pread(fd, 0, 2) == b""
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


def find_next_frame(fd: int, start: int, end: int, min_seq: int = 0) -> int | None:
    """The offset of the first frame frames_after finds after `start` whose first seq is at least min_seq."""
    return next((at for at, frame in frames_after(fd, start, end) if frame.entries[0].seq >= min_seq), None)


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


def test_the_next_good_frame_is_found_from_exactly_its_start(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = log.read_bytes()
    spans = frame_spans(data)
    fd = os.open(log, os.O_RDONLY)
    try:
        for chunk in (64, 1 << 20):
            monkeypatch.setattr(logfile, "CHUNK", chunk)
            for start, _end in spans:
                assert find_next_frame(fd, start - 1, len(data)) == start
                assert find_next_frame(fd, start, len(data)) == next((s for s, _ in spans if s > start), None)
            assert find_next_frame(fd, len(data) - 1, len(data)) is None
    finally:
        os.close(fd)


def test_a_frame_whose_magic_a_chunk_cuts_is_found(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The search reads a chunk at a time: a frame whose magic begins in the last one, two or three bytes
    of a chunk is found all the same, the next chunk starting early enough to hold all of it."""
    data = log.read_bytes()
    spans = frame_spans(data)
    assert len(spans) >= 3
    fd = os.open(log, os.O_RDONLY)
    try:
        for (prev, _), (start, _) in zip(spans, spans[1:], strict=False):
            for inside in (1, 2, 3):
                monkeypatch.setattr(logfile, "CHUNK", start + inside - (prev + 1))
                assert find_next_frame(fd, prev, len(data)) == start
    finally:
        os.close(fd)


def test_the_search_for_a_good_frame_passes_over_one_whose_checksum_fails(log: Path, tmp_path: Path) -> None:
    """The search finds frames that parse with a good checksum: one whose only fault is its checksum
    (which the auditor's lenient read still returns, for its entries to be reported) is passed over."""
    data = bytearray(log.read_bytes())
    spans = frame_spans(bytes(data))
    (second, end), (third, _) = spans[1], spans[2]
    data[end - 8] ^= 0xFF  # the trailer's checksum: the frame is whole, its checksum wrong
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(data)
    fd = os.open(damaged, os.O_RDONLY)
    try:
        assert find_next_frame(fd, second - 1, len(data)) == third
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


@pytest.fixture
def carrier_log(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """Eight frames: the genesis, three records; the carrier, a transaction of two puts (seqs 4 and 5)
    whose second one's content holds three forged frames: one linked to the entry before the carrier
    (seq 4, its prev the hash of seq 3), one at the carrier's last seq (5), one at seq 1,000,000; then a
    transaction of two records, and two records. Returns the path and the forged frames."""
    path = tmp_path / "db"
    with MnemoClient(path, "owner", durability="none") as c:
        for i in range(3):
            c.remember(f"record {i}")
        seq, head = c.head
        forged = [forged_put_frame(seq + 1, bytes.fromhex(head)), forged_put_frame(seq + 2),
                  forged_put_frame(1_000_000)]
        with c.transaction():
            c.remember("the carrier's first")
            c.remember(b"copies: " + b" and ".join(forged) + b" and after them")
        with c.transaction():
            c.remember("after 0")
            c.remember("after 1")
        for i in range(2, 4):
            c.remember(f"after {i}")
    return path, forged


@pytest.mark.parametrize("chunk", [None, 40], ids=["chunk", "40-byte-chunks"])
def test_the_chain_resumes_where_it_puts_the_next_frame_never_inside_a_payload(
    carrier_log: tuple[Path, list[bytes]], monkeypatch: pytest.MonkeyPatch, chunk: int | None
) -> None:
    """after_damage on the carrier's frame, damaged in each way: the chain resumes at the next frame of
    the chain (found where the frame ends, by the link to its own entries, or as the start of a run of
    frames to the end of the file), never at a forged frame inside its content, though each is whole,
    its checksum sound, one at the carrier's own first seq with its prev the hash of the entry before.
    Read a chunk at a time, entries longer than a chunk are read whole (up to the entries length)."""
    if chunk is not None:
        monkeypatch.setattr(logfile, "CHUNK", chunk)
    path, forged = carrier_log
    data = path.read_bytes()
    spans = frame_spans(data)
    frames = read_frames(path)
    assert [len(f.entries) for f in frames] == [1, 1, 1, 1, 2, 2, 1, 1]
    at, end = spans[4]
    before = frames[3].entries[-1]
    insides = [data.index(f) for f in forged]
    assert at < insides[0] < insides[1] < insides[2] < end
    nxt = spans[5][0]

    def after(damaged: bytes, anchor: tuple[int, bytes] = (before.seq, before.hash)) -> AfterDamage:
        path.write_bytes(damaged)
        fd = os.open(path, os.O_RDONLY)
        try:
            return after_damage(fd, at, len(damaged), anchor)
        finally:
            os.close(fd)

    def put(data: bytes, offset: int, value: bytes) -> bytes:
        return data[:offset] + value + data[offset + len(value):]

    fd = os.open(path, os.O_RDONLY)
    try:
        assert [at for at, _f in frames_after(fd, at, nxt)] == insides  # whole, their checksums sound
    finally:
        os.close(fd)
    raised = put(data, at + 16, struct.pack(">I", len(data)))
    proven = {
        # its magic: the header's lengths match its entries, so it ends where the header says
        "magic": (put(data, at, b"XXXX"), False),
        # its count: the walked lengths lead to a trailer whose checksum holds, where it ends
        "count": (put(data, at + 4, struct.pack(">I", 0)), True),
        # its entries length, past the end of the file: the same
        "entries length": (raised, True),
        # ... its trailer too, so that where it ends is not known: the next frame links to its entries
        "entries length and trailer": (put(raised, end - 4, b"XXXX"), False),
        # its first entry (no longer a msgpack array of 7): where the header says it ends
        "entry": (put(data, at + 32, b"\x96"), False),
    }
    for what, (damaged, whole) in proven.items():
        assert after(damaged) == AfterDamage(nxt, whole), what
        # found without the frames after it: a damaged frame further on changes nothing
        assert after(put(damaged, spans[6][0], b"XXXX")) == AfterDamage(nxt, whole), what
    # its header and its entry: the next frame starts a run of linked frames to the end of the file
    unreadable = put(put(data, at, bytes(24)), at + 32, b"\x96")
    assert after(unreadable) == AfterDamage(nxt, False)
    # ... which a damaged frame further on breaks, or a frame of another chain at the seq it holds: the
    # frames before it are not the chain's for certain, and it resumes after it
    assert after(put(unreadable, spans[6][0], b"XXXX")) == AfterDamage(spans[7][0], False)
    other = forged_put_frame(frames[6].entries[0].seq)
    spliced = unreadable[:spans[6][0]] + other + unreadable[spans[6][1]:]
    assert after(spliced) == AfterDamage(spans[6][0] + len(other), False)
    # bytes written before the carrier (its header unreadable at the damaged offset): the carrier itself
    # starts a run to the end of the file
    assert after(data[:at] + b"junk" + data[at:]) == AfterDamage(at + 4, False)
    # an anchor its entries do not link from: where the header says it ends, all the same
    assert after(put(data, at, b"XXXX"), (before.seq, bytes(32))) == AfterDamage(nxt, False)
    # the carrier last: torn anywhere, nothing follows, a forged frame ending where the file does too;
    # whole with damaged lengths, nothing follows
    ends = [i + len(f) for i, f in zip(insides, forged, strict=True)]
    for cut in (at + 30, *(i + 1 for i in insides), *ends, end - 1):
        assert after(data[:cut]) == AfterDamage(None, False), cut
    assert after(raised[:end]) == AfterDamage(None, True)
    assert after(raised[:end + 40]) == AfterDamage(None, True)  # the next frame torn
    # its lengths damaged and torn at the end of the forged frame at its own last seq: not the chain's
    assert after(raised[:ends[1]]) == AfterDamage(None, False)


def test_an_entry_longer_than_a_chunk_is_read_up_to_the_entries_length(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk of a damaged frame reads an entry whole only up to a chunk or the entries length its
    header gives (a damaged entry header may claim gigabytes), not the payloads length: a grant's frame
    holds no payload, yet its entry, longer than the chunk, is read and the frame found whole."""
    monkeypatch.setattr(logfile, "CHUNK", 40)
    path = tmp_path / "db"
    with MnemoClient(path, "owner", durability="none") as c:
        c.grant("bob", "team:a-scope-name-long-enough", ["read", "write"])
    data = path.read_bytes()
    start, end = frame_spans(data)[-1]
    frames = read_frames(path)
    assert frames[-1].entries[0].op == "grant" and frames[-1].slots[0].length == 0
    assert len(frames[-1].entries[0].raw) > 40
    before = frames[-2].entries[-1]
    for elen in (end - start, 1 << 20):  # the entries length raised: the frame runs past the end of the file
        path.write_bytes(data[:start + 16] + struct.pack(">I", elen) + data[start + 20:])
        fd = os.open(path, os.O_RDONLY)
        try:
            assert after_damage(fd, start, len(data), (before.seq, before.hash)) == AfterDamage(None, True)
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
