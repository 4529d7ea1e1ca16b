"""The RFC 6962 Merkle tree over the chain's entries (docs/TRANSPARENCY.md §1, §2).

Leaves are the exact entry bytes, in seq order. `LeafSource` is anything that hands out leaf hashes by
range (an in-memory list, the file backend's sidecar cache, storage/file/leaves.py); it computes roots
and proofs over them, keeping the hashes of aligned perfect subtrees of 16 leaves and more once
computed, so that after the first proof every further one costs O(log n) hashes. `CompactRange` is the
other half: the stack of subtree roots that tracks the root of a growing log in O(log n) per entry.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from .._native import speedups
from ..errors import InvalidInput

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()  # MTH({}), for completeness: no Mnemo tree is empty
MEMO_LEVEL = 4  # perfect subtrees of 2**4 leaves and more are kept once hashed
_CHUNK_LEAVES = 1 << 16  # leaves read at a time while hashing the tree
MAX_SIZE = (1 << 63) - 1

_sha256 = hashlib.sha256


def leaf_hash(entry: bytes) -> bytes:
    """H(0x00 || entry): the leaf hash of one entry's exact bytes (not its chain hash H(entry))."""
    return _sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """H(0x01 || left || right)."""
    return _sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly less than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def _pairs(data: bytes) -> bytes:
    """The node hashes of consecutive pairs of the hashes concatenated in `data`: one level up."""
    sha = _sha256
    return b"".join([sha(b"\x01" + data[i:i + 64]).digest() for i in range(0, len(data), 64)])


def _fold(data: bytes) -> bytes:
    """The root of a perfect tree over the hashes concatenated in `data` (a power of two of them)."""
    while len(data) > HASH_SIZE:
        data = _pairs(data)
    return data


class TreeHead(NamedTuple):
    """A tree size and its root."""

    size: int
    root: bytes


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SIZE


class LeafSource:
    """Leaf hashes by range, and the tree over them. Subclasses implement `__len__` and `read`.

    The hashes of aligned perfect subtrees of 2**MEMO_LEVEL leaves and more are kept once computed, one
    array per level (about 4 bytes per leaf in all), so that once the tree has been hashed a root or a
    proof costs O(log n) lookups and a few small folds of leaves."""

    def __init__(self) -> None:
        self._levels: list[bytearray] = []  # _levels[j]: subtrees of level MEMO_LEVEL + j, in order

    def __len__(self) -> int:
        raise NotImplementedError

    def read(self, start: int, stop: int) -> bytes:
        """The leaf hashes of leaves start..stop-1, concatenated (32 bytes each)."""
        raise NotImplementedError

    def leaf(self, index: int) -> bytes:
        return self.read(index, index + 1)

    def _truncated(self, size: int) -> None:
        """Forget kept subtrees that reach past `size` (the source lost or replaced leaves from there)."""
        for j, level in enumerate(self._levels):
            del level[(size >> (MEMO_LEVEL + j)) * HASH_SIZE:]

    def _clear(self) -> None:
        self._levels = []

    # -- hashes of subtrees ----------------------------------------------------------------------------
    def _ensure(self, stop: int) -> None:
        """Compute and keep every aligned perfect subtree (of MEMO_LEVEL and up) inside leaves [0, stop)."""
        levels = self._levels
        if not levels:
            levels.append(bytearray())
        unit = 1 << MEMO_LEVEL
        have, want = len(levels[0]) // HASH_SIZE, stop >> MEMO_LEVEL
        if want <= have:
            return
        step = max(1, _CHUNK_LEAVES >> MEMO_LEVEL)
        for first in range(have, want, step):
            last = min(first + step, want)
            data = self.read(first * unit, last * unit)
            for _ in range(MEMO_LEVEL):
                data = _pairs(data)
            levels[0] += data
        j = 0
        while len(levels[j]) >= 2 * HASH_SIZE:
            if j + 1 == len(levels):
                levels.append(bytearray())
            below, above = levels[j], levels[j + 1]
            done, can = len(above) // HASH_SIZE, len(below) // (2 * HASH_SIZE)
            if can > done:
                above += _pairs(bytes(below[done * 2 * HASH_SIZE:can * 2 * HASH_SIZE]))
            j += 1

    def _perfect(self, level: int, index: int) -> bytes:
        """The root of the aligned perfect subtree of 2**level leaves starting at index << level."""
        if level < MEMO_LEVEL:
            start = index << level
            return _fold(self.read(start, start + (1 << level)))
        self._ensure((index + 1) << level)
        at = index * HASH_SIZE
        return bytes(self._levels[level - MEMO_LEVEL][at:at + HASH_SIZE])

    def subtree(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]), for 0 <= start <= end <= len(self)."""
        if not (_is_size(start) and _is_size(end) and start <= end <= len(self)):
            raise InvalidInput(f"no subtree [{start}, {end}) in a tree of {len(self)} leaves")
        return self._mth(start, end)

    def _mth(self, start: int, end: int) -> bytes:
        n = end - start
        if n == 0:
            return EMPTY_ROOT
        if n & (n - 1) == 0:
            level = n.bit_length() - 1
            if start & (n - 1) == 0:
                return self._perfect(level, start >> level)
            return _fold(self.read(start, end))  # not aligned: only ever asked for through subtree()
        k = _split(n)
        return node_hash(self._mth(start, start + k), self._mth(start + k, end))

    def root(self, size: int | None = None) -> bytes:
        """MTH(D[0:size]), the root of the tree of the first `size` leaves (default: all)."""
        if size is None:
            size = len(self)
        if not (_is_size(size) and size <= len(self)):
            raise InvalidInput(f"no tree of size {size!r}: the source holds {len(self)} leaves")
        return self._mth(0, size)

    # -- proofs ----------------------------------------------------------------------------------------
    def inclusion_path(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[size]) of RFC 6962 §2.1.1: the leaf's sibling first, up to a child of the root."""
        if size is None:
            size = len(self)
        if not (_is_size(index) and _is_size(size) and index < size <= len(self)):
            raise InvalidInput(f"no leaf {index!r} in a tree of size {size!r} ({len(self)} leaves held)")
        path: list[bytes] = []
        start, end = 0, size
        while end - start > 1:
            k = _split(end - start)
            if index < start + k:
                path.append(self._mth(start + k, end))
                end = start + k
            else:
                path.append(self._mth(start, start + k))
                start += k
        path.reverse()
        return path

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """PROOF(old_size, D[new_size]) of RFC 6962 §2.1.2; empty when the sizes are equal."""
        if new_size is None:
            new_size = len(self)
        if not (_is_size(old_size) and _is_size(new_size) and 0 < old_size <= new_size <= len(self)):
            raise InvalidInput(f"no consistency proof from size {old_size!r} to {new_size!r} "
                               f"({len(self)} leaves held)")
        proof: list[bytes] = []
        start, end, m, whole = 0, new_size, old_size, True
        while True:
            n = end - start
            if m == n:
                if not whole:
                    proof.append(self._mth(start, end))
                break
            k = _split(n)
            if m <= k:
                proof.append(self._mth(start + k, end))
                end = start + k
            else:
                proof.append(self._mth(start, start + k))
                start, m, whole = start + k, m - k, False
        proof.reverse()
        return proof


