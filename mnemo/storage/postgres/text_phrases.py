"""Where a phrase starts in each document, from the positions of its words read with their postings
(text_index.pack_places packs them): what TableSource.phrase answers (text_source.py). In C where the
extension is built (mnemo/_speedups.c, phrase_starts), else in bulk with numpy (_phrase_numpy) or one
document at a time (_phrase_python)."""

from __future__ import annotations

from itertools import accumulate
from typing import TYPE_CHECKING

from ..._native import speedups
from ...recall._numpy import installed, np
from ...recall.engine import distinct
from .text_index import native_column, unpacked

if TYPE_CHECKING:
    from numpy.typing import NDArray


Places = dict[str, tuple[bytes, bytes, bytes, bytes]]  # each atom's: TableSource._places


def phrase_starts(atoms: tuple[str, ...], places: Places) -> tuple[dict[int, int], list[int], dict[int, int]]:
    """TableSource.phrase's answer from its atoms' places: the starts in each document holding the phrase,
    the documents holding every atom with one whose positions are not kept, and the lengths of both (those
    of the first atom's postings). The C extension decides it in one pass (mnemo/_speedups.c,
    phrase_starts: each document of the atom of fewest postings looked up in the others' by a table of
    their seqs; fuzzed against _phrase_python); without it numpy does in bulk (_phrase_numpy), or
    _phrase_python one document at a time."""
    if speedups is not None:
        native: tuple[dict[int, int], list[int], dict[int, int]] | None = speedups.phrase_starts(
            tuple(places[atom] for atom in atoms))
        if native is not None:
            return native
    return (_phrase_numpy if installed() else _phrase_python)(atoms, places)


def _phrase_python(atoms: tuple[str, ...], places: Places) -> tuple[dict[int, int], list[int], dict[int, int]]:
    """TableSource.phrase, one document at a time (what runs without numpy); the lengths are those of
    every posting, the first atom's where two disagree (rows written by hand)."""
    by_atom: dict[str, dict[int, set[int] | None]] = {}
    lengths: dict[int, int] = {}
    for atom, (seqs, counts, packed, packed_lengths) in places.items():
        for seq, length in zip(unpacked(seqs, 8), unpacked(packed_lengths, 4), strict=True):
            lengths.setdefault(seq, length)
        where: dict[int, set[int] | None] = {}
        positions = native_column(packed)
        at = 0
        for seq, count in zip(unpacked(seqs, 8), native_column(counts), strict=True):
            if count < 0:
                where[seq] = None  # not kept: the text says
            else:
                where[seq] = set(positions[at:at + count])
            at += max(0, count)
        by_atom[atom] = where
    lists = sorted(by_atom.values(), key=len)
    found: dict[int, int] = {}
    unknown: list[int] = []
    for seq in lists[0]:
        if not all(seq in other for other in lists[1:]):
            continue
        held = [by_atom[atom][seq] for atom in atoms]
        kept = [places_ for places_ in held if places_ is not None]
        if len(kept) < len(held):
            unknown.append(seq)
            continue
        starts = sum(1 for start in kept[0] if all(start + k in other for k, other in enumerate(kept[1:], 1)))
        if starts:
            found[seq] = starts
    return found, unknown, lengths


DENSE = 16
"""A phrase's starts are found in a table of a bit per (document, position) when it has at most this
many entries per position read (and 2^20 more), else by sorting the positions."""


def _phrase_numpy(atoms: tuple[str, ...], places: Places) -> tuple[dict[int, int], list[int], dict[int, int]]:
    """TableSource.phrase in bulk: each atom's positions as numbers (document, position) over the documents
    of the atoms' postings; the starts of the first atom kept where the next atom follows, and so on."""
    columns = {}
    for atom, (seqs, packed_counts, packed, _lengths) in places.items():
        counts_ = np.frombuffer(packed_counts, dtype=np.int32).astype(np.int64)
        kept = counts_ >= 0
        columns[atom] = (np.frombuffer(seqs, dtype=">i8").astype(np.int64), kept,
                         np.where(kept, counts_, 0), np.frombuffer(packed, dtype=np.int32).astype(np.int64))
    every, at = distinct(np.concatenate([keys for keys, _kept, _counts, _positions in columns.values()]))
    holding = np.zeros(len(every), dtype=np.int64)
    unknown = np.zeros(len(every), dtype=np.bool_)
    start = 0
    for keys, kept, _counts, _positions in columns.values():
        mine = at[start:start + len(keys)]
        start += len(keys)
        held = np.bincount(mine, minlength=len(every))
        if len(held) and int(held.max()) > 1:
            return _phrase_python(atoms, places)  # a document twice in an atom's postings (rows written by hand)
        holding += held
        unknown[mine[~kept]] = True
    full = holding == len(columns)
    unknown &= full
    width = len(atoms)
    top = max((int(positions.max()) for *_rest, positions in columns.values() if len(positions)), default=0)
    span = top + width + 1  # a start and the places after it, never into the next document's numbers
    start = 0
    numbers: dict[str, NDArray[np.int64]] = {}
    total = 0
    for atom, (keys, _kept, counts, positions) in columns.items():
        mine = at[start:start + len(keys)]
        start += len(keys)
        docs = np.repeat(mine, counts)
        valid = positions >= 0
        numbers[atom] = docs[valid] * span + positions[valid]
        total += len(numbers[atom])
    if len(every) * span <= DENSE * total + (1 << 20):
        tables = {}
        for atom, found in numbers.items():
            table = np.zeros(len(every) * span, dtype=np.bool_)
            table[found] = True
            tables[atom] = table
        current = numbers[atoms[0]]
        if np.count_nonzero(tables[atoms[0]]) != len(current):  # a place twice (rows written by hand)
            current = np.flatnonzero(tables[atoms[0]])
        for k in range(1, width):
            current = current[tables[atoms[k]][current + k]]
    else:
        current = np.unique(numbers[atoms[0]])
        for k in range(1, width):
            current = current[np.isin(current + k, numbers[atoms[k]])]
    starts = np.bincount(current // span, minlength=len(every))
    chosen = np.flatnonzero((starts > 0) & full & ~unknown)
    either = np.flatnonzero(((starts > 0) & full) | unknown)
    lengths = np.zeros(len(every), dtype=np.int64)
    spans = list(zip(accumulate((len(seqs) // 8 for seqs, *_rest in places.values()), initial=0),
                     places.values(), strict=False))
    for first, (packed_seqs, *_places, packed_lengths) in reversed(spans):  # (the first atom's last)
        lengths[at[first:first + len(packed_seqs) // 8]] = np.frombuffer(packed_lengths, dtype=">i4")
    return (dict(zip(every[chosen].tolist(), starts[chosen].tolist(), strict=True)),
            every[np.flatnonzero(unknown)].tolist(),
            dict(zip(every[either].tolist(), lengths[either].tolist(), strict=True)))


__all__ = ["DENSE", "Places", "phrase_starts"]
