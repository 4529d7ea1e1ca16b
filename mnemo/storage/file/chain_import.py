"""A new log file written from a whole chain (mnemo.storage.chain_copy): frames of many entries each,
written to a temp file, fsynced, then linked into place, so that the database appears whole or not at
all, and never over an existing one."""

from __future__ import annotations

import os
from collections.abc import Iterable

from ...errors import InvalidInput, MnemoError
from ..types import ChainItem, Progress
from . import snapshot as snap
from .atomic import check_own, create_new
from .framing import encode_file_header, encode_frame
from .logfile import NEW_DB_MODE, fsync_dir, sync, write_all

FRAME_ENTRIES = 512
FRAME_BYTES = 4 << 20


def write_chain(
    path: str, items: Iterable[ChainItem], progress: Progress | None = None, total: int = 0, mode: int = NEW_DB_MODE
) -> None:
    """Write the new log at `path` with permission bits `mode` less the umask (a copy of a file takes
    its source's bits: never readable by more than the database it copies)."""
    if os.path.lexists(path):
        raise InvalidInput(f"{path} already exists: a copy is written only to a new database")
    tmp = f"{path}.new{os.getpid()}-copy"
    fd = create_new(tmp, mode, leftover=True)  # a name of this process's own: a leftover is a dead run's
    try:
        try:
            offset = 0
            group: list[tuple[bytes, bytes | None]] = []
            size = 0

            def flush() -> None:
                nonlocal offset, size
                if group:
                    data = encode_frame(group)
                    write_all(fd, data, offset)
                    offset += len(data)
                    group.clear()
                    size = 0

            for done, item in enumerate(items, 1):
                e = item.entry
                if e.seq == 0:
                    db_id = e.body.get("db_id")
                    if not (isinstance(db_id, bytes) and len(db_id) == 16):
                        raise MnemoError("the source's genesis names no db_id")
                    header = encode_file_header(db_id)
                    write_all(fd, header, 0)
                    offset = len(header)
                group.append((e.raw, item.payload))
                size += len(e.raw) + len(item.payload or b"")
                if len(group) >= FRAME_ENTRIES or size >= FRAME_BYTES or e.seq == 0:
                    flush()
                    if progress is not None:
                        progress(done, total)
            flush()
            if offset == 0:
                raise MnemoError("the source holds no entries")
            sync(fd)
            made = os.fstat(fd)
        finally:
            os.close(fd)
        check_own(tmp, made)  # link() puts a link itself in place: only this file may go there
        os.link(tmp, path)  # fails if the path was taken meanwhile
        fsync_dir(path)
    finally:
        snap.remove(tmp)


__all__ = ["write_chain"]
