"""client.verify() checks the file and compares the index the client serves with what the same pass over
the file says it must hold: a snapshot altered in any field and re-sealed is reported, naming the record;
a sound one, however the database was written, is not. A re-sealed snapshot that hides a record, adds a
grant or carries a tree state that is not its index's gives no power and fails verify."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.snapshots import replace, tamper

from mnemo import MnemoClient
from mnemo.audit import verify_db_and_index
from mnemo.storage.file import index_diff
from mnemo.storage.file import snapshot as snap
from mnemo.storage.file import store as engine
from mnemo.storage.file.index import Index
from mnemo.storage.file.verify import verify_db_and_scanned_index


def build(db: Path) -> dict[str, str]:
    """A database written in every way a client writes: updates, forgets (and an id used again after
    its forget), grants and revokes, binary and non-ASCII content, a transaction. Returns some ids."""
    with MnemoClient(db, "owner", durability="none") as c:
        ids = {f"r{i}": c.remember(f"memory {i} ✓" * (i % 3 + 1), tags=[f"t{i % 3}", "all"],
                                   metadata={"i": i}).id for i in range(12)}
        for i in range(4):
            c.update(ids[f"r{i}"], content=f"updated {i}", tags=["u"], expected_version=1)
        c.update(ids["r0"], metadata={"v": 3})
        with c.transaction():
            for i in range(5):
                ids[f"b{i}"] = c.remember(b"\x00\xffbinary" * i, tags=["bin"], scope="team:x").id
        c.grant("bob", "team:*", ["read", "write"])
        c.revoke("bob", "team:*", ["write"])
        c.forget([ids["r5"], ids["r6"]], reason="asked")
        ids["last"] = c.remember("the last one").id
    return ids


def verify_problems(db: Path) -> list[tuple[str, str]]:
    with MnemoClient(db, "owner", durability="none", readonly=True) as c:
        assert c.stats()["snapshot_used"]
        report = c.verify()
    assert report.ok == (not report.problems)
    return [(p.kind, p.message) for p in report.problems]


def test_a_sound_index_matches_in_bulk(db_path: Path) -> None:
    build(db_path)
    for use_snapshot in (True, False):
        with MnemoClient(db_path, "owner", durability="none", readonly=True) as c:
            if not use_snapshot:
                c._store.index = engine.FileStore(str(db_path), "owner", readonly=True, use_snapshot=False).index
            report, expected = verify_db_and_index(db_path)
            assert report.ok
            index = c._store.index
            assert index_diff._same_records(index, expected)  # the bulk comparison vouches for it ...
            assert index_diff._record_differences(index, expected) == []  # ... as record by record does
            assert c.verify().ok


def test_a_sound_index_after_more_writes_and_a_reopen(db_path: Path) -> None:
    ids = build(db_path)
    with MnemoClient(db_path, "owner", durability="none") as c:
        assert c._store.snapshot_used
        c.update(ids["b1"], content="changed after the snapshot")
        c.forget([ids["r1"]])
        c.remember("new")
        assert c.verify().ok  # a snapshot plus the frames after it
        c.compact()
        assert c.verify().ok  # a reloaded, compacted log


@pytest.mark.parametrize("change", [
    {"tags": ("all", "t0", "injected")},
    {"scope": "agent:mallory"},
    {"slot_off": 32},
    {"agent": "mallory"},
    {"ts_ns": 1},
    {"size": 12345},
    {"hash": b"\x01" * 32},
    {"seq": 2},
])
def test_an_altered_record_is_named(db_path: Path, change: dict[str, Any]) -> None:
    ids = build(db_path)
    # a record of one version, of three, and one from a transaction
    assert_each_named(db_path, [ids[name] for name in ("r2", "r0", "b3")], change)


def assert_each_named(
    db_path: Path, rec_ids: list[str], change: dict[str, Any], check: Callable[[], None] = lambda: None
) -> None:
    """Each record altered in turn (`check` run on the altered snapshot) is named by verify, and only
    it; the sound snapshot put back passes."""
    sound = Path(str(db_path) + ".snap").read_bytes()
    for rec_id in rec_ids:
        tamper(db_path, replace(rec_id, **change))
        check()
        problems = verify_problems(db_path)
        assert problems == [("index", f"record {rec_id} differs between the index and the log: the index "
                                      "snapshot was altered")]
        Path(str(db_path) + ".snap").write_bytes(sound)
        assert verify_problems(db_path) == []


def test_an_altered_older_version_is_named(db_path: Path) -> None:
    ids = build(db_path)

    def edit(index: Index) -> None:
        rec = index.get_rec(ids["r0"])
        assert rec is not None and len(rec.versions) == 3
        index.drop(ids["r0"])
        index.forgotten.discard(ids["r0"])
        index.put(ids["r0"], rec.scope, rec.tags, rec.versions[0]._replace(size=99))
        for v in rec.versions[1:]:
            index.put(ids["r0"], rec.scope, rec.tags, v)

    tamper(db_path, edit)
    assert verify_problems(db_path) == [("index", f"record {ids['r0']} differs between the index and the log: the "
                                                   "index snapshot was altered")]


def test_records_added_hidden_or_forgotten_in_the_snapshot(db_path: Path) -> None:
    ids = build(db_path)

    def add(index: Index) -> None:
        rec = index.get_rec(ids["r7"])
        assert rec is not None
        index.put("0" * len(ids["r7"]), rec.scope, rec.tags, rec.versions[-1])

    tamper(db_path, add)
    assert [m for _k, m in verify_problems(db_path)] == [
        f"record {'0' * len(ids['r7'])} is only in the index: the index snapshot was altered"]
    tamper(db_path, lambda index: (index.drop("0" * len(ids["r7"])), index.forgotten.discard("0" * len(ids["r7"]))))
    assert verify_problems(db_path) == []
    tamper(db_path, lambda index: index.forgotten.add(ids["r8"]))  # compaction would drop its payload
    assert [m for _k, m in verify_problems(db_path)] == [
        "the forgotten records in the index differ from those the log's forgets name: the index snapshot was "
        "altered"]
    tamper(db_path, lambda index: index.forgotten.discard(ids["r8"]))
    # a count of entries the snapshot's Merkle tree state does not share: refused, and named
    tamper(db_path, lambda index: setattr(index, "entries", index.entries + 1))
    with MnemoClient(db_path, "owner", durability="none", readonly=True) as c:
        assert not c.stats()["snapshot_used"]
        assert [p.kind for p in c.verify().problems] == ["snapshot"]


def test_a_revoke_left_out_of_the_snapshots_acl_frames(db_path: Path) -> None:
    """The ACL is rebuilt from the log frames the snapshot lists; leaving the revoke's frame out of the
    list is the one way left to change it, and verify names it."""
    build(db_path)
    tamper(db_path, lambda index: setattr(index, "acl_frames", index.acl_frames[:-1]))
    assert [m for _k, m in verify_problems(db_path)] == [
        "the grants in the index differ from those in the log: the index snapshot was altered"]


def test_an_index_moved_on_is_compared_by_replay(db_path: Path) -> None:
    build(db_path)
    report, expected = verify_db_and_index(db_path)
    with MnemoClient(db_path, "owner", durability="none") as c:
        c.remember("appended after the file was read")
        assert c._store.index.head_seq == expected.head_seq + 1
        assert c._store.index_differences(expected) == []  # (by a fresh replay of the log)


def test_a_record_hidden_from_a_tag_index_is_named(db_path: Path) -> None:
    """Records intact, but one left out of a tag's postings: tag queries would miss it."""
    ids = build(db_path)
    victim = ids["r7"]

    def edit(index: Index) -> None:
        row = index.row_of(victim)
        index.postings["t1"] = array("I", (r for r in index.postings["t1"] if r != row))

    tamper(db_path, edit)
    with MnemoClient(db_path, "owner", durability="none", readonly=True) as c:
        assert victim not in [r.id for r in c.query(tags=["t1"])]  # what the tamperer wanted
    assert verify_problems(db_path) == [
        ("index", f"record {victim} is missing from the index of tag 't1': the index snapshot was altered")
    ]


