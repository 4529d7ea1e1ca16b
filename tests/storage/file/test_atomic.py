"""Files written whole through a temp file (mnemo.storage.file.atomic): the temp file is always made
fresh, never through a link planted at its name, a crash's leftover never blocks the next write, and
the rename puts in place only the file that was written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.victims import mode_of, unchanged

from mnemo import MnemoClient
from mnemo.storage.file.atomic import replacing, write_atomic, write_text_atomic
from mnemo.storage.file.logfile import write_all


def test_a_link_at_the_temp_name_is_replaced_not_followed(tmp_path: Path, victim: Path) -> None:
    target = tmp_path / "out"
    Path(str(target) + ".tmp").symlink_to(victim)
    write_atomic(target, b"new bytes")
    assert unchanged(victim)
    assert target.read_bytes() == b"new bytes" and not target.is_symlink()
    assert not os.path.lexists(str(target) + ".tmp")


def test_a_dangling_link_at_the_temp_name_creates_nothing_where_it_points(tmp_path: Path) -> None:
    target, nowhere = tmp_path / "out", tmp_path / "made-through-the-link"
    Path(str(target) + ".tmp").symlink_to(nowhere)
    write_text_atomic(target, lambda out: out.write("text\n"))
    assert target.read_text() == "text\n" and not os.path.lexists(nowhere)


def test_a_crash_leftover_never_blocks_and_never_lends_its_mode(tmp_path: Path) -> None:
    """A temp file a crash left (wide open, part written) is removed: the new one is made with the mode
    asked for, holds only the new bytes, and the umask applies to `new_mode`."""
    target = tmp_path / "out"
    leftover = Path(str(target) + ".tmp")
    leftover.write_bytes(b"half of an old write, much longer than the new one")
    leftover.chmod(0o666)
    old = os.umask(0o022)
    try:
        write_atomic(target, b"exact", mode=0o640)  # exact bits, whatever the umask
        assert target.read_bytes() == b"exact" and mode_of(target) == 0o640
        leftover.write_bytes(b"again")
        leftover.chmod(0o666)
        write_atomic(target, b"umasked", new_mode=0o660)
        assert target.read_bytes() == b"umasked" and mode_of(target) == 0o640
    finally:
        os.umask(old)


def test_a_temp_file_swapped_for_a_link_while_written_is_never_renamed_into_place(
    tmp_path: Path, victim: Path
) -> None:
    target = tmp_path / "out"
    target.write_bytes(b"the old file")
    temp = str(target) + ".tmp"
    with pytest.raises(OSError) as info, replacing(target) as fd:  # noqa: PT012 - the swap happens inside
        write_all(fd, b"new", 0)
        os.unlink(temp)
        os.symlink(victim, temp)
    assert str(info.value) == (
        "[Errno 17] the temporary file was replaced while it was written; nothing was changed: check who "
        f"else writes in this folder and try again: '{temp}'"
    )
    assert target.read_bytes() == b"the old file" and not target.is_symlink()
    assert unchanged(victim) and not os.path.lexists(temp)


def test_the_snapshot_temp_file_as_a_link_while_a_writer_is_open(tmp_path: Path, victim: Path) -> None:
    """DB.snap.tmp made a link to another file while a writer has the database open: the snapshot the
    close writes goes to a new file of its own, with the log's mode; the other file keeps its bytes
    and its mode."""
    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("a record", tags=["t"])
        Path(str(db) + ".snap.tmp").symlink_to(victim)
        c.remember("another")
    assert unchanged(victim)
    snap_path = Path(str(db) + ".snap")
    assert not snap_path.is_symlink() and mode_of(snap_path) == 0o600
    assert not os.path.lexists(str(db) + ".snap.tmp")
    with MnemoClient(db, "owner", readonly=True) as r:
        assert r.stats()["snapshot_used"] and sorted(x.content for x in r.query()) == ["a record", "another"]


def test_the_erasure_journal_temp_file_as_a_link_at_a_forget(tmp_path: Path, victim: Path) -> None:
    """DB.erase.tmp a link when a forget writes its journal: the journal is a new file (and gone once the
    erasure is done); the other file is untouched and the record is erased."""
    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none") as c:
        gone = c.remember("forget me: secret payload")
        Path(str(db) + ".erase.tmp").symlink_to(victim)
        c.forget(gone.id)
        assert c.query() == []
    assert unchanged(victim)
    assert b"secret payload" not in db.read_bytes()
    assert not os.path.lexists(str(db) + ".erase.tmp") and not os.path.lexists(str(db) + ".erase")


def test_a_new_file_is_0644_less_the_umask_by_default(tmp_path: Path) -> None:
    """Files that hold nothing of a database's (checkpoint and witness notes) are made 0644 less the
    umask, by every way of writing one; write_text_atomic returns what its writer returns."""
    old = os.umask(0)
    try:
        write_atomic(tmp_path / "a", b"a")
        with replacing(tmp_path / "b") as fd:
            write_all(fd, b"b", 0)
        assert write_text_atomic(tmp_path / "c", lambda out: out.write("three")) == 5
    finally:
        os.umask(old)
    assert {p.name: (p.read_bytes(), mode_of(p)) for p in tmp_path.iterdir()} == {
        "a": (b"a", 0o644), "b": (b"b", 0o644), "c": (b"three", 0o644)}


def test_create_new_never_takes_an_existing_file_unless_told_it_is_a_leftover(tmp_path: Path, victim: Path) -> None:
    from mnemo.storage.file.atomic import create_new

    with pytest.raises(FileExistsError):
        create_new(str(victim), 0o600)
    assert unchanged(victim)
    link = tmp_path / "link"
    link.symlink_to(victim)
    with pytest.raises(FileExistsError):
        create_new(str(link), 0o600)
    os.close(create_new(str(link), 0o600, leftover=True))
    assert unchanged(victim) and not link.is_symlink() and link.read_bytes() == b"" and mode_of(link) == 0o600