class HashList(LeafSource):
    """Leaf hashes held in memory, in one bytearray (32 bytes per leaf)."""

    def __init__(self, hashes: Iterable[bytes] | bytes | bytearray = b"") -> None:
        super().__init__()
        if isinstance(hashes, (bytes, bytearray)):
            if len(hashes) % HASH_SIZE:
                raise InvalidInput("leaf hashes must be 32 bytes each")
            self._data = bytearray(hashes)
        else:
            self._data = bytearray()
            for h in hashes:
                self.append(h)

    def __len__(self) -> int:
        return len(self._data) // HASH_SIZE

    def read(self, start: int, stop: int) -> bytes:
        if not (0 <= start <= stop <= len(self)):
            raise InvalidInput(f"leaves [{start}, {stop}) are not all held ({len(self)} are)")
        return bytes(self._data[start * HASH_SIZE:stop * HASH_SIZE])

    def append(self, h: bytes) -> None:
        if not _is_hash(h):
            raise InvalidInput("a leaf hash is 32 bytes")
        self._data += h

    def extend(self, hashes: bytes) -> None:
        """Append leaf hashes given concatenated."""
        if len(hashes) % HASH_SIZE:
            raise InvalidInput("leaf hashes must be 32 bytes each")
        self._data += hashes

    def truncate(self, size: int) -> None:
        if not (0 <= size <= len(self)):
            raise InvalidInput(f"cannot truncate {len(self)} leaves to {size}")
        del self._data[size * HASH_SIZE:]
        self._truncated(size)

    def raw(self) -> bytes:
        """Every leaf hash, concatenated."""
        return bytes(self._data)


Leaves = LeafSource | Sequence[bytes]


def _source(leaves: Leaves) -> LeafSource:
    return leaves if isinstance(leaves, LeafSource) else HashList(leaves)


def root(leaves: Leaves, size: int | None = None) -> bytes:
    """MTH over the first `size` leaf hashes (default: all)."""
    return _source(leaves).root(size)


def inclusion_path(leaves: Leaves, index: int, size: int | None = None) -> list[bytes]:
    """PATH(index, D[size]) over leaf hashes."""
    return _source(leaves).inclusion_path(index, size)


def consistency_proof(leaves: Leaves, old_size: int, new_size: int | None = None) -> list[bytes]:
    """PROOF(old_size, D[new_size]) over leaf hashes."""
    return _source(leaves).consistency_proof(old_size, new_size)


