"""The `path:` tags listed per scope (mnemo/storage/file/scoped_tags.py): each scope's distinct tags in
order, a tag leaving a scope's list with the last row of that scope holding it, removals of one drop of
many applied in one pass, and a prefix answered from one scope's list alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mnemo.storage.file.scoped_tags import FAMILY, ScopedTags

A, B = 0, 1


def listed(tags: ScopedTags) -> dict[int, list[str]]:
    return {code: list(names) for code, names in tags.sorted.items() if names}


def test_built_counts_each_rows_tag_and_sorts_each_scopes_list() -> None:
    made = ScopedTags.built([(A, "path:/m/b"), (B, "path:/m/a"), (A, "path:/m/a"), (A, "path:/m/b")])
    assert [made.count(A, "path:/m/b"), made.count(B, "path:/m/a"), made.count(A, "path:/m/a")] == [2, 1, 1]
    assert made.more == {(A, "path:/m/b"): 1}  # only a tag more than one row of a scope holds has an entry
    assert made.count(B, "path:/m/b") == 0 and made.count(5, "path:/m/a") == 0
    assert listed(made) == {A: ["path:/m/a", "path:/m/b"], B: ["path:/m/a"]}
    assert listed(ScopedTags.built([])) == {} and FAMILY == "path:"


def test_a_tag_leaves_a_scope_with_its_last_row() -> None:
    tags = ScopedTags()
    tags.add(A, "path:/m/x")
    tags.add(A, "path:/m/x")
    tags.add(B, "path:/m/x")
    tags.add(A, "path:/m/w")
    assert listed(tags) == {A: ["path:/m/w", "path:/m/x"], B: ["path:/m/x"]}
    tags.remove(A, "path:/m/x")
    assert listed(tags) == {A: ["path:/m/w", "path:/m/x"], B: ["path:/m/x"]}
    assert tags.count(A, "path:/m/x") == 1 and tags.more == {}
    tags.remove(A, "path:/m/x")
    assert listed(tags) == {A: ["path:/m/w"], B: ["path:/m/x"]}
    assert tags.count(A, "path:/m/x") == 0
    tags.remove(A, "path:/m/w")
    assert listed(tags) == {B: ["path:/m/x"]} and tags.count(B, "path:/m/x") == 1
    for _ in range(3):
        tags.add(B, "path:/m/x")
    assert tags.count(B, "path:/m/x") == 4 and tags.more == {(B, "path:/m/x"): 3}
    tags.remove(B, "path:/m/x")
    tags.remove(B, "path:/m/x")
    assert tags.count(B, "path:/m/x") == 2 and tags.more == {(B, "path:/m/x"): 1}
    tags.remove(B, "path:/m/x")
    assert tags.count(B, "path:/m/x") == 1 and tags.more == {} and listed(tags) == {B: ["path:/m/x"]}


def test_with_prefix_answers_from_one_scope_in_order() -> None:
    tags = ScopedTags.built([(A, "path:/m/a/1"), (A, "path:/m/a/2"), (A, "path:/m/ab"), (A, "path:/m/b"),
                             (B, "path:/m/a/3")])
    assert list(tags.with_prefix(A, "path:/m/a/")) == ["path:/m/a/1", "path:/m/a/2"]
    assert list(tags.with_prefix(A, "path:/m/a")) == ["path:/m/a/1", "path:/m/a/2", "path:/m/ab"]
    assert list(tags.with_prefix(A, "path:/m/b")) == ["path:/m/b"]
    assert list(tags.with_prefix(A, "path:/m/c")) == []
    assert list(tags.with_prefix(B, "path:")) == ["path:/m/a/3"]
    assert list(tags.with_prefix(7, "path:")) == []  # a scope with none


def test_a_drop_of_many_takes_tags_out_at_its_end_and_keeps_those_added_back() -> None:
    tags = ScopedTags.built([(A, "path:/m/1"), (A, "path:/m/2"), (A, "path:/m/3"), (B, "path:/m/1")])
    tags.add(A, "path:/m/3")  # two rows of A hold it
    tags.begin_many()
    tags.remove(A, "path:/m/1")
    tags.remove(A, "path:/m/2")
    tags.remove(A, "path:/m/3")
    assert listed(tags) == {A: ["path:/m/1", "path:/m/2", "path:/m/3"], B: ["path:/m/1"]}  # not yet
    assert [tags.count(A, t) for t in ("path:/m/1", "path:/m/2", "path:/m/3")] == [0, 0, 1]
    tags.add(A, "path:/m/2")  # back before the end: it stays
    tags.add(A, "path:/m/4")
    tags.end_many()
    assert listed(tags) == {A: ["path:/m/2", "path:/m/3", "path:/m/4"], B: ["path:/m/1"]}
    assert [tags.count(A, t) for t in ("path:/m/1", "path:/m/2", "path:/m/3", "path:/m/4")] == [0, 1, 1, 1]
    assert tags.more == {}
    tags.remove(A, "path:/m/3")  # after the end: at once
    assert listed(tags) == {A: ["path:/m/2", "path:/m/4"], B: ["path:/m/1"]}
    tags.begin_many()
    tags.end_many()  # nothing removed: nothing changes
    assert listed(tags) == {A: ["path:/m/2", "path:/m/4"], B: ["path:/m/1"]}


OPS = st.lists(st.tuples(st.booleans(), st.sampled_from([A, B]), st.sampled_from(["path:/a", "path:/b", "path:/c"]),
                         st.booleans()), max_size=40)


@given(OPS)
def test_the_lists_are_always_those_built_from_the_rows_held(ops: list[tuple[bool, int, str, bool]]) -> None:
    tags = ScopedTags()
    held: list[tuple[int, str]] = []
    many = False
    for adding, code, tag, toggle in ops:
        if toggle:
            if many:
                tags.end_many()
            else:
                tags.begin_many()
            many = not many
        if adding:
            tags.add(code, tag)
            held.append((code, tag))
        elif (code, tag) in held:
            tags.remove(code, tag)
            held.remove((code, tag))
    if many:
        tags.end_many()
    fresh = ScopedTags.built(held)
    assert tags.more == fresh.more and listed(tags) == fresh.sorted
    for code in (A, B):
        for tag in ("path:/a", "path:/b", "path:/c"):
            assert tags.count(code, tag) == held.count((code, tag))
