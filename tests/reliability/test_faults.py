"""Torn writes, short writes and EIO, injected at the system calls the storage layer makes.

A short write must be retried transparently. A failed write or fsync must surface as DurabilityError,
the client must refuse every later write, and the reopened db must hold exactly what was acknowledged.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.reliability_crash import Plan, Stats, check_round, run_writer
from helpers.reliability_faults import Fault, Injector
from helpers.reliability_model import State, db_state, describe_difference, value

from mnemo import MnemoClient
from mnemo.audit import verify_db
from mnemo.errors import DurabilityError, MnemoError
from mnemo.storage.file.leaves import cache_path
from mnemo.tools.server import MnemoMemoryToolServer

AGENT = "owner"


@pytest.fixture
def dbdir(tmp_path: Path) -> Path:
    d = tmp_path / "db"
    d.mkdir()
    return d


def open_db(dbdir: Path, durability: str = "fsync") -> MnemoClient:
    return MnemoClient(dbdir / "m.mnemo.db", AGENT, durability=durability)


def tool(server: MnemoMemoryToolServer, **fields: Any) -> dict[str, Any]:
    return server.handle({"type": "tool_use", "id": "t", "name": "memory", "input": fields})


def seed_db(c: MnemoClient) -> None:
    """A db with a little of everything: versions, a transaction, memory-tool files, a forget."""
    server = MnemoMemoryToolServer(c)
    a = c.remember("alpha", tags=["a"])
    c.update(a.id, content="alpha v2", expected_version=1)
    with c.transaction():
        for i in range(3):
            c.remember(f"tx {i}", tags=["tx"])
    gone = c.remember("to be forgotten SECRET-0", tags=["b"])
    c.forget([gone.id])
    for name in ("x", "y"):
        result = tool(server, command="create", path=f"/memories/dir/{name}.md", file_text=f"{name}\n")
        assert not result.get("is_error"), result


def all_bytes(dbdir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(dbdir.iterdir()) if p.is_file())


def reopened_state(dbdir: Path) -> tuple[State, list[str]]:
    with open_db(dbdir) as c:
        report = c.verify()
        assert report.ok, report.problems
        return db_state(c), c.recovery


WRITES: dict[str, Callable[[MnemoClient, str], object]] = {
    "remember": lambda c, rid: c.remember("refused"),
    "update": lambda c, rid: c.update(rid, content="refused"),
    "forget": lambda c, rid: c.forget([rid]),
    "forget_where": lambda c, rid: c.forget_where(tags=["a"]),
    "transaction": lambda c, rid: c.transaction().__enter__(),
    "grant": lambda c, rid: c.grant("other", "team:x", ["read"]),
    "compact": lambda c, rid: c.compact(),
}


def assert_refuses_writes(c: MnemoClient, rid: str) -> None:
    for name, write in WRITES.items():
        with pytest.raises(DurabilityError):
            write(c, rid)
            pytest.fail(f"{name} was accepted after a failed write")
    result = tool(MnemoMemoryToolServer(c), command="create", path="/memories/after.md", file_text="no\n")
    assert result.get("is_error") and "Error" in result["content"], result
    assert c.get(rid).content  # reads still work


# -- short writes -------------------------------------------------------------------------------------


def test_short_log_writes_are_retried_transparently(dbdir: Path) -> None:
    injector = Injector(str(dbdir), short=7, short_kinds=frozenset({"pwrite"}), rng=random.Random(1))
    with injector as inj, open_db(dbdir) as c:
        seed_db(c)
        big = c.remember("B" * 200_000, tags=["big"])
        server = MnemoMemoryToolServer(c)
        result = tool(server, command="rename", old_path="/memories/dir", new_path="/memories/moved")
        assert not result.get("is_error"), result
        c.compact()
        expected = db_state(c)
    writes = [e for e in inj.events if e.kind == "pwrite"]
    assert len(writes) > 200_000 // 7, "the writes were not cut short"
    state, recovery = reopened_state(dbdir)
    assert state == expected, describe_difference(state, expected)
    assert recovery == []
    assert state[big.id] == value(1, "B" * 200_000, ("big",))
    assert b"SECRET-0" not in all_bytes(dbdir)


def test_short_sidecar_write_then_interrupted_erasure(dbdir: Path) -> None:
    with open_db(dbdir) as c:
        rec = c.remember("first version", tags=["k"])
        c.update(rec.id, content="second version")
        expected = db_state(c)
        del expected[rec.id]
        # The journal goes to disk short; then the zeros over the first slot fail half-way.
        fault = Fault(at=1, action="eio", when="torn", torn=0.5, kinds=frozenset({"pwrite"}), zeros_only=True)
        injector = Injector(str(dbdir), fault=fault, short=16, short_kinds=frozenset({"write"}))
        with injector, pytest.raises(DurabilityError):
            c.forget([rec.id])
    state, _recovery = reopened_state(dbdir)
    assert state == expected


# -- torn writes: the process dies in the middle of a write ---------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_torn_write_then_kill(tmp_path: Path, seed: int) -> None:
    """The writer child dies inside a pwrite after putting part of it on disk; reopening cuts the
    torn frame (or, for a torn erasure, redoes it) and loses nothing acknowledged."""
    rng = random.Random(seed)
    db = tmp_path / "crash.mnemo.db"
    MnemoClient(db, "writer").close()
    stats = Stats()
    model: State = {}
    for n in range(3):
        fault = Fault(at=rng.randint(2, 60), action="kill", when="torn", torn=rng.random(),
                      kinds=frozenset({"pwrite"}))
        out = run_writer(db, Plan(seed * 10 + n, "fsync", None, fault))
        model = check_round(db, model, out, stats)
    assert stats.rounds == 3
    assert stats.torn_tails_cut + stats.erasures_completed + stats.in_flight_lost >= 1


# -- power cuts: what was not fsynced is lost ---------------------------------------------------------------


def test_power_cut_simulation_puts_back_unsynced_bytes(dbdir: Path) -> None:
    path = dbdir / "m.mnemo.db"
    with open_db(dbdir) as c:
        seed_db(c)
    synced = path.read_bytes()
    inj = Injector(str(dbdir)).install()
    try:
        c = open_db(dbdir, durability="none")
        rec = c.remember("never fsynced " + "u" * 5000)
        c.update(rec.id, content="still not fsynced")
        assert path.stat().st_size > len(synced)
        inj._power_cut()
        c._store._close_files()  # the process "died": no close, no snapshot
    finally:
        inj.uninstall()
    assert path.read_bytes() == synced


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_fault_on_a_call_that_fails_on_its_own_still_acts(dbdir: Path, when: str) -> None:
    """The store ignores an unlink of a sidecar already gone: a fault planned on that event must act all
    the same (else it is spent without acting, and a crash round runs on with no crash in it)."""
    inj = Injector(str(dbdir), fault=Fault(at=1, action="eio", when=when, kinds=frozenset({"unlink"})))
    with inj, pytest.raises(OSError) as info:
        os.unlink(dbdir / "never-made")
    assert info.value.errno == errno.EIO and inj.fired == 1


@pytest.mark.parametrize("seed", range(2))
def test_power_cut_loses_nothing_acknowledged(tmp_path: Path, seed: int) -> None:
    """durability="fsync": at a random file event the writer child puts back every byte not yet
    fsynced and dies; everything it acknowledged must still be there."""
    rng = random.Random(100 + seed)
    db = tmp_path / "crash.mnemo.db"
    MnemoClient(db, "writer").close()
    stats = Stats()
    model: State = {}
    for n in range(4):
        fault = Fault(at=rng.randint(2, 120), action="power", when=rng.choice(["before", "after", "torn"]),
                      torn=rng.random())
        out = run_writer(db, Plan(1000 + seed * 10 + n, "fsync", None, fault))
        model = check_round(db, model, out, stats)
    assert stats.rounds == 4 and stats.power_cuts == 4


# -- EIO from a write ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["before", "torn"])
def test_eio_from_a_log_write(dbdir: Path, when: str) -> None:
    with open_db(dbdir) as c:
        seed_db(c)
        keep = c.remember("kept", tags=["a"])
        expected = db_state(c)
        with Injector(str(dbdir), fault=Fault(at=1, action="eio", when=when, torn=0.6,
                                              kinds=frozenset({"pwrite"}))):
            with pytest.raises(DurabilityError), c.transaction():
                for i in range(20):
                    c.remember(f"lost {i} " + "z" * 500, tags=["lost"])
            assert_refuses_writes(c, keep.id)
        assert db_state(c) == expected
    assert verify_db(dbdir / "m.mnemo.db").ok
    state, recovery = reopened_state(dbdir)
    assert state == expected, describe_difference(state, expected)
    assert recovery == []


# -- EIO from fsync -----------------------------------------------------------------------------------------


def fail_fsync(
    dbdir: Path, at: int = 1, kinds: frozenset[str] = frozenset({"fdatasync"}), repeat: bool = True
) -> Injector:
    return Injector(str(dbdir), fault=Fault(at=at, action="eio", kinds=kinds, repeat=repeat))


def test_fsync_eio_raises_and_refuses_further_writes(dbdir: Path) -> None:
    with open_db(dbdir) as c:
        seed_db(c)
        keep = c.remember("kept", tags=["a"])
        with fail_fsync(dbdir):
            with pytest.raises(DurabilityError):
                c.remember("not acknowledged")
            assert_refuses_writes(c, keep.id)


def test_fsync_eio_reopened_db_holds_exactly_what_was_acknowledged(dbdir: Path) -> None:
    with open_db(dbdir) as c:
        seed_db(c)
        expected = db_state(c)
        with fail_fsync(dbdir), pytest.raises(DurabilityError):
            c.remember("not acknowledged")
    state, _ = reopened_state(dbdir)
    assert state == expected, describe_difference(state, expected)


def _group_commit_under_failing_fsync(dbdir: Path, repeat: bool = True) -> tuple[State, State, int]:
    """8 threads write while fsync starts failing (`repeat`: for good, else that once); returns
    (acknowledged state, reopened, failures)."""
    with open_db(dbdir) as c:
        seed_db(c)
        base = db_state(c)
        acked: dict[str, str] = {}
        failures: list[BaseException] = []
        lock = threading.Lock()
        start = threading.Barrier(8)

        def work(t: int) -> None:
            start.wait()
            for i in range(40):
                content = f"t{t} w{i}"
                try:
                    rec = c.remember(content, tags=["g"])
                except DurabilityError as exc:
                    with lock:
                        failures.append(exc)
                    return
                with lock:
                    acked[rec.id] = content

        with fail_fsync(dbdir, at=15, repeat=repeat):
            threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            assert_refuses_writes(c, next(iter(acked)))
    expected = dict(base)
    expected.update({rid: value(1, content, ("g",)) for rid, content in acked.items()})
    state, _ = reopened_state(dbdir)
    return expected, state, len(failures)


@pytest.mark.timeout(60)  # a writer that never returns fails here, instead of holding the run
@pytest.mark.parametrize("repeat", [True, False], ids=["stays-broken", "fails-once"])
def test_fsync_eio_under_group_commit(dbdir: Path, repeat: bool) -> None:
    """Every waiting writer sees DurabilityError, and the reopened db holds exactly the writes that
    returned: frames whose shared fsync failed are not left behind. A device that fails once and then
    works again changes nothing: a writer that waited on the failed fsync must not sync again and be
    acknowledged, since its frame was cut with the others."""
    expected, state, failures = _group_commit_under_failing_fsync(dbdir, repeat)
    assert failures == 8, "every thread must see DurabilityError once fsync failed"
    assert state == expected, describe_difference(state, expected)


def test_fsync_eio_in_batch_mode_stops_writes(dbdir: Path) -> None:
    with open_db(dbdir, durability="batch") as c:
        keep = c.remember("kept")
        with fail_fsync(dbdir):
            c.remember("written, fsync pending")
            deadline = threading.Event()
            for _ in range(100):  # the background syncer fails within about 50 ms
                try:
                    c.remember("probe")
                except DurabilityError:
                    break
                deadline.wait(0.01)
            else:
                pytest.fail("writes still accepted 1 s after the background fsync failed")
            assert_refuses_writes(c, keep.id)


# -- EIO during erasure: the forget is durable, the erasure is redone on reopen -------------------------------


@pytest.mark.parametrize(
    ("kinds", "at"),
    [
        (frozenset({"fdatasync"}), 1),  # fsync of the forget frame: the forget is not committed
        (frozenset({"fdatasync"}), 2),  # fsync of the zeros: committed, erasure redone on reopen
        (frozenset({"pwrite"}), 2),  # writing the zeros (the forget frame is pwrite 1): likewise
    ],
)
def test_eio_during_forget(dbdir: Path, kinds: frozenset[str], at: int) -> None:
    with open_db(dbdir) as c:
        seed_db(c)
        victim = c.remember("SECRET-1 " + "s" * 3000, tags=["victim"])
        c.update(victim.id, content="SECRET-1 v2", expected_version=1)
        before = db_state(c)
        with Injector(str(dbdir), fault=Fault(at=at, action="eio", kinds=kinds, repeat=True)):
            with pytest.raises(DurabilityError):
                c.forget([victim.id])
            assert_refuses_writes(c, next(k for k in before if k != victim.id))
    state, recovery = reopened_state(dbdir)
    after = {k: v for k, v in before.items() if k != victim.id}
    assert state in (before, after), describe_difference(state, after)
    if state == after:  # the forget was committed: its erasure must have been completed on reopen
        assert b"SECRET-1" not in all_bytes(dbdir)
        if kinds == {"pwrite"}:  # no zero was written: the reopen wrote them
            assert any("erasure" in r for r in recovery), recovery
        # (after a failed fsync of zeros written, they read as zeros: the reopen writes them again, as
        # tests/storage/file/test_recovery.py's test_an_open_zeroes_again_the_slots_the_last_frames_forget_dropped
        # shows, and reports nothing)


# -- EIO during compaction --------------------------------------------------------------------------------


@pytest.mark.parametrize("kinds", [frozenset({"pwrite"}), frozenset({"fdatasync"})])
def test_eio_during_compaction_keeps_the_old_log(dbdir: Path, kinds: frozenset[str]) -> None:
    with open_db(dbdir) as c:
        seed_db(c)
        expected = db_state(c)
        with Injector(str(dbdir), fault=Fault(at=1, action="eio", kinds=kinds)), pytest.raises(MnemoError):
            c.compact()
        assert db_state(c) == expected
    state, _ = reopened_state(dbdir)
    assert state == expected
    assert not (dbdir / "m.mnemo.db.compact").exists()


def test_fsync_eio_during_compaction_refuses_further_writes(dbdir: Path) -> None:
    with open_db(dbdir) as c:
        seed_db(c)
        rid = c.remember("kept").id
        with fail_fsync(dbdir), pytest.raises(DurabilityError):
            c.compact()
        assert_refuses_writes(c, rid)


@pytest.mark.parametrize("kinds", [frozenset({"fsync"}), frozenset({"replace"})])
def test_eio_from_compaction_rename_or_dir_fsync_is_a_durability_error(dbdir: Path, kinds: frozenset[str]) -> None:
    with open_db(dbdir) as c:
        seed_db(c)
        expected = db_state(c)
        with Injector(str(dbdir), fault=Fault(at=1, action="eio", kinds=kinds)), pytest.raises(DurabilityError):
            c.compact()
    state, _ = reopened_state(dbdir)
    assert state == expected


def test_eio_while_cutting_a_torn_tail_is_a_mnemo_error(dbdir: Path) -> None:
    with open_db(dbdir) as c:
        seed_db(c)
    path = dbdir / "m.mnemo.db"
    with path.open("ab") as f:
        f.write(b"MNFR\x00\x00\x00\x01")  # the start of a frame that never finished
    injector = Injector(str(dbdir), fault=Fault(at=1, action="eio", kinds=frozenset({"ftruncate"})))
    with injector, pytest.raises(MnemoError):
        open_db(dbdir).close()


def test_fsync_eio_leaves_the_client_the_chain_and_tree_of_what_was_acknowledged(dbdir: Path) -> None:
    """The frames a failed fsync did not cover are cut from the log, and the client's index and Merkle
    tree go back with them: its head and tree head are those a fresh open of the file finds."""
    with open_db(dbdir) as c:
        seed_db(c)
        head, tree = c.head, c.tree_head()
        with fail_fsync(dbdir), pytest.raises(DurabilityError):
            c.remember("not acknowledged")
        assert (c.head, c.tree_head()) == (head, tree)
        # the tree it rebuilt replaced the old one, whose leaf cache it closed: one descriptor of it
        assert _open_descriptors_of(cache_path(dbdir / "m.mnemo.db")) == 1
        with MnemoClient(dbdir / "m.mnemo.db", AGENT, readonly=True) as fresh:
            assert (fresh.head, fresh.tree_head()) == (head, tree)


def _open_descriptors_of(path: str) -> int:
    target = os.path.realpath(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}") == target
    return count


def test_a_failed_fsync_never_cuts_frames_another_client_appended_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A's frame is written, its fsync not yet made; B appends and fsyncs its own (which covers A's
    too), and A reads B's frame; then A's fsync fails. A must not cut the log back to its last good
    fsync: that would take B's acknowledged write with it."""
    import errno

    from mnemo.storage.file import logfile

    db = tmp_path / "m.db"
    with MnemoClient(db, AGENT) as a, MnemoClient(db, AGENT) as b:
        a.remember("before")
        real = logfile._sync
        state = {"done": False}

        def sync(fd: int) -> None:
            if fd == a._store.fd and not state["done"]:  # type: ignore[attr-defined]
                state["done"] = True
                b.remember("B's, acknowledged")
                a.query()  # A reads B's frame while its own is still unsynced
                raise OSError(errno.EIO, "Input/output error")
            real(fd)

        monkeypatch.setattr(logfile, "_sync", sync)
        with pytest.raises(DurabilityError):
            a.remember("A's, not acknowledged")
        monkeypatch.undo()
    with MnemoClient(db, AGENT, readonly=True) as fresh:
        assert "B's, acknowledged" in [r.content for r in fresh.query()]
        assert fresh.verify().ok
