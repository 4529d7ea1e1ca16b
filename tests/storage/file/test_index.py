"""The columnar index against a plain dict model: puts, new versions, retags, forgets, snapshot round
trips, tag lookups; and what a snapshot that is inconsistent with itself does."""

from __future__ import annotations

import hashlib
import re
import struct
import sys
from array import array
from pathlib import Path
from typing import Any

import msgpack
import pytest
from helpers.budget import examples
from helpers.indexes import IDS, roundtrip, state_of, three
from helpers.paths import ROOT
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mnemo import IntegrityError, MnemoClient, NotFound
from mnemo.chain.codec import Entry
from mnemo.storage.batch import Staged
from mnemo.storage.file import index as index_mod
from mnemo.storage.file import snapshot as snap
from mnemo.storage.file.index import Index, Rec, Version
from mnemo.storage.file.index_columns import SortedIds
from mnemo.storage.types import Query

TAGS = ["a", "ab", "abc", "b", "big", "c", "path:/memories/a", "path:/memories/a/b", "path:/memories/b"]
SCOPES = ["agent:x", "agent:y", "shared"]
AGENTS = ["x", "y"]


class IndexMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Short postings are rewritten at once and long ones cleaned lazily: make "long" reachable.
        self._small = index_mod.SMALL_POSTING, index_mod.FEW_TAGS_GONE, index_mod.FEW_TAGS_NEW
        index_mod.SMALL_POSTING = 2
        index_mod.FEW_TAGS_GONE = 1  # a drop_many that ends two tags or more rebuilds the sorted list
        index_mod.FEW_TAGS_NEW = 1  # a put_new of two new tags or more sorts the sorted list again
        self.index = Index(b"d" * 16)
        self.model: dict[str, Rec] = {}
        self.forgotten: set[str] = set()
        self.seq = 0

    def teardown(self) -> None:
        index_mod.SMALL_POSTING, index_mod.FEW_TAGS_GONE, index_mod.FEW_TAGS_NEW = self._small

    def _version(self, ver: int, agent: str, size: int) -> Version:
        self.seq += 1
        return Version(ver, self.seq, 1_000 + self.seq, agent, size,
                       hashlib.sha256(str(self.seq).encode()).digest(), 100 * self.seq, 20 + size)

    @rule(rec_id=st.sampled_from(IDS), scope=st.sampled_from(SCOPES), agent=st.sampled_from(AGENTS),
          tags=st.lists(st.sampled_from(TAGS), unique=True, max_size=3), size=st.integers(0, 10**6))
    def put(self, rec_id: str, scope: str, agent: str, tags: list[str], size: int) -> None:
        prev = self.model.get(rec_id)
        ver = 1 if prev is None else prev.latest.ver + 1
        assert self.index.next_ver(rec_id) == ver
        version = self._version(ver, agent, size)
        tag_tuple = tuple(sorted(tags))
        self.index.put(rec_id, scope, tag_tuple, version)
        versions = (version,) if prev is None else prev.versions + (version,)
        self.model[rec_id] = Rec(rec_id, scope, tag_tuple, versions)

    @rule(data=st.data())
    def put_new(self, data: st.DataObject) -> None:
        # a transaction's new records: staged entries taken by new_rows, then put_new (or put_one_new); a
        # put of a record a row holds, after them, ends the run
        fresh = [rec_id for rec_id in IDS if rec_id not in self.model]
        held = sorted(self.model)
        ids = data.draw(st.lists(st.sampled_from(fresh), unique=True, max_size=4)) if fresh else []
        offset = data.draw(st.integers(0, 10**9))
        entry_pos = offset + 32
        staged: list[Staged] = []
        slots: list[tuple[int, int]] = []
        for rec_id in ids:
            scope, agent = data.draw(st.sampled_from(SCOPES)), data.draw(st.sampled_from(AGENTS))
            tags = tuple(sorted(data.draw(st.lists(st.sampled_from(TAGS), unique=True, max_size=3))))
            raw = b"e" * data.draw(st.integers(1, 60))
            v = self._version(1, agent, data.draw(st.integers(0, 10**6)))._replace(entry_off=entry_pos,
                                                                                    entry_len=len(raw))
            body = {"digest": b"d" * 32, "id": rec_id, "scope": scope, "size": v.size, "ver": 1}
            entry = Entry(v.seq, v.ts_ns, b"p" * 32, "put", agent, body, raw, v.hash)
            staged.append(Staged(entry, b"payload", tags, data.draw(st.sampled_from([None, "some text"]))))
            slots.append((v.slot_off - offset, v.slot_len))
            entry_pos += len(raw) + 8
            self.model[rec_id] = Rec(rec_id, scope, tags, (v,))
        if held and data.draw(st.booleans()):
            again = dict(staged[-1].entry.body if staged else {"digest": b"d" * 32, "scope": "shared", "size": 1})
            again.update(id=data.draw(st.sampled_from(held)), ver=1)
            staged.append(Staged(Entry(0, 0, b"p" * 32, "put", "x", again, b"e", b"h" * 32), b"p", (), None))
            slots.append((0, 10))
        run = self.index.new_rows(staged, slots, 0, offset, offset + 32)
        assert (run.stop, run.entry_end, run.ids) == (len(ids), entry_pos, ids)
        if len(ids) == 1 and data.draw(st.booleans()):
            s, v = staged[0], self.model[ids[0]].latest
            self.index.put_one_new((ids[0], s.entry.body["scope"], s.tags, v.agent, v.size, v.seq, v.ts_ns, v.hash,
                                    v.slot_off, v.slot_len, v.entry_off, v.entry_len, s.text))
        else:
            self.index.put_new(run)

    @rule(rec_id=st.sampled_from(IDS))
    def drop(self, rec_id: str) -> None:
        dropped = self.index.drop(rec_id)
        assert dropped == self.model.pop(rec_id, None)
        self.forgotten.add(rec_id)

    @rule(rec_ids=st.lists(st.sampled_from(IDS), max_size=6))
    def drop_many(self, rec_ids: list[str]) -> None:
        dropped = self.index.drop_many(rec_ids)
        want = [self.model.pop(rec_id) for rec_id in rec_ids if rec_id in self.model]
        assert dropped == want
        self.forgotten.update(rec_ids)

    @rule()
    def snapshot_and_reload(self) -> None:
        self.index = roundtrip(self.index)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def prefix_and_combined_queries(self, data: st.DataObject) -> None:
        want = tuple(data.draw(st.lists(st.sampled_from(TAGS), unique=True, max_size=2)))
        some = tuple(data.draw(st.lists(st.sampled_from(TAGS), unique=True, max_size=2)))
        prefix = data.draw(st.sampled_from([None, "a", "ab", "b", "z"]))
        starts = tuple(data.draw(st.lists(st.sampled_from(["a", "ab", "b", "z"]), unique=True, max_size=2)))
        rows = self.index.candidate_rows(Query(want, some, prefix, any_prefixes=starts))
        expected = {
            r.id for r in self.model.values()
            if set(want) <= set(r.tags)
            and (not (some or starts) or set(some) & set(r.tags) or any(t.startswith(starts) for t in r.tags))
            and (prefix is None or any(t.startswith(prefix) for t in r.tags))
        }
        if rows is None:
            assert not want and not some and not starts and prefix is None
        else:
            got = [self.index.id_at(r) for r in rows]
            assert len(got) == len(set(got)), "a row came twice"
            assert set(got) == expected

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def queries_in_one_scope(self, data: st.DataObject) -> None:
        # a `path:` prefix in an exact scope is looked up among that scope's tags (scoped_tags.py)
        want = tuple(data.draw(st.lists(st.sampled_from(TAGS), unique=True, max_size=1)))
        prefix = data.draw(st.sampled_from(["path:", "path:/memories/", "path:/memories/a", "path:/memories/a/",
                                            "path:/nowhere", "a"]))
        scope = data.draw(st.sampled_from([*SCOPES, "unknown"]))
        rows = self.index.candidate_rows(Query(want, tag_prefix=prefix), scope)
        assert rows is not None
        got = [rec_id for rec_id, _ in self.index.rows_in_scopes(rows, scope.__eq__)]
        assert len(got) == len(set(got)), "a row came twice"
        assert set(got) == {
            r.id for r in self.model.values()
            if r.scope == scope and set(want) <= set(r.tags) and any(t.startswith(prefix) for t in r.tags)
        }

    @invariant()
    def same_records(self) -> None:
        index = self.index
        assert len(index) == len(self.model)
        assert set(index.live_ids()) == set(self.model)
        assert dict(index.records) == self.model
        for rec_id in IDS:
            assert index.get_rec(rec_id) == self.model.get(rec_id)
            assert index.has(rec_id) == (rec_id in self.model)
        assert index.forgotten == self.forgotten
        assert index.counts() == (
            len(self.model), sum(len(r.versions) for r in self.model.values()),
            len({t for r in self.model.values() for t in r.tags}),
        )
        offsets = {v.slot_off for r in self.model.values() for v in r.versions}
        assert index.live_slot_offsets() == offsets

    @invariant()
    def same_postings(self) -> None:
        for tag in TAGS:
            rows = list(self.index.rows_with_tag(tag))
            assert sorted(self.index.id_at(r) or "" for r in rows) == sorted(
                r.id for r in self.model.values() if tag in r.tags
            )
        assert self.index.posting_differences() == []
        live_tags = {t for r in self.model.values() for t in r.tags}
        live = list(self.index.live_rows())
        for rows in (set(), set(live), set(live[::2]), set(range(len(self.index.cols["ver"]) + 1))):
            assert self.index.live_rows_outside(rows) == sorted(set(live) - rows)
        assert live_tags <= set(self.index.sorted_tags)
        assert self.index.sorted_tags == sorted(self.index.postings)  # a tag no record holds is gone


