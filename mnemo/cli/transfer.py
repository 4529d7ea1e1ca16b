"""`mnemo import` and `mnemo export`: memories brought in from what other tools keep, and taken out as
plain files (mnemo.transfer, docs/TRANSFER.md). Each is one library call made as `--agent`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile

import click

from ..client import MnemoClient
from ..errors import MnemoError, NotFound
from ..storage.contract import is_dsn, shown_name
from ..storage.file.leaves import SUFFIX as LEAVES_SUFFIX
from ..storage.file.logfile import fsync_dir
from ..tools.server import MnemoMemoryToolServer
from ..transfer import EXPORT_FORMATS, FORMATS, ImportReport, export_memories, import_source, open_source
from .errors import EXIT_OK, UsageError
from .options import CONTEXT_SETTINGS, agent_option, check_mnemo_db, db_argument, lock_timeout_option, open_client
from .output import confirm, echo, emit_json, examples, json_option, progress
from .terminal import inline


def _db_or_new(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """An import may make its database: a path that does not exist yet is created by the import."""
    if is_dsn(value) or os.path.lexists(value):
        return value if is_dsn(value) else check_mnemo_db(value)
    return value


def _lines(report: ImportReport) -> list[str]:
    verb = "would import" if report.dry_run else "imported"
    counts = (f"{len(report.created)} created, {len(report.updated)} updated, {len(report.unchanged)} unchanged, "
              f"{len(report.forgotten)} forgotten, {len(report.skipped)} skipped")
    done = ("nothing written (a dry run)" if report.dry_run else
            "nothing written" if report.entry is None else f"commit seq {report.entry[0]}")
    out = [f"{verb} {inline(report.source)} ({report.format}) into {report.into} in scope {report.scope}: {counts}; "
           f"{done}"]
    for what, paths in (("created", report.created), ("updated", report.updated), ("forgotten", report.forgotten)):
        out += [f"  {what:<9}  {path}" for path in paths]
    # A skipped file's name is the source's, whatever it holds: a line break in it would print a fake row
    # (`x\n  created    /memories/y.md`), so each skip stays on its one line.
    out += [f"  skipped    {inline(s.origin)}: {inline(s.reason)}" for s in report.skipped]
    return out


def _confirm_forgetting(paths: tuple[str, ...], yes: bool) -> None:
    """--sync forgets files: list them and ask on a terminal; never guess when nobody can answer."""
    if paths and not yes:
        confirm(f"--sync would forget {len(paths)} file{'s' if len(paths) != 1 else ''} the source no longer has "
                "(--dry-run lists them): give --yes to forget them when standard input is not a terminal",
                f"--sync forgets {len(paths)} file(s) the source no longer has, erased for good:", paths,
                "Forget them?", "nothing imported")


@click.command(
    "import", context_settings=CONTEXT_SETTINGS,
    short_help="import memories: a folder, Claude Code's memory, a knowledge graph, other services' exports",
    epilog=examples(
        "mnemo import memory.mnemo.db ./memory/memories --agent agent-1   # the SDK filesystem tool's folder",
        "mnemo import memory.mnemo.db ~/code/app --format claude-code --dry-run",
        "mnemo import memory.mnemo.db memory.jsonl --into /memories/graph --json",
        "mnemo import memory.mnemo.db ./notes --into /memories/notes --sync --yes",
    ) + "\n\nFormats (docs/TRANSFER.md): " + ", ".join(FORMATS[1:]) + "; auto (the default) tells a folder, a "
    ".jsonl graph and a JSON export apart.",
)
@click.argument("db", metavar="DB", callback=_db_or_new)
@click.argument("source", metavar="SOURCE")
@click.option("--format", "source_format", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="what SOURCE is")
@agent_option
@click.option("--scope", metavar="SCOPE", help="the scope to import into (default: the agent's home)")
@click.option("--into", metavar="PATH", help="the folder under /memories to import into (default: /memories for a "
              "folder, /memories/FORMAT for the others)")
@click.option("--sync", is_flag=True, help="also forget the files under --into that SOURCE no longer has")
@click.option("-y", "--yes", is_flag=True, help="with --sync: do not ask before forgetting")
@click.option("--dry-run", "dry_run", is_flag=True, help="write nothing; say what the import would do")
@lock_timeout_option
@json_option
def import_(db: str, source: str, source_format: str, agent: str | None, scope: str | None, into: str | None,
            sync: bool, yes: bool, dry_run: bool, lock_timeout: float | None, as_json: bool) -> int:
    """Import SOURCE into DB (made if it does not exist, owned by --agent) as memory-tool files: each as
    the memory tool's `create` would write it, in one transaction (every file or none). Reports what was
    created, updated (a new version, history kept), unchanged and skipped, and why (binary, over a
    limit, a path the memory tool refuses, a link, a special file). Importing an unchanged source again
    writes nothing. The quotas `mnemo mcp` serves with are checked before anything is written."""
    new = not is_dsn(db) and not os.path.lexists(db)
    if agent is None and new:
        raise UsageError(f"{db} does not exist: give --agent (or $MNEMO_AGENT) to create it as that agent's database")
    # On PostgreSQL an import makes the database's tables where there are none: it runs as a dry run into a
    # scratch database first, so that a source, a folder or a quota it refuses makes no tables.
    tables_to_make = is_dsn(db) and not dry_run and agent is not None and _holds_no_database(db, agent)
    with contextlib.ExitStack() as stack:
        if tables_to_make:
            scratch = os.path.join(stack.enter_context(tempfile.TemporaryDirectory(prefix="mnemo-dry-run-")), "new.db")
            _import(scratch, source, source_format, agent, scope, into, sync, yes, True, lock_timeout)
        if dry_run and new:  # what an import would do into a new database: into one made for the run, then gone
            db = os.path.join(stack.enter_context(tempfile.TemporaryDirectory(prefix="mnemo-dry-run-")), "new.db")
            report = _import(db, source, source_format, agent, scope, into, sync, yes, dry_run, lock_timeout)
        elif new:  # made beside DB and put in place once imported: an import that fails leaves nothing at DB
            folder = stack.enter_context(_staging(db))
            staged = os.path.join(folder, "new.db")
            report = _import(staged, source, source_format, agent, scope, into, sync, yes, dry_run, lock_timeout)
            _put_in_place(staged, db)
            # A source that holds DB's folder met the folder the database was made in: no file of the source
            kept = tuple(s for s in report.skipped if not _is_folder(s.origin, folder))
            report = dataclasses.replace(report, skipped=kept)
        else:
            report = _import(db, source, source_format, agent, scope, into, sync, yes, dry_run, lock_timeout)
    if as_json:
        emit_json(report.to_json())
    else:
        for line in _lines(report):
            echo(line)
    return EXIT_OK


def _is_folder(origin: str, folder: str) -> bool:
    """Whether what a source skipped at `origin` is `folder` (its name compared first: no look-up of the
    file system for the others)."""
    path = origin.rstrip("/")
    return os.path.basename(path) == os.path.basename(folder) and os.path.realpath(path) == os.path.realpath(folder)


def _holds_no_database(dsn: str, agent: str) -> bool:
    """Whether the PostgreSQL database `dsn` names holds no Mnemo database yet (its first writer makes one)."""
    try:
        MnemoClient(dsn, agent, readonly=True).close()
    except NotFound:
        return True
    except MnemoError:  # the import's own open says what is wrong
        return False
    return False


def _staging(db: str) -> tempfile.TemporaryDirectory[str]:
    """A private folder beside DB (so on its file system) to make a new database in, removed on leaving."""
    folder = os.path.dirname(os.path.abspath(db))
    try:
        return tempfile.TemporaryDirectory(prefix=".mnemo-import-", dir=folder)
    except OSError as exc:
        raise UsageError(f"cannot create {db}: {exc.strerror or exc}", "UnwritableFolder") from None


def _put_in_place(staged: str, db: str) -> None:
    """The database made at `staged` linked in at `db`, which must still be free (as a new database is put in
    place); its index caches too, where their names are free (else the next open rebuilds them)."""
    try:
        os.link(staged, db)
    except FileExistsError:
        raise UsageError(f"{db} was made by another process during the import: nothing imported; import into it "
                         "now that it exists", "DatabaseExists") from None
    except OSError as exc:
        raise UsageError(f"cannot create {db}: {exc.strerror or exc}", "UnwritableFolder") from None
    fsync_dir(db)
    for suffix in (".snap", LEAVES_SUFFIX):
        with contextlib.suppress(OSError):
            os.link(staged + suffix, db + suffix)


def _import(db: str, source: str, source_format: str, agent: str | None, scope: str | None, into: str | None,
            sync: bool, yes: bool, dry_run: bool, lock_timeout: float | None) -> ImportReport:
    found = open_source(source, source_format)  # first: a source that is not there, or not one, makes no database
    with open_client(db, agent, readonly=dry_run and os.path.lexists(db), lock_timeout=lock_timeout) as client, \
            progress("reading") as bar:
        server = MnemoMemoryToolServer(client, scope=scope)
        expected = None
        if sync and not dry_run:
            expected = import_source(server, found, into=into, sync=True, dry_run=True).forgotten
            _confirm_forgetting(expected, yes)
        return import_source(server, found, into=into, sync=sync, dry_run=dry_run, expect_forgotten=expected,
                             progress=bar)


@click.command(
    "export", context_settings=CONTEXT_SETTINGS,
    short_help="export what an agent may read as plain files, with a manifest of hashes",
    epilog=examples(
        "mnemo export memory.mnemo.db ./export --agent agent-1   # ./export/memories: the SDK filesystem tool's folder",
        "mnemo export memory.mnemo.db ./everything --format jsonl --versions --json",
    ),
)
@db_argument()
@click.argument("directory", metavar="DIR")
@agent_option
@click.option("--scope", metavar="SCOPE", help="only this scope (or `prefix*` pattern); default: every scope the "
              "agent may read")
@click.option("--format", "export_format", type=click.Choice(EXPORT_FORMATS), default="files", show_default=True,
              help="files: memory-tool files as a folder, other records as JSON Lines; jsonl: every record as a line")
@click.option("--versions", is_flag=True, help="every version of each record in its JSON line")
@json_option
def export(db: str, directory: str, agent: str | None, scope: str | None, export_format: str, versions: bool,
           as_json: bool) -> int:
    """Export what the agent may read into DIR, which must be new or empty: the memory-tool files below
    /memories at their paths (DIR/memories/...; other scopes' under DIR/scopes/SCOPE/), every other
    record as a line of DIR/records.jsonl, and DIR/manifest.json with the database's head and each
    file's SHA-256 (docs/TRANSFER.md says how to check it against a checkpoint). Nothing is written
    outside DIR, and an export that fails leaves DIR as it was."""
    with open_client(db, agent, readonly=False) as client, progress("exporting") as bar:
        report = export_memories(client, directory, scope=scope, format=export_format, versions=versions,
                                 progress=bar)
    if as_json:
        emit_json(report.to_json())
    else:
        head = "" if report.head is None else f"; head {report.head[0]}:{report.head[1]}"
        echo(f"exported {report.files} memory-tool files ({report.file_bytes} bytes) and {report.records} other "
             f"records from {shown_name(db)} into {report.directory}{head}")
        echo(f"manifest: {report.manifest}")
    return EXIT_OK


def register(root: click.Group) -> None:
    for command in (import_, export):
        root.add_command(command)
