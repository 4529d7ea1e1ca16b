"""What every `mnemo` command shares: exit codes, the one mapping from errors to exit codes and messages,
`--json`, the shared options and arguments (DB, `--agent`, `--lock-timeout`), the checks on files given,
output helpers (JSON, NDJSON, RFC 3339 timestamps) and progress bars.

Exit codes: 0 fine; 1 problems found (damage, a failed check, a refused operation, a record that is
missing or not readable); 2 a usage error, or a file that cannot be used at all (missing, not a regular
file, not readable, not a Mnemo database).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import json
import math
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click

from .. import audit
from ..acl import check_agent_id
from ..client import MnemoClient
from ..errors import EmbedderMismatch, IntegrityError, InvalidInput, MnemoError, NotFound, PermissionDenied
from ..recall.embedding import Embedder, load_embedder
from ..storage.contract import is_dsn, shown_name
from ..storage.file.framing import FILE_MAGIC
from ..storage.file.reader import file_kind
from ..tools.mcp.defaults import default_db_path

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

PROG = "mnemo"

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


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
    text: str  # what standard error shows without --json


# Errors of the library that mean "this input cannot be used at all" rather than "problems found".
_USAGE_ERRORS: tuple[type[Exception], ...] = (
    audit.UnreadableDatabase,
    audit.UnreadableExport,
    audit.KeyFileError,
    InvalidInput,
)


def describe_error(exc: BaseException) -> ErrorReport | None:
    """The exit code, type and message of an error; None for one that is not the user's to see (a bug)."""
    if isinstance(exc, CommandError):
        prefix = "error: " if exc.exit_code == EXIT_USAGE else ""
        return ErrorReport(exc.exit_code, exc.kind, exc.message, f"{PROG}: {prefix}{exc.message}\n")
    if isinstance(exc, click.UsageError):
        shown = io.StringIO()
        exc.show(file=shown)
        return ErrorReport(EXIT_USAGE, "UsageError", exc.format_message(), shown.getvalue())
    if isinstance(exc, click.ClickException):
        return ErrorReport(exc.exit_code, type(exc).__name__, exc.format_message(),
                           f"{PROG}: error: {exc.format_message()}\n")
    if isinstance(exc, _USAGE_ERRORS):
        return ErrorReport(EXIT_USAGE, type(exc).__name__, str(exc), f"{PROG}: error: {exc}\n")
    if isinstance(exc, (NotFound, PermissionDenied)):
        return ErrorReport(EXIT_PROBLEMS, type(exc).__name__, str(exc), f"{PROG}: {exc}\n")
    if isinstance(exc, MnemoError):  # IntegrityError, LockTimeout, Conflict, ReadOnly, DurabilityError, ...
        name = type(exc).__name__
        return ErrorReport(EXIT_PROBLEMS, name, str(exc), f"{PROG}: {name}: {exc}\n")
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        message = f"{where}{exc.strerror or exc}"
        return ErrorReport(EXIT_USAGE, "OSError", message, f"{PROG}: error: {message}\n")
    return None


def error_json(report: ErrorReport) -> str:
    doc = {"error": {"message": report.message, "type": report.kind, "exit_code": report.exit_code}}
    return json.dumps(doc, ensure_ascii=False)


def show_error(report: ErrorReport, as_json: bool) -> None:
    with contextlib.suppress(OSError, ValueError):  # standard error itself may be gone
        sys.stderr.write(error_json(report) + "\n" if as_json else report.text)
        sys.stderr.flush()


# -- per-invocation state: --json and standard output ------------------------------------------------------


class Output(io.TextIOBase):
    """Standard output that survives a closed pipe. Once the reader has gone (`mnemo verify DB | head -1`)
    the rest of the output is dropped and the command runs to its end, so that it still exits with its own
    code: a failing check stays a failure."""

    def __init__(self) -> None:
        super().__init__()
        self.reader_gone = False

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not self.reader_gone:
            try:
                sys.stdout.write(s)
            except BrokenPipeError:
                self._gone()
        return len(s)

    def write_bytes(self, data: bytes) -> None:
        """Raw bytes (a binary record), or their base64 where standard output has no byte buffer."""
        if self.reader_gone:
            return
        buffer = getattr(sys.stdout, "buffer", None)
        try:
            if buffer is None:
                sys.stdout.write(base64.b64encode(data).decode("ascii") + "\n")
                return
            sys.stdout.flush()
            buffer.write(data)
            buffer.flush()
        except BrokenPipeError:
            self._gone()

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.reader_gone = True
        # What is still buffered is flushed again at exit; let that go to /dev/null rather than fail.
        with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, sys.stdout.fileno())
            finally:
                os.close(devnull)


