"""A file store that meets a log it did not write as it read it: a replaced file refused or followed
without losing a descriptor or its Merkle tree, another genesis of its db_id, a head inside a frame of
several entries, a reader racing an erasure or catching up past a forget appended after it looked,
live records whose payloads were zeroed, a durable write whose log a compaction replaced before its
fsync, a live writer whose log another process compacts (or is killed compacting) between two of its
writes, and a forget that waits for (or names) a reader of a replaced log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.descriptors import open_descriptors, open_files_holding
from helpers.frames import put_slots, read_entries, read_frames
from helpers.paths import HELPERS
from helpers.procs import subprocess_env

from mnemo import ErasureIncomplete, IntegrityError, MnemoClient, NotFound
from mnemo.audit import verify_db
from mnemo.chain.codec import make_entry
from mnemo.storage.file import handles, replay
from mnemo.storage.file.framing import encode_file_header, encode_frame
from mnemo.storage.file.logfile import FrameReader

OWNER = "owner"


def slots_of(db: Path) -> dict[str, tuple[int, int]]:
    """The payload slot (offset, length) of each record's last put."""
    return {rec_id: (s.offset, s.length) for rec_id, (_e, s) in put_slots(db).items()}


def _db_id(db: Path) -> str:
    with MnemoClient(db, OWNER, readonly=True) as c:
        return c.db_id


def _impostor(kind: str, tmp_path: Path, db: Path) -> tuple[Path, str]:
    """A file to put in the live log's place, and the refusal it must meet."""
    path = tmp_path / f"{kind}.db"
    if kind == "another database":
        with MnemoClient(path, OWNER, durability="none") as o:
            o.remember("another database")
        return path, f"{db} was replaced by another database (db_id {_db_id(path)}, not {_db_id(db)})"
    if kind == "not a database":
        path.write_bytes(b"not a Mnemo log" * 8)
        return path, f"{db}: not a Mnemo log (bad magic)"
    shutil.copyfile(db, path)  # an older copy: the live log gets one more entry after it
    return path, f"{db} was replaced by a file that ends at seq 1, before the head this client had read (seq 2)"


@pytest.mark.parametrize("kind", ["another database", "not a database", "an older copy"])
def test_a_refused_replacement_costs_no_descriptor_and_leaves_the_store_its_log_and_tree(
    tmp_path: Path, kind: str
) -> None:
    """A log replaced by a file that does not continue its chain is refused, each time it is met, with
    the file's offset 0 (or none) named, no descriptor left open and nothing written to it. The store
    stays on the file and Merkle tree it had: once the same file is back (same inode, nothing to reload),
    writes go on growing that tree and its leaf-hash cache."""
    db = tmp_path / "live.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        first = c.remember("first")
        impostor, refusal = _impostor(kind, tmp_path, db)
        c.remember("second")
        aside = tmp_path / "aside.db"
        os.rename(db, aside)
        shutil.copyfile(impostor, db)
        before = open_descriptors()
        for call in (lambda: c.get(first.id), c.query, lambda: c.remember("must not land")):
            with pytest.raises(IntegrityError) as info:
                call()
            assert str(info.value).startswith(refusal), str(info.value)
            assert info.value.offset == (None if kind == "an older copy" else 0)
            assert open_descriptors() == before, "a refused reload left what it opened open"
        assert db.read_bytes() == impostor.read_bytes()
        os.replace(aside, db)
        third = c.remember("third")
        assert [r.content for r in c.query()] == ["first", "second", "third"]
        assert c.get(third.id).content == "third"
        head = c.tree_head()
    assert head[0] == 4
    with MnemoClient(db, OWNER, readonly=True) as r:
        assert r.tree_head() == head
    report = verify_db(db)
    assert report.ok, report.problems


def test_a_client_that_read_only_the_genesis_refuses_another_genesis_of_its_db_id(tmp_path: Path) -> None:
    """A client that has read the genesis alone (seq 0) still checks a replaced log against it: a log
    with the same db_id whose genesis is another entry is another chain."""
    db = tmp_path / "new.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        genesis = read_entries(db)[0]
        forged_genesis = make_entry(0, genesis.ts_ns + 1, genesis.prev, "genesis", OWNER, genesis.body)
        forged = tmp_path / "forged.db"
        forged.write_bytes(encode_file_header(genesis.body["db_id"]) + encode_frame([(forged_genesis.raw, None)]))
        os.replace(forged, db)
        for _ in range(2):
            with pytest.raises(IntegrityError) as info:
                c.query()
            assert str(info.value) == (
                f"{db} was replaced by a file whose entry seq 0 is not the one this client had read "
                "(another chain, or a rewritten log)"
            )
        with pytest.raises(IntegrityError, match="another chain"):
            c.remember("must not land")
    assert read_entries(db) == [forged_genesis]


