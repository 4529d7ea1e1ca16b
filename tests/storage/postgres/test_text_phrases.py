"""Where a phrase starts, from its words' positions (text_phrases.py): in bulk with numpy, one document at
a time, and by the C extension, alike."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo._native import speedups
from mnemo.recall.query import Phrase, occurrences
from mnemo.storage.postgres import text_phrases


@settings(max_examples=200, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from(["a", "b", "c"]), max_size=12), min_size=1, max_size=8),
       phrase=st.lists(st.sampled_from(["a", "b", "c"]), min_size=2, max_size=4),
       unkept=st.sets(st.integers(0, 7)), dense=st.sampled_from([0, text_phrases.DENSE]),
       spread=st.sampled_from([1, 5_000, -(1 << 40)]))
def test_a_phrase_decided_in_bulk_is_decided_one_document_at_a_time(
    docs: list[list[str]], phrase: list[str], unkept: set[int], dense: int, spread: int
) -> None:
    """TableSource.phrase with numpy (a table of a bit per place, or a sort of the places), without it, and
    by the C extension (its documents looked up by seq in a table indexed by seq, or, seqs far apart, in a
    hash table): the same starts, the same documents whose positions are not kept; and the starts are the
    phrase's."""
    places: dict[str, tuple[bytes, bytes, bytes, bytes]] = {}
    doc_of = {10 + k * spread: k for k in range(len(docs))}
    for atom in dict.fromkeys(phrase):
        seqs, counts, packed, lengths = b"", array("i"), array("i"), b""
        for seq, k in doc_of.items():
            words = docs[k]
            at = [i for i, word in enumerate(words) if word == atom]
            if at:
                seqs += seq.to_bytes(8, "big", signed=True)
                lengths += len(words).to_bytes(4, "big")
                counts.append(-1 if k in unkept else len(at))
                packed.extend([] if k in unkept else at)
        places[atom] = (seqs, counts.tobytes(), packed.tobytes(), lengths)
    if any(not seqs for seqs, _sizes, _packed, _lengths in places.values()):
        return  # (a word no document holds: TableSource.phrase answers before)
    atoms_ = tuple(phrase)
    one_by_one = text_phrases._phrase_python(atoms_, places)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(text_phrases, "DENSE", dense)
        found, unknown, lengths = text_phrases._phrase_numpy(atoms_, places)
    assert (found, sorted(unknown)) == (one_by_one[0], sorted(one_by_one[1]))
    assert lengths == {seq: len(docs[doc_of[seq]]) for seq in [*found, *unknown]}
    assert all(one_by_one[2][seq] == length for seq, length in lengths.items())
    if speedups is not None:  # the C extension's, in one pass
        native = speedups.phrase_starts(tuple(places[atom] for atom in atoms_))
        assert (native[0], sorted(native[1]), native[2]) == (found, sorted(unknown), lengths)
    for seq, k in doc_of.items():
        words = docs[k]
        starts = occurrences(Phrase(atoms_), words)
        holds_all = all(atom in words for atom in atoms_)
        if holds_all and k in unkept:
            assert seq in unknown and seq not in found
        else:
            assert seq not in unknown and found.get(seq, 0) == starts
