"""The log is read in chunks (logfile.CHUNK, 4 MiB; a replay's window, logfile.SCAN_CHUNK, 64 MiB), so that
a frame, a frame header or a frame magic can straddle two reads. With the chunk made a few bytes long every
one of them does, somewhere: an open replays every record, a torn tail is still cut and reported, a torn
frame followed by valid frames is still damage, and a client still follows a compaction to the new log."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from helpers.frames import frame_spans

from mnemo import MnemoClient
from mnemo.errors import IntegrityError
from mnemo.storage.file import logfile, replay
from mnemo.storage.file.framing import HEADER_SIZE, Frame

AGENT = "agent-1"
CHUNKS = [4, 5, 6, 7, 9, 13, 24, 25, 31, 64, 1000]


def build(path: Path) -> dict[str, tuple[str | bytes, tuple[str, ...]]]:
    """Frames of many sizes: single puts, a transaction, an update, a forget. Returns what it holds."""
    with MnemoClient(path, AGENT, durability="none") as c:
        for i in range(6):
            c.remember("x" * (i * 37 % 101), tags=[f"t{i}"])
        with c.transaction():
            c.remember(b"\x00MNFR\x00" * 9, tags=["binary"])  # a frame magic inside a payload
            c.remember("tx two")
        first = c.query()[0]
        c.update(first.id, content="updated")
        c.forget(c.query()[1].id)
        held = {r.id: (r.content, r.tags) for r in c.query(limit=None)}
    Path(str(path) + ".snap").unlink(missing_ok=True)
    return held


@pytest.fixture(params=CHUNKS)
def chunk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    size = int(request.param)
    monkeypatch.setattr(logfile, "CHUNK", size)
    monkeypatch.setattr(replay, "SCAN_CHUNK", size)  # the replay's window, passed to its FrameReader
    return size


def test_an_open_in_small_chunks_replays_every_record(tmp_path: Path, chunk: int) -> None:
    path = tmp_path / "db"
    held = build(path)
    for readonly in (True, False):
        with MnemoClient(path, AGENT, durability="none", readonly=readonly) as c:
            assert {r.id: (r.content, r.tags) for r in c.query(limit=None)} == held
            assert c.recovery == []
        Path(str(path) + ".snap").unlink(missing_ok=True)


@pytest.mark.parametrize("kept", [1, 23, 24, 30])
def test_a_torn_tail_is_cut_in_small_chunks(tmp_path: Path, chunk: int, kept: int) -> None:
    path = tmp_path / "db"
    held = build(path)
    data = path.read_bytes()
    with MnemoClient(path, AGENT, durability="none") as c:
        c.remember("the torn one " * 5)
    Path(str(path) + ".snap").unlink(missing_ok=True)
    whole = path.read_bytes()
    path.write_bytes(whole[:len(data) + kept])  # a prefix of the last frame
    with MnemoClient(path, AGENT, durability="none") as c:
        assert {r.id: (r.content, r.tags) for r in c.query(limit=None)} == held
        assert len(c.recovery) == 1 and c.recovery[0].startswith(f"cut a torn last frame at offset {len(data)} ")
    assert path.read_bytes()[:len(data)] == data


@pytest.mark.parametrize("which", [2, 5, -3])
def test_a_torn_frame_with_valid_frames_after_it_is_damage_in_small_chunks(tmp_path: Path, chunk: int,
                                                                          which: int) -> None:
    path = tmp_path / "db"
    build(path)
    data = path.read_bytes()
    start, _end = frame_spans(data)[which]
    # its entries_len claims more than the file holds: it reads as a frame the file ends inside
    damaged = data[:start + 16] + struct.pack(">I", len(data)) + data[start + 20:]
    path.write_bytes(damaged)
    with pytest.raises(IntegrityError, match=f"damaged frame at offset {start} .*valid frames follow it"):
        MnemoClient(path, AGENT, durability="none")
    assert path.read_bytes() == damaged


@pytest.mark.parametrize("size", [24, 25, 31, 64, 1000])  # the header walk reads a whole header at a time
def test_a_client_follows_a_compaction_in_small_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       size: int) -> None:
    monkeypatch.setattr(logfile, "CHUNK", size)
    path = tmp_path / "db"
    build(path)
    with MnemoClient(path, AGENT, durability="none") as reader, MnemoClient(path, AGENT, durability="none") as w:
        assert len(reader.query(limit=None)) == len(w.query(limit=None))
        for i in range(3):
            w.remember(f"after {i}")
        w.compact()
        w.remember("after the compaction")
        assert [r.id for r in reader.query(limit=None)] == [r.id for r in w.query(limit=None)]
        assert reader.head == w.head


@pytest.mark.parametrize("size", [4, 25, 1000, 1 << 20])
def test_a_reader_that_reuses_its_memory_reads_what_a_fresh_reader_reads(tmp_path: Path, size: int) -> None:
    """A replay's reader reads each chunk into the memory of the one before (a frame longer than it
    takes memory of its own): the frames and their bytes are those a reader of fresh buffers gives."""
    path = tmp_path / "db"
    build(path)
    end = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        def frames(reuse: bool) -> list[tuple[Frame, bytes]]:
            reader = logfile.FrameReader(fd, HEADER_SIZE, end, size, reuse=reuse)
            out = []
            while reader.offset < end:
                frame, buf, pos = reader.next()
                assert (buf.obj is reader.space) == reuse
                out.append((frame, bytes(buf[pos:pos + frame.length])))
            return out

        fresh = frames(False)
        assert frames(True) == fresh
        assert len(fresh) == len(frame_spans(path.read_bytes()))
    finally:
        os.close(fd)
