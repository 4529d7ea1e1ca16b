"""Files written whole or not at all: a temp file beside the target, fsync, rename, fsync of the folder.

Every file Mnemo writes in one piece (index snapshots, the erasure journal, audit exports, checkpoint
and witness notes) goes through `replacing`, so a reader sees the old file or the new one, never half,
and after a crash the new one is either there complete or not at all.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import IO, TypeVar

from ..types import PathArg
from .logfile import fsync_dir, match_mode, sync, write_all

T = TypeVar("T")


@contextlib.contextmanager
def replacing(path: PathArg, *, tmp: str | None = None, durable: bool = True, mode: int | None = None) -> Iterator[int]:
    """Yield the descriptor of a new temp file; when the block ends, put it in place of `path`.

    `tmp`: the temp file's name (default `path.tmp`). A fixed name is for callers that hold the
    writer lock, so that a writer opening after a crash knows which leftover to remove; callers
    without a lock pass a name of their own. `durable`: fsync the file before the rename and the
    folder after it (off only where the file can be rebuilt, as an index snapshot can). `mode`: the
    file's exact permission bits whatever the umask (a sidecar takes the log's); by default 0o644
    less the umask. If the block raises, the temp file is removed (a part-written copy may hold what
    the log holds: never leave it behind) and `path` is untouched."""
    target = os.fspath(path)
    temp = f"{target}.tmp" if tmp is None else tmp
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else 0o600)
    try:
        try:
            if mode is not None:
                match_mode(fd, mode)  # before a byte is written; an older temp file kept its own mode
            yield fd
            if durable:
                sync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    if durable:
        fsync_dir(target)


def write_atomic(
    path: PathArg, data: bytes, *, tmp: str | None = None, durable: bool = True, mode: int | None = None
) -> None:
    """Replace `path` with `data` (see `replacing`); short writes are retried."""
    with replacing(path, tmp=tmp, durable=durable, mode=mode) as fd:
        write_all(fd, data, 0)


def write_text_atomic(path: PathArg, write: Callable[[IO[str]], T], *, tmp: str | None = None) -> T:
    """Replace `path` with the UTF-8 text `write` writes to the stream it is given (newlines as
    `\\n` on every platform), durably; returns what `write` returns."""
    with replacing(path, tmp=tmp) as fd, open(fd, "w", encoding="utf-8", newline="\n", closefd=False) as out:
        result = write(out)
    return result
