"""What an index answers without changing (mnemo/storage/file/index_reads.py): its records as a mapping,
and its counts."""

from __future__ import annotations

import struct

import pytest
from helpers.indexes import IDS, state_of, three

from mnemo.storage.file.index import Index


def test_the_records_view_answers_as_a_mapping() -> None:
    index = three()
    view = index.records
    assert len(view) == 3 and list(view) == IDS[:3]
    assert IDS[0] in view and "missing" not in view and 5 not in view
    with pytest.raises(KeyError):
        view["missing"]
    index.drop(IDS[0])
    assert len(view) == 2 and IDS[0] not in view


def test_counts_take_the_tags_of_tag_sets_in_use_only() -> None:
    """A snapshot may hold a tag set no row uses (its count 0): its tags are no tags of the records."""
    state = state_of(three())
    assert Index.from_state(b"d" * 16, state).counts() == (3, 3, 2)
    state["tagset_tags"] = [*state["tagset_tags"], "unused"]
    state["tagset_lens"] = state["tagset_lens"] + struct.pack("=I", 1)
    state["tagset_refs"] = state["tagset_refs"] + struct.pack("=I", 0)
    index = Index.from_state(b"d" * 16, state)
    assert index.counts() == (3, 3, 2)
    index.drop(IDS[2])  # the last record with "b" alone; ("a", "b") still holds it
    assert index.counts() == (2, 2, 2)
    index.drop(IDS[1])
    assert index.counts() == (1, 1, 1)