TestIndexModel = IndexMachine.TestCase
# the default run half (helpers.budget)
TestIndexModel.settings = settings(max_examples=examples(150), stateful_step_count=40, deadline=None)


def test_the_path_tags_per_scope_follow_a_record_the_index_moves_to_another_scope() -> None:
    # The client never moves a record; the index takes a new version in another scope all the same, and
    # the `path:` tags it lists per scope follow (scoped_tags.py), a tag the record keeps included.
    index = Index(b"d" * 16)
    index.put(IDS[0], "agent:x", ("path:/m/a", "path:/m/k"), Version(1, 1, 1, "x", 3, b"h" * 32, 100, 30))
    query = Query(tag_prefix="path:/m/")
    assert sorted(index.candidate_rows(query, "agent:x") or ()) == [0]  # the per-scope list, built
    index.put(IDS[0], "agent:y", ("path:/m/k",), Version(2, 2, 2, "x", 3, b"i" * 32, 200, 30))
    assert list(index.candidate_rows(query, "agent:x") or ()) == []
    assert sorted(index.candidate_rows(query, "agent:y") or ()) == [0]
    assert index.posting_differences() == []
    index.put(IDS[0], "agent:y", ("path:/m/k",), Version(3, 3, 3, "x", 3, b"j" * 32, 300, 30))  # same scope
    assert sorted(index.candidate_rows(query, "agent:y") or ()) == [0] and index.posting_differences() == []


