"""Several processes on one database: one writer at a time, nothing lost, the chain gap-free. On both
backends; the file's own lock (an flock on the log) on the file backend."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from helpers.backends import entries as read_entries
from helpers.backends import is_pg
from helpers.frames import check_chain, frame_spans
from helpers.procs import start_writer

from mnemo import MnemoClient
from mnemo.errors import LockTimeout

OWNER = "owner"


def release_together(procs: list[subprocess.Popen[str]]) -> None:
    """Wait until every child has opened the db (or is about to), then let them all go at once."""
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line == "READY\n", (line, p.stderr.read() if p.stderr else "")
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()


def finish(p: subprocess.Popen[str], timeout: float = 120.0) -> list[str]:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err
    return out.splitlines()


def test_two_processes_write_2000_records_each(db: str) -> None:
    MnemoClient(db, OWNER).close()
    n = 500 if is_pg(db) else 2000  # fewer on PostgreSQL, where each fsync'd commit is a round trip
    procs = [
        start_writer("bulk", str(db), f"w{k}", "--durability", "fsync", "--tag", f"w{k}", "--count", str(n))
        for k in range(2)
    ]
    try:
        release_together(procs)
        outputs = [finish(p) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    entries = read_entries(db)
    check_chain(entries)
    assert len(entries) == 1 + 2 * n
    assert [e.op for e in entries[1:]] == ["put"] * (2 * n)
    writers = [e.agent for e in entries[1:]]
    switches = sum(a != b for a, b in zip(writers, writers[1:], strict=False))
    assert switches > 10, "the two writers did not run at the same time"
    with MnemoClient(db, OWNER) as c:
        for k, lines in enumerate(outputs):
            assert lines[0] == f"DONE {n}"
            ids = lines[1:]
            got = c.query(tags=[f"w{k}"])
            assert [r.id for r in got] == ids
            assert [r.content for r in got] == [f"w{k}:{i}" for i in range(n)]
            assert {r.agent_id for r in got} == {f"w{k}"}
        seqs = sorted(r.seq for r in c.query())
        assert seqs == list(range(1, 2 * n + 1))
        report = c.verify()
        assert report.ok, report.problems
        assert (report.entries, report.head_seq) == (2 * n + 1, 2 * n)


def test_processes_racing_to_create_the_db_make_one_genesis(backend: str, new_db: Callable[[], str]) -> None:
    for _attempt in range(2 if backend == "postgres" else 4):  # each attempt starts 4 processes
        db = new_db()
        procs = [start_writer("create", str(db), f"c{k}", "--tag", f"c{k}") for k in range(4)]
        try:
            release_together(procs)
            outputs = [finish(p, timeout=60) for p in procs]
        finally:
            for p in procs:
                p.kill()
                p.wait()
        entries = read_entries(db)
        check_chain(entries)
        assert [e.op for e in entries] == ["genesis"] + ["put"] * 4
        if not is_pg(db):
            data = Path(db).read_bytes()
            assert data[12:28] == entries[0].body["db_id"]
            assert frame_spans(data)[-1][1] == len(data)
        owner = entries[0].agent
        with MnemoClient(db, owner, readonly=True) as c:
            for k, lines in enumerate(outputs):
                rid = lines[0].split()[1]
                assert c.get(rid).content == f"c{k}"
            assert c.verify().ok
        if not is_pg(db):
            assert not [p for p in Path(db).parent.iterdir() if ".new" in p.name or ".tmp" in p.name]


def test_no_lost_updates_between_processes(db: str) -> None:
    with MnemoClient(db, OWNER) as c:
        rid = c.remember("0").id
    per_proc = 150
    procs = [
        start_writer("counter", str(db), OWNER, "--durability", "none", "--id", rid, "--count", str(per_proc))
        for _ in range(2)
    ]
    try:
        release_together(procs)
        outputs = [finish(p) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for lines in outputs:
        assert lines[0].startswith(f"DONE {per_proc} ")
    with MnemoClient(db, OWNER) as c:
        final = c.get(rid)
        assert (final.content, final.version) == (str(2 * per_proc), 2 * per_proc + 1)
        history = c.history(rid)
        assert [r.content for r in history] == [str(i) for i in range(2 * per_proc + 1)]
        assert c.verify().ok


def test_readers_never_wait_for_the_writer_lock(tmp_path: Path) -> None:
    db = tmp_path / "busy.db"
    with MnemoClient(db, OWNER) as c:
        rec = c.remember("readable")
    fd = os.open(db, os.O_RDONLY)  # the writer lock is an flock on the log file itself
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        started = time.monotonic()
        with MnemoClient(db, OWNER, readonly=True, lock_timeout=5.0) as reader:
            assert reader.get(rec.id) == rec
            assert reader.query() == [rec]
            assert reader.history(rec.id) == [rec]
            assert reader.verify().ok
        assert time.monotonic() - started < 2.0
        try:
            writer = MnemoClient(db, OWNER, lock_timeout=0.2)
        except LockTimeout:
            pass  # opening as a writer may need the lock, to repair a torn tail
        else:
            writer.close()
    finally:
        os.close(fd)


def test_a_writer_in_another_process_is_seen_by_an_open_reader(db: str) -> None:
    MnemoClient(db, OWNER).close()
    with MnemoClient(db, OWNER, readonly=True) as reader:
        assert reader.query() == []
        p = start_writer("create", str(db), OWNER, "--tag", "from-child")
        try:
            release_together([p])
            rid = finish(p, timeout=60)[0].split()[1]
        finally:
            p.kill()
            p.wait()
        assert reader.get(rid).content == "from-child"
        assert [r.id for r in reader.query(tags=["from-child"])] == [rid]


def test_a_reader_follows_a_busy_writer_without_errors(db: str) -> None:
    MnemoClient(db, OWNER).close()
    n = 1500
    p = start_writer("bulk", str(db), "w0", "--durability", "none", "--tag", "w0", "--count", str(n))
    try:
        with MnemoClient(db, OWNER, readonly=True) as reader:
            release_together([p])
            seen = 0
            polls = 0
            while p.poll() is None or seen < n:
                infos = reader.list_records(tags=["w0"])
                assert len(infos) >= seen, "a reader saw records disappear"
                assert [i.seq for i in infos] == list(range(1, len(infos) + 1))
                if infos:
                    assert reader.get(infos[-1].id).content == f"w0:{len(infos) - 1}"
                seen = len(infos)
                polls += 1
                if p.poll() is not None and seen < n:
                    assert len(reader.list_records(tags=["w0"])) == n
                    break
            assert polls > 5
        lines = finish(p)
        assert lines[0] == f"DONE {n}"
    finally:
        p.kill()
        p.wait()


def test_readers_in_other_threads_never_see_a_half_applied_update(db: str) -> None:
    """The index updates a record's row in place: a get() racing an update() sees the old record or
    the new one, whole (its versions numbered 1..n, the latest carrying the latest content)."""
    with MnemoClient(db, "a", durability="none") as c:
        rec_id = c.remember("v1", tags=["t1"]).id
        stop = threading.Event()
        bad: list[str] = []

        def read() -> None:
            while not stop.is_set():
                history = c.history(rec_id)
                latest = c.get(rec_id)
                vers = [r.version for r in history]
                if vers != list(range(1, len(vers) + 1)) or history[-1].content != f"v{vers[-1]}":
                    bad.append(f"history {vers} ending in {history[-1].content!r}")
                if latest.content != f"v{latest.version}" or latest.tags != (f"t{latest.version}",):
                    bad.append(f"get {latest.version} {latest.content!r} {latest.tags}")

        readers = [threading.Thread(target=read) for _ in range(2)]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads as often as possible, mid-update included
        for t in readers:
            t.start()
        try:
            for v in range(2, 300):
                c.update(rec_id, content=f"v{v}", tags=[f"t{v}"])
        finally:
            stop.set()
            for t in readers:
                t.join()
            sys.setswitchinterval(interval)
        assert bad == []
