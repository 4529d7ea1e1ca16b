"""Reading a log file as an auditor: in chunks, without opening it as a client, never writing. The reader
the file backend's verification, its `log()`, the audit export and salvage share."""

from __future__ import annotations

import os
import stat
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ...chain.codec import ZERO_HASH, Entry
from ...errors import IntegrityError, MnemoError, UnreadableDatabase
from ..types import PathArg, Progress
from .frame_marks import FrameMarks
from .framing import (
    FRAME_END,
    FRAME_HEADER,
    HEADER_SIZE,
    TRAILER,
    Frame,
    FrameError,
    HeaderError,
    Slot,
    decode_file_header,
    frame_length,
    parse_frame,
)
from .logfile import after_damage, complete_with_damaged_length, pread

CHUNK = 1 << 20
BIG_FRAME = 4 * CHUNK  # above this, a frame's trailer magic is checked before the frame is read whole


# -- reading the log in chunks ---------------------------------------------------------------------------


class Window:
    """A sliding window over the log file: at most a chunk (or one frame) in memory at a time."""

    def __init__(
        self, fd: int, size: int, path: str, progress: Progress | None, growable: bool = True
    ) -> None:
        self.fd = fd
        self.size = size
        self.path = path
        self.progress = progress
        self.growable = growable
        self.start = 0
        self.buf = b""

    def grew(self) -> bool:
        """Whether the file grew since it was opened (a writer appending): then read on to its new end."""
        if not self.growable:
            return False
        try:
            size = os.fstat(self.fd).st_size
        except OSError:
            return False
        if size <= self.size:
            return False
        self.size = size
        return True

    def ensure(self, offset: int, n: int) -> None:
        """Make bytes [offset, offset + n) (clamped to the file's end) available in self.buf."""
        end = min(offset + n, self.size)
        bstart, bend = self.start, self.start + len(self.buf)
        if bstart <= offset and end <= bend:
            return
        keep = self.buf[offset - bstart:] if bstart <= offset <= bend else b""
        want = max(end, min(offset + CHUNK, self.size)) - offset - len(keep)
        data = self.pread(offset + len(keep), want)
        self.buf = keep + data
        self.start = offset
        if len(data) < want:  # the file shrank under us: it ends here now
            self.size = offset + len(self.buf)
        if self.progress is not None:
            self.progress(min(offset, self.size), self.size)

    def pread(self, offset: int, n: int) -> bytes:
        try:
            return pread(self.fd, n, offset)
        except OSError as exc:
            raise UnreadableDatabase(f"cannot read {self.path} at offset {offset}: {exc.strerror}") from None

    def get(self, offset: int, n: int) -> bytes:
        self.ensure(offset, n)
        rel = offset - self.start
        return self.buf[rel:rel + n]


def _read_frame(win: Window, pos: int, lenient: bool) -> tuple[Frame, bool]:
    """Parse the frame at `pos`: (frame, checksum ok). Raises FrameError.

    With `lenient`, a frame whose only fault is its checksum is still returned (checksum ok = False), so
    that its entries can be checked and reported by seq."""
    if pos + FRAME_HEADER.size > win.size:
        win.grew()  # a frame being appended right now is not a torn one
    win.ensure(pos, FRAME_HEADER.size)
    total = frame_length(win.buf, pos - win.start, pos)
    if pos + total > win.size and not (win.grew() and pos + total <= win.size):
        raise FrameError("incomplete", f"the file ends inside the frame at offset {pos}", pos, total)
    if total > BIG_FRAME and win.pread(pos + total - len(FRAME_END), len(FRAME_END)) != FRAME_END:
        raise FrameError("bad", f"frame at offset {pos} has no end marker where its length says", pos, total)
    win.ensure(pos, total)
    rel = pos - win.start
    try:
        return parse_frame(win.buf, rel, pos), True
    except FrameError as exc:
        if not lenient or exc.kind != "bad":
            raise
        original = exc
    data = bytearray(win.buf[rel:rel + total])
    _magic, _count, _first, elen, plen = FRAME_HEADER.unpack_from(data, 0)
    crc_at = FRAME_HEADER.size + elen + plen
    crc, end_magic = TRAILER.unpack_from(data, crc_at)
    good_crc = zlib.crc32(data[:FRAME_HEADER.size + elen])
    if end_magic != FRAME_END or crc == good_crc:
        raise original  # the fault is not (only) the checksum
    struct.pack_into(">I", data, crc_at, good_crc)
    try:
        return parse_frame(bytes(data), 0, pos), False
    except FrameError:
        raise original from None


@dataclass(frozen=True)
class Damage:
    offset: int
    resume: int | None  # the next good frame, or None when nothing readable follows
    torn: bool  # the file ends inside this frame, and nothing readable follows: a torn write
    message: str


