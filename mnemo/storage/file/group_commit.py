"""Group commit: the fsync that makes a store's writes durable, one at a time, each covering every frame
written before it started, and what a store knows of its log's durability (where the last fsync's
coverage ends, and its own first frame past it)."""

from __future__ import annotations

import contextlib
import threading
import time
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ...errors import DurabilityError
from ..types import BATCH_INTERVAL
from .handles import LogHandles
from .logfile import sync

# How long the thread about to fsync waits, while other threads are inside a write, for them to finish
# it so that the one fsync covers theirs too: well under the cost of an fsync, so a lone writer (who
# never waits) and a group both come out ahead. 0 turns the wait off.
GROUP_COMMIT_WAIT = 0.0005


class _Served(Protocol):
    """What the leader reads of the store it serves, and sets when an fsync fails."""

    generation: int  # moves on when the store follows a log that a compaction put in place
    end: int  # where the store's last frame ends
    _failed: BaseException | None

    def _drop_unsynced(self) -> None: ...


class GroupCommit:
    """The fsync leader of one store. A writer whose frame is committed calls sync_upto: the first to
    find no fsync running becomes the leader and runs one; the others wait for it, then for the next
    if it did not cover their frame. Under durability="batch", a background thread calls it instead."""

    def __init__(
        self, store: _Served, handles: LogHandles, index_lock: AbstractContextManager[Any],
        group_commit_wait: float | None,
    ) -> None:
        self.store = store
        self._handles = handles  # the store's, to fsync through the current log's descriptor
        self._index_lock = index_lock  # the store's: what a commit holds as it sets end and first_unsynced
        sync_lock = threading.RLock()
        self._sync_cond = threading.Condition(sync_lock)
        # The fsync leader's wait for writers in progress: same lock, so that a writer's last step
        # wakes only the leader, not every thread waiting for the fsync.
        self._writers_done = threading.Condition(sync_lock)
        self.writers = 0  # threads inside a write (from asking for the writer lock to their commit)
        # Where the frame of each thread in sync_upto ends (committed, waiting for an fsync to cover it),
        # and how many frames the last fsync covered: the writers its group served, most of which write
        # again at once. A thread counts as a writer only from asking for the writer lock, after its
        # write's preparation (checks, hashing), so a leader that looked at `writers` alone would often
        # find none of them yet (the last group's are still waking from its fsync) and fsync for itself.
        self._pending: list[int] = []
        self._last_group = 0
        self.group_commit_wait = GROUP_COMMIT_WAIT if group_commit_wait is None else float(group_commit_wait)
        self.fsyncs = 0  # fsyncs of the log by the commit path (group commit folds many writes into one)
        self._fsync_seconds = GROUP_COMMIT_WAIT  # how long one takes, averaged over the last few
        self._syncing = False
        self.synced_end = 0
        self.first_unsynced: int | None = None  # offset of our first frame not yet covered by an fsync
        self.foreign_after_unsynced = False  # another process appended after it
        self._batch_thread: threading.Thread | None = None
        self._stop = threading.Event()

    def sync_upto(self, end: int, generation: int | None = None) -> None:
        """One fsync covers every frame written before it started. `end` is an offset in the log of
        `generation`: once a compaction has replaced that log, the new one (fsynced before its rename)
        holds everything, and offsets into the old one mean nothing."""
        store = self.store
        gen = store.generation if generation is None else generation
        with self._sync_cond:
            self._pending.append(end)
            self._writers_done.notify()  # a leader waiting for its group counts this one in
            try:
                self._sync_through(end, gen)
            finally:
                self._pending.remove(end)

    def _uncovered(self) -> int:
        """How many threads in sync_upto wait for a frame no fsync has covered yet."""
        synced = self.synced_end
        return sum(1 for end in self._pending if end > synced)

    def _sync_through(self, end: int, gen: int) -> None:
        """sync_upto's loop, holding _sync_cond."""
        store = self.store
        while self.synced_end < end and store.generation == gen:
            if self._syncing:
                # Wait for the fsync running now, even one that fails: a failed fsync is over only
                # once it has dropped the frames it could not make durable, and no writer may
                # hear of the failure (and, say, close the store) before that.
                self._sync_cond.wait()
                continue
            if store._failed is not None:
                raise DurabilityError(f"fsync failed earlier: {store._failed}")
            self._syncing = True
            if self.group_commit_wait and (self.writers or self._uncovered() < self._last_group):
                self._wait_for_writers()
            self._last_group = self._uncovered()
            target, target_gen, handle = store.end, store.generation, self._handles.acquire()
            self.fsyncs += 1
            self._sync_cond.release()
            try:
                t0 = time.perf_counter()
                sync(handle.fd)
                # a moving average: what the leader's wait is measured against
                self._fsync_seconds += (time.perf_counter() - t0 - self._fsync_seconds) / 8
            except DurabilityError as exc:
                store._failed = exc
                store._drop_unsynced()
                raise
            finally:
                self._handles.release(handle)
                self._sync_cond.acquire()
                self._syncing = False
                self._sync_cond.notify_all()
            if store.generation == target_gen:  # else a reload has set synced_end for the new log
                # Under the index lock, as _commit sets end and first_unsynced: a frame being
                # committed right now must not count as synced before its end does.
                with self._index_lock:
                    self.synced_end = max(self.synced_end, target)
                    if self.synced_end >= store.end:
                        self.first_unsynced = None

    def _wait_for_writers(self) -> None:
        """The leader, about to fsync, gives threads inside a write, and the writers of the last group
        that have not committed their next write yet, up to group_commit_wait seconds to finish it, so
        that its fsync covers their frames too (without the wait, a writer finishing just after the fsync
        started waits for the next one, and groups stay small). Never longer than half of what an fsync
        has been taking: on a fast disk a long wait would cost more than the fsyncs it saves; a writer of
        the last group that stopped writing costs that much once, since the group then found is smaller.
        Called holding _sync_cond."""
        deadline = time.monotonic() + min(self.group_commit_wait, self._fsync_seconds / 2)
        while self.writers or self._uncovered() < self._last_group:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._writers_done.wait(left)

    def enter_write(self) -> None:
        with self._sync_cond:
            self.writers += 1

    def leave_write(self) -> None:
        with self._sync_cond:
            self.writers -= 1
            if not self.writers:
                self._writers_done.notify()

    def start_batch_syncer(self) -> None:
        """durability="batch": fsync in the background every BATCH_INTERVAL, until stop()."""
        self._batch_thread = threading.Thread(target=self._batch_syncer, daemon=True, name="mnemo-sync")
        self._batch_thread.start()

    def _batch_syncer(self) -> None:
        store = self.store
        while not self._stop.wait(BATCH_INTERVAL):
            gen, end = store.generation, store.end
            if self.synced_end < end and store._failed is None:
                with contextlib.suppress(DurabilityError):
                    self.sync_upto(end, gen)

    def stop(self) -> None:
        self._stop.set()
        if self._batch_thread is not None:
            self._batch_thread.join()
