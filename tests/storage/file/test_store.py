"""The file backend at its edges: a log on descriptor 0, a database made over an empty file, a reader
that meets a damaged payload or a write in progress just after a compaction, a log tail that leaves
the snapshot as it is, a log under another database's header, and an open that fails, which closes no
descriptor it did not open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.frames import read_entries, read_frames

from mnemo import IntegrityError, MnemoClient, MnemoError, NotFound
from mnemo.chain.codec import make_entry
from mnemo.storage.file.framing import FILE_MAGIC, HEADER_SIZE, encode_frame

OWNER = "owner"


def test_a_log_opened_on_descriptor_0_is_unlocked_after_each_write(tmp_path: Path) -> None:
    """A process started with stdin closed gets descriptor 0 for its log: the writer lock on it must
    still be let go after every write, or every other writer waits for it forever."""
    db = tmp_path / "fd0.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember("before")
    saved = os.dup(0)
    os.close(0)
    try:
        first = MnemoClient(db, OWNER, durability="none")
        try:
            assert os.fstat(0).st_ino == os.stat(db).st_ino, "the log did not get descriptor 0"
            first.remember("through descriptor 0")
            with MnemoClient(db, OWNER, durability="none", lock_timeout=0.5) as second:
                second.remember("from another open file")
            first.remember("and again")
            assert [r.content for r in first.query()] == [
                "before", "through descriptor 0", "from another open file", "and again"
            ]
        finally:
            first.close()
        with pytest.raises(OSError):  # closing the client closed its log's descriptor 0 too
            os.fstat(0)
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_an_empty_file_at_the_path_becomes_a_database(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.write_bytes(b"")
    with pytest.raises(NotFound, match="no Mnemo database at"):
        MnemoClient(db, OWNER, readonly=True)
    assert db.read_bytes() == b"", "a read-only open changed the empty file"
    with MnemoClient(db, OWNER, durability="none") as c:
        rec = c.remember("the first record")
        assert c.verify().ok
    data = db.read_bytes()
    assert data.startswith(FILE_MAGIC) and len(data) > HEADER_SIZE
    genesis, put = read_entries(db)
    assert (genesis.seq, genesis.op, genesis.agent) == (0, "genesis", OWNER)
    assert (put.op, put.body["id"]) == ("put", rec.id)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("empty.db.new")]


def test_a_file_that_is_not_empty_is_never_made_a_database(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    db.write_bytes(b"x")
    with pytest.raises(IntegrityError) as info:
        MnemoClient(db, OWNER, durability="none")
    assert str(info.value) == f"{db}: file is shorter than a Mnemo header"
    assert db.read_bytes() == b"x"


def _append(db: Path, op: str, body: dict[str, object], upto: int | None = None) -> None:
    """Append one entry in a frame of its own, as another writer would have; `upto`: only the frame's
    first bytes, as a write still in progress leaves it."""
    last = read_entries(db)[-1]
    entry = make_entry(last.seq + 1, last.ts_ns + 1, last.hash, op, OWNER, body)
    with open(db, "ab") as f:
        f.write(encode_frame([(entry.raw, None)])[:upto])


def test_a_tail_that_forgets_nothing_leaves_the_snapshot_as_it_is(tmp_path: Path) -> None:
    """Opening a writer replays what the snapshot does not cover; only a forget in that tail (whose
    records' tags the snapshot may hold) makes the open rewrite the snapshot."""
    db = tmp_path / "tail.db"
    snap = Path(str(db) + ".snap")
    with MnemoClient(db, OWNER, durability="none") as c:
        rec = c.remember("shared later", tags=["t"])
    _append(db, "grant", {"perms": ["read"], "principal": "reader", "scope": f"agent:{OWNER}"})
    before = snap.read_bytes(), snap.stat().st_ino
    with MnemoClient(db, OWNER, durability="none") as c:
        assert c.stats()["snapshot_used"]
        assert (snap.read_bytes(), snap.stat().st_ino) == before, "the open rewrote the snapshot"
    with MnemoClient(db, "reader", readonly=True) as r:
        assert r.get(rec.id).content == "shared later"  # the grant was replayed
    assert (snap.read_bytes(), snap.stat().st_ino) == before


def _slot_of_first_put(db: Path) -> tuple[int, int]:
    for frame in read_frames(db):
        for entry, slot in zip(frame.entries, frame.slots, strict=True):
            if entry.op == "put":
                return slot.offset, slot.length
    raise AssertionError("no put in the log")


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "writer"])
def test_a_damaged_payload_is_refused_by_a_reader_as_by_a_writer(tmp_path: Path, readonly: bool) -> None:
    """A payload slot that fails its checksum is damage; a reader, which may race an erasure, takes it
    for one only when the slot now reads as all zeros."""
    db = tmp_path / "slot.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember("first payload " * 4, tags=["a"])
        c.remember("second")
    Path(str(db) + ".snap").unlink()
    offset, length = _slot_of_first_put(db)
    data = bytearray(db.read_bytes())
    data[offset + length // 2] ^= 0x20
    db.write_bytes(bytes(data))
    with pytest.raises(IntegrityError) as info:
        MnemoClient(db, OWNER, readonly=readonly, durability="none")
    assert str(info.value) == f"{db}: payload slot damaged at offset {offset}"
    assert info.value.offset == offset
    assert db.read_bytes() == bytes(data)


def test_a_store_following_a_compaction_leaves_a_write_in_progress_alone(tmp_path: Path) -> None:
    """A store that finds the log replaced by a compaction reads the new file as a reader: a frame
    still being appended to it (by the process that compacted) is not its to cut."""
    db = tmp_path / "moved.db"
    with MnemoClient(db, OWNER, durability="none") as writer, MnemoClient(db, OWNER, durability="none") as idle:
        kept = writer.remember("kept", tags=["k"])
        writer.forget(writer.remember("gone").id)
        assert [r.id for r in idle.query()] == [kept.id]
        writer.compact()
        _append(db, "grant", {"perms": ["read"], "principal": "p", "scope": "s"}, upto=20)
        compacted = db.read_bytes()
        assert [r.id for r in idle.query()] == [kept.id]
        assert idle.head == writer.head
        assert db.read_bytes() == compacted, "a store that was not writing cut the frame in progress"


@pytest.mark.parametrize("frames", [1, 2, 5])
def test_the_snapshot_written_after_a_replay_is_used_by_the_next_open(tmp_path: Path, frames: int) -> None:
    """An open that replays the log (no snapshot) writes a snapshot ending at the last frame it read;
    the next open loads it instead of replaying again."""
    db = tmp_path / "replayed.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        ids = [c.remember(f"record {i}", tags=[f"t{i % 2}"]).id for i in range(frames)]
    Path(str(db) + ".snap").unlink()
    with MnemoClient(db, OWNER, durability="none") as c:
        assert not c.stats()["snapshot_used"]
        head = c.head
    for readonly in (True, False):
        with MnemoClient(db, OWNER, readonly=readonly, durability="none") as c:
            assert c.stats()["snapshot_used"], "the snapshot written after the replay was not used"
            assert c.head == head and [r.id for r in c.query()] == ids


@pytest.mark.parametrize("how", ["readonly", "not create"])
def test_an_open_that_fails_before_the_log_is_open_closes_no_descriptor_of_the_process(
    tmp_path: Path, how: str
) -> None:
    """Until the log is opened the store holds a placeholder for its descriptor, and a failed open closes
    what it holds: the placeholder must be no descriptor at all, or stdin, stdout or stderr would go."""
    from mnemo.storage.file import FileStore

    before = {fd: os.fstat(fd).st_ino for fd in (0, 1, 2)}
    with pytest.raises(NotFound, match="no Mnemo database"):
        FileStore(str(tmp_path / "missing.db"), "owner", readonly=how == "readonly", create=how == "readonly")
    assert {fd: os.fstat(fd).st_ino for fd in (0, 1, 2)} == before
    assert not (tmp_path / "missing.db").exists()


def test_a_log_of_a_header_and_no_entry_does_not_open(tmp_path: Path) -> None:
    """A file with a sound header and nothing after it is no database: IntegrityError naming the missing
    genesis, and the file is left as it was (the writer that opens it neither cuts nor extends it)."""
    from mnemo.storage.file.framing import encode_file_header

    db = tmp_path / "m.db"
    header = encode_file_header(bytes(range(16)))
    db.write_bytes(header)
    for readonly in (False, True):
        with pytest.raises(IntegrityError) as info:
            MnemoClient(db, "owner", readonly=readonly)
        assert str(info.value) == f"{db}: the log holds no genesis entry"
        assert db.read_bytes() == header


def test_an_open_the_system_refuses_names_its_reason(tmp_path: Path) -> None:
    """An OSError while opening (here: a path through a regular file) is a MnemoError with the
    system's reason as words, not its errno repr, and nothing is made."""
    from mnemo import MnemoError

    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a directory")
    path = blocker / "m.db"
    with pytest.raises(MnemoError) as info:
        MnemoClient(path, "owner")
    assert str(info.value) == f"cannot open the database at {path}: Not a directory"
    assert blocker.read_bytes() == b"not a directory"


@pytest.mark.parametrize(("durability", "readonly", "syncer"), [
    ("batch", False, True), ("batch", True, False), ("fsync", False, False), ("none", False, False),
])
def test_only_a_batch_writer_runs_the_background_syncer(
    tmp_path: Path, durability: str, readonly: bool, syncer: bool
) -> None:
    import threading

    db = tmp_path / "m.db"
    MnemoClient(db, "owner").close()
    before = {t.ident for t in threading.enumerate() if t.name == "mnemo-sync"}
    c = MnemoClient(db, "owner", durability=durability, readonly=readonly)
    try:
        started = [t for t in threading.enumerate() if t.name == "mnemo-sync" and t.ident not in before]
        assert len(started) == (1 if syncer else 0)
    finally:
        c.close()
    assert not any(t.is_alive() for t in started)  # close() stops it


def test_a_write_after_the_database_file_was_removed_is_refused(tmp_path: Path) -> None:
    """The file the client opened is gone from its path: a write is refused with the reason, never
    made into the unlinked file nobody would read again."""
    from mnemo import MnemoError

    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("one")
        os.remove(db)
        with pytest.raises(MnemoError) as info:
            c.remember("two")
        assert str(info.value) == f"the database file {db} was removed"
    assert not db.exists()


def test_a_writer_that_follows_another_clients_compaction_locks_the_new_log(tmp_path: Path) -> None:
    """A compaction by another client renames a new log over the path: a client still holding the old
    one takes its writer lock on the new log, so that while its transaction is open the compacting
    client cannot write."""
    from mnemo import LockTimeout

    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none", lock_timeout=0.2) as a, \
            MnemoClient(db, "owner", durability="none", lock_timeout=0.2) as b:
        a.forget(a.remember("gone").id)
        a.compact()
        with b.transaction():
            b.remember("in b's transaction")
            with pytest.raises(LockTimeout):
                a.remember("while b writes")
        a.remember("after b")
    with MnemoClient(db, "owner", readonly=True) as c:
        assert sorted(r.content for r in c.query()) == ["after b", "in b's transaction"]
        assert c.verify().ok


@pytest.mark.parametrize("journal", ["stray bytes", "another database's"])
def test_an_erasure_journal_naming_nothing_to_erase_is_removed_by_the_next_writer(
    tmp_path: Path, journal: str
) -> None:
    """A journal on its own never makes anything be zeroed: one left beside a log whose forgets have
    nothing left to erase (here: none at all) changes no byte of the log, a reader leaves it, and the
    next writer to open the database removes it."""
    from helpers.erase_journal import write_erase_journal

    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none") as c:
        rid = c.remember("kept").id
    log = db.read_bytes()
    erase = Path(str(db) + ".erase")
    if journal == "stray bytes":
        erase.write_bytes(b"not a journal")
    else:
        write_erase_journal(str(erase), bytes(16), [(HEADER_SIZE, 16)])
    with MnemoClient(db, "owner", readonly=True) as r:
        assert r.get(rid).content == "kept"
    assert erase.exists()
    with MnemoClient(db, "owner", durability="none") as w:
        assert w.get(rid).content == "kept"
        assert not erase.exists()
    assert db.read_bytes() == log


def test_a_replayed_writer_whose_snapshot_cannot_be_written_serves_its_index_and_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that replayed the log writes its snapshot when it closes; a full disk that refuses the
    snapshot changes nothing of what it served, and the close goes on."""
    import errno

    from mnemo.storage.file import opening as file_store

    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none") as c:
        ids = [c.remember(f"r{i}", tags=["t"]).id for i in range(3)]
    os.remove(str(db) + ".snap")  # the next open replays the log

    def full(path: str, body: object, mode: int | None = None) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(file_store.snap, "write_snapshot", full)
    with MnemoClient(db, "owner", durability="none") as w:
        assert sorted(r.id for r in w.query(tags=["t"])) == sorted(ids)
        assert not w.stats()["snapshot_used"]
    assert not Path(str(db) + ".snap").exists()


def test_a_new_database_file_is_made_with_mode_0600_under_the_umask(tmp_path: Path) -> None:
    """A new database is its owner's alone, with its snapshot and leaf-hash cache, whatever the umask
    (a wider one widens nothing): `chmod` shares it."""
    import stat as stat_module

    old = os.umask(0o022)
    try:
        MnemoClient(tmp_path / "a.db", "owner").close()
        os.umask(0o000)
        MnemoClient(tmp_path / "b.db", "owner").close()
    finally:
        os.umask(old)
    assert {p.name: stat_module.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()} == {
        "a.db": 0o600, "a.db.snap": 0o600, "a.db.leaves": 0o600,
        "b.db": 0o600, "b.db.snap": 0o600, "b.db.leaves": 0o600,
    }


@pytest.mark.parametrize(
    ("mode", "umask"), [(0o600, 0o022), (0o640, 0o022), (0o644, 0o077), (0o660, 0o002), (0o751, 0o022)],
    ids=["600-umask-022", "640-umask-022", "644-umask-077", "660-umask-002", "751-umask-022"],
)
def test_a_compaction_and_the_snapshot_keep_the_logs_mode(tmp_path: Path, mode: int, umask: int) -> None:
    """An operator who narrows (or widens) the log's permissions keeps them through a compaction, which
    writes a new file in its place, and the snapshot, which holds the index's ids and tags, is no more
    readable than the log, whatever the umask of the process that writes them."""
    import stat as stat_module

    db, snap_path = tmp_path / "p.db", Path(str(tmp_path / "p.db") + ".snap")
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("kept", tags=["private tag"])
    os.chmod(db, mode)
    snap_path.chmod(0o644)
    old = os.umask(umask)
    try:
        with MnemoClient(db, "owner", durability="none") as c:
            c.forget(c.remember("gone " * 40).id)  # the forget removes the snapshot; close writes it anew
            c.compact()
            assert stat_module.S_IMODE(os.stat(db).st_mode) == mode
        assert stat_module.S_IMODE(snap_path.stat().st_mode) == mode
    finally:
        os.umask(old)
    with MnemoClient(db, "owner", readonly=True) as r:
        assert r.stats()["snapshot_used"] and [x.content for x in r.query()] == ["kept"]


def test_a_creator_waits_for_an_empty_files_lock_and_opens_the_database_its_holder_made(tmp_path: Path) -> None:
    """An empty file at the path is another creator's, part-way: this one waits for its lock (as long
    as lock_timeout), and finding the file no longer empty once it has it, opens what the other made
    instead of putting its own database over it."""
    import fcntl
    import threading

    db = tmp_path / "m.db"
    MnemoClient(tmp_path / "made.db", "owner").close()
    made = (tmp_path / "made.db").read_bytes()
    db.write_bytes(b"")
    holder = os.open(db, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)

    def finish() -> None:  # the other creator writes its database into the file, then lets go
        os.pwrite(holder, made, 0)
        fcntl.flock(holder, fcntl.LOCK_UN)

    timer = threading.Timer(0.3, finish)
    timer.start()
    try:
        with MnemoClient(db, "owner", lock_timeout=10) as c:
            assert c.head[0] == 0
    finally:
        timer.join()
        os.close(holder)
    assert db.read_bytes()[:HEADER_SIZE] == made[:HEADER_SIZE]  # the holder's database, its db_id


def test_something_not_a_file_put_at_the_path_while_creating_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process puts a FIFO at the path between the creator's look (nothing there) and its link:
    the creator refuses it, without opening it for reading (a FIFO would block) or replacing it."""
    from mnemo import MnemoError
    from mnemo.storage.file import opening as file_store

    db = tmp_path / "m.db"
    real_link = os.link

    def link(src: str, dst: str) -> None:
        if dst == str(db):
            os.mkfifo(dst)  # what the other process did meanwhile
        real_link(src, dst)

    monkeypatch.setattr(file_store.os, "link", link)
    with pytest.raises(MnemoError) as info:
        MnemoClient(db, "owner")
    assert str(info.value) == f"cannot open the database at {db}: not a regular file"
    assert os.path.exists(db) and not os.path.isfile(db)
    assert os.listdir(tmp_path) == ["m.db"]  # the creator's temp file went too


