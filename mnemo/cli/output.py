"""What a `mnemo` command writes: `--json` and the per-invocation state, standard output that survives a
closed pipe, lines for people (terminal controls escaped), JSON and NDJSON, RFC 3339 timestamps, progress
bars, and the question asked before an irreversible step.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click

from .. import audit

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

from .errors import Failure, UsageError
from .jsontext import dumps
from .terminal import terminal

F = TypeVar("F", bound=Callable[..., Any])

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


def echo(text: str) -> None:
    """One line of text on standard output, for people: what a terminal would act on is shown escaped."""
    output().write(terminal(text) + "\n")


def emit_json(obj: Any) -> None:
    """One JSON document (a report, a record, counts), indented for people."""
    output().write(dumps(obj, indent=2) + "\n")


def emit_ndjson(obj: Any) -> None:
    """One object of a stream (NDJSON: one JSON object per line)."""
    output().write(dumps(obj) + "\n")


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


