"""The database as a whole: copied entry for entry into a new one, compacted, counted, and its
semantic recall's vectors made again (`reindex`). Each needs admin on `*` but `stats`, whose counts
cover only what this agent may read."""

from __future__ import annotations

import os
from typing import Any

from ..acl import check_agent_id
from ..errors import Closed, IntegrityError, PermissionDenied
from ..recall.embedding import Embedder, check_embedder
from ..record import VerifyReport
from ..storage import open_storage
from ..storage.chain_copy import chain_of, copy_mode, write_chain
from ..storage.contract import Progress
from .audit import verify
from .core import ClientCore, close


def copy_to(self: ClientCore, destination: str | os.PathLike[str], progress: Progress | None = None) -> VerifyReport:
    """Write this database, entry for entry, into a new one (a file path or a postgresql:// URI, on
    either backend), and return the destination's verify report: its head is this one's as of the
    copy. Payloads of forgotten records are not copied. Needs admin on `*`: the copy holds every
    scope. The source may be written to meanwhile; the copy is a consistent prefix of its chain."""
    self._store.refresh()
    self._require_everything(self._acl(), "copy the database")
    target = os.fspath(destination)
    last, items = chain_of(self._store)
    write_chain(target, items, progress, last[0] + 1, copy_mode(self._store))
    copy = ClientCore(target, self.agent_id, readonly=True)
    try:
        report = verify(copy)
    finally:
        close(copy)
    if report.head_seq != last[0]:
        raise IntegrityError(f"the copy at {target} ends at seq {report.head_seq}, not at {last[0]}")
    return report


def compact(self: ClientCore) -> dict[str, int]:
    """Rewrite the log without erased payload bytes; returns sizes before and after. On PostgreSQL
    it first waits, lock_timeout at most, for the transactions older than the call, which could still
    see the erased rows (else LockTimeout names them: docs/POSTGRES.md)."""
    self._store.check_writable()
    self._require_everything(self._acl(), "compact")
    return self._store.compact()


def stats(self: ClientCore) -> dict[str, Any]:
    """Counts and sizes, for humans and monitoring. Counts cover only what this agent may read; the
    figures of the whole log (entries, head, log_bytes) are None unless it holds admin on `*`, since
    they change with every write in every scope."""
    store = self._store
    if store.closed:
        raise Closed("the client is closed")
    store.refresh()
    # Counts cover only what this agent may read, so they do not reveal other scopes.
    everything = self._acl().allows(self.agent_id, "admin", "*")
    records, versions, tags = store.counts(self._scopes())
    seq, head = store.head()
    info = store.info()
    log_bytes = info.pop("log_bytes", None)
    return {
        "path": store.path,
        "db_id": store.db_id.hex(),
        "agent_id": self.agent_id,
        "entries": seq + 1 if everything else None,
        "head_seq": seq if everything else None,
        "head_hash": head.hex() if everything else None,
        "records": records,
        "versions": versions,
        "tags": tags,
        "log_bytes": log_bytes if everything else None,
        **info,
        "durability": store.durability,
        "readonly": store.readonly,
        "recovery": list(store.recovery),
    }


def reindex(
    db_path: str | os.PathLike[str], agent_id: str, embedder: Embedder | str = "local",
    progress: Progress | None = None,
) -> int:
    """Make every live record's vector again with `embedder`, whatever made the ones the database holds
    (an open with another embedder is refused until then: EmbedderMismatch), and return how many were
    made. `progress(done, total)` is called as they are. Needs admin on `*`: the vectors of every scope
    are made."""
    check_agent_id(agent_id, "agent_id")
    chosen = check_embedder(embedder)
    store = open_storage(os.fspath(db_path), agent_id, embedder=chosen, reindex=True)
    try:
        store.refresh()
        if not store.acl().allows(agent_id, "admin", "*"):
            raise PermissionDenied(f"{agent_id} may not rebuild the vectors: it needs admin on *")
        return store.reindex(progress)
    finally:
        store.close()
