"""The leaf-hash cache (DB.leaves): bytes on disk, what open does with a file that is not this database's,
appends at a seq, validation against the log, and CacheProver, which never hands out an unchecked proof."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mnemo import MnemoClient
from mnemo.chain.tree import CompactRange, HashList, TreeHead, leaf_hash
from mnemo.errors import InvalidInput
from mnemo.storage.file.leaves import HEADER_SIZE, LeafCache, cache_path, encode_header
from mnemo.storage.file.prover import CacheProver
from mnemo.transparency.errors import StaleCache, UsageError
from mnemo.transparency.log import read_tree

DB_ID = bytes(range(16))
OTHER_ID = bytes(range(16, 32))


def hashes(n: int, salt: bytes = b"") -> list[bytes]:
    return [leaf_hash(salt + i.to_bytes(4, "big")) for i in range(n)]


def cat(hs: list[bytes]) -> bytes:
    return b"".join(hs)


def test_header_and_leaves_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "db.leaves"
    with LeafCache.open(path, DB_ID) as cache:
        assert len(cache) == 0 and cache.reset_reason is None
        cache.append(cat(hashes(3)))
    data = path.read_bytes()
    head = b"MNEMOLHC" + struct.pack(">HH", 1, 32) + DB_ID
    assert data[:32] == head + struct.pack(">I", zlib.crc32(head)) == encode_header(DB_ID)
    assert data[32:] == cat(hashes(3))
    with LeafCache.open(path, DB_ID, readonly=True) as cache:
        assert len(cache) == 3 and cache.read(0, 3) == cat(hashes(3)) and cache.leaf(2) == hashes(3)[2]


def test_cache_path_is_beside_the_log(tmp_path: Path) -> None:
    assert cache_path(tmp_path / "m.db") == str(tmp_path / "m.db.leaves")


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda d: encode_header(OTHER_ID) + d[32:], "belongs to database"),
    (lambda d: b"NOTACACH" + d[8:], "bad magic"),
    (lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:], "checksum"),
    (lambda d: d[:10], "shorter than its header"),
])
def test_a_cache_of_another_database_or_damaged_is_never_used(tmp_path: Path, damage, reason: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "db.leaves"
    with LeafCache.open(path, DB_ID) as cache:
        cache.append(cat(hashes(5)))
    path.write_bytes(damage(path.read_bytes()))
    before = path.read_bytes()
    with pytest.raises(StaleCache, match=reason):
        LeafCache.open(path, DB_ID, readonly=True)
    assert path.read_bytes() == before  # read-only: untouched
    with LeafCache.open(path, DB_ID) as cache:  # for writing: emptied, and says why
        assert len(cache) == 0 and reason in (cache.reset_reason or "")
    assert path.read_bytes() == encode_header(DB_ID)


def test_a_missing_cache_is_created_only_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "db.leaves"
    with pytest.raises(StaleCache, match="no leaf-hash cache"):
        LeafCache.open(path, DB_ID, readonly=True)
    assert not path.exists()
    with pytest.raises(InvalidInput):
        LeafCache.open(path, b"short")
    assert not path.exists()


def test_a_torn_append_is_cut_on_open(tmp_path: Path) -> None:
    path = tmp_path / "db.leaves"
    with LeafCache.open(path, DB_ID) as cache:
        cache.append(cat(hashes(4)))
    with open(path, "ab") as f:
        f.write(b"\x07" * 20)
    with LeafCache.open(path, DB_ID, readonly=True) as cache:
        assert len(cache) == 4
    assert os.path.getsize(path) == HEADER_SIZE + 4 * 32 + 20
    with LeafCache.open(path, DB_ID) as cache:
        assert len(cache) == 4
    assert os.path.getsize(path) == HEADER_SIZE + 4 * 32


def test_append_at_a_seq_replaces_and_refuses_gaps(tmp_path: Path) -> None:
    path = tmp_path / "db.leaves"
    a, b = hashes(10), hashes(10, b"other")
    with LeafCache.open(path, DB_ID) as cache:
        cache.append(cat(a))
        cache.append(cat(a[4:6]), at=4)  # a frame applied twice: nothing changes but the tail
        assert len(cache) == 6 and cache.read(0, 6) == cat(a[:6])
        cache.append(cat(a[6:]))
        root = cache.root()
        cache.append(cat(b[7:9]), at=7)  # the log holds other entries from seq 7 on
        assert len(cache) == 9 and cache.read(0, 9) == cat(a[:7] + b[7:9])
        assert cache.root() == HashList(a[:7] + b[7:9]).root() != root
        before = path.read_bytes()
        with pytest.raises(StaleCache, match="cannot follow"):
            cache.append(cat(a[:1]), at=10)
        with pytest.raises(InvalidInput):
            cache.append(b"\x00" * 33)
        assert path.read_bytes() == before
        cache.truncate(3)
        assert len(cache) == 3 and cache.root() == HashList(a[:3]).root()
        cache.rebuild(HashList(b))
        assert cache.read(0, 10) == cat(b)
    with LeafCache.open(path, DB_ID, readonly=True) as ro, pytest.raises(InvalidInput, match="read-only"):
        ro.append(cat(a[:1]))


def test_two_handles_see_each_others_appends(tmp_path: Path) -> None:
    path = tmp_path / "db.leaves"
    a = hashes(6)
    with LeafCache.open(path, DB_ID) as one, LeafCache.open(path, DB_ID) as two:
        one.append(cat(a[:4]))
        two.append(cat(a[2:6]), at=2)  # it caught up from seq 2 on: overlapping, the same bytes
        assert one.refresh() == 6 and one.read(0, 6) == cat(a)


def test_validate_against_a_tree_head(tmp_path: Path) -> None:
    a = hashes(50)
    head = HashList(a).root()
    with LeafCache.open(tmp_path / "c", DB_ID) as cache:
        cache.append(cat(a[:40]))
        check = cache.validate(TreeHead(50, head))
        assert (check.ok, check.confirmed, check.problem) == (False, 0, "the cache holds 40 leaves, the log 50")
        cache.append(cat(a[40:]))
        cr = CompactRange()
        cr.extend(a)
        assert cache.validate(cr).ok and cache.validate(TreeHead(50, head)).confirmed == 50
        check = cache.validate(TreeHead(45, HashList(a).root(45)))
        assert (check.ok, check.confirmed, check.extra) == (True, 45, 5)  # the log was cut back to 45
    # one leaf changed on disk: the root no longer matches
    data = bytearray((tmp_path / "c").read_bytes())
    data[HEADER_SIZE + 17 * 32] ^= 0x80
    (tmp_path / "c").write_bytes(bytes(data))
    with LeafCache.open(tmp_path / "c", DB_ID) as cache:
        check = cache.validate(TreeHead(50, head))
        assert not check.ok and "stale or forged" in (check.problem or "")
        check = cache.validate(HashList(a))  # against the log's leaves: names the first bad one
        assert (check.ok, check.confirmed) == (False, 17)
        assert check.problem == "cached leaf 17 is not the log's: the cache is stale or forged"
        check = cache.validate(cat(a) + cat(hashes(2, b"x")))
        assert not check.ok and check.confirmed == 17


# -- CacheProver: every proof checked against the head computed from the log -----------------------------


def test_cache_prover_hands_out_the_logs_proofs(tmp_path: Path) -> None:
    entries = [i.to_bytes(4, "big") for i in range(77)]
    a = [leaf_hash(e) for e in entries]
    truth = HashList(a)
    with LeafCache.open(tmp_path / "c", DB_ID) as cache:
        cache.append(cat(a))
        prover = CacheProver(cache, TreeHead(77, truth.root()))
        for size in (1, 2, 33, 64, 77):
            for index in (0, size // 2, size - 1):
                inc = prover.inclusion(index, entries[index], size)
                assert inc.path == tuple(truth.inclusion_path(index, size)) and inc.root == truth.root(size)
            for old in (1, size // 2 or 1, size):
                c = prover.consistency(old, size)
                assert c.proof == tuple(truth.consistency_proof(old, size))
                assert (c.old_root, c.new_root) == (truth.root(old), truth.root(size))
        with pytest.raises(UsageError):
            prover.inclusion(77, entries[0])
        with pytest.raises(UsageError):
            prover.consistency(5, 4)
        with pytest.raises(UsageError):
            prover.root_at(78)


@pytest.mark.parametrize("forged", [0, 1, 15, 16, 40, 63, 64, 76])
def test_a_forged_cache_never_yields_a_wrong_proof(tmp_path: Path, forged: int) -> None:
    entries = [i.to_bytes(4, "big") for i in range(77)]
    a = [leaf_hash(e) for e in entries]
    truth = HashList(a)
    bad = list(a)
    bad[forged] = leaf_hash(b"forged")
    with LeafCache.open(tmp_path / "c", DB_ID) as cache:
        cache.append(cat(bad))
        prover = CacheProver(cache, TreeHead(77, truth.root()))
        for size in range(1, 78):
            for index in {0, forged % size, size - 1}:
                try:
                    inc = prover.inclusion(index, entries[index], size)
                except StaleCache:
                    continue
                # accepted only when the proof is the log's own (the leaf is hashed from the entry given)
                assert inc.path == tuple(truth.inclusion_path(index, size)) and inc.root == truth.root(size)
            for old in {1, size // 2 or 1, size}:
                try:
                    c = prover.consistency(old, size)
                except StaleCache:
                    continue
                assert c.proof == tuple(truth.consistency_proof(old, size))
                assert c.old_root == truth.root(old)
        with pytest.raises(StaleCache):
            prover.consistency(1)
        with pytest.raises(StaleCache):
            prover.inclusion((forged + 1) % 77, entries[(forged + 1) % 77])


def test_cache_prover_refuses_a_cache_behind_the_log(tmp_path: Path) -> None:
    a = hashes(9)
    with LeafCache.open(tmp_path / "c", DB_ID) as cache:
        cache.append(cat(a[:8]))
        with pytest.raises(StaleCache, match="holds 8 leaves, the log 9"):
            CacheProver(cache, TreeHead(9, HashList(a).root()))


def test_a_backend_keeps_cache_and_compact_range_in_step(tmp_path: Path) -> None:
    """The protocol a storage backend follows (docs/TRANSPARENCY.md, "The leaf-hash cache"): for every
    frame it writes or replays, append the leaves at the frame's first seq to the cache and to the compact
    range; on open, validate the cache against the range and rebuild it from the log when stale."""
    db = tmp_path / "m.db"
    with MnemoClient(db, "agent-1", durability="none") as client:
        for i in range(40):
            client.remember(f"memory {i}", tags=["t"])
    tree = read_tree(db)
    cr = CompactRange()
    with LeafCache.open(cache_path(db), tree.db_id) as cache:
        for seq in range(tree.size):  # one frame per entry here
            h = tree.leaves.leaf(seq)
            cache.append(h, at=seq)
            cr.append(h)
        assert cr.root() == tree.root() and cache.validate(cr).ok
        saved = cr.to_bytes()  # what the backend keeps in its index snapshot
    # a later open: the range comes back from the snapshot, the cache is checked against it
    cr = CompactRange.from_bytes(saved)
    with LeafCache.open(cache_path(db), tree.db_id) as cache:
        assert cache.validate(cr).ok
        prover = CacheProver(cache, cr)
        seq = 7
        raw = read_tree(db, keep=[seq]).entries[seq]
        assert prover.inclusion(seq, raw).path == tuple(tree.leaves.inclusion_path(seq, tree.size))
    # someone rewrites the cache: validation fails, the backend rebuilds it from the log
    data = bytearray(Path(cache_path(db)).read_bytes())
    data[-1] ^= 1
    Path(cache_path(db)).write_bytes(bytes(data))
    with LeafCache.open(cache_path(db), tree.db_id) as cache:
        assert not cache.validate(cr).ok
        cache.rebuild(read_tree(db).leaves)
        assert cache.validate(cr).ok


def test_leaf_hash_is_over_the_entry_bytes() -> None:
    assert leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()


def test_appends_at_the_next_seq_are_buffered_until_flushed(tmp_path: Path) -> None:
    path = tmp_path / "db.leaves"
    a = hashes(LeafCache.FLUSH_LEAVES + 10)
    with LeafCache.open(path, DB_ID) as cache:
        for i in range(5):
            cache.append(a[i], at=i)
        assert len(cache) == 5 and os.path.getsize(path) == HEADER_SIZE  # nothing written yet
        with LeafCache.open(path, DB_ID, readonly=True) as other:
            assert len(other) == 0
        assert cache.read(0, 5) == cat(a[:5])  # a read writes them first
        assert os.path.getsize(path) == HEADER_SIZE + 5 * 32
        for i in range(5, len(a)):
            cache.append(a[i], at=i)
        assert os.path.getsize(path) >= HEADER_SIZE + LeafCache.FLUSH_LEAVES * 32  # written every 2,048
    assert path.read_bytes()[HEADER_SIZE:] == cat(a)  # and on close


# -- TreeState: what a storage backend calls ----------------------------------------------------------


def client_db(tmp_path: Path, n: int = 30) -> Path:
    db = tmp_path / "m.db"
    with MnemoClient(db, "agent-1", durability="none") as client:
        for i in range(n):
            client.remember(f"memory {i}")
    return db


def frames_of(db: Path) -> list[tuple[int, list[bytes]]]:
    from mnemo.audit import read_log

    out: dict[int, list[bytes]] = {}
    for item in read_log(db):
        out.setdefault(item.offset, []).append(item.entry.raw)  # one entry per frame here
    return [(i, raws) for i, (_off, raws) in enumerate(sorted(out.items()))]


def test_tree_state_follows_the_log_and_resumes_from_a_snapshot(tmp_path: Path) -> None:
    from mnemo.storage.file.tree_state import TreeState

    db = client_db(tmp_path)
    tree = read_tree(db)
    state = TreeState(db, tree.db_id)
    assert state.cache_ok and state.size == 0
    frames = frames_of(db)
    for seq, raws in frames[:20]:
        state.add(raws, seq)
    saved = state.to_bytes()
    state.flush()
    state.close()
    # reopened from a snapshot that covers 20 entries: the replay adds the rest
    state = TreeState(db, tree.db_id, saved=saved)
    assert state.size == 20 and state.cache_ok
    with pytest.raises(StaleCache, match="does not follow the tree of 20"):
        state.add(frames[25][1], 25)
    for seq, raws in frames[20:]:
        state.add(raws, seq)
    assert state.head() == (tree.size, tree.root())
    check = state.check()
    assert check is not None and check.ok
    prover = state.prover()
    for seq in (0, 13, tree.size - 1):
        raw = read_tree(db, keep=[seq]).entries[seq]
        assert prover.inclusion(seq, raw).path == tuple(tree.leaves.inclusion_path(seq, tree.size))
    assert prover.consistency(7).proof == tuple(tree.leaves.consistency_proof(7, tree.size))
    state.close()
    with pytest.raises(InvalidInput):
        TreeState(db, tree.db_id, saved=b"junk")


def test_tree_state_sets_a_bad_cache_aside_and_rebuilds_it(tmp_path: Path) -> None:
    from mnemo.storage.file.tree_state import TreeState, remove_cache

    db = client_db(tmp_path)
    tree = read_tree(db)
    state = TreeState(db, tree.db_id)
    for seq, raws in frames_of(db):
        state.add(raws, seq)
    saved = state.to_bytes()
    state.close()
    remove_cache(db)  # the sidecar is gone: the snapshot's range is ahead of it
    state = TreeState(db, tree.db_id, saved=saved)
    assert not state.cache_ok and "holds 0 leaves" in (state.cache_problem or "")
    with pytest.raises(StaleCache):
        state.prover()
    state.rebuild(read_tree(db).leaves)
    assert state.cache_ok and state.head() == (tree.size, tree.root())
    assert state.prover().consistency(3).new_root == tree.root()
    state.close()
    # a forged leaf: check() finds it and sets the cache aside
    data = bytearray(Path(cache_path(db)).read_bytes())
    data[HEADER_SIZE + 5 * 32] ^= 1
    Path(cache_path(db)).write_bytes(bytes(data))
    state = TreeState(db, tree.db_id, saved=saved)
    assert state.cache_ok  # not known until checked
    check = state.check()
    assert check is not None and not check.ok and not state.cache_ok
    state.close()
    # another database's cache is emptied on open
    Path(cache_path(db)).write_bytes(encode_header(OTHER_ID) + bytes(64))
    state = TreeState(db, tree.db_id)
    assert state.cache_ok and state.cache is not None and state.cache.reset_reason is not None
    state.close()
    remove_cache(db)
    ro = TreeState(db, tree.db_id, readonly=True)
    assert ro.cache is None and not ro.cache_ok
    remove_cache(db)  # twice: no error


def test_tree_state_drops_leaves_past_the_log(tmp_path: Path) -> None:
    from mnemo.storage.file.tree_state import TreeState

    db = client_db(tmp_path, 10)
    tree = read_tree(db)
    with LeafCache.open(cache_path(db), tree.db_id) as cache:
        cache.append(tree.leaves.raw() + cat(hashes(3)), at=0)  # leaves of a frame the log never got
    state = TreeState(db, tree.db_id)
    state.rebuild(HashList(tree.leaves.raw()[:0]))  # start from nothing, then replay
    for seq, raws in frames_of(db):
        state.add(raws, seq)
    state.close()
    with LeafCache.open(cache_path(db), tree.db_id) as cache:
        cache.append(tree.leaves.raw() + cat(hashes(3)), at=0)
    cr = CompactRange()
    cr.extend(tree.leaves.leaf(i) for i in range(tree.size))
    state = TreeState(db, tree.db_id, saved=cr.to_bytes())
    check = state.check()
    assert check is not None and check.ok and check.extra == 3
    assert state.cache is not None and len(state.cache) == tree.size
    state.close()


# -- the cache as a state machine -----------------------------------------------------------------------


class CacheMachine(RuleBasedStateMachine):
    """Appends at any seq (the next, an earlier one, a gap), truncation, flushes and reopening, against a
    plain list: the cache always reads back as the list, and its tree is the list's."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "c.leaves")
        self.cache = LeafCache.open(self.path, DB_ID)
        self.model: list[bytes] = []
        self.counter = 0

    def fresh(self, n: int) -> list[bytes]:
        self.counter += n
        return hashes(n, self.counter.to_bytes(4, "big"))

    @rule(n=st.integers(1, 40))
    def append_next(self, n: int) -> None:
        new = self.fresh(n)
        self.cache.append(cat(new), at=len(self.model))
        self.model += new

    @rule(back=st.integers(0, 50), n=st.integers(1, 10))
    def append_earlier(self, back: int, n: int) -> None:
        at = max(0, len(self.model) - back)
        new = self.fresh(n)
        self.cache.append(cat(new), at=at)
        self.model = self.model[:at] + new

    @rule(gap=st.integers(1, 5))
    def append_past_a_gap(self, gap: int) -> None:
        with pytest.raises(StaleCache):
            self.cache.append(cat(self.fresh(1)), at=len(self.model) + gap)

    @rule(keep=st.integers(0, 60))
    def truncate(self, keep: int) -> None:
        self.cache.truncate(keep)
        self.model = self.model[:keep]

    @rule()
    def flush(self) -> None:
        self.cache.flush()

    @rule()
    def reopen(self) -> None:
        self.cache.close()
        self.cache = LeafCache.open(self.path, DB_ID)

    @invariant()
    def reads_back_as_the_model(self) -> None:
        assert len(self.cache) == len(self.model)
        assert self.cache.read(0, len(self.model)) == cat(self.model)
        if self.model:
            assert self.cache.root() == HashList(self.model).root()
            m = len(self.model)
            assert self.cache.inclusion_path(m // 2, m) == HashList(self.model).inclusion_path(m // 2, m)

    def teardown(self) -> None:
        self.cache.close()
        shutil.rmtree(self.dir, ignore_errors=True)


CacheMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_cache_state_machine = CacheMachine.TestCase
