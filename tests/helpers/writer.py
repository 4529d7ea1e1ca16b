"""A child process that writes to a Mnemo db; the tests start it, read what it acknowledges, or kill it.

Every line on stdout is printed and flushed only after the write it describes returned.
"""

from __future__ import annotations

import argparse
import random
import sys

from mnemo import MnemoClient
from mnemo.errors import Conflict


def ack(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def crash(c: MnemoClient, tag: str, count: int, seed: int) -> None:
    """Single remembers, 3-record transactions and forgets, acknowledging each after it returned."""
    rng = random.Random(seed)
    mine: list[str] = []
    ack("READY")
    for i in range(count):
        if mine and rng.random() < 0.1:
            victim = mine.pop(rng.randrange(len(mine)))
            ack("FORGETTING", victim)
            c.forget(victim)
            ack("FORGOT", victim)
        elif rng.random() < 0.3:
            group = f"{tag}-g{i}"
            with c.transaction():
                recs = [c.remember(f"{group}-{k}", tags=[tag, group]) for k in range(3)]
            ack("TX", group, *(r.id for r in recs))
        else:
            rec = c.remember(f"{tag}-{i}-" + "x" * rng.randrange(0, 300), tags=[tag])
            ack("ONE", rec.id, rec.content)
            mine.append(rec.id)


def bulk(c: MnemoClient, tag: str, count: int) -> None:
    """Wait for a line on stdin (so several children start together), then write `count` records."""
    ack("READY")
    sys.stdin.readline()
    ids = [c.remember(f"{tag}:{i}", tags=[tag]).id for i in range(count)]
    ack("DONE", len(ids))
    for rid in ids:
        ack(rid)


def counter(c: MnemoClient, record_id: str, count: int) -> None:
    """Increment an integer stored as content, `count` times, with expected_version and retries."""
    ack("READY")
    sys.stdin.readline()
    conflicts = 0
    done = 0
    while done < count:
        rec = c.get(record_id)
        try:
            c.update(record_id, content=str(int(str(rec.content)) + 1), expected_version=rec.version)
        except Conflict:
            conflicts += 1
            continue
        done += 1
    ack("DONE", done, conflicts)


def create(c: MnemoClient, tag: str) -> None:
    rec = c.remember(tag, tags=[tag])
    ack("DONE", rec.id)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["crash", "bulk", "counter", "create"])
    p.add_argument("db")
    p.add_argument("agent")
    p.add_argument("--durability", default="fsync")
    p.add_argument("--tag", default="w")
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--id", default="")
    a = p.parse_args()
    if a.mode == "create":  # several children are released together to race on creating the db
        ack("READY")
        sys.stdin.readline()
    with MnemoClient(a.db, a.agent, durability=a.durability, lock_timeout=60.0) as c:
        if a.mode == "crash":
            crash(c, a.tag, a.count, a.seed)
        elif a.mode == "bulk":
            bulk(c, a.tag, a.count)
        elif a.mode == "counter":
            counter(c, a.id, a.count)
        else:
            create(c, a.tag)


if __name__ == "__main__":
    main()
