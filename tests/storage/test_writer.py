"""The writer context both backends' writing() returns (mnemo/storage/writer.py): the order of its steps,
what it releases when a step fails, and when it waits for durability. Over a store of its own making,
which records each step; the backends' own tests run it on real stores."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from mnemo.errors import LockTimeout, ReadOnly
from mnemo.storage.batch import Batch
from mnemo.storage.guards import StoreGuards
from mnemo.storage.writer import WriterContext, hold_writer_lock


class _Store(StoreGuards):
    def __init__(self, durability: str = "fsync") -> None:
        super().__init__(readonly=False, durability=durability, lock_timeout=0.05)
        self.steps: list[str] = []
        self.deadline_left = 0.0  # how long _begin had left until its deadline


class _Context(WriterContext[_Store, int]):
    __slots__ = ("fail",)

    def __init__(self, store: _Store, fail: str = "") -> None:
        super().__init__(store, transactional=False)
        self.fail = fail

    def _starts(self) -> None:
        self.store.steps.append("starts")

    def _ends(self) -> None:
        self.store.steps.append(f"ends, lock held: {self.store._mutex._is_owned()}")  # type: ignore[attr-defined]

    def _begin(self, deadline: float) -> Batch:
        self.store.steps.append(f"begin, lock held: {self.store._mutex._is_owned()}")  # type: ignore[attr-defined]
        self.store.deadline_left = deadline - time.monotonic()
        if self.fail == "begin":
            raise RuntimeError("begin failed")
        return Batch(_Base(), (0, b"\x00" * 32, 0), False)

    def _end(self, batch: Batch, commit: bool) -> int | None:
        self.store.steps.append(f"end, commit: {commit}")
        return 7 if commit else None

    def _durable(self, done: int) -> None:
        self.store.steps.append(f"durable {done}, lock held: {self.store._mutex._is_owned()}")  # type: ignore[attr-defined]


class _Base:
    """What a Batch reads through to: nothing is committed."""

    acl: Any = None

    def get_rec(self, rec_id: str) -> None:
        return None


def _stage(batch: Batch) -> None:
    batch.staged.append(object())  # type: ignore[arg-type]  # (the context only asks whether any is staged)


def test_a_write_takes_its_steps_in_order_and_waits_for_durability_after_the_lock() -> None:
    store = _Store()
    with _Context(store) as batch:
        assert store.current_batch() is batch
        _stage(batch)
    assert store.current_batch() is None and not store._mutex._is_owned()  # type: ignore[attr-defined]
    assert store.steps == [
        "starts", "begin, lock held: True", "end, commit: True", "ends, lock held: False",
        "durable 7, lock held: False",
    ]
    assert 0 < store.deadline_left <= 0.05  # the backend's own locks: lock_timeout from asking for the writer lock


@pytest.mark.parametrize("durability", ["batch", "none"])
def test_without_fsync_a_commit_does_not_wait_for_durability(durability: str) -> None:
    store = _Store(durability)
    with _Context(store) as batch:
        _stage(batch)
    assert store.steps == ["starts", "begin, lock held: True", "end, commit: True", "ends, lock held: False"]


def test_a_body_that_stages_nothing_commits_nothing() -> None:
    store = _Store()
    with _Context(store):
        pass
    assert store.steps == ["starts", "begin, lock held: True", "end, commit: False", "ends, lock held: False"]


def test_a_body_that_raises_commits_nothing_and_releases_everything() -> None:
    store = _Store()
    with pytest.raises(ValueError, match="^the body failed$"), _Context(store) as batch:
        _stage(batch)
        raise ValueError("the body failed")
    assert store.steps == ["starts", "begin, lock held: True", "end, commit: False", "ends, lock held: False"]
    assert store.current_batch() is None and not store._mutex._is_owned()  # type: ignore[attr-defined]


def test_a_begin_that_fails_releases_the_lock_and_the_count_and_leaves_no_batch() -> None:
    store = _Store()
    with pytest.raises(RuntimeError, match="^begin failed$"), _Context(store, fail="begin"):
        pass
    assert store.steps == ["starts", "begin, lock held: True", "ends, lock held: False"]
    assert store.current_batch() is None and not store._mutex._is_owned()  # type: ignore[attr-defined]


def test_inside_an_open_batch_a_write_joins_it_and_takes_no_step() -> None:
    store = _Store()
    with _Context(store) as outer:
        store.steps.clear()
        with _Context(store) as inner:
            _stage(inner)
        assert inner is outer and store.steps == [] and store.current_batch() is outer
    assert store.steps == ["end, commit: True", "ends, lock held: False", "durable 7, lock held: False"]


def test_a_store_that_may_not_write_is_refused_before_any_step() -> None:
    store = _Store()
    store.readonly = True
    with pytest.raises(ReadOnly, match=r"^the client was opened with readonly=True$"), _Context(store):
        pass
    assert store.steps == [] and not store._mutex._is_owned()  # type: ignore[attr-defined]


def test_a_writer_lock_held_by_another_thread_past_lock_timeout_is_a_lock_timeout() -> None:
    store = _Store()
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store._mutex:
            held.set()
            done.wait(5)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        held.wait(5)
        with pytest.raises(LockTimeout, match=r"^another thread held the writer lock for over 0\.05 s$"):
            hold_writer_lock(store)
        with pytest.raises(LockTimeout, match=r"^another thread held the writer lock for over 0\.05 s$"), \
                _Context(store):
            pass
        assert store.steps == ["starts", "ends, lock held: False"]
    finally:
        done.set()
        thread.join()
