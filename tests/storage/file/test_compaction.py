"""A compaction that cannot finish: a payload damaged since the log was read, a rename the system
refuses. Either way the old log stands byte for byte, no `DB.compact` (which holds every payload) is
left beside it, and the client says why. And one that does, met by another thread of its client, or
by a writer of another client waiting for the writer lock on the log it replaces, which then writes to
the new log, holding the lock on it."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers.frames import flip_byte, put_slots
from helpers.victims import make_victim, unchanged

from mnemo import DurabilityError, IntegrityError, MnemoClient
from mnemo.storage.file import opening
from mnemo.storage.file import snapshot as snap

OWNER = "owner"


def test_a_payload_damaged_since_it_was_read_stops_a_compaction(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        kept = c.remember("kept")
        hit = c.remember("damaged on disk after the open " * 3)
        c.forget(c.remember("gone " * 40).id)
        slot = put_slots(db)[hit.id][1]
        offset = slot.offset
        flip_byte(db, offset + slot.length // 2)  # bit rot under a running client
        damaged = db.read_bytes()
        with pytest.raises(IntegrityError) as info:
            c.compact()
        assert str(info.value) == f"{db}: payload slot damaged at offset {offset}"
        assert info.value.offset == offset
        assert db.read_bytes() == damaged, "a compaction over a damaged payload changed the log"
        assert not Path(str(db) + ".compact").exists()
        assert c.get(kept.id).content == "kept"
        assert not c.verify().ok


def test_a_rename_the_system_refuses_leaves_the_old_log_and_stops_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "r.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        kept = c.remember("kept")
        c.forget(c.remember("gone " * 40).id)
        before = db.read_bytes()
        real_replace = os.replace

        def refuse_the_log(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            if os.fspath(dst) == str(db):
                raise OSError(5, "Input/output error")
            real_replace(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "replace", refuse_the_log)
        with pytest.raises(DurabilityError) as info:
            c.compact()
        assert str(info.value) == "compaction failed: [Errno 5] Input/output error"
        monkeypatch.undo()
        assert db.read_bytes() == before
        assert not Path(str(db) + ".compact").exists()
        with pytest.raises(DurabilityError):
            c.remember("refused until a reopen")
        assert c.get(kept.id).content == "kept"
    with MnemoClient(db, OWNER, durability="none") as c:
        assert [r.content for r in c.query()] == ["kept"]
        c.remember("after the reopen")
        assert c.verify().ok


def test_a_failure_after_the_rename_leaves_no_lock_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the new log is renamed into place, the lock this store holds on it is handed over before
    anything else can fail: a failure after the rename (here, removing the old snapshot) raises, and
    other clients still write; the new log holds every entry."""
    db = tmp_path / "l.db"
    snap_path = str(db) + ".snap"
    with MnemoClient(db, OWNER, durability="none") as c:
        kept = c.remember("kept")
        c.forget(c.remember("gone " * 40).id)
    real_remove = snap.remove

    def refuse_the_snapshot(path: str) -> None:
        if path == snap_path:
            raise OSError(5, "Input/output error")
        real_remove(path)

    with MnemoClient(db, OWNER, durability="none", lock_timeout=2) as c, \
            MnemoClient(db, OWNER, durability="none", lock_timeout=2) as other:
        monkeypatch.setattr(snap, "remove", refuse_the_snapshot)
        with pytest.raises(DurabilityError, match="compaction failed"):
            c.compact()
        monkeypatch.undo()
        other.remember("written after the failed compaction")
    with MnemoClient(db, OWNER, durability="none", lock_timeout=2) as fresh:
        assert [r.content for r in fresh.query()] == ["kept", "written after the failed compaction"]
        assert fresh.get(kept.id).content == "kept"
        assert fresh.verify().ok


