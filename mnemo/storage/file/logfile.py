"""Raw file access for the log: positioned reads and writes, fsync, the writer lock, chunked frame reads.

Nothing outside mnemo/storage touches files; nothing here knows about records (only about chain
entries, which tell where the chain resumes after damage).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import time
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from ...chain.codec import Entry, EntryDecodeError, decode_entry
from ...errors import DurabilityError, LockTimeout
from .framing import (
    ENTRY_HEADER,
    FRAME_END,
    FRAME_HEADER,
    FRAME_MAGIC,
    FRAME_OVERHEAD,
    TRAILER,
    Frame,
    FrameError,
    frame_length,
    parse_frame,
)

CHUNK = 4 << 20
# A replay reads the log in larger windows: the scan core's results are applied to the index per
# window, and per distinct tag, scope and tag set in it (at a million records, 64 MiB windows cost
# 13% less CPU than 32 MiB ones, for 130 MB more at the peak of the open).
SCAN_CHUNK = 64 << 20

_sync = getattr(os, "fdatasync", os.fsync)

# A new database is readable by its owner only (less if the umask says so): `chmod` it to share it.
NEW_DB_MODE = 0o600


def fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def match_mode(fd: int, mode: int) -> None:
    """Give the open file these permission bits (a sidecar takes the log's), changing nothing when it
    has them: a file system (or owner) that refuses chmod then fails only a file whose mode differs."""
    if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
        os.fchmod(fd, mode)


def write_all(fd: int, data: bytes, offset: int) -> None:
    """pwrite until every byte is written; a short write is retried, an error becomes DurabilityError."""
    view: bytes | memoryview = data  # (a view is made only after a short write)
    while len(view):
        try:
            n = os.pwrite(fd, view, offset)
        except OSError as exc:
            raise DurabilityError(f"write failed at offset {offset}: {exc}") from exc
        if n <= 0:
            raise DurabilityError(f"write made no progress at offset {offset}")
        if n == len(view):
            return
        view = memoryview(view)[n:]
        offset += n


def sync(fd: int) -> None:
    try:
        _sync(fd)
    except OSError as exc:
        raise DurabilityError(f"fsync failed: {exc}") from exc


def pread(fd: int, length: int, offset: int) -> bytes:
    """os.pread, in its argument order, read on after a short read: `length` bytes, or fewer only at
    the end of the file. The one positional read of the file backend."""
    chunks = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


def pread_into(fd: int, view: memoryview, offset: int) -> int:
    """pread into `view` (read on after a short read): how many bytes it holds, fewer than its length
    only at the end of the file."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if not n:
            break
        got += n
    return got


def lock_log(fd: int, deadline: float, what: str) -> None:
    """Take an exclusive flock on the log file open as `fd`, waiting until `deadline` (monotonic).

    The lock is on the log itself, not on a sidecar an operator could delete or replace: flock locks
    belong to the open file description, so two stores of one process exclude each other as two
    processes do (lockf would not), and the lock lives exactly as long as the file it guards. A
    caller must check, once it holds the lock, that `fd` is still the file at the database's path
    (a compaction renames a new log over it)."""
    delay = 0.0005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
        now = time.monotonic()
        if now >= deadline:
            raise LockTimeout(f"could not take the writer lock on {what} in time: another writer holds it")
        time.sleep(min(delay, max(deadline - now, 0.0)))
        delay = min(delay * 2, 0.02)


def unlock_log(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)


class FrameReader:
    """The frames of [start, end), read in chunks, never the whole file: `window()` gives a buffer
    holding the whole frame at `offset` (and what follows it in the chunk), `next()` parses that frame
    and moves past it. Both raise FrameError (with the file offset) at a frame that is incomplete or
    bad; the caller decides whether that is a torn tail or damage."""

    def __init__(self, fd: int, start: int, end: int, chunk: int = CHUNK, reuse: bool = False) -> None:
        """`reuse`: each chunk is read into the memory of the one before (when it fits), which a caller
        may ask for only if it keeps nothing that views a buffer past the next `window()` or `next()`:
        a replay reads hundreds of chunks of 64 MiB, and fresh memory for each costs the kernel more
        (zeroed pages, a fault per page) than reading the bytes."""
        self.fd, self.offset, self.end, self.chunk = fd, start, end, chunk
        self.buf = memoryview(b"")
        self.base = start  # file offset of buf[0]
        self.space: bytearray | None = bytearray() if reuse and hasattr(os, "preadv") else None

    def window(self) -> tuple[memoryview, int]:
        """(buffer, position of the frame at `offset` in it), the frame whole in the buffer."""
        reread = False
        while True:
            pos = self.offset - self.base
            avail = len(self.buf) - pos if 0 <= pos <= len(self.buf) else -1
            need = FRAME_HEADER.size
            if avail >= need:
                try:
                    need = frame_length(self.buf, pos, self.offset)
                except FrameError as exc:
                    if exc.kind == "bad":
                        raise
            if avail >= need:
                return self.buf, pos
            if reread:
                # Let the parser produce the precise error for what is there.
                parse_frame(self.buf, pos, self.offset)
                raise FrameError("incomplete", "file ends inside a frame", self.offset)
            want = max(need, self.chunk)
            self.buf = self._read(min(want, self.end - self.offset))
            self.base = self.offset
            reread = len(self.buf) < want  # all the file holds from here is in the buffer now

    def _read(self, n: int) -> memoryview:
        if self.space is None:
            return memoryview(pread(self.fd, n, self.offset))
        if len(self.space) < n:
            self.space = bytearray(n)  # (a new one: the old cannot grow while a view of it is alive)
        view = memoryview(self.space)[:n]
        return view[:pread_into(self.fd, view, self.offset)]

    def next(self) -> tuple[Frame, memoryview, int]:
        buf, pos = self.window()
        frame = parse_frame(buf, pos, self.offset)
        self.offset += frame.length
        return frame, buf, pos


def iter_frames(fd: int, start: int, end: int) -> Iterator[tuple[Frame, memoryview, int]]:
    """Yield (frame, buffer, position of the frame in the buffer) for frames in [start, end).

    Reads in chunks, never the whole file. Raises FrameError (with the file offset) at the first frame
    that is incomplete or bad; the caller decides whether that is a torn tail or damage.
    """
    reader = FrameReader(fd, start, end)
    while reader.offset < end:
        yield reader.next()


def frames_after(fd: int, start: int, end: int) -> Iterator[tuple[int, Frame]]:
    """Every offset after `start` at which a whole frame with a good checksum parses within `end`, with
    that frame, in file order: where a frame may lie, not which of them the chain holds (a record's
    content may hold frames too)."""
    offset = start + 1
    while offset < end:
        data = pread(fd, min(CHUNK, end - offset), offset)
        i = data.find(FRAME_MAGIC)
        while i != -1:
            at = offset + i
            frame = None
            try:
                length = frame_length(pread(fd, FRAME_HEADER.size, at), 0, at)
                if at + length <= end:
                    frame = parse_frame(pread(fd, length, at), 0, at)
            except FrameError:
                pass
            if frame is not None:
                yield at, frame
            i = data.find(FRAME_MAGIC, i + 1)
        if len(data) < len(FRAME_MAGIC):
            break
        offset += len(data) - len(FRAME_MAGIC) + 1


class AfterDamage(NamedTuple):
    """What follows a frame that cannot be read (see after_damage)."""

    resume: int | None  # the offset of the first frame the chain puts after it, or None
    whole: bool  # the frame is there whole, its header's length fields alone wrong


def after_damage(fd: int, start: int, end: int, anchor: tuple[int, bytes]) -> AfterDamage:
    """Where the chain resumes after the unreadable frame at `start`, whose entries follow `anchor`, the
    (seq, hash) of the last entry before it ((-1, zero hash) before the genesis); this tells a torn
    tail from damage, and where a reader of a damaged log goes on.

    A frame found after `start` (a whole one, its checksum sound) is the chain's only where the chain
    puts it, never at an offset inside a payload, which holds whatever a record's content holds: frames
    too, forged ones included, whatever seq and link they claim.
    - The damaged frame's own entry section is read first, entry header by entry header, for as long as
      its entries decode and link from `anchor` (its header's fields are not trusted: they may be the
      damage). Where the header's count and entries length match those entries, and its payloads
      length their slots, the header is sound, and the frame ends where it says: only what lies beyond
      that end is looked at. Where they differ but the walked lengths lead to a trailer whose checksum
      holds, the frame is there whole with damaged length fields, and ends there.
    - A frame after that is the chain's when it starts where the damaged frame ends (as found above,
      or else as its header says), when its first entry links to the last entry walked (a hash no
      content can name in advance: each put commits to a random salt), or when it starts a run of
      frames, every entry linking to the one before, that ends exactly at `end`."""
    body = start + FRAME_HEADER.size
    data = _Bytes(fd, end)
    head = data.get(start, FRAME_HEADER.size)
    fields = FRAME_HEADER.unpack(head) if len(head) == FRAME_HEADER.size else None
    entries: list[Entry] = []
    seq, prev = anchor
    pos, slots, confirmed = body, 0, False
    limit = max(CHUNK, fields[3] if fields is not None else 0)  # how long an entry is read whole
    while True:
        if entries and fields is not None and len(entries) == fields[1] and pos - body == fields[3]:
            confirmed = True
            break
        lengths = data.get(pos, ENTRY_HEADER.size)
        if len(lengths) < ENTRY_HEADER.size:
            break
        rlen, slen = ENTRY_HEADER.unpack(lengths)
        if rlen > limit:
            break  # not read whole: longer than a chunk and than the entries length of the header
        try:
            entry = decode_entry(data.get(pos + ENTRY_HEADER.size, rlen))
        except EntryDecodeError:
            break
        if entry.seq != seq + 1 or entry.prev != prev:
            break
        entries.append(entry)
        seq, prev = entry.seq, entry.hash
        pos += ENTRY_HEADER.size + rlen
        slots += slen
    extent: int | None = None
    whole = False
    if confirmed and fields is not None and fields[4] == slots:
        extent = start + FRAME_OVERHEAD + fields[3] + slots
    elif entries:
        length = FRAME_OVERHEAD + (pos - body) + slots
        if start + length <= end:
            crc, magic = TRAILER.unpack(pread(fd, TRAILER.size, start + length - TRAILER.size))
            sound = FRAME_HEADER.pack(FRAME_MAGIC, len(entries), entries[0].seq, pos - body, slots)
            if magic == FRAME_END and crc == zlib.crc32(pread(fd, pos - body, body), zlib.crc32(sound)):
                extent, whole = start + length, True
    ends = extent
    if ends is None and fields is not None:
        ends = start + FRAME_OVERHEAD + fields[3] + fields[4]  # where its header says it ends
    after = extent - 1 if extent is not None else pos - 1 if entries else start
    failed: set[int] = set()
    for at, frame in frames_after(fd, after, end):
        first = frame.entries[0]
        if first.seq <= seq:
            continue  # before what the damaged frame holds: not the chain's next frame
        if at == ends or (entries and first.seq == seq + 1 and first.prev == prev):
            return AfterDamage(at, whole)
        if _runs_to_end(fd, at, end, failed):
            return AfterDamage(at, whole)
    return AfterDamage(None, whole)


class _Bytes:
    """Reads of a file up to `end`, served from one chunk held at a time."""

    def __init__(self, fd: int, end: int) -> None:
        self.fd, self.end = fd, end
        self.base, self.buf = 0, b""

    def get(self, offset: int, n: int) -> bytes:
        rel = offset - self.base
        if rel < 0 or rel + n > len(self.buf):
            self.buf = pread(self.fd, min(max(n, CHUNK), self.end - offset), offset)
            self.base, rel = offset, 0
        return self.buf[rel:rel + n]


def _runs_to_end(fd: int, start: int, end: int, failed: set[int]) -> bool:
    """Whether the frames from `start` follow each other, every entry linking to the one before, up to
    exactly `end`. `failed` holds frames already known not to: those this run passed are added to it
    when it fails, so a run is walked once however many of its frames are found."""
    reader = FrameReader(fd, start, end)
    passed: list[int] = []
    last: Entry | None = None
    try:
        while reader.offset < end:
            if reader.offset in failed:
                break
            offset = reader.offset
            frame, _buf, _pos = reader.next()
            if not _follows(last, frame.entries):
                break
            passed.append(offset)
            last = frame.entries[-1]
        else:
            return True
    except FrameError:
        pass
    failed.update(passed)
    return False


def _follows(last: Entry | None, entries: tuple[Entry, ...]) -> bool:
    """Whether each entry links to the one before it, the first to `last` (None: nothing before)."""
    for entry in entries:
        if last is not None and (entry.seq != last.seq + 1 or entry.prev != last.hash):
            return False
        last = entry
    return True


def frame_holding(fd: int, seq: int, start: int, end: int) -> Frame | None:
    """The frame in [start, end) that holds entry `seq`, found by walking frame headers only (a frame's
    header gives its first seq, count and length): one pass over the file without decoding entries.
    None if no frame holds it or the walk meets a frame it cannot read."""
    offset = start
    buf = b""
    base = offset
    while offset + FRAME_HEADER.size <= end:
        rel = offset - base
        if rel + FRAME_HEADER.size > len(buf):
            buf, base = pread(fd, min(CHUNK, end - offset), offset), offset
            rel = 0
            if len(buf) < FRAME_HEADER.size:
                return None
        try:
            total = frame_length(buf, rel, offset)
        except FrameError:
            return None
        if offset + total > end:
            return None  # a frame that runs past the range is not in it
        _magic, count, first, _elen, _plen = FRAME_HEADER.unpack_from(buf, rel)
        if first <= seq < first + count:
            try:
                return parse_frame(pread(fd, total, offset), 0, offset)
            except FrameError:
                return None
        if first > seq:
            return None
        offset += total
    return None


def complete_with_damaged_length(fd: int, offset: int, size: int) -> bool:
    """Whether the bytes from `offset` to the end of the file are one whole frame whose length fields
    alone were damaged. Such a frame claims to run past the end of the file, as a torn write does;
    but a torn write leaves a prefix of its frame, whereas these bytes walk, entry header by entry
    header, to a trailer whose checksum holds once the header carries the lengths walked."""
    data = pread(fd, size - offset, offset)
    if len(data) < FRAME_HEADER.size + TRAILER.size or data[-len(FRAME_END):] != FRAME_END:
        return False
    magic, count, first, _elen, _plen = FRAME_HEADER.unpack_from(data, 0)
    if magic != FRAME_MAGIC or count == 0:
        return False  # not a frame whatever its lengths: frame_length refuses both as bad, not torn
    p, slots = FRAME_HEADER.size, 0
    limit = len(data) - TRAILER.size
    for _ in range(count):
        if p + ENTRY_HEADER.size > limit:
            return False
        rlen, slen = ENTRY_HEADER.unpack_from(data, p)
        p += ENTRY_HEADER.size + rlen
        slots += slen
    elen = p - FRAME_HEADER.size
    if p + slots != limit:
        return False
    head = FRAME_HEADER.pack(magic, count, first, elen, slots)
    (crc,) = struct.unpack_from(">I", data, limit)
    return bool(crc == zlib.crc32(data[FRAME_HEADER.size:p], zlib.crc32(head)))
