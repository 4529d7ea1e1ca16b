"""A writer killed with SIGKILL at random moments loses nothing it acknowledged."""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers.frames import check_chain, frame_spans, read_entries
from helpers.procs import start_writer

from mnemo import MnemoClient
from mnemo.errors import NotFound

WRITER_AGENT = "writer"


@dataclass
class Acks:
    single: dict[str, str] = field(default_factory=dict)  # id -> content
    groups: dict[str, list[str]] = field(default_factory=dict)  # transaction group tag -> ids
    forgotten: dict[str, str] = field(default_factory=dict)  # id -> its content
    forgetting: str | None = None  # a forget that had not returned when the writer was killed

    def take(self, line: str) -> None:
        parts = line.split()
        if parts[0] == "ONE":
            self.single[parts[1]] = parts[2]
        elif parts[0] == "TX":
            self.groups[parts[1]] = parts[2:]
        elif parts[0] == "FORGETTING":
            self.forgetting = parts[1]
        elif parts[0] == "FORGOT":
            self.forgotten[parts[1]] = self.single.pop(parts[1])
            self.forgetting = None

    @property
    def count(self) -> int:
        return len(self.single) + len(self.groups)


def run_and_kill(db: Path, tag: str, seed: int, rng: random.Random) -> Acks:
    """Start a writer, let it run until a random moment, SIGKILL it, and collect every acknowledgement."""
    proc = start_writer(
        "crash", str(db), WRITER_AGENT, "--durability", "fsync", "--tag", tag, "--count", "100000",
        "--seed", str(seed),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    acks = Acks()
    if rng.random() < 0.3:  # at a random time from start-up on, whatever the writer is doing
        timer = threading.Timer(rng.uniform(0.0, 0.4), proc.kill)
        want = 10**9
    else:  # after a random number of acknowledged writes
        timer = threading.Timer(20.0, proc.kill)
        want = rng.randrange(0, 150)
    timer.start()
    try:
        while acks.count < want:
            line = proc.stdout.readline()
            if not line.endswith("\n"):
                break
            if not line.startswith("READY"):
                acks.take(line)
        time.sleep(rng.uniform(0.0, 0.005))
        proc.send_signal(signal.SIGKILL)
        for line in proc.stdout.read().splitlines(keepends=True):
            if line.endswith("\n") and not line.startswith("READY"):
                acks.take(line)
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
        stderr = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, stderr
    return acks


def test_sigkill_loses_no_acknowledged_write(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    MnemoClient(db, WRITER_AGENT, durability="fsync").close()
    rng = random.Random(20240611)
    total_acked = 0
    all_forgotten: dict[str, str] = {}
    for round_no in range(20):
        tag = f"r{round_no}"
        acks = run_and_kill(db, tag, seed=round_no, rng=rng)
        total_acked += acks.count
        with MnemoClient(db, WRITER_AGENT, durability="fsync") as c:
            for rid, content in acks.single.items():
                if rid == acks.forgetting:
                    continue
                rec = c.get(rid)
                assert rec.content == content, f"round {round_no}: acknowledged {rid} has other content"
            for rid in acks.forgotten:
                with pytest.raises(NotFound):
                    c.get(rid)
            for group, ids in acks.groups.items():
                assert [r.id for r in c.query(tags=[group])] == ids, f"round {round_no}: transaction {group}"
            # besides what was acknowledged, at most the one write in flight at the kill may have landed
            found = c.query(tags=[tag])
            acked_groups = set(acks.groups)
            extra = [r for r in found if r.id not in acks.single and not acked_groups & set(r.tags)]
            if acks.forgetting is not None:
                assert not extra, f"round {round_no}: killed in a forget, yet more was written: {extra}"
            extra_groups = {t for r in extra for t in r.tags if t != tag}
            singles = [r for r in extra if r.tags == (tag,)]
            assert len(singles) + len(extra_groups) <= 1, f"round {round_no}: unexplained records {extra}"
            for group in extra_groups:
                assert len(c.query(tags=[group])) == 3, f"round {round_no}: transaction {group} is partial"
            for r in singles:
                assert isinstance(r.content, str) and r.content.startswith(f"{tag}-")
            report = c.verify()
            assert report.ok, (round_no, report.problems)
        data = db.read_bytes()
        assert frame_spans(data)[-1][1] == len(data)
        for rid, content in acks.forgotten.items():
            assert content.encode() not in data, f"round {round_no}: forgotten {rid} is still in the log"
        all_forgotten.update(acks.forgotten)
    check_chain(read_entries(db))
    data = db.read_bytes()
    for content in all_forgotten.values():
        assert content.encode() not in data
    assert total_acked > 200, "the writer was killed too early to test much"
