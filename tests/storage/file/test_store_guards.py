"""Guards against accidents and quiet tampering: an empty forget_where, and a re-sealed snapshot that
hides a record or a grant from the index (the file backend's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import snapshot

from mnemo import IntegrityError, InvalidInput, MnemoClient, MnemoError
from mnemo.storage.file import snapshot as snap
from mnemo.storage.file.index import Index


def test_forget_where_without_a_filter_is_refused(db: str) -> None:
    with MnemoClient(db, "a", durability="none") as c:
        c.remember("keep me", tags=["t"])
        before = snapshot(db)
        with pytest.raises(InvalidInput, match="needs tags"):
            c.forget_where()
        with pytest.raises(InvalidInput):
            c.forget_where(tags=[])
        assert snapshot(db) == before
        assert c.forget_where(scope=c.home_scope) == 1


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


def test_a_log_under_another_databases_header_does_not_open(tmp_path: Path) -> None:
    """A valid header of database B on the log of database A: its genesis names A, so the log is refused
    (and the file is left as it was)."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for path in (a, b):
        with MnemoClient(path, "owner", durability="none") as c:
            c.remember(f"in {path.name}")
    forged = tmp_path / "forged.db"
    forged.write_bytes(b.read_bytes()[:32] + a.read_bytes()[32:])
    before = forged.read_bytes()
    for readonly in (True, False):
        with pytest.raises(IntegrityError) as refused:
            MnemoClient(forged, "owner", durability="none", readonly=readonly)
        assert str(refused.value) == f"{forged}: the genesis at offset 32 belongs to another database"
        assert refused.value.offset == 32
    assert forged.read_bytes() == before


def test_an_open_that_fails_closes_no_descriptor_it_did_not_open(tmp_path: Path) -> None:
    """Whatever stops an open (a directory in the database's place, a log of another database), the
    descriptors of the process are as they were: none leaked, and none closed that the store never
    opened (descriptor 0 among them)."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for path in (a, b):
        with MnemoClient(path, "owner", durability="none") as c:
            c.remember("x")
    forged = tmp_path / "forged.db"
    forged.write_bytes(b.read_bytes()[:32] + a.read_bytes()[32:])
    (tmp_path / "dir.db").mkdir()
    before = sorted(os.listdir("/proc/self/fd"))
    assert "0" in before
    for path, error in ((tmp_path / "dir.db", MnemoError), (forged, IntegrityError)):
        for readonly in (True, False):
            with pytest.raises(error):
                MnemoClient(path, "owner", durability="none", readonly=readonly)
            assert sorted(os.listdir("/proc/self/fd")) == before, (path, readonly)