def test_a_forgotten_records_tags_leave_memory_and_the_snapshot() -> None:
    index = Index(b"d" * 16)
    v = Version(1, 1, 1, "x", 3, b"h" * 32, 100, 30)
    index.put(IDS[0], "agent:x", ("keep",), v)
    index.put(IDS[1], "agent:x", ("secret-tag",), v._replace(seq=2, slot_off=200))
    index.drop(IDS[1])
    assert "secret-tag" not in index.postings and "secret-tag" not in index.sorted_tags
    assert all(t is None or "secret-tag" not in t for t in index.tagsets.values)
    assert b"secret-tag" not in msgpack.packb(index.to_state(), use_bin_type=True)


def test_a_forgotten_records_tags_leave_memory_after_an_open_that_scanned_the_log(tmp_path: Path) -> None:
    """An open without the snapshot takes a run of new records in bulk (extend_new), counting each tag
    set's uses there: forgetting a record whose tags no other record holds then frees its tag set too,
    and a shared tag set is counted once per record."""
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        kept = [c.remember(f"k{i}", tags=["keep"]).id for i in range(3)]
        secret = c.remember("s", tags=["secret-tag"]).id
    Path(str(db) + ".snap").unlink()
    with MnemoClient(db, "x", durability="none") as c:
        index = c._store.index
        sets = index.tagsets
        assert sets.refs[sets.codes[("keep",)]] == 3 and sets.refs[sets.codes[("secret-tag",)]] == 1
        c.forget(secret)
        assert all(t is None or "secret-tag" not in t for t in sets.values)
        assert "secret-tag" not in index.postings
        c.forget(kept[0])
        assert sets.refs[sets.codes[("keep",)]] == 2
        assert index.counts() == (2, 2, 1)


