"""The storage layer played against: sidecar files deleted, replaced or forged, the log swapped under
a running client, payloads rewritten in place, descriptors of replaced logs, leftovers of crashes, a
full disk. Each attack meets a clear error or no effect, and the database stays as it was."""

from __future__ import annotations

import os
import shutil
import threading
import time
import zlib
from array import array
from pathlib import Path
from typing import Any

import pytest
from helpers.descriptors import open_files_holding
from helpers.erase_journal import write_erase_journal
from helpers.frames import check_chain, read_entries, read_frames
from helpers.procs import start_writer

from mnemo import MnemoClient
from mnemo.audit import verify_db
from mnemo.client import RecordUnavailable
from mnemo.errors import IntegrityError, MnemoError
from mnemo.storage.file import snapshot as snap
from mnemo.storage.file.index import Index

OWNER = "owner"


def deleted_descriptors(path: Path) -> list[str]:
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(str(path)) and target.endswith("(deleted)"):
            out.append(target)
    return out


def folder_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())


# -- one writer, whatever happens to the files beside the log ------------------------------------------


def test_writers_stay_one_at_a_time_while_sidecars_are_deleted_and_replaced(tmp_path: Path) -> None:
    """Two writer processes and a compacting client in this one, while a vandal keeps deleting and
    replacing every file beside the log (the old lock file name included): every acknowledged write is
    in the log, once, in one gap-free chain that verifies."""
    db = tmp_path / "w.db"
    MnemoClient(db, OWNER).close()
    n = 300
    procs = [
        start_writer("bulk", str(db), f"w{k}", "--durability", "none", "--tag", f"w{k}", "--count", str(n))
        for k in range(2)
    ]
    stop = threading.Event()

    def vandal() -> None:
        i = 0
        while not stop.is_set():
            for suffix in (".lock", ".snap", ".erase"):
                side = Path(str(db) + suffix)
                side.unlink(missing_ok=True)
                if i % 2:
                    side.write_bytes(os.urandom(64))  # a stranger's file under the name
            i += 1
            time.sleep(0.002)

    def compactor() -> None:
        with MnemoClient(db, OWNER, durability="none", lock_timeout=60.0) as c:
            while not stop.is_set():
                c.compact()
                time.sleep(0.01)

    threads = [threading.Thread(target=vandal), threading.Thread(target=compactor)]
    try:
        for t in threads:
            t.start()
        for p in procs:
            assert p.stdout is not None and p.stderr is not None
            line = p.stdout.readline()
            assert line == "READY\n", p.stderr.read()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            outputs.append(out.splitlines())
    finally:
        stop.set()
        for t in threads:
            t.join()
        for p in procs:
            p.kill()
            p.wait()
    for side in (".lock", ".snap", ".erase"):
        Path(str(db) + side).unlink(missing_ok=True)
    entries = read_entries(db)
    check_chain(entries)
    acked = [line for out in outputs for line in out if line and not line.startswith("DONE")]
    put_ids = [e.body["id"] for e in entries if e.op == "put"]
    assert sorted(put_ids) == sorted(acked) and len(put_ids) == 2 * n
    assert verify_db(db).ok


