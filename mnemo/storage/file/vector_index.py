"""Semantic recall's index in the file backend: one unit vector per live record whose latest version's
content is text, made by the embedder named in it, kept in memory beside the text index
(text_index.py) and in the index's snapshot.

Vectors sit in the rows of one float32 matrix, a slot per record; each slot knows its record's row,
scope and the seq of the version it was made from. A slot whose record is updated or forgotten is
zeroed and freed at once (the next record indexed takes it), so no vector of a departed version stays
in memory, and the snapshot, written from the live slots only, never holds one. A new version is
embedded when semantic recall next runs (its text read from the log then, as the text index reads
it), a batch of texts at a time: writes pay nothing for a search they may never need.

The exact scan (`cosines`) is numpy's einsum over every slot, not a BLAS product: BLAS splits a product
differently by the matrix's size and alignment, which changes the last bits of a cosine, and recall
promises scores that do not depend on records the caller cannot read or that were forgotten.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ...errors import EmbedderMismatch
from ...recall._numpy import installed, np
from ...recall.embedding import Embedder, describe, embed
from ...recall.local import recorded_as
from .text_index import RowDerived

if TYPE_CHECKING:
    from numpy.typing import NDArray

VECTOR_LAYOUT = 1
_CHUNK = 1024  # texts read from the log, then embedded, at a time during a catch-up


class VectorIndex(RowDerived):
    """Slots of vectors by row, and the rows not embedded yet. Not thread-safe: the store's index lock
    is held by whoever reads or changes it."""

    def __init__(self, name: str, dimension: int) -> None:
        self.name, self.dimension = name, dimension
        self.vectors: NDArray[np.float32] = np.zeros((0, dimension), dtype=np.float32)
        self.slot_row: NDArray[np.int64] = np.zeros(0, dtype=np.int64)  # -1: free
        self.slot_scope: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.slot_seq: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.used = 0  # slots below this have been handed out; those above are free and zero
        self.free: list[int] = []
        self.row_slot: dict[int, int] = {}
        self.pending: set[int] = set()

    @classmethod
    def fresh(cls, embedder: Embedder, rows: Iterable[int]) -> VectorIndex:
        """An index for `embedder` with each of `rows` (the live rows) to be embedded."""
        index = cls(embedder.name, embedder.dimension)
        index.pending.update(rows)
        return index

    def check(self, embedder: Embedder) -> None:
        """EmbedderMismatch unless these vectors were made by `embedder`; vectors recorded under the local
        model's name of before its weights' hash was part of it take the name of today's (local.recorded_as)."""
        if not recorded_as(self.name, embedder.name) or self.dimension != embedder.dimension:
            raise EmbedderMismatch(
                f"this database's vectors were made by the embedder {self.name!r} (dimension {self.dimension}), "
                f"not by {describe(embedder)}: open it with that embedder, or rebuild its vectors with "
                "`mnemo reindex DB` (mnemo.reindex in Python)"
            )
        self.name = embedder.name

    def slot_of(self, row: int) -> int | None:
        return self.row_slot.get(row)

    # -- what the index's rows tell it (RowDerived's changed and added) ---------------------------------
    def remove_row(self, row: int) -> None:
        """Row `row`'s record was forgotten (or replaced): its vector is zeroed and its slot freed."""
        self.pending.discard(row)
        slot = self.row_slot.pop(row, None)
        if slot is None:
            return
        self.vectors[slot] = 0.0
        self.slot_row[slot] = -1
        self.slot_scope[slot] = 0
        self.slot_seq[slot] = 0
        self.free.append(slot)

    def _slot(self) -> int:
        if self.free:
            return self.free.pop()
        if self.used == len(self.slot_row):
            grown = max(16, 2 * self.used)
            self.vectors = _grown(self.vectors, grown)
            self.slot_row = np.concatenate([self.slot_row, np.full(grown - self.used, -1, dtype=np.int64)])
            self.slot_scope = _grown(self.slot_scope, grown)
            self.slot_seq = _grown(self.slot_seq, grown)
        self.used += 1
        return self.used - 1

    def put(self, row: int, scope: int, seq: int, vector: NDArray[np.float32]) -> None:
        """`vector` as row `row`'s, made from the version `seq`, in scope code `scope`. Precondition: the
        row has none."""
        slot = self._slot()
        self.vectors[slot] = vector
        self.slot_row[slot] = row
        self.slot_scope[slot] = scope
        self.slot_seq[slot] = seq
        self.row_slot[row] = slot

    def catch_up(
        self, read: Callable[[int], tuple[int, int, str | None]], embedder: Embedder,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Embed every pending row: `read(row)` gives its scope code, and the seq and searchable text of
        its latest version (None: not text, so no vector). Rows are read and embedded _CHUNK at a time,
        in row order; `progress(done, total)` after each chunk. A failing embedder leaves the rows of
        its chunk pending."""
        rows = sorted(self.pending)
        for start in range(0, len(rows), _CHUNK):
            chunk = [(row, *read(row)) for row in rows[start:start + _CHUNK]]
            texts = [(row, scope, seq, text) for row, scope, seq, text in chunk if text is not None]
            vectors = embed(embedder, [text for *_, text in texts])
            for (row, scope, seq, _text), vector in zip(texts, vectors, strict=True):
                self.put(row, scope, seq, vector)
            self.pending.difference_update(row for row, *_ in chunk)
            if progress is not None:
                progress(min(start + _CHUNK, len(rows)), len(rows))
        self.pending = set()

    # -- reads ---------------------------------------------------------------------------------------
    def corpus(self, codes: set[int] | None) -> NDArray[np.int64]:
        """The live slots of the scope codes `codes` (None: every one), in slot order."""
        rows = self.slot_row[:self.used]
        live = rows >= 0
        if codes is not None:
            live &= np.isin(self.slot_scope[:self.used], np.fromiter(codes, dtype=np.int64, count=len(codes)))
        return np.flatnonzero(live)

    def cosines(self, query: NDArray[np.float32]) -> NDArray[np.float32]:
        """The cosine of `query` (a unit vector) with every slot's vector (free slots: 0), each computed
        alike whatever the number of slots (see the module's note)."""
        found: NDArray[np.float32] = np.einsum("ij,j->i", self.vectors[:self.used], query)
        return found

    # -- the snapshot ------------------------------------------------------------------------------
    def to_state(self, renumber: Callable[[int], int] | None) -> dict[str, Any]:
        """The index as plain data, its rows renumbered by `renumber` (old row -> new row; None: kept):
        the live slots only, densely, so nothing of a departed version is written."""
        live = self.corpus(None)
        rows = self.slot_row[live]
        pending = sorted(self.pending)
        if renumber is not None:
            rows = np.fromiter(map(renumber, rows.tolist()), dtype=np.int64, count=len(rows))
            pending = sorted(map(renumber, pending))
        return {
            "layout": VECTOR_LAYOUT,
            "byteorder": sys.byteorder,
            "name": self.name,
            "dimension": self.dimension,
            "rows": rows.tobytes(),
            "scopes": self.slot_scope[live].tobytes(),
            "seqs": self.slot_seq[live].tobytes(),
            "vectors": np.ascontiguousarray(self.vectors[live]).tobytes(),
            "pending": array("q", pending).tobytes(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], rows: int, scopes: int) -> VectorIndex:
        """An index from to_state()'s data, for an index of `rows` rows and `scopes` scope codes.
        ValueError (or KeyError, TypeError) on anything inconsistent."""
        if state["layout"] != VECTOR_LAYOUT or state["byteorder"] != sys.byteorder:
            raise ValueError("vector index of another layout or byte order")
        name, dimension = state["name"], state["dimension"]
        if not isinstance(name, str) or not isinstance(dimension, int) or not 1 <= dimension <= 1 << 16:
            raise ValueError("vector index names no embedder")
        index = cls(name, dimension)
        slot_row = np.frombuffer(state["rows"], dtype=np.int64).copy()
        n = len(slot_row)
        index.slot_scope = np.frombuffer(state["scopes"], dtype=np.int64).copy()
        index.slot_seq = np.frombuffer(state["seqs"], dtype=np.int64).copy()
        vectors = np.frombuffer(state["vectors"], dtype=np.float32)
        if len(index.slot_scope) != n or len(index.slot_seq) != n or len(vectors) != n * dimension:
            raise ValueError("vector index columns differ in length")
        if n and (slot_row.min() < 0 or slot_row.max() >= rows or index.slot_scope.min() < 0
                  or index.slot_scope.max() >= scopes):
            raise ValueError("vector index names a row or scope the index lacks")
        index.vectors = vectors.reshape(n, dimension).copy()
        if not np.isfinite(index.vectors).all():
            raise ValueError("vector index holds a vector that is not finite")
        index.slot_row, index.used = slot_row, n
        index.row_slot = dict(zip(slot_row.tolist(), range(n), strict=True))
        index.pending = set(array("q", bytes(state["pending"])))
        if len(index.row_slot) != n or index.pending & index.row_slot.keys():
            raise ValueError("vector index names a row twice")
        if index.pending and (min(index.pending) < 0 or max(index.pending) >= rows):
            raise ValueError("vector index names a row the index lacks")
        return index

    def describe(self, row_id: Callable[[int], str | None]) -> dict[str | None, tuple[int, int, NDArray[np.float32]]]:
        """Each vector as (scope code, seq, vector), by its record's id: for verify."""
        return {
            row_id(int(self.slot_row[slot])): (int(self.slot_scope[slot]), int(self.slot_seq[slot]), self.vectors[slot])
            for slot in self.corpus(None).tolist()
        }

    def nbytes(self) -> int:
        """The memory the vectors and their columns take."""
        return int(self.vectors.nbytes + self.slot_row.nbytes + self.slot_scope.nbytes + self.slot_seq.nbytes)


def _grown(column: NDArray[Any], size: int) -> NDArray[Any]:
    out = np.zeros((size, *column.shape[1:]), dtype=column.dtype)
    out[:len(column)] = column
    return out


def available() -> bool:
    """Whether numpy is installed, so that a vector index can be loaded."""
    return installed()


__all__ = ["VECTOR_LAYOUT", "VectorIndex", "available"]
