from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mnemo import MnemoClient

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("mnemo") is None:  # running from a checkout without an install
    sys.path.insert(0, str(ROOT))

AGENT = "agent-1"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.mnemo.db"


@pytest.fixture
def client(db_path: Path) -> Iterator[MnemoClient]:
    from mnemo import MnemoClient

    c = MnemoClient(db_path, AGENT, durability="none")
    try:
        yield c
    finally:
        c.close()