def test_a_client_whose_head_ends_a_frame_of_several_entries_follows_a_compaction(tmp_path: Path) -> None:
    """The head a client knew is the last entry of the last frame it read; after a compaction that
    others wrote past, that frame (of several entries, from a transaction) is found in the new log and
    its last entry compared, so the client follows the new file."""
    db = tmp_path / "tx.db"
    with MnemoClient(db, OWNER, durability="none") as c, MnemoClient(db, OWNER, durability="none") as other:
        c.forget(c.remember("gone " * 50).id)
        with c.transaction() as tx:
            ids = [tx.remember(f"in one frame {i}").id for i in range(3)]
        assert [len(f.entries) for f in read_frames(db)][-1] == 3
        other.compact()
        later = other.remember("after the compaction").id
        assert [r.id for r in c.query()] == [*ids, later]
        assert c.head == other.head
        c.remember("and on")
        assert c.verify().ok


def test_following_a_compaction_closes_the_old_log_and_tree(tmp_path: Path) -> None:
    """A store that follows another client's compaction opens the new log and its tree, and closes the
    old log's descriptor and the old tree's leaf-hash cache: the process holds as many as before."""
    db = tmp_path / "c.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        kept = c.remember("kept")
        c.forget(c.remember("gone " * 100).id)
        with MnemoClient(db, OWNER, durability="none") as other:
            other.compact()
        before = open_descriptors()
        for _ in range(2):
            assert [r.id for r in c.query()] == [kept.id]
            assert open_descriptors() == before
        c.remember("after")
        assert open_descriptors() == before
        assert c.verify().ok


class _FinishingErasure:
    """FrameReader stand-in: right after it hands over the frame holding `slot`, the rest of that slot
    is zeroed on disk, as the writer finishing an erasure between a reader's read and its check does."""

    def __init__(self, db: Path, slot: tuple[int, int]) -> None:
        self.db, self.slot = db, slot
        self.finished = False

    def reader(self) -> type:
        outer = self

        class Reader(FrameReader):
            def next(self) -> Any:
                frame, buf, pos = super().next()
                offset, length = outer.slot
                if any(s.offset == offset for s in frame.slots) and not outer.finished:
                    with open(outer.db, "r+b") as f:
                        f.seek(offset)
                        f.write(bytes(length))
                    outer.finished = True
                return frame, buf, pos

        return Reader


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "writer"])
def test_a_reader_racing_an_erasure_takes_a_slot_zeroed_since_it_was_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, readonly: bool
) -> None:
    """A reader, which never holds the writer lock, can read a payload slot half zeroed by an erasure
    that finishes before it checks the slot: it then reads as all zeros and is taken as erased (its
    forget follows). A writer holds the lock, so no erasure races it, and a frame follows the forget (an
    erasure is fsynced before anything is appended after its forget): the same slot is damage."""
    db = tmp_path / "race.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        gone = c.remember("erased while a reader reads it " * 4)
        kept = c.remember("kept")
        slot = slots_of(db)[gone.id]
        original = db.read_bytes()[slot[0]:slot[0] + slot[1]]
        c.forget(gone.id)
        later = c.remember("written after the forget")
    Path(str(db) + ".snap").unlink()
    offset, length = slot
    half = length // 2
    with open(db, "r+b") as f:  # the erasure part-way: the first half zeroed, the rest as it was
        f.seek(offset + half)
        f.write(original[half:])
    race = _FinishingErasure(db, slot)
    monkeypatch.setattr(replay, "FrameReader", race.reader())
    if readonly:
        with MnemoClient(db, OWNER, readonly=True) as r:
            assert race.finished
            assert [x.id for x in r.query()] == [kept.id, later.id]
            with pytest.raises(NotFound):
                r.get(gone.id)
    else:
        damaged = db.read_bytes()
        with pytest.raises(IntegrityError) as info:
            MnemoClient(db, OWNER, durability="none")
        assert race.finished
        assert str(info.value) == f"{db}: payload slot damaged at offset {offset}"
        assert db.read_bytes() == damaged[:offset] + bytes(length) + damaged[offset + length:]


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "writer"])
def test_live_records_whose_payloads_are_zeroed_are_named_with_their_own_offset(
    tmp_path: Path, readonly: bool
) -> None:
    """Zeroed payloads with no forget in the chain are damage, not an erasure: the refusal names one of
    the records and the offset of that record's slot, and the file is left as it was."""
    db = tmp_path / "zeroed.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        ids = [c.remember(f"record {i} " * 8).id for i in range(2)]
        c.remember("untouched")
    slots = slots_of(db)
    data = bytearray(db.read_bytes())
    for rec_id in ids:
        offset, length = slots[rec_id]
        data[offset:offset + length] = bytes(length)
    db.write_bytes(bytes(data))
    Path(str(db) + ".snap").unlink()
    with pytest.raises(IntegrityError) as info:
        MnemoClient(db, OWNER, readonly=readonly, durability="none")
    named = [i for i in ids if f"live record {i} " in str(info.value)]
    assert len(named) == 1, str(info.value)
    offset = slots[named[0]][0]
    assert str(info.value) == f"{db}: payload of live record {named[0]} is erased (offset {offset})"
    assert info.value.offset == offset
    assert db.read_bytes() == bytes(data)


