"""A database built with a known history, and everything a client reads from it on reopening: what
reopening with or without an index snapshot must give back the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mnemo import MemoryRecord, MnemoClient

AGENT = "agent-1"


def build_db(path: Path | str, n: int = 40) -> dict[str, MemoryRecord]:
    with MnemoClient(path, AGENT, durability="none") as c:
        ids = [c.remember(f"content {i}", tags=[f"t{i % 5}", "all"], metadata={"i": i}).id for i in range(n)]
        for rid in ids[::3]:
            c.update(rid, content="updated", tags=["upd"])
        c.forget(ids[1::7])
        return {r.id: r for r in c.query()}


def state_of(c: MnemoClient) -> tuple[dict[str, MemoryRecord], dict[str, list[MemoryRecord]], Any]:
    records = {r.id: r for r in c.query()}
    histories = {rid: c.history(rid) for rid in records}
    return records, histories, c.head


def reopen_state(
    path: Path | str, snapshot_used: bool | None = None
) -> tuple[dict[str, MemoryRecord], dict[str, list[MemoryRecord]], Any]:
    """Open, read everything, close. Only notes about the snapshot (of a file database) may appear in
    the recovery list."""
    with MnemoClient(path, AGENT, durability="none") as c:
        assert all("snapshot" in note for note in c.recovery), c.recovery
        if snapshot_used is not None:
            assert c.stats()["snapshot_used"] is snapshot_used
        state = state_of(c)
        assert c.query(tags=["upd"]) == [r for r in state[0].values() if "upd" in r.tags]
        assert c.query(tag_prefix="t") == [r for r in state[0].values() if any(t[0] == "t" for t in r.tags)]
        return state