class State:
    """What one run of `mnemo` carries from the command line to its commands and its error report."""

    def __init__(self, as_json: bool = False) -> None:
        self.json = as_json
        self.out = Output()


def state() -> State:
    return click.get_current_context().ensure_object(State)


def json_requested(args: Sequence[str]) -> bool:
    """Whether `--json` is among the arguments: a usage error is found before the options are parsed, and
    must come as JSON too. Once parsing gets as far, the parsed value decides."""
    for arg in args:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def _json_callback(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    ctx.ensure_object(State).json = value
    return value


def json_option(f: F) -> F:
    """`--json`, passed to the command as `as_json`: machine output on stdout, errors as one JSON object
    on stderr."""
    return click.option(
        "--json", "as_json", is_flag=True, callback=_json_callback,
        help="machine-readable output (errors as one JSON object on stderr)",
    )(f)


# -- output --------------------------------------------------------------------------------------------------


def output() -> Output:
    return state().out


# What stored text may hold that a terminal would act on rather than show (escape sequences move the
# cursor, clear the screen or recolour what follows; a carriage return or a bidirectional override makes
# a line show as another): shown as escapes in every line printed for people. Tabs and line breaks are
# layout, kept, but in a one-line field (a tag, a preview), where a line break would make a fake row.
_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
_TERMINAL = {c: f"\\x{c:02x}" for c in _CONTROLS if c not in (0x09, 0x0A)}
_TERMINAL.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))})
_INLINE = {**_TERMINAL, 0x09: "\\t", 0x0A: "\\n"}


def echo(text: str) -> None:
    """One line of text on standard output, for people: what a terminal would act on is shown escaped."""
    output().write(text.translate(_TERMINAL) + "\n")


def inline(text: str) -> str:
    """`text` as one field of a line: tabs and line breaks shown escaped too (see echo)."""
    return text.translate(_INLINE)


def emit_json(obj: Any) -> None:
    """One JSON document (a report, a record, counts), indented for people."""
    output().write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def emit_ndjson(obj: Any) -> None:
    """One object of a stream (NDJSON: one JSON object per line)."""
    output().write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def timestamp(value: datetime | int) -> str:
    """The command line's one timestamp format: RFC 3339 in UTC with `Z` and nine fractional digits,
    as in the audit export. Takes a datetime or nanoseconds since the epoch."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        delta = aware - _EPOCH
        value = (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000
    return audit.format_ts(value)


def examples(*lines: str) -> str:
    """A help epilog of example command lines, kept as written."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


# -- progress bars -------------------------------------------------------------------------------------------

ProgressFn = Callable[[int, int], None]
PROGRESS_DELAY = 0.5  # seconds of work before a bar appears: quick work shows none


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _Bar:
    """A click progress bar fed with (done, total), shown only once the work has lasted a moment."""

    def __init__(self, label: str, stream: TextIO, delay: float) -> None:
        self.label, self.stream, self.delay = label, stream, delay
        self.start = time.monotonic()
        self.stack = contextlib.ExitStack()
        self.bar: ProgressBar[int] | None = None
        self.shown = 0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if time.monotonic() - self.start < self.delay:
                return
            bar: ProgressBar[int] = click.progressbar(length=max(total, 1), label=self.label, file=self.stream)
            self.bar = self.stack.enter_context(bar)
        if done > self.shown:
            self.bar.update(done - self.shown)
            self.shown = done