class _NotedWait:
    """A store's index lock that notes, in `noted`, when a thread finds it held by another thread (and
    waits for it)."""

    def __init__(self, real: Any, noted: threading.Event) -> None:
        self.real, self.noted = real, noted

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self.real.acquire(blocking=False):
            return True
        self.noted.set()
        return bool(self.real.acquire(blocking, timeout))

    def release(self) -> None:
        self.real.release()

    def __enter__(self) -> _NotedWait:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_thread_reading_while_its_client_compacts_finds_the_new_log_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename of the compacted log over the old one and the reload that adopts it are one step for
    the client's other threads: a get by one of them that starts in between waits for the adoption,
    and reads the new log without following it itself. (It used to follow it on its own, retiring and
    closing the old log's descriptor while the compacting thread still held the writer lock through it
    and was about to let go of that lock, through a descriptor then being closed under it.)"""
    db = tmp_path / "a.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        kept = c.remember("kept")
        c.forget(c.remember("gone " * 40).id)
        store: Any = c._store
        settled = threading.Event()  # the reader has read, or waits for the index lock
        read: list[str] = []

        def get() -> None:
            try:
                read.append(c.get(kept.id).content)
            finally:
                settled.set()

        reader = threading.Thread(target=get)
        reloads: list[tuple[bool, bool]] = []  # (by the reader, adopting the compacted file)
        real_reload = store._reload

        def reload(adopt: Any = None) -> None:
            reloads.append((threading.current_thread() is reader, adopt is not None))
            real_reload(adopt)

        real_replace = os.replace

        def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            real_replace(src, dst, *args, **kwargs)
            if os.fspath(dst) == str(db):
                reader.start()  # right after the rename, before the compaction adopts the new file
                settled.wait(10)

        monkeypatch.setattr(store, "_index_lock", _NotedWait(store._index_lock, settled))
        monkeypatch.setattr(store, "_reload", reload)
        monkeypatch.setattr(os, "replace", replace)
        c.compact()
        reader.join()
        monkeypatch.undo()
        assert read == ["kept"]
        assert reloads == [(False, True)], "the reader followed the new log before the compaction adopted it"
        assert c.verify().ok



class _RacedWriter:
    """A writer thread of `c` whose one write ("written"), about to take the writer lock on the log its
    client has open, meets a compaction by `other` (a new log renamed over that one), which a reader
    thread of `c` follows: before the writer waits for the lock, or (`then_lock`) once it holds the lock
    on the old log, before it looks at which file the path names. `met`: the inode of the log it was
    about to lock; `errors`: what the write raised."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, c: MnemoClient, other: MnemoClient, then_lock: bool) -> None:
        self.c, self.other, self.then_lock = c, other, then_lock
        self.met: int | None = None
        self.errors: list[BaseException] = []
        self.real_lock_log = opening.lock_log
        self.thread = threading.Thread(target=self._write)
        monkeypatch.setattr(opening, "lock_log", self._lock_log)

    def run(self) -> None:
        self.thread.start()
        self.thread.join()

    def _write(self) -> None:
        try:
            self.c.remember("written")
        except BaseException as exc:
            self.errors.append(exc)

    def _follow(self) -> None:
        follower = threading.Thread(target=self.c._store.refresh)  # type: ignore[attr-defined]
        follower.start()
        follower.join()

    def _lock_log(self, fd: int, deadline: float, what: str) -> None:
        first = threading.current_thread() is self.thread and self.met is None
        if first:
            self.met = os.fstat(fd).st_ino
            self.other.compact()
            if not self.then_lock:
                self._follow()
        self.real_lock_log(fd, deadline, what)
        if first and self.then_lock:
            self._follow()


