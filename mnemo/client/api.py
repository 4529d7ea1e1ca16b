"""MnemoClient: the one public API. It checks input and permissions, builds chain entries and hands
them to a storage backend through the storage contract (mnemo/storage/contract.py); it never touches
files or tables itself.

Each public method is written in the module of its job, as a function of the handle (`self`), and
named here as a member of the class, in the order the API reference (docs/API.md, generated from the
class's own members) lists them: writes.py (new records, versions, forgetting), paths.py (what a
writer checks its writes against), reads.py, recall.py, access.py (grants), audit.py (the chain and
its checks), database.py (the database as a whole). What they share, the handle's state and the one
permission model, is ClientCore (core.py), beside which close and checkpoint are written."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import access, audit, core, database, paths, reads, writes
from . import recall as recalling


class MnemoClient(core.ClientCore):
    """An agent's handle on one Mnemo database. Thread-safe; several clients and processes may share a db."""

    # -- the handle ----------------------------------------------------------------------------------
    def __enter__(self) -> MnemoClient:
        return self

    def __exit__(self, *exc: object) -> None:
        core.close(self)

    close = core.close

    @property
    def closed(self) -> bool:
        return self._store.closed

    @property
    def readonly(self) -> bool:
        return self._store.readonly

    @property
    def db_id(self) -> str:
        return self._store.db_id.hex()

    @property
    def recovery(self) -> list[str]:
        """What opening the database repaired (a torn tail cut, an erasure completed), in order."""
        return list(self._store.recovery)

    @property
    def head(self) -> tuple[int, str]:
        """(seq, hex hash) of the chain's last entry, to keep for `verify(expect_head=...)`. Needs admin
        on `*`: the head counts every entry, in scopes this agent cannot read too."""
        self._store.refresh()
        self._require_everything(self._acl(), "see the chain's head")
        return self._chain_head()

    tree_head = audit.tree_head
    check_permission = access.check_permission

    @property
    def last_entry(self) -> tuple[int, str] | None:
        """(seq, hex hash) of the last chain entry this client committed, or None: for the CLI and logs
        to name the entry a write made (unlike `head`, it tells nothing of other agents' writes)."""
        return self._last_entry

    # -- writes --------------------------------------------------------------------------------------
    remember = writes.remember
    update = writes.update
    path_use = paths.path_use
    forget = writes.forget
    forget_where = writes.forget_where

    @contextlib.contextmanager
    def transaction(self) -> Iterator[MnemoClient]:
        """Every write inside commits atomically as one frame, or none does (on an exception).
        Holds the writer lock throughout; reads inside see the transaction's own writes."""
        self._store.check_writable()
        with self._writing(transactional=True):
            yield self

    # -- access control ------------------------------------------------------------------------------
    grant = access.grant
    revoke = access.revoke
    permissions = access.permissions
    grants = access.grants
    log = audit.log

    # -- reads ---------------------------------------------------------------------------------------
    get = reads.get
    history = reads.history
    query = reads.query
    recall = recalling.recall

    @property
    def default_mode(self) -> str:
        """The mode `recall` uses when none is given: "hybrid" with an embedder, else "lexical"."""
        return recalling.default_mode(self)

    list_records = reads.list_records
    _tags_and_sizes = reads.tags_and_sizes  # (for the memory tool's directory views)

    # -- what a writer checks its writes against, readable or not ------------------------------------
    scope_has = paths.scope_has
    scope_usage = paths.scope_usage

    # -- audit and the database as a whole ----------------------------------------------------------
    verify = audit.verify
    verify_scopes = audit.verify_scopes
    export_audit = audit.export_audit
    copy_to = database.copy_to
    checkpoint = core.checkpoint
    compact = database.compact
    stats = database.stats
