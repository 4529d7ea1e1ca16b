"""An export: what an agent may read, as plain files in a new folder.

Layout (docs/TRANSFER.md): the memory-tool files below /memories of the root scope (the agent's home,
or the one scope asked for) at their paths, `DIR/memories/...`, so that the SDK's
`BetaLocalFilesystemMemoryTool(base_path=DIR)` serves them as they are; those of every other scope
exported at `DIR/scopes/{folder}/memories/...` (the folder named after the scope, its name bounded), as
a single-scope server on that scope (or a mount of it) shows them; every other record, one JSON object
a line, in `DIR/records.jsonl`, a file of any other root among them, so that no path a writer chooses
lands in another scope's folder or on the export's own files; and `DIR/manifest.json`, written last:
the database's head, each folder's scope, and each file's SHA-256. With `format="jsonl"` every record,
memory-tool files included, is a line of `records.jsonl`.

Everything is written in a hidden folder of DIR and moved up when it is all there, the manifest last;
an export that fails removes what it wrote, leaving DIR as it was.

Nothing is written outside DIR, which must be new or empty. Its descriptor is opened with O_NOFOLLOW
and everything below it is made relative to a descriptor of a folder this export made (mkdir, then
open with O_NOFOLLOW; files with O_CREAT|O_EXCL|O_NOFOLLOW), so no link, placed beforehand or during
the export, can send a write elsewhere. Files are 0600 and folders 0700, as the SDK's tool makes them:
memories are private. Everything is read through the client, so an export holds only what the agent
may read; on a client that may write, all of it is read in one transaction, one state of the log.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mnemo._version import __version__
from mnemo.audit import format_ts
from mnemo.errors import InvalidInput, PermissionDenied
from mnemo.tools.paths import DEFAULT_ROOT, MEMORY_TAG, PATH_TAG_PREFIX
from mnemo.validation import path_problem

if TYPE_CHECKING:
    from mnemo.client import MnemoClient
    from mnemo.record import MemoryRecord, RecordInfo

__all__ = [
    "EXPORT_FORMATS", "MANIFEST", "MEMORIES", "RECORDS", "SCOPES", "STAGING", "ExportError", "ExportReport",
    "export_memories", "new_folder", "scope_folder",
]

EXPORT_FORMATS = ("files", "jsonl")
MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
SCOPES = "scopes"
MEMORIES = "memories"
# Everything is written below this hidden folder of DIR, then moved up (the manifest last), so that a
# failed export leaves DIR as it found it, and DIR holds a manifest only once everything is there.
STAGING = ".mnemo-export-partial"
# /2: only files below the memory tool's root /memories are files (the others are lines), a scope
# folder's name may be a hashed form, and the manifest maps each folder to its scope ("folders").
MANIFEST_FORMAT = "mnemo-export/2"
# A file name's limit in bytes on Linux's filesystems (ext4, XFS, Btrfs, tmpfs) and macOS's APFS.
MAX_NAME_BYTES = 255
# A scope folder's name over MAX_NAME_BYTES is the start of its escaped name, this mark and the SHA-256
# of the scope: an escaped name holds `%` only in %25, %2F and %2E, so no plain name has the mark, and
# two long names differ in their hash.
_HASHED = "%23"
_KEPT_BYTES = 160

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_MODE = 0o600
_DIR_MODE = 0o700
_OPEN_DIRS = 64  # folder descriptors kept open while writing: the files come in path order


class ExportError(InvalidInput):
    """The export's folder cannot be used (it exists and is not an empty folder, or cannot be made)."""


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote: the folder, its format, how many memory-tool files (and their bytes) and
    other records, the head of the log it was read at (None for an agent without admin on `*`, who
    may not see it), and the manifest's path."""

    directory: str
    format: str
    files: int
    file_bytes: int
    records: int
    head: tuple[int, str] | None
    manifest: str

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON document (`mnemo export --json`)."""
        return {"directory": self.directory, "format": self.format, "files": self.files,
                "file_bytes": self.file_bytes, "records": self.records, "manifest": self.manifest,
                "head": None if self.head is None else {"seq": self.head[0], "hash": self.head[1]}}


def _ts(value: datetime) -> str:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    delta = aware - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return format_ts((delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000)


def scope_folder(scope: str) -> str:
    """The folder name of a scope under `scopes/`: the name itself, with `%` as `%25`, `/` as `%2F` and
    a leading `.` as `%2E`, so that every scope is one visible folder of its own. A name over
    MAX_NAME_BYTES in UTF-8 is cut to its first 160 bytes (whole characters and escapes), followed by
    `%23` and the 64 hex digits of the scope's SHA-256: at most 227 bytes, and no other scope's name."""
    name = scope.replace("%", "%25").replace("/", "%2F")
    name = "%2E" + name[1:] if name.startswith(".") else name
    encoded = name.encode("utf-8")
    if len(encoded) <= MAX_NAME_BYTES:
        return name
    kept = encoded[:_KEPT_BYTES].decode("utf-8", errors="ignore")
    escape = kept.rfind("%", len(kept) - 2)
    if escape >= 0:  # an escape cut in two: left out whole
        kept = kept[:escape]
    return kept + _HASHED + hashlib.sha256(scope.encode("utf-8", "surrogatepass")).hexdigest()


def _file_parts(record: MemoryRecord, main: str) -> tuple[str, ...] | None:
    """Where below the export's folder a record is written as a file, or None for a line of
    records.jsonl: a memory-tool file of text whose stored path is a canonical path below /memories
    goes in the `memories` folder of its scope (DIR/memories for the root scope), which stands for that
    scope's /memories and nothing else. A path of another root (`/scopes/...`, `/manifest.json/...`, a
    server's own root) would land in a folder that is not the file's, or on the export's own files."""
    if MEMORY_TAG not in record.tags or not isinstance(record.content, str):
        return None
    path = _path_tag(record.tags)
    if path is None or not path.startswith(DEFAULT_ROOT + "/") or path_problem(path) is not None:
        return None
    folder = (MEMORIES,) if record.scope == main else (SCOPES, scope_folder(record.scope), MEMORIES)
    return (*folder, *path[len(DEFAULT_ROOT) + 1:].split("/"))


