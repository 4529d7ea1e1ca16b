"""The leaf-hash cache file DB.leaves (mnemo.storage.file.leaves), written in place: never through a link
planted at its name, and never readable by more than the log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.victims import mode_of, unchanged

from mnemo import MnemoClient
from mnemo.storage.file.leaves import LeafCache
from mnemo.transparency.errors import StaleCache

DB_ID = bytes(range(16))


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_opening_the_cache_for_writing_refuses_a_link(tmp_path: Path, victim: Path, dangling: bool) -> None:
    path = tmp_path / "m.db.leaves"
    target = tmp_path / "nowhere" if dangling else victim
    path.symlink_to(target)
    with pytest.raises(StaleCache) as info:
        LeafCache.open(path, DB_ID)
    assert str(info.value) == (
        f"{path} is a symbolic link, which Mnemo never writes through: remove it, and the next writer "
        "rebuilds the cache from the log"
    )
    assert unchanged(victim)
    assert not os.path.lexists(tmp_path / "nowhere") and path.is_symlink()


def test_a_new_cache_file_is_private(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        LeafCache.open(tmp_path / "m.db.leaves", DB_ID).close()
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "m.db.leaves") == 0o600


def test_a_writer_opening_with_a_link_at_db_leaves_works_without_the_cache(tmp_path: Path, victim: Path) -> None:
    """DB.leaves replaced by a link to another file: the next writer's open neither writes the leaf
    hashes into that file nor changes its mode; the database is read, written and verified as usual,
    without the cache. Once the link is removed, the next writer makes the cache file again, with the
    log's mode."""
    db = tmp_path / "m.db"
    leaves = Path(str(db) + ".leaves")
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("first")
    db.chmod(0o640)
    leaves.unlink()
    leaves.symlink_to(victim)
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("second")
        assert sorted(r.content for r in c.query()) == ["first", "second"] and c.verify().ok
    assert unchanged(victim)
    assert leaves.is_symlink()
    leaves.unlink()
    with MnemoClient(db, "owner", durability="none") as c:
        assert c.verify().ok
    assert not leaves.is_symlink() and mode_of(leaves) == 0o640
    assert leaves.read_bytes()[:8] == b"MNEMOLHC"
