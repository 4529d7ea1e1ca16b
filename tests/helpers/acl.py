"""A client's view of its database (its head and every record it may read), and a refusal that must leave
that view as it was, with its exact message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mnemo import MnemoClient
from mnemo.errors import InvalidInput


def state(c: MnemoClient) -> tuple[Any, ...]:
    return c.head, [(r.id, r.scope, r.version) for r in c.query(limit=None)]


def refused_exactly(c: MnemoClient, call: Callable[[], Any], message: str) -> None:
    before = state(c)
    with pytest.raises(InvalidInput) as exc:
        call()
    assert str(exc.value) == message
    assert state(c) == before, "a refused call changed the database"


def shared_and_hidden(db: str, owner: str, readable: list[str], hidden: list[str]) -> None:
    """`readable` written by agent `reader` in scope team:shared, `hidden` by agent `other` in team:hidden,
    which `reader` may not read: the setting of a test that an unreadable scope changes nothing."""
    with MnemoClient(db, owner) as c:
        c.grant("reader", "team:shared", ["read", "write"])
        c.grant("other", "team:hidden", ["read", "write"])
    with MnemoClient(db, "reader") as r, MnemoClient(db, "other") as o:
        for text in readable:
            r.remember(text, scope="team:shared")
        for text in hidden:
            o.remember(text, scope="team:hidden")