def _forge(db: Path, edit: Any) -> None:
    body = snap.read_snapshot(str(db) + ".snap")
    assert body is not None
    edit(body["index"])
    snap.write_snapshot(str(db) + ".snap", body)  # re-sealed: its checksum holds


@pytest.mark.parametrize("column", ["scope", "agent", "tagset"])
def test_a_forged_snapshot_with_impossible_codes_fails_cleanly(tmp_path: Path, column: str) -> None:
    """Codes are range-checked when used: a forged, re-sealed snapshot gives IntegrityError (never an
    IndexError) on reads, and verify reports it."""
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        rec_id = c.remember("hello", tags=["t"]).id

    def edit(state: dict[str, Any]) -> None:
        state["columns"][column] = struct.pack("=I", 99)

    _forge(db, edit)
    with MnemoClient(db, "x", durability="none", readonly=True) as c:
        with pytest.raises(IntegrityError, match="index snapshot is inconsistent"):
            c.get(rec_id)
        report = c.verify()
        assert not report.ok and {p.kind for p in report.problems} == {"index"}
    with MnemoClient(db, "x", durability="none") as c, pytest.raises(IntegrityError):
        c.query(tags=["t"])
    Path(str(db) + ".snap").unlink()
    with MnemoClient(db, "x", durability="none") as c:  # without the snapshot, the log is enough
        assert c.get(rec_id).content == "hello"


def _documented_snapshot_keys() -> set[str]:
    """The keys of the snapshot's index, as the table of docs/FORMAT.md §DB.snap lists them."""
    text = (ROOT / "docs" / "FORMAT.md").read_text(encoding="utf-8")
    table = text.split("### `DB.snap`", 1)[1].split("| key | value |", 1)[1].split("\n\n", 1)[0]
    keys = set()
    for row in table.splitlines()[2:]:
        keys.update(re.findall(r"`(\w+)`", row.split(" | ")[0]))
    return keys


