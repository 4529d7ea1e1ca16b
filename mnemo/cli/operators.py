"""The operator's commands: `mnemo forget`, `grant`, `revoke`, `permissions`.

Each is a thin shell over one MnemoClient call, acting as `--agent` through the ACL, so a refusal is the
library's PermissionDenied (exit 1). Each write runs in one transaction, so the seq it prints is the
seq of the chain entry it wrote.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import audit
from ..acl import PERMISSIONS
from ..client import MnemoClient, RecordUnavailable
from ..errors import IntegrityError, InvalidInput, PermissionDenied
from ..record import RecordInfo
from ..storage.contract import shown_name
from .errors import EXIT_OK, Failure, UsageError
from .memory_paths import canonical, file_at, files_beneath, path_of, server_scope
from .options import CONTEXT_SETTINGS, agent_option, db_argument, lock_timeout_option, open_client
from .output import confirm, echo, emit_json, examples, json_option
from .terminal import inline

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
    confirm(f"forgetting {what} ({_plural(len(infos), 'record')}) needs --yes when standard input is not a "
            "terminal", f"This forgets {what}: {_plural(len(infos), 'record')}, erased for good:",
            [f"{info.id}  {info.scope}  {path_of(info) or ' '.join(info.tags)}" for info in infos],
            "Forget them?", "nothing forgotten")


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
    select and ask first on a terminal, and need --yes otherwise. An ID already forgotten (from a scope
    the agent may read) is said on stderr and skipped, and the others are forgotten (exit 0; nothing is
    written when all were). Every other record must be one the agent may forget, or nothing is forgotten
    (exit 1: PermissionDenied, or RecordUnavailable for an ID the agent cannot read)."""
    if sum((bool(ids), tag is not None, path is not None)) != 1:
        raise UsageError("give record IDs, or --tag TAG, or --path PATH (exactly one of them)")
    if scope is not None and ids:
        raise UsageError("--scope goes with --tag or --path, not with IDs")
    already: dict[str, int] = {}
    entry: dict[str, Any] | None
    with open_client(db, agent, readonly=False, lock_timeout=lock_timeout) as client:
        paths: dict[str, str] = {}
        if ids:
            wanted = list(dict.fromkeys(ids))
            already = _already_forgotten(client, db, wanted)
            forgotten = [i for i in wanted if i not in already]
            n = client.forget(forgotten, reason=reason) if forgotten else 0
            entry = _entry(client) if forgotten else None
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
        if ids:
            doc["already_forgotten"] = already
        emit_json({**doc, "reason": reason, "entry": entry})
    else:
        for rid, seq in already.items():
            sys.stderr.write(f"mnemo forget: {inline(rid)} was already forgotten (forget entry seq {seq}); "
                             "nothing left to erase\n")
        if entry is None:
            echo(f"forgot 0 records: {'it was' if len(already) == 1 else 'all were'} already forgotten; "
                 "nothing written")
        else:
            echo(f"forgot {_plural(n, 'record')} (forget entry seq {entry['seq']})")
        for rid in forgotten:
            echo(f"  {rid}  {paths[rid]}" if rid in paths else f"  {rid}")
    return EXIT_OK


def _already_forgotten(client: MnemoClient, db: str, ids: list[str]) -> dict[str, int]:
    """The ids among `ids` that the agent cannot read because a forget entry erased them, from a scope it
    may read now, each with the seq of that forget. Found by reading the chain, and only for ids the
    agent cannot read: an id it could never have read (another's scope, or none at all) is not told
    apart from a missing one, and the forget then fails on it as before, forgetting nothing."""
    unreadable = []
    for rec_id in ids:
        try:
            client.get(rec_id)
        except RecordUnavailable:
            unreadable.append(rec_id)
        except InvalidInput:
            continue  # a malformed id: forget() refuses it, with the library's words
    if not unreadable:
        return {}
    wanted = set(unreadable)
    scopes: dict[str, Any] = {}
    forgets: dict[str, int] = {}
    try:
        for item in audit.read_chain(db):
            e = item.entry
            if e.op == "put" and e.body.get("id") in wanted:
                scopes[e.body["id"]] = e.body.get("scope")
            elif e.op == "forget":
                for rec_id in wanted.intersection(e.body.get("ids") or ()):
                    forgets.setdefault(rec_id, e.seq)
    except IntegrityError as exc:
        raise Failure(f"{exc} (run `mnemo verify {shown_name(db)}` for the full report)", "IntegrityError") from None
    found: dict[str, int] = {}
    for rec_id in unreadable:
        if rec_id in forgets and isinstance(scopes.get(rec_id), str):
            try:
                client.check_permission("read", scopes[rec_id])
            except (PermissionDenied, InvalidInput):
                continue
            found[rec_id] = forgets[rec_id]
    return found


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
