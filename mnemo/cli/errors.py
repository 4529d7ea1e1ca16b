"""The one mapping from errors to the `mnemo` command's exit codes and messages.

Exit codes: 0 fine; 1 problems found (damage, a failed check, a refused operation, a record that is
missing or not readable); 2 a usage error, or a file that cannot be used at all (missing, not a regular
file, not readable, not a Mnemo database, not writable by a command that writes to it).
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass

import click

from .. import audit
from ..errors import InvalidInput, MnemoError, NotFound, PermissionDenied
from .jsontext import dumps
from .terminal import inline, terminal

PROG = "mnemo"

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


# -- errors: the one place that says which exit code and message each error gets ------------------------


class CommandError(Exception):
    """An error worded for the user. `kind` names it in JSON (the `type` of the error object)."""

    exit_code = EXIT_PROBLEMS
    default_kind = "Failure"

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind or self.default_kind


class UsageError(CommandError):
    """A bad argument, or a file that cannot be used at all: exit 2."""

    exit_code = EXIT_USAGE
    default_kind = "UsageError"


class Failure(CommandError):
    """Problems found or an operation refused: exit 1."""


@dataclass(frozen=True)
class ErrorReport:
    exit_code: int
    kind: str  # the `type` of the JSON error object
    message: str
    text: str  # what standard error shows without --json (what a terminal would act on escaped)


# Errors of the library that mean "this input cannot be used at all" rather than "problems found".
_USAGE_ERRORS: tuple[type[Exception], ...] = (
    audit.UnreadableDatabase,
    audit.UnreadableExport,
    audit.KeyFileError,
    InvalidInput,
)


def describe_error(exc: BaseException) -> ErrorReport | None:
    """The exit code, type and message of an error; None for one that is not the user's to see (a bug).
    Standard error shows the message on one line, what a terminal would act on escaped (a path or a name
    given may hold an escape sequence or a line break); --json gives it as it is, in JSON."""
    if isinstance(exc, CommandError):
        prefix = "error: " if exc.exit_code == EXIT_USAGE else ""
        return ErrorReport(exc.exit_code, exc.kind, exc.message, f"{PROG}: {prefix}{inline(exc.message)}\n")
    if isinstance(exc, click.UsageError):
        shown = io.StringIO()
        exc.show(file=shown)
        return ErrorReport(EXIT_USAGE, "UsageError", exc.format_message(), terminal(shown.getvalue()))
    if isinstance(exc, click.ClickException):
        return ErrorReport(exc.exit_code, type(exc).__name__, exc.format_message(),
                           f"{PROG}: error: {inline(exc.format_message())}\n")
    if isinstance(exc, _USAGE_ERRORS):
        return ErrorReport(EXIT_USAGE, type(exc).__name__, str(exc), f"{PROG}: error: {inline(str(exc))}\n")
    if isinstance(exc, (NotFound, PermissionDenied)):
        return ErrorReport(EXIT_PROBLEMS, type(exc).__name__, str(exc), f"{PROG}: {inline(str(exc))}\n")
    if isinstance(exc, MnemoError):  # IntegrityError, LockTimeout, Conflict, ReadOnly, DurabilityError, ...
        name = type(exc).__name__
        return ErrorReport(EXIT_PROBLEMS, name, str(exc), f"{PROG}: {name}: {inline(str(exc))}\n")
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        message = f"{where}{exc.strerror or exc}"
        return ErrorReport(EXIT_USAGE, "OSError", message, f"{PROG}: error: {inline(message)}\n")
    return None


def error_json(report: ErrorReport) -> str:
    doc = {"error": {"message": report.message, "type": report.kind, "exit_code": report.exit_code}}
    return dumps(doc)


def show_error(report: ErrorReport, as_json: bool) -> None:
    with contextlib.suppress(OSError, ValueError):  # standard error itself may be gone
        sys.stderr.write(error_json(report) + "\n" if as_json else report.text)
        sys.stderr.flush()


