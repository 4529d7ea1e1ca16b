"""The leaf-hash cache: a sidecar beside the log (`DB.leaves`) holding H(0x00 || entry) of every entry,
32 bytes each, so that proofs at any size need no pass over the log.

Like every sidecar it holds nothing the log does not, so it is never trusted: `validate` compares it
with a tree head computed from the log's own bytes (or with leaf hashes read from the log), and
`prover.CacheProver` checks every proof it hands out against such a head. A cache that fails is
rebuilt from the log.

Layout (big-endian): magic `MNEMOLHC` | version u16 (1) | header size u16 (32) | db_id (16 bytes) |
CRC-32 of the 28 bytes before it | then one 32-byte leaf hash per entry, in seq order. A trailing
partial hash (an append cut short) is dropped when the cache is opened for writing.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from dataclasses import dataclass

from ...chain.tree import HASH_SIZE, CompactRange, LeafSource, TreeHead
from ...errors import InvalidInput, StaleCache
from ..types import PathArg

MAGIC = b"MNEMOLHC"
VERSION = 1
HEADER = struct.Struct(">8sHH16sI")
HEADER_SIZE = HEADER.size  # 32
SUFFIX = ".leaves"
_CHUNK = 1 << 16  # leaves compared per read in validate


def cache_path(db_path: PathArg) -> str:
    """Where the leaf-hash cache of the database at `db_path` lives."""
    return os.fspath(db_path) + SUFFIX


def encode_header(db_id: bytes) -> bytes:
    head = HEADER.pack(MAGIC, VERSION, HEADER_SIZE, db_id, 0)[:-4]
    return head + struct.pack(">I", zlib.crc32(head))


def _header_problem(data: bytes, db_id: bytes) -> str | None:
    if len(data) < HEADER_SIZE:
        return "the cache is shorter than its header"
    magic, version, size, found, crc = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        return "not a leaf-hash cache (bad magic)"
    if crc != zlib.crc32(data[:HEADER_SIZE - 4]):
        return "the cache header's checksum does not match"
    if version != VERSION or size != HEADER_SIZE:
        return f"unknown cache version {version}"
    if found != db_id:
        return f"the cache belongs to database {found.hex()}, not {db_id.hex()}"
    return None


@dataclass(frozen=True)
class CacheCheck:
    """What `LeafCache.validate` found: `confirmed` leading leaves are the log's; `extra` leaves lie past
    the tree head it was checked against (a log cut back, or an append the log never got)."""

    ok: bool
    size: int
    confirmed: int
    extra: int
    problem: str | None


class LeafCache(LeafSource):
    """The sidecar cache of leaf hashes. Open with `LeafCache.open`; write only under the writer lock.

    Appends at the end are buffered (up to FLUSH_LEAVES leaves) and written in one pwrite, so that a
    commit costs no system call; `flush` (also done by every read, `refresh`, `validate` and `close`)
    writes them. Nothing here is durable, and needs not be: a cache that lost its tail is behind the
    log, which `validate` reports, and the backend rebuilds it."""

    FLUSH_LEAVES = 2048

    def __init__(self, path: str, fd: int, db_id: bytes, size: int, readonly: bool, reset_reason: str | None) -> None:
        super().__init__()
        self.path = path
        self.db_id = db_id
        self.readonly = readonly
        self.reset_reason = reset_reason  # why open() emptied the file it found, or None
        self._fd = fd
        self._size = size  # leaves held, the buffered ones included
        self._pending = bytearray()  # buffered leaves, for the positions just below _size

    @classmethod
    def open(cls, path: PathArg, db_id: bytes, *, readonly: bool = False) -> LeafCache:
        """Open (or, unless `readonly`, create) the cache at `path` for the database `db_id`.

        A file of another database, with a bad header, or of another version is emptied when opened
        for writing (`reset_reason` says why) and raises StaleCache when opened read-only, as does a
        missing file."""
        if not (isinstance(db_id, bytes) and len(db_id) == 16):
            raise InvalidInput("db_id must be 16 bytes")
        name = os.fspath(path)
        try:
            # Written in place, so never through a link (O_NOFOLLOW); made private, and given the log's
            # mode by the writer's open (Opening._match_sidecar_modes), never readable by more.
            fd = os.open(name, os.O_RDONLY) if readonly else \
                os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            raise StaleCache(f"no leaf-hash cache at {name}") from None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise StaleCache(f"{name} is a symbolic link, which Mnemo never writes through: remove it, "
                             "and the next writer rebuilds the cache from the log") from None
        try:
            length = os.fstat(fd).st_size
            reason = None
            if length == 0 and not readonly:
                os.pwrite(fd, encode_header(db_id), 0)
                length = HEADER_SIZE
            else:
                reason = _header_problem(os.pread(fd, HEADER_SIZE, 0), db_id)
            if reason is not None:
                if readonly:
                    raise StaleCache(f"{name}: {reason}")
                os.ftruncate(fd, 0)
                os.pwrite(fd, encode_header(db_id), 0)
                length = HEADER_SIZE
            size = (length - HEADER_SIZE) // HASH_SIZE
            if not readonly and length != HEADER_SIZE + size * HASH_SIZE:
                os.ftruncate(fd, HEADER_SIZE + size * HASH_SIZE)  # an append cut short
        except BaseException:
            os.close(fd)
            raise
        return cls(name, fd, db_id, size, readonly, reason)

    def __len__(self) -> int:
        return self._size

    def flush(self) -> None:
        """Write the buffered leaves."""
        pending = self._pending
        if pending:
            first = self._size - len(pending) // HASH_SIZE
            os.pwrite(self._fd, pending, HEADER_SIZE + first * HASH_SIZE)
            self._pending = bytearray()

    def refresh(self) -> int:
        """Take up leaves another process appended (or lost); returns the size."""
        self._check_open()
        self.flush()
        length = os.fstat(self._fd).st_size
        size = max(0, (length - HEADER_SIZE) // HASH_SIZE)
        if size < self._size:
            self._truncated(size)
        self._size = size
        return size

    def read(self, start: int, stop: int) -> bytes:
        if not (0 <= start <= stop <= self._size):
            raise InvalidInput(f"leaves [{start}, {stop}) are not all in the cache ({self._size} are)")
        self._check_open()
        self.flush()
        n = (stop - start) * HASH_SIZE
        off = HEADER_SIZE + start * HASH_SIZE
        data = os.pread(self._fd, n, off)
        while len(data) < n:  # a short read: keep reading, or the file was cut under us
            more = os.pread(self._fd, n - len(data), off + len(data))
            if not more:
                raise StaleCache(f"{self.path}: the cache was truncated while being read")
            data += more
        return data

    def append(self, hashes: bytes, at: int | None = None) -> None:
        """Add leaf hashes (concatenated) for the leaves `at`, `at` + 1, ... (default: the end).

        `at` is the seq of the first entry they belong to: below the cache's size, the leaves from `at`
        on are replaced (and any past the new ones dropped), so applying a frame twice does no harm;
        above it, StaleCache (a gap: rebuild)."""
        if at == self._size and type(hashes) is bytes and not len(hashes) % HASH_SIZE and not self.readonly \
                and self._fd >= 0:  # the next seq, as this handle knows the file (every commit): buffer it
            pending = self._pending
            pending += hashes
            self._size += len(hashes) // HASH_SIZE
            if len(pending) >= self.FLUSH_LEAVES * HASH_SIZE:
                self.flush()
            return
        self._check_writable()
        if not isinstance(hashes, (bytes, bytearray, memoryview)) or len(hashes) % HASH_SIZE:
            raise InvalidInput("leaf hashes must be given as 32 bytes each, concatenated")
        hashes = bytes(hashes)
        size = self.refresh()
        if at is None:
            at = size
        if at > size or at < 0:
            raise StaleCache(f"{self.path}: leaves from {at} on cannot follow the {size} held")
        k = len(hashes) // HASH_SIZE
        if at < size:
            self._truncated(at)
            if at + k < size:
                os.ftruncate(self._fd, HEADER_SIZE + (at + k) * HASH_SIZE)
        os.pwrite(self._fd, hashes, HEADER_SIZE + at * HASH_SIZE)
        self._size = at + k

    def truncate(self, size: int) -> None:
        """Keep only the first `size` leaves."""
        self._check_writable()
        if not (isinstance(size, int) and size >= 0):
            raise InvalidInput("size must be a non-negative integer")
        if size < self.refresh():
            os.ftruncate(self._fd, HEADER_SIZE + size * HASH_SIZE)
            self._size = size
            self._truncated(size)

    def rebuild(self, leaves: LeafSource | bytes) -> None:
        """Replace every leaf with `leaves` (read from the log)."""
        self._check_writable()
        data = leaves if isinstance(leaves, bytes) else leaves.read(0, len(leaves))
        self._pending = bytearray()
        self._clear()
        os.ftruncate(self._fd, HEADER_SIZE)
        self._size = 0
        self.append(data, at=0)
        self.flush()

    def validate(self, against: TreeHead | CompactRange | LeafSource | bytes) -> CacheCheck:
        """Check the cache against the log: a tree head (or compact range) computed from the log's own
        bytes, whose root the cached leaves of that size must give; or the log's leaf hashes
        themselves (a LeafSource or concatenated bytes), which they must equal. Changes nothing."""
        size = self.refresh()
        if isinstance(against, (TreeHead, CompactRange)):
            head = against.head() if isinstance(against, CompactRange) else against
            if size < head.size:
                return CacheCheck(False, size, 0, 0, f"the cache holds {size} leaves, the log {head.size}")
            got = self.root(head.size)
            if got != head.root:
                return CacheCheck(False, size, 0, size - head.size,
                                  f"the cached leaves give root {got.hex()} at size {head.size}, the log "
                                  f"{head.root.hex()}: the cache is stale or forged")
            return CacheCheck(True, size, head.size, size - head.size, None)
        log: LeafSource = against if isinstance(against, LeafSource) else _BytesLeaves(against)
        n = len(log)
        for start in range(0, min(size, n), _CHUNK):
            stop = min(start + _CHUNK, size, n)
            mine, theirs = self.read(start, stop), log.read(start, stop)
            if mine != theirs:
                first = start + next(i for i in range(0, len(mine), HASH_SIZE)
                                     if mine[i:i + HASH_SIZE] != theirs[i:i + HASH_SIZE]) // HASH_SIZE
                return CacheCheck(False, size, first, max(0, size - n),
                                  f"cached leaf {first} is not the log's: the cache is stale or forged")
        if size < n:
            return CacheCheck(False, size, size, 0, f"the cache holds {size} leaves, the log {n}")
        return CacheCheck(True, size, n, size - n, None)

    def _check_open(self) -> None:
        if self._fd < 0:
            raise StaleCache(f"{self.path}: the cache is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise InvalidInput("the leaf-hash cache was opened read-only")

    def close(self) -> None:
        if self._fd >= 0:
            try:
                self.flush()
            finally:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> LeafCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _BytesLeaves(LeafSource):
    def __init__(self, data: bytes) -> None:
        super().__init__()
        if len(data) % HASH_SIZE:
            raise InvalidInput("leaf hashes must be 32 bytes each")
        self._data = data

    def __len__(self) -> int:
        return len(self._data) // HASH_SIZE

    def read(self, start: int, stop: int) -> bytes:
        return self._data[start * HASH_SIZE:stop * HASH_SIZE]


__all__ = ["HEADER_SIZE", "MAGIC", "SUFFIX", "CacheCheck", "LeafCache", "cache_path", "encode_header"]
