"""The ACL state, rebuilt from grant/revoke entries, and the one permission check everything uses.

Fail closed: anything not granted is denied. An agent's home scope (`agent:{id}`) carries every
permission without a grant; the genesis agent holds `admin` on `*`; `admin` implies the others.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .names import PATTERN_CHAR, check_pattern, home_scope, is_pattern

PERMISSIONS = ("admin", "forget", "read", "write")


def validate_pattern(pattern: str) -> None:
    """A grant's scope is an exact scope or a prefix pattern ending in a single trailing `*`
    (names.check_pattern; InvalidInput, a ValueError, when it is not)."""
    check_pattern(pattern)


def _home(agent: str) -> str | None:
    """The agent's home scope; none for an empty id or one with pattern syntax (only a hand-made log
    holds one), so that a home scope is always exact."""
    return None if not agent or PATTERN_CHAR in agent else home_scope(agent)


def scope_matches(pattern: str, scope: str) -> bool:
    if is_pattern(pattern):
        return scope.startswith(pattern[:-1])
    return pattern == scope


def pattern_covers(outer: str, inner: str) -> bool:
    """Whether every scope `inner` matches is also matched by `outer`."""
    if not is_pattern(outer):
        return outer == inner
    return inner.startswith(outer[:-1])


class Acl:
    """Grants as {principal: {pattern: set(perms)}} plus the owner; tiny, so copied freely. `generation`
    counts the grants and revocations made on this object, so that what is derived from it (a reader's
    scope filter) can be kept until it changes: the grants change through grant and revoke only."""

    def __init__(self, owner: str = "") -> None:
        self.owner = owner
        self.grants: dict[str, dict[str, set[str]]] = {}
        self.generation = 0

    def copy(self) -> Acl:
        other = Acl(self.owner)
        other.grants = {p: {s: set(perms) for s, perms in g.items()} for p, g in self.grants.items()}
        return other

    # -- mutation, from chain entries --------------------------------------------------------------
    def grant(self, principal: str, pattern: str, perms: Iterable[str]) -> None:
        self.generation += 1
        self.grants.setdefault(principal, {}).setdefault(pattern, set()).update(perms)

    def revoke(self, principal: str, pattern: str, perms: Iterable[str]) -> None:
        self.generation += 1
        held = self.grants.get(principal, {}).get(pattern)
        if held is None:
            return
        held.difference_update(perms)
        if not held:
            del self.grants[principal][pattern]
            if not self.grants[principal]:
                del self.grants[principal]

    def held(self, principal: str, pattern: str) -> tuple[str, ...]:
        return tuple(sorted(self.grants.get(principal, {}).get(pattern, ())))

    # -- the check -----------------------------------------------------------------------------------
    # Principals are looked up as keys and home scopes compared whole: neither is ever a pattern.
    def allows(self, agent: str, perm: str, scope: str) -> bool:
        if scope == _home(agent) or (agent == self.owner and agent):
            return True
        for pattern, perms in self.grants.get(agent, {}).items():
            if (perm in perms or "admin" in perms) and scope_matches(pattern, scope):
                return True
        return False

    def may_administer(self, agent: str, pattern: str) -> bool:
        """Whether `agent` may grant or revoke on `pattern`: admin on a pattern that covers it."""
        if (agent == self.owner and agent) or pattern == _home(agent):
            return True  # a home scope has no `*`, so this never hands out a pattern
        return any(
            "admin" in perms and pattern_covers(p, pattern) for p, perms in self.grants.get(agent, {}).items()
        )

    def readable_filter(self, agent: str) -> tuple[bool, set[str], tuple[str, ...]]:
        """(everything, exact scopes, prefixes) the agent may read: a fast filter for queries."""
        if agent == self.owner and agent:
            return True, set(), ()
        home = _home(agent)
        exact = set() if home is None else {home}
        prefixes: list[str] = []
        for pattern, perms in self.grants.get(agent, {}).items():
            if "read" in perms or "admin" in perms:
                if is_pattern(pattern):
                    prefixes.append(pattern[:-1])
                else:
                    exact.add(pattern)
        return ("" in prefixes), exact, tuple(prefixes)

    def effective(self, agent: str) -> dict[str, tuple[str, ...]]:
        """Every scope pattern the agent holds something on, with the permissions held there."""
        home = _home(agent)
        out: dict[str, tuple[str, ...]] = {} if home is None else {home: PERMISSIONS}
        if agent == self.owner and agent:
            out["*"] = PERMISSIONS
        for pattern, perms in self.grants.get(agent, {}).items():
            full = set(PERMISSIONS) if "admin" in perms else perms
            out[pattern] = tuple(sorted(set(out.get(pattern, ())) | full))
        return dict(sorted(out.items()))

    # -- snapshot ------------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "grants": {p: {s: sorted(v) for s, v in g.items()} for p, g in self.grants.items()},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Acl:
        acl = cls(state["owner"])
        acl.grants = {p: {s: set(v) for s, v in g.items()} for p, g in state["grants"].items()}
        return acl
