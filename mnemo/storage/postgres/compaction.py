"""PostgresStore's part that compacts: the tables that held erased bytes rewritten (VACUUM FULL, CLUSTER), so
that no file of the database keeps a forgotten record's bytes, once every snapshot that could still see
them has ended (horizon.py); docs/POSTGRES.md, "Forgetting on PostgreSQL"."""

from __future__ import annotations

import contextlib

import psycopg
from psycopg import errors as pg_errors

from ...errors import MnemoError, StorageError
from . import horizon
from .commit import BatchView, Commits
from .errors import storage_error
from .vectors import PRUNE


class Compaction(Commits):
    """compact(): the rewrite of the tables, as a writer."""

    def compact(self) -> dict[str, int]:
        """Rewrite the tables that held erased bytes (payloads, records, which hold their latest payload's
        copy, and tags by VACUUM FULL, the text index's
        terms by CLUSTER, in term order; with their TOAST tables and indexes): each is rewritten into new
        files and the old ones are removed, so that no file of the database keeps the bytes of a forgotten
        record's dead rows; then VACUUM the terms, whose rewrite left them no visibility map. Needs the
        tables' owner."""
        if self.current_batch() is not None:
            raise MnemoError("compact() cannot run inside a transaction")
        self.check_writable()
        # the bytes of the tables' pages, with their TOAST tables and indexes: not their visibility and
        # free space maps, which the VACUUM of the terms below makes and a rewrite leaves out
        size = (
            "WITH r AS (SELECT to_regclass(t)::oid AS oid FROM unnest(%s::text[]) t WHERE to_regclass(t) IS NOT NULL), "
            "w AS (SELECT oid FROM r UNION SELECT c.reltoastrelid FROM pg_class c JOIN r USING (oid) "
            "WHERE c.reltoastrelid <> 0) "
            "SELECT coalesce(sum(pg_relation_size(x.oid)), 0) FROM (SELECT oid FROM w "
            "UNION SELECT i.indexrelid FROM pg_index i JOIN w ON i.indrelid = w.oid) x"
        )
        # each rewritten table, by the command that rewrites it: the terms in term order, so that a term's
        # postings are together (CLUSTER is VACUUM FULL's rewrite, in an index's order)
        rewrites = {"mnemo_payloads": ("VACUUM FULL", "VACUUM (FULL) mnemo_payloads"),
                    "mnemo_records": ("VACUUM FULL", "VACUUM (FULL) mnemo_records"),
                    "mnemo_tags": ("VACUUM FULL", "VACUUM (FULL) mnemo_tags"),
                    "mnemo_terms": ("CLUSTER", "CLUSTER mnemo_terms USING mnemo_terms_term"),
                    "mnemo_vectors": ("VACUUM FULL", "VACUUM (FULL) mnemo_vectors")}
        rewritten = list(rewrites)
        tables = [*rewritten, "mnemo_versions", "mnemo_docs"]
        owned = self._fetch(
            "SELECT bool_and(pg_has_role(current_user, c.relowner, 'USAGE')) FROM pg_class c "
            "WHERE c.oid = ANY(ARRAY(SELECT to_regclass(t) FROM unnest(%s::text[]) t))", [rewritten]
        )
        if not (owned and owned[0][0]):
            # VACUUM would skip the tables with a warning only: the erased bytes would stay in their files
            raise StorageError(
                f"compacting {self.path} rewrites its tables (VACUUM FULL), which only their owner may do: "
                "run it with the owner's connection (see docs/POSTGRES.md)"
            )
        # A writer, as on the file: this process's writer lock and the head row are held throughout (on
        # the writer's connection: VACUUM cannot run inside a transaction), so that every commit is
        # either wholly before the compaction or after it.
        self._hold_writer_lock()
        try:
            # The rewrite keeps every row an open snapshot may still see: first wait (lock_timeout at
            # most) for those older than now, so that the erased rows are dead to all (horizon.py).
            own = [c.info.backend_pid for c in (self._read, self._write, self._sync) if c is not None and not c.closed]
            xid = horizon.horizon(self._fetch)
            horizon.wait_for_older(self._fetch, xid, own, self.lock_timeout, self.path)
            writer = self._begin(transactional=False).base
            try:
                before = int(self._fetch(size, [tables])[0][0])
                with self._read_lock:
                    conn = self._reads()
                    conn.execute(self._lock_timeout_setting)
                    try:
                        # the departures every client has read or will read again whole (vectors.py)
                        conn.execute(PRUNE)
                        for table, (command, statement) in rewrites.items():
                            try:
                                conn.execute(statement)
                            except pg_errors.LockNotAvailable:
                                raise horizon.held(self._fetch, table, self.lock_timeout, self.path,
                                                   command) from None
                    finally:  # the read connection's later reads wait as long as they always did
                        with contextlib.suppress(psycopg.Error):
                            conn.execute("RESET lock_timeout")
                after = int(self._fetch(size, [tables])[0][0])
                # the rewritten terms' visibility map (a rewrite leaves none), so that recall reads their
                # postings from the index alone (schema/v5_v8.py, version 8); an autovacuum of them at work
                # (SKIP_LOCKED) sets it itself
                with self._read_lock:
                    self._reads().execute("VACUUM (SKIP_LOCKED) mnemo_terms")
            except psycopg.Error as exc:
                raise storage_error(exc, self.path) from None
            finally:
                assert isinstance(writer, BatchView) and writer.conn is not None
                with contextlib.suppress(psycopg.Error):
                    writer.conn.rollback()
        finally:
            self._mutex.release()
        return {"bytes_before": before, "bytes_after": after, "reclaimed": before - after}


__all__ = ["Compaction"]
