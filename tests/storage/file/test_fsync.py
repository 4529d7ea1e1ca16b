"""The file store's fsync path under durability="fsync": the count the benchmarks report, what a failed
fsync cuts once an earlier fsync covered everything, and a failed fsync's cut waiting for the writer
lock another client holds for a moment."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mnemo import DurabilityError, MnemoClient
from mnemo.storage.file import logfile

AGENT = "owner"


def _log_syncs(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, each fsync of `store`'s log, as the list of descriptors it was made on."""
    real = logfile._sync
    calls: list[int] = []

    def counted(fd: int) -> None:
        if fd == store.fd:
            calls.append(fd)
        real(fd)

    monkeypatch.setattr(logfile, "_sync", counted)
    return calls


def test_the_fsync_count_is_the_commit_paths_real_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """store.fsyncs (what benchmarks/bench_core.py reports per write) counts the fsyncs of the log the
    commit path really made: one per write for a lone writer."""
    with MnemoClient(tmp_path / "f.db", AGENT, durability="fsync") as c:
        store: Any = c._store
        calls = _log_syncs(store, monkeypatch)
        before = store.fsyncs
        for i in range(5):
            c.remember(f"durable {i}")
        assert len(calls) == 5
        assert store.fsyncs - before == 5


def _failing_once(store: Any, monkeypatch: pytest.MonkeyPatch, before: Any = None) -> dict[str, bool]:
    """Make the next fsync of `store`'s log fail with EIO (after running `before`, if given)."""
    real = logfile._sync
    state = {"failed": False}

    def sync(fd: int) -> None:
        if fd == store.fd and not state["failed"]:
            state["failed"] = True
            if before is not None:
                before()
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(logfile, "_sync", sync)
    return state


def test_a_failed_fsync_cuts_the_unacknowledged_frame_after_others_read_since_a_good_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A's first write is fsynced, which covers everything A wrote. B then appends, and A reads B's frame:
    nothing of A's was unsynced then. A's next write's fsync fails: that write was never acknowledged
    and is cut, while B's, which came before it, stays."""
    db = tmp_path / "m.db"
    with MnemoClient(db, AGENT, durability="fsync") as a, MnemoClient(db, AGENT, durability="none") as b:
        a.remember("A's first, acknowledged")
        b.remember("B's, acknowledged")
        assert len(a.query()) == 2  # A reads B's frame
        state = _failing_once(a._store, monkeypatch)
        with pytest.raises(DurabilityError):
            a.remember("A's second, not acknowledged")
        assert state["failed"]
        monkeypatch.undo()
    with MnemoClient(db, AGENT, readonly=True) as fresh:
        assert [r.content for r in fresh.query()] == ["A's first, acknowledged", "B's, acknowledged"]
        assert fresh.verify().ok


def test_a_failed_fsync_waits_for_the_writer_lock_to_cut_its_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cut needs the writer lock. Another client that holds it for a moment (a transaction that
    writes nothing) is waited for, within lock_timeout, and the unacknowledged frame is cut after."""
    db = tmp_path / "m.db"
    held = threading.Event()
    with MnemoClient(db, AGENT, durability="fsync", lock_timeout=10) as a, \
            MnemoClient(db, AGENT, durability="none") as b:
        a.remember("acknowledged")

        def hold_the_lock() -> None:
            with b.transaction():
                held.set()
                time.sleep(0.3)

        holder = threading.Thread(target=hold_the_lock)

        def another_takes_the_lock() -> None:
            holder.start()
            assert held.wait(5), "the other client did not get the writer lock"

        state = _failing_once(a._store, monkeypatch, before=another_takes_the_lock)
        with pytest.raises(DurabilityError):
            a.remember("not acknowledged")
        holder.join(10)
        assert not holder.is_alive()
        assert state["failed"]
        monkeypatch.undo()
    with MnemoClient(db, AGENT, readonly=True) as fresh:
        assert [r.content for r in fresh.query()] == ["acknowledged"]
        assert fresh.verify().ok


def test_a_long_transaction_holds_no_durable_write_up_past_the_group_commit_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread about to fsync gives threads inside a write up to group_commit_wait seconds, and never
    more than half of what an fsync has been taking, to join its fsync. Another thread that stays inside
    a write (a transaction left open) does not hold the acknowledgement up past that bound."""
    with MnemoClient(tmp_path / "g.db", AGENT, durability="fsync", group_commit_wait=1.0) as c:
        for i in range(150):
            c.remember(f"warm {i}")  # what an fsync has been taking: a moving average, long settled
        store: Any = c._store
        inside, leave = threading.Event(), threading.Event()

        def open_transaction() -> None:
            with c.transaction():
                inside.set()
                leave.wait(10)

        other = threading.Thread(target=open_transaction)
        real_sync_upto = store._group.sync_upto
        waited: list[float] = []

        def sync_upto(end: int, generation: int | None = None) -> None:
            other.start()  # the write is committed and the lock let go: another thread enters a write
            assert inside.wait(5)
            started = time.monotonic()
            try:
                real_sync_upto(end, generation)
            finally:
                waited.append(time.monotonic() - started)

        monkeypatch.setattr(store._group, "sync_upto", sync_upto)
        try:
            c.remember("acknowledged while a transaction stays open")
        finally:
            leave.set()
            other.join(15)
        monkeypatch.undo()
        assert not other.is_alive()
        assert waited[0] < 0.5, f"the durable write waited {waited[0]:.2f} s for a transaction left open"


@pytest.mark.parametrize(("durability", "fsyncs_at_close"), [("batch", 1), ("none", 0), ("fsync", 0)])
def test_close_fsyncs_what_batch_mode_has_not_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str, fsyncs_at_close: int
) -> None:
    """durability="batch" fsyncs in the background every BATCH_INTERVAL; closing the client fsyncs what
    was written since, so a clean exit loses nothing. "fsync" has synced every write already, and "none"
    never fsyncs the log."""
    from mnemo.storage.file import group_commit as file_store

    monkeypatch.setattr(file_store, "BATCH_INTERVAL", 3600.0)  # the background syncer never runs here
    c = MnemoClient(tmp_path / "b.db", AGENT, durability=durability)
    store: Any = c._store
    calls = _log_syncs(store, monkeypatch)
    c.remember("written")
    before_close = len(calls)
    c.close()
    assert before_close == (1 if durability == "fsync" else 0)
    assert len(calls) - before_close == fsyncs_at_close
