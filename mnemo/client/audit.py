"""What the chain shows, and its checks: its tree head and entries, the check of the whole database or
of what this agent may read, and the audit export. Whatever describes the whole chain needs admin on
`*`: it names the ids and scopes of every record, readable by the caller or not."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import IO

from ..acl import check_name
from ..audit import export_audit as write_audit_export
from ..chain.codec import Entry
from ..errors import InvalidInput
from ..keys import load_public_key
from ..recall.embedding import check_embeddings
from ..record import ScopeReport, VerifyReport
from ..storage.contract import Query, ScopeFilter
from .core import ClientCore


def tree_head(self: ClientCore) -> tuple[int, bytes]:
    """(size, root) of the Merkle tree over the chain's entries (docs/TRANSPARENCY.md): what a
    checkpoint note signs. Needs admin on `*`, as `head` does."""
    self._store.refresh()
    self._require_everything(self._acl(), "see the chain's tree head")
    return self._store.tree_head()


def log(self: ClientCore, since: int = 0, limit: int | None = None, op: str | None = None) -> list[Entry]:
    """The chain's entries from seq `since` on, oldest first, at most `limit` of them (None: all), only
    those of kind `op` if given ("put", "forget", "checkpoint", ...), as `mnemo log` shows them: each
    holds ids, scopes and digests, never content. Needs admin on `*`: the chain names the ids and
    scopes of every record. Damage in what is read raises IntegrityError; before `since` the chain is read
    only as far as finding where to start (`verify` checks the whole of it and gives the full report)."""
    if not isinstance(since, int) or isinstance(since, bool) or since < 0:
        raise InvalidInput(f"since must be a non-negative int, got {since!r}")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise InvalidInput(f"limit must be a non-negative int or None, got {limit!r}")
    if op is not None and not isinstance(op, str):
        raise InvalidInput(f"op must be a string or None, got {op!r}")
    self._store.refresh()
    self._require_everything(self._acl(), "read the chain")
    entries: list[Entry] = []
    if limit == 0:
        return entries
    for item in self._store.log(since):
        if op is not None and item.entry.op != op:
            continue
        entries.append(item.entry)
        if len(entries) == limit:
            break
    return entries


def verify(
    self: ClientCore, pubkey: bytes | str | None = None, expect_head: tuple[int, str] | None = None, *,
    embeddings: str = "check",
) -> VerifyReport:
    """Check the whole database: every hash and link, payload digests, erasures, signatures, and that
    what the backend serves from (indexes, tables) is exactly what the chain says. Returns every
    problem found. Needs admin on `*`: the report describes the whole chain (its entry count, head,
    erasures, and problems by seq), in scopes this agent cannot read too. Semantic recall's vectors:
    each belongs to a live record's latest version, in its scope, of the recorded embedder's length,
    finite and of unit length; with this client's embedder, `embeddings="check"` (the default) embeds
    32 of them again, spread over all, and `embeddings="recompute"` every one (docs/RECALL.md §6.5)."""
    chosen = check_embeddings(embeddings)
    self._store.refresh()
    self._require_everything(self._acl(), "verify the chain")
    key = pubkey if pubkey is None or isinstance(pubkey, bytes) else load_public_key(pubkey)
    return self._store.verify(key, expect_head, embeddings=chosen)


def verify_scopes(self: ClientCore, scopes: str | Iterable[str]) -> ScopeReport:
    """Check the whole chain as `verify` does, and report what concerns the records this agent may
    read in `scopes` (exact scope names): every version of each (its entry, its links, its payload
    against its digest, and what the backend serves for it), and whether the chain has problems
    elsewhere, which are not described. Needs `read` in each scope, not admin on `*`: the report
    shows nothing of other scopes, nor the chain's length or head. It reads the whole chain, as
    `verify` does."""
    names = [scopes] if isinstance(scopes, str) else list(scopes)
    wanted = tuple(dict.fromkeys(check_name(scope, "scope") for scope in names))
    if not wanted:
        raise InvalidInput("verify_scopes needs at least one scope")
    self._store.refresh()
    acl = self._acl()
    for scope in wanted:
        self._require(acl, "read", scope)
    # The versions first: the chain verified next reaches at least as far as they do.
    founds = self._store.select(Query(), ScopeFilter(False, frozenset(wanted)), payloads=False)
    seqs = {version.seq for found in founds for version in found.rec.versions}
    report = self._store.verify(None, None)
    mine = tuple(problem for problem in report.problems if problem.seq in seqs)
    elsewhere = len(mine) < len(report.problems) or (not report.ok and not mine)
    return ScopeReport(report.ok, wanted, len(founds), len(seqs), mine, elsewhere)


def export_audit(
    self: ClientCore, dest: str | os.PathLike[str] | IO[str], since: int = 0, include_content: bool = False
) -> int:
    """Write the chain as JSON Lines (docs/FORMAT.md §5.2). Needs admin on `*`: the chain names the ids and
    scopes of every record, readable by the caller or not."""
    self._store.refresh()
    self._require_everything(self._acl(), "export the audit trail")
    return write_audit_export(self._store, dest, since=since, include_content=include_content)
