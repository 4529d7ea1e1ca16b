"""Forget erases: after forget / forget_where no file of the database (no table, on PostgreSQL) holds a
forgotten record's content, tags or metadata (any version), every kept record's still does, and the
chain still verifies. Also after compact(), across reopen, inside transactions and across clients, on
both backends; with the index snapshot present and through crashes, on the file backend."""

from __future__ import annotations

import io
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers.backends import is_pg, stored

from mnemo import MnemoClient
from mnemo.errors import NotFound

OWNER = "owner"


def marker(kind: str) -> str:
    return f"MK{kind}-{uuid.uuid4().hex}"


@dataclass
class Tracked:
    """Records written with unique markers in content, tags, metadata keys and values, per version."""

    client: MnemoClient
    markers: dict[str, list[str]] = field(default_factory=dict)  # id -> markers of every version
    versions: dict[str, int] = field(default_factory=dict)
    latest: dict[str, str | bytes] = field(default_factory=dict)
    forgotten: set[str] = field(default_factory=set)

    def add(self, *, binary: bool = False, extra_tags: tuple[str, ...] = (), scope: str | None = None,
            client: MnemoClient | None = None) -> str:
        c, t, k, v = marker("c"), marker("t"), marker("k"), marker("v")
        content: str | bytes = c.encode() if binary else c
        rec = (client or self.client).remember(
            content, tags=[t, *extra_tags], metadata={k: v, "nested": [{"deep": v + "x"}]}, scope=scope
        )
        rid: str = rec.id
        self.markers[rid] = [c, t, k, v, v + "x", *extra_tags]
        self.versions[rid] = 1
        self.latest[rid] = content
        return rid

    def edit(self, rec_id: str, *, client: MnemoClient | None = None) -> None:
        c, t, k, v = marker("c"), marker("t"), marker("k"), marker("v")
        (client or self.client).update(rec_id, content=c, tags=[t], metadata={k: v})
        self.markers[rec_id] += [c, t, k, v]
        self.versions[rec_id] += 1
        self.latest[rec_id] = c

    def gone(self, *ids: str) -> None:
        self.forgotten.update(ids)

    @property
    def kept(self) -> list[str]:
        return [i for i in self.markers if i not in self.forgotten]

    def check_files(self, db: str | Path) -> None:
        files = stored(db)
        assert not any(name.endswith(".erase") for name in files), "an erasure journal was left behind"
        blob = b"\x00".join(files.values())
        for rid in self.forgotten:
            for m in self.markers[rid]:
                where = [name for name, data in files.items() if m.encode() in data]
                assert not where, f"forgotten marker {m} of {rid} is still in {where}"
        for rid in self.kept:
            for m in self.markers[rid]:
                assert m.encode() in blob, f"kept marker {m} of {rid} is missing"

    def check_api(self, c: MnemoClient | None = None) -> None:
        c = c or self.client
        live = {r.id for r in c.query()}
        assert live == set(self.kept)
        assert {r.id for r in c.list_records()} == set(self.kept)
        for rid in self.forgotten:
            with pytest.raises(NotFound):
                c.get(rid)
            with pytest.raises(NotFound):
                c.history(rid)
            tag = self.markers[rid][1]
            assert c.query(tags=[tag]) == [] and c.query(tag_prefix=tag) == []
        for rid in self.kept:
            hist = c.history(rid)
            assert len(hist) == self.versions[rid]
            assert hist[-1].content == self.latest[rid] == c.get(rid).content

    def check_verify(self, c: MnemoClient | None = None) -> None:
        report = (c or self.client).verify()
        assert report.ok, report.problems
        assert report.erased == sum(self.versions[i] for i in self.forgotten)

    def check_export(self, c: MnemoClient | None = None) -> None:
        out = io.StringIO()
        (c or self.client).export_audit(out, include_content=True)
        text = out.getvalue()
        for rid in self.forgotten:
            assert not any(m in text for m in self.markers[rid])
        lines = [json.loads(x) for x in text.splitlines()]
        erased_puts = [x for x in lines if x["op"] == "put" and x["body"]["id"] in self.forgotten]
        assert len(erased_puts) == sum(self.versions[i] for i in self.forgotten)
        assert all("payload" not in x for x in erased_puts)

    def check_all(self, db: str | Path, c: MnemoClient | None = None) -> None:
        self.check_files(db)
        self.check_api(c)
        self.check_verify(c)
        self.check_export(c)


def populate(t: Tracked) -> list[str]:
    ids = [t.add() for _ in range(4)] + [t.add(binary=True) for _ in range(2)]
    for rid in ids[::2]:
        t.edit(rid)
    t.edit(ids[0])
    return ids