@contextlib.contextmanager
def progress(label: str, *, enabled: bool = True) -> Iterator[ProgressFn | None]:
    """A progress callback `(done, total)` for library calls that take one, drawing a click progress bar
    on standard error; None (no progress) unless standard error is a terminal, so pipes, logs and tests
    never see one."""
    stream = sys.stderr
    if not (enabled and isatty(stream)):
        yield None
        return
    bar = _Bar(label, stream, PROGRESS_DELAY)
    with bar.stack:
        yield bar


# -- asking before an irreversible step -----------------------------------------------------------------------


def confirm(needs_yes: str, header: str, lines: Sequence[str], question: str, declined: str) -> None:
    """Ask on the terminal before what cannot be undone (forgetting), listing what it touches; never guess
    when nobody can answer: without a terminal on standard input, `needs_yes` is a usage error (exit 2).
    A "no" (the default) is `declined`, exit 1."""
    if not isatty(sys.stdin):
        raise UsageError(needs_yes)
    click.echo(header, err=True)
    for line in lines:
        click.echo(f"  {line}", err=True)
    if not click.confirm(question, default=False, err=True):
        raise Failure(declined, "Aborted")


# -- files ---------------------------------------------------------------------------------------------------


_kind = file_kind


def _stat(path: str, verb: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot {verb} {path}: {reason}", "UnreadableFile") from None


def check_input_file(path: str) -> str:
    """Refuse at once (exit 2) a path that is missing, not readable, or not a regular file: reading a
    FIFO, a device or a socket could block for ever or never end, so this looks (stat) before opening."""
    st = _stat(path, "open")
    if st is None:
        raise UsageError(f"cannot open {path}: No such file or directory", "UnreadableFile")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"cannot open {path}: it is {_kind(st.st_mode)}, not a regular file", "UnreadableFile")
    if not os.access(path, os.R_OK):
        raise UsageError(f"cannot open {path}: Permission denied", "UnreadableFile")
    return path


def check_output_file(path: str) -> str:
    """An output path must be a regular file or not exist yet: a FIFO would block, and a device or a
    directory would be replaced or written through."""
    st = _stat(path, "write")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"cannot write {path}: it is {_kind(st.st_mode)}, not a regular file", "UsageError")
    return path


def check_mnemo_db(path: str) -> str:
    """check_input_file, and the file must start with a Mnemo file header's magic. A file that does not
    is not a Mnemo database (exit 2); one that does but is damaged is a problem for the command to find
    (exit 1). `mnemo verify` skips this check: it reports a bad header as a problem."""
    check_input_file(path)
    try:
        with open(path, "rb") as f:
            head = f.read(len(FILE_MAGIC))
    except OSError as exc:
        raise UsageError(f"cannot open {path}: {exc.strerror or exc}", "UnreadableFile") from None
    if head != FILE_MAGIC:
        why = "it is empty" if not head else "it does not start with a Mnemo file header"
        raise UsageError(f"cannot open {path}: not a Mnemo database ({why})", "NotAMnemoDatabase")
    return path


def default_db() -> str:
    """The database of a command given none: `mnemo mcp`'s default (mnemo.tools.mcp.defaults.default_db_path,
    the one place it is defined: `$XDG_DATA_HOME/mnemo/memory.mnemo.db`, else `~/.local/share/mnemo/...`,
    on macOS `~/Library/Application Support/mnemo/...`), so that `mnemo ls` after `mnemo mcp` alone shows
    what was written through it."""
    return os.fspath(default_db_path())


DEFAULT_DB_HELP = (
    "DB defaults to the database `mnemo mcp` serves when given no --db: $XDG_DATA_HOME/mnemo/memory.mnemo.db, "
    "else ~/.local/share/mnemo/memory.mnemo.db (on macOS ~/Library/Application Support/mnemo/...)."
)


def _check_db(value: str | None, mnemo: bool) -> str:
    if value is not None:
        if is_dsn(value):
            return value
        return check_mnemo_db(value) if mnemo else check_input_file(value)
    path = default_db()
    if _stat(path, "open") is None:
        raise UsageError(f"cannot open {path}: No such file or directory; it is the default database, the one "
                         "`mnemo mcp` serves when given no --db (and creates on its first start): give DB to "
                         "name another", "UnreadableFile")
    return check_mnemo_db(path) if mnemo else check_input_file(path)