def verify_inclusion(leaf: bytes, index: int, size: int, path: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2: whether `path` proves leaf hash `leaf` at `index` in the tree (`size`, `root`)."""
    if not (_is_hash(leaf) and _is_hash(root) and _is_size(index) and _is_size(size)):
        return False
    if index >= size or not all(_is_hash(p) for p in path):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while fn & 1 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: whether `proof` shows the tree (`old_size`, `old_root`) is a prefix of
    (`new_size`, `new_root`)."""
    if not (_is_size(old_size) and _is_size(new_size) and _is_hash(old_root) and _is_hash(new_root)):
        return False
    if not all(_is_hash(p) for p in proof):
        return False
    if old_size == new_size:
        return len(proof) == 0 and old_root == new_root
    if not (0 < old_size < new_size) or not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while fn & 1 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


_RANGE_HEAD = struct.Struct(">BQ")
_RANGE_VERSION = 1


class CompactRange:
    """The roots of the perfect subtrees that make up a tree of `size` leaves, largest first (one per
    set bit of `size`, so at most 64): appending a leaf costs one hash on average and O(log n) at
    worst, the root costs O(log n), and `to_bytes` lets a backend keep it in its snapshot."""

    __slots__ = ("size", "_stack")

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        if not _is_size(size) or len(hashes) != bin(size).count("1") or not all(_is_hash(h) for h in hashes):
            raise InvalidInput("a compact range holds one 32-byte hash per set bit of its size")
        self.size = size
        self._stack = list(hashes)

    def append(self, leaf: bytes) -> None:
        """Add the next leaf hash."""
        if type(leaf) is not bytes or len(leaf) != HASH_SIZE:
            raise InvalidInput("a leaf hash is 32 bytes")
        self._push(leaf)

    def _push(self, h: bytes) -> None:
        stack, n, sha = self._stack, self.size, _sha256
        while n & 1:
            h = sha(b"\x01" + stack.pop() + h).digest()
            n >>= 1
        stack.append(h)
        self.size += 1

    def append_entry(self, entry: bytes) -> bytes:
        """Add the leaf of an entry's bytes; returns its leaf hash."""
        h = _sha256(b"\x00" + entry).digest()
        self._push(h)
        return h

    def add_entries(self, entries: Iterable[bytes]) -> list[bytes]:
        """Add the leaves of entries (their exact bytes); returns their leaf hashes. (The storage
        backend calls this on every commit: it is _push inlined.)"""
        sha, stack, n = _sha256, self._stack, self.size
        hashes = []
        for e in entries:
            h = sha(b"\x00" + e).digest()
            hashes.append(h)
            m = n
            while m & 1:
                h = sha(b"\x01" + stack.pop() + h).digest()
                m >>= 1
            stack.append(h)
            n += 1
        self.size = n
        return hashes

    def add_leaf_hashes(self, leaves: bytes) -> None:
        """Add leaf hashes given back to back, 32 bytes each (a replay's scan computes them)."""
        if len(leaves) % HASH_SIZE:
            raise InvalidInput("leaf hashes are 32 bytes each")
        if speedups is not None:
            self.size = speedups.merkle_push(self._stack, self.size, leaves)
            return
        for i in range(0, len(leaves), HASH_SIZE):
            self._push(leaves[i:i + HASH_SIZE])

    def extend(self, leaves: Iterable[bytes]) -> None:
        """Add leaf hashes."""
        for h in leaves:
            self.append(h)

    def root(self) -> bytes:
        stack = self._stack
        if not stack:
            return EMPTY_ROOT
        r = stack[-1]
        for h in reversed(stack[:-1]):
            r = node_hash(h, r)
        return r

    def head(self) -> TreeHead:
        return TreeHead(self.size, self.root())

    def hashes(self) -> tuple[bytes, ...]:
        return tuple(self._stack)

    def copy(self) -> CompactRange:
        return CompactRange(self.size, self._stack)

    def to_bytes(self) -> bytes:
        """Version byte 1, the size (u64 big-endian), then the subtree roots, largest first."""
        return _RANGE_HEAD.pack(_RANGE_VERSION, self.size) + b"".join(self._stack)

    @classmethod
    def from_bytes(cls, data: bytes) -> CompactRange:
        if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) < _RANGE_HEAD.size:
            raise InvalidInput("not a serialised compact range")
        data = bytes(data)
        version, size = _RANGE_HEAD.unpack_from(data, 0)
        body = data[_RANGE_HEAD.size:]
        if version != _RANGE_VERSION or len(body) != HASH_SIZE * bin(size).count("1"):
            raise InvalidInput("not a serialised compact range (version or length)")
        return cls(size, [body[i:i + HASH_SIZE] for i in range(0, len(body), HASH_SIZE)])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompactRange) and (self.size, self._stack) == (other.size, other._stack)

    def __hash__(self) -> int:
        return hash((self.size, tuple(self._stack)))

    def __repr__(self) -> str:
        return f"CompactRange(size={self.size}, root={self.root().hex()})"


__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "CompactRange",
    "HashList",
    "LeafSource",
    "Leaves",
    "TreeHead",
    "consistency_proof",
    "inclusion_path",
    "leaf_hash",
    "node_hash",
    "root",
    "verify_consistency",
    "verify_inclusion",
]