def test_a_snapshot_the_database_does_not_open_from_is_a_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot is checked by opening the database from it, as a read-only client would: should that
    open be refused, verify reports it as the snapshot's problem, with the store's reason, and goes on."""
    from mnemo.audit import verify_db
    from mnemo.errors import IntegrityError
    from mnemo.storage.file import store as store_module

    db = tmp_path / "s.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("kept")

    def refused(*args: Any, **kwargs: Any) -> None:
        raise IntegrityError("the index snapshot is inconsistent (row 3)")

    monkeypatch.setattr(store_module.FileStore, "__init__", refused)
    report = verify_db(db)
    assert not report.ok
    assert [(p.kind, p.message) for p in report.problems] == [(
        "snapshot", f"the index snapshot {db.name}.snap: the database does not open from it: "
        "the index snapshot is inconsistent (row 3)")]


def test_a_stale_snapshot_is_a_note_not_a_problem(tmp_path: Path) -> None:
    """A snapshot of the log as it was before a compaction (here put back by hand) is no damage: its
    frames are not where it says, so clients do not use it, and the next writer replaces it; verify says
    so in a note and finds no problem."""
    from mnemo.audit import verify_db

    db = tmp_path / "s.db"
    with MnemoClient(db, "owner", durability="none") as c:
        gone = c.remember("first").id
        c.remember("second")
        c.forget(gone)
    older = Path(str(db) + ".snap").read_bytes()
    with MnemoClient(db, "owner", durability="none") as c:
        c.compact()
        c.remember("third")
    Path(str(db) + ".snap").write_bytes(older)
    report = verify_db(db)
    assert report.ok and report.problems == ()
    assert f"the index snapshot {db.name}.snap is stale (clients ignore it; the next writer rewrites it)" in (
        report.notes)


def test_a_snapshot_whose_tree_state_was_altered_is_a_finding(tmp_path: Path) -> None:
    """The snapshot's Merkle tree state is checked against the tree over the log's entries: one of the
    right size over other leaves, re-sealed, is a snapshot problem (clients would serve its root)."""
    from mnemo.audit import verify_db
    from mnemo.chain.tree import CompactRange

    db = tmp_path / "s.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("first")
        c.remember("second")
    path = str(db) + ".snap"
    body = snap.read_snapshot(path)
    assert body is not None
    size = CompactRange.from_bytes(body["tree"]).size
    forged = CompactRange()
    forged.add_entries([b"forged %d" % i for i in range(size)])
    body["tree"] = forged.to_bytes()
    snap.write_snapshot(path, body)
    report = verify_db(db)
    assert [(p.kind, p.message) for p in report.problems] == [(
        "snapshot", f"the Merkle tree state in the index snapshot {db.name}.snap is not the tree over the "
        "log's entries: it was altered")]


def test_an_altered_snapshot_is_found_by_the_replay_when_nothing_was_gathered(db_path: Path) -> None:
    """Without what verify gathered (or with it behind the index), the index is compared with a fresh
    replay of the log, never with another load of the same snapshot: the alteration shows."""
    ids = build(db_path)
    tamper(db_path, replace(ids["r8"], tags=("t2", "all", "injected")))
    with MnemoClient(db_path, "owner", durability="none", readonly=True) as c:
        assert c.stats()["snapshot_used"]
        assert c._store.index_differences() == [f"record {ids['r8']} differs between the index and the log"]


def test_an_index_that_does_not_hang_together_is_a_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the index a client serves fail even to list its records (a forged snapshot's rows that
    name no id), verify reports that as the snapshot's one finding about its records and goes on."""
    from mnemo.audit import verify_db
    from mnemo.storage.file import index as index_module
    from mnemo.storage.file.index_columns import inconsistent

    db = tmp_path / "h.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("kept")

    def no_id(self: Any, row: int) -> str | None:
        raise inconsistent(row)

    monkeypatch.setattr(index_module.Index, "id_at", no_id)
    report = verify_db(db)
    assert [(p.kind, p.message) for p in report.problems] == [(
        "snapshot", "the index does not hang together: the index snapshot is inconsistent (row 0); delete it and "
        f"reopen, or run verify: the index snapshot {db.name}.snap was altered")]