def db_argument(*, mnemo: bool = True, optional: bool = False) -> Callable[[F], F]:
    """The DB argument: a database file (or a PostgreSQL DSN), checked before anything opens it.
    `mnemo=False` (for verify) accepts any regular file, whose header is then the command's to judge.
    `optional=True`: DB may be left out, for `mnemo mcp`'s default database (default_db)."""

    def callback(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
        return _check_db(value, mnemo)

    return click.argument("db", metavar="[DB]" if optional else "DB", required=not optional, callback=callback)


def db_and_record_arguments(f: F) -> F:
    """`[DB] ID|PATH`: a record (an id, or a memory-tool path) in DB, passed as `db` and `rec_id`; with one
    argument, the record in the default database (default_db)."""

    def callback(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> tuple[str, str]:
        if len(value) > 2:
            raise UsageError(f"expected [DB] ID|PATH, got {len(value)} arguments")
        if len(value) == 2:
            return _check_db(value[0], True), value[1]
        (rec,) = value
        if is_dsn(rec) or (not rec.startswith("/memories") and os.path.isfile(rec)):
            raise UsageError(f"{rec} is a database, not a record: give DB ID|PATH (the record's id, or a "
                             "/memories path, after the database)")
        return _check_db(None, True), rec

    @functools.wraps(f)  # with the options f was given (click keeps them on the function)
    def split(*args: Any, db_record: tuple[str, str], **kw: Any) -> Any:
        return f(*args, db=db_record[0], rec_id=db_record[1], **kw)

    return click.argument("db_record", metavar="[DB] ID|PATH", nargs=-1, required=True,
                          callback=callback)(split)  # type: ignore[return-value]


def load_pubkey(key: str | None) -> bytes | None:
    """A `--pubkey` value: a key file, or 64 hex digits."""
    if key is None:
        return None
    st = _stat(key, "read")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--pubkey: cannot read {key}: it is {_kind(st.st_mode)}, not a regular file",
                         "KeyFileError")
    try:
        return audit.load_public_key(key)
    except audit.KeyFileError as exc:
        raise UsageError(f"--pubkey: {exc}", "KeyFileError") from None


# -- the shared options ----------------------------------------------------------------------------------


def valid_agent(value: str, what: str) -> str:
    """An agent id, checked by the library's own rule (mnemo.acl.check_agent_id)."""
    try:
        return check_agent_id(value, "agent")
    except InvalidInput as exc:
        raise UsageError(f"{what}: {exc}", "UsageError") from None


def _agent_callback(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        return valid_agent(value, "--agent")
    env = os.environ.get("MNEMO_AGENT")
    if env is not None:  # set, even if empty: an empty one is an error, never the owner
        return valid_agent(env, "$MNEMO_AGENT")
    return None


def agent_option(f: F) -> F:
    """`--agent AGENT`, passed as `agent`: who the command acts as. Defaults to $MNEMO_AGENT; None (then
    the database's owner, see open_client) when neither is given. An empty or invalid one is exit 2."""
    return click.option(
        "--agent", metavar="AGENT", callback=_agent_callback,
        help="act as this agent (default: $MNEMO_AGENT, else the database's owner)",
    )(f)


def _seconds(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    """A finite, non-negative number of seconds (nan and inf would make a lock wait meaningless)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds < 0:
        raise click.BadParameter(f"expected a finite, non-negative number of seconds, got {value!r}")
    return seconds


def lock_timeout_option(f: F) -> F:
    """`--lock-timeout SECONDS`, passed as `lock_timeout` (None: MnemoClient's default): for every command
    that writes. Past it, the command fails with LockTimeout (exit 1)."""
    return click.option(
        "--lock-timeout", "lock_timeout", callback=_seconds, metavar="SECONDS",
        help="wait at most this long for another writer to release the database "
             "(default: MnemoClient's, 10 s), then fail with LockTimeout",
    )(f)


def mount_table(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str] | None:
    """`--mount POINT=SCOPE`, repeatable, as a mount table (checked again, fully, by the server): for
    `mnemo mcp` and `mnemo ui`."""
    if not values:
        return None
    table: dict[str, str] = {}
    for value in values:
        point, sep, scope = value.partition("=")
        if not sep or not point or not scope:
            raise UsageError(f"--mount {value}: expected POINT=SCOPE, such as /memories/team=team:research")
        if point.rstrip("/") in table:
            raise UsageError(f"--mount {value}: {point} is mounted twice")
        table[point.rstrip("/") or point] = scope
    return table


def db_option(f: F) -> F:
    """`--db DB`, passed as `db`: a database file or DSN, checked as DB arguments are; without it, the
    default database (default_db)."""

    def callback(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
        return _check_db(value, True)

    return click.option("--db", metavar="DB", callback=callback,
                        help="the database (default: the one `mnemo mcp` serves when given no --db)")(f)


# -- opening a database as a client -------------------------------------------------------------------------


def default_agent(db: str) -> str:
    """The database's owner: the agent of its genesis entry, which holds admin on `*`."""
    try:
        for item in audit.read_chain(db):
            return item.entry.agent
    except IntegrityError as exc:
        raise Failure(f"{exc} (run `mnemo verify {shown_name(db)}` for the full report)", "IntegrityError") from None
    raise Failure(f"{shown_name(db)} holds no genesis entry; pass --agent")


EMBEDDER_HELP = ("semantic recall's embedder: `local` (the model of the `semantic` extra) or `module:attribute`, "
                 "an object with name, dimension and embed(texts) or a factory of one (docs/RECALL.md §6)")


def _embedder(ctx: click.Context, param: click.Parameter, value: str | None) -> Embedder | None:
    if value is None:
        return None
    try:
        return load_embedder(value)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def embedder_option(default: str | None = None, help_text: str = EMBEDDER_HELP) -> Callable[[F], F]:
    """--embedder SPEC, given to the command as an Embedder (or None): `local` or `module:attribute`."""
    return click.option("--embedder", metavar="SPEC", default=default, callback=_embedder,
                        show_default=default is not None, help=help_text)


@contextlib.contextmanager
def open_client(
    db: str, agent: str | None, *, readonly: bool = True, lock_timeout: float | None = None,
    embedder: Embedder | None = None,
) -> Iterator[MnemoClient]:
    """A MnemoClient on DB as `agent` (None: the owner), closed on leaving. DB has passed db_argument.
    `embedder`: semantic recall's; an open refused for it is a usage error saying why."""
    options: dict[str, Any] = {} if lock_timeout is None else {"lock_timeout": lock_timeout}
    if embedder is not None:
        options["embedder"] = embedder
    try:
        client = MnemoClient(db, agent or default_agent(db), readonly=readonly, **options)
    except EmbedderMismatch as exc:
        raise UsageError(str(exc), "EmbedderMismatch") from None
    except IntegrityError as exc:
        raise Failure(f"{exc} (run `mnemo verify {shown_name(db)}` for the full report)", "IntegrityError") from None
    except NotFound as exc:
        raise UsageError(f"cannot open {shown_name(db)}: {exc}", "NotAMnemoDatabase") from None
    except OSError as exc:
        raise UsageError(f"cannot open {shown_name(db)}: {exc.strerror or exc}", "UnreadableFile") from None
    try:
        yield client
    finally:
        client.close()


# -- command groups ---------------------------------------------------------------------------------------


def command_group(name: str, short_help: str, help_text: str, epilog: str) -> click.Group:
    """A group of subcommands (like `mnemo audit`): without one, a usage error (exit 2) naming them."""

    @click.group(name, invoke_without_command=True, short_help=short_help, help=help_text, epilog=epilog,
                 context_settings=CONTEXT_SETTINGS)
    @click.pass_context
    def group(ctx: click.Context) -> None:
        if ctx.invoked_subcommand is None:
            choices = ", ".join(sorted(group.commands))
            raise click.UsageError(f"Missing command ({choices}).", ctx)

    return group


def subgroup(root: click.Group, name: str) -> click.Group:
    """A group another module registered (e.g. `audit`), to add commands to it."""
    group = root.commands.get(name)
    if not isinstance(group, click.Group):
        raise LookupError(f"no command group {name!r} is registered (yet)")
    return group
