"""Group commit under durability="fsync": threads writing at once share fsyncs (the thread about to
fsync waits briefly for writes in progress), and no write is acknowledged before an fsync covered it."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mnemo import MnemoClient
from mnemo.errors import Conflict, InvalidInput
from mnemo.storage.file import logfile
from mnemo.storage.file.framing import HEADER_SIZE
from mnemo.storage.file.group_commit import GroupCommit
from mnemo.storage.file.logfile import iter_frames
from mnemo.storage.file.store import FileStore

AGENT = "agent-1"

THREADS, PER_THREAD = 8, 25


class SlowDisk:
    """fdatasync that takes `delay` seconds longer, as on a busy disk, and notes, for the log, the file
    size before each call: a lower bound of what that fsync made durable."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.durable = 0
        self.calls = 0
        self.log_ino: int | None = None
        self.real: Callable[[int], None] = logfile._sync

    def __call__(self, fd: int) -> None:
        st = os.fstat(fd)
        time.sleep(self.delay)
        self.real(fd)
        if st.st_ino == self.log_ino:
            with self.lock:
                self.calls += 1
                self.durable = max(self.durable, st.st_size)


@pytest.fixture
def slow_disk(monkeypatch: pytest.MonkeyPatch) -> SlowDisk:
    disk = SlowDisk(0.002)
    monkeypatch.setattr(logfile, "_sync", disk)
    return disk


@pytest.fixture
def very_slow_disk(monkeypatch: pytest.MonkeyPatch) -> SlowDisk:
    disk = SlowDisk(0.01)
    monkeypatch.setattr(logfile, "_sync", disk)
    return disk


def write_from_threads(
    c: MnemoClient, disk: SlowDisk | None = None
) -> list[tuple[int, int]]:
    """THREADS threads each remember PER_THREAD records at once; returns (seq, durable size when the
    write returned) for every acknowledged write."""
    acks: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(THREADS)

    def work(k: int) -> None:
        try:
            barrier.wait()
            for i in range(PER_THREAD):
                rec = c.remember(f"{k}:{i} " + "x" * 300, tags=[f"th{k}"])
                with lock:
                    acks.append((rec.seq, disk.durable if disk is not None else 0))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(acks) == THREADS * PER_THREAD
    return acks


def frame_ends(path: Path) -> dict[int, int]:
    """seq -> offset of the end of the frame holding it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return {e.seq: frame.end for frame, _buf, _pos in iter_frames(fd, HEADER_SIZE, size) for e in frame.entries}
    finally:
        os.close(fd)


def test_writers_inside_a_write_join_the_leaders_fsync(db_path: Path, very_slow_disk: SlowDisk) -> None:
    # A generous wait (the leader waits at most half an fsync, here 5 ms): long enough for every
    # thread inside a write to finish it, even on a loaded machine.
    slow_disk = very_slow_disk
    with MnemoClient(db_path, AGENT, durability="fsync", group_commit_wait=0.05) as c:
        slow_disk.log_ino = os.stat(db_path).st_ino
        c.remember("warm-up")
        before = slow_disk.calls
        write_from_threads(c, slow_disk)
        fsyncs = slow_disk.calls - before
    per_fsync = THREADS * PER_THREAD / fsyncs
    # Without the wait, writers that finish during an fsync wait for the next one: about 4 per fsync
    # with 8 threads. Waiting only for threads already inside a write, a leader just back from its
    # fsync found none (the others were still waking from it) and synced its own write alone: about 5.
    # Waiting for the last group's writers too, nearly every thread's write is in each group (7.4 to 8).
    assert per_fsync >= 6, f"{fsyncs} fsyncs for {THREADS * PER_THREAD} writes: {per_fsync:.1f} per fsync"


@pytest.mark.parametrize("wait", [0.0, 0.0005, 0.05])
def test_an_acknowledged_write_was_fsynced(db_path: Path, tmp_path: Path, slow_disk: SlowDisk, wait: float) -> None:
    with MnemoClient(db_path, AGENT, durability="fsync", group_commit_wait=wait) as c:
        slow_disk.log_ino = os.stat(db_path).st_ino
        acks = write_from_threads(c, slow_disk)
        durable = slow_disk.durable
        ends = frame_ends(db_path)
        late = [(seq, ends[seq], size) for seq, size in acks if ends[seq] > size]
        assert not late, f"writes returned before an fsync covered their frame (seq, end, durable): {late[:5]}"
        # What a power cut now would leave, the bytes fsynced so far, holds every acknowledged write.
        cut = tmp_path / "cut.mnemo.db"
        shutil.copyfile(db_path, cut)
        os.truncate(cut, durable)
        acked = sorted(seq for seq, _ in acks)
    with MnemoClient(cut, AGENT, readonly=True) as after:
        assert after.head[0] >= acked[-1]
        assert len(after.query(any_tags=[f"th{k}" for k in range(THREADS)])) == len(acked)
        assert after.verify().ok


def test_a_lone_writer_never_waits(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[int] = []
    real = GroupCommit._wait_for_writers

    def spy(self: GroupCommit) -> None:
        waits.append(self.writers)
        real(self)

    monkeypatch.setattr(GroupCommit, "_wait_for_writers", spy)
    with MnemoClient(db_path, AGENT, durability="fsync", group_commit_wait=1.0) as c:
        t0 = time.monotonic()
        for i in range(20):
            c.remember(f"r{i}")
        with c.transaction():
            c.remember("in a transaction")
        elapsed = time.monotonic() - t0
    assert waits == []
    assert elapsed < 20  # (a wait of 1 s per write would show here)


def test_the_wait_is_counted_only_for_writes_in_progress(db_path: Path) -> None:
    with MnemoClient(db_path, AGENT, durability="fsync") as c:
        store = c._store
        assert isinstance(store, FileStore)
        rec = c.remember("a")
        with pytest.raises(Conflict):  # raised inside the write, under the writer lock
            c.update(rec.id, content="b", expected_version=5)
        with pytest.raises(RuntimeError), c.transaction():
            c.remember("rolled back")
            raise RuntimeError("abort")
        assert store._group.writers == 0


@pytest.mark.parametrize("bad", [-0.001, 1.5, "0.001", True])
def test_group_commit_wait_is_checked(db_path: Path, bad: object) -> None:
    """One check, the same refusal from the client and from the store, before a file is made."""
    said = f"group_commit_wait must be between 0 and 1 second, or None, got {bad!r}"
    with pytest.raises(InvalidInput) as client_said:
        MnemoClient(db_path, AGENT, group_commit_wait=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as store_said:
        FileStore(str(db_path), AGENT, group_commit_wait=bad)  # type: ignore[arg-type]
    assert str(client_said.value) == str(store_said.value) == said
    assert not db_path.exists()
