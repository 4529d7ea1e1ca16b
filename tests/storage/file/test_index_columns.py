"""What an index's rows are made of (mnemo/storage/file/index_columns.py): interned values, reference-counted
tag sets, the sorted blob of ids, and the merges of tag-set codes in C and in their pure-Python twins."""

from __future__ import annotations

import importlib
from array import array
from typing import Any

import pytest

from mnemo.storage.file import index_columns
from mnemo.storage.file.index_columns import Interned, SortedIds, TagSets


def test_codes_of_gives_the_codes_that_code_gives_one_by_one() -> None:
    held = Interned(["a", "b"])
    assert held.codes_of(["b", "a", "b"]) == [1, 0, 1] and held.values == ["a", "b"]
    assert held.codes_of(["c", "a", "d", "c"]) == [2, 0, 3, 2]  # new values numbered in first-seen order
    assert held.values == ["a", "b", "c", "d"] and held.codes == {"a": 0, "b": 1, "c": 2, "d": 3}
    assert held.codes_of([]) == []


def test_acquire_many_counts_and_numbers_as_acquire_does_one_by_one() -> None:
    many = [("a",), (), ("b", "c"), ("a",), ("d",), ("b", "c")]
    one, bulk = TagSets(), TagSets()
    for sets in (one, bulk):  # a freed code, taken again by the next new tag set
        sets.release(sets.acquire(("gone",)))
    assert bulk.acquire_many(many) == [one.acquire(tags) for tags in many] == [1, 0, 2, 1, 3, 2]
    assert bulk.values == one.values == [(), ("a",), ("b", "c"), ("d",)]
    assert bulk.refs == one.refs == [1, 2, 2, 1] and bulk.free == one.free == []
    assert bulk.codes == one.codes
    # every tag set known now: counted in bulk
    assert bulk.acquire_many(many) == [one.acquire(tags) for tags in many] == [1, 0, 2, 1, 3, 2]
    assert bulk.refs == one.refs == [2, 4, 4, 2] and bulk.values == one.values and bulk.codes == one.codes


def test_sorted_ids_finds_exactly_its_ids() -> None:
    ids = sorted(f"{i * 7:032x}" for i in range(500))
    packed = SortedIds.pack(ids)
    assert packed is not None and len(packed) == 500
    for row, rec_id in enumerate(ids):
        assert packed.find(rec_id) == row and packed.at(row) == rec_id
    for missing in (f"{1:032x}", f"{3500:032x}", "", "x", f"{7:031x}", "é" * 32):
        assert packed.find(missing) is None
    assert SortedIds.pack(["ab", "abc"]) is None  # widths differ
    assert SortedIds.pack(["ab", "é"]) is None
    assert SortedIds.pack([]) is not None


def _merges() -> list[tuple[str, Any]]:
    return [("twin", index_columns), ("C", importlib.import_module("mnemo._speedups"))]


@pytest.mark.parametrize(("name", "impl"), _merges())
def test_code_uses_counts_adds_to_refs_and_lists_what_is_not_held(name: str, impl: Any) -> None:
    """A replay's merge of a scan's tag-set codes: uses of the first n codes only, added to the index's
    reference counts where it holds the tag set, listed (in code order) where it does not."""
    codes = array("I", [2, 0, 2, 3, 2, 1, 4, 4]).tobytes()
    refs = [10, 20, 30]
    table: list[int | None] = [1, None, 0, None, 2]
    assert impl.code_uses(codes, 6, table, refs) == [(1, 1), (3, 1)]
    assert refs == [13, 21, 30]  # code 4 is used after the first 6 only
    assert impl.code_uses(codes, 0, table, refs) == [] and refs == [13, 21, 30]
    assert impl.code_uses(b"", 0, [], []) == []


@pytest.mark.parametrize(("name", "impl"), _merges())
@pytest.mark.parametrize(("codes", "n", "table"), [
    ([0, 5], 2, [0, None]),  # a code past the table
    ([0, 1], 3, [0, 1]),  # fewer codes than n
    ([0, 1], 2, [0, 3]),  # no index of refs
    ([0, 1], 2, [0, -1]),
    ([0, 1], 2, [0, "1"]),
    ([0, 1], 2, [0, True]),
])
def test_code_uses_refuses_what_it_cannot_merge_and_changes_nothing(
    name: str, impl: Any, codes: list[int], n: int, table: list[Any]
) -> None:
    refs = [5, 6, 7]
    with pytest.raises(ValueError):
        impl.code_uses(array("I", codes).tobytes(), n, table, refs)
    assert refs == [5, 6, 7]


@pytest.mark.parametrize(("name", "impl"), _merges())
def test_remap_codes_maps_the_first_n_codes_through_the_table(name: str, impl: Any) -> None:
    codes = array("I", [2, 0, 2, 1, 3]).tobytes()
    assert array("I", impl.remap_codes(codes, 4, [7, 0, 2**32 - 1, None])) == array("I", [2**32 - 1, 7, 2**32 - 1, 0])
    assert impl.remap_codes(codes, 0, []) == b""
    for n, table in ((5, [7, 0, 1]), (6, [0, 1, 2, 3]), (4, [7, None, 1]), (4, [7, 0, 2**32]), (4, [7, 0, -1]),
                     (4, [7, 0, "1"])):
        with pytest.raises(ValueError):
            impl.remap_codes(codes, n, table)