def test_a_durable_write_whose_log_a_compaction_replaced_before_its_fsync_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write under durability="fsync" lets go of the writer lock, then waits for the fsync that covers
    its frame. If another client compacts the log in between, the frame's offset means nothing in the
    new, shorter log, which was fsynced before its rename: the write is durable and returns."""
    db = tmp_path / "d.db"
    done: list[str] = []
    with MnemoClient(db, OWNER, durability="fsync") as c, MnemoClient(db, OWNER, durability="none") as other:
        big = [c.remember("x" * 4000).id for _ in range(3)]
        c.forget(big)
        store: Any = c._store
        real_unlock = store._unlock

        def unlock_then_compacted() -> None:
            real_unlock()
            if not done:
                done.append("compacted")
                other.compact()
                store.refresh()  # this store follows the new log before the write's fsync

        monkeypatch.setattr(store, "_unlock", unlock_then_compacted)
        result: list[str] = []
        writer = threading.Thread(target=lambda: result.append(c.remember("last").id), daemon=True)
        writer.start()
        writer.join(10)
        assert not writer.is_alive(), "the write waited for ever for an fsync of the old log's offsets"
        assert done == ["compacted"] and len(result) == 1
        assert os.path.getsize(db) < 3 * 4000
        assert c.get(result[0]).content == "last"
    with MnemoClient(db, OWNER, readonly=True) as r:
        assert r.get(result[0]).content == "last" and r.verify().ok


# Opens the database and compacts it; `point` arms a SIGKILL just before or just after the rename of the
# new log over the path (none: the compaction runs to its end).
COMPACT_CHILD = r"""
import os, signal, sys
from mnemo import MnemoClient

db, point = sys.argv[1], sys.argv[2]
real_replace = os.replace

def replace(src, dst, **kw):
    if point == "before-rename":
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst, **kw)
    if point == "after-rename":
        os.kill(os.getpid(), signal.SIGKILL)

os.replace = replace
with MnemoClient(db, "owner", durability="none") as other:
    other.compact()
