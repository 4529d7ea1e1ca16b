"""Files written whole or not at all: a temp file beside the target, fsync, rename, fsync of the folder.

Every file Mnemo writes in one piece (index snapshots, the erasure journal, audit exports, checkpoint
and witness notes) goes through `replacing`, so a reader sees the old file or the new one, never half,
and after a crash the new one is either there complete or not at all.

No link is ever written through: the temp file is made fresh (a leftover at its name, file or link, is
removed first, then it is created with O_CREAT|O_EXCL|O_NOFOLLOW), and the rename puts in place only
the file this process made (a temp name that no longer names it fails the write).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from typing import IO, TypeVar

from ..types import PathArg
from .logfile import fsync_dir, match_mode, sync, write_all

T = TypeVar("T")


@contextlib.contextmanager
def replacing(
    path: PathArg, *, tmp: str | None = None, durable: bool = True, mode: int | None = None, new_mode: int = 0o644
) -> Iterator[int]:
    """Yield the descriptor of a new temp file; when the block ends, put it in place of `path`.

    `tmp`: the temp file's name (default `path.tmp`). A fixed name is for callers that hold the
    writer lock, so that a writer opening after a crash knows which leftover to remove; callers
    without a lock pass a name of their own. `durable`: fsync the file before the rename and the
    folder after it (off only where the file can be rebuilt, as an index snapshot can). `mode`: the
    file's exact permission bits whatever the umask (a sidecar takes the log's); else `new_mode` less
    the umask (an export holding a database's content passes the database's bits). If the block
    raises, the temp file is removed (a part-written copy may hold what the log holds: never leave it
    behind) and `path` is untouched."""
    target = os.fspath(path)
    temp = f"{target}.tmp" if tmp is None else tmp
    fd = create_new(temp, 0o600 if mode is not None else new_mode, leftover=True)
    try:
        try:
            if mode is not None:
                match_mode(fd, mode)  # before a byte is written
            yield fd
            if durable:
                sync(fd)
            made = os.fstat(fd)
        finally:
            os.close(fd)
        rename_own(temp, target, made)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    if durable:
        fsync_dir(target)


def create_new(path: str, mode: int, *, leftover: bool = False) -> int:
    """A descriptor (write-only) of a new, empty regular file at `path`, made by this call with `mode`
    less the umask: never an existing file, nor one a link at `path` points to. `leftover`: the name is
    a temp file of this process's own (or a crashed run's), so whatever is there, file or link, is
    removed first and a crash never blocks the next write."""
    if leftover:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def check_own(temp: str, made: os.stat_result) -> None:
    """Raise OSError unless `temp` still names the file `made` describes (the one this process created
    and wrote): a link or another file put at the temp name meanwhile is never put into place."""
    try:
        now = os.lstat(temp)
    except FileNotFoundError:
        now = None
    if now is None or (now.st_ino, now.st_dev) != (made.st_ino, made.st_dev):
        raise OSError(errno.EEXIST, "the temporary file was replaced while it was written; nothing was "
                      "changed: check who else writes in this folder and try again", temp)


def rename_own(temp: str, target: str, made: os.stat_result) -> None:
    """Rename `temp` over `target` if it is still the file this process wrote (`check_own`)."""
    check_own(temp, made)
    os.replace(temp, target)


def write_atomic(
    path: PathArg, data: bytes, *, tmp: str | None = None, durable: bool = True, mode: int | None = None,
    new_mode: int = 0o644,
) -> None:
    """Replace `path` with `data` (see `replacing`); short writes are retried."""
    with replacing(path, tmp=tmp, durable=durable, mode=mode, new_mode=new_mode) as fd:
        write_all(fd, data, 0)


def write_text_atomic(
    path: PathArg, write: Callable[[IO[str]], T], *, tmp: str | None = None, new_mode: int = 0o644
) -> T:
    """Replace `path` with the UTF-8 text `write` writes to the stream it is given (newlines as
    `\\n` on every platform), durably, as a new file of `new_mode` less the umask; returns what `write`
    returns."""
    with (
        replacing(path, tmp=tmp, new_mode=new_mode) as fd,
        open(fd, "w", encoding="utf-8", newline="\n", closefd=False) as out,
    ):
        result = write(out)
    return result