def test_a_writer_waiting_on_the_lock_follows_a_compaction_to_the_new_log(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with MnemoClient(db, OWNER, durability="none") as a, MnemoClient(db, OWNER, durability="none") as b:
        a.remember("first")
        done: list[int] = []
        with a.transaction():
            a.remember("in a transaction")
            t = threading.Thread(target=lambda: done.append(b.remember("waited").seq))
            t.start()
            time.sleep(0.2)  # b is waiting on the flock of the log a holds
        a.compact()  # may run before or after b's write: either way b writes to the file at the path
        t.join()
        a.remember("after")
        assert sorted(r.content for r in a.query()) == ["after", "first", "in a transaction", "waited"]
        assert [e.seq for e in read_entries(db)] == list(range(5))
        assert a.verify().ok and b.verify().ok


# -- erasure leaves nothing behind, anywhere -----------------------------------------------------------


def test_compactions_by_another_client_leave_no_descriptor_of_a_replaced_log(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    with MnemoClient(db, OWNER, durability="none") as reader, MnemoClient(db, OWNER, durability="none") as w:
        rec = w.remember("x" * 10_000)
        for i in range(30):
            w.remember(f"more {i}")
            w.compact()
            assert reader.get(rec.id).content == rec.content  # follows the new log
            assert deleted_descriptors(db) == [], f"after compaction {i}"


def test_forget_leaves_no_readable_copy_in_any_descriptor_of_this_process(tmp_path: Path) -> None:
    """A client that followed a compaction, and one that did the compacting: after a forget, no open
    descriptor of the process (of any log, replaced or current) still holds the forgotten bytes."""
    db = tmp_path / "f.db"
    secret = b"SECRET-4417-never-again"
    with MnemoClient(db, OWNER, durability="none") as a, MnemoClient(db, OWNER, durability="none") as b:
        rec = a.remember(secret.decode(), tags=["s"])
        keep = a.remember("keep")
        b.compact()  # the log a has open is replaced
        assert a.get(keep.id).content == "keep"  # a now reads the new log
        b.compact()
        assert open_files_holding(secret), "the test would prove nothing"
        a.forget(rec.id)
        assert open_files_holding(secret) == []
        assert secret not in folder_bytes(tmp_path)
        assert a.get(keep.id).content == "keep" and b.get(keep.id).content == "keep"


def test_a_reader_in_flight_on_a_replaced_log_finishes_and_its_descriptor_is_closed(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    with MnemoClient(db, OWNER, durability="none") as a, MnemoClient(db, OWNER, durability="none") as b:
        recs = [a.remember(f"record {i} " + "y" * 500) for i in range(200)]
        stop = threading.Event()
        errors: list[BaseException] = []

        def read() -> None:
            try:
                while not stop.is_set():
                    for r in recs[::17]:
                        assert a.get(r.id).content == r.content
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=read) for _ in range(3)]
        for t in threads:
            t.start()
        for _ in range(10):
            b.compact()
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join()
        assert errors == []
        a.get(recs[0].id)
        assert deleted_descriptors(db) == []


def test_a_killed_compactions_leftover_is_removed_by_the_next_forget(tmp_path: Path) -> None:
    """A compaction killed before its rename leaves DB.compact: a full copy of the log. A forget by a
    client that was already open (no writer open in between) must not leave it holding what it erased."""
    db = tmp_path / "k.db"
    secret = b"SECRET-9031-in-the-leftover"
    with MnemoClient(db, OWNER, durability="none") as c:
        rec = c.remember(secret.decode())
        c.remember("keep")
        shutil.copyfile(db, str(db) + ".compact")  # what the killed compaction had written
        Path(str(db) + ".snap.tmp").write_bytes(db.read_bytes())  # and a killed snapshot write
        assert secret in Path(str(db) + ".compact").read_bytes()
        notes = verify_db(db).notes
        assert any(".compact is left over" in n for n in notes), notes
        c.forget(rec.id)
        assert not Path(str(db) + ".compact").exists() and not Path(str(db) + ".snap.tmp").exists()
        assert secret not in folder_bytes(tmp_path)
        assert c.verify().ok


def _slot_of(client: MnemoClient, rec_id: str) -> tuple[int, int]:
    rec = client._store.index.get_rec(rec_id)
    assert rec is not None
    return rec.latest.slot_off, rec.latest.slot_len


@pytest.mark.parametrize("region", ["inside", "exact", "straddling", "header", "outside"])
def test_a_forged_erase_journal_zeroes_nothing(tmp_path: Path, region: str) -> None:
    """A journal may only ever classify slots of forgotten records: one naming a live record's slot,
    part of it, a frame header or bytes past the end makes the next writer open change no byte of the
    log, and the live record reads back whole."""
    db = tmp_path / "j.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        live = c.remember("LIVE-DATA " * 40)
        off, length = _slot_of(c, live.id)
        db_id = bytes.fromhex(c.db_id)
    regions = {
        "inside": [(off + 4, length - 4)],
        "exact": [(off, length)],
        "straddling": [(off - 10, 30)],
        "header": [(32, 24)],
        "outside": [(db.stat().st_size + 100, 50)],
    }[region]
    before = db.read_bytes()
    write_erase_journal(str(db) + ".erase", db_id, regions)
    with MnemoClient(db, OWNER, durability="none") as c:
        assert c.get(live.id).content == live.content
    assert db.read_bytes() == before
    assert not Path(str(db) + ".erase").exists()  # a stray journal is dropped, nothing else
    assert verify_db(db).ok


def test_a_journal_naming_a_damaged_live_slot_does_not_turn_damage_into_erasure(tmp_path: Path) -> None:
    db = tmp_path / "jd.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        live = c.remember("LIVE-DATA " * 40)
        off, length = _slot_of(c, live.id)
        db_id = bytes.fromhex(c.db_id)
    data = bytearray(db.read_bytes())
    data[off + 30] ^= 0xFF  # damage inside the live payload
    db.write_bytes(bytes(data))
    write_erase_journal(str(db) + ".erase", db_id, [(off, length)])
    Path(str(db) + ".snap").unlink()
    with pytest.raises(IntegrityError, match="erased"):
        MnemoClient(db, OWNER, durability="none").close()
    assert db.read_bytes() == bytes(data)


# -- nothing outside the chain is trusted beyond what verify checks ----------------------------------


def _tamper_index(db: Path, edit: object) -> None:
    path = str(db) + ".snap"
    body = snap.read_snapshot(path)
    assert body is not None
    index = Index.from_state(body["db_id"], body["index"])
    edit(index)  # type: ignore[operator]
    body["index"] = index.to_state()
    snap.write_snapshot(path, body)


def test_a_snapshot_moving_a_record_into_mallorys_scope_serves_her_nothing(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with MnemoClient(db, "alice", durability="none") as alice:
        secret = alice.remember("alice's diary", tags=["diary"])
    with MnemoClient(db, "mallory", durability="none") as m:
        m.remember("mallory's own")

    def move(index: Index) -> None:
        rec = index.get_rec(secret.id)
        assert rec is not None
        index.drop(secret.id)
        index.forgotten.discard(secret.id)
        index.put(secret.id, "agent:mallory", rec.tags, rec.latest)

    _tamper_index(db, move)
    with MnemoClient(db, "mallory", durability="none", readonly=True) as m:
        assert m.stats()["snapshot_used"]
        with pytest.raises(IntegrityError, match="not the put of record"):
            m.get(secret.id)  # the entry it would be served as says scope agent:alice
        with pytest.raises(IntegrityError):
            m.query(tags=["diary"])
    report = verify_db(db)
    assert not report.ok and {p.kind for p in report.problems} == {"snapshot"}
    assert any(secret.id in p.message for p in report.problems)


def test_a_snapshot_hiding_a_revoke_is_reported_by_verify(tmp_path: Path) -> None:
    """The one thing a forged snapshot can still do with the ACL is leave out a frame it lists: the
    revoke's. Both verifies name it."""
    db = tmp_path / "rv.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember("owner's")
        c.grant("bob", "team:*", ["read"])
        c.revoke("bob", "team:*")
    _tamper_index(db, lambda index: setattr(index, "acl_frames", index.acl_frames[:-1]))
    report = verify_db(db)
    assert not report.ok and [p.kind for p in report.problems] == ["snapshot"]
    assert "grants" in report.problems[0].message
    with MnemoClient(db, OWNER, durability="none", readonly=True) as c:
        assert not c.verify().ok


def test_a_snapshot_listing_a_put_frame_as_an_acl_frame_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "pf.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember("a put")
    put_frame = read_frames(db)[1].offset
    _tamper_index(db, lambda index: index.acl_frames.append(put_frame))
    with MnemoClient(db, OWNER, durability="none", readonly=True) as c:
        assert not c.stats()["snapshot_used"]
    report = verify_db(db)
    assert [p.kind for p in report.problems] == ["snapshot"] and "refused" in report.problems[0].message


def test_a_client_refuses_to_follow_an_older_copy_or_another_database(tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    old_copy = tmp_path / "old.db"
    other = tmp_path / "other.db"
    with MnemoClient(other, OWNER, durability="none") as o:
        o.remember("another db")
    with MnemoClient(db, OWNER, durability="none") as c:
        first = c.remember("first")
        shutil.copyfile(db, old_copy)
        second = c.remember("second")
        good = tmp_path / "good.db"
        shutil.copyfile(db, good)
        for impostor, why in ((old_copy, "ends at seq"), (other, "another database")):
            staged = tmp_path / "staged.db"
            shutil.copyfile(impostor, staged)
            os.replace(staged, db)
            for call in (lambda: c.get(first.id), lambda: c.remember("must not land"), c.query):
                with pytest.raises(IntegrityError, match=why):
                    call()
            assert impostor.read_bytes() == db.read_bytes()  # nothing was written to it
        shutil.copyfile(good, tmp_path / "staged.db")
        os.replace(tmp_path / "staged.db", db)  # the right file (a new inode) is followed again
        assert [r.id for r in c.query()] == [first.id, second.id]
        c.remember("third")
        assert c.verify().ok


def test_a_client_refuses_a_same_length_log_with_another_history(tmp_path: Path) -> None:
    db = tmp_path / "fork.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember("common")
        fork = tmp_path / "fork-copy.db"
        shutil.copyfile(db, fork)
        with MnemoClient(fork, OWNER, durability="none") as f:
            f.remember("the fork's")
            f.remember("the fork's, again")
        c.remember("ours")
        os.replace(fork, db)
        with pytest.raises(IntegrityError, match="not the one this client had read"):
            c.query()


def test_a_payload_rewritten_with_a_recomputed_checksum_is_never_served(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        rec = c.remember("the real content", tags=["t"])
        off, length = _slot_of(c, rec.id)
        data = bytearray(db.read_bytes())
        payload = bytearray(data[off + 4 : off + length])
        payload[-5:] = b"FORGE"[: len(payload[-5:])]
        data[off + 4 : off + length] = payload
        data[off : off + 4] = zlib.crc32(bytes(payload)).to_bytes(4, "big")
        db.write_bytes(bytes(data))  # same inode: the client reads it at once
        for read in (lambda: c.get(rec.id), lambda: c.query(tags=["t"]), lambda: c.history(rec.id)):
            with pytest.raises(IntegrityError, match="digest") as exc:
                read()
            assert exc.value.offset == off
        assert db.read_bytes() == bytes(data)


# -- faults and limits -------------------------------------------------------------------------------


@pytest.mark.parametrize("snapshot_state", ["missing", "stale"])
def test_a_full_disk_for_the_snapshot_never_stops_an_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot_state: str
) -> None:
    db = tmp_path / "full.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        doomed = c.remember("SECRET-5151 to forget")
        c.remember("keep")
    if snapshot_state == "missing":
        Path(str(db) + ".snap").unlink()
    else:
        with MnemoClient(db, OWNER, durability="none") as c:
            c.remember("after the snapshot")
            c._store._dirty_snapshot = False  # (closes without rewriting it: the snapshot is now stale)
    real_pwrite = os.pwrite

    def no_space(fd: int, data: bytes, offset: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".snap.tmp"):
            raise OSError(28, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", no_space)
    with MnemoClient(db, OWNER, durability="fsync") as c:  # the snapshot write fails at open: not fatal
        c.remember("written on a full disk")
        assert c.forget(doomed.id) == 1
        c.compact()
        assert c.verify().ok
    assert not Path(str(db) + ".snap.tmp").exists()
    assert b"SECRET-5151" not in folder_bytes(tmp_path)


def test_a_fifo_as_the_database_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    result: list[BaseException] = []

    def attempt(readonly: bool) -> None:
        try:
            MnemoClient(fifo, OWNER, readonly=readonly).close()
        except BaseException as exc:  # noqa: BLE001 - inspected below
            result.append(exc)

    for readonly in (False, True):
        t = threading.Thread(target=attempt, args=(readonly,), daemon=True)
        t.start()
        t.join(5.0)
        assert not t.is_alive(), "opening a FIFO blocked"
        exc = result.pop()
        assert isinstance(exc, MnemoError) and "not a regular file" in str(exc)
        assert fifo.exists() and not fifo.is_file()


def test_a_bit_flip_in_an_acknowledged_last_frame_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "ack.db"
    with MnemoClient(db, OWNER, durability="fsync") as c:
        rec = c.remember("acknowledged " * 20)
    frame = read_frames(db)[-1]
    data = bytearray(db.read_bytes())
    data[frame.offset + 40] ^= 0x04
    db.write_bytes(bytes(data))
    with pytest.raises(IntegrityError) as exc:
        MnemoClient(db, OWNER).close()
    assert exc.value.offset == frame.offset
    assert db.read_bytes() == bytes(data)  # nothing cut: the record can still be salvaged
    data[frame.offset + 40] ^= 0x04
    db.write_bytes(bytes(data))
    with MnemoClient(db, OWNER) as c:
        assert c.get(rec.id).content == rec.content


def test_unavailable_is_still_unavailable_for_a_forged_scope(tmp_path: Path) -> None:
    """The entry check runs only on what the index would serve: a record the caller cannot read stays
    RecordUnavailable, whatever the snapshot says about other records."""
    db = tmp_path / "u.db"
    with MnemoClient(db, "alice", durability="none") as alice:
        private = alice.remember("private")
    with MnemoClient(db, "mallory", durability="none", readonly=True) as m, pytest.raises(RecordUnavailable):
        m.get(private.id)


def test_verify_calls_a_whole_last_frame_with_a_changed_length_damage_not_a_torn_tail(tmp_path: Path) -> None:
    import struct

    db = tmp_path / "len.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember("the last record")
    frame = read_frames(db)[-1]
    data = bytearray(db.read_bytes())
    elen = struct.unpack_from(">I", data, frame.offset + 16)[0]
    struct.pack_into(">I", data, frame.offset + 16, elen + 4096)  # claims to run past the end
    db.write_bytes(bytes(data))
    kinds = [p.kind for p in verify_db(db).problems]
    assert kinds == ["bad-frame"], kinds
    with pytest.raises(IntegrityError, match="damaged length"):
        MnemoClient(db, OWNER).close()
    assert db.read_bytes() == bytes(data)


@pytest.mark.parametrize("forgery", ["genesis left out", "offset at the snapshot's end", "a frame header in content"])
def test_a_snapshot_whose_acl_frames_are_forged_is_refused_with_its_reason(tmp_path: Path, forgery: str) -> None:
    """The ACL is rebuilt from the log's frames at the offsets the snapshot lists: a list that does not
    start at the genesis, names an offset at (or past) the snapshot's end, or points into a record's
    content at bytes that read as a frame header running past that end, refuses the snapshot, with the
    reason in verify's finding, and the log is replayed (the grants are the log's)."""
    from mnemo.storage.file.framing import FRAME_HEADER, FRAME_MAGIC

    db = tmp_path / "acl.db"
    fake = FRAME_HEADER.pack(FRAME_MAGIC, 1, 0, 64, 1 << 20)  # a header claiming a frame of a megabyte
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember(b"bytes that look like a frame: " + fake)
        c.grant("reader", "team:*", ["read"])
        c.remember("after the grant", scope="team:x")
    body = snap.read_snapshot(str(db) + ".snap")
    assert body is not None
    end = int(body["offset"])
    grant_frame = [f.offset for f in read_frames(db) if any(e.op == "grant" for e in f.entries)][0]
    if forgery == "genesis left out":
        offsets, reason = [grant_frame], f"no ACL frame at offset {grant_frame}"
    elif forgery == "offset at the snapshot's end":
        offsets, reason = [32, grant_frame, end], f"no ACL frame at offset {end}"
    else:
        at = db.read_bytes().index(fake)
        offsets, reason = [32, at], f"the ACL frame at offset {at} runs past the snapshot's end"
    _tamper_index(db, lambda index: setattr(index, "acl_frames", array("q", offsets)))
    with MnemoClient(db, "reader", readonly=True) as r:
        assert not r.stats()["snapshot_used"]
        assert [x.content for x in r.query()] == ["after the grant"]
    assert [(p.kind, p.message) for p in verify_db(db).problems] == [(
        "snapshot", f"the index snapshot {db.name}.snap ends at this log's head but was refused ({reason}): it was "
        "altered; clients replay the log instead")]


def _snapshot_over_a_forged_frame(tmp_path: Path, op: str, body: dict[str, object], acl: list[str]) -> tuple[
        Path, dict[str, Any], int]:
    """A log with one more frame appended by hand (an entry `op` with `body`, linked to the head), and a
    snapshot body that ends at that frame and lists the ACL frames named in `acl` ("genesis", "forged")."""
    from mnemo.chain.codec import make_entry
    from mnemo.storage.file.framing import HEADER_SIZE, encode_frame

    db = tmp_path / "forged.db"
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember("a record")
    data = db.read_bytes()
    last = read_entries(db)[-1]
    entry = make_entry(last.seq + 1, last.ts_ns + 1, last.hash, op, OWNER, body)
    frame = encode_frame([(entry.raw, None)])
    db.write_bytes(data + frame)
    snapshot = snap.read_snapshot(str(db) + ".snap")
    assert snapshot is not None
    index = Index.from_state(snapshot["db_id"], snapshot["index"])
    index.acl_frames = array("q", [HEADER_SIZE if name == "genesis" else len(data) for name in acl])
    index.head_seq, index.head_hash, index.entries = entry.seq, entry.hash, index.entries + 1
    snapshot.update(index=index.to_state(), offset=len(data) + len(frame), frame_offset=len(data))
    return db, snapshot, len(data)


@pytest.mark.parametrize(("op", "body", "acl", "reason"), [
    ("genesis", {"db_id": b"\x00" * 16, "format": 1}, ["genesis", "forged"], "genesis after seq 0"),
    ("grant", {"perms": ["read"], "principal": 7, "scope": "s"}, ["genesis", "forged"],
     "an ACL entry names a non-string"),
    ("grant", {"perms": "read", "principal": "p", "scope": "s"}, ["genesis", "forged"],
     "an ACL entry's perms are not a list of strings"),
    ("grant", {"perms": ["read", 1], "principal": "p", "scope": "s"}, ["genesis", "forged"],
     "an ACL entry's perms are not a list of strings"),
    ("grant", {"perms": ["read"], "principal": "p", "scope": "s"}, [], "the snapshot lists no genesis frame"),
    ("grant", {"perms": ["read"], "principal": "p", "scope": "s"}, ["genesis", "forged", "forged"],
     "the ACL frame at offset {forged} is out of order"),
], ids=["genesis-after-0", "principal-not-a-string", "perms-a-string", "perms-not-all-strings", "no-genesis-frame",
        "a-frame-listed-twice"])
def test_load_snapshot_refuses_acl_frames_that_do_not_make_an_acl(
    tmp_path: Path, op: str, body: dict[str, object], acl: list[str], reason: str
) -> None:
    """The ACL a snapshot's open rebuilds from the frames it lists must be one the log could hold: each
    listed frame in order once, the genesis first, every ACL entry well formed. Otherwise the snapshot is
    refused (SnapshotRefused, with the reason), never loaded with a partial or odd ACL."""
    from mnemo.storage.file.store import SnapshotRefused, load_snapshot

    db, snapshot, forged = _snapshot_over_a_forged_frame(tmp_path, op, body, acl)
    fd = os.open(db, os.O_RDONLY)
    try:
        with pytest.raises(SnapshotRefused) as info:
            load_snapshot(fd, snapshot["db_id"], snapshot)
    finally:
        os.close(fd)
    assert str(info.value) == reason.format(forged=forged)
