"""Someone else's file, for the tests that plant a link to it where Mnemo writes: made with known bytes
and a known mode, so that a test can show that Mnemo neither wrote through the link nor changed the mode."""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRECIOUS = b"precious, not Mnemo's"
MODE = 0o640


def mode_of(path: Path | str) -> int:
    """The permission bits of the file at `path` itself (a link's own, not its target's)."""
    return stat.S_IMODE(os.lstat(path).st_mode)


def make_victim(folder: Path) -> Path:
    """folder/victim, a file of someone else's that a link planted by an attacker points to."""
    path = folder / "victim"
    path.write_bytes(PRECIOUS)
    path.chmod(MODE)
    return path


def unchanged(victim: Path) -> bool:
    """Whether the victim still holds its bytes, with its mode."""
    return victim.read_bytes() == PRECIOUS and mode_of(victim) == MODE
