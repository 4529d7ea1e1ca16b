"""The operator's commands: `mnemo forget`, `grant`, `revoke`, `permissions`.

Each is a thin shell over one MnemoClient call, acting as `--agent` through the ACL, so a refusal is the
library's PermissionDenied (exit 1). Each write runs in one transaction, so the seq it prints is the
seq of the chain entry it wrote.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..acl import PERMISSIONS
from ..client import MnemoClient
from ..record import RecordInfo
from .common import (
    CONTEXT_SETTINGS,
    EXIT_OK,
    Failure,
    UsageError,
    agent_option,
    db_argument,
    echo,
    emit_json,
    examples,
    isatty,
    json_option,
    lock_timeout_option,
    open_client,
)
from .memory_paths import canonical, file_at, files_beneath, path_of, server_scope

_PERM = click.Choice(PERMISSIONS)


def _entry(client: MnemoClient) -> dict[str, Any]:
    """The seq and hash of the entry the command's write just committed."""
    last = client.last_entry
    assert last is not None
    return {"seq": last[0], "hash": last[1]}


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


# -- forget ------------------------------------------------------------------------------------------------


class _Selection:
    """What `forget --tag` or `--path` selects: the readable records, and their paths for --path."""

    def __init__(self, tag: str | None, path: str | None, scope: str | None) -> None:
        self.tag, self.path, self.scope = tag, path, scope

    def describe(self, client: MnemoClient) -> str:
        if self.tag is not None:
            where = f" in scope {self.scope}" if self.scope is not None else ""
            return f"every record {client.agent_id} may read with tag {self.tag!r}{where}"
        where = server_scope(client, self.scope)
        return f"the memory-tool files at or beneath {canonical(client, str(self.path), where)} in scope {where}"

    def nothing(self, client: MnemoClient) -> str:
        if self.tag is not None:
            where = f" in scope {self.scope}" if self.scope is not None else ""
            return f"nothing to forget: no record {client.agent_id} may read has tag {self.tag!r}{where}"
        where = server_scope(client, self.scope)
        return (f"nothing to forget: no memory-tool file at or beneath {canonical(client, str(self.path), where)} "
                f"in scope {where} that {client.agent_id} may read")

    def select(self, client: MnemoClient) -> list[RecordInfo]:
        if self.tag is not None:
            return client.list_records(tags=[self.tag], scope=self.scope)
        where = server_scope(client, self.scope)
        name = canonical(client, str(self.path), where)
        info = file_at(client, name, where)
        return [info] if info is not None else files_beneath(client, name, where)


def _confirm(infos: list[RecordInfo], what: str) -> None:
    """Ask on the terminal before forgetting a selection; never guess when nobody can answer."""
    if not isatty(sys.stdin):
        raise UsageError(f"forgetting {what} ({_plural(len(infos), 'record')}) needs --yes when standard "
                         "input is not a terminal")
    click.echo(f"This forgets {what}: {_plural(len(infos), 'record')}, erased for good:", err=True)
    for info in infos:
        click.echo(f"  {info.id}  {info.scope}  {path_of(info) or ' '.join(info.tags)}", err=True)
    if not click.confirm("Forget them?", default=False, err=True):
        raise Failure("nothing forgotten", "Aborted")


@click.command(
    "forget", context_settings=CONTEXT_SETTINGS,
    short_help="forget records (by id, tag or memory-tool path): their content is erased",
    epilog=examples(
        "mnemo forget memory.mnemo.db 01a2337d34a371e8aaa945bc92f8585f --reason 'user asked'",
        "mnemo forget memory.mnemo.db --tag trip-lisbon --yes --json",
        "mnemo forget memory.mnemo.db --path /memories/trips --agent agent-1",
    ),
)
@db_argument()
@click.argument("ids", metavar="[ID]...", nargs=-1)
@click.option("--tag", metavar="TAG", help="every record the agent may read with this tag")
@click.option("--path", metavar="PATH", help="the memory-tool file at PATH, or every file beneath a directory")
@click.option("--scope", metavar="SCOPE",
              help="with --tag: only in this scope (or `prefix*` pattern); with --path: the memory tool's "
                   "scope (default: the agent's home)")
@click.option("--reason", metavar="TEXT", help="why (kept in the forget entry's payload, outside the hash)")
@click.option("-y", "--yes", is_flag=True, help="do not ask before forgetting by --tag or --path")
@agent_option
@lock_timeout_option
@json_option
def forget(db: str, ids: tuple[str, ...], tag: str | None, path: str | None, scope: str | None,
           reason: str | None, yes: bool, agent: str | None, lock_timeout: float | None, as_json: bool) -> int:
    """Forget records: one forget entry, and the content, tags and metadata of every version erased from
    every file of the database before it returns. By ID, by --tag (every record the agent may read with
    it) or by --path (a memory-tool file, or every file beneath a directory); the last two list what they
    select and ask first on a terminal, and need --yes otherwise. Every record must be one the agent may
    forget, or nothing is forgotten (PermissionDenied, exit 1)."""
    if sum((bool(ids), tag is not None, path is not None)) != 1:
        raise UsageError("give record IDs, or --tag TAG, or --path PATH (exactly one of them)")
    if scope is not None and ids:
        raise UsageError("--scope goes with --tag or --path, not with IDs")
    with open_client(db, agent, readonly=False, lock_timeout=lock_timeout) as client:
        paths: dict[str, str] = {}
        if ids:
            n = client.forget(list(ids), reason=reason)
            entry = _entry(client)
            forgotten = list(dict.fromkeys(ids))
        else:
            selection = _Selection(tag, path, scope)
            what = selection.describe(client)
            confirmed = None
            if not yes:
                confirmed = selection.select(client)
                if confirmed:
                    _confirm(confirmed, what)
            with client.transaction():  # what is forgotten is exactly what was shown
                infos = selection.select(client)
                if not infos:
                    raise Failure(selection.nothing(client), "NotFound")
                if confirmed is not None and [i.id for i in infos] != [i.id for i in confirmed]:
                    raise Failure("the selection changed while you answered (another writer); nothing "
                                  "forgotten: run the command again")
                n = client.forget([i.id for i in infos], reason=reason)
            entry = _entry(client)
            forgotten = [i.id for i in infos]
            if path is not None:
                paths = {i.id: p for i in infos if (p := path_of(i)) is not None}
    if as_json:
        doc: dict[str, Any] = {"forgotten": n, "ids": forgotten}
        if path is not None:
            doc["paths"] = paths
        emit_json({**doc, "reason": reason, "entry": entry})
    else:
        echo(f"forgot {_plural(n, 'record')} (forget entry seq {entry['seq']})")
        for rid in forgotten:
            echo(f"  {rid}  {paths[rid]}" if rid in paths else f"  {rid}")
    return EXIT_OK


