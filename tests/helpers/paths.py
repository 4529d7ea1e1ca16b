"""Where the checkout's files are, for tests at any depth of tests/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
HELPERS = TESTS / "helpers"
DATA = TESTS / "data"
