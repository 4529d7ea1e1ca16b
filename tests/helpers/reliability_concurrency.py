"""Several processes of several threads on one db (helpers/reliability_worker.py), then the checks:

  - every acknowledged remember is in the db exactly once, and nothing else with its tag;
  - each counter's value is the number of acknowledged increments, every version from 2 up was
    acknowledged by exactly one writer (no lost update, no version written twice);
  - every acknowledged memory-tool edit's token is in its file exactly once, refused ones are absent;
  - the log's seqs run 0..n-1 without gap or duplicate, and each acknowledged write's (seq, hash) is
    the entry at that seq; the chain verifies.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.reliability_crash import TESTS, child_env
from helpers.reliability_worker import COUNTERS, FILES, SCOPE, file_path
from mnemo import MnemoClient
from mnemo.audit import read_chain
from mnemo.tools.server import MnemoMemoryToolServer

OWNER = "owner"


@dataclass
class Figures:
    processes: int
    threads: int
    seconds: float
    remembers: int
    increments: int
    conflicts: int
    edits: int
    refused: int
    reads: int
    entries: int

    def summary(self) -> str:
        writes = self.remembers + self.increments + self.edits
        return (
            f"concurrency: {self.processes} processes x {self.threads} threads for {self.seconds:.0f}s: "
            f"{writes} acknowledged writes ({self.remembers} remembers, {self.increments} counter increments "
            f"after {self.conflicts} conflicts, {self.edits} memory-tool edits; {self.refused} edits refused), "
            f"{self.reads} checked reads, {self.entries} chain entries, seq gap-free, chain ok"
        )


def setup(db: str | Path, agents: list[str]) -> None:
    with MnemoClient(db, OWNER) as c:
        for agent in agents:
            c.grant(agent, SCOPE, ["read", "write"])
        for i in range(COUNTERS):
            c.remember("0", tags=["counter", f"counter{i}"], scope=SCOPE)
        tool = MnemoMemoryToolServer(c, scope=SCOPE)
        for j in range(FILES):
            block = tool.handle({"type": "tool_use", "id": "s", "name": "memory",
                                 "input": {"command": "create", "path": file_path(j), "file_text": "END\n"}})
            assert not block.get("is_error"), block


def run(db: str | Path, processes: int, threads: int, seconds: float, seed: int) -> Figures:
    """The workers on the database `db` (a new one: a file path or a postgresql:// URI)."""
    agents = [f"w{p}" for p in range(processes)]
    setup(db, agents)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "helpers.reliability_worker", str(db), agent, "--threads", str(threads),
             "--seconds", str(seconds), "--seed", str(seed * 100 + p)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=child_env(), cwd=str(TESTS),
        )
        for p, agent in enumerate(agents)
    ]  # fmt: skip
    results: list[dict[str, Any]] = []
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", (line, proc.stderr.read() if proc.stderr else "")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            out, err = proc.communicate(timeout=seconds + 120)
            assert proc.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    errors = [e for r in results for e in r["errors"]]
    assert not errors, "\n".join(errors)
    entries = check(db, results)
    return Figures(
        processes=processes, threads=threads, seconds=seconds,
        remembers=sum(len(r["tokens"]) for r in results),
        increments=sum(len(r["increments"]) for r in results),
        conflicts=sum(r["conflicts"] for r in results),
        edits=sum(len(r["edits"]) for r in results),
        refused=sum(len(r["refused"]) for r in results),
        reads=sum(r["reads"] for r in results),
        entries=entries,
    )  # fmt: skip


def check(db: str | Path, results: list[dict[str, Any]]) -> int:
    tokens = [t for r in results for t in r["tokens"]]
    increments = [i for r in results for i in r["increments"]]
    edits = [e for r in results for e in r["edits"]]
    refused = [e for r in results for e in r["refused"]]
    with MnemoClient(db, OWNER, readonly=True) as c:
        # remembers: exactly the acknowledged ones, once each
        found = c.query(tags=["tok"], scope=SCOPE)
        assert Counter((r.id, r.content) for r in found) == Counter((t["id"], t["content"]) for t in tokens)
        # counters: value = acknowledged increments; each version acknowledged exactly once
        for rec in c.query(tags=["counter"], scope=SCOPE):
            mine = [i for i in increments if i["id"] == rec.id]
            assert int(str(rec.content)) == len(mine), f"counter {rec.id}: lost update"
            assert sorted(i["version"] for i in mine) == list(range(2, len(mine) + 2)), f"counter {rec.id}"
            assert all(i["value"] == i["version"] - 1 for i in mine)
        # memory-tool files: every acknowledged token exactly once, refused ones absent
        tool = MnemoMemoryToolServer(c, scope=SCOPE)
        for j in range(FILES):
            text = str(c.query(tags=["memorytool", f"path:{file_path(j)}"], scope=SCOPE)[0].content)
            lines = Counter(text.splitlines())
            want = Counter(e["token"] for e in edits if e["file"] == j)
            assert lines.pop("END") == 1
            assert lines == want, f"{file_path(j)}: lost or duplicated edits {(lines - want) + (want - lines)}"
            assert not any(e["token"] in lines for e in refused if e["file"] == j)
            assert tool.history(file_path(j))[-1].version == len(want) + 1
        report = c.verify()
        assert report.ok, report.problems
    # the chain: seqs 0..n-1, and each acknowledged write is the entry at the seq it was given
    log = list(read_chain(str(db)))
    assert [item.entry.seq for item in log] == list(range(len(log))), "seq gap or duplicate"
    acked = [(w["seq"], w["hash"]) for w in tokens + increments]
    assert len({s for s, _ in acked}) == len(acked), "two acknowledged writes were given one seq"
    for seq, h in acked:
        assert log[seq].entry.hash.hex() == h, f"seq {seq} holds another entry than the one acknowledged"
    assert report.entries == len(log) and report.head_seq == len(log) - 1
    return len(log)
