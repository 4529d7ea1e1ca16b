"""The log's frames read in chunks (storage/file/logfile.py, FrameReader and iter_frames): whatever the chunk
size, the frames of [start, end) come back whole and in order, each found where the file holds it; a
frame that the range ends inside is "incomplete" and a damaged one "bad", with the frame's offset; and
nothing past `end` is ever read."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.frames import frame_spans, read_frames

from mnemo import MnemoClient
from mnemo.storage.file.framing import FrameError, parse_frame
from mnemo.storage.file.logfile import FrameReader, iter_frames

CHUNKS = [1, 4, 23, 24, 25, 31, 64, 100, 1000, 1 << 20]


@pytest.fixture(scope="module")
def log_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("log") / "db"
    with MnemoClient(path, "owner", durability="none") as c:
        for i in range(5):
            c.remember("x" * (i * 41 % 97), tags=[f"t{i}"])
        with c.transaction():
            c.remember(b"\x00MNFR\x00" * 9)
            c.remember("two in one frame")
        c.remember("the last " * 30)
    return path.read_bytes()


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[tuple[Path, list[int]]]:
    path = tmp_path / "db"
    fds: list[int] = []
    yield path, fds
    for fd in fds:
        os.close(fd)


def open_with(state: tuple[Path, list[int]], data: bytes) -> int:
    path, fds = state
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    fds.append(fd)
    return fd


def expected(data: bytes) -> list[tuple[int, int, tuple[int, ...]]]:
    """(offset, length, seqs) of each frame, parsed from the bytes whole."""
    frames = [parse_frame(data, start, start) for start, _end in frame_spans(data)]
    return [(f.offset, f.length, tuple(e.seq for e in f.entries)) for f in frames]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_every_frame_is_read_whole_whatever_the_chunk(open_log: tuple[Path, list[int]], log_bytes: bytes,
                                                      chunk: int) -> None:
    fd = open_with(open_log, log_bytes)
    reader = FrameReader(fd, 32, len(log_bytes), chunk)
    got = []
    while reader.offset < len(log_bytes):
        buf, pos = reader.window()
        assert reader.base + pos == reader.offset
        start = reader.offset
        frame, buf2, pos2 = reader.next()
        assert (buf2, pos2) == (buf, pos)
        assert bytes(buf[pos:pos + frame.length]) == log_bytes[start:start + frame.length]
        assert reader.offset == start + frame.length
        got.append((frame.offset, frame.length, tuple(e.seq for e in frame.entries)))
    assert got == expected(log_bytes)
    assert reader.offset == len(log_bytes)


def test_iter_frames_yields_the_frames_of_the_range(open_log: tuple[Path, list[int]], log_bytes: bytes) -> None:
    fd = open_with(open_log, log_bytes)
    spans = frame_spans(log_bytes)
    whole = [(f.offset, f.length, tuple(e.seq for e in f.entries)) for f, _b, _p in iter_frames(fd, 32, len(log_bytes))]
    assert whole == expected(log_bytes)
    part = [f.offset for f, _b, _p in iter_frames(fd, spans[2][0], spans[5][0])]
    assert part == [s for s, _e in spans[2:5]]
    assert list(iter_frames(fd, spans[3][0], spans[3][0])) == []
    for frame, buf, pos in iter_frames(fd, 32, len(log_bytes)):
        assert bytes(buf[pos:pos + frame.length]) == log_bytes[frame.offset:frame.end]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_a_range_that_ends_inside_a_frame_is_incomplete_there(open_log: tuple[Path, list[int]], log_bytes: bytes,
                                                             chunk: int) -> None:
    """The file holds the whole frame, but the range stops short of it: the reader does not look past end."""
    fd = open_with(open_log, log_bytes)
    spans = frame_spans(log_bytes)
    start, end = spans[-1]
    header, frame = "file ends inside a frame header", "file ends inside a frame"
    for stop, message in [(start + 1, header), (start + 23, header), (start + 24, frame), (end - 1, frame)]:
        reader = FrameReader(fd, 32, stop, chunk)
        offsets = []
        with pytest.raises(FrameError) as exc:
            while reader.offset < stop:
                offsets.append(reader.next()[0].offset)
        assert offsets == [s for s, _e in spans[:-1]]
        assert (exc.value.kind, str(exc.value), exc.value.offset) == ("incomplete", message, start)
        assert reader.offset == start
    reader = FrameReader(fd, start, end, chunk)
    assert reader.next()[0].offset == start  # the same frame, its range whole


@pytest.mark.parametrize("chunk", CHUNKS)
def test_a_torn_last_frame_is_incomplete_at_its_offset(open_log: tuple[Path, list[int]], log_bytes: bytes,
                                                      chunk: int) -> None:
    start, end = frame_spans(log_bytes)[-1]
    for kept, message in [(1, "file ends inside a frame header"), (24, "file ends inside a frame"),
                          (end - start - 1, "file ends inside a frame")]:
        data = log_bytes[:start + kept]
        fd = open_with(open_log, data)
        reader = FrameReader(fd, 32, len(data), chunk)
        with pytest.raises(FrameError) as exc:
            while reader.offset < len(data):
                reader.window()
                reader.next()
        assert (exc.value.kind, str(exc.value), exc.value.offset) == ("incomplete", message, start)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_a_damaged_frame_is_bad_at_its_offset_from_window_and_next(open_log: tuple[Path, list[int]],
                                                                   log_bytes: bytes, chunk: int) -> None:
    spans = frame_spans(log_bytes)
    start, end = spans[3]
    cases = [
        (log_bytes[:start] + b"MNFX" + log_bytes[start + 4:], f"bad frame magic at offset {start}", True),
        (log_bytes[:start + 4] + struct.pack(">I", 0) + log_bytes[start + 8:],
         f"impossible frame lengths at offset {start}", True),
        (log_bytes[:end - 5] + bytes([log_bytes[end - 5] ^ 1]) + log_bytes[end - 4:],
         f"frame checksum mismatch at offset {start}", False),
    ]
    for data, message, from_window in cases:
        fd = open_with(open_log, data)
        reader = FrameReader(fd, 32, len(data), chunk)
        for _ in range(3):
            reader.next()
        assert reader.offset == start
        if from_window:
            with pytest.raises(FrameError) as exc:
                reader.window()
            assert (exc.value.kind, str(exc.value), exc.value.offset) == ("bad", message, start)
        with pytest.raises(FrameError) as exc:
            reader.next()
        assert (exc.value.kind, str(exc.value), exc.value.offset) == ("bad", message, start)


def test_frames_read_match_the_documented_reader(tmp_path: Path, log_bytes: bytes) -> None:
    path = tmp_path / "db"
    path.write_bytes(log_bytes)
    fd = os.open(path, os.O_RDONLY)
    try:
        mine = [f for f, _b, _p in iter_frames(fd, 32, len(log_bytes))]
    finally:
        os.close(fd)
    assert mine == read_frames(path)