def _path_tag(tags: tuple[str, ...]) -> str | None:
    return next((t[len(PATH_TAG_PREFIX):] for t in tags if t.startswith(PATH_TAG_PREFIX)), None)


def _record_json(record: MemoryRecord, with_body: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": record.id, "scope": record.scope, "version": record.version,
                           "tags": list(record.tags), "metadata": record.metadata}
    if isinstance(record.content, str):
        doc["content"] = record.content
    else:
        doc["content_base64"] = base64.b64encode(record.content).decode("ascii")
    doc.update(agent_id=record.agent_id, created_at=_ts(record.created_at), updated_at=_ts(record.updated_at),
               seq=record.seq, hash=record.hash)
    return doc


class _Tree:
    """Files and folders written below the export's folder, never through a link, never twice."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.dirs: OrderedDict[tuple[str, ...], int] = OrderedDict()
        self.made: set[tuple[str, ...]] = set()

    def close(self) -> None:
        for fd in self.dirs.values():
            os.close(fd)
        self.dirs.clear()

    def _dir(self, parts: tuple[str, ...]) -> int:
        if not parts:
            return self.root
        fd = self.dirs.get(parts)
        if fd is not None:
            self.dirs.move_to_end(parts)
            return fd
        parent = self._dir(parts[:-1])
        if parts not in self.made:
            # Never into a folder made for another name: on a filesystem that folds case or Unicode
            # forms, `Team:y` is `team:y`'s folder, and mkdir says so (FileExistsError: a line instead).
            os.mkdir(parts[-1], _DIR_MODE, dir_fd=parent)
            self.made.add(parts)
        fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
        self.dirs[parts] = fd
        if len(self.dirs) > _OPEN_DIRS:
            _, old = self.dirs.popitem(last=False)
            os.close(old)
        return fd

    def folder(self, parts: tuple[str, ...]) -> None:
        """The folder `parts` made (with its parents) if it is not yet there."""
        self._dir(parts)

    def write(self, parts: tuple[str, ...], data: bytes) -> None:
        for part in parts:
            if part in ("", ".", "..") or "/" in part or "\x00" in part:
                raise ValueError(f"{'/'.join(parts)!r} is not a path below the export's folder")
        fd = os.open(parts[-1], _NEW_FILE, _FILE_MODE, dir_fd=self._dir(parts[:-1]))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


class _Lines:
    """records.jsonl, written a line at a time and hashed as it goes."""

    def __init__(self, root: int) -> None:
        self.fd = os.open(RECORDS, _NEW_FILE, _FILE_MODE, dir_fd=root)
        self.file = os.fdopen(self.fd, "wb")
        self.sha = hashlib.sha256()
        self.count = self.size = 0

    def add(self, doc: dict[str, Any]) -> None:
        line = (json.dumps(doc, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
        self.file.write(line)
        self.sha.update(line)
        self.count += 1
        self.size += len(line)


def new_folder(directory: str) -> tuple[int, bool]:
    """A descriptor of `directory`, made now, or empty and no link, and whether it was made now;
    ExportError otherwise."""
    made = True
    try:
        os.mkdir(directory, _DIR_MODE)
    except FileExistsError:
        made = False
        st = os.lstat(directory)
        if stat.S_ISLNK(st.st_mode):
            raise ExportError(f"cannot export into {directory}: it is a symbolic link; give a new or empty "
                              "folder") from None
        if not stat.S_ISDIR(st.st_mode):
            raise ExportError(f"cannot export into {directory}: it exists and is not a folder; give a new or "
                              "empty folder") from None
    except OSError as exc:
        raise ExportError(f"cannot export into {directory}: {exc.strerror or exc}") from None
    try:
        fd = os.open(directory, _DIR_FLAGS)
    except OSError as exc:
        raise ExportError(f"cannot export into {directory}: {exc.strerror or exc}") from None
    inside = os.listdir(fd)
    if inside == [STAGING]:
        os.close(fd)
        raise ExportError(f"cannot export into {directory}: it holds only {STAGING}, left by an export that did "
                          f"not finish; remove it ({os.path.join(directory, STAGING)}) and export again")
    if inside:
        os.close(fd)
        raise ExportError(f"cannot export into {directory}: it is not empty; give a new or empty folder (an "
                          "export never writes beside other files)")
    return fd, made


def _remove(name: str, dir_fd: int) -> None:
    """Remove `name` in the folder `dir_fd` and all below it, never following a link (a link is removed)."""
    try:
        os.unlink(name, dir_fd=dir_fd)
        return
    except FileNotFoundError:
        return
    except (IsADirectoryError, PermissionError):  # Linux says EISDIR for a folder, macOS EPERM
        pass
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        for inner in os.listdir(fd):
            _remove(inner, fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def _undo(root: int, directory: str, made: bool, names: Iterable[str]) -> None:
    """After a failed export: what it wrote in `root` removed, and the folder too when it made it."""
    for name in names:
        with contextlib.suppress(OSError):
            _remove(name, root)
    if made:
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def export_memories(
    client: MnemoClient,
    directory: str | os.PathLike[str],
    *,
    scope: str | None = None,
    format: str = "files",
    versions: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ExportReport:
    """Export what `client`'s agent may read in `scope` (exact, or a `prefix*` pattern; default every
    scope it may read) into `directory`, which must be new or empty (ExportError otherwise). `format`
    `files`: the memory-tool files as a folder tree, the other records as JSON Lines; `jsonl`: every
    record as JSON Lines. `versions`: each JSON line holds every version of its record. The manifest
    (written last) holds the database's head and each file's SHA-256 (docs/TRANSFER.md)."""
    if format not in EXPORT_FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(EXPORT_FORMATS)}, got {format!r}")
    where = os.fspath(directory)
    main = scope if scope is not None and "*" not in scope else client.home_scope
    client.list_records(scope=scope, limit=0)  # the scope checked before anything is made
    root, made = new_folder(where)
    moved: list[str] = []
    try:
        os.mkdir(STAGING, _DIR_MODE, dir_fd=root)
        stage = os.open(STAGING, _DIR_FLAGS, dir_fd=root)
        try:
            files, lines, head = _write_staged(client, scope, main, format, versions, stage, progress)
            # Up into DIR, the manifest last: DIR holds a manifest only when everything is there.
            for name in [*sorted(set(os.listdir(stage)) - {MANIFEST}), MANIFEST]:
                os.rename(name, name, src_dir_fd=stage, dst_dir_fd=root)
                moved.append(name)
        finally:
            os.close(stage)
        os.rmdir(STAGING, dir_fd=root)
    except BaseException:
        _undo(root, where, made, [STAGING, *moved])
        raise
    finally:
        os.close(root)
    os.sync()  # on disk when this returns, as `cp -r` followed by `sync`
    return ExportReport(where, format, len(files), sum(f["bytes"] for f in files), lines.count, head,
                        os.path.join(where, MANIFEST))


def _write_staged(
    client: MnemoClient, scope: str | None, main: str, format: str, versions: bool, stage: int,
    progress: Callable[[int, int], None] | None,
) -> tuple[list[dict[str, Any]], _Lines, tuple[int, str] | None]:
    """The whole export written below `stage`, the manifest last: its files, its records.jsonl and the
    head of the log it was read at."""
    tree = _Tree(stage)
    try:
        reading = contextlib.nullcontext() if client.readonly else client.transaction()
        with reading:
            infos = client.list_records(scope=scope)
            head = _head(client)
            lines = _Lines(stage)
            with lines.file:
                files = _write_all(client, infos, main, format, versions, tree, lines, progress)
        folders = _folders(files)
        if format == "files" and MEMORIES not in folders:
            # The root scope's folder even when it holds no file: `DIR/memories` is the SDK's memory
            # folder, and what `mnemo import NEWDB DIR/memories` reads (an empty folder, nothing).
            tree.folder((MEMORIES,))
            folders = {MEMORIES: main, **folders}
        manifest = {
            "format": MANIFEST_FORMAT, "mnemo": __version__, "db_id": client.db_id, "agent": client.agent_id,
            "scope": scope, "root_scope": main, "layout": format, "versions": versions,
            "head": None if head is None else {"seq": head[0], "hash": head[1]},
            "exported_at": format_ts(time.time_ns()),
            "folders": [{"path": path, "scope": owner} for path, owner in folders.items()],
            "files": files,
            "records": {"path": RECORDS, "count": lines.count, "bytes": lines.size, "sha256": lines.sha.hexdigest()},
        }
        tree.write((MANIFEST,), (json.dumps(manifest, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))
    finally:
        tree.close()
    return files, lines, head


def _folders(files: list[dict[str, Any]]) -> dict[str, str]:
    """Each scope's `memories` folder written (its path below DIR) and the scope whose /memories it is."""
    folders: dict[str, str] = {}
    for entry in files:
        parts = entry["path"].split("/")
        folder = "/".join(parts[:1] if parts[0] == MEMORIES else parts[:3])
        folders.setdefault(folder, entry["scope"])
    return folders