@pytest.mark.parametrize("edit", ["layout 3", "layout 5", "the other byte order"])
def test_the_snapshot_index_is_layout_4_in_this_byte_order_and_another_is_discarded(
    tmp_path: Path, edit: str
) -> None:
    """docs/FORMAT.md §DB.snap: the index holds `layout` 4 and `byteorder` the writing machine's, with
    exactly the documented fields; a snapshot of another layout or byte order is not used (here one whose
    columns would fail every read if it were), the log is replayed instead, and its replacement is
    written as documented."""
    import sys

    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        rec_id = c.remember("hello", tags=["t"]).id
    body = snap.read_snapshot(str(db) + ".snap")
    assert body is not None
    assert (body["index"]["layout"], body["index"]["byteorder"]) == (4, sys.byteorder)
    # (`vectors` is there only once a client with an embedder made them: tests/contract/test_semantic.py)
    assert set(body["index"]) == _documented_snapshot_keys() - {"vectors"}

    def forge(state: dict[str, Any]) -> None:
        state["columns"]["scope"] = struct.pack("=I", 99)  # used, this would fail every read
        if edit == "the other byte order":
            state["byteorder"] = "big" if sys.byteorder == "little" else "little"
        else:
            state["layout"] = int(edit.split()[1])

    _forge(db, forge)
    with MnemoClient(db, "x", durability="none") as c:
        assert c.get(rec_id).content == "hello"
        assert [r.id for r in c.query(tags=["t"])] == [rec_id]
        c.remember("more")
    again = snap.read_snapshot(str(db) + ".snap")
    assert again is not None and (again["index"]["layout"], again["index"]["byteorder"]) == (4, sys.byteorder)


def test_a_forged_posting_past_the_last_row_fails_cleanly(tmp_path: Path) -> None:
    """A re-sealed snapshot whose posting lists a row the columns do not have: a query through it is an
    IntegrityError naming the row where it is known (row -1 where it is not), never an IndexError, and
    verify names the posting."""
    db = tmp_path / "f.db"
    with MnemoClient(db, "x", durability="none") as c:
        for i in range(4):
            c.remember(f"r{i}", tags=["t"], scope="s:a" if i % 2 else "s:b")

    def edit(state: dict[str, Any]) -> None:
        state["posting_rows"] = state["posting_rows"][:-4] + struct.pack("=I", 99)

    _forge(db, edit)
    advice = "delete it and reopen, or run verify"
    with MnemoClient(db, "x", durability="none", readonly=True) as c:
        with pytest.raises(IntegrityError) as info:
            c.query(tags=["t"])
        assert str(info.value) == f"the index snapshot is inconsistent (row 99); {advice}"
        with pytest.raises(IntegrityError) as info:
            c.query(tags=["t"], scope="s:a")
        assert str(info.value) == f"the index snapshot is inconsistent (row -1); {advice}"
        assert ("index", "the index of tag 't' lists row 99, which does not hold it: the index snapshot was "
                "altered") in [(p.kind, p.message) for p in c.verify().problems]


def test_a_snapshot_reloads_ids_that_are_not_one_width(tmp_path: Path) -> None:
    index = Index(b"d" * 16)
    v = Version(1, 1, 1, "x", 3, b"h" * 32, 100, 30)
    for i, rec_id in enumerate(["b", "a-longer-id", "ü"]):
        index.put(rec_id, "s", ("t",), v._replace(seq=i + 1, slot_off=100 * (i + 1)))
    again = roundtrip(index)
    assert dict(again.records) == dict(index.records)
    assert again.base.n == 0 and len(again.rows) == 3


def test_ids_of_one_character_pack_into_a_blob_of_width_1(tmp_path: Path) -> None:
    """Ids all of one ASCII character are the narrowest blob there is: width 1, each id found at its
    row; a width of 0 holds no ids, and a blob with width 0 (or below) is refused, not read as empty."""
    index = Index(b"d" * 16)
    v = Version(1, 1, 1, "x", 3, b"h" * 32, 100, 30)
    for i, rec_id in enumerate(["c", "a", "b"]):
        index.put(rec_id, "s", ("t",), v._replace(seq=i + 1, slot_off=100 * (i + 1)))
    state = index.to_state()
    assert (state["id_width"], bytes(state["id_blob"])) == (1, b"abc")
    again = roundtrip(index)
    assert dict(again.records) == dict(index.records)
    assert [again.base.find(i) for i in ("a", "b", "c", "d", "ab")] == [0, 1, 2, None, None]
    assert len(SortedIds(b"", 0)) == 0
    for width in (0, -1):
        with pytest.raises(ValueError, match="^sorted ids need a positive width$"):
            SortedIds(b"abc", width)


