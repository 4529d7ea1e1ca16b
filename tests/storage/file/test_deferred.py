"""The snapshot's text part, loaded after the open in a thread of its own (mnemo/storage/file/deferred.py):
the open does not wait for it; whatever needs the text index waits, so writes, forgets and recalls made
while it loads act on it as they would on one loaded with the rest; its descriptor is let go once it is
read; and a forget made while it loads leaves no file holding the forgotten words."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mnemo import MnemoClient
from mnemo.storage.file import text_index
from mnemo.storage.file.text_index import TextIndex

AGENT = "agent"


def _build(db: Path, n: int = 60) -> list[str]:
    with MnemoClient(db, AGENT, durability="none") as c:
        ids = [c.remember(f"note {i} about topic{i % 3} and zqsecret{i}").id for i in range(n)]
        c.recall("note")  # indexed: the close saves the text index in the snapshot's text part
    return ids


@pytest.fixture
def slow_load(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The text part's build waits until the event is set: the test acts while it loads."""
    go = threading.Event()
    real = TextIndex.from_state.__func__  # type: ignore[attr-defined]

    def held(cls: Any, state: dict[str, Any], rows: int, scopes: int) -> TextIndex:
        assert go.wait(30)
        return real(cls, state, rows, scopes)  # type: ignore[no-any-return]

    monkeypatch.setattr(text_index.TextIndex, "from_state", classmethod(held))
    return go


def _open_fds() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


def test_the_open_does_not_wait_for_the_text_part(tmp_path: Path, slow_load: threading.Event) -> None:
    db = tmp_path / "d.db"
    ids = _build(db)
    with MnemoClient(db, AGENT, readonly=True) as c:  # returns while the text part is held back
        assert c.stats()["snapshot_used"] and c.get(ids[5]).content.startswith("note 5 ")
        threading.Timer(0.2, slow_load.set).start()
        assert [h.record.id for h in c.recall("zqsecret7")] == [ids[7]]  # waits for the part
        deadline = time.monotonic() + 10
        while str(db) + ".snap" in _open_fds() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert str(db) + ".snap" not in _open_fds()  # let go once read
        assert c._store.snapshot_refused is None  # type: ignore[attr-defined]


def test_writes_made_while_it_loads_act_on_it(tmp_path: Path, slow_load: threading.Event) -> None:
    db = tmp_path / "d.db"
    ids = _build(db)
    with MnemoClient(db, AGENT, durability="none") as c:
        threading.Timer(0.2, slow_load.set).start()
        c.update(ids[1], content="rewritten entirely")  # each waits for the text part, then acts on it
        c.forget(ids[4])
        new = c.remember("note fresh about topic1").id
        found = [h.record.id for h in c.recall("topic1", limit=100)]
    assert found == [new] + [i for i in ids[1::3] if i not in (ids[1], ids[4])][::-1]
    with MnemoClient(db, AGENT, readonly=True) as c:  # and what the close saved says the same
        assert [h.record.id for h in c.recall("topic1", limit=100)] == found
        assert c.recall("rewritten") and not c.recall("zqsecret4")


def test_a_forget_made_while_it_loads_leaves_no_file_holding_the_words(
    tmp_path: Path, slow_load: threading.Event
) -> None:
    db = tmp_path / "d.db"
    ids = _build(db)
    with MnemoClient(db, AGENT) as c:
        threading.Timer(0.2, slow_load.set).start()
        c.forget(ids[9])
        for path in tmp_path.iterdir():
            assert b"zqsecret9" not in path.read_bytes(), path
        assert c.recall("zqsecret9") == [] and [h.record.id for h in c.recall("zqsecret10")] == [ids[10]]
    for path in tmp_path.iterdir():
        assert b"zqsecret9" not in path.read_bytes(), path


def test_another_process_replacing_the_snapshot_while_it_loads_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The part is read through the descriptor the open took: a snapshot another writer puts in its
    place meanwhile (its rows numbered otherwise) is not mixed with the main part already loaded."""
    db = tmp_path / "d.db"
    ids = _build(db)
    real = TextIndex.from_state.__func__  # type: ignore[attr-defined]
    first, slow_load = threading.Lock(), threading.Event()

    def first_held(cls: Any, state: dict[str, Any], rows: int, scopes: int) -> TextIndex:
        if first.acquire(blocking=False):  # the reader's build waits; the writer's does not
            assert slow_load.wait(30)
        return real(cls, state, rows, scopes)  # type: ignore[no-any-return]

    monkeypatch.setattr(text_index.TextIndex, "from_state", classmethod(first_held))
    with MnemoClient(db, AGENT, readonly=True) as reader:
        deadline = time.monotonic() + 10
        while not first.locked() and time.monotonic() < deadline:  # the reader's build is the one held
            time.sleep(0.01)
        with MnemoClient(db, AGENT, durability="none") as writer:
            writer.remember("a record more: the rows are numbered anew")
            writer.forget(ids[2])
            writer.remember("and one more")
        slow_load.set()
        assert [h.record.id for h in reader.recall("zqsecret3")] == [ids[3]]
        assert reader.recall("zqsecret2") == []  # the forget, read from the log
        assert reader._store.snapshot_refused is None  # type: ignore[attr-defined]
