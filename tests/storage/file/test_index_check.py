"""An index's checks of itself (mnemo/storage/file/index_check.py): the tag postings and the `path:` tags
per scope against the records' own tags, in bulk and record by record, and the records against another
index's."""

from __future__ import annotations

import importlib
from array import array

import pytest
from helpers.indexes import IDS, loaded, roundtrip, three

from mnemo.storage.file import index_check
from mnemo.storage.file.index import Index, Version


def test_posting_differences_names_path_tags_per_scope_that_disagree_with_the_records() -> None:
    index = Index(b"d" * 16)
    index.put(IDS[0], "agent:x", ("path:/m/a",), Version(1, 1, 1, "x", 3, b"h" * 32, 100, 30))
    index.put(IDS[1], "agent:x", ("b", "path:/m/b"), Version(1, 2, 2, "x", 3, b"i" * 32, 200, 30))
    assert index.posting_differences() == []  # not built: nothing to compare
    scoped = index.scoped_tags()
    code = index.scopes.codes["agent:x"]
    assert scoped.sorted == {code: ["path:/m/a", "path:/m/b"]} and index.posting_differences() == []
    wrong = "the path tags listed per scope are not those the records hold"
    scoped.sorted[code].append("path:/m/c")  # a tag no record of the scope holds
    assert index.posting_differences() == [wrong]
    scoped.sorted[code].pop()
    scoped.more[(code, "path:/m/a")] = 1  # a second row said to hold it
    assert index.posting_differences() == [wrong]
    del scoped.more[(code, "path:/m/a")]
    index.cols["tagset"][1] = 0  # and the postings disagree too: both said
    assert index.posting_differences() == [
        "the index of tag 'b' lists row 1, which does not hold it",
        "the index of tag 'path:/m/b' lists row 1, which does not hold it", wrong,
    ]
    index.cols["tagset"][1] = index.tagsets.codes[("b", "path:/m/b")]
    index.cols["scope"].pop()  # a row without its scope: nothing to check the lists against
    assert index.posting_differences() == ["the path tags listed per scope cannot be checked against the records"]


def test_a_posting_that_lists_a_row_without_its_tag_is_a_difference() -> None:
    index = three()
    assert index.posting_differences() == []
    index.postings["b"].append(0)  # row 0 holds only "a"
    assert index.posting_differences() == ["the index of tag 'b' lists row 0, which does not hold it"]


def test_records_only_in_the_index_or_only_in_the_log_are_named_so() -> None:
    index, log = three(), three()
    log.drop(IDS[0])
    index.drop(IDS[2])
    assert index.differences(log) == [f"record {IDS[0]} is only in the index", f"record {IDS[2]} is only in the log"]


def test_records_missing_from_every_posting_are_each_named() -> None:
    index = three()
    index.postings.clear()
    index.sorted_tags = []
    assert index.posting_differences() == [
        f"record {IDS[0]} is missing from the index of tag 'a'",
        f"record {IDS[1]} is missing from the index of tag 'a'",
        f"record {IDS[1]} is missing from the index of tag 'b'",
        f"record {IDS[2]} is missing from the index of tag 'b'",
    ]


def test_a_row_moved_from_one_posting_to_another_is_found_though_the_counts_agree() -> None:
    index = three()
    index.postings["a"] = array("I", [1])  # row 0 taken out of "a"...
    index.postings["b"].append(0)  # ...and put under "b": as many (tag, row) pairs as the records hold
    assert index.posting_differences() == [
        f"record {IDS[0]} is missing from the index of tag 'a'",
        "the index of tag 'b' lists row 0, which does not hold it",
    ]


# -- the bulk check and the detailed comparison agree ---------------------------------------------------------


@pytest.mark.parametrize("dead", [False, True], ids=["all rows live", "a row forgotten"])
def test_a_posting_missing_a_row_is_a_difference(dead: bool) -> None:
    """A record left out of one of its tags' postings (which would hide it from tag queries) is found,
    with every row live and with a forgotten row among them (where the bulk check does not apply)."""
    index = loaded()
    index.put(IDS[3], "s", ("b", "c"), Version(1, 4, 4, "x", 1, b"h" * 32, 400, 30))
    if dead:
        index.drop(IDS[0])
    assert index.posting_differences() == []
    index.postings["b"] = array("I", [r for r in index.postings["b"] if r != 1])  # row 1 holds a and b
    assert index.posting_differences() == [f"record {IDS[1]} is missing from the index of tag 'b'"]


