"""Proofs from a leaf-hash cache that are checked before they are handed out.

A cache is a sidecar: anyone who can write the database's directory can change it. So `CacheProver`
never returns what the cache says without proving it against `head`, the tree head its backend computed
from the log's own bytes (the `CompactRange` it keeps up to date as it writes and replays entries):

- the root at a smaller size m comes from the cache, and counts only once a consistency proof from m to
  the head, also from the cache, verifies against the head's root;
- an inclusion path must lead from H(0x00 || entry) — the entry bytes the caller read from the log — to
  the root of its tree;
- a consistency proof must verify against both roots.

Any failure raises StaleCache, and the cache must be rebuilt from the log. Binding rests on SHA-256:
no cache contents other than the log's own leaves pass these checks without a collision.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...chain.tree import CompactRange, LeafSource, TreeHead, leaf_hash, verify_consistency, verify_inclusion
from ...errors import StaleCache, UsageError


@dataclass(frozen=True)
class Inclusion:
    index: int
    size: int
    root: bytes
    path: tuple[bytes, ...]


@dataclass(frozen=True)
class Consistency:
    old_size: int
    new_size: int
    old_root: bytes
    new_root: bytes
    proof: tuple[bytes, ...]


class CacheProver:
    """Checked proofs over `leaves` for the tree whose current head is `head` (see the module doc)."""

    def __init__(self, leaves: LeafSource, head: TreeHead | CompactRange) -> None:
        self.leaves = leaves
        self.head = head.head() if isinstance(head, CompactRange) else head
        if len(leaves) < self.head.size:
            raise StaleCache(f"the cache holds {len(leaves)} leaves, the log {self.head.size}")

    def _check_size(self, size: int, what: str) -> None:
        if not (isinstance(size, int) and not isinstance(size, bool) and 1 <= size <= self.head.size):
            raise UsageError(f"{what} {size!r} is not between 1 and the tree size {self.head.size}")

    def root_at(self, size: int) -> bytes:
        """The root at `size`, proven consistent with the head."""
        self._check_size(size, "size")
        if size == self.head.size:
            return self.head.root
        root = self.leaves.root(size)
        proof = self.leaves.consistency_proof(size, self.head.size)
        if not verify_consistency(size, self.head.size, root, self.head.root, proof):
            raise StaleCache(f"the cached root at size {size} is not consistent with the log's head")
        return root

    def inclusion(self, index: int, entry: bytes, size: int | None = None) -> Inclusion:
        """The path of the entry `entry` (its exact bytes, read from the log) at `index` in the tree of
        `size` entries (default: the head's)."""
        size = self.head.size if size is None else size
        self._check_size(size, "size")
        if not (isinstance(index, int) and 0 <= index < size):
            raise UsageError(f"seq {index!r} is not in the tree of {size} entries")
        root = self.root_at(size)
        path = tuple(self.leaves.inclusion_path(index, size))
        if not verify_inclusion(leaf_hash(entry), index, size, path, root):
            raise StaleCache(f"the cached path of leaf {index} does not lead to the log's root")
        return Inclusion(index, size, root, path)

    def consistency(self, old_size: int, new_size: int | None = None) -> Consistency:
        """The consistency proof from `old_size` to `new_size` (default: the head's size)."""
        new_size = self.head.size if new_size is None else new_size
        self._check_size(new_size, "new size")
        self._check_size(old_size, "old size")
        if old_size > new_size:
            raise UsageError(f"old size {old_size} is above the new size {new_size}")
        new_root = self.root_at(new_size)
        old_root = self.leaves.root(old_size)
        proof = tuple(self.leaves.consistency_proof(old_size, new_size))
        if not verify_consistency(old_size, new_size, old_root, new_root, proof):
            raise StaleCache(f"the cached proof from size {old_size} to {new_size} does not verify")
        return Consistency(old_size, new_size, old_root, new_root, proof)


__all__ = ["CacheProver", "Consistency", "Inclusion"]
