"""The writer context, written once for both backends: what a store's `writing()` returns.

Entering it inside this thread's open batch yields that batch and does nothing else. Otherwise it checks
that the store may write, counts the thread among the writers in progress, takes this process's writer
lock (one writer thread at a time, `lock_timeout` at most) and lets the backend begin its batch; leaving
it lets the backend commit what the body staged (or drop it, if the body raised or staged nothing) and
release what it holds, then releases the writer lock and the count, and, under durability="fsync", waits
until the commit is durable. Each backend's subclass gives those steps of its own (`_starts`, `_begin`,
`_end`, `_ends`, `_durable`).

A class rather than a generator: every write enters one, and a plain __enter__/__exit__ pair costs a
fraction of contextlib's machinery.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import LockTimeout
from .guards import StoreGuards

if TYPE_CHECKING:
    from .batch import Batch


def hold_writer_lock(store: StoreGuards) -> None:
    """Take the store's writer lock (one writer thread of this process at a time), lock_timeout at most."""
    # (positional: RLock.acquire parses a keyword argument at four times the cost of the lock)
    if not store._mutex.acquire(True, store.lock_timeout):
        raise LockTimeout(f"another thread held the writer lock for over {store.lock_timeout} s")


StoreT = TypeVar("StoreT", bound=StoreGuards)
DoneT = TypeVar("DoneT")


class WriterContext(ABC, Generic[StoreT, DoneT]):
    """A store's writing() context: one batch, begun under the writer lock and committed as one frame
    (or one transaction) when the body ends. `DoneT` is what a commit leaves the wait for durability."""

    __slots__ = ("store", "transactional", "batch")

    def __init__(self, store: StoreT, transactional: bool) -> None:
        self.store = store
        self.transactional = transactional  # the body reads its own staged writes (see Batch)
        self.batch: Batch | None = None  # None: nested in an open batch, which commits at its own end

    def __enter__(self) -> Batch:
        store = self.store
        outer = store._local.batch  # (current_batch())
        if outer is not None:
            return outer
        store.check_writable()
        self._starts()
        try:
            deadline = time.monotonic() + store.lock_timeout
            hold_writer_lock(store)
            try:
                batch = self._begin(deadline)
            except BaseException:
                store._mutex.release()
                raise
        except BaseException:
            self._ends()
            raise
        store._local.batch = self.batch = batch
        return batch

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        batch = self.batch
        if batch is None:
            return
        store = self.store
        store._local.batch = None
        done: DoneT | None = None
        try:
            done = self._end(batch, exc_type is None and bool(batch.staged))
        finally:
            store._mutex.release()
            self._ends()
        if done is not None and store.durability == "fsync":
            self._durable(done)

    # -- the backend's steps ---------------------------------------------------------------------------
    def _starts(self) -> None:
        """The thread is now a writer in progress (before it asks for the writer lock)."""

    def _ends(self) -> None:
        """The thread is no longer a writer in progress (its commit is made, or it gave up)."""

    @abstractmethod
    def _begin(self, deadline: float) -> Batch:
        """The batch, begun holding the writer lock: whatever else the backend holds taken by `deadline`
        (time.monotonic()) at the latest, the store caught up with what others committed."""

    @abstractmethod
    def _end(self, batch: Batch, commit: bool) -> DoneT | None:
        """Commit the batch (`commit`) or drop it, and release what _begin took besides the writer lock;
        what the commit leaves for _durable, or None when nothing was committed."""

    @abstractmethod
    def _durable(self, done: DoneT) -> None:
        """Return once the commit `done` is durable (durability="fsync")."""