@pytest.mark.parametrize(("edit", "message"), [
    ("a byte more", "sorted ids blob is not a whole number of ids"),
    ("a byte less", "sorted ids blob is not a whole number of ids"),
    ("a negative width", "sorted ids need a positive width"),
])
def test_a_snapshot_whose_id_blob_is_not_whole_ids_is_refused(edit: str, message: str) -> None:
    """The ids are one blob of fixed-width ids: a blob with a piece of an id at its end (which would
    shift every look-up from the last id on) or a width below 1 is refused, whatever the row count says."""
    state = state_of(three())
    width = state["id_width"]
    assert width == len(IDS[0]) and len(state["id_blob"]) == 3 * width
    assert Index.from_state(b"d" * 16, state).base.find(IDS[2]) == 2
    if edit == "a byte more":
        state["id_blob"] += b"0"
    elif edit == "a byte less":
        state["id_blob"] = state["id_blob"][:-1]
    else:
        state["id_width"] = -width
    with pytest.raises(ValueError, match=f"^{message}$"):
        Index.from_state(b"d" * 16, state)


@pytest.mark.parametrize("edit", ["a tag past the lengths", "no tag sets", "a first set that is not empty"])
def test_a_snapshot_whose_tag_sets_are_malformed_is_refused(edit: str) -> None:
    """The tag sets are one flat list of tags cut by their lengths, the first set the empty one (code 0,
    a record without tags): tags the lengths do not cover, no sets at all, or a first set with tags in
    it are refused before any set is built."""
    state = state_of(three())
    lens = array("I", state["tagset_lens"])
    assert lens[0] == 0 and sum(lens) == len(state["tagset_tags"])
    if edit == "a tag past the lengths":
        state["tagset_tags"] = [*state["tagset_tags"], "zz"]
    elif edit == "no tag sets":
        state["tagset_tags"], state["tagset_lens"], state["tagset_refs"] = [], b"", b""
    else:
        lens[0] = 1
        state["tagset_tags"], state["tagset_lens"] = ["zz", *state["tagset_tags"]], lens.tobytes()
    with pytest.raises(TypeError, match="^snapshot tag sets are malformed$"):
        Index.from_state(b"d" * 16, state)


def test_a_long_posting_sheds_its_stale_rows() -> None:
    """Forgetting most of a common tag's records leaves its posting at most twice the live rows."""
    index = Index(b"d" * 16)
    ids = [f"{i:032x}" for i in range(1, 1001)]
    for i, rec_id in enumerate(ids):
        index.put(rec_id, "s", ("big", f"p{i}"), Version(1, i + 1, i, "x", 1, b"h" * 32, 100 * (i + 1), 30))
    for rec_id in ids[:900]:
        index.drop(rec_id)
    assert sorted(index.id_at(r) or "" for r in index.rows_with_tag("big")) == ids[900:]
    assert len(index.postings["big"]) <= 2 * 100
    assert all(f"p{i}" not in index.postings for i in range(900))  # short postings go at once
    for rec_id in ids[900:]:
        index.drop(rec_id)
    assert "big" not in index.postings and "big" not in index.sorted_tags and not index.stale_tags


