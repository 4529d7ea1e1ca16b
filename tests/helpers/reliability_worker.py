"""Concurrency worker: one process, several threads, mixing writes, edits and reads on a shared db.

    python -m helpers.reliability_worker DB AGENT --threads 8 --seconds 5 --seed S

Prints `ready`, waits for a line on stdin (so that every process starts together), runs for the given
time and prints one JSON object: what each thread had acknowledged (remembered tokens, counter
increments, memory-tool edits, with the seq and hash each write returned), how many edits were refused
and every unexpected error. Threads check as they go that reads never go backwards and that this
process's own acknowledged writes are visible to its later reads.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from mnemo import MnemoClient
from mnemo.errors import Conflict
from mnemo.tools.server import MnemoMemoryToolServer

SCOPE = "team:shared"
COUNTERS = 4
FILES = 3


def file_path(j: int) -> str:
    return f"/memories/shared/f{j}.md"


@dataclass
class Acks:
    tokens: list[dict[str, Any]] = field(default_factory=list)  # remembered: id, content, seq, hash
    increments: list[dict[str, Any]] = field(default_factory=list)  # counter id, version, value, seq, hash
    edits: list[dict[str, Any]] = field(default_factory=list)  # file, token
    refused: list[dict[str, Any]] = field(default_factory=list)  # edits answered with an error result
    conflicts: int = 0
    reads: int = 0
    errors: list[str] = field(default_factory=list)


class Worker:
    def __init__(self, client: MnemoClient, agent: str, counters: list[str]) -> None:
        self.c = client
        self.agent = agent
        # Views show whole files (they grow past the default max_view_chars), and no quota refuses an
        # edit: this run is about concurrent edits losing nothing, not about the tool's bounds.
        self.tool = MnemoMemoryToolServer(
            client, scope=SCOPE, max_view_chars=1 << 24, max_files=None, max_total_bytes=None,
            max_history_bytes=None, max_versions_per_file=None,
        )
        self.counters = counters
        self.lock = threading.Lock()
        self.acks = Acks()

    def remember(self, rng: random.Random, name: str) -> None:
        rec = self.c.remember(f"tok {name}", tags=["tok", f"by:{self.agent}"], scope=SCOPE)
        assert rec.content == f"tok {name}" and rec.version == 1
        with self.lock:
            self.acks.tokens.append({"id": rec.id, "content": rec.content, "seq": rec.seq, "hash": rec.hash})

    def increment(self, rng: random.Random, name: str) -> None:
        cid = rng.choice(self.counters)
        while True:
            cur = self.c.get(cid)
            try:
                rec = self.c.update(cid, content=str(int(str(cur.content)) + 1), expected_version=cur.version)
            except Conflict:
                with self.lock:
                    self.acks.conflicts += 1
                continue
            assert rec.version == cur.version + 1
            with self.lock:
                self.acks.increments.append({"id": cid, "version": rec.version, "value": int(str(rec.content)),
                                             "seq": rec.seq, "hash": rec.hash})
            return

    def edit(self, rng: random.Random, name: str) -> None:
        j = rng.randrange(FILES)
        token = f"<{name}>"
        if rng.random() < 0.5:
            cmd: dict[str, Any] = {"command": "insert", "path": file_path(j), "insert_line": 0, "insert_text": token}
        else:
            cmd = {"command": "str_replace", "path": file_path(j), "old_str": "END", "new_str": f"{token}\nEND"}
        block = self.tool.handle({"type": "tool_use", "id": name, "name": "memory", "input": cmd})
        with self.lock:
            if block.get("is_error"):
                self.acks.refused.append({"file": j, "token": token, "result": block["content"]})
            else:
                self.acks.edits.append({"file": j, "token": token})

    def read(self, rng: random.Random, state: dict[str, Any]) -> None:
        """Reads must see this process's acknowledged writes, and never go backwards."""
        with self.lock:
            mine = list(self.acks.tokens)
            my_edits = list(self.acks.edits)
        what = rng.randrange(3)
        if what == 0 and mine:
            t = rng.choice(mine)
            assert self.c.get(t["id"]).content == t["content"]
        elif what == 1:
            n = len(self.c.list_records(tags=["tok", f"by:{self.agent}"], scope=SCOPE))
            assert n >= len(mine), f"query saw {n} of this process's {len(mine)} acknowledged tokens"
            assert n >= state.get("seen", 0), "a later query saw fewer records than an earlier one"
            state["seen"] = n
        else:
            j = rng.randrange(FILES)
            block = self.tool.handle({"type": "tool_use", "id": "v", "name": "memory",
                                      "input": {"command": "view", "path": file_path(j), "view_range": [1, -1]}})
            assert not block.get("is_error"), block
            text = str(block["content"])
            for e in my_edits:
                if e["file"] == j:
                    assert e["token"] in text, f"acknowledged edit {e['token']} missing from a later view"
        with self.lock:
            self.acks.reads += 1

    def thread(self, t: int, seed: int, deadline: float) -> None:
        rng = random.Random(seed)
        state: dict[str, Any] = {}
        i = 0
        try:
            while time.monotonic() < deadline:
                name = f"{self.agent}-{t}-{i}"
                i += 1
                op = rng.random()
                if op < 0.25:
                    self.remember(rng, name)
                elif op < 0.5:
                    self.increment(rng, name)
                elif op < 0.75:
                    self.edit(rng, name)
                else:
                    self.read(rng, state)
        except Exception:
            with self.lock:
                self.acks.errors.append(f"thread {t}: {traceback.format_exc()}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("agent")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--durability", default="fsync")
    a = p.parse_args()
    with MnemoClient(a.db, a.agent, durability=a.durability, lock_timeout=120.0) as client:
        counters = sorted(r.id for r in client.list_records(tags=["counter"], scope=SCOPE))
        assert len(counters) == COUNTERS, counters
        worker = Worker(client, a.agent, counters)
        print("ready", flush=True)
        sys.stdin.readline()
        deadline = time.monotonic() + a.seconds
        threads = [
            threading.Thread(target=worker.thread, args=(t, a.seed * 1000 + t, deadline)) for t in range(a.threads)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    print(json.dumps(worker.acks.__dict__), flush=True)


if __name__ == "__main__":
    main()
