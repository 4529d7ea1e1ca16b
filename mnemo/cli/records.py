"""`mnemo ls`, `cat`, `history`, `stats`, `compact`: the records, read (or compacted) as an agent through
MnemoClient, so every ACL check applies."""

from __future__ import annotations

import base64
import re
import sys
from typing import Any

import click

from .. import audit
from ..client import MnemoClient
from ..record import MemoryRecord, RecordInfo
from ..storage.contract import shown_name
from . import memory_paths
from .errors import EXIT_OK, Failure, UsageError
from .options import (
    CONTEXT_SETTINGS,
    DEFAULT_DB_HELP,
    agent_option,
    db_and_record_arguments,
    db_argument,
    default_agent,
    lock_timeout_option,
    open_client,
)
from .output import echo, emit_json, emit_ndjson, examples, json_option, output, timestamp
from .terminal import inline


def record_json(rec: MemoryRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"id": rec.id, "version": rec.version}
    if isinstance(rec.content, bytes):
        out["content_b64"] = base64.b64encode(rec.content).decode("ascii")
    else:
        out["content"] = rec.content
    out.update({
        "tags": list(rec.tags), "metadata": audit.jsonable(rec.metadata), "scope": rec.scope,
        "agent_id": rec.agent_id, "created_at": timestamp(rec.created_at), "updated_at": timestamp(rec.updated_at),
        "seq": rec.seq, "hash": rec.hash,
    })
    return out


def info_json(info: RecordInfo) -> dict[str, Any]:
    return {
        "id": info.id, "version": info.version, "scope": info.scope, "tags": list(info.tags),
        "size": info.size, "agent_id": info.agent_id, "created_at": timestamp(info.created_at),
        "updated_at": timestamp(info.updated_at), "seq": info.seq,
    }


@click.command(
    "ls", context_settings=CONTEXT_SETTINGS,
    short_help="list the records the agent may read",
    epilog=examples(
        "mnemo ls memory.mnemo.db --agent agent-1 --tag prefs",
        "mnemo ls memory.mnemo.db --scope 'team:*' --limit 20 --json   # NDJSON: one record a line",
        "mnemo ls      # the default database: what `mnemo mcp` alone served",
    ) + "\n\n" + DEFAULT_DB_HELP,
)
@db_argument(optional=True)
@agent_option
@click.option("--tag", "tags", metavar="TAG", multiple=True, help="only records with this tag (repeatable)")
@click.option("--any-tag", "any_tags", metavar="TAG", multiple=True,
              help="records with any of these (repeatable)")
@click.option("--prefix", metavar="TAG_PREFIX", help="only records with a tag starting with this")
@click.option("--scope", metavar="SCOPE", help="only records in this scope (or `prefix*` pattern)")
@click.option("--limit", metavar="N", type=click.IntRange(min=0), help="at most this many records")
@json_option
def ls(db: str, agent: str | None, tags: tuple[str, ...], any_tags: tuple[str, ...], prefix: str | None,
       scope: str | None, limit: int | None, as_json: bool) -> int:
    """List the latest version of every record the agent may read: id, version, scope, size, time, tags.
    With --json, one JSON object per record and line (NDJSON). When there is none, standard error says so
    and names the database's owner (who may read every record), and the exit code is 0: an empty list."""
    with open_client(db, agent) as client:
        infos = client.list_records(tags=list(tags), any_tags=list(any_tags), tag_prefix=prefix, scope=scope,
                                    limit=limit)
        reader = client.agent_id
    if not infos and not as_json and limit != 0:
        filters = [*(f"--tag {t}" for t in tags), *(f"--any-tag {t}" for t in any_tags),
                   *([f"--prefix {prefix}"] if prefix is not None else []),
                   *([f"--scope {scope}"] if scope is not None else [])]
        sys.stderr.write(inline(nothing_listed(db, reader, " ".join(filters))) + "\n")
    for i in infos:
        if as_json:
            emit_ndjson(info_json(i))
        else:
            echo(f"{i.id}  v{i.version:<3} {i.scope:<20} {i.size:>8}  {timestamp(i.updated_at)}  "
                 f"{inline(' '.join(i.tags))}")
    return EXIT_OK


def nothing_listed(db: str, reader: str, filters: str) -> str:
    """Why `mnemo ls` lists nothing: no record READER may read (that matches the filters), and who owns
    the database, who may read every record."""
    owner = default_agent(db)
    matching = f" that matches {filters}" if filters else ""
    if reader == owner:
        return f"mnemo ls: no record in {shown_name(db)}{matching} (listed as {owner}, its owner, who may read " \
               "every record)"
    return (f"mnemo ls: no record that {reader} may read in {shown_name(db)}{matching}; the database's owner is "
            f"{owner}: --agent {owner} lists every record")


_SCOPE_HELP = "for a memory-tool PATH: the memory tool's scope (default: the agent's home)"


def _record_id(client: MnemoClient, arg: str, scope: str | None) -> str:
    """A record id as given, or the id of the memory-tool file a `/memories/...` path names."""
    if memory_paths.is_path(arg):
        return memory_paths.resolve_file(client, arg, scope).id
    if scope is not None:
        raise UsageError("--scope goes with a memory-tool PATH, not with a record ID")
    if not _ID.fullmatch(arg):  # `user.md`, `memories/user.md`: a path without its leading /memories
        raise Failure(f"no record {arg!r}: a record is named by its ID (32 hex digits, as `mnemo ls` shows) or by a "
                      f"memory-tool path, which starts with /memories (such as {_as_path(arg)})",
                      "NotFound")
    return arg


