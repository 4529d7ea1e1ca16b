"""`mnemo log DB`: the chain itself, read straight from the log file."""

from __future__ import annotations

import click

from .. import audit
from ..errors import IntegrityError
from .errors import EXIT_OK, Failure
from .options import CONTEXT_SETTINGS, db_argument, valid_agent
from .output import echo, emit_ndjson, examples, json_option, output, timestamp

OPS = ("genesis", "put", "forget", "grant", "revoke", "checkpoint")


def _agent_filter(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else valid_agent(value, "--agent")


@click.command(
    "log", context_settings=CONTEXT_SETTINGS,
    short_help="the chain itself, read from the file: seq, time, op, agent, hash",
    epilog=examples(
        "mnemo log memory.mnemo.db --since 100 --limit 20",
        "mnemo log memory.mnemo.db --op forget --agent agent-1 --json   # NDJSON: one entry a line",
    ),
)
@db_argument()
@click.option("--since", metavar="SEQ", type=click.IntRange(min=0), default=0, help="first seq to show")
@click.option("--limit", metavar="N", type=click.IntRange(min=0), help="at most this many entries")
@click.option("--agent", "agent_filter", metavar="AGENT", callback=_agent_filter,
              help="only entries written by this agent")
@click.option("--op", type=click.Choice(OPS), help="only entries of this kind")
@json_option
def log(db: str, since: int, limit: int | None, agent_filter: str | None, op: str | None, as_json: bool) -> int:
    """The chain read straight from the log file: seq, time, op, agent, hash and what the entry did.
    Entries hold no content, only ids, scopes and digests. With --json, one JSON object per entry and
    line (NDJSON): the audit export's fields without `entry`."""
    shown = 0
    try:
        for item in audit.read_chain(db):
            e = item.entry
            if e.seq < since or (agent_filter and e.agent != agent_filter) or (op and e.op != op):
                continue
            if limit is not None and shown >= limit:
                break
            shown += 1
            if as_json:
                line = audit.export_line(e)
                del line["entry"]
                emit_ndjson(line)
            else:
                echo(f"{e.seq:>7}  {timestamp(e.ts_ns)}  {e.op:<10}  {e.agent:<16}  {e.hash.hex()[:12]}  "
                     f"{audit.entry_summary(e.op, e.body)}")
    except IntegrityError as exc:
        output().flush()
        raise Failure(str(exc), "IntegrityError") from None
    return EXIT_OK


def register(root: click.Group) -> None:
    root.add_command(log)
