"""`mnemo copy`, `mnemo backup`, `mnemo restore`: a database written entry for entry into a new one, on
either backend (a file path or a postgresql:// URI), checked by verify once written."""

from __future__ import annotations

import os

import click

from ..record import VerifyReport
from ..storage.contract import is_dsn, shown_name
from .errors import EXIT_OK, EXIT_PROBLEMS, UsageError
from .options import CONTEXT_SETTINGS, agent_option, db_argument, open_client
from .output import echo, emit_json, examples, json_option, progress


def _new(target: str, what: str) -> str:
    if not is_dsn(target) and os.path.lexists(target):
        raise UsageError(f"{what} {target} already exists: the copy is written only to a new database"
                         + (" (move the old one aside first)" if what == "DB" else ""), "UsageError")
    return target


def _copy(source: str, target: str, agent: str | None, as_json: bool, verb: str) -> int:
    with open_client(source, agent) as client, progress(verb) as bar:
        try:
            report: VerifyReport = client.copy_to(target, progress=bar)
        except OSError as exc:
            if not is_dsn(target) and str(exc.filename or "").startswith(target):
                # the copy is written beside the target first: name the target, not that file
                raise UsageError(f"cannot create {target}: {exc.strerror or exc}", "UnwritableFile") from None
            raise
    if as_json:
        emit_json({"source": shown_name(source), "destination": shown_name(target), "entries": report.entries,
                   "head_seq": report.head_seq, "head_hash": report.head_hash, "ok": report.ok,
                   "problems": [p.to_json() for p in report.problems]})
    else:
        echo(f"{verb} {report.entries} entries from {shown_name(source)} to {shown_name(target)}")
        echo(f"head: {report.head_seq}:{report.head_hash}")
        echo(f"{'OK' if report.ok else 'FAILED'}: the copy verifies" + ("" if report.ok else f" with "
             f"{len(report.problems)} problems (run `mnemo verify {shown_name(target)}`)"))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


@click.command(
    "copy", context_settings=CONTEXT_SETTINGS,
    short_help="copy a database entry for entry into a new one, file or PostgreSQL",
    epilog=examples(
        "mnemo copy memory.mnemo.db postgresql://mnemo@db.internal/mnemo   # move a file db to PostgreSQL",
        "mnemo copy postgresql://mnemo@db.internal/mnemo local-copy.mnemo.db --json",
    ),
)
@db_argument()
@click.argument("destination", metavar="DST")
@agent_option
@json_option
def copy(db: str, destination: str, agent: str | None, as_json: bool) -> int:
    """Write DB into DST, a new database (a file path or a postgresql:// URI), entry for entry: the same
    bytes, hashes and head, so `mnemo verify --json` gives the same head on both. Forgotten records stay
    erased in the copy. Needs admin on `*` (the owner has it)."""
    return _copy(db, _new(destination, "DST"), agent, as_json, "copied")


@click.command(
    "backup", context_settings=CONTEXT_SETTINGS,
    short_help="an online, consistent copy of a database, checked once written",
    epilog=examples(
        "mnemo backup memory.mnemo.db backups/memory-$(date +%F).mnemo.db",
        "mnemo backup postgresql://mnemo@db.internal/mnemo backups/mnemo.mnemo.db --json",
    ),
)
@db_argument()
@click.argument("destination", metavar="DEST")
@agent_option
@json_option
def backup(db: str, destination: str, agent: str | None, as_json: bool) -> int:
    """Copy DB, while it is in use, into DEST, a new database: a consistent prefix of its chain (every
    entry committed when the copy began, and maybe some after), checked by verify once written. A backup
    keeps what is forgotten after it was taken: see the README on forgetting in backups."""
    return _copy(db, _new(destination, "DEST"), agent, as_json, "backed up")


@click.command(
    "restore", context_settings=CONTEXT_SETTINGS,
    short_help="put a backup back as a database",
    epilog=examples("mnemo restore backups/memory-2026-12-01.mnemo.db memory.mnemo.db"),
)
@db_argument()
@click.argument("destination", metavar="DB")
@agent_option
@json_option
def restore(db: str, destination: str, agent: str | None, as_json: bool) -> int:
    """Write the backup BACKUP into DB, which must not exist (move a damaged one aside first), entry for
    entry, and check it. Clients then open DB as before; what was written after the backup is not there."""
    return _copy(db, _new(destination, "DB"), agent, as_json, "restored")


def register(root: click.Group) -> None:
    for command in (copy, backup, restore):
        root.add_command(command)
