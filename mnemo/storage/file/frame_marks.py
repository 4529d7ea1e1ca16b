"""Where the log's frames start, sampled, so that a read of the chain from a seq on (`log(since)`:
`mnemo log --since`, the web app's last entries and checkpoints) starts near that seq instead
of decoding every frame before it.

Marks are found by walking frame headers, 24 bytes a frame and no entry decoded, from the last frame
walked, and only as far as a read asks. They hold for the log file they were walked in: frames of one file
never move (the log is only appended to, and an erasure zeroes a slot in place), and a compaction writes
a new file, whose identity drops them. A walk stops at a header that does not read as the next frame of
the chain (bad magic, a seq out of order, a frame past the end of the file: damage, or a write in
progress); the read then starts from the last mark before it and meets that frame itself, so damage is
reported as a read from the start would report it. The walk checks no CRC: a read from a mark decodes and
checks every frame from there, and what lies before is verify's to check, as it is for any read of the
log."""

from __future__ import annotations

import bisect
import threading

from .framing import FRAME_HEADER, FRAME_MAGIC, FRAME_OVERHEAD, HEADER_SIZE
from .logfile import pread

MARK_SPACING = 1 << 16  # at least this many bytes of frames between two marks: a read from a mark decodes
# at most about this much before the seq asked for, and a 1 GiB log holds at most 16,384 marks
WALK_CHUNK = 1 << 20  # the headers are read in chunks of this many bytes


class FrameMarks:
    """(first seq, offset) of some frames of one log file, increasing, one at least MARK_SPACING bytes
    after the one before. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._identity: tuple[int, int] | None = None
        self._reset()

    def _reset(self) -> None:
        self._seqs: list[int] = []
        self._offsets: list[int] = []
        self._end = HEADER_SIZE  # where the walk stopped: a frame's start, or the end of what was read
        self._next_seq = 0  # the first seq of the frame at _end

    def start(self, fd: int, identity: tuple[int, int], size: int, since: int) -> int:
        """The offset of a frame of the log open as `fd` (its (st_ino, st_dev) `identity`, `size` bytes)
        whose first seq is at most `since`, the nearest one marked: the log's first frame when none is.
        Walks the headers of the frames not walked yet, up to the frame after the one holding `since`."""
        with self._lock:
            if identity != self._identity:
                self._reset()  # a new file: nothing of the old one holds
                self._identity = identity
            self._walk(fd, size, since)
            i = bisect.bisect_right(self._seqs, since) - 1
            return self._offsets[i] if i >= 0 else HEADER_SIZE

    def _walk(self, fd: int, size: int, since: int) -> None:
        pos, seq = self._end, self._next_seq
        last = self._offsets[-1] if self._offsets else HEADER_SIZE
        head = FRAME_HEADER.size
        base, buf = pos, b""
        while seq <= since and pos + head <= size:
            if pos + head > base + len(buf):
                base, buf = pos, pread(fd, min(WALK_CHUNK, size - pos), pos)
                if len(buf) < head:
                    break
            magic, count, first, entries_len, payloads_len = FRAME_HEADER.unpack_from(buf, pos - base)
            end = pos + FRAME_OVERHEAD + entries_len + payloads_len
            if magic != FRAME_MAGIC or first != seq or count == 0 or end > size:
                break
            if pos - last >= MARK_SPACING:
                self._seqs.append(first)
                self._offsets.append(pos)
                last = pos
            pos, seq = end, first + count
        self._end, self._next_seq = pos, seq


__all__ = ["MARK_SPACING", "FrameMarks"]