def test_a_log_cut_shorter_under_a_client_is_an_integrity_error(tmp_path: Path) -> None:
    """Someone truncates the log below what the client has read: its next read refuses, naming both
    sizes, rather than serving records whose bytes are gone."""
    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("one")
        end = os.path.getsize(db)
        c.remember("two")
        read = os.path.getsize(db)
        os.truncate(db, end)
        with pytest.raises(IntegrityError) as info:
            c.query()
        assert str(info.value) == f"{db}: log is shorter ({end}) than already read ({read})"


def test_a_reader_goes_on_serving_what_it_read_once_the_file_is_removed(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none") as w:
        rid = w.remember("kept").id
    with MnemoClient(db, "owner", readonly=True) as r:
        os.remove(db)
        assert r.get(rid).content == "kept" and [x.id for x in r.query()] == [rid]


def test_a_tree_that_does_not_follow_the_log_is_an_integrity_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a bug makes the Merkle tree refuse entries the index took; should it, the write is an
    IntegrityError naming the tree, not the tree's own exception."""
    from mnemo.errors import MnemoError
    from mnemo.storage.file.tree_state import TreeState

    def refuse(self: TreeState, entries: object, first_seq: int) -> None:
        raise MnemoError(f"leaf cache ends before seq {first_seq}")

    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none") as c:
        monkeypatch.setattr(TreeState, "add", refuse)
        with pytest.raises(IntegrityError) as info:
            c.remember("one")
        assert str(info.value).startswith(f"{db}: the Merkle tree does not follow the log: leaf cache ends before seq ")


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "writer"])
def test_a_log_replaced_by_a_device_is_refused_before_a_byte_is_read(tmp_path: Path, readonly: bool) -> None:
    """A client that finds its log's path now names something other than a regular file (here a link
    to /dev/zero, which reads as endless zeros) refuses it as such, holds no descriptor of it, and goes
    on with its own log once that is back."""
    from mnemo import MnemoError

    path = tmp_path / "m.db"
    with MnemoClient(path, "owner", durability="none") as w:
        w.remember("kept")
    with MnemoClient(path, "owner", readonly=readonly, durability="none") as c:
        aside = tmp_path / "aside.db"
        os.rename(path, aside)
        path.symlink_to("/dev/zero")
        probe = os.open(os.devnull, os.O_RDONLY)
        os.close(probe)
        with pytest.raises(MnemoError) as info:
            c.query()
        assert str(info.value) == f"cannot open the database at {path}: not a regular file"
        lowest = os.open(os.devnull, os.O_RDONLY)  # the refused open closed what it opened
        os.close(lowest)
        assert lowest == probe
        path.unlink()
        os.rename(aside, path)
        assert [r.content for r in c.query()] == ["kept"]


