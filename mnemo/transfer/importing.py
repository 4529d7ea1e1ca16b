"""An import: a source's files written as memory-tool files, all in one transaction or not at all.

Two steps. The scan reads the source, outside any lock: each file's path is checked by the memory
tool's rules (as `create` would check it), and its bytes by the tool's limits (text, size), then
hashed; what fails is a reported skip. Contents are kept for the write only up to a bound, so a folder
of 100,000 files costs memory for their names and hashes, not their bytes. Then, in one transaction
under the writer lock, each file is compared with the file at its path (created, updated as a new
version, or unchanged), the quotas are checked for the whole import, and only then is anything staged:
a refusal writes nothing. A file is written exactly as the memory tool's `create` writes it (the record
tagged `memorytool` and `path:{path}`, its text, no metadata), so `view` and every other command serve
it as one of their own. Importing an unchanged source again writes no entry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mnemo.errors import InvalidInput, MnemoError
from mnemo.tools.paths import MEMORY_TAG, PATH_TAG_PREFIX, path_tag
from mnemo.transfer.items import BINARY, Skipped, Source, SourceError, SourceFile, text_of

if TYPE_CHECKING:
    from mnemo.client import MnemoClient
    from mnemo.record import RecordInfo
    from mnemo.tools.server import MnemoMemoryToolServer

__all__ = ["ImportRefused", "ImportReport", "import_source"]

Progress = Callable[[int, int], None]

# Contents kept from the scan for the write; beyond this the write reads the file again (and checks it
# is what was scanned). The transaction holds what it writes until its commit in any case, which the
# quotas bound (16 MiB of files by default).
CACHE_BYTES = 32 << 20
# An import is one commit, one frame of the log: a frame is at most 2 GiB (docs/FORMAT.md).
MAX_IMPORT_BYTES = 1 << 30


class ImportRefused(MnemoError):
    """The import would exceed a quota, or what `--sync` forgets changed since it was listed: nothing
    was written."""


@dataclass(frozen=True)
class ImportReport:
    """What an import did (or, with `dry_run`, would do): the canonical paths of the files created,
    updated (a new version) and unchanged, those forgotten by `sync`, and what was skipped and why.
    `entry` is the (seq, hash) of the commit, None when nothing was written."""

    source: str
    format: str
    scope: str
    into: str
    dry_run: bool
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    forgotten: tuple[str, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    entry: tuple[int, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON document (`mnemo import --json`)."""
        return {
            "source": self.source, "format": self.format, "scope": self.scope, "into": self.into,
            "dry_run": self.dry_run, "created": list(self.created), "updated": list(self.updated),
            "unchanged": list(self.unchanged), "forgotten": list(self.forgotten),
            "skipped": [{"origin": s.origin, "reason": s.reason} for s in self.skipped],
            "entry": None if self.entry is None else {"seq": self.entry[0], "hash": self.entry[1]},
        }


@dataclass(slots=True)  # one per file of the source: 100,000 of them must stay small
class _Planned:
    path: str  # canonical
    origin: str
    size: int
    digest: bytes  # SHA-256 of the bytes
    data: bytes | None  # kept from the scan, or None: read again for the write
    item: SourceFile


@dataclass
class _Classified:
    created: list[_Planned] = field(default_factory=list)
    updated: list[tuple[_Planned, RecordInfo]] = field(default_factory=list)
    unchanged: list[_Planned] = field(default_factory=list)
    gone: list[tuple[str, RecordInfo]] = field(default_factory=list)


