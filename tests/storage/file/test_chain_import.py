"""A new log written from a whole chain (mnemo.storage.file.chain_import, what copy, backup and restore
write): its temp file is made fresh, never through a link, and the new database is never readable by
more than its source."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.victims import make_victim, mode_of, unchanged

from mnemo import MnemoClient

OWNER = "owner"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    db = tmp_path / "src.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember("every memory", tags=["t"])
    return db


def test_a_link_at_the_copys_temp_name_is_removed_not_followed(tmp_path: Path, source: Path) -> None:
    victim = make_victim(tmp_path)
    dest = tmp_path / "copy.db"
    temp = Path(f"{dest}.new{os.getpid()}-copy")
    temp.symlink_to(victim)
    with MnemoClient(source, OWNER) as c:
        assert c.copy_to(dest).ok
    assert unchanged(victim)
    assert not dest.is_symlink() and not os.path.lexists(temp)


def test_a_leftover_of_a_crashed_copy_does_not_block_the_next(tmp_path: Path, source: Path) -> None:
    dest = tmp_path / "copy.db"
    temp = Path(f"{dest}.new{os.getpid()}-copy")
    temp.write_bytes(b"half a copy")
    temp.chmod(0o666)
    with MnemoClient(source, OWNER) as c:
        assert c.copy_to(dest).ok
    assert not os.path.lexists(temp) and mode_of(dest) == 0o600
    with MnemoClient(dest, OWNER, readonly=True) as r:
        assert [x.content for x in r.query()] == ["every memory"]


@pytest.mark.parametrize(
    ("mode", "umask", "expected"),
    [(0o600, 0o022, 0o600), (0o640, 0o022, 0o640), (0o644, 0o022, 0o644), (0o644, 0o077, 0o600),
     (0o660, 0o002, 0o660)],
    ids=["600-umask-022", "640-umask-022", "644-umask-022", "644-umask-077", "660-umask-002"],
)
def test_a_copy_takes_its_sources_mode_less_the_umask(
    tmp_path: Path, source: Path, mode: int, umask: int, expected: int
) -> None:
    source.chmod(mode)
    dest = tmp_path / "copy.db"
    old = os.umask(umask)
    try:
        with MnemoClient(source, OWNER) as c:
            assert c.copy_to(dest).ok
    finally:
        os.umask(old)
    assert mode_of(dest) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "src.db", "src.db.leaves", "src.db.snap"]


def test_a_copy_temp_file_swapped_for_a_link_is_never_linked_into_place(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemo.storage.file import chain_import

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious, not Mnemo's")
    dest = tmp_path / "copy.db"
    temp = f"{dest}.new{os.getpid()}-copy"
    real_sync = chain_import.sync

    def sync_then_swap(fd: int) -> None:
        real_sync(fd)
        os.unlink(temp)
        os.symlink(victim, temp)

    monkeypatch.setattr(chain_import, "sync", sync_then_swap)
    with MnemoClient(source, OWNER) as c, pytest.raises(OSError) as info:
        c.copy_to(dest)
    assert str(info.value) == (
        "[Errno 17] the temporary file was replaced while it was written; nothing was changed: check who "
        f"else writes in this folder and try again: '{temp}'"
    )
    assert not os.path.lexists(dest) and not os.path.lexists(temp)
    assert victim.read_bytes() == b"precious, not Mnemo's"