def test_a_replayed_index_is_built_in_the_compact_form(tmp_path: Path) -> None:
    """An open without the snapshot builds the index in the form a snapshot loads: the ids of records
    made in id order extend the sorted id blob, with no dict entry or string per record; an update and
    a forget change those rows in place. The snapshot is written when the writer closes, not by the open."""
    db = tmp_path / "r.db"
    with MnemoClient(db, "a", durability="none") as c:
        ids = [c.remember(f"m{i}", tags=[f"t{i % 3}"]).id for i in range(40)]
        c.update(ids[5], content="m5 again")
        c.forget([ids[7]])
    snap = Path(str(db) + ".snap")
    snap.unlink()
    with MnemoClient(db, "a", durability="none") as c:
        index = c._store.index
        assert not c.stats()["snapshot_used"] and not snap.exists()
        assert index.base.n == 40 and index.base_dead == {7} and not index.extra and not index.rows
        assert index.base.blob == "".join(ids).encode()
        assert [r.id for r in c.query(tags=["t2"])] == [i for n, i in enumerate(ids) if n % 3 == 2]
        assert [r.content for r in c.history(ids[5])] == ["m5", "m5 again"]
        with pytest.raises(NotFound):
            c.get(ids[7])
        assert c.verify().ok
        new = c.remember("after", tags=["t2"]).id  # a new row after the base
        assert c.query(tags=["t2"])[-1].id == new
    assert snap.exists()
    with MnemoClient(db, "a", durability="none") as c:
        assert c.stats()["snapshot_used"] and len(c.list_records()) == 40


def test_an_index_that_names_a_tag_set_it_does_not_hold_cannot_be_saved() -> None:
    index = three()
    index.cols["tagset"][1] = 999
    with pytest.raises(IntegrityError, match=r"^the index snapshot is inconsistent \(row -1\); delete it and"):
        index.to_state()


@pytest.mark.parametrize("edit", ["a tag set count more", "a posting of no rows"])
def test_a_snapshot_whose_counts_disagree_with_its_lists_is_refused(edit: str) -> None:
    state = state_of(three())
    assert Index.from_state(b"d" * 16, state).posting_differences() == []
    if edit == "a tag set count more":  # the counts still add up to the rows, but there is one too many
        state["tagset_refs"] += struct.pack("=I", 0)
        message = "snapshot tag sets and their counts disagree"
    else:  # the tags and their lengths still add up, but one tag lists nothing
        state["posting_tags"] = [*state["posting_tags"], "zz"]
        state["posting_lens"] += struct.pack("=I", 0)
        message = "snapshot postings are malformed"
    with pytest.raises(ValueError, match=f"^{message}$"):
        Index.from_state(b"d" * 16, state)


def test_a_forget_from_a_long_posting_does_not_rewrite_it() -> None:
    """Removing a row from a posting of thousands at every forget would cost O(n) each: the posting keeps
    its stale rows (reads filter them) until they are half of it, then is rewritten once."""
    index = Index(b"d" * 16)
    ids = [f"{i:032x}" for i in range(1, 201)]
    for i, rec_id in enumerate(ids):
        index.put(rec_id, "s", ("big",), Version(1, i + 1, i, "x", 1, b"h" * 32, 100 * (i + 1), 30))
    for n, rec_id in enumerate(ids[:100], 1):
        index.drop(rec_id)
        assert len(index.postings["big"]) == 200 and index.stale_tags["big"] == n  # up to half: kept as is
    index.drop(ids[100])
    assert len(index.postings["big"]) == 99 and "big" not in index.stale_tags  # past half: rewritten
    assert sorted(index.id_at(r) or "" for r in index.rows_with_tag("big")) == ids[101:]


# -- the snapshot's rows in id order ----------------------------------------------------------------------


@pytest.mark.parametrize(("loaded", "added"), [
    ([], ["b", "a", "c"]),  # added out of order: each id is below the one after the next
    (["b"], ["a", "c"]),  # added in order, but the first sorts before the loaded ones
    (["b"], ["c", "a"]),  # added out of order, and one sorts before the loaded ones
    (["b", "d"], ["c"]),  # one between the loaded ones
])
def test_a_snapshot_lists_its_ids_in_order_however_they_were_added(loaded: list[str], added: list[str]) -> None:
    """Look-ups in a loaded snapshot are a binary search over its ids: they must be sorted, whether the
    records came from an earlier snapshot or since, and in whatever order they were added."""
    index = Index(b"d" * 16)
    v = Version(1, 1, 1, "x", 3, b"h" * 32, 100, 30)
    seq = 0
    for rec_id in loaded:
        seq += 1
        index.put(rec_id, "s", (rec_id,), v._replace(seq=seq, slot_off=100 * seq))
    index = roundtrip(index)
    for rec_id in added:
        seq += 1
        index.put(rec_id, "s", (rec_id,), v._replace(seq=seq, slot_off=100 * seq))
    state = index.to_state()
    assert bytes(state["id_blob"]) == "".join(sorted(loaded + added)).encode()
    again = roundtrip(index)
    for rec_id in loaded + added:
        rec = again.get_rec(rec_id)
        assert rec is not None and rec.tags == (rec_id,)


