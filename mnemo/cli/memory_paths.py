"""Memory-tool paths on the command line: `/memories/...` names what the memory tool keeps at that path.

A memory-tool file is a record tagged `memorytool` and `path:{canonical path}` in the server's scope
(README.md, "Serve Claude's memory tool from it"); directories are implicit. Here that scope is the
agent's home, or `--scope`. Paths are checked and made canonical exactly as the memory tool does it
(MnemoMemoryToolServer.canonical_path), so a path the tool refuses is refused here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..acl import check_name
from ..tools.paths import DEFAULT_ROOT, path_tag
from ..tools.server import MEMORY_TAG, MnemoMemoryToolServer
from .errors import Failure, UsageError

if TYPE_CHECKING:
    from ..client import MnemoClient
    from ..record import RecordInfo


def is_path(arg: str) -> bool:
    """A record argument that is a memory-tool path rather than a record id (ids are hex digits)."""
    return arg.startswith("/")


def server_scope(client: MnemoClient, scope: str | None) -> str:
    """The scope whose memory-tool files a path names: --scope (exact, no pattern), else the home scope."""
    if scope is None:
        return client.home_scope
    try:
        return check_name(scope, "--scope")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def canonical(client: MnemoClient, path: str, scope: str) -> str:
    """The canonical path; a path the memory tool refuses is a usage error with the tool's own words."""
    try:
        return MnemoMemoryToolServer(client, scope=scope).canonical_path(path)
    except ValueError as exc:  # InvalidInput carrying the tool's error text
        raise UsageError(str(exc)) from None


def file_at(client: MnemoClient, path: str, scope: str) -> RecordInfo | None:
    """The live file record at canonical `path` in `scope` that the agent may read, if any."""
    if path == DEFAULT_ROOT:
        return None
    found = client.list_records(tags=(MEMORY_TAG, path_tag(path)), scope=scope)
    return max(found, key=lambda info: info.seq) if found else None


def files_beneath(client: MnemoClient, path: str, scope: str) -> list[RecordInfo]:
    """Every readable file record strictly beneath directory `path` in `scope`."""
    return client.list_records(tags=(MEMORY_TAG,), tag_prefix=path_tag(path) + "/", scope=scope)


def path_of(info: RecordInfo) -> str | None:
    """The memory-tool path a file record is at."""
    prefix = path_tag(DEFAULT_ROOT)
    return next((t[len(path_tag("")):] for t in info.tags if t.startswith(prefix)), None)


def resolve_file(client: MnemoClient, path: str, scope: str | None) -> RecordInfo:
    """The file record `path` names, for `cat` and `history`; exit 1 if there is none the agent may read."""
    where = server_scope(client, scope)
    name = canonical(client, path, where)
    info = file_at(client, name, where)
    if info is None:
        raise Failure(f"no memory-tool file {name} in scope {where} that {client.agent_id} may read", "NotFound")
    return info
