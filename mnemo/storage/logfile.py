"""Raw file access for the log: positioned reads and writes, fsync, the writer lock, chunked frame reads.

Nothing outside mnemo/storage touches files; nothing here knows about records.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator

from ..errors import DurabilityError, LockTimeout
from .framing import FRAME_HEADER, Frame, FrameError, frame_length, parse_frame

CHUNK = 4 << 20

_sync = getattr(os, "fdatasync", os.fsync)


def fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes, offset: int) -> None:
    """pwrite until every byte is written; a short write is retried, an error becomes DurabilityError."""
    view = memoryview(data)
    while view:
        try:
            n = os.pwrite(fd, view, offset)
        except OSError as exc:
            raise DurabilityError(f"write failed at offset {offset}: {exc}") from exc
        if n <= 0:
            raise DurabilityError(f"write made no progress at offset {offset}")
        view = view[n:]
        offset += n


def sync(fd: int) -> None:
    try:
        _sync(fd)
    except OSError as exc:
        raise DurabilityError(f"fsync failed: {exc}") from exc


def read_exact(fd: int, offset: int, length: int) -> bytes:
    chunks = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


class FileLock:
    """An exclusive flock on a sidecar file. flock locks belong to the open file description, so two
    clients in one process exclude each other as two processes do (lockf would not)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.held = False

    def acquire(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.held = True
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
            if time.monotonic() >= deadline:
                raise LockTimeout(f"could not take the writer lock on {self.path} within {timeout} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def release(self) -> None:
        if self.held:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self.held = False

    def close(self) -> None:
        self.release()
        os.close(self.fd)


def iter_frames(fd: int, start: int, end: int) -> Iterator[tuple[Frame, memoryview, int]]:
    """Yield (frame, buffer, position of the frame in the buffer) for frames in [start, end).

    Reads in chunks, never the whole file. Raises FrameError (with the file offset) at the first frame
    that is incomplete or bad; the caller decides whether that is a torn tail or damage.
    """
    offset = start
    buf = memoryview(b"")
    pos = 0
    while offset < end:
        avail = len(buf) - pos
        need = FRAME_HEADER.size
        if avail >= need:
            try:
                need = frame_length(buf, pos, offset)
            except FrameError as exc:
                if exc.kind == "bad":
                    raise
        if avail < need:
            want = max(need, CHUNK)
            data = read_exact(fd, offset, min(want, end - offset))
            buf, pos = memoryview(data), 0
            if len(data) < need:
                # Let the parser produce the precise error for what is there.
                parse_frame(buf, pos, offset)
                raise FrameError("incomplete", "file ends inside a frame", offset)
            continue
        frame = parse_frame(buf, pos, offset)
        yield frame, buf, pos
        pos += frame.length
        offset += frame.length


def find_next_frame(fd: int, start: int, end: int, min_seq: int = 0) -> int | None:
    """The offset of the first valid frame after `start` whose first seq is at least `min_seq`, or
    None: tells a torn tail from damage."""
    from .framing import FRAME_MAGIC

    offset = start + 1
    while offset < end:
        data = read_exact(fd, offset, min(CHUNK, end - offset))
        i = data.find(FRAME_MAGIC)
        while i != -1:
            at = offset + i
            try:
                length = frame_length(read_exact(fd, at, FRAME_HEADER.size), 0, at)
                if at + length <= end:
                    frame = parse_frame(read_exact(fd, at, length), 0, at)
                    if frame.entries[0].seq >= min_seq:
                        return at
            except FrameError:
                pass
            i = data.find(FRAME_MAGIC, i + 1)
        if len(data) < len(FRAME_MAGIC):
            break
        offset += len(data) - len(FRAME_MAGIC) + 1
    return None
