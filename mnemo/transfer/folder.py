"""A folder of text files, each to become the memory-tool file at the same relative path: the folder
the Anthropic SDK's `BetaLocalFilesystemMemoryTool` keeps (its `memories/` folder), a markdown vault, or
any folder of notes.

The walk never leaves the folder. It opens each folder and file relative to its parent's descriptor
with O_NOFOLLOW, so no symbolic link is followed, at any depth, even one swapped in during the walk;
symbolic links are reported as skipped. Special files (FIFOs, sockets, devices) are told apart by the
directory entry, and a file is opened with O_NONBLOCK and checked with fstat before it is read, so a
FIFO put in a file's place cannot block the import. Hidden names are skipped as the SDK's listing skips
them. Nothing is held but the folders being walked: each file is read when the import asks for it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Sequence

from mnemo.storage.file.reader import file_kind
from mnemo.tools.paths import DEFAULT_MAX_PATH_LENGTH
from mnemo.transfer.items import Skipped, SourceError, SourceFile, stat_source

__all__ = ["FolderSource", "kind_of", "open_beneath", "open_folder", "read_file"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

# anthropic's lib/tools/_beta_builtin_memory_tool.py (SDK 2.x): `view` leaves out every name that
# starts with "." (and does not descend into such folders), and `_atomic_write_file` writes through a
# temporary file named f".tmp-{os.getpid()}-{uuid.uuid4()}" beside its target before os.replace. A
# temporary file left by a crash is thus hidden too; it is named as such in the report.
_SDK_TEMP_PREFIX = ".tmp-"

# How deep the walk goes: a memory-tool path is at most DEFAULT_MAX_PATH_LENGTH characters, so it holds at
# most half as many folders (each a name and a `/`). Deeper folders hold nothing the tool could store, and
# the walk, one nested generator and one descriptor a level, is kept well within the interpreter's
# recursion limit (a tree of 3,000 levels failed with RecursionError).
MAX_DEPTH = DEFAULT_MAX_PATH_LENGTH // 2
TOO_DEEP_FOLDER = (f"a folder nested more than {MAX_DEPTH} levels deep: no memory-tool path is that deep (at most "
                   f"{DEFAULT_MAX_PATH_LENGTH} characters), so nothing in it is imported, or read")

kind_of = file_kind


def open_folder(path: str) -> int:
    """A descriptor of the folder `path` names (a link given here, by the person, is followed), or
    SourceError saying why it cannot be imported."""
    st = stat_source(path)
    if not stat.S_ISDIR(st.st_mode):
        kind = "a file" if stat.S_ISREG(st.st_mode) else kind_of(st.st_mode)
        raise SourceError(f"cannot import {path} as a folder: it is {kind}, not a folder")
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SourceError(f"cannot import {path}: {exc.strerror or exc}") from None


def open_beneath(top: str, parts: Sequence[str]) -> int:
    """A descriptor of the folder `top`/`parts`...: `top` opened as open_folder opens it (a link there is
    followed: a person named it), and each of `parts` below it with O_NOFOLLOW, so that no link below
    `top` is followed, even one swapped in meanwhile. OSError (ELOOP, ENOTDIR) where a part is a link."""
    fd = open_folder(top)
    try:
        for part in parts:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


class _NotRegular(OSError):
    """A name that was a file when listed is something else when opened."""


def read_file(name: str, dir_fd: int, limit: int) -> bytes | int:
    """The bytes of the regular file `name` in the folder `dir_fd`, or its size when that is over
    `limit` (then nothing is read). Never follows a link; never blocks on a FIFO."""
    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _NotRegular(0, f"it is {kind_of(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            return st.st_size
        chunks = []
        size = 0
        while True:  # a file that grew since fstat is read to its end, or to just past the limit
            chunk = os.read(fd, max(st.st_size - size, 0) + 1 if size <= st.st_size else 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return size
        return b"".join(chunks)
    finally:
        os.close(fd)


class _Dir:
    """A folder being walked: its descriptor while the walk is inside it, then None."""

    __slots__ = ("fd", "parts")

    def __init__(self, fd: int, parts: tuple[str, ...]) -> None:
        self.fd: int | None = fd
        self.parts = parts


class FolderSource:
    """Every file of a folder, at its path relative to the folder (below `prefix`, if given)."""

    format = "folder"
    default_into = ""

    def __init__(self, path: str | os.PathLike[str], prefix: str = "", top: str | None = None,
                 below: Sequence[str] = ()) -> None:
        """`path` is the folder, followed if it is a link (a person named it); or, with `top`, the folder
        `top`/`below`..., of which only `top` is followed if it is a link (a folder a person named, and
        the names Claude Code gives below it: a link there is never followed)."""
        self.path = os.fspath(path)
        self.label = self.path
        self.prefix = prefix.strip("/")
        self.top, self.below = top, tuple(below)

    def _open_root(self) -> int:
        """A descriptor of the folder, or SourceError saying why it cannot be imported."""
        if self.top is None:
            return open_folder(self.path)
        try:
            return open_beneath(self.top, self.below)
        except OSError as exc:
            raise SourceError(f"cannot import {self.path}: {exc.strerror or exc}") from None

    def scan(self) -> Iterator[SourceFile | Skipped]:
        root = _Dir(self._open_root(), ())
        try:
            yield from self._walk(root)
        finally:
            assert root.fd is not None
            os.close(root.fd)
            root.fd = None

    def count(self) -> int:
        """How many files the walk will offer (for a progress bar): a walk of the names alone."""
        try:
            root = self._open_root()
        except SourceError:
            return 0
        stack, found = [root], 0
        try:
            while stack:
                fd = stack.pop()
                try:
                    with os.scandir(fd) as entries:
                        for entry in entries:
                            if entry.name.startswith(".") or entry.is_symlink():
                                continue
                            if entry.is_dir(follow_symlinks=False):
                                with contextlib.suppress(OSError):
                                    stack.append(os.open(entry.name, _DIR_FLAGS, dir_fd=fd))
                            elif entry.is_file(follow_symlinks=False):
                                found += 1
                except OSError:
                    pass
                finally:
                    os.close(fd)
        finally:
            for fd in stack:
                os.close(fd)
        return found

    def _origin(self, parts: tuple[str, ...]) -> str:
        return os.path.join(self.path, *parts)

    def _walk(self, folder: _Dir) -> Iterator[SourceFile | Skipped]:
        assert folder.fd is not None
        try:
            entries = sorted(os.scandir(folder.fd), key=lambda e: e.name)
        except OSError as exc:
            yield Skipped(self._origin(folder.parts) + "/", f"unreadable folder: {exc.strerror or exc}")
            return
        if not entries and folder.parts:
            yield Skipped(self._origin(folder.parts) + "/",
                          "an empty folder: the memory tool's folders exist only through the files in them")
        for entry in entries:
            name = entry.name
            parts = (*folder.parts, name)
            origin = self._origin(parts)
            if name.startswith("."):
                yield Skipped(origin, _hidden(name, entry.is_dir(follow_symlinks=False)))
                continue
            if entry.is_symlink():
                yield Skipped(origin, "a symbolic link: links are never followed out of (or within) the folder")
                continue
            if entry.is_dir(follow_symlinks=False):
                if len(parts) > MAX_DEPTH:
                    yield Skipped(origin + "/", TOO_DEEP_FOLDER)
                    continue
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=folder.fd)
                except OSError as exc:
                    yield Skipped(origin + "/", f"unreadable folder: {exc.strerror or exc}")
                    continue
                inner = _Dir(fd, parts)
                try:
                    yield from self._walk(inner)
                finally:
                    inner.fd = None
                    os.close(fd)
                continue
            if not entry.is_file(follow_symlinks=False):
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    mode = 0
                yield Skipped(origin, f"{kind_of(mode)}: only regular files are imported, and this one is never opened")
                continue
            rel = "/".join((self.prefix, *parts) if self.prefix else parts)
            yield SourceFile(rel, origin, _Reader(folder, name, self))


def _hidden(name: str, is_dir: bool) -> str:
    if name.startswith(_SDK_TEMP_PREFIX):
        return "a temporary file of the SDK's filesystem memory tool (.tmp-PID-UUID), left by an unfinished write"
    what = "a hidden folder (nothing in it is imported)" if is_dir else "a hidden file"
    return f"{what}: its name starts with '.', and the SDK's filesystem memory tool lists no such name"


class _Reader:
    """`SourceFile.read` of one file: a small object rather than a closure, since a scan keeps one for
    each of possibly 100,000 files."""

    __slots__ = ("folder", "name", "source")

    def __init__(self, folder: _Dir, name: str, source: FolderSource) -> None:
        self.folder, self.name, self.source = folder, name, source

    def __call__(self, limit: int) -> bytes | int:
        if self.folder.fd is not None:  # during the walk: beside the entry just listed
            return read_file(self.name, self.folder.fd, limit)
        # Read again after the walk: down from the folder's path, one O_NOFOLLOW step at a time.
        fds = [self.source._open_root()]
        try:
            for part in self.folder.parts:
                fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
            return read_file(self.name, fds[-1], limit)
        finally:
            for fd in fds:
                os.close(fd)
