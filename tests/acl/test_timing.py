"""`get` of an id that exists in a scope the caller cannot read costs what `get` of an id that does not
exist costs, so timing does not reveal existence. Both are timed interleaved, over many trials, and
compared by their medians and by how often the slower of a pair is the existing id (what an attacker
timing single calls would go by). On both backends."""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from mnemo import MnemoClient, RecordUnavailable


@dataclass
class Timings:
    existing: list[int]
    missing: list[int]

    def ratio(self) -> float:
        """Median of the existing ids' calls over that of the missing ones'."""
        return statistics.median(self.existing) / statistics.median(self.missing)

    def slower_is_existing(self) -> float:
        """Of each interleaved pair, how often the existing id's call was the slower: 0.5 when timing
        tells nothing, 1.0 when it tells everything."""
        wins = sum(e > m for e, m in zip(self.existing, self.missing, strict=True))
        ties = sum(e == m for e, m in zip(self.existing, self.missing, strict=True))
        return (wins + ties / 2) / len(self.existing)


def _elapsed(client: MnemoClient, rec_id: str) -> int:
    start = time.perf_counter_ns()
    try:
        client.get(rec_id)
    except RecordUnavailable:
        pass
    else:
        raise AssertionError(f"{rec_id} was readable")
    return time.perf_counter_ns() - start


def measure(client: MnemoClient, existing: list[str], missing: list[str], trials: int, seed: int = 7) -> Timings:
    """Time get() of existing and missing ids in pairs, in random order within each pair."""
    rng = random.Random(seed)
    out = Timings([], [])
    for rec_id in existing[:50] + missing[:50]:  # warm up
        _elapsed(client, rec_id)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for i in range(trials):
            e, m = existing[i % len(existing)], missing[i % len(missing)]
            if rng.random() < 0.5:
                te = _elapsed(client, e)
                tm = _elapsed(client, m)
            else:
                tm = _elapsed(client, m)
                te = _elapsed(client, e)
            out.existing.append(te)
            out.missing.append(tm)
    finally:
        if gc_was:
            gc.enable()
    return out


def _neighbour(rec_id: str, taken: set[str]) -> str:
    """An id next to rec_id (its last character changed) that no record has: looking it up walks the
    same part of the index."""
    for ch in "0123456789abcdefghijklmnopqrstuvwxyz":
        candidate = rec_id[:-1] + ch
        if candidate not in taken:
            return candidate
    raise AssertionError("no free neighbour")


@dataclass
class Setup:
    bob: MnemoClient
    existing: list[str]
    missing: list[str]
    where: str


# (backend, where, grants): on PostgreSQL, records written before bob opened are rows like any other
# (no snapshot loads them), so only those written since are timed there.
SETUPS = [
    pytest.param(backend, where, grants, id=f"{backend}-{where}-{grants}-grants")
    for backend in ("file", "postgres")
    for where in ("from-snapshot", "since-open")
    for grants in (0, 200)
    if not (backend == "postgres" and where == "from-snapshot")
]


@contextmanager
def timing_setup(db: str, where: str, grants: int) -> Iterator[Setup]:
    """alice's records, which bob may not read, either loaded from the index snapshot when bob opened
    or written since; bob holds no grants, or many elsewhere, so that asking the ACL has a cost to skip."""
    with MnemoClient(db, "owner", durability="none") as owner:
        for i in range(grants):
            owner.grant("bob", f"team:{i}", ["read"])
    alice = MnemoClient(db, "alice", durability="none")
    before = [alice.remember(f"secret {i}").id for i in range(300)]
    if where == "from-snapshot":
        alice.close()  # writes the snapshot bob's open loads
        alice = MnemoClient(db, "alice", durability="none")
    bob = MnemoClient(db, "bob", durability="none")
    existing = before if where == "from-snapshot" else [alice.remember(f"later {i}").id for i in range(300)]
    taken = set(before) | set(existing)
    missing = [_neighbour(rec_id, taken) for rec_id in existing]
    try:
        yield Setup(bob, existing, missing, where)
    finally:
        bob.close()
        alice.close()


@pytest.mark.parametrize(("backend", "where", "grants"), SETUPS)
def test_unreadable_and_missing_ids_take_the_same_time(db: str, where: str, grants: int) -> None:
    """Loose bounds, for a loaded machine. When the two paths did different work (the ACL asked about
    one of them only, a record built for one only) the medians differed by 30% without grants and
    fourfold with 200 of them, and the slower of a pair was the existing id 94-99% of the time."""
    with timing_setup(db, where, grants) as setup:
        timings = measure(setup.bob, setup.existing, setup.missing, trials=2000)
    ratio, slower = timings.ratio(), timings.slower_is_existing()
    assert 0.85 < ratio < 1.15, f"medians differ: ratio {ratio:.3f}"
    assert slower < 0.75, f"the slower of a pair is the existing id {slower:.1%} of the time"


@pytest.mark.soak
@pytest.mark.parametrize(("backend", "where", "grants"), SETUPS)
def test_unreadable_and_missing_ids_take_the_same_time_strictly(db: str, where: str, grants: int) -> None:
    """Many more trials; the medians within 3%. For records loaded from the snapshot both lookups walk
    the same sorted ids, and a pair's slower call is the existing id about half the time. For records
    written since, the index finds an id a fraction of a microsecond slower than it misses one (the
    README's threat model says so), which skews the pairs, though not the medians."""
    with timing_setup(db, where, grants) as setup:
        timings = measure(setup.bob, setup.existing, setup.missing, trials=40000)
    ratio, slower = timings.ratio(), timings.slower_is_existing()
    assert 0.97 < ratio < 1.03, f"medians differ: ratio {ratio:.3f}"
    bound = 0.6 if where == "from-snapshot" else 0.75
    assert slower < bound, f"the slower of a pair is the existing id {slower:.1%} of the time"