def import_source(
    server: MnemoMemoryToolServer,
    source: Source,
    *,
    into: str | None = None,
    sync: bool = False,
    dry_run: bool = False,
    expect_forgotten: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Import `source` (mnemo.transfer.open_source) as memory-tool files of `server`'s scope, below
    `into` (a folder under the server's root; default the source's own, such as `/memories` for a
    folder). One transaction: every file or none. `sync` also forgets the files below `into` that the
    source no longer has; `expect_forgotten`, the paths a dry run listed, makes the import refuse
    (ImportRefused) if that list changed meanwhile. `dry_run` writes nothing and says what an import
    would do. The agent needs `read` and `write` in the scope, and `forget` with `sync`.
    SourceError for a source that cannot be read; ImportRefused when a quota of the server would be
    exceeded (checked for the whole import, before anything is written)."""
    client = server.client
    if server.mounts != {server.root: server.scope}:
        raise InvalidInput("an import writes into one scope: give a server without mounts (its scope= the scope "
                           "to import into)")
    scope = server.scope
    folder = server.canonical_path(into if into is not None else f"{server.root}/{source.default_into}")
    for perm in ("read", "write", *(("forget",) if sync else ())):
        client.check_permission(perm, scope)
    total = _count(source) if progress is not None else 0
    planned, skipped = _scan(server, source, folder, progress, total)
    report = ImportReport(source.label, source.format, scope, folder, dry_run, skipped=tuple(skipped))
    if dry_run:
        found = _classify(client, scope, folder, planned, sync)
        _refuse_over_quotas(server, found)
        return _reported(report, found, None)
    with client.transaction():
        found = _classify(client, scope, folder, planned, sync)
        if expect_forgotten is not None and [p for p, _ in found.gone] != list(expect_forgotten):
            raise ImportRefused("the files --sync forgets changed since they were listed (another writer): "
                                "nothing was written; run the import again")
        _refuse_over_quotas(server, found)
        wrote = bool(found.gone or found.created or found.updated)
        if found.gone:
            client.forget([info.id for _, info in found.gone], reason=f"import --sync: not in {source.label}")
        limit = server.max_file_bytes
        for item in found.created:
            client.remember(_text(item, limit), tags=(MEMORY_TAG, path_tag(item.path)), scope=scope)
        for item, info in found.updated:
            client.update(info.id, content=_text(item, limit), expected_version=info.version)
    return _reported(report, found, client.last_entry if wrote else None)


def _reported(report: ImportReport, found: _Classified, entry: tuple[int, str] | None) -> ImportReport:
    return ImportReport(
        report.source, report.format, report.scope, report.into, report.dry_run,
        created=tuple(p.path for p in found.created), updated=tuple(p.path for p, _ in found.updated),
        unchanged=tuple(p.path for p in found.unchanged), forgotten=tuple(p for p, _ in found.gone),
        skipped=report.skipped, entry=entry,
    )


def _count(source: Source) -> int:
    count = getattr(source, "count", None)
    return int(count()) if callable(count) else 0


def _scan(
    server: MnemoMemoryToolServer, source: Source, folder: str, progress: Progress | None, total: int
) -> tuple[list[_Planned], list[Skipped]]:
    """The source's files that can be imported, each with its canonical path and hash; the rest skipped."""
    limit = server.max_file_bytes
    planned: dict[str, _Planned] = {}
    skipped: list[Skipped] = []
    cached = done = 0
    for item in source.scan():
        if isinstance(item, Skipped):
            skipped.append(item)
            continue
        done += 1
        if progress is not None and total:
            progress(min(done, total), total)
        try:
            path = server.canonical_path(f"{folder}/{item.rel}")
        except InvalidInput as exc:
            skipped.append(Skipped(item.origin, f"a path the memory tool refuses: {exc}"))
            continue
        try:
            data = item.read(limit)
        except OSError as exc:
            skipped.append(Skipped(item.origin, _unreadable(exc)))
            continue
        if isinstance(data, int):
            skipped.append(Skipped(item.origin, f"{data} bytes, over the limit of {limit} bytes of a memory-tool file"))
            continue
        if text_of(data) is None:
            skipped.append(Skipped(item.origin, BINARY))
            continue
        other = planned.get(path)
        if other is not None:
            skipped.append(Skipped(item.origin, f"{other.origin} is imported at the same path, {path} (the memory "
                                                "tool's paths are compared in Unicode NFC)"))
            continue
        keep = cached + len(data) <= CACHE_BYTES
        cached += len(data) if keep else 0
        planned[path] = _Planned(path, item.origin, len(data), hashlib.sha256(data).digest(),
                                 data if keep else None, item)
    return list(planned.values()), skipped


def _unreadable(exc: OSError) -> str:
    if exc.errno == 0 and exc.strerror:  # a file that became something else (folder.read_file)
        return f"{exc.strerror}: not imported, and not read"
    return f"unreadable: {exc.strerror or exc}"


def _stored_path(info: RecordInfo) -> str | None:
    return next((t[len(PATH_TAG_PREFIX):] for t in info.tags if t.startswith(PATH_TAG_PREFIX)), None)


def _classify(client: MnemoClient, scope: str, folder: str, planned: list[_Planned], sync: bool) -> _Classified:
    """Each planned file against the readable file at its path in the scope: created, updated or
    unchanged; with `sync`, the readable files below `folder` the source does not have are gone."""
    existing: dict[str, RecordInfo] = {}
    for listed in client.list_records(tags=(MEMORY_TAG,), tag_prefix=path_tag(folder) + "/", scope=scope):
        path = _stored_path(listed)
        if path is not None and (path not in existing or existing[path].seq < listed.seq):
            existing[path] = listed
    found = _Classified()
    for item in planned:
        info = existing.get(item.path)
        if info is None:
            found.created.append(item)
        elif info.size == item.size and _digest_of(client, info) == item.digest:
            found.unchanged.append(item)
        else:
            found.updated.append((item, info))
        if info is not None:
            del existing[item.path]
    if sync:
        found.gone = sorted(existing.items())
    return found


def _digest_of(client: MnemoClient, info: RecordInfo) -> bytes:
    content = client.get(info.id).content
    return hashlib.sha256(content.encode("utf-8") if isinstance(content, str) else content).digest()


def _text(item: _Planned, limit: int) -> str:
    """A planned file's text: kept from the scan, or read again and checked to be what was scanned."""
    data = item.data
    if data is None:
        try:
            read = item.item.read(limit)
        except OSError as exc:
            raise SourceError(f"{item.origin} could not be read again ({exc.strerror or exc}): nothing was written; "
                              "import again") from None
        if isinstance(read, int) or hashlib.sha256(read).digest() != item.digest:
            raise SourceError(f"{item.origin} changed while it was imported: nothing was written; import again")
        data = read
    text = text_of(data)
    assert text is not None  # the scan skipped what is not text, and the bytes are the scanned ones
    return text


def _refuse_over_quotas(server: MnemoMemoryToolServer, found: _Classified) -> None:
    """ImportRefused naming the first of the server's quotas (docs/MEMORY_TOOL.md §10) the import would
    push its scope's memory-tool files past, in the tool's order; and the bound of one commit."""
    quotas = server.quotas
    written = sum(p.size for p in found.created) + sum(p.size for p, _ in found.updated)
    if written > MAX_IMPORT_BYTES:
        raise ImportRefused(f"cannot import: the import would write {written} bytes in one commit, over the "
                            f"{MAX_IMPORT_BYTES} bytes one commit may hold. Nothing was written: import the "
                            "source in parts (narrower folders)")
    fix = ("Nothing was written: import less (a narrower source), delete files you no longer need, or import "
           "through the library with a server of higher limits (docs/TRANSFER.md)")
    cap = quotas.max_versions_per_file
    if cap is not None:
        for item, info in found.updated:
            if info.version + 1 > cap:
                raise ImportRefused(f"cannot import: {item.path} already has {info.version} versions, the most a "
                                    f"file may keep is {cap}. Nothing was written: delete it and import again")
    new_files = len(found.created) - len(found.gone)
    live = (sum(p.size for p in found.created) + sum(p.size - i.size for p, i in found.updated)
            - sum(i.size for _, i in found.gone))
    # Forgetting a file frees every version it keeps; only its latest size is known here, so what the
    # history frees is counted low, never high.
    history = written - sum(i.size for _, i in found.gone)
    grows = ((quotas.max_files is not None and new_files > 0) or (quotas.max_total_bytes is not None and live > 0)
             or (quotas.max_history_bytes is not None and history > 0))
    if not grows:
        return
    scope = server.scope
    usage = server.client.scope_usage(scope, MEMORY_TAG, PATH_TAG_PREFIX + server.root + "/")
    if quotas.max_files is not None and new_files > 0 and usage.records + new_files > quotas.max_files:
        raise ImportRefused(f"cannot import: scope {scope} would hold {usage.records + new_files} memory-tool files, "
                            f"over the limit of {quotas.max_files} (it holds {usage.records}). {fix}")
    if quotas.max_total_bytes is not None and live > 0 and usage.latest_bytes + live > quotas.max_total_bytes:
        raise ImportRefused(f"cannot import: the memory-tool files of scope {scope} would hold "
                            f"{usage.latest_bytes + live} bytes, over the limit of {quotas.max_total_bytes} bytes "
                            f"(they hold {usage.latest_bytes}). {fix}")
    max_history = quotas.max_history_bytes
    if max_history is not None and history > 0 and usage.version_bytes + history > max_history:
        raise ImportRefused(f"cannot import: scope {scope} would keep {usage.version_bytes + history} bytes of "
                            f"file versions, over the limit of {quotas.max_history_bytes} bytes (it keeps "
                            f"{usage.version_bytes}). {fix}")
