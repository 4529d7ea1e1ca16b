"""Fixtures of the memory-tool tests (the `client` they serve is the one of tests/conftest.py)."""

from __future__ import annotations

import pytest

from mnemo import MnemoClient
from mnemo.tools import MnemoMemoryToolServer


@pytest.fixture
def server(client: MnemoClient) -> MnemoMemoryToolServer:
    """A memory-tool server of the client's home scope, on a fresh database of each backend."""
    return MnemoMemoryToolServer(client)