def test_a_writer_waiting_for_the_lock_while_another_client_compacts_writes_to_the_new_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another client compacts the log while a writer thread waits for the writer lock on it, and a
    reader thread of the writer's client follows the new log meanwhile: the old log's descriptor, which
    the writer waits on, stays open until the writer lets go of it, and the write lands in the new log.
    (The reader used to close that descriptor under the wait, and the write failed with EBADF; had the
    number been reused meanwhile, the writer would have locked whatever file it then named.)"""
    db = tmp_path / "w.db"
    with MnemoClient(db, OWNER, durability="none") as c, MnemoClient(db, OWNER, durability="none") as other:
        kept = c.remember("kept")
        c.forget(c.remember("gone " * 40).id)
        writer = _RacedWriter(monkeypatch, c, other, then_lock=False)
        writer.run()
        monkeypatch.undo()
        assert writer.errors == []
        assert writer.met is not None and writer.met != os.stat(db).st_ino  # it met the compaction
        store: Any = c._store
        assert os.fstat(store.fd).st_ino == os.stat(db).st_ino
        assert store._locked is None and store._handles.retired == []  # the old log's descriptor is closed
        assert [r.content for r in other.query()] == ["kept", "written"]
        assert other.get(kept.id).content == "kept"
        assert c.verify().ok and other.verify().ok
    with MnemoClient(db, OWNER, durability="none") as fresh:
        assert [r.content for r in fresh.query()] == ["kept", "written"]
        assert fresh.verify().ok


def test_a_writer_that_locked_a_log_a_compaction_replaced_locks_the_new_one_before_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer thread takes the lock on the log its client has open just after another client renamed
    a compacted log over it (the old log's lock, let go of, is free), and a reader thread of its client
    follows the new log before the writer looks at which file the path names: the writer compares the
    file it locked with the path's, never with what the reader thread changed, so it moves on to lock
    the new log, and holds that lock as it appends. (It used to compare the path with the store's
    current log, which the reader had just made the new one, and append to the new log with the lock
    held on the old one, if at all: another writer could append beside it.)"""
    db = tmp_path / "w.db"
    with MnemoClient(db, OWNER, durability="none") as c, MnemoClient(db, OWNER, durability="none") as other:
        c.remember("kept")
        c.forget(c.remember("gone " * 40).id)
        store: Any = c._store
        writer = _RacedWriter(monkeypatch, c, other, then_lock=True)
        real_commit = store._commit
        appending: list[tuple[bool, bool]] = []  # (the log written is the path's, its lock is held)

        def commit(batch: Any) -> int:
            probe = os.open(db, os.O_RDONLY)  # another open of the file the path names
            try:
                try:
                    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held = False
                except BlockingIOError:
                    held = True
                appending.append((os.fstat(store.fd).st_ino == os.fstat(probe).st_ino, held))
            finally:
                os.close(probe)
            return int(real_commit(batch))

        monkeypatch.setattr(store, "_commit", commit)
        writer.run()
        monkeypatch.undo()
        assert writer.errors == []
        assert writer.met is not None and writer.met != os.stat(db).st_ino  # it met the compaction
        assert appending == [(True, True)], "the writer appended to a log whose lock it did not hold"
        assert [r.content for r in other.query()] == ["kept", "written"]
        assert c.verify().ok and other.verify().ok


def test_a_link_at_db_compact_is_never_written_through(tmp_path: Path) -> None:
    """DB.compact made a link (to another file) while a client has the database open: the compaction
    writes a new file of its own in the link's place, the other file keeps its bytes and mode, and the
    database is a regular file afterwards, not the link."""
    db = tmp_path / "m.db"
    victim = make_victim(tmp_path)
    with MnemoClient(db, "owner", durability="none") as c:
        c.forget(c.remember("gone " * 100).id)
        kept = c.remember("kept").id
        Path(str(db) + ".compact").symlink_to(victim)
        assert c.compact()["reclaimed"] > 0
        assert [r.id for r in c.query()] == [kept]
    assert unchanged(victim)
    assert not db.is_symlink() and db.stat().st_nlink == 1
    assert not os.path.lexists(str(db) + ".compact")
    with MnemoClient(db, "owner", readonly=True) as r:
        assert r.verify().ok and [x.id for x in r.query()] == [kept]


def test_db_compact_swapped_for_a_link_before_the_rename_fails_the_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link put at DB.compact between its write and its rename is never renamed over the database:
    the compaction fails, the old log stands, and the link's target is untouched."""
    from mnemo.storage.file import compaction

    db = tmp_path / "m.db"
    victim = make_victim(tmp_path)
    tmp = str(db) + ".compact"
    real_sync = compaction.sync

    def sync_then_swap(fd: int) -> None:
        real_sync(fd)
        if os.readlink(f"/proc/self/fd/{fd}") == tmp:
            os.unlink(tmp)
            os.symlink(victim, tmp)

    with MnemoClient(db, "owner", durability="none") as c:
        kept = c.remember("kept").id
        before = db.read_bytes()
        monkeypatch.setattr(compaction, "sync", sync_then_swap)
        with pytest.raises(DurabilityError) as info:
            c.compact()
        monkeypatch.undo()
    assert str(info.value) == (
        "compaction failed: [Errno 17] the temporary file was replaced while it was written; nothing was "
        f"changed: check who else writes in this folder and try again: '{tmp}'"
    )
    assert victim.read_bytes() == b"precious, not Mnemo's"
    assert not db.is_symlink() and db.read_bytes() == before and not os.path.lexists(tmp)
    with MnemoClient(db, "owner", durability="none") as c:
        assert [r.id for r in c.query()] == [kept] and c.verify().ok
