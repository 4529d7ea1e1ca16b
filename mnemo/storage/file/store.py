"""The embedded backend: one log file, its indexes, the single-writer commit path, recovery and erasure.

`FileStore` implements the storage contract (mnemo/storage/contract.py): `writing()` yields a Batch to
stage entries in, committed as one frame; `refresh()` catches up with frames other processes appended;
reads look records up in the in-memory index and read their payload slots from the log, checked
against the chain.

This module puts the store together from its parts (see state.py), opens and closes it, and checks it
against its log (verify); each part's job is in the module it is named after.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from ...errors import DurabilityError, EmbedderMismatch, MnemoError
from ...recall.embedding import Embedder
from ...record import Problem
from ..gc_pause import gc_paused, release_freed_memory
from ..types import DURABILITY_MODES, Progress, check_durability, check_group_commit_wait
from .commit import Writes
from .compaction import Compaction
from .index_diff import differences
from .index_snapshot import SnapshotRefused, Snapshots, acl_from_frames, load_snapshot
from .opening import Opening
from .replay import Replay
from .search import Search
from .verify import verify_db_and_scanned_index

# A replay of at least this many records gives the heap it freed back to the system.
REPLAY_TRIM_ROWS = 10_000

if TYPE_CHECKING:
    from ...chain.rules import ExpectedIndex
    from ...record import VerifyReport


class FileStore(Search, Writes, Compaction, Snapshots, Replay, Opening):
    def __init__(
        self, path: str, agent: str, *, readonly: bool = False, durability: str = "fsync",
        lock_timeout: float = 10.0, create: bool = True, use_snapshot: bool = True,
        group_commit_wait: float | None = None, embedder: Embedder | None = None, reindex: bool = False,
    ) -> None:
        check_durability(durability)
        check_group_commit_wait(group_commit_wait)
        super().__init__(path, agent, readonly, durability, lock_timeout, use_snapshot, group_commit_wait)
        self.embedder = embedder
        try:
            t0 = time.perf_counter()
            with gc_paused():
                self._open(create)
            if not self.snapshot_used and len(self.index) >= REPLAY_TRIM_ROWS:
                release_freed_memory()  # the temporaries of a large replay
            self.open_seconds = time.perf_counter() - t0
        except OSError as exc:
            self._close_files()
            raise MnemoError(f"cannot open the database at {path}: {exc.strerror or exc}") from exc
        except BaseException:
            self._close_files()
            raise
        if embedder is not None and self.index.vectors is not None:
            if reindex:
                self.index.vectors = None  # made again by reindex(), with this embedder
            else:
                try:
                    self.index.vectors.check(embedder)
                except EmbedderMismatch:
                    self._close_files()
                    raise
        if durability == "batch" and not readonly:
            self._group.start_batch_syncer()

    @property
    def fsyncs(self) -> int:
        """fsyncs of the log by the commit path (group commit folds many writes into one)."""
        return self._group.fsyncs

    def verify(
        self, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None = None,
        embeddings: str = "check",
    ) -> VerifyReport:
        """The file checked end to end (audit.verify_db), then the index this store serves compared with
        what that pass over the file says it must hold."""
        self.refresh()
        report, expected = verify_db_and_scanned_index(self.path, pubkey=pubkey, expect_head=expect_head)
        if not report.ok:
            return report
        self.refresh()  # (others may have appended while the file was read)
        problems = [
            Problem("index", f"{msg}: the index snapshot was altered")
            for msg in self.index_differences(expected, recompute=embeddings == "recompute")
        ]
        if self.snapshot_refused is not None:
            problems.append(Problem(
                "snapshot", f"the index snapshot ends at this log's head but was refused ({self.snapshot_refused}): "
                "it was altered; this client replayed the log instead"
            ))
        if problems:
            return dataclasses.replace(report, ok=False, problems=report.problems + tuple(problems))
        return report

    def persist(self) -> None:
        self.save_snapshot()

    def info(self) -> dict[str, Any]:
        return {
            "log_bytes": self.end,
            "snapshot_used": self.snapshot_used,
            "open_seconds": self.open_seconds,
        }

    def index_differences(self, expected: ExpectedIndex | None = None, recompute: bool = False) -> list[str]:
        """How the index this store serves differs from what the log says, one line per difference: a
        snapshot that was altered and re-sealed shows up here, since the log is the only truth.

        `expected` is what audit.verify_db_and_index gathered from the log in its one pass over it; it
        is compared with when it ends at the index's head. Otherwise (or without it) the log is
        replayed into a fresh index to compare with, unless others appended meanwhile. `recompute`: every
        vector embedded again (else a sample: vector_differences)."""
        if expected is not None:
            with self._index_lock:
                index = self.index
                if (index.head_seq, index.head_hash) == (expected.head_seq, expected.head_hash):
                    with gc_paused():
                        found = differences(index, expected) + index.posting_differences()
                        return found or self.text_differences() or self.vector_differences(recompute)
        fresh = FileStore(self.path, self.agent, readonly=True, use_snapshot=False)
        try:
            with self._index_lock:
                mine, theirs = self.index, fresh.index
                if fresh.end > self.end:
                    return []  # others appended meanwhile; compare again when quiet
                found = mine.differences(theirs) + mine.posting_differences()
                return found or self.text_differences() or self.vector_differences(recompute)
        finally:
            fresh.close()

    def close(self) -> None:
        if self.closed:
            return
        self._group.stop()
        try:
            if self._failed is None and not self.readonly and self.durability != "none":
                with contextlib.suppress(DurabilityError):
                    self._group.sync_upto(self.end)
            if self._dirty_snapshot and self._failed is None and not self.readonly:
                with contextlib.suppress(MnemoError, OSError):
                    self.save_snapshot()
        finally:
            self.closed = True
            self._close_files()

    def _close_files(self) -> None:
        if self.tree is not None:
            self.tree.close()
            self.tree = None
        self._unlock()
        self._handles.close_all()


__all__ = ["DURABILITY_MODES", "FileStore", "SnapshotRefused", "acl_from_frames", "load_snapshot"]
