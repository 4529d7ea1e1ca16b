"""The erasure journal (`DB.erase`) an earlier version of Mnemo wrote before it zeroed a forget's slots.
Mnemo writes none now, but still reads one such a version left (docs/FORMAT.md §4): this writes it as that
version did, sealed and put in place atomically, to make the logs it left."""

from __future__ import annotations

import hashlib

from mnemo.chain.codec import packb
from mnemo.storage.file.atomic import write_atomic
from mnemo.storage.file.snapshot import ERASE_MAGIC


def write_erase_journal(path: str, db_id: bytes, regions: list[tuple[int, int]], mode: int = 0o644) -> None:
    """The journal naming the slots `regions` (offset, length) of the database `db_id`, made with the
    log's bits `mode` less the umask."""
    data = ERASE_MAGIC + packb({"db_id": db_id, "regions": regions})
    write_atomic(path, data + hashlib.sha256(data).digest(), new_mode=mode)
