"""The `mnemo` command: a thin shell over the library, one library call per command (click).

Adding commands: write a module in this package with a function `register(root: click.Group) -> None`
that adds them (`root.add_command(cmd)`; to extend a group another module made, such as `audit`:
`options.subgroup(root, "audit").add_command(cmd)`), and name the module in COMMAND_MODULES below: one
line. Build commands from `options`: `db_argument`, `agent_option`, `lock_timeout_option` (every command
that writes), `open_client`; from `output`: `json_option` (every command), `echo`, `emit_json`,
`emit_ndjson` for anything that streams, `timestamp`, `progress` for long work; and raise
`errors.UsageError` (exit 2) or `errors.Failure` (exit 1), or let the library's errors through:
`errors.describe_error` gives every error its exit code and message, in one place. Give each command a
short example in its epilog (`output.examples`) and a row in the README's command table
(tests/cli/test_conventions.py and tests/docs/test_readme.py check them).

Exit codes: 0 fine; 1 problems found; 2 a usage error or a file that cannot be used at all.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import click

from . import about
from .errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, PROG, describe_error, show_error
from .options import CONTEXT_SETTINGS
from .output import State, emit_json, examples, json_requested, state

__all__ = ["EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "cli", "main"]

# The modules whose commands make up `mnemo`, in this order (a module extending another's group, as
# `audit`, comes after it).
COMMAND_MODULES = (
    "verify",  # verify
    "audit",  # audit export, audit verify
    "keys",  # keygen
    "records",  # ls, cat, history, stats, compact
    "recall",  # recall
    "log",  # log
    "transparency",  # checkpoint, prove, cosign, audit verify-proof, audit verify-consistency, verify --checkpoint
    "operators",  # forget, grant, revoke, permissions
    "salvage",  # salvage
    "demo",  # demo, chat
    "mcp",  # mcp
    "ui",  # ui
    "copy",  # copy, backup, restore
    "transfer",  # import, export
)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """`mnemo --version`: what runs here (mnemo.cli.about), as text or, with --json, one JSON document."""
    if not value or ctx.resilient_parsing:
        return
    run = ctx.ensure_object(State)
    if run.json:
        emit_json(about.version_json())
    else:
        run.out.write("\n".join(about.version_lines()) + "\n")
    ctx.exit(EXIT_OK)


@click.group(
    PROG, invoke_without_command=True, context_settings=CONTEXT_SETTINGS,
    epilog=examples("mnemo verify memory.mnemo.db", "mnemo ls memory.mnemo.db --agent agent-1 --json",
                    "mnemo COMMAND --help")
    + "\n\nExit codes: 0 fine; 1 problems found; 2 usage error or a file that cannot be read at all.",
)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="the version, the scan core in use (native or pure Python) and which extras import")
@click.option("--json", "as_json", is_flag=True, help="with --version: one JSON document")
@click.pass_context
def cli(ctx: click.Context, as_json: bool) -> int:
    """Mnemo: an embedded, append-only, hash-chained memory store for AI agents."""
    if ctx.invoked_subcommand is None:  # bare `mnemo`: the help, and no error
        state().out.write(ctx.get_help() + "\n")
    return EXIT_OK


for _name in COMMAND_MODULES:
    importlib.import_module(f"{__name__}.{_name}").register(cli)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `mnemo` with these arguments (default: sys.argv[1:]) and return its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    run = State(json_requested(args))
    try:
        result = cli.main(args, prog_name=PROG, standalone_mode=False, obj=run)
    except SystemExit as exc:  # click exits by itself on a closed pipe it meets
        return exc.code if isinstance(exc.code, int) else EXIT_PROBLEMS
    except click.exceptions.Abort:  # click's form of KeyboardInterrupt
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:
        report = describe_error(exc)
        if report is None:
            raise
        run.out.flush()
        show_error(report, run.json)
        return report.exit_code
    run.out.flush()
    return result if isinstance(result, int) else EXIT_OK