def test_a_writers_open_removes_the_temp_files_of_creators_that_are_gone(tmp_path: Path) -> None:
    """A creator writes DB.new<pid>-<thread> and renames it into place; one killed before the rename
    leaves it behind. A writer's open removes those whose process no longer exists, and leaves a
    running creator's (a process of its own here, which the check must not disturb: it only asks
    whether the process exists) and names that are not a creator's."""
    import signal
    import subprocess
    import sys

    db = tmp_path / "m.db"
    MnemoClient(db, "owner").close()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    # every signal at its default action, whatever this process ignores: a signal sent would end it
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               restore_signals=True, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        dead = Path(f"{db}.new{int(gone.stdout)}-140000")
        alive = Path(f"{db}.new{running.pid}-140001")
        other = Path(f"{db}.newer-notes")
        for p in (dead, alive, other):
            p.write_bytes(b"a genesis that was never renamed into place")
        with MnemoClient(db, "owner", durability="none"):
            pass
        assert not dead.exists()
        assert alive.exists() and other.exists()
        with pytest.raises(subprocess.TimeoutExpired):  # still running half a second on: no signal reached it
            running.wait(timeout=0.5)
    finally:
        running.kill()
        running.wait()


@pytest.mark.parametrize("name", ["m.db.new\u00b2-1", "m.db.new\u0661\u0662-1", "m.db.new99999999999999999999-1",
                                  "m.db.new2147483648-1"])