def test_the_snapshot_holds_each_tag_set_once_and_the_empty_one_first() -> None:
    index = Index(b"d" * 16)
    v = Version(1, 1, 1, "x", 3, b"h" * 32, 100, 30)
    for i, tags in enumerate([(), ("a",), (), ("a",), ("b",)]):
        index.put(IDS[i], "s", tags, v._replace(seq=i + 1, slot_off=100 * (i + 1)))
    state = index.to_state()
    lens = array("I", state["tagset_lens"])
    sets, pos = [], 0
    for k in lens:
        sets.append(tuple(state["tagset_tags"][pos:pos + k]))
        pos += k
    assert sets[0] == () and len(set(sets)) == len(sets) == 3
    assert array("I", state["tagset_refs"]).tolist() == [2, 2, 1]
    assert [sets[c] for c in array("I", state["columns"]["tagset"])] == [(), ("a",), (), ("a",), ("b",)]


# -- a snapshot's state that is not whole is refused with its reason ---------------------------------------


def _state(ids: list[str] | None = None) -> dict[str, Any]:
    index = three()
    if ids is not None:
        index = Index(b"d" * 16)
        for i, rec_id in enumerate(ids):
            index.put(rec_id, "s", ("a",), Version(1, i + 1, i, "x", 1, b"h" * 32, 100 * (i + 1), 30))
    return state_of(index)


def _set(state: dict[str, Any], key: str, value: Any) -> None:
    state[key] = value


@pytest.mark.parametrize(("ids", "edit", "message"), [
    (None, lambda s: _set(s, "id_blob", s["id_blob"][: 2 * s["id_width"]]), "snapshot ids do not match its rows"),
    (None, lambda s: _set(s, "id_blob", b"\xff" + s["id_blob"][1:]), "snapshot ids do not match its rows"),
    (["b", "a-longer-id", "ü"], lambda s: _set(s, "ids", s["ids"][:2]), "snapshot ids do not match its rows"),
    (["b", "a-longer-id", "ü"], lambda s: _set(s, "ids", ["b", "b", "ü"]), "snapshot ids repeat"),
    (None, lambda s: s["columns"].update(seq=s["columns"]["seq"][:-8]), "snapshot column seq has 2 rows, expected 3"),
    (None, lambda s: _set(s, "hashes", s["hashes"][:-1]), "snapshot hashes have the wrong length"),
    (None, lambda s: _set(s, "scopes", [b"s"]), "snapshot scopes or agents are not strings"),
    (None, lambda s: _set(s, "agents", ["x", 5]), "snapshot scopes or agents are not strings"),
    (None, lambda s: _set(s, "older", [[3, []]]), "snapshot history names an unknown row"),
    (None, lambda s: _set(s, "older", [[-1, []]]), "snapshot history names an unknown row"),
    (None, lambda s: _set(s, "posting_tags", ["a", "a"]), "snapshot posting tags repeat"),
    (None, lambda s: _set(s, "byteorder", "big" if sys.byteorder == "little" else "little"),
     "snapshot of another layout or byte order"),
])
def test_a_snapshot_state_that_is_not_whole_is_refused_with_its_reason(
    ids: list[str] | None, edit: Any, message: str
) -> None:
    state = _state(ids)
    assert Index.from_state(b"d" * 16, state).posting_differences() == []
    edit(state)
    with pytest.raises((ValueError, TypeError, IndexError)) as info:
        Index.from_state(b"d" * 16, state)
    assert str(info.value) == message

