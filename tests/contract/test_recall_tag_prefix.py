"""`MnemoClient.recall(tag_prefix=...)`: a filter of the hits that applies before the limit and leaves the
corpus, so every score, as it is; with `tags` and `any_tags` as `query` combines them; refused as
`query` refuses a bad prefix. On the file backend (`db_path`), whose storage serves recall; nothing here
is the file's own, so these tests belong on every backend that serves recall."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemo import MnemoClient
from mnemo.errors import InvalidInput


def test_the_prefix_filters_before_the_limit(db_path: Path) -> None:
    with MnemoClient(db_path, "owner", durability="none") as c:
        for i in range(20):
            c.remember("heron " * 10, tags=["memorytool", f"path:/memories/birds/{i:02d}.md"])
        wanted = c.remember("one heron among ducks", tags=["memorytool", "path:/memories/lake/ducks.md"])
        c.remember("heron", tags=["path-like", "lake"])
        (hit,) = c.recall("heron", tag_prefix="path:/memories/lake/", limit=1)
        assert hit.record.id == wanted.id
        assert hit.lines == ((1, "one heron among ducks"),)
        # the corpus is every record: the score is the one an unfiltered recall gives the same record
        unfiltered = {r.record.id: r.score for r in c.recall("heron", limit=100)}
        assert len(unfiltered) == 22
        assert hit.score == unfiltered[wanted.id]
        # a prefix matches any tag of the record, not a whole tag only
        assert [r.record.id for r in c.recall("heron", tag_prefix="path:/memories/lake", limit=100)] == [wanted.id]
        assert len(c.recall("heron", tag_prefix="path", limit=100)) == 22
        assert c.recall("heron", tag_prefix="path:/memories/lakes/") == []


def test_the_prefix_with_tags_and_any_tags(db_path: Path) -> None:
    with MnemoClient(db_path, "owner", durability="none") as c:
        a = c.remember("otter", tags=["memorytool", "path:/memories/a.md", "x"])
        b = c.remember("otter otter", tags=["memorytool", "path:/memories/b.md"])
        c.remember("otter", tags=["path:/memories/c.md"])  # no memorytool tag
        ids = {r.record.id for r in c.recall("otter", tags=["memorytool"], tag_prefix="path:/memories/")}
        assert ids == {a.id, b.id}
        hits = c.recall("otter", any_tags=["x", "y"], tag_prefix="path:/memories/")
        assert [r.record.id for r in hits] == [a.id]
        # the same records query() finds with the same filters
        assert {r.id for r in c.query(tags=["memorytool"], tag_prefix="path:/memories/")} == ids


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        (5, "tag_prefix must be a string or None"),
        ("path:\x00", "tag_prefix 'path:\\x00' contains a NUL character (U+0000), which no tag holds: remove it"),
    ],
)
def test_a_bad_prefix_is_refused_as_query_refuses_it(db_path: Path, prefix: object, message: str) -> None:
    with MnemoClient(db_path, "owner", durability="none") as c:
        c.remember("otter", tags=["a"])
        with pytest.raises(InvalidInput) as info:
            c.recall("otter", tag_prefix=prefix)  # type: ignore[arg-type]
        assert str(info.value) == message
        with pytest.raises(InvalidInput) as again:
            c.query(tag_prefix=prefix)  # type: ignore[arg-type]
        assert str(again.value) == message
