"""Fixtures of the ACL tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mnemo import MnemoClient


@pytest.fixture
def pair(db: str) -> Iterator[tuple[MnemoClient, MnemoClient]]:
    with MnemoClient(db, "owner", durability="none") as owner, MnemoClient(db, "bob", durability="none") as bob:
        owner.remember("team a", scope="team:a")
        yield owner, bob
