"""Storage: the contract the client builds on (contract, types, batch) over the chain (mnemo.chain), and
its backends: the embedded log file (file) and PostgreSQL (postgres). `open_storage` picks one by name."""

from __future__ import annotations

from ..recall.embedding import Embedder
from .contract import Storage, is_dsn
from .file import FileStore


def open_storage(
    name: str, agent: str, *, readonly: bool = False, durability: str = "fsync", lock_timeout: float = 10.0,
    group_commit_wait: float | None = None, embedder: Embedder | None = None, reindex: bool = False,
) -> Storage:
    """Open (creating if needed, unless readonly) the database `name`: a `postgresql://` or
    `postgres://` URI selects PostgreSQL, anything else is a file path. `group_commit_wait` (seconds,
    file backend; None for its default) is how long a thread about to fsync waits for writes in progress
    to join it; PostgreSQL groups commits in the server. `embedder`: what makes the vectors of semantic
    recall (EmbedderMismatch if the database's were made by another, unless `reindex`: they are to be
    made again)."""
    if is_dsn(name):
        from .postgres import open_postgres  # noqa: PLC0415 - psycopg, an optional dependency

        return open_postgres(name, agent, readonly=readonly, durability=durability, lock_timeout=lock_timeout,
                             embedder=embedder, reindex=reindex)
    return FileStore(
        name, agent, readonly=readonly, durability=durability, lock_timeout=lock_timeout,
        group_commit_wait=group_commit_wait, embedder=embedder, reindex=reindex,
    )


__all__ = ["Storage", "is_dsn", "open_storage"]