print("compacted", flush=True)
"""


@pytest.mark.parametrize("point", ["none", "before-rename", "after-rename"])
def test_a_live_writer_writes_to_the_log_the_path_names_after_another_process_compacts(
    tmp_path: Path, point: str
) -> None:
    """Between two writes of a live client, another process compacts the log: to its end, or killed
    (SIGKILL) just before or just after it renames the new log over the path. The client's next write
    lands in the file the path names then (the new log once it was renamed into place, else the old one),
    never in a replaced log, and its chain verifies there."""
    db = tmp_path / "live.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        c.forget(c.remember("gone " * 40).id)
        c.remember("first")
        old = os.open(db, os.O_RDONLY)  # the log the client writes to before the compaction
        try:
            old_size = os.fstat(old).st_size
            proc = subprocess.run([sys.executable, "-c", COMPACT_CHILD, str(db), point], capture_output=True,
                                  text=True, env=subprocess_env(), timeout=60)
            if point == "none":
                assert proc.returncode == 0 and proc.stdout == "compacted\n", proc.stderr
            else:
                assert proc.returncode == -9 and proc.stdout == "", proc.stderr
            replaced = point != "before-rename"
            assert (os.stat(db).st_ino != os.fstat(old).st_ino) == replaced
            second = c.remember("second")
            assert (os.fstat(old).st_size == old_size) == replaced, "the write went to the replaced log"
            last = read_entries(db)[-1]
            assert (last.seq, last.hash.hex()) == (second.seq, second.hash)
            assert os.fstat(c._store.fd).st_ino == os.stat(db).st_ino  # type: ignore[attr-defined]
        finally:
            os.close(old)
        assert Path(f"{db}.compact").exists() == (point == "before-rename")  # (until a writer opens)
        assert [r.content for r in c.query()] == ["first", "second"]
        assert c.verify().ok
    with MnemoClient(db, OWNER, durability="none") as again:
        assert [r.content for r in again.query()] == ["first", "second"]
    assert not Path(f"{db}.compact").exists()
    report = verify_db(db)
    assert report.ok, report.problems


class _SpiedCondition:
    """The store's _handles.idle condition, noting each time a thread waits on it (a forget waiting for
    readers of a replaced log)."""

    def __init__(self, real: threading.Condition) -> None:
        self.real = real
        self.waits = 0
        self.waiting = threading.Event()

    def __enter__(self) -> bool:
        return self.real.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.real.__exit__(*exc)

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1
        self.waiting.set()
        return self.real.wait(timeout)

    def notify_all(self) -> None:
        self.real.notify_all()


def test_a_forget_waits_for_a_reader_of_the_replaced_log_and_only_for_it(tmp_path: Path) -> None:
    """A reader still reading through a log that a compaction replaced keeps its descriptor: a forget
    then waits for that reader to finish, so that no descriptor of the process still shows the erased
    bytes when it returns. Once the reader has let go, later forgets do not wait."""
    db = tmp_path / "r.db"
    with MnemoClient(db, OWNER, durability="none") as c, MnemoClient(db, OWNER, durability="none") as other:
        secret = c.remember("a secret to erase 7f3a")
        later = c.remember("erased later 9c1e")
        store: Any = c._store
        reading = store._handles.acquire()  # a reader mid-read on the log as it is now
        other.compact()
        assert [r.id for r in c.query()] == [secret.id, later.id]  # follows the new log
        assert open_files_holding(b"a secret to erase 7f3a")  # the old log (and the new one) hold it
        spy = _SpiedCondition(store._handles.idle)
        store._handles.idle = spy

        def finish_reading() -> None:
            spy.waiting.wait(5)  # the reader lets go only once the forget waits for it
            store._handles.release(reading)

        reader = threading.Thread(target=finish_reading)
        reader.start()
        c.forget(secret.id)
        assert open_files_holding(b"a secret to erase 7f3a") == [], "the forget returned before the reader let go"
        reader.join(10)
        assert not reader.is_alive() and spy.waits >= 1
        spy.waits = 0
        c.forget(later.id)
        assert spy.waits == 0, "a forget waited for a reader that had finished"
        assert open_files_holding(b"erased later 9c1e") == []


class _StaleSize:
    """The store module's `os` and `file_state`, whose next look at the size of one descriptor reports an
    earlier size: a reader that took the log's size just before a writer appended more."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size, self.used = fd, size, False
        self.real_file_state = replay.file_state

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def file_state(self, path: str, fd: int) -> tuple[int, int, int]:
        ino, dev, size = self.real_file_state(path, fd)
        if fd != self.fd or self.used:
            return ino, dev, size
        self.used = True
        return ino, dev, self.size

    def fstat(self, fd: int) -> os.stat_result:
        st = os.fstat(fd)
        if fd != self.fd or self.used:
            return st
        self.used = True
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, self.size,
                               int(st.st_atime), int(st.st_mtime), int(st.st_ctime)))


@pytest.mark.parametrize("cut", ["after the put", "inside the forget"])
def test_a_reader_that_took_the_size_before_a_forget_landed_reads_on_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    """A reader catching up takes the log's size, then reads frames up to it. If a writer appends a put
    and then its forget meanwhile, the put's payload is already zeroed when the reader reaches it, and
    the forget lies past the size it took (or is cut by it, as a write in progress would be): that is
    an erasure, not damage. The forget was durable before a byte was zeroed, so it is there to read."""
    db = tmp_path / "stale.db"
    with MnemoClient(db, OWNER, durability="none") as reader, MnemoClient(db, OWNER, durability="none") as writer:
        kept = reader.remember("kept")
        gone = writer.remember("remembered, then forgotten while the reader looked " * 4)
        after_put = os.path.getsize(db)
        writer.forget(gone.id)
        size = after_put if cut == "after the put" else (after_put + os.path.getsize(db)) // 2
        store: Any = reader._store
        stale = _StaleSize(store.fd, size)
        monkeypatch.setattr(replay, "os", stale)
        monkeypatch.setattr(replay, "file_state", stale.file_state)
        assert [r.id for r in reader.query()] == [kept.id]
        assert stale.used
        with pytest.raises(NotFound):
            reader.get(gone.id)
        assert reader.verify().ok


