"""Writing a whole chain into a new database, entry for entry, on either backend: what `mnemo copy`,
`mnemo backup` and `mnemo restore` do. The entries keep their exact bytes (and so every hash, the head
and every proof); payloads are copied as they are, except that a version whose record a forget names is
copied without its payload, so a forgotten record stays erased in the copy even where the source still
had its erasure pending."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator

from ..chain.codec import ZERO_HASH
from ..errors import IntegrityError, InvalidInput
from .contract import Storage
from .file.chain_import import write_chain as write_file
from .file.logfile import NEW_DB_MODE
from .types import ChainItem, Progress, is_dsn


def linked(items: Iterable[ChainItem], source: str) -> Iterator[ChainItem]:
    """The items, checked to be one chain from genesis: seqs from 0 without a gap, each entry's prev
    the hash of the one before it, the first a genesis. IntegrityError at the first that is not."""
    prev = ZERO_HASH
    expected = 0
    for item in items:
        e = item.entry
        if e.seq != expected or e.prev != prev or (e.seq == 0) != (e.op == "genesis"):
            raise IntegrityError(f"{source}: the chain breaks at seq {e.seq} (expected seq {expected} linking to "
                                 f"{prev.hex()[:12]}): run `mnemo verify` on it")
        yield item
        prev, expected = e.hash, expected + 1


def chain_of(store: Storage) -> tuple[list[int], Iterator[ChainItem]]:
    """([last seq], items) of a backend's chain as it is now, payloads of forgotten records left out."""
    pending: dict[str, list[int]] = {}
    forgotten: set[int] = set()
    last = -1
    for item in store.log():
        e = item.entry
        last = e.seq
        if e.op == "put":
            pending.setdefault(e.body["id"], []).append(e.seq)
        elif e.op == "forget":
            for rec_id in e.body["ids"]:
                forgotten.update(pending.pop(rec_id, ()))

    def items() -> Iterator[ChainItem]:
        for item in store.log(payloads=True):
            e = item.entry
            if e.seq > last:
                return
            if item.state == "bad":
                raise IntegrityError(f"{store.path}: the payload of seq {e.seq} is damaged: run `mnemo verify`")
            keep = item.state == "ok" and e.seq not in forgotten
            yield ChainItem(e, item.payload if keep else None)

    return [last], items()


def copy_mode(store: Storage) -> int:
    """The permission bits a file copy of `store` is made with: a file database's own (a copy is never
    readable by more than its source), else those of a new database."""
    if is_dsn(store.path):
        return NEW_DB_MODE
    return stat.S_IMODE(os.stat(store.path).st_mode)


def write_chain(destination: str, items: Iterable[ChainItem], progress: Progress | None = None,
                total: int = 0, mode: int = NEW_DB_MODE) -> None:
    """Create the database `destination` (a file path or a postgresql:// URI) holding exactly these
    entries. It must not exist yet; nothing is left behind if the chain turns out broken. A file is
    made with the permission bits `mode` less the umask."""
    if not isinstance(destination, str) or not destination:
        raise InvalidInput("the destination must be a file path or a postgresql:// URI")
    checked = linked(items, "the source")
    if is_dsn(destination):
        from .postgres.chain_import import write_chain as write_pg  # noqa: PLC0415 - psycopg, an optional dependency

        write_pg(destination, checked, progress, total)
    else:
        write_file(destination, checked, progress, total, mode)


__all__ = ["ChainItem", "chain_of", "copy_mode", "linked", "write_chain"]
