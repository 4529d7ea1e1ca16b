"""The arguments and options every `mnemo` command shares: DB (a file or a DSN) and the checks on files
given, `--agent`, `--lock-timeout`, `--mount`, `--embedder`, the client they open, and the command groups.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import os
import stat
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .. import audit
from ..acl import check_agent_id
from ..client import MnemoClient
from ..errors import EmbedderMismatch, IntegrityError, InvalidInput, MnemoError, NotFound
from ..recall.embedding import Embedder, load_embedder
from ..storage.contract import is_dsn, shown_name
from ..storage.file.framing import FILE_MAGIC
from ..storage.file.reader import file_kind
from ..tools.mcp.defaults import default_db_path

if TYPE_CHECKING:
    pass

from .errors import Failure, UsageError

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


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


# What an open refused for want of permission fails with: the file, or its folder for a sidecar, is not
# writable (or readable) by this user, or the file system is mounted read-only.
_NOT_PERMITTED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


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
    except MnemoError as exc:
        cause = exc.__cause__
        if not isinstance(cause, OSError) or cause.errno not in _NOT_PERMITTED:
            raise
        if readonly:
            raise UsageError(f"cannot open {shown_name(db)}: {cause.strerror}", "UnreadableFile") from None
        raise UsageError(f"cannot open {shown_name(db)} for writing: {cause.strerror}. This command writes to the "
                         "database (or holds its writer lock for one consistent read); ls, cat, history, log, stats "
                         "and verify read one they may not write", "UnwritableFile") from None
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
