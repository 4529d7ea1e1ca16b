"""The UI's fixtures: an app over a fresh database on each backend, as its owner, with a known token,
and a browser-like test client that has opened its session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("jinja2")
pytest.importorskip("starlette")

from helpers.ui import APP, OWNER, PREFIX, TOKEN  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.tools.server import MnemoMemoryToolServer  # noqa: E402
from mnemo.ui import Guard, create_app  # noqa: E402


@pytest.fixture
def owner(db: str) -> Iterator[MnemoClient]:
    """The database's owner (admin on `*`), whose client the UI serves."""
    with MnemoClient(db, OWNER, durability="none") as client:
        yield client


@pytest.fixture
def tool(owner: MnemoClient) -> MnemoMemoryToolServer:
    """The memory tool in the owner's home scope: how the tests write the files the UI shows."""
    return MnemoMemoryToolServer(owner)


@pytest.fixture
def guard() -> Guard:
    return Guard(TOKEN, PREFIX)


@pytest.fixture
def browser(owner: MnemoClient, guard: Guard) -> Iterator[TestClient]:
    """The UI as the owner, with its session opened by the token (as the printed address does); its
    relative URLs are under the secret prefix."""
    with TestClient(create_app(owner, guard=guard), base_url=APP) as web:
        assert web.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
        yield web