def test_a_name_like_a_creators_temp_file_but_no_pid_is_left_alone(tmp_path: Path, name: str) -> None:
    """`DB.new<digits>-...` whose digits are no pid (a superscript or Arabic-Indic digit, a number past
    pid_t) is not a creator's: the open goes on and leaves it, rather than failing on int() or os.kill."""
    db = tmp_path / "m.db"
    MnemoClient(db, "owner").close()
    stray = tmp_path / name
    stray.write_bytes(b"not ours")
    with MnemoClient(db, "owner", durability="none") as c:
        assert c.verify().ok
    assert stray.read_bytes() == b"not ours"


@pytest.mark.parametrize("last_frame", ["the genesis alone", "a transaction of three puts"])
def test_a_snapshot_ending_at_any_frame_is_used_by_the_next_open(tmp_path: Path, last_frame: str) -> None:
    """The snapshot ends at the log's last frame, whatever it is: the genesis frame of a database with no
    record yet, or a frame of several entries; the next open loads it rather than replaying the log."""
    db = tmp_path / "s.db"
    with MnemoClient(db, "owner", durability="none") as c:
        if last_frame != "the genesis alone":
            with c.transaction() as tx:
                for i in range(3):
                    tx.remember(f"in one frame {i}")
        head = c.head
    for readonly in (True, False):
        with MnemoClient(db, "owner", readonly=readonly, durability="none") as c:
            assert c.stats()["snapshot_used"], "the snapshot was taken for stale"
            assert c.head == head and len(c.query()) == (0 if last_frame == "the genesis alone" else 3)