@pytest.mark.parametrize("listed", [True, False], ids=["still in its posting", "in no posting"])
def test_a_live_row_whose_tag_set_was_freed_is_a_difference(listed: bool) -> None:
    index = loaded()
    code = index.cols["tagset"][2]  # ("b",), used by row 2 only
    index.tagsets.values[code] = None
    if not listed:
        index.postings["b"] = array("I", [1])
    assert index.posting_differences() == [
        "the index snapshot is inconsistent (row 2); delete it and reopen, or run verify"]


def test_a_posting_listing_a_row_twice_in_place_of_another_is_a_difference() -> None:
    """The bulk check counts distinct (row, tag) pairs: a posting that lists one row twice instead of
    another row has the right length, and is still found."""
    index = loaded()
    index.postings["a"] = array("I", [0, 0])  # rows 0 and 1 hold "a"
    assert index.posting_differences() == [f"record {IDS[1]} is missing from the index of tag 'a'"]


@pytest.mark.parametrize(("tagset", "rows", "codes", "want"), [
    ([0, 1, 1, 2], [0, 2], [0, 1], 2),
    ([0, 1, 1, 2], [0, 3], [0, 1], -1),  # row 3's tag set (code 2) does not hold the tag
    ([0, 1], [0, 5], [0, 1], -1),  # no row 5
    ([0, 1], [1, 1, 0], [0, 1], 2),  # a row twice: counted once
    ([0, 1], [1, 0], [0, 1], 2),
    ([], [], [], 0),
    ([7], [0], [], -1),
])
def test_posting_rows_and_its_twin(tagset: list[int], rows: list[int], codes: list[int], want: int) -> None:
    """The bulk check's count of a posting's distinct rows, in C and in its pure-Python twin."""
    args = (array("I", tagset), array("I", rows), array("I", codes))
    assert index_check.posting_rows(*args) == want
    native = importlib.import_module("mnemo._speedups")
    assert native.posting_rows(*args) == want


def test_records_that_cannot_be_read_differ_between_the_index_and_the_log() -> None:
    index, log = loaded(), three()
    index.cols["scope"][1] = 99  # no such scope: reading the record is an IntegrityError
    assert index.differences(log) == [f"record {IDS[1]} differs between the index and the log"]


@pytest.mark.parametrize("edit", ["out of order", "a tag left out"])
def test_a_sorted_tag_list_out_of_order_or_incomplete_is_a_difference(edit: str) -> None:
    """Tag-prefix queries bisect the sorted tag list: one out of order, or without a tag some posting
    holds, is found, however right the postings are."""
    index = loaded()
    assert index.sorted_tags == ["a", "b"] and index.posting_differences() == []
    index.sorted_tags = {"out of order": ["b", "a"], "a tag left out": ["a"]}[edit]
    assert index.posting_differences() == ["the sorted tag list is out of order or incomplete"]


def test_postings_of_two_tags_swapped_are_differences() -> None:
    """A forged index whose postings list, for each tag, exactly the records of another tag (same
    counts, every row listed once) would steer every tag query to the wrong records: it is found."""
    index = Index(b"d" * 16)
    v = Version(1, 1, 1, "x", 3, b"h" * 32, 100, 30)
    for i, tag in enumerate(["a", "b"]):
        index.put(IDS[i], "s", (tag,), v._replace(seq=i + 1, slot_off=100 * (i + 1)))
    index = roundtrip(index)
    assert index.posting_differences() == []
    index.postings["a"], index.postings["b"] = index.postings["b"], index.postings["a"]
    assert index.posting_differences() == [
        f"record {IDS[0]} is missing from the index of tag 'a'",
        "the index of tag 'a' lists row 1, which does not hold it",
        f"record {IDS[1]} is missing from the index of tag 'b'",
        "the index of tag 'b' lists row 0, which does not hold it",
    ]
