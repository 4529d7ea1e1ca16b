"""The chain of a database named by a path or a postgresql:// URI, for the auditor's commands (verify,
log, audit export), which read a database without acting as any agent: a log file is read as a file
(mnemo.storage.file.reader), PostgreSQL through its backend, read-only."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..storage import open_storage
from ..storage.contract import LogItem, Storage, is_dsn
from ..storage.file.reader import read_log


@contextlib.contextmanager
def open_readonly(db: str) -> Iterator[Storage]:
    """A PostgreSQL database opened read-only, as no agent in particular (the chain needs none)."""
    store = open_storage(db, "", readonly=True)
    try:
        yield store
    finally:
        store.close()


def read_chain(db: str, payloads: bool = False) -> Iterator[LogItem]:
    """Every entry of the database in order, read strictly (damage raises IntegrityError)."""
    if is_dsn(db):
        with open_readonly(db) as store:
            yield from store.log(payloads=payloads)
        return
    for item in read_log(db, payloads=payloads):
        yield LogItem(item.entry, item.slot.state, item.payload, item.offset)


__all__ = ["open_readonly", "read_chain"]