# -- grant, revoke, permissions --------------------------------------------------------------------------


@click.command(
    "grant", context_settings=CONTEXT_SETTINGS,
    short_help="give an agent permissions on a scope or `prefix*` pattern",
    epilog=examples(
        "mnemo grant memory.mnemo.db agent-2 'team:research*' read write",
        "mnemo grant memory.mnemo.db agent-3 agent:agent-1 read --agent agent-1 --json",
    ),
)
@db_argument()
@click.argument("principal", metavar="PRINCIPAL")
@click.argument("scope", metavar="SCOPE")
@click.argument("perms", metavar="PERM...", nargs=-1, required=True, type=_PERM)
@agent_option
@lock_timeout_option
@json_option
def grant(db: str, principal: str, scope: str, perms: tuple[str, ...], agent: str | None,
          lock_timeout: float | None, as_json: bool) -> int:
    """Give PRINCIPAL permissions (read, write, forget, admin) on SCOPE, an exact scope or a `prefix*`
    pattern: a grant entry in the chain. Needs admin covering SCOPE (PermissionDenied, exit 1)."""
    with open_client(db, agent, readonly=False, lock_timeout=lock_timeout) as client:
        client.grant(principal, scope, list(perms))
        entry = _entry(client)
    granted = sorted(set(perms))
    if as_json:
        emit_json({"principal": principal, "scope": scope, "perms": granted, "entry": entry})
    else:
        echo(f"granted {', '.join(granted)} on {scope} to {principal} (grant entry seq {entry['seq']})")
    return EXIT_OK


@click.command(
    "revoke", context_settings=CONTEXT_SETTINGS,
    short_help="withdraw permissions granted on exactly a scope or pattern",
    epilog=examples(
        "mnemo revoke memory.mnemo.db agent-2 'team:research*' write",
        "mnemo revoke memory.mnemo.db agent-2 'team:research*' --json   # every permission held there",
    ),
)
@db_argument()
@click.argument("principal", metavar="PRINCIPAL")
@click.argument("scope", metavar="SCOPE")
@click.argument("perms", metavar="[PERM]...", nargs=-1, type=_PERM)
@agent_option
@lock_timeout_option
@json_option
def revoke(db: str, principal: str, scope: str, perms: tuple[str, ...], agent: str | None,
           lock_timeout: float | None, as_json: bool) -> int:
    """Withdraw PERMs (default: every one) that PRINCIPAL was granted on exactly SCOPE: a revoke entry in
    the chain. Needs admin covering SCOPE (PermissionDenied, exit 1); a grant PRINCIPAL does not hold is
    a usage error (exit 2)."""
    with open_client(db, agent, readonly=False, lock_timeout=lock_timeout) as client:
        client.revoke(principal, scope, list(perms) if perms else None)
        entry = _entry(client)
    revoked = sorted(set(perms)) if perms else None
    if as_json:
        emit_json({"principal": principal, "scope": scope, "perms": revoked, "entry": entry})
    else:
        what = ", ".join(revoked) if revoked else "every permission"
        echo(f"revoked {what} on {scope} from {principal} (revoke entry seq {entry['seq']})")
    return EXIT_OK


@click.command(
    "permissions", context_settings=CONTEXT_SETTINGS,
    short_help="the scopes an agent holds permissions on, and which",
    epilog=examples(
        "mnemo permissions memory.mnemo.db",
        "mnemo permissions memory.mnemo.db agent-2 --json",
    ),
)
@db_argument()
@click.argument("principal", metavar="[PRINCIPAL]", required=False)
@agent_option
@json_option
def permissions(db: str, principal: str | None, agent: str | None, as_json: bool) -> int:
    """Every scope pattern PRINCIPAL (default: the acting agent) holds permissions on, and which: its home
    scope, the owner's `*`, and its grants. Another agent's need admin on `*` (PermissionDenied, exit 1)."""
    with open_client(db, agent) as client:
        held = client.permissions(principal)
        who = principal if principal is not None else client.agent_id
    if as_json:
        emit_json({"agent": who, "permissions": {scope: list(perms) for scope, perms in held.items()}})
    else:
        echo(f"permissions of {who}:")
        width = max(len(scope) for scope in held)
        for scope, perms in held.items():
            echo(f"  {scope:<{width}}  {' '.join(perms)}")
    return EXIT_OK


def register(root: click.Group) -> None:
    for command in (forget, grant, revoke, permissions):
        root.add_command(command)
