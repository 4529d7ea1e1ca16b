"""Fixtures of the transparency tests: the chain of tests/data/chain-vectors.json as a database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.backends import is_pg
from helpers.transparency_vectors import write_vector_db

from mnemo import MnemoClient


@pytest.fixture
def vfile(tmp_path: Path) -> Path:
    """The vector chain in a log file."""
    return write_vector_db(tmp_path / "vectors.db")


@pytest.fixture
def vdb(db: str, vfile: Path) -> Any:
    """The vector chain on each backend: the log file, or its copy (entry for entry) in PostgreSQL."""
    if not is_pg(db):
        return vfile
    with MnemoClient(vfile, "owner", readonly=True) as c:
        assert c.copy_to(db).ok
    return db
