"""`mnemo audit export` and `mnemo audit verify`: the chain as JSON Lines, and its offline check."""

from __future__ import annotations

import os
import sys
from typing import TextIO, cast

import click

from .. import audit as audit_lib
from ..errors import IntegrityError
from ..storage.contract import shown_name
from .errors import EXIT_OK, Failure, UsageError
from .options import CONTEXT_SETTINGS, check_input_file, check_output_file, command_group, db_argument, load_pubkey
from .output import emit_json, examples, isatty, json_option, output, progress
from .terminal import inline
from .verify import finish_report

audit = command_group(
    "audit",
    short_help="export the chain as JSON Lines, or verify such an export offline",
    help_text="Export the chain as JSON Lines (one entry per line), or verify such an export offline.",
    epilog=examples(
        "mnemo audit export memory.mnemo.db -o audit.jsonl",
        "mnemo audit verify audit.jsonl --pubkey mnemo-key.pub",
    ),
)


@audit.command(
    "export", context_settings=CONTEXT_SETTINGS,
    short_help="write the chain as JSON Lines",
    epilog=examples(
        "mnemo audit export memory.mnemo.db > audit.jsonl",
        "mnemo audit export memory.mnemo.db -o audit.jsonl --since 100 --include-content",
    ),
)
@db_argument()
@click.option("-o", "--output", "dest", metavar="FILE", help="write here (default: standard output)")
@click.option("--since", metavar="SEQ", type=click.IntRange(min=0), default=0, help="first seq to export")
@click.option("--include-content", is_flag=True,
              help="add each live version's payload (salt, packed bytes, content, tags, metadata)")
@json_option
def export(db: str, dest: str | None, since: int, include_content: bool, as_json: bool) -> int:
    """Write the chain as JSON Lines, one entry per line (the format docs/FORMAT.md describes): the
    stream is NDJSON already. Written to FILE, the file appears whole or not at all; with --json a summary
    `{"file", "entries"}` is printed then."""
    target: str | TextIO
    if dest is None or dest == "-":
        to_stdout, target = True, cast(TextIO, output())
    else:
        to_stdout, target = False, check_output_file(dest)
        if os.path.exists(dest) and os.path.samefile(dest, db):
            raise UsageError(f"cannot write {dest}: it is the database being exported")
    shows_bar = not to_stdout or not isatty(sys.stdout)  # never draw over the lines themselves
    try:
        with progress("exporting", enabled=shows_bar) as bar:
            n = audit_lib.export_audit(db, target, since=since, include_content=include_content, progress=bar)
    except IntegrityError as exc:
        raise Failure(f"cannot export {shown_name(db)}: {exc}", "IntegrityError") from None
    except OSError as exc:
        if to_stdout:
            raise
        raise UsageError(f"cannot write {dest}: {exc.strerror or exc}") from None
    if not to_stdout:
        if as_json:
            emit_json({"file": dest, "entries": n})
        else:
            sys.stderr.write(f"exported {n} entries to {inline(str(dest))}\n")
    return EXIT_OK


def _export_file(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    return value if value == "-" else check_input_file(value)


@audit.command(
    "verify", context_settings=CONTEXT_SETTINGS,
    short_help="check an export with SHA-256, msgpack and Ed25519 only",
    epilog=examples(
        "mnemo audit verify audit.jsonl",
        "mnemo audit export memory.mnemo.db | mnemo audit verify - --pubkey mnemo-key.pub --json",
    ),
)
@click.argument("file", metavar="FILE", callback=_export_file)
@click.option("--pubkey", metavar="KEY", help="public key file or 64 hex digits that signs checkpoints")
@json_option
def verify_export(file: str, pubkey: str | None, as_json: bool) -> int:
    """Check an audit export (FILE, or `-` for standard input) offline, with nothing but SHA-256, msgpack
    and Ed25519, and report every problem with its seq and line."""
    key = load_pubkey(pubkey)
    with progress("verifying") as bar:
        report = audit_lib.verify_export(sys.stdin if file == "-" else file, pubkey=key, progress=bar)
    return finish_report(report, file, as_json)


def register(root: click.Group) -> None:
    root.add_command(audit)