def test_forget_and_forget_where_erase_every_version(db: str) -> None:
    with MnemoClient(db, OWNER, durability="none") as c:
        t = Tracked(c)
        ids = populate(t)
        drop = marker("drop")
        doomed = [t.add(extra_tags=(drop,)), t.add(extra_tags=(drop,), binary=True)]
        t.edit(doomed[0])  # the shared tag leaves with version 2; version 1 still holds it
        t.check_all(db)

        assert c.forget([ids[0], ids[5]], reason="asked to") == 2
        t.gone(ids[0], ids[5])
        t.check_all(db)

        assert c.forget_where(tags=[drop]) == 1  # only doomed[1] still has the tag
        t.gone(doomed[1])
        assert c.forget_where(tag_prefix=t.markers[doomed[0]][-3]) == 1  # version 2's tag
        t.gone(doomed[0])
        t.check_all(db)


def test_compact_after_forget(db: str) -> None:
    with MnemoClient(db, OWNER, durability="none") as c:
        t = Tracked(c)
        ids = populate(t)
        c.forget(ids[:3])
        t.gone(*ids[:3])
        size = None if is_pg(db) else Path(db).stat().st_size
        result = c.compact()
        assert result["reclaimed"] == result["bytes_before"] - result["bytes_after"] >= 0
        if size is not None:  # the log's own size, before and after
            assert result["bytes_before"] == size and result["bytes_after"] == Path(db).stat().st_size < size
        t.check_all(db)

        more = t.add()
        t.edit(ids[4])
        c.forget([more, ids[3]])
        t.gone(more, ids[3])
        t.check_all(db)
        c.compact()
        t.check_all(db)
        assert c.compact()["reclaimed"] == 0
    with MnemoClient(db, OWNER, durability="none") as c:
        t.check_all(db, c)


def test_forget_with_the_snapshot_present_and_across_reopen(db_path: Path) -> None:
    with MnemoClient(db_path, OWNER, durability="none") as c:
        t = Tracked(c)
        ids = populate(t)
    snap = Path(str(db_path) + ".snap")
    assert snap.exists()
    assert t.markers[ids[1]][1].encode() in snap.read_bytes()  # the snapshot does hold tags

    with MnemoClient(db_path, OWNER, durability="none") as c:
        assert c.stats()["snapshot_used"]
        t.client = c
        c.forget(ids[1])
        t.gone(ids[1])
        t.check_all(db_path)
    assert snap.exists()
    t.check_files(db_path)

    with MnemoClient(db_path, OWNER, durability="none") as c:
        assert c.stats()["snapshot_used"]
        t.client = c
        t.check_all(db_path)
        assert c.forget_where(tags=[t.markers[ids[3]][1]]) == 1
        t.gone(ids[3])
        c.checkpoint()  # writes the snapshot now
        assert snap.exists()
        t.check_all(db_path)
        c.compact()
        t.check_all(db_path)
    with MnemoClient(db_path, OWNER, durability="none") as c:
        assert c.stats()["snapshot_used"]
        t.check_all(db_path, c)
    os.unlink(snap)
    with MnemoClient(db_path, OWNER, durability="none") as c:  # rebuilt from the log alone
        assert not c.stats()["snapshot_used"]
        t.check_all(db_path, c)


def test_forget_inside_a_transaction(db: str) -> None:
    with MnemoClient(db, OWNER, durability="none") as c:
        t = Tracked(c)
        ids = populate(t)
        with c.transaction():
            fresh = t.add()
            t.edit(fresh)
            assert c.get(fresh).version == 2
            c.forget(fresh)
            with pytest.raises(NotFound):
                c.get(fresh)
            t.edit(ids[1])
            c.forget(ids[1])
            keep = t.add()
            assert {r.id for r in c.query()} == set(ids) - {ids[1]} | {keep}
        t.gone(fresh, ids[1])
        t.check_all(db)

        with pytest.raises(RuntimeError), c.transaction():  # rolled back: nothing is forgotten
            c.forget(ids[2])
            raise RuntimeError("abort")
        t.check_all(db)
        assert c.get(ids[2]).id == ids[2]

        with c.transaction():
            assert c.forget_where(tags=[t.markers[ids[2]][-3]]) == 1  # ids[2] was edited: its latest tag
            t.add()
        t.gone(ids[2])
        t.check_all(db)
    with MnemoClient(db, OWNER, durability="none") as c:
        t.check_all(db, c)