def test_the_compacted_log_is_private_until_its_copy_is_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DB.compact holds every payload: it is made 0600 and given the log's mode only once the copy is
    written, so no other user can open it while it grows, whatever the log's mode and the umask."""
    import stat as stat_module

    from mnemo.storage.file import compaction as file_store

    db = tmp_path / "p.db"
    with MnemoClient(db, "owner", durability="none") as c:
        for i in range(3):
            c.remember(f"record {i}")
        os.chmod(db, 0o644)
        compact_path = str(db) + ".compact"
        modes: list[int] = []
        real_write_all = file_store.write_all

        def write_all(fd: int, data: bytes, offset: int) -> None:
            if os.readlink(f"/proc/self/fd/{fd}") == compact_path:
                modes.append(stat_module.S_IMODE(os.fstat(fd).st_mode))
            real_write_all(fd, data, offset)

        monkeypatch.setattr(file_store, "write_all", write_all)
        old = os.umask(0)
        try:
            c.compact()
        finally:
            os.umask(old)
        assert len(modes) == 5 and set(modes) == {0o600}  # the header and the four frames
        assert stat_module.S_IMODE(os.stat(db).st_mode) == 0o644


def test_a_writers_open_gives_the_sidecars_the_logs_mode(tmp_path: Path) -> None:
    """A database shared until now (log, snapshot and leaf-hash cache 0644) and then made private with
    `chmod 600` on its log: the next writer's open gives the snapshot (ids and tags) and the cache the
    log's mode at once, not at its next write of them. A read-only open changes no file."""
    import stat as stat_module

    db = tmp_path / "m.db"
    sidecars = [Path(str(db) + ".snap"), Path(str(db) + ".leaves")]
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("private later", tags=["a tag"])
    for p in (db, *sidecars):
        p.chmod(0o644)
    db.chmod(0o600)
    with MnemoClient(db, "owner", readonly=True) as r:
        assert r.stats()["snapshot_used"]
    assert [stat_module.S_IMODE(p.stat().st_mode) for p in sidecars] == [0o644, 0o644]
    with MnemoClient(db, "owner", durability="none") as w:
        assert w.stats()["snapshot_used"]
        assert [stat_module.S_IMODE(p.stat().st_mode) for p in sidecars] == [0o600, 0o600]


