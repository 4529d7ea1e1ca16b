"""A compaction that cannot finish: a payload damaged since the log was read, a rename the system
refuses. Either way the old log stands byte for byte, no `DB.compact` (which holds every payload) is
left beside it, and the client says why. And one that does, met by another thread of its client."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers.frames import flip_byte, put_slots

from mnemo import DurabilityError, IntegrityError, MnemoClient
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