def test_a_reader_meeting_zeros_landing_takes_the_slot_for_the_last_frames_erasure(tmp_path: Path) -> None:
    """An erasure writes the zeros after its forget is durable, and appends nothing before they are
    fsynced. A reader that meets a slot part-way zeroed, whose version the log's last frame forgets,
    takes it as being erased, not damaged; once a frame follows that forget, the same slot is damage."""
    db = tmp_path / "landing.db"
    with MnemoClient(db, OWNER, durability="none") as reader, MnemoClient(db, OWNER, durability="none") as writer:
        kept = reader.remember("kept")
        gone = writer.remember("zeros land on it as the reader reads it " * 4)
        offset, length = slots_of(db)[gone.id]
        original = db.read_bytes()[offset:offset + length]
        writer.forget(gone.id)
        with open(db, "r+b") as f:  # the zeros part-way: the first half landed, the rest not yet
            f.seek(offset + length // 2)
            f.write(original[length // 2:])
        assert not Path(str(db) + ".erase").exists()
        assert [r.id for r in reader.query()] == [kept.id]
        with pytest.raises(NotFound):
            reader.get(gone.id)
    db2 = tmp_path / "landed.db"
    with MnemoClient(db2, OWNER, durability="none") as writer:
        gone = writer.remember("zeros land on it as the reader reads it " * 4)
        offset, length = slots_of(db2)[gone.id]
        original = db2.read_bytes()[offset:offset + length]
        writer.forget(gone.id)
        writer.remember("written after the forget")
    Path(str(db2) + ".snap").unlink()
    with open(db2, "r+b") as f:
        f.seek(offset + length // 2)
        f.write(original[length // 2:])
    with pytest.raises(IntegrityError) as info:
        MnemoClient(db2, OWNER, readonly=True)
    assert str(info.value) == f"{db2}: payload slot damaged at offset {offset}"


def test_a_payload_zeroed_with_no_forget_after_it_is_still_damage_to_a_reader_catching_up(
    tmp_path: Path,
) -> None:
    """Reading on past the size it took finds no forget: the reader names the live record whose
    payload is zeroed, and the file is left as it was."""
    db = tmp_path / "zeroed-later.db"
    with MnemoClient(db, OWNER, durability="none") as reader, MnemoClient(db, OWNER, durability="none") as writer:
        reader.remember("kept")
        victim = writer.remember("zeroed on disk, never forgotten " * 4)
        offset, length = slots_of(db)[victim.id]
        with open(db, "r+b") as f:
            f.seek(offset)
            f.write(bytes(length))
        damaged = db.read_bytes()
        with pytest.raises(IntegrityError) as info:
            reader.query()
        assert str(info.value) == f"{db}: payload of live record {victim.id} is erased (offset {offset})"
        assert db.read_bytes() == damaged


def test_readers_querying_while_a_writer_remembers_and_forgets_meet_no_damage(tmp_path: Path) -> None:
    """One process remembers a record and forgets it, over and over; three others query meanwhile, each
    catching up with the log at every call. A healthy database: not one error, in any of them."""
    db = tmp_path / "loop.db"
    with MnemoClient(db, OWNER) as c:
        c.remember("the first record", tags=["t"])
    script = str(HELPERS / "forget_loop.py")
    procs = [
        subprocess.Popen([sys.executable, script, role, str(db), "4"], stdout=subprocess.PIPE, text=True,
                         env=subprocess_env())
        for role in ("writer", "reader", "reader", "reader")
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["errors"] for r in results] == [[], [], [], []]
    assert all(r["loops"] > 10 for r in results), results
    with MnemoClient(db, OWNER, readonly=True) as r:
        assert [x.content for x in r.query()] == ["the first record"]
        assert r.verify().ok


def _busy(seconds: float) -> subprocess.Popen[bytes]:
    """A process that keeps a core busy for `seconds`: load beside a test of a race."""
    return subprocess.Popen([sys.executable, "-c", f"import time\nend = time.monotonic() + {seconds}\n"
                             "while time.monotonic() < end: pass"])


def test_a_forget_never_returns_before_the_reader_it_waited_for_closed_the_replaced_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader that lets go of a replaced log closes its descriptor before the forget waiting for it
    hears so: under load (busy processes on every core), over many rounds, no forget returns while a
    descriptor of the process still holds what it erased, even with each close taking 20 ms."""
    real_close = handles.close_handle

    def slow_close(handle: Any) -> None:
        time.sleep(0.02)
        real_close(handle)

    monkeypatch.setattr(handles, "close_handle", slow_close)
    busy = [_busy(60) for _ in range(2)]
    try:
        for round_ in range(30):
            db = tmp_path / f"r{round_}.db"
            secret = f"a secret to erase {round_:04d} 7f3a".encode()
            with MnemoClient(db, OWNER, durability="none") as c, MnemoClient(db, OWNER, durability="none") as other:
                rec = c.remember(secret.decode())
                store: Any = c._store
                reading = store._handles.acquire()
                other.compact()
                c.query()  # follows the new log; the old one stays open for the reader
                spy = _SpiedCondition(store._handles.idle)
                store._handles.idle = spy

                def finish_reading(spy: _SpiedCondition = spy, reading: Any = reading, store: Any = store) -> None:
                    spy.waiting.wait(10)
                    store._handles.release(reading)

                reader = threading.Thread(target=finish_reading)
                reader.start()
                c.forget(rec.id)
                assert open_files_holding(secret) == [], f"round {round_}: the forget returned before the close"
                reader.join(10)
                assert not reader.is_alive() and spy.waits >= 1
    finally:
        for p in busy:
            p.kill()
            p.wait()


def test_a_forget_whose_reader_of_a_replaced_log_never_finishes_fails_naming_the_descriptor(
    tmp_path: Path,
) -> None:
    """A forget waits lock_timeout at most for a read through a replaced log: one that ends within it
    lets the forget return. One that outlasts it: the forget does not return quietly. It fails, about
    lock_timeout later, naming the descriptor that still holds the erased bytes; what it committed stands
    (the record is forgotten, the log erased), and the descriptor closes when the read ends."""
    db = tmp_path / "stuck.db"
    with MnemoClient(db, OWNER, durability="none", lock_timeout=0.5) as c, \
            MnemoClient(db, OWNER, durability="none") as other:
        early = c.remember("a read in flight ends in time")
        rec = c.remember("a secret a stuck reader keeps 5d2b")
        kept = c.remember("kept")
        store: Any = c._store
        reading = store._handles.acquire()
        other.compact()
        c.query()
        spy = _SpiedCondition(store._handles.idle)
        store._handles.idle = spy
        reader = threading.Thread(target=lambda: (spy.waiting.wait(10), store._handles.release(reading)))
        reader.start()
        c.forget(early.id)  # waits for the reader, which lets go well within the 0.5 s
        reader.join(10)
        assert spy.waits >= 1 and open_files_holding(b"a read in flight ends in time") == []

        reading = store._handles.acquire()
        other.compact()
        assert [r.id for r in c.query()] == [rec.id, kept.id]
        fd = reading.fd
        t0 = time.monotonic()
        with pytest.raises(ErasureIncomplete) as info:
            c.forget(rec.id)
        assert 0.5 <= time.monotonic() - t0 < 1.4
        assert str(info.value) == (
            f"{db}: the forget is committed and its content erased from the log, but descriptor {fd} of this "
            f"process (/proc/{os.getpid()}/fd/{fd}) still holds the log a compaction replaced, kept open by 1 "
            "read(s) in progress for over 0.5 s; the erased bytes stay readable through it until they finish"
        )
        assert open_files_holding(b"a secret a stuck reader keeps 5d2b") == [f"{db} (deleted)"]
        assert b"a secret a stuck reader keeps" not in db.read_bytes()  # the content, not a hex id that may hold 5d2b
        with pytest.raises(NotFound):
            c.get(rec.id)
        assert [r.id for r in other.query()] == [kept.id]
        store._handles.release(reading)
        assert open_files_holding(b"a secret a stuck reader keeps 5d2b") == []
        c.remember("writes go on")
        assert c.verify().ok
