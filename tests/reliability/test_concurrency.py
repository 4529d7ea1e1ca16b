"""Concurrency: 4 processes x 8 threads mixing remembers, counter updates with expected_version retries,
memory-tool edits of the same few files, and reads, for 5 s (30 s in tests/soak).

No lost update, no duplicate or missing seq, every acknowledged write is in the chain where it was
acknowledged, the chain verifies. Plus the races between compaction and the same client's other threads.
On both backends.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable

from helpers.reliability_concurrency import run

from mnemo import MnemoClient


def test_processes_and_threads_lose_no_update(db: str) -> None:
    figures = run(db, processes=4, threads=8, seconds=5.0, seed=1)
    print("\n" + figures.summary())
    assert figures.remembers and figures.increments and figures.edits and figures.reads
    assert figures.refused == 0


def race_compaction(c: MnemoClient, other: Callable[[], object], seconds: float = 3.0) -> list[str]:
    """Compact over and over while another thread runs `other` in a loop; the errors either side saw."""
    errors: list[str] = []
    stop = threading.Event()

    def loop() -> None:
        try:
            while not stop.is_set():
                other()
        except Exception:
            errors.append("other thread: " + traceback.format_exc(limit=3))
            stop.set()

    t = threading.Thread(target=loop)
    t.start()
    deadline = time.monotonic() + seconds
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            c.compact()
    except Exception:
        errors.append("compacting thread: " + traceback.format_exc(limit=3))
    finally:
        stop.set()
        t.join()
    return errors


def test_compaction_beside_a_writer_thread(db: str) -> None:
    with MnemoClient(db, "a", durability="fsync") as c:
        assert race_compaction(c, lambda: c.remember("x")) == []
        assert c.verify().ok


def test_compaction_beside_a_reader_thread(db: str) -> None:
    with MnemoClient(db, "a", durability="none") as c:
        rid = c.remember("kept").id
        assert race_compaction(c, lambda: c.get(rid)) == []


def test_compaction_with_batch_durability(db: str) -> None:
    with MnemoClient(db, "a", durability="batch") as c:
        deadline = time.monotonic() + 4.0
        n = 0
        while time.monotonic() < deadline:
            rec = c.remember(f"x{n}")
            if n % 3 == 0:
                c.forget([rec.id])
            c.compact()
            n += 1
