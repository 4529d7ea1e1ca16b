"""A client's verify() while another client writes, and snapshots that are current: checking never
writes, and a snapshot that holds what the log says is not written again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import mnemo.storage.file.store
from mnemo import MnemoClient

OWNER = "owner"


def _files(db: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of the database: its bytes and inode."""
    return {
        p.name: (p.read_bytes(), p.stat().st_ino)
        for p in sorted(db.parent.iterdir()) if p.name.startswith(db.name)
    }


@pytest.mark.parametrize("appends_after_refresh", [False, True], ids=["before-its-refresh", "after-it-too"])
def test_verify_while_another_client_appends_writes_nothing_and_finds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, appends_after_refresh: bool
) -> None:
    """The pass over the file ends at one head; others append before the index is compared (and, in
    the second case, again while it is compared). The comparison then replays the log in a read-only
    store of its own, or, when the log has moved on past this client, leaves it for a quieter time:
    no finding either way, and no file of the database written."""
    db = tmp_path / "v.db"
    with MnemoClient(db, OWNER, durability="none") as other:
        other.remember("before", tags=["t"])
    with MnemoClient(db, OWNER, durability="none") as c, MnemoClient(db, OWNER, durability="none") as other:
        c.remember("mine", tags=["t"])
        store: Any = c._store
        real_pass = mnemo.storage.file.store.verify_db_and_scanned_index
        real_refresh = store.refresh
        appended: list[str] = []

        def the_pass(*args: Any, **kwargs: Any) -> Any:
            out = real_pass(*args, **kwargs)
            other.remember("appended after the pass", tags=["t"])
            appended.append("after the pass")
            return out

        def refresh() -> None:
            real_refresh()
            if appends_after_refresh and appended == ["after the pass"]:
                other.remember("appended after this client's refresh", tags=["t"])
                appended.append("after the refresh")

        monkeypatch.setattr(mnemo.storage.file.store, "verify_db_and_scanned_index", the_pass)
        monkeypatch.setattr(store, "refresh", refresh)
        before = _files(db)
        report = c.verify()
        assert report.ok, report.problems
        assert len(appended) == 1 + appends_after_refresh
        after = _files(db)
        # The log and the leaf-hash cache grew by the other client's appends alone; the snapshot (which
        # a writer's open would rewrite after its replay) is as it was.
        assert after.keys() == before.keys()
        assert after[db.name][0].startswith(before[db.name][0])
        assert after[db.name + ".snap"] == before[db.name + ".snap"], "verify() wrote the snapshot"
    with MnemoClient(db, OWNER, readonly=True) as r:
        assert len(r.query(tags=["t"])) == 3 + appends_after_refresh


def test_a_replayed_writer_writes_its_snapshot_once_at_close(tmp_path: Path) -> None:
    """A writer that replays the log (no snapshot) writes none as it opens, and one as it closes; a
    writer that opened from that snapshot and wrote nothing leaves it as it is at close: the same file,
    not a rewrite of the same bytes."""
    db = tmp_path / "s.db"
    snap = Path(str(db) + ".snap")
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember("a record", tags=["t"])
    snap.unlink()
    c = MnemoClient(db, OWNER, durability="none")
    try:
        assert not c.stats()["snapshot_used"] and not snap.exists()
        assert [r.content for r in c.query()] == ["a record"]
    finally:
        c.close()
    written = snap.read_bytes(), snap.stat().st_ino, os.stat(snap).st_mtime_ns
    c = MnemoClient(db, OWNER, durability="none")
    try:
        assert c.stats()["snapshot_used"]
        assert [r.content for r in c.query()] == ["a record"]
    finally:
        c.close()
    assert (snap.read_bytes(), snap.stat().st_ino, os.stat(snap).st_mtime_ns) == written