def _head(client: MnemoClient) -> tuple[int, str] | None:
    try:
        return client.head
    except PermissionDenied:  # the head counts entries of every scope: only admin on `*` sees it
        return None


def _ordered(infos: list[RecordInfo], main: str) -> list[RecordInfo]:
    return sorted(infos, key=lambda i: (i.scope != main, i.scope, _path_tag(i.tags) or "", i.id))


def _records(client: MnemoClient, infos: list[RecordInfo], versions: bool) -> Iterator[list[MemoryRecord]]:
    for info in infos:
        yield client.history(info.id) if versions else [client.get(info.id)]


def _write_all(
    client: MnemoClient, infos: list[RecordInfo], main: str, format: str, versions: bool, tree: _Tree,
    lines: _Lines, progress: Callable[[int, int], None] | None,
) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = []
    ordered = _ordered(infos, main)
    for done, history in enumerate(_records(client, ordered, versions), 1):
        record = history[-1]
        parts = _file_parts(record, main) if format == "files" else None
        if parts is not None:
            assert isinstance(record.content, str)  # _file_parts says so
            data = record.content.encode("utf-8")
            try:
                tree.write(parts, data)
            except (FileExistsError, NotADirectoryError, IsADirectoryError, ValueError):
                # Two files where one path allows one (a log written before the rules that forbid it):
                # the one that cannot be a file here is kept as a line, not lost.
                lines.add(_line(record, history, versions))
            else:
                files.append({"path": "/".join(parts), "sha256": hashlib.sha256(data).hexdigest(),
                              "bytes": len(data), "id": record.id, "scope": record.scope,
                              "version": record.version, "seq": record.seq, "hash": record.hash})
        else:
            lines.add(_line(record, history, versions))
        if progress is not None:
            progress(done, len(ordered))
    return files


def _line(record: MemoryRecord, history: list[MemoryRecord], versions: bool) -> dict[str, Any]:
    doc = _record_json(record)
    if versions:
        doc["versions"] = [_record_json(v) for v in history]
    return doc