_ID = re.compile(r"[0-9a-f]{32}")


def _as_path(arg: str) -> str:
    """The memory-tool path a person probably meant by `arg`: `user.md` or `memories/user.md` alike."""
    rest = arg.strip("/")
    return "/" + rest if rest.split("/", 1)[0] == "memories" else "/memories/" + rest


@click.command(
    "cat", context_settings=CONTEXT_SETTINGS,
    short_help="print a record's content (by id or memory-tool path)",
    epilog=examples(
        "mnemo cat memory.mnemo.db 01a2337d34a371e8aaa945bc92f8585f",
        "mnemo cat memory.mnemo.db /memories/people/ana/profile.md --agent demo-agent",
        "mnemo cat memory.mnemo.db 01a2337d34a371e8aaa945bc92f8585f --version 1 --json",
        "mnemo cat /memories/notes.md      # in the default database",
    ) + "\n\n" + DEFAULT_DB_HELP,
)
@db_and_record_arguments
@click.option("--version", metavar="N", type=click.IntRange(min=0), help="this version instead of the latest")
@click.option("--scope", metavar="SCOPE", help=_SCOPE_HELP)
@agent_option
@json_option
def cat(db: str, rec_id: str, version: int | None, scope: str | None, agent: str | None, as_json: bool) -> int:
    """Print a record's content (binary content as raw bytes); with --json, the record with its fields,
    binary content as `content_b64`. The record is an ID, or a memory-tool PATH (`/memories/...`): the
    file the memory tool keeps there in the agent's home scope, or in --scope."""
    with open_client(db, agent) as client:
        rec_id = _record_id(client, rec_id, scope)
        if version is None:
            rec = client.get(rec_id)
        else:
            versions = [r for r in client.history(rec_id) if r.version == version]
            if not versions:
                raise Failure(f"record {rec_id!r} has no version {version}", "NotFound")
            rec = versions[0]
    if as_json:
        emit_json(record_json(rec))
    elif isinstance(rec.content, bytes):
        out = output()
        out.flush()
        out.write_bytes(rec.content)
    else:
        output().write(rec.content)
        if rec.content and not rec.content.endswith("\n"):
            output().write("\n")
    return EXIT_OK


@click.command(
    "history", context_settings=CONTEXT_SETTINGS,
    short_help="every version of a record, oldest first (by id or memory-tool path)",
    epilog=examples(
        "mnemo history memory.mnemo.db 01a2337d34a371e8aaa945bc92f8585f",
        "mnemo history memory.mnemo.db /memories/people/ana/profile.md",
        "mnemo history memory.mnemo.db 01a2337d34a371e8aaa945bc92f8585f --json   # NDJSON: one version a line",
    ) + "\n\n" + DEFAULT_DB_HELP,
)
@db_and_record_arguments
@click.option("--scope", metavar="SCOPE", help=_SCOPE_HELP)
@agent_option
@json_option
def history(db: str, rec_id: str, scope: str | None, agent: str | None, as_json: bool) -> int:
    """Every version of a record, oldest first; with --json, one JSON object per version and line (NDJSON).
    The record is an ID, or a memory-tool PATH (`/memories/...`), as for `mnemo cat`."""
    with open_client(db, agent) as client:
        versions = client.history(_record_id(client, rec_id, scope))
    for r in versions:
        if as_json:
            emit_ndjson(record_json(r))
            continue
        if isinstance(r.content, bytes):
            preview = f"<{len(r.content)} bytes>"
        else:
            preview = r.content.replace("\n", " ")
            preview = inline(preview if len(preview) <= 60 else preview[:57] + "...")
        echo(f"v{r.version:<3} seq {r.seq:<6} {timestamp(r.updated_at)}  {r.agent_id:<14} "
             f"[{inline(' '.join(r.tags))}]  {preview}")
    return EXIT_OK


@click.command(
    "stats", context_settings=CONTEXT_SETTINGS,
    short_help="counts and sizes",
    epilog=examples("mnemo stats memory.mnemo.db", "mnemo stats memory.mnemo.db --agent agent-1 --json")
    + "\n\n" + DEFAULT_DB_HELP,
)
@db_argument(optional=True)
@agent_option
@json_option
def stats(db: str, agent: str | None, as_json: bool) -> int:
    """Counts and sizes: entries, head, records, versions and tags the agent may read, log bytes."""
    with open_client(db, agent) as client:
        counts = client.stats()
    if as_json:
        emit_json(counts)
    else:
        width = max((len(k) for k in counts), default=0)
        for key, value in counts.items():
            echo(f"{key:<{width}}  {value}")
    return EXIT_OK


@click.command(
    "compact", context_settings=CONTEXT_SETTINGS,
    short_help="rewrite the log without the bytes of erased payloads",
    epilog=examples("mnemo compact memory.mnemo.db", "mnemo compact memory.mnemo.db --lock-timeout 30 --json")
    + "\n\n" + DEFAULT_DB_HELP,
)
@db_argument(optional=True)
@agent_option
@lock_timeout_option
@json_option
def compact(db: str, agent: str | None, lock_timeout: float | None, as_json: bool) -> int:
    """Rewrite the log without the bytes of erased payloads (needs admin on `*`); prints the sizes before
    and after."""
    with open_client(db, agent, readonly=False, lock_timeout=lock_timeout) as client:
        result = client.compact()
    if as_json:
        emit_json(result)
    else:
        echo("compacted " + ", ".join(f"{k} {v}" for k, v in result.items()))
    return EXIT_OK


def register(root: click.Group) -> None:
    for command in (ls, cat, history, stats, compact):
        root.add_command(command)
