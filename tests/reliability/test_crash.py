"""Crash matrix: a writer doing every kind of write is killed with SIGKILL at random points.

Each round kills the writer child either after a random time or at a random file event inside it
(before, after or in the middle of a write, fsync, truncate, rename or unlink), then checks that no
acknowledged write is lost, that the operation in flight landed whole or not at all, and that the db
opens (as reader and as writer) and verifies. tests/soak runs the same matrix for 200 rounds.
"""

from __future__ import annotations

import time
from pathlib import Path

from helpers.reliability_crash import crash_matrix

ROUNDS = 20


def test_crash_matrix(tmp_path: Path) -> None:
    start = time.monotonic()
    stats = crash_matrix(tmp_path, ROUNDS, seed=7)
    print(f"\n{stats.summary()} in {time.monotonic() - start:.1f}s")
    assert stats.rounds == ROUNDS
    assert stats.acked_ops >= 5 * ROUNDS, f"the writer was killed too early to test much: {stats.summary()}"
    wanted = {"remember", "update", "forget", "transaction", "tool-create", "tool-edit", "tool-rename-dir"}
    assert wanted <= set(stats.ops), stats.summary()
