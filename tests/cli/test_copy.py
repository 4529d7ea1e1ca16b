"""`mnemo copy`, `mnemo backup` and `mnemo restore` to a file: the new database holds every memory, so it
is never readable by more than the database it was written from."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from helpers.cli import run

from mnemo import MnemoClient


@pytest.mark.parametrize("command", ["copy", "backup", "restore"])
@pytest.mark.parametrize(("mode", "umask", "expected"), [(0o600, 0o022, 0o600), (0o640, 0o022, 0o640),
                                                           (0o644, 0o077, 0o600)])
def test_the_new_database_takes_the_sources_mode_less_the_umask(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, mode: int, umask: int, expected: int
) -> None:
    source = tmp_path / "src.db"
    with MnemoClient(source, "owner", durability="none") as c:
        c.remember("every memory")
    source.chmod(mode)
    dest = tmp_path / "dest.db"
    old = os.umask(umask)
    try:
        code, out, _err = run(capsys, command, str(source), str(dest))
    finally:
        os.umask(old)
    assert code == 0 and "OK: the copy verifies" in out
    assert {p.name: stat.S_IMODE(p.lstat().st_mode) for p in tmp_path.iterdir() if p.name.startswith("dest")} == {
        "dest.db": expected}


@pytest.mark.parametrize("command", ["copy", "backup", "restore"])
def test_a_destination_that_cannot_be_made_is_named_as_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """The copy is written beside the destination first: an error names the destination given, not that file."""
    source = tmp_path / "src.db"
    with MnemoClient(source, "owner", durability="none") as c:
        c.remember("every memory")
    before = sorted(p.name for p in tmp_path.iterdir())
    dest = tmp_path / "no-such-folder" / "dest.db"
    assert run(capsys, command, source, dest) == (2, "", f"mnemo: error: cannot create {dest}: No such file or "
                                                         "directory\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
