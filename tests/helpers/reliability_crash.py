"""The crash matrix: run helpers/reliability_writer.py, SIGKILL it at a random point, check the db.

One round: start the writer on the db (which survives from round to round), kill it at a random moment
(a timer in this process) or at a random file event inside it (before, after or in the middle of a
write, fsync, truncate, rename or unlink), then check that

  - verify_db on the file as the crash left it finds nothing worse than a torn tail;
  - a read-only client opens it; a writer opens it (cutting a torn tail, finishing an erasure);
  - with durability="fsync", the same after a simulated power cut (helpers.reliability_faults: every
    byte not yet fsynced is put back as it was) instead of a plain SIGKILL;
  - both see the acknowledged state, or that state with the one operation in flight applied in full;
  - no sidecar of an interrupted erasure or compaction is left, and client.verify() is ok.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.reliability_faults import Fault, format_fault
from helpers.reliability_model import (
    Intent,
    State,
    adopt_after,
    db_state,
    describe_difference,
    matches_after,
)
from mnemo import MnemoClient
from mnemo.audit import verify_db

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
AGENT = "writer"


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), str(TESTS), env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@dataclass
class Plan:
    seed: int
    durability: str
    kill_after: float | None  # seconds after the writer is ready; None: the fault kills it
    fault: Fault | None

    def describe(self) -> str:
        how = f"timer {self.kill_after:.3f}s" if self.kill_after is not None else format_fault(self.fault)  # type: ignore[arg-type]
        return f"seed={self.seed} durability={self.durability} kill={how}"


@dataclass
class Outcome:
    plan: Plan
    acked: list[tuple[Intent, list[str]]] = field(default_factory=list)
    in_flight: Intent | None = None
    returncode: int = 0
    stderr: str = ""
    finished: bool = False
    safety_killed: bool = False  # nothing ended the writer but the run_writer timeout


@dataclass
class Stats:
    rounds: int = 0
    acked_ops: int = 0
    in_flight_landed: int = 0
    in_flight_lost: int = 0
    torn_tails_cut: int = 0
    power_cuts: int = 0
    erasures_completed: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    slowest: float = 0.0

    def summary(self) -> str:
        ops = ", ".join(f"{k}={v}" for k, v in sorted(self.ops.items()))
        return (
            f"crash matrix: {self.rounds} SIGKILL rounds, {self.acked_ops} acknowledged operations "
            f"({ops}); in flight at the kill: {self.in_flight_landed} landed whole, {self.in_flight_lost} "
            f"left no trace; {self.power_cuts} of the kills were power cuts; torn tails cut on reopen: "
            f"{self.torn_tails_cut}; interrupted erasures "
            f"completed: {self.erasures_completed}"
        )


def make_plan(rng: random.Random, seed: int) -> Plan:
    durability = rng.choice(["fsync", "fsync", "batch", "none"])
    if rng.random() < 0.5:
        return Plan(seed, durability, rng.uniform(0.0, 1.0), None)
    when = rng.choice(["before", "after", "torn", "torn"])
    # A power cut loses what was not fsynced: only durability="fsync" promises to keep it.
    action = "power" if durability == "fsync" and rng.random() < 0.5 else "kill"
    fault = Fault(at=rng.randint(1, 160), action=action, when=when, torn=rng.random())
    return Plan(seed, durability, None, fault)


def run_writer(db: Path, plan: Plan, timeout: float = 30.0) -> Outcome:
    args = [sys.executable, "-m", "helpers.reliability_writer", str(db), "--seed", str(plan.seed),
            "--durability", plan.durability]
    if plan.fault is not None:
        args += ["--fault", format_fault(plan.fault)]
    out = Outcome(plan)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(), cwd=str(TESTS))
    assert proc.stdout is not None and proc.stderr is not None

    def safety_kill() -> None:
        if proc.poll() is None:  # not already ended by the planned kill
            out.safety_killed = True
            proc.kill()

    safety = threading.Timer(timeout, safety_kill)
    safety.start()
    timer: threading.Timer | None = None
    pending: Intent | None = None
    try:
        for line in proc.stdout:
            if not line.endswith("\n"):
                break  # cut off by the kill: not acknowledged
            obj = json.loads(line)
            if obj["t"] == "ready" and plan.kill_after is not None:
                timer = threading.Timer(plan.kill_after, proc.kill)
                timer.start()
            elif obj["t"] == "intent":
                pending = Intent.from_obj(obj)
            elif obj["t"] == "ack":
                assert pending is not None and pending.seq == obj["i"]
                out.acked.append((pending, list(obj["ids"])))
                pending = None
            elif obj["t"] == "done":
                out.finished = True
        out.in_flight = pending
    finally:
        safety.cancel()
        if timer is not None:
            timer.cancel()
        proc.kill()
        proc.wait()
        out.stderr = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    out.returncode = proc.returncode
    return out


def _sidecars(db: Path) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir() if p.name.endswith((".erase", ".compact")))


def check_round(db: Path, model: State, out: Outcome, stats: Stats) -> State:
    """Assert everything a crash must leave intact; return the new acknowledged model."""
    where = out.plan.describe()
    assert out.returncode == -signal.SIGKILL, f"{where}: writer ended with {out.returncode}\n{out.stderr}"
    assert not out.safety_killed, f"{where}: the planned kill never came; the writer ran until the timeout"
    for done, ids in out.acked:
        model = done.applied(model, ids)
        stats.ops[done.op] = stats.ops.get(done.op, 0) + 1
    stats.acked_ops += len(out.acked)
    stats.rounds += 1
    stats.power_cuts += out.plan.fault is not None and out.plan.fault.action == "power"
    intent = out.in_flight

    raw = verify_db(db)
    kinds = {p.kind for p in raw.problems}
    assert kinds <= {"torn-tail"}, f"{where}: the crash left damage: {raw.problems}"

    def judge(state: State, who: str) -> bool:
        """True if the in-flight operation landed."""
        if state == model:
            return False
        assert intent is not None and matches_after(state, model, intent), (
            f"{where}: {who} sees neither the acknowledged state nor it plus the in-flight "
            f"{intent.op if intent else 'nothing'}: {describe_difference(state, model)}"
        )
        return True

    with MnemoClient(db, AGENT, readonly=True) as reader:
        read_state = db_state(reader)
    judge(read_state, "a reader")
    with MnemoClient(db, AGENT, durability="fsync") as c:
        recovery = c.recovery
        state = db_state(c)
        landed = judge(state, "the reopened writer")
        assert not _sidecars(db), f"{where}: left behind {_sidecars(db)}"
        report = c.verify()
        assert report.ok, f"{where}: {report.problems}"
    assert state == read_state, f"{where}: reader and writer disagree: {describe_difference(read_state, state)}"
    stats.torn_tails_cut += any("torn" in r for r in recovery)
    stats.erasures_completed += any("erasure" in r for r in recovery)
    if intent is not None:
        if landed:
            stats.in_flight_landed += 1
            stats.ops[intent.op] = stats.ops.get(intent.op, 0) + 1
        else:
            stats.in_flight_lost += 1
    return adopt_after(state, model, intent) if landed and intent is not None else model


def crash_matrix(
    directory: Path, rounds: int, seed: int, budget: float | None = None, rounds_per_db: int = 25
) -> Stats:
    """Run `rounds` kill-and-check rounds (or stop when `budget` seconds are spent). A db lives for
    `rounds_per_db` rounds, then a fresh one starts, so that checking it stays cheap."""
    rng = random.Random(seed)
    stats = Stats()
    model: State = {}
    start = time.monotonic()
    db = directory / "crash.mnemo.db"
    for n in range(rounds):
        if budget is not None and time.monotonic() - start > budget:
            break
        if n % rounds_per_db == 0:
            db = directory / f"crash{n // rounds_per_db}.mnemo.db"
            MnemoClient(db, AGENT, durability="fsync").close()
            model = {}
        plan = make_plan(rng, seed * 100_000 + n)
        t0 = time.monotonic()
        out = run_writer(db, plan)
        model = check_round(db, model, out, stats)
        stats.slowest = max(stats.slowest, time.monotonic() - t0)
    return stats