def test_forget_seen_by_other_clients(db: str) -> None:
    """A second client that had the record in its index (and reads the snapshot) never brings it back."""
    with MnemoClient(db, OWNER, durability="none") as a:
        t = Tracked(a)
        ids = populate(t)
    with MnemoClient(db, OWNER, durability="none") as a, \
            MnemoClient(db, "b", durability="none") as b, \
            MnemoClient(db, OWNER, readonly=True) as r:
        a.grant("b", "agent:owner", ["read", "forget"])
        for rid in ids:
            assert b.get(rid).id == rid and r.get(rid).id == rid
        a.forget(ids[0])
        t.gone(ids[0])
        assert b.forget(ids[1]) == 1
        t.gone(ids[1])
        for c in (a, b, r):
            with pytest.raises(NotFound):
                c.get(ids[0])
            with pytest.raises(NotFound):
                c.history(ids[1])
            assert {x.id for x in c.query()} == set(t.kept)
        b.checkpoint()  # b writes the snapshot
        t.check_files(db)
        t.add(client=b)
        b.close()  # and again on close
        t.check_files(db)
        a.compact()
        for c in (a, r):  # the readonly client reloads the compacted log
            assert {x.id for x in c.query()} == set(t.kept)
            for rid in t.kept:
                assert len(c.history(rid)) == t.versions[rid]
        t.check_all(db, a)


def test_forget_in_other_scopes(db: str) -> None:
    with MnemoClient(db, OWNER, durability="none") as own, \
            MnemoClient(db, "ann", durability="none") as ann:
        own.grant("ann", "team:*", ["read", "write", "forget"])
        t = Tracked(own)
        mine = t.add(client=ann)
        team = [t.add(scope="team:a", client=ann), t.add(scope="team:b"), t.add(scope="team:b")]
        other = t.add(scope="ops")
        assert ann.forget_where(scope="team:*") == 3
        t.gone(*team)
        t.check_all(db)
        assert own.forget_where(scope="agent:*") == 1
        t.gone(mine)
        t.check_all(db)
        assert {r.id for r in own.query()} == {other}


# -- crash safety ---------------------------------------------------------------------------------------

# Opens the db, arms one crash point, then forgets the ids given: SIGKILL at that point of the forget.
# A forget writes its frame and fsyncs it, removes the snapshot, writes the zeros and fsyncs them, and
# appends nothing before that fsync: what a crash at each point leaves is recovered by the next writer.
ERASE_CHILD = r"""
import os, signal, sys
import mnemo.storage.file.commit as commit
import mnemo.storage.file.compaction as engine
import mnemo.storage.file.snapshot as snap
from mnemo import MnemoClient

db, point, ids = sys.argv[1], sys.argv[2], sys.argv[3:]
client = MnemoClient(db, "owner", durability="fsync")
zero_writes = 0

def die():
    os.kill(os.getpid(), signal.SIGKILL)

real_commit_sync, real_remove, real_write_all, real_sync = (
    commit.sync, snap.remove, engine.write_all, engine.sync)

def commit_sync(fd):
    if point == "before-forget-synced":
        die()
    real_commit_sync(fd)
    if point == "after-forget-synced":
        die()

def remove(path):
    if point == "before-snapshot-removed" and path.endswith(".snap"):
        die()
    return real_remove(path)

def write_all(fd, data, offset):
    global zero_writes
    if data and not any(data):
        zero_writes += 1
        if point == "mid-zeros" and zero_writes == 2:
            real_write_all(fd, data[: len(data) // 2], offset)
            die()
    real_write_all(fd, data, offset)

def sync(fd):
    if point == "before-zeros-synced" and zero_writes:
        die()
    real_sync(fd)
    if point == "after-zeros-synced" and zero_writes:
        die()

commit.sync, snap.remove, engine.write_all, engine.sync = commit_sync, remove, write_all, sync
client.forget(ids)
print("returned", flush=True)
"""

CRASH_POINTS = (
    "before-forget-synced", "after-forget-synced", "before-snapshot-removed", "mid-zeros",
    "before-zeros-synced", "after-zeros-synced",
)


def crash_forget(db: Path, point: str, ids: list[str]) -> None:
    import subprocess
    import sys

    from helpers.procs import subprocess_env

    proc = subprocess.run(
        [sys.executable, "-c", ERASE_CHILD, str(db), point, *ids],
        capture_output=True, text=True, env=subprocess_env(), timeout=60,
    )
    assert proc.returncode == -9 and "returned" not in proc.stdout, (proc.returncode, proc.stderr)