def scan_log(
    win: Window, lenient: bool, skip: Callable[[Window, int], int] | None = None,
    anchor: Callable[[], tuple[int, bytes]] | None = None,
) -> Iterator[tuple[Frame, bool] | Damage]:
    """Every frame from offset 32 on, with damaged stretches between them reported and skipped.
    `skip(win, pos)`, if given, takes care of the frames from `pos` on that it can, and returns the
    offset where they end; `anchor()` then gives the (seq, hash) of the last entry read, which the scan
    otherwise takes from the frames it yields. A damaged stretch ends at the next frame the chain puts
    there (logfile.after_damage), never at a frame inside a record's content."""
    pos = HEADER_SIZE
    last: tuple[int, bytes] = (-1, ZERO_HASH)
    while pos < win.size:
        if skip is not None:
            pos = skip(win, pos)
            if pos >= win.size:
                break
        try:
            item = _read_frame(win, pos, lenient)
        except FrameError as exc:
            try:
                after = after_damage(win.fd, pos, win.size, anchor() if anchor is not None else last)
                # as the engine judges it: only a frame cut short, with nothing after it, is a torn write
                torn = exc.kind == "incomplete" and after.resume is None and not after.whole and not \
                    complete_with_damaged_length(win.fd, pos, win.size)
            except OSError as err:
                raise UnreadableDatabase(f"cannot read {win.path} after offset {pos}: {err.strerror}") from None
            yield Damage(pos, after.resume, torn, str(exc))
            if after.resume is None:
                return
            pos = after.resume
            continue
        yield item
        last = (item[0].entries[-1].seq, item[0].entries[-1].hash)
        pos = item[0].end


def entry_offsets(frame: Frame) -> list[int]:
    """File offset of each entry's length header inside the frame."""
    out: list[int] = []
    off = frame.offset + FRAME_HEADER.size
    for e in frame.entries:
        out.append(off)
        off += 8 + len(e.raw)
    return out




_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words (`a FIFO (named pipe)`, `a directory`, ...)."""
    return next((what for test, what in _FILE_KINDS if test(mode)), "not a regular file")


def not_regular(name: str, mode: int) -> str:
    kind = file_kind(mode)
    if os.path.islink(name):
        kind = f"a symbolic link to {kind}"
    return f"cannot read {name}: it is {kind}, not a regular file"


def open_regular(name: str, error: type[MnemoError]) -> tuple[int, int]:
    """(fd, size) of a regular file opened for reading; anything else is refused at once, never waited
    on. A stat first spares devices an open; the open is non-blocking (a FIFO without a writer would
    block it) and the fstat of what was opened settles it, whatever was swapped in between."""
    try:
        st = os.stat(name)
        if not stat.S_ISREG(st.st_mode):
            raise error(not_regular(name, st.st_mode))
        fd = os.open(name, _OPEN_FLAGS)
    except OSError as exc:
        raise error(f"cannot open {name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(not_regular(name, st.st_mode))
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def open_db(path: PathArg) -> tuple[int, int, str]:
    name = os.fspath(path)
    fd, size = open_regular(name, UnreadableDatabase)
    return fd, size, name


# -- reading the chain strictly (export, `mnemo log`) -----------------------------------------------------


@dataclass(frozen=True)
class LogItem:
    """One chain entry as read from the log, with its offset and its payload slot."""

    entry: Entry
    offset: int
    slot: Slot
    payload: bytes | None  # the payload bytes of an `ok` slot, when asked for


def strict_items(win: Window, payloads: bool, start: int = HEADER_SIZE) -> Iterator[LogItem]:
    """The entries of the frames from offset `start` (a frame's) on; see read_log."""
    try:
        decode_file_header(win.get(0, HEADER_SIZE))
    except HeaderError as exc:
        raise IntegrityError(f"{win.path}: bad file header: {exc}", 0) from None

    def from_start(_win: Window, pos: int) -> int:
        return max(pos, start)

    for item in scan_log(win, lenient=False, skip=None if start == HEADER_SIZE else from_start):
        if isinstance(item, Damage):
            if item.torn:
                return  # a torn or in-progress last write: a reader stops before it
            raise IntegrityError(f"{win.path}: damaged frame at offset {item.offset} ({item.message}); "
                                 "run `mnemo verify` for the full report", item.offset)
        frame = item[0]
        for e, slot, off in zip(frame.entries, frame.slots, entry_offsets(frame), strict=True):
            data = None
            if payloads and slot.state == "ok":
                start, length = slot.payload_range()
                data = win.get(start, length)
            yield LogItem(e, off, slot, data)


def read_log(path: PathArg, *, payloads: bool = False, since: int = 0) -> Iterator[LogItem]:
    """Every entry of the log from seq `since` on, in order, read in chunks without opening the database
    as a client. The frames before the one holding `since` are only walked (their headers read) to find
    where it starts.

    Stops before an incomplete last frame (a torn or in-progress write); raises IntegrityError at damage
    anywhere else in what it reads and UnreadableDatabase if the file cannot be read. Does not check
    hashes or links: that is verify_db's work."""
    yield from log_items(path, payloads, since, FrameMarks())


def log_items(path: PathArg, payloads: bool, since: int, marks: FrameMarks) -> Iterator[LogItem]:
    """read_log, finding where to start with `marks` (a store keeps its own, walked once)."""
    fd, size, name = open_db(path)
    try:
        start = HEADER_SIZE
        if since > 0:
            st = os.fstat(fd)
            start = marks.start(fd, (st.st_ino, st.st_dev), size, since)
        for item in strict_items(Window(fd, size, name, None), payloads, start):
            if item.entry.seq >= since:
                yield item
    finally:
        os.close(fd)