def test_a_writers_open_never_changes_a_mode_through_a_link(tmp_path: Path) -> None:
    """A link put where a sidecar belongs (to a file elsewhere) is not followed to change that file's
    mode: only regular files at the sidecars' own paths are given the log's mode."""
    import stat as stat_module

    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("a record")
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"someone else's file")
    outside.chmod(0o644)
    snap_path = Path(str(db) + ".snap")
    snap_path.unlink()
    snap_path.symlink_to(outside)
    db.chmod(0o600)
    with MnemoClient(db, "owner", durability="none") as w:
        assert [r.content for r in w.query()] == ["a record"]
    assert stat_module.S_IMODE(outside.stat().st_mode) == 0o644
    assert outside.read_bytes() == b"someone else's file"
    assert not snap_path.is_symlink()  # the replay's snapshot was written in the link's place
    assert stat_module.S_IMODE(snap_path.stat().st_mode) == 0o600


def test_a_file_system_that_refuses_chmod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where chmod is refused (a file system without modes, a sidecar another user owns): a writer's open
    leaves the sidecars as they are and goes on; a snapshot that cannot be given the log's mode is not
    written (and leaves no .tmp); a compaction fails as a compaction does, the old log standing and no
    DB.compact left. Nothing is ever left wider than the log."""
    import errno
    import stat as stat_module

    from mnemo import DurabilityError

    db = tmp_path / "m.db"
    snap_path, leaves = Path(str(db) + ".snap"), Path(str(db) + ".leaves")
    with MnemoClient(db, "owner", durability="none") as c:
        kept = c.remember("kept").id
    for p in (db, snap_path, leaves):
        p.chmod(0o644)
    db.chmod(0o640)
    before = db.read_bytes()

    def refused(fd: int, mode: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", refused)
    with MnemoClient(db, "owner", durability="none") as c:
        assert [stat_module.S_IMODE(p.stat().st_mode) for p in (snap_path, leaves)] == [0o644, 0o644]
        c.forget(c.remember("gone " * 40).id)  # removes the snapshot; the close cannot write one
        with pytest.raises(DurabilityError) as info:
            c.compact()
        assert str(info.value) == "compaction failed: [Errno 1] Operation not permitted"
        assert not Path(str(db) + ".compact").exists()
        assert db.read_bytes().startswith(before)
    assert not snap_path.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    monkeypatch.undo()
    with MnemoClient(db, "owner", durability="none") as c:
        assert [r.id for r in c.query()] == [kept]
        assert c.verify().ok


def test_a_log_under_another_databases_header_does_not_open(tmp_path: Path) -> None:
    """A valid header of database B on the log of database A: its genesis names A, so the log is refused
    (and the file is left as it was)."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for path in (a, b):
        with MnemoClient(path, "owner", durability="none") as c:
            c.remember(f"in {path.name}")
    forged = tmp_path / "forged.db"
    forged.write_bytes(b.read_bytes()[:32] + a.read_bytes()[32:])
    before = forged.read_bytes()
    for readonly in (True, False):
        with pytest.raises(IntegrityError) as refused:
            MnemoClient(forged, "owner", durability="none", readonly=readonly)
        assert str(refused.value) == f"{forged}: the genesis at offset 32 belongs to another database"
        assert refused.value.offset == 32
    assert forged.read_bytes() == before