def _tamper(db: Path, edit: object) -> None:
    body = snap.read_snapshot(str(db) + ".snap")
    assert body is not None
    edit(body)  # type: ignore[operator]
    snap.write_snapshot(str(db) + ".snap", body)  # re-sealed: its checksum is valid again


def test_a_resealed_snapshot_hiding_a_record_fails_verify(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    with MnemoClient(db, "a", durability="none") as c:
        ids = [c.remember(f"r{i}").id for i in range(3)]
        db_id = bytes.fromhex(c.db_id)

    def hide(body: dict[str, Any]) -> None:
        index = Index.from_state(db_id, body["index"])
        index.drop(ids[1])
        index.forgotten.discard(ids[1])  # no trace of it at all
        body["index"] = index.to_state()

    _tamper(db, hide)
    with MnemoClient(db, "a", durability="none", readonly=True) as c:
        assert c.stats()["snapshot_used"]
        report = c.verify()
        assert not report.ok
        assert [p.kind for p in report.problems] == ["index"]
        assert ids[1] in report.problems[0].message


def test_a_resealed_snapshot_adding_a_grant_gives_no_power_and_fails_verify(tmp_path: Path) -> None:
    """The ACL is never read from the snapshot: a grant written into it (re-sealed) makes the snapshot
    refused, the log is replayed instead, mallory reads nothing, and both verifies name the snapshot."""
    from mnemo.audit import verify_db
    from mnemo.client import RecordUnavailable

    db = tmp_path / "g.db"
    with MnemoClient(db, "owner", durability="none") as c:
        secret = c.remember("owner's secret").id
    _tamper(db, lambda b: b["index"].__setitem__("acl", {"owner": "owner", "grants": {"mallory": {"*": ["admin"]}}}))
    with MnemoClient(db, "mallory", durability="none", readonly=True) as m:
        assert not m.stats()["snapshot_used"]
        with pytest.raises(RecordUnavailable):
            m.get(secret)
        assert m.query() == []
        assert m.permissions() == {"agent:mallory": ("admin", "forget", "read", "write")}
    with MnemoClient(db, "owner", durability="none", readonly=True) as c:
        report = c.verify()
        assert not report.ok and [p.kind for p in report.problems] == ["snapshot"]
    report = verify_db(db)
    assert not report.ok and [p.kind for p in report.problems] == ["snapshot"]
    assert "was refused" in report.problems[0].message


@pytest.mark.parametrize("edit", ["missing", "another size"])
def test_a_resealed_snapshot_whose_tree_state_is_not_its_indexs_is_refused_and_named(tmp_path: Path, edit: str
                                                                                     ) -> None:
    from mnemo.audit import verify_db

    db = tmp_path / "g.db"
    with MnemoClient(db, "owner", durability="none") as c:
        rid = c.remember("kept").id
    if edit == "missing":
        _tamper(db, lambda b: b.pop("tree"))
    else:
        with MnemoClient(tmp_path / "other.db", "owner", durability="none") as other:
            for i in range(3):
                other.remember(f"o{i}")
        tree = snap.read_snapshot(str(tmp_path / "other.db") + ".snap")
        assert tree is not None
        _tamper(db, lambda b: b.__setitem__("tree", bytes(tree["tree"])))
    with MnemoClient(db, "owner", durability="none", readonly=True) as c:
        assert not c.stats()["snapshot_used"] and c.get(rid).content == "kept"
        report = c.verify()
        assert [(p.kind, p.message) for p in report.problems] == [(
            "snapshot", "the index snapshot ends at this log's head but was refused (its Merkle tree state is "
            "missing or does not match its index): it was altered; this client replayed the log instead")]
    assert [(p.kind, p.message) for p in verify_db(db).problems] == [(
        "snapshot", f"the index snapshot {db.name}.snap ends at this log's head but was refused (its Merkle tree "
        "state is missing or does not match its index): it was altered; clients replay the log instead")]


def build_new_records(db: Path) -> list[str]:
    """A database of new records only (one transaction, then single writes): the pass over it keeps
    every put as the scan core gave it, in columns."""
    with MnemoClient(db, "owner", durability="none") as c:
        with c.transaction():
            ids = [c.remember(f"memory {i} ✓", tags=[f"t{i % 3}", "all"], metadata={"i": i}).id for i in range(30)]
        ids += [c.remember(f"single {i}", tags=["one", *(["last"] if i == 4 else [])], scope="team:x").id
                for i in range(5)]
    return ids


def test_a_log_of_new_records_is_compared_as_columns(db_path: Path) -> None:
    ids = build_new_records(db_path)
    report, scanned = verify_db_and_scanned_index(db_path)
    assert report.ok and scanned.runs and not scanned.live and not scanned.older
    with MnemoClient(db_path, "owner", durability="none", readonly=True) as c:
        assert c.stats()["snapshot_used"]
        assert index_diff._same_runs(c._store.index, scanned)
        assert index_diff.differences(c._store.index, scanned) == []
        assert c.verify().ok
    scanned.materialize()  # the runs, as ExpectedIndex holds records
    _report, expected = verify_db_and_index(db_path)
    assert not scanned.runs and scanned.live == expected.live and sorted(scanned.live) == sorted(ids)


@pytest.mark.parametrize("change", [
    {"tags": ("all", "t0", "injected")},
    {"tags": ("all", "t1")},
    {"scope": "agent:mallory"},
    {"scope": "team:x"},
    {"slot_off": 32},
    {"agent": "mallory"},
    {"ts_ns": 1},
    {"size": 12345},
    {"hash": b"\x01" * 32},
    {"seq": 2},
])
def test_an_altered_record_of_a_log_of_new_records_is_named(db_path: Path, change: dict[str, Any]) -> None:
    """The comparison in columns finds the altered field (a value the index's tables hold for other
    records too, or a new one) and leaves the naming to the comparison record by record."""
    ids = build_new_records(db_path)

    def not_same_as_columns() -> None:
        _report, scanned = verify_db_and_scanned_index(db_path)
        with MnemoClient(db_path, "owner", durability="none", readonly=True) as c:
            assert not index_diff._same_runs(c._store.index, scanned)

    rec_ids = [ids[0], ids[17]] if change == {"scope": "team:x"} else [ids[0], ids[17], ids[-1]]
    assert_each_named(db_path, rec_ids, change, not_same_as_columns)


def test_a_record_added_to_or_hidden_from_a_log_of_new_records_is_named(db_path: Path) -> None:
    ids = build_new_records(db_path)
    sound = Path(str(db_path) + ".snap").read_bytes()

    def add(index: Index) -> None:
        rec = index.get_rec(ids[3])
        assert rec is not None
        index.put("f" * len(ids[3]), rec.scope, rec.tags, rec.versions[-1])

    tamper(db_path, add)
    assert [m for _k, m in verify_problems(db_path)] == [
        f"record {'f' * len(ids[3])} is only in the index: the index snapshot was altered"]
    Path(str(db_path) + ".snap").write_bytes(sound)
    tamper(db_path, lambda index: (index.drop(ids[4]), index.forgotten.discard(ids[4])))
    assert [m for _k, m in verify_problems(db_path)] == [
        f"record {ids[4]} is only in the log: the index snapshot was altered"]
    Path(str(db_path) + ".snap").write_bytes(sound)

    def rename(index: Index) -> None:  # as many records, one under another id
        rec = index.get_rec(ids[3])
        assert rec is not None
        index.drop(ids[3])
        index.forgotten.discard(ids[3])
        index.put("f" * len(ids[3]), rec.scope, rec.tags, rec.versions[-1])

    tamper(db_path, rename)
    assert [m for _k, m in verify_problems(db_path)] == [
        f"record {ids[3]} is only in the log: the index snapshot was altered",
        f"record {'f' * len(ids[3])} is only in the index: the index snapshot was altered"]