def markers_in(db: Path, t: Tracked, ids: list[str]) -> bool:
    blob = b"".join(stored(db).values())
    return any(m.encode() in blob for rid in ids for m in t.markers[rid])


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_interrupted_erasure_is_completed_on_open(db_path: Path, point: str) -> None:
    with MnemoClient(db_path, OWNER, durability="none") as c:
        t = Tracked(c)
        ids = populate(t)
    assert Path(str(db_path) + ".snap").exists()
    doomed = [ids[0], ids[1], ids[2]]  # ids[0] and ids[2] have several versions
    crash_forget(db_path, point, doomed)
    t.gone(*doomed)
    assert not Path(str(db_path) + ".erase").exists()  # no erasure journal is written
    if point in ("before-forget-synced", "after-forget-synced", "before-snapshot-removed", "mid-zeros"):
        assert markers_in(db_path, t, doomed)  # the crash came before the zeros were written
    if point == "mid-zeros":
        from mnemo.audit import verify_db

        report = verify_db(db_path)  # a slot part-way zeroed: the erasure of the last frame's forget
        assert report.ok, report.problems
        assert any("part-way erased" in note for note in report.notes), report.notes
    if point == "after-zeros-synced":
        assert not markers_in(db_path, t, doomed)

    with MnemoClient(db_path, OWNER, readonly=True) as r:  # a reader cannot erase, but hides them
        assert {x.id for x in r.query()} == set(t.kept)
    with MnemoClient(db_path, OWNER, durability="none") as c:
        if point in ("before-zeros-synced", "after-zeros-synced"):
            # every zero was written (and read back as zeros): they are written again and fsynced, since
            # they may be in the page cache only, but that is no recovery to report
            assert c.recovery == [], c.recovery
        else:
            assert any("erasure" in line for line in c.recovery), c.recovery
        t.check_all(db_path, c)
    with MnemoClient(db_path, OWNER, durability="none") as c:
        assert not any("erasure" in line for line in c.recovery), c.recovery
        t.check_all(db_path, c)


def test_interrupted_erasure_is_completed_by_an_open_writer(db_path: Path) -> None:
    """A client that was open during the crash completes the erasure on its next write."""
    with MnemoClient(db_path, OWNER, durability="none") as c:
        t = Tracked(c)
        ids = populate(t)
        crash_forget(db_path, "after-forget-synced", [ids[0]])
        t.gone(ids[0])
        t.add()
        t.check_all(db_path)


def test_interrupted_erasure_seen_first_by_a_reading_client(db_path: Path) -> None:
    with MnemoClient(db_path, OWNER, durability="none") as c:
        t = Tracked(c)
        ids = populate(t)
        crash_forget(db_path, "after-forget-synced", [ids[0]])
        t.gone(ids[0])
        assert {x.id for x in c.query()} == set(t.kept)  # catches up as a reader
        assert markers_in(db_path, t, [ids[0]])  # (a reader never erases)
        t.add()  # a write: the writer lock, but nothing new to catch up with
        # ... and the slots the reader found to erase are zeroed by that write, not at the next open
        assert not markers_in(db_path, t, [ids[0]])
        assert c.recovery[-1] == "completed an interrupted erasure of 3 payload slots", c.recovery
    with MnemoClient(db_path, OWNER, durability="none") as c:
        t.check_all(db_path, c)


def test_forget_frame_written_by_hand_is_erased_on_open(db_path: Path) -> None:
    """A forget entry that reached the log without any erasure (a crash right after the write)."""
    from helpers.frames import read_entries

    from mnemo.chain.codec import encode_forget_payload, make_entry
    from mnemo.storage.file.framing import encode_frame

    with MnemoClient(db_path, OWNER, durability="none") as c:
        t = Tracked(c)
        ids = populate(t)
    last = read_entries(db_path)[-1]
    entry = make_entry(last.seq + 1, last.ts_ns + 1, last.hash, "forget", OWNER, {"ids": ids[:2]})
    with open(db_path, "ab") as f:
        f.write(encode_frame([(entry.raw, encode_forget_payload("by hand"))]))
    t.gone(*ids[:2])
    assert markers_in(db_path, t, ids[:2])
    with MnemoClient(db_path, OWNER, durability="none") as c:
        assert c.stats()["snapshot_used"]  # the snapshot covers the log up to the forget
        assert any("erasure" in line for line in c.recovery), c.recovery
        t.check_all(db_path, c)


SNAPSHOT_KILL_CHILD = r"""
import os, signal, sys
from mnemo import MnemoClient

db, content, tag = sys.argv[1:4]
client = MnemoClient(db, "owner", durability="none")
client.remember(content, tags=[tag])
real_replace = os.replace

def replace(src, dst, *args, **kwargs):
    if str(dst).endswith(".snap"):
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst, *args, **kwargs)

os.replace = replace
client.close()  # writes the snapshot: killed just before renaming it into place
"""


def test_snapshot_temp_file_left_by_a_crash_keeps_no_forgotten_tags(db_path: Path) -> None:
    import subprocess
    import sys

    from helpers.procs import subprocess_env

    content, tag = marker("c"), marker("t")
    proc = subprocess.run(
        [sys.executable, "-c", SNAPSHOT_KILL_CHILD, str(db_path), content, tag],
        capture_output=True, text=True, env=subprocess_env(), timeout=60,
    )
    assert proc.returncode == -9, proc.stderr
    with MnemoClient(db_path, OWNER, durability="none") as c:
        assert c.forget_where(tags=[tag]) == 1
    files = stored(db_path)
    assert not [name for name, data in files.items() if tag.encode() in data or content.encode() in data]