def test_an_open_that_fails_closes_no_descriptor_it_did_not_open(tmp_path: Path) -> None:
    """Whatever stops an open (a directory in the database's place, a log of another database), the
    descriptors of the process are as they were: none leaked, and none closed that the store never
    opened (descriptor 0 among them)."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for path in (a, b):
        with MnemoClient(path, "owner", durability="none") as c:
            c.remember("x")
    forged = tmp_path / "forged.db"
    forged.write_bytes(b.read_bytes()[:32] + a.read_bytes()[32:])
    (tmp_path / "dir.db").mkdir()
    before = sorted(os.listdir("/proc/self/fd"))
    assert "0" in before
    for path, error in ((tmp_path / "dir.db", MnemoError), (forged, IntegrityError)):
        for readonly in (True, False):
            with pytest.raises(error):
                MnemoClient(path, "owner", durability="none", readonly=readonly)
            assert sorted(os.listdir("/proc/self/fd")) == before, (path, readonly)


def test_a_link_at_the_creation_temp_name_is_never_written_through(tmp_path: Path) -> None:
    """The temp file a new database is written to (DB.newPID-THREAD) planted as a link to another file:
    it is removed, not followed; the database is made 0600 and the other file keeps its bytes and mode."""
    import stat as stat_module
    import threading

    db = tmp_path / "new.db"
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious, not Mnemo's")
    victim.chmod(0o644)
    Path(f"{db}.new{os.getpid()}-{threading.get_ident()}").symlink_to(victim)
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("a record")
    assert victim.read_bytes() == b"precious, not Mnemo's" and stat_module.S_IMODE(victim.stat().st_mode) == 0o644
    assert not db.is_symlink() and stat_module.S_IMODE(db.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.db", "new.db.leaves", "new.db.snap", "victim"]


def test_a_creation_temp_file_swapped_for_a_link_is_never_linked_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link put at DB.newPID-THREAD between its write and its link to DB: the creation fails, no
    database (and no link) appears at DB, and the link's target is untouched."""
    import threading

    from mnemo.storage.file import opening

    db = tmp_path / "new.db"
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious, not Mnemo's")
    tmp = f"{db}.new{os.getpid()}-{threading.get_ident()}"
    real_sync = opening.sync

    def sync_then_swap(fd: int) -> None:
        real_sync(fd)
        os.unlink(tmp)
        os.symlink(victim, tmp)

    monkeypatch.setattr(opening, "sync", sync_then_swap)
    with pytest.raises(MnemoError) as info:
        MnemoClient(db, "owner", durability="none")
    assert str(info.value) == (
        f"cannot open the database at {db}: the temporary file was replaced while it was written; nothing "
        "was changed: check who else writes in this folder and try again"
    )
    assert not os.path.lexists(db) and not os.path.lexists(tmp)
    assert victim.read_bytes() == b"precious, not Mnemo's"
