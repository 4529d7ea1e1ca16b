"""The tree as a storage backend keeps it: a CompactRange for the current root, saved in the backend's
index snapshot, and the leaf-hash cache (DB.leaves) for proofs at any size. `TreeState` holds both and
keeps them in step; a backend calls it at three points:

- on open: `TreeState(db_path, db_id, saved=...)`, with `saved` the bytes `to_bytes()` gave when the
  snapshot the backend loaded was written (None without a snapshot: then the backend's replay from
  seq 0 adds every entry). Bytes that are not a compact range raise InvalidInput: discard the
  snapshot then, as for any snapshot that does not match the log;
- for every frame it applies, its own commits and frames it replays or catches up with alike, under the
  writer lock: `add(entry_bytes, first_seq)`, the exact bytes of the frame's entries in order (or
  `add_leaves(leaf_hashes, first_seq)` when the leaf hashes are made already, as a replay's scan does);
- when it writes its snapshot: put `to_bytes()` in it and call `flush()`; `close()` on close.

The range is the truth about the tree (it is computed from the entries the backend read or wrote); the
cache is a sidecar and is checked against it: `add` never fails because of the cache (a cache that is
missing, of another database, or behind is set aside and `cache_ok` turns False), and `prover()` hands
out only proofs checked against the range's head (prover.CacheProver). When `cache_ok` is False, the
backend reads every entry's bytes from its log once and calls `rebuild`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from ..._native import writepath
from ...chain.tree import HASH_SIZE, CompactRange, LeafSource, TreeHead
from ...errors import StaleCache
from ..types import PathArg
from .leaves import CacheCheck, LeafCache, cache_path
from .prover import CacheProver


class TreeState:
    """The compact range and the leaf-hash cache of one database, kept in step (see the module doc)."""

    def __init__(self, db_path: PathArg, db_id: bytes, *, saved: bytes | None = None, readonly: bool = False) -> None:
        self.range = CompactRange.from_bytes(saved) if saved is not None else CompactRange()
        self.cache: LeafCache | None
        self.cache_problem: str | None = None
        try:
            self.cache = LeafCache.open(cache_path(db_path), db_id, readonly=readonly)
        except (StaleCache, OSError) as exc:
            self.cache, self.cache_problem = None, str(exc)
        if self.cache is not None and len(self.cache) < self.range.size:
            self._set_aside(f"the cache holds {len(self.cache)} leaves, the log {self.range.size}")

    @property
    def cache_ok(self) -> bool:
        return self.cache is not None and self.cache_problem is None

    @property
    def size(self) -> int:
        return self.range.size

    def head(self) -> TreeHead:
        return self.range.head()

    def to_bytes(self) -> bytes:
        """The compact range, for the backend's index snapshot."""
        return self.range.to_bytes()

    def add(self, entries: Sequence[bytes], first_seq: int) -> None:
        """The entries of one frame, their exact bytes, the first being seq `first_seq`. Raises StaleCache
        only if `first_seq` is not the tree's size (a frame skipped or applied twice: the range was
        restored from a snapshot that does not match the log, and the tree must be rebuilt)."""
        if first_seq != self.range.size:
            raise StaleCache(f"a frame at seq {first_seq} does not follow the tree of {self.range.size} entries")
        if writepath is not None and type(entries) is list:  # the leaf hashes in one call of the extension
            leaves = writepath.leaf_hashes(entries)
            self.range.add_leaf_hashes(leaves)
            self._cache_leaves([leaves], first_seq)
            return
        self._cache_leaves(self.range.add_entries(entries), first_seq)

    def add_leaves(self, leaves: bytes, first_seq: int) -> None:
        """As `add`, for entries whose leaf hashes are already made: 32 bytes each, back to back."""
        if first_seq != self.range.size:
            raise StaleCache(f"a frame at seq {first_seq} does not follow the tree of {self.range.size} entries")
        self.range.add_leaf_hashes(leaves)
        self._cache_leaves([leaves], first_seq)

    def _cache_leaves(self, hashes: list[bytes], first_seq: int) -> None:
        cache = self.cache
        if cache is not None and self.cache_problem is None and cache.readonly:
            # A reader keeps the cache as the writers leave it: usable as long as it covers the tree.
            if len(cache) < self.range.size:
                self._set_aside(f"the cache holds {len(cache)} leaves, the log {self.range.size}")
            return
        if cache is not None and self.cache_problem is None:
            try:
                cache.append(hashes[0] if len(hashes) == 1 else b"".join(hashes), first_seq)
            except (StaleCache, OSError) as exc:
                self._set_aside(str(exc))

    def _set_aside(self, problem: str) -> None:
        self.cache_problem = problem

    def check(self) -> CacheCheck | None:
        """Validate the cache against the range (hashing the tree once); None without a cache. A cache
        that fails is set aside; one longer than the log loses its extra leaves."""
        if self.cache is None:
            return None
        check = self.cache.validate(self.range)
        if not check.ok:
            self._set_aside(check.problem or "the cache is not the log's")
        elif check.extra and not self.cache.readonly:
            self.cache.truncate(self.range.size)
        return check

    def rebuild(self, leaves: LeafSource) -> None:
        """Rebuild both from every leaf hash of the log (its entries read once, e.g. log.read_tree's
        leaves): the range is recomputed, and the cache, if writable, rewritten."""
        fresh = CompactRange()
        data = leaves.read(0, len(leaves))
        fresh.extend(data[i:i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE))
        self.range = fresh
        if self.cache is not None and not self.cache.readonly:
            self.cache.rebuild(data)
            self.cache_problem = None

    def prover(self) -> CacheProver:
        """Checked proofs for the current tree; StaleCache if the cache is set aside."""
        if self.cache is None or self.cache_problem is not None:
            raise StaleCache(f"no usable leaf-hash cache: {self.cache_problem}")
        self.cache.flush()
        return CacheProver(self.cache, self.range.head())

    def flush(self) -> None:
        if self.cache is not None and self.cache_problem is None and not self.cache.readonly:
            self.cache.flush()

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def remove_cache(db_path: PathArg) -> None:
    """Remove DB.leaves (for a backend that drops its sidecars)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(cache_path(db_path))


__all__ = ["TreeState", "remove_cache"]
