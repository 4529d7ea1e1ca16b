"""Tampering with the index held in a file database's sealed snapshot, as someone who can write the files
would: the edits the index check (client.verify(), verify_db) must catch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mnemo.storage.file import snapshot as snap
from mnemo.storage.file.index import Index


def tamper(db: Path, edit: Callable[[Index], None]) -> None:
    """Alter the index held in the snapshot and re-seal it, as someone who can write the files would."""
    path = str(db) + ".snap"
    body = snap.read_snapshot(path)
    assert body is not None
    index = Index.from_state(body["db_id"], body["index"])
    edit(index)
    body["index"] = index.to_state()
    snap.write_snapshot(path, body)


def replace(rec_id: str, **changes: Any) -> Callable[[Index], None]:
    """An edit giving record `rec_id` other fields (scope, tags, or fields of its latest version)."""

    def edit(index: Index) -> None:
        rec = index.get_rec(rec_id)
        assert rec is not None
        latest = rec.versions[-1]._replace(**{k: v for k, v in changes.items() if k not in ("scope", "tags")})
        index.drop(rec_id)
        index.forgotten.discard(rec_id)
        for v in rec.versions[:-1]:
            index.put(rec_id, rec.scope, rec.tags, v)
        index.put(rec_id, changes.get("scope", rec.scope), changes.get("tags", rec.tags), latest)

    return edit
