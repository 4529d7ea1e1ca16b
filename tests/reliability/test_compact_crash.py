"""compact() killed with SIGKILL at any moment leaves either the old log or the new one, byte for byte:
the db opens, verifies, holds exactly the records it held, and no forgotten payload comes back."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.paths import HELPERS
from helpers.procs import subprocess_env

from mnemo import MnemoClient
from mnemo.errors import NotFound

OWNER = "owner"
HELPER = HELPERS / "compact_writer.py"
DB = "memory.mnemo.db"


def marker(kind: str) -> str:
    return f"MK{kind}-{uuid.uuid4().hex}"


@dataclass
class Template:
    folder: Path  # a db with forgotten records, closed (so with its snapshot)
    old_log: bytes
    new_log: bytes  # the same db compacted
    kept: dict[str, list[str]]  # id -> content of every version
    markers: dict[str, list[str]]  # id -> markers of every version (kept and forgotten)
    forgotten: dict[str, int]  # id -> number of versions
    calls: int  # file operations one compaction makes


def run_helper(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HELPER), *args], capture_output=True, text=True, env=subprocess_env(),
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    folder = tmp_path_factory.mktemp("compact-template")
    db = folder / DB
    rng = random.Random(7)
    kept: dict[str, list[str]] = {}
    markers: dict[str, list[str]] = {}
    with MnemoClient(db, OWNER, durability="none") as c:
        c.grant("ann", "team:*", ["read", "write"])
        for i in range(80):
            ms = [marker("c"), marker("t"), marker("v")]
            scope = "team:a" if i % 5 == 0 else None
            rec = c.remember(ms[0] + "x" * rng.randrange(0, 400), tags=[ms[1], f"g{i % 4}"],
                             metadata={"m": ms[2]}, scope=scope)
            kept[rec.id] = [str(rec.content)]
            markers[rec.id] = ms
            for _ in range(rng.choice((0, 0, 1, 2))):
                ms = [marker("c"), marker("t")]
                rec = c.update(rec.id, content=ms[0], tags=[ms[1]])
                kept[rec.id].append(str(rec.content))
                markers[rec.id] += ms
        ids = list(kept)
        gone = rng.sample(ids, 25)
        c.forget(gone[:15])
        with c.transaction():  # a forget inside a frame that also holds puts
            c.forget(gone[15:])
            for _ in range(3):
                rec = c.remember(m := marker("c"), tags=[marker("t")])
                kept[rec.id], markers[rec.id] = [m], [m]
        forgotten = {rid: len(kept.pop(rid)) for rid in gone}
    old_log = db.read_bytes()

    scratch = tmp_path_factory.mktemp("compact-count")
    shutil.copytree(folder, scratch, dirs_exist_ok=True)
    proc = run_helper("count", str(scratch / DB), OWNER)
    assert proc.returncode == 0, proc.stderr
    calls = int(proc.stdout.split()[-1])
    new_log = (scratch / DB).read_bytes()
    assert len(new_log) < len(old_log)
    return Template(folder, old_log, new_log, kept, markers, forgotten, calls)


def check_db(t: Template, folder: Path, label: str) -> None:
    db = folder / DB
    with MnemoClient(db, OWNER, durability="none") as c:
        log = db.read_bytes()
        assert log in (t.old_log, t.new_log), f"{label}: the log is neither the old nor the compacted one"
        names = {p.name for p in folder.iterdir()}
        assert names <= {DB, DB + ".snap", DB + ".leaves"}, f"{label}: leftover files {names}"

        report = c.verify()
        assert report.ok, (label, report.problems)
        assert report.erased == sum(t.forgotten.values())
        assert {r.id for r in c.query()} == set(t.kept), label
        for rid, contents in t.kept.items():
            assert [str(v.content) for v in c.history(rid)] == contents, label
        for rid in t.forgotten:
            with pytest.raises(NotFound):
                c.get(rid)

        blob = b"".join(p.read_bytes() for p in folder.iterdir())
        for rid in t.forgotten:
            assert not any(m.encode() in blob for m in t.markers[rid]), f"{label}: forgotten {rid} is back"
        for rid in t.kept:
            assert all(m.encode() in blob for m in t.markers[rid]), f"{label}: kept {rid} lost a marker"

        # The db keeps working, and a later forget leaves nothing behind either.
        victim = sorted(t.kept)[0]
        c.forget(victim)
        c.remember("after the crash")
        blob = b"".join(p.read_bytes() for p in folder.iterdir())
        assert not any(m.encode() in blob for m in t.markers[victim]), f"{label}: a new forget left traces"
        c.compact()
        assert c.verify().ok


def fresh_copy(t: Template, tmp_path: Path, label: str) -> Path:
    folder = tmp_path / f"{label}-{uuid.uuid4().hex[:8]}"
    shutil.copytree(t.folder, folder)
    return folder


def kill_at(t: Template, tmp_path: Path, n: int) -> None:
    folder = fresh_copy(t, tmp_path, f"at-{n}")
    proc = run_helper("kill", str(folder / DB), OWNER, "--at", str(n))
    assert proc.returncode == -9, proc.stderr
    check_db(t, folder, f"killed before file operation {n} of {t.calls}")


def kill_after(t: Template, tmp_path: Path, delay: float, label: str) -> None:
    folder = fresh_copy(t, tmp_path, label)
    proc = subprocess.Popen(
        [sys.executable, str(HELPER), "loop", str(folder / DB), OWNER],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        time.sleep(delay)
        proc.kill()
    finally:
        proc.wait(timeout=30)
    check_db(t, folder, f"{label}: killed {delay * 1000:.1f} ms into compacting")


def test_compaction_killed_at_every_critical_step(template: Template, tmp_path: Path) -> None:
    """The end of a compaction (fsync, rename, directory fsync, snapshot) step by step, the first write,
    one somewhere in the middle, and right after compact() returned."""
    n = template.calls
    rng = random.Random(n)
    points = sorted({1, rng.randrange(2, n - 7), *range(n - 7, n + 2)})
    for at in points:
        kill_at(template, tmp_path, at)


def test_compaction_killed_at_random_moments(template: Template, tmp_path: Path) -> None:
    rng = random.Random()
    for i in range(3):
        kill_after(template, tmp_path, rng.uniform(0.0, 0.03), f"timed-{i}")


@pytest.mark.soak
def test_compaction_killed_at_random_moments_soak(template: Template, tmp_path: Path) -> None:
    rng = random.Random()
    for i in range(150):
        if i % 2:
            kill_at(template, tmp_path, rng.randrange(1, template.calls + 2))
        else:
            kill_after(template, tmp_path, rng.uniform(0.0, 0.05), f"timed-{i}")
