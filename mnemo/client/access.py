"""Access control: the grants and revocations this agent writes, and what it and others may do."""

from __future__ import annotations

from collections.abc import Iterable

from ..acl import PERMISSIONS, check_agent_id, check_name, check_pattern
from ..errors import InvalidInput, PermissionDenied
from .core import ClientCore


def check_permission(self: ClientCore, perm: str, scope: str) -> None:
    """Raise PermissionDenied unless this agent holds `perm` in `scope` (as the memory tool needs)."""
    if perm not in PERMISSIONS:
        raise InvalidInput(f"unknown permission {perm!r}; expected one of {', '.join(PERMISSIONS)}")
    check_name(scope, "scope")
    self._store.refresh()
    self._require(self._acl(), perm, scope)


def grant(self: ClientCore, principal: str, scope: str, perms: Iterable[str]) -> None:
    """Give `principal` permissions on a scope or `prefix*` pattern; needs admin covering it."""
    self._store.check_writable()
    check_agent_id(principal, "principal")
    perm_list = _check_perms(perms)
    check_pattern(scope, "scope")
    with self._writing() as batch:
        if not batch.acl.may_administer(self.agent_id, scope):
            raise PermissionDenied(f"{self.agent_id} may not admin in scope {scope}")
        batch.stage("grant", self.agent_id, {"perms": perm_list, "principal": principal, "scope": scope})


def revoke(self: ClientCore, principal: str, scope: str, perms: Iterable[str] | None = None) -> None:
    """Withdraw permissions granted on exactly this scope pattern (all of them when perms is None)."""
    self._store.check_writable()
    check_agent_id(principal, "principal")
    check_pattern(scope, "scope")
    perm_list = None if perms is None else _check_perms(perms)
    with self._writing() as batch:
        if not batch.acl.may_administer(self.agent_id, scope):
            raise PermissionDenied(f"{self.agent_id} may not admin in scope {scope}")
        held = batch.acl.held(principal, scope)
        to_revoke = sorted(held) if perm_list is None else perm_list
        if not held or not set(to_revoke) & set(held):
            raise InvalidInput(f"{principal} holds no such grant on scope {scope}")
        batch.stage("revoke", self.agent_id, {"perms": to_revoke, "principal": principal, "scope": scope})


def permissions(self: ClientCore, agent_id: str | None = None) -> dict[str, tuple[str, ...]]:
    """Every scope pattern the agent (default: this one) holds permissions on, and which."""
    if agent_id is not None:
        check_agent_id(agent_id, "agent_id")
    self._store.refresh()
    acl = self._acl()
    if agent_id is not None and agent_id != self.agent_id:
        self._require_everything(acl, "see another agent's permissions")
        return acl.effective(agent_id)
    return acl.effective(self.agent_id)


def grants(self: ClientCore) -> dict[str, dict[str, tuple[str, ...]]]:
    """Every grant in force, as the chain's grant and revoke entries left them: principal -> scope
    pattern -> the permissions granted there, principals and patterns sorted. The owner's `*` and each
    agent's home scope are not grants (`permissions` shows them). Needs admin on `*`: the grants name
    agents and scopes this agent may not otherwise see."""
    self._store.refresh()
    acl = self._acl()
    self._require_everything(acl, "see every grant")
    return {
        principal: {pattern: tuple(sorted(perms)) for pattern, perms in sorted(held.items())}
        for principal, held in sorted(acl.grants.items())
    }


def _check_perms(perms: Iterable[str]) -> list[str]:
    if isinstance(perms, str) or not isinstance(perms, Iterable):
        raise InvalidInput("perms must be a list of permission names")
    out = sorted(set(perms))
    bad = [p for p in out if p not in PERMISSIONS]
    if bad or not out:
        raise InvalidInput(f"perms must be a non-empty subset of {', '.join(PERMISSIONS)}, got {perms!r}")
    return out
