"""The RFC 6962 tree: the published vectors, a differential against an independent reference written
from the RFC (and against tlog-scales where it is installed) over every size 1..300, hypothesis for
proofs and their mutations, and the compact range.

And the tree at its bounds, played by an attacker: sizes and indexes at 0, 1, 2**k, 2**k + 1, size - 1 and
size, the largest tree size (2**63 - 1) and the first size past it, every subtree range, and the exact
InvalidInput each out-of-range question gets."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo.chain.tree import (
    EMPTY_ROOT,
    CompactRange,
    HashList,
    LeafSource,
    consistency_proof,
    inclusion_path,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)
from mnemo.errors import InvalidInput

# -- §8 A: the RFC 6962 reference leaves --------------------------------------------------------------

RFC_LEAVES = [bytes.fromhex(x) for x in
              ("", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")]
RFC_ROOTS = {
    1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    2: "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    3: "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    7: "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
}
RFC_PATHS = {
    (2, 7): ["07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
             "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
             "837dbb152e9b079010717e84e865da4ebc0fa198a806d59d31bf15accef22d0e"],
    (6, 7): ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
}
RFC_PROOFS = {
    (3, 7): ["0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
             "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
             "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
             "837dbb152e9b079010717e84e865da4ebc0fa198a806d59d31bf15accef22d0e"],
    (4, 7): ["837dbb152e9b079010717e84e865da4ebc0fa198a806d59d31bf15accef22d0e"],
}


def rfc_hashes() -> HashList:
    return HashList([leaf_hash(d) for d in RFC_LEAVES])


@pytest.mark.parametrize("size", sorted(RFC_ROOTS))
def test_rfc6962_roots(size: int) -> None:
    assert root(rfc_hashes(), size).hex() == RFC_ROOTS[size]


@pytest.mark.parametrize(("index", "size"), sorted(RFC_PATHS))
def test_rfc6962_inclusion_paths(index: int, size: int) -> None:
    leaves = rfc_hashes()
    path = inclusion_path(leaves, index, size)
    assert [h.hex() for h in path] == RFC_PATHS[(index, size)]
    assert verify_inclusion(leaf_hash(RFC_LEAVES[index]), index, size, path, root(leaves, size))


@pytest.mark.parametrize(("old", "new"), sorted(RFC_PROOFS))
def test_rfc6962_consistency_proofs(old: int, new: int) -> None:
    leaves = rfc_hashes()
    proof = consistency_proof(leaves, old, new)
    assert [h.hex() for h in proof] == RFC_PROOFS[(old, new)]
    assert verify_consistency(old, new, root(leaves, old), root(leaves, new), proof)


def test_hash_domains() -> None:
    assert leaf_hash(b"") == hashlib.sha256(b"\x00").digest()
    assert leaf_hash(b"x") != hashlib.sha256(b"x").digest()  # not the chain hash
    a, b = b"\x01" * 32, b"\x02" * 32
    assert node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest()
    assert root([]) == EMPTY_ROOT == hashlib.sha256(b"").digest()
    assert root([leaf_hash(b"a")]) == leaf_hash(b"a")


# -- an independent reference, straight from RFC 6962 §2.1 ---------------------------------------------


class Reference:
    """MTH, PATH and PROOF exactly as RFC 6962 §2.1 writes them, recursing over the data itself."""

    def __init__(self, data: list[bytes]) -> None:
        self.d = tuple(data)

    @staticmethod
    def k(n: int) -> int:
        k = 1
        while k * 2 < n:
            k *= 2
        return k

    @cache  # noqa: B019 - the instance lives for one test
    def mth(self, lo: int, hi: int) -> bytes:
        n = hi - lo
        if n == 0:
            return hashlib.sha256(b"").digest()
        if n == 1:
            return hashlib.sha256(b"\x00" + self.d[lo]).digest()
        k = self.k(n)
        return hashlib.sha256(b"\x01" + self.mth(lo, lo + k) + self.mth(lo + k, hi)).digest()

    def path(self, m: int, lo: int, hi: int) -> list[bytes]:
        n = hi - lo
        if n == 1:
            return []
        k = self.k(n)
        if m < k:
            return self.path(m, lo, lo + k) + [self.mth(lo + k, hi)]
        return self.path(m - k, lo + k, hi) + [self.mth(lo, lo + k)]

    def subproof(self, m: int, lo: int, hi: int, b: bool) -> list[bytes]:
        n = hi - lo
        if m == n:
            return [] if b else [self.mth(lo, hi)]
        k = self.k(n)
        if m <= k:
            return self.subproof(m, lo, lo + k, b) + [self.mth(lo + k, hi)]
        return self.subproof(m - k, lo + k, hi, False) + [self.mth(lo, lo + k)]

    def proof(self, m: int, n: int) -> list[bytes]:
        return self.subproof(m, 0, n, True)


def leaf_data(n: int) -> list[bytes]:
    """Distinct leaves of varied lengths, the empty one included."""
    return [hashlib.sha256(i.to_bytes(4, "big")).digest()[: i % 41] + i.to_bytes(3, "big") * (i % 2)
            for i in range(n)]


MAX_DIFF = 300


def test_reference_reproduces_the_rfc_vectors() -> None:
    ref = Reference(RFC_LEAVES)
    assert {n: ref.mth(0, n).hex() for n in RFC_ROOTS} == RFC_ROOTS
    assert {k: [h.hex() for h in ref.path(k[0], 0, k[1])] for k in RFC_PATHS} == RFC_PATHS
    assert {k: [h.hex() for h in ref.proof(*k)] for k in RFC_PROOFS} == RFC_PROOFS


def spread(n: int, first: int = 0) -> list[int]:
    """Every index in first..n-1 for the smaller trees; for the larger, the edges, the splits (powers of
    two and their neighbours) and every 13th index."""
    if n <= 96:
        return list(range(first, n))
    picks = {first, first + 1, n - 2, n - 1, *range(first, n, 13)}
    for p in (64, 128, 256):
        picks |= {p - 1, p, p + 1}
    return sorted(i for i in picks if first <= i < n)


def test_differential_against_the_reference_every_size() -> None:
    data = leaf_data(MAX_DIFF)
    ref = Reference(data)
    leaves = HashList([leaf_hash(d) for d in data])
    for n in range(1, MAX_DIFF + 1):
        r = leaves.root(n)
        assert r == ref.mth(0, n), n
        for m in spread(n):
            path = leaves.inclusion_path(m, n)
            assert path == ref.path(m, 0, n), (m, n)
            assert verify_inclusion(leaf_hash(data[m]), m, n, path, r)
        for m in spread(n + 1, 1):
            proof = leaves.consistency_proof(m, n)
            assert proof == ref.proof(m, n), (m, n)
            assert verify_consistency(m, n, ref.mth(0, m), r, proof)


def test_differential_against_tlog_scales(tmp_path: Path) -> None:
    """Roots at every size equal to tlog-scales' tiles reader; paths and proofs at the small sizes and
    around the splits equal to its, and accepted by its verifiers."""
    tiles_writer = pytest.importorskip("tlog_scales.writer")
    from tlog_scales.tlog import ConsistencyProof, InclusionProof

    data = leaf_data(MAX_DIFF)
    writer = tiles_writer.TilesWriter.create(tmp_path / "log", "example.com/test")
    for i, d in enumerate(data):  # one full tile, then a partial tile for each size above it
        writer.add_leaf(d)
        if i >= 255:
            writer.commit([], gc=False)
    reader = writer.reader
    leaves = HashList([leaf_hash(d) for d in data])
    proved = {*range(1, 21), 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 200, 255, 256, 257, 299, 300}
    for n in range(1, MAX_DIFF + 1):
        reader.set_size(n)
        r = reader.calculate_root_hash()
        assert leaves.root(n) == r, n
        if n not in proved:
            continue
        for m in spread(n) if n <= 20 else sorted({0, 1, n // 3, n // 2, n - 2, n - 1, 127, 128, 255} & set(range(n))):
            path = leaves.inclusion_path(m, n)
            assert path == reader.get_inclusion_proof(m, n).node_hashes, (m, n)
            InclusionProof(m, n, path).check(leaf_hash(data[m]), r)
        for m in sorted({1, 2, 3, n // 2, n - 1, n, 64, 128, 256} & set(range(1, n + 1))):
            proof = leaves.consistency_proof(m, n)
            assert proof == reader.get_consistency_proof(m, n).node_hashes, (m, n)
            ConsistencyProof(m, n, proof).check(leaves.root(m), r)


# -- hypothesis: every proof verifies, every mutation fails ----------------------------------------------

sizes = st.integers(min_value=1, max_value=70)


def _flip(h: bytes, bit: int) -> bytes:
    b = bytearray(h)
    b[bit // 8 % 32] ^= 1 << (bit % 8)
    return bytes(b)


@settings(max_examples=150, deadline=None)
@given(n=sizes, data=st.data())
def test_inclusion_proofs_verify_and_mutations_fail(n: int, data: st.DataObject) -> None:
    d = leaf_data(n)
    leaves = HashList([leaf_hash(x) for x in d])
    m = data.draw(st.integers(0, n - 1), label="index")
    r = leaves.root(n)
    path = leaves.inclusion_path(m, n)
    leaf = leaf_hash(d[m])
    assert verify_inclusion(leaf, m, n, path, r)
    assert len(path) <= (n - 1).bit_length()  # at most ceil(log2 n)
    for i in range(len(path)):  # every hash of the path, one bit flipped
        bit = data.draw(st.integers(0, 255), label="bit")
        assert not verify_inclusion(leaf, m, n, [*path[:i], _flip(path[i], bit), *path[i + 1:]], r)
    assert not verify_inclusion(_flip(leaf, 3), m, n, path, r)
    assert not verify_inclusion(leaf, m, n, path, _flip(r, 7))
    if path:
        assert not verify_inclusion(leaf, m, n, path[:-1], r)
    assert not verify_inclusion(leaf, m, n, [*path, r], r)
    assert not verify_inclusion(leaf, n, n, path, r)  # index past the tree
    other = data.draw(st.integers(0, n - 1), label="other index")
    if other != m:
        assert not verify_inclusion(leaf, other, n, path, r)
    if n > 1:
        n2 = data.draw(st.integers(m + 1, 71).filter(lambda x: x != n), label="other size")
        more = HashList([leaf_hash(x) for x in leaf_data(n2)])
        assert not verify_inclusion(leaf, m, n2, path, more.root(n2))


@settings(max_examples=150, deadline=None)
@given(n=sizes, data=st.data())
def test_consistency_proofs_verify_and_mutations_fail(n: int, data: st.DataObject) -> None:
    leaves = HashList([leaf_hash(x) for x in leaf_data(n)])
    m = data.draw(st.integers(1, n), label="old size")
    rm, rn = leaves.root(m), leaves.root(n)
    proof = leaves.consistency_proof(m, n)
    assert verify_consistency(m, n, rm, rn, proof)
    assert (proof == []) == (m == n)
    for i in range(len(proof)):
        bit = data.draw(st.integers(0, 255), label="bit")
        assert not verify_consistency(m, n, rm, rn, [*proof[:i], _flip(proof[i], bit), *proof[i + 1:]])
    assert not verify_consistency(m, n, _flip(rm, 1), rn, proof)
    assert not verify_consistency(m, n, rm, _flip(rn, 2), proof)
    if proof:
        assert not verify_consistency(m, n, rm, rn, proof[:-1])
        assert not verify_consistency(m, n, rm, rn, proof[1:])
    assert not verify_consistency(m, n, rm, rn, [*proof, rn])
    m2 = data.draw(st.integers(1, n), label="other old size")
    if m2 != m:
        assert not verify_consistency(m2, n, leaves.root(m2), rn, proof)
    if m < n:
        assert not verify_consistency(n, m, rn, rm, proof)  # the wrong way round
        n2 = data.draw(st.integers(m, n).filter(lambda x: x != n), label="other new size")
        assert not verify_consistency(m, n2, rm, leaves.root(n2), proof)


def test_a_rewritten_prefix_admits_no_consistency_proof() -> None:
    """The tree of a log changed below m is not consistent with m: its proofs fail against R_m."""
    good = leaf_data(40)
    bad = list(good)
    bad[9] = b"rewritten"
    old = HashList([leaf_hash(x) for x in good])
    new = HashList([leaf_hash(x) for x in bad])
    for m in range(10, 41):
        assert not verify_consistency(m, 40, old.root(m), new.root(40), new.consistency_proof(m, 40))


def test_verifiers_refuse_malformed_input() -> None:
    leaves = rfc_hashes()
    r, path = leaves.root(7), leaves.inclusion_path(2, 7)
    leaf = leaf_hash(RFC_LEAVES[2])
    assert not verify_inclusion(leaf, -1, 7, path, r)
    assert not verify_inclusion(leaf, 2, 0, [], r)
    assert not verify_inclusion(leaf[:31], 2, 7, path, r)
    assert not verify_inclusion(leaf, 2, 7, [*path[:2], path[2][:16]], r)
    assert not verify_inclusion(leaf, True, 7, path, r)
    assert not verify_consistency(0, 7, EMPTY_ROOT, r, [])
    assert not verify_consistency(0, 7, EMPTY_ROOT, r, [r])
    assert not verify_consistency(7, 7, r, r, [r])
    assert verify_consistency(7, 7, r, r, [])
    assert not verify_consistency(3, 7, leaves.root(3), r, [])


def test_proofs_refuse_sizes_out_of_range() -> None:
    leaves = rfc_hashes()
    for bad in ((8, 8), (0, 9), (-1, 3), (3, 3)):
        with pytest.raises(InvalidInput):
            leaves.inclusion_path(*bad)
    for bad_c in ((0, 3), (4, 3), (1, 9), (-1, 2)):
        with pytest.raises(InvalidInput):
            leaves.consistency_proof(*bad_c)
    with pytest.raises(InvalidInput):
        leaves.root(9)
    assert consistency_proof(leaves, 3, 3) == []


def test_memoised_subtrees_follow_truncation() -> None:
    d = leaf_data(100)
    leaves = HashList([leaf_hash(x) for x in d])
    before = leaves.root(100)
    leaves.truncate(37)
    assert leaves.root() == Reference(d).mth(0, 37)
    for x in d[37:]:
        leaves.append(leaf_hash(x + b"!"))
    assert leaves.root() != before
    assert leaves.root() == Reference(d[:37] + [x + b"!" for x in d[37:]]).mth(0, 100)


# -- the compact range -----------------------------------------------------------------------------------


def test_compact_range_tracks_the_root_at_every_size() -> None:
    d = leaf_data(300)
    ref = Reference(d)
    cr = CompactRange()
    assert cr.root() == EMPTY_ROOT and cr.size == 0
    for i, x in enumerate(d, 1):
        cr.append_entry(x)
        assert cr.size == i and len(cr.hashes()) == bin(i).count("1")
        assert cr.root() == ref.mth(0, i)
        assert cr.head() == (i, ref.mth(0, i))


def test_compact_range_serialises_and_resumes() -> None:
    d = leaf_data(77)
    cr = CompactRange()
    cr.extend(leaf_hash(x) for x in d[:50])
    data = cr.to_bytes()
    assert data[:9] == b"\x01" + (50).to_bytes(8, "big") and len(data) == 9 + 32 * bin(50).count("1")
    back = CompactRange.from_bytes(data)
    assert back == cr and back.root() == cr.root()
    for x in d[50:]:
        back.append(leaf_hash(x))
    assert back.root() == Reference(d).mth(0, 77)
    copy = back.copy()
    copy.append(leaf_hash(b"more"))
    assert copy.size == 78 and back.size == 77


@pytest.mark.parametrize("data", [b"", b"\x01", b"\x02" + bytes(8), b"\x01" + (3).to_bytes(8, "big") + bytes(32),
                                  b"\x01" + (1).to_bytes(8, "big") + bytes(33)])
def test_compact_range_refuses_bad_bytes(data: bytes) -> None:
    with pytest.raises(InvalidInput):
        CompactRange.from_bytes(data)


def test_compact_range_refuses_bad_arguments() -> None:
    with pytest.raises(InvalidInput):
        CompactRange(3, [bytes(32)])
    with pytest.raises(InvalidInput):
        CompactRange(-1, [])
    cr = CompactRange()
    with pytest.raises(InvalidInput):
        cr.append(b"short")
    assert cr.size == 0


def test_hash_list_refuses_bad_hashes() -> None:
    with pytest.raises(InvalidInput):
        HashList(b"\x00" * 33)
    with pytest.raises(InvalidInput):
        HashList([b"\x00" * 31])
    h = HashList()
    with pytest.raises(InvalidInput):
        h.extend(b"\x00" * 5)
    with pytest.raises(InvalidInput):
        h.read(0, 1)
    assert len(h) == 0


def test_a_hash_list_extended_with_concatenated_hashes_is_the_list_of_them() -> None:
    hashes = [leaf_hash(x) for x in leaf_data(5)]
    grown = HashList(hashes[:2])
    grown.extend(b"".join(hashes[2:]))
    assert len(grown) == 5 and grown.raw() == b"".join(hashes)
    assert grown.root() == HashList(hashes).root() == Reference(leaf_data(5)).mth(0, 5)
    grown.extend(b"")
    assert len(grown) == 5


def test_proofs_default_to_the_whole_tree() -> None:
    """Without a size, a path and a proof are to the tree as it is now."""
    tree = HashList(leaf_hash(x) for x in leaf_data(7))
    assert tree.root() == tree.root(7)
    assert tree.inclusion_path(2) == tree.inclusion_path(2, 7) != tree.inclusion_path(2, 6)
    assert tree.consistency_proof(3) == tree.consistency_proof(3, 7) != tree.consistency_proof(3, 6)


def test_compact_ranges_are_values() -> None:
    """Equal ranges (same size, same hashes) hash alike, so they can key a dict or a set; the repr names
    the size and the root."""
    d = leaf_data(6)
    a, b = CompactRange(), CompactRange()
    a.add_entries(d)
    b.add_entries(d)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    b.append_entry(b"more")
    assert a != b and a != a.to_bytes()
    assert repr(a) == f"CompactRange(size=6, root={a.root().hex()})"


def test_the_memo_of_subtrees_is_right_whatever_is_asked_first() -> None:
    """Subtree hashes are kept once computed, level by level: asking a fresh tree first for a subtree
    to the right (which fills a level with an odd number of subtrees), or for a path, must leave the
    levels above right for the root and the proofs asked next."""
    data = leaf_data(160)
    ref = Reference(data)
    hashes = [leaf_hash(d) for d in data]
    for n in (48, 64, 80, 96, 112, 128, 144, 160):
        for start in range(0, n, 16):
            for size in (16, 32, 64):
                if start % size or start + size > n:
                    continue
                fresh = HashList(hashes[:n])
                assert fresh.subtree(start, start + size) == ref.mth(start, start + size), (start, size, n)
                assert fresh.root(n) == ref.mth(0, n), (start, size, n)
        for m in spread(n):
            fresh = HashList(hashes[:n])
            assert fresh.inclusion_path(m, n) == ref.path(m, 0, n), (m, n)
            assert fresh.root(n) == ref.mth(0, n), (m, n)
            assert fresh.consistency_proof(m + 1, n) == ref.proof(m + 1, n), (m, n)


def test_a_hash_list_reads_only_the_leaves_it_holds() -> None:
    hashes = [leaf_hash(x) for x in leaf_data(3)]
    h = HashList(hashes)
    assert h.read(0, 3) == b"".join(hashes) and h.read(1, 1) == b"" and h.read(3, 3) == b""
    for start, stop in ((-1, 1), (-1, 0), (2, 1), (0, 4), (3, 4)):
        with pytest.raises(InvalidInput) as info:
            h.read(start, stop)
        assert str(info.value) == f"leaves [{start}, {stop}) are not all held (3 are)"


def test_adding_entries_returns_their_leaf_hashes() -> None:
    d = leaf_data(5)
    one, many = CompactRange(), CompactRange()
    assert [one.append_entry(x) for x in d] == many.add_entries(d) == [leaf_hash(x) for x in d]
    assert one == many


MAX = (1 << 63) - 1  # the largest tree size a checkpoint can name


def h(i: int) -> bytes:
    return hashlib.sha256(b"node %d" % i).digest()


def mth(leaves: list[bytes]) -> bytes:
    """MTH over leaf hashes, straight from RFC 6962 §2.1."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while 2 * k < len(leaves):
        k *= 2
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


LEAVES = [leaf_hash(b"entry %d" % i) for i in range(40)]


# -- the largest tree: index 0 and the last index of a tree of 2**63 - 1 leaves ------------------------------


def first_leaf_proof(depth: int) -> tuple[list[bytes], bytes]:
    """A path for leaf 0 of a tree whose left spine is `depth` nodes deep (any tree of 2**(depth-1) + 1 to
    2**depth leaves): its right siblings, bottom up, and the root they lead to."""
    path = [h(i) for i in range(depth)]
    r = LEAVES[0]
    for p in path:
        r = node_hash(r, p)
    return path, r


def test_the_first_leaf_of_the_largest_tree_verifies_and_one_size_more_is_refused() -> None:
    path, r = first_leaf_proof(63)
    assert verify_inclusion(LEAVES[0], 0, MAX, path, r)
    assert verify_inclusion(LEAVES[0], 0, (1 << 62) + 1, path, r)  # 2**62 + 1 leaves: the same spine depth
    assert not verify_inclusion(LEAVES[0], 0, 1 << 62, path, r)  # 2**62 leaves: one level less
    # 2**63 leaves would have this very shape, but no checkpoint names a size above 2**63 - 1
    assert not verify_inclusion(LEAVES[0], 0, 1 << 63, path, r)
    assert not verify_inclusion(LEAVES[0], 0, MAX, path[:-1], r)
    assert not verify_inclusion(LEAVES[0], 0, MAX, [*path, h(99)], node_hash(r, h(99)))


def test_the_last_leaf_of_the_largest_tree_verifies() -> None:
    # 2**63 - 1 = 2**62 + (2**62 - 1): the last leaf's siblings are the perfect subtrees on its left, 62 of them
    path = [h(i) for i in range(62)]
    r = LEAVES[1]
    for p in path:
        r = node_hash(p, r)
    assert verify_inclusion(LEAVES[1], MAX - 1, MAX, path, r)
    assert not verify_inclusion(LEAVES[1], MAX, MAX, path, r)  # index = size
    assert not verify_inclusion(LEAVES[1], MAX - 2, MAX, path, r)
    assert not verify_inclusion(LEAVES[1], (1 << 63) - 1, 1 << 63, path, r)


def test_consistency_up_to_the_largest_tree_verifies_and_past_it_is_refused() -> None:
    old = h(1000)  # the root of a perfect tree of 2**62 leaves
    right = h(1001)  # MTH of the 2**62 - 1 leaves after it
    new = node_hash(old, right)
    assert verify_consistency(1 << 62, MAX, old, new, [right])
    assert not verify_consistency(1 << 62, MAX, old, new, [])
    assert not verify_consistency(1 << 62, MAX, old, new, [right, right])
    assert not verify_consistency(1 << 62, 1 << 63, old, new, [right])  # a size no checkpoint names
    assert verify_consistency(MAX, MAX, new, new, [])
    assert not verify_consistency(1 << 63, 1 << 63, new, new, [])


# -- every subtree range, and each out-of-range question's exact refusal ------------------------------------


def test_every_subtree_range_is_the_mth_of_its_leaves() -> None:
    source = HashList(LEAVES[:37])
    for start in range(38):
        for end in range(start, 38):
            assert source.subtree(start, end) == mth(LEAVES[start:end]), (start, end)
    assert source.subtree(1, 3) == node_hash(LEAVES[1], LEAVES[2])  # not aligned on its size
    assert source.subtree(16, 32) == mth(LEAVES[16:32]) and source.subtree(20, 36) == mth(LEAVES[20:36])


@pytest.mark.parametrize(("start", "end"), [(0, 8), (8, 8), (8, 9), (-1, 3), (4, 3), (True, 3), (0, 2 ** 63)])
def test_a_subtree_outside_the_tree_is_refused(start: int, end: int) -> None:
    source = HashList(LEAVES[:7])
    with pytest.raises(InvalidInput) as info:
        source.subtree(start, end)
    assert str(info.value) == f"no subtree [{start}, {end}) in a tree of 7 leaves"


@pytest.mark.parametrize("size", [8, 9, -1, True, 2 ** 63, 7.0])
def test_a_root_past_the_leaves_held_is_refused(size: object) -> None:
    source = HashList(LEAVES[:7])
    with pytest.raises(InvalidInput) as info:
        source.root(size)  # type: ignore[arg-type]
    assert str(info.value) == f"no tree of size {size!r}: the source holds 7 leaves"


def test_roots_at_every_size_up_to_the_leaves_held() -> None:
    source = HashList(LEAVES[:33])
    assert source.root(0) == EMPTY_ROOT
    for n in range(1, 34):
        assert source.root(n) == mth(LEAVES[:n]), n
    assert source.root() == mth(LEAVES[:33])


def test_a_leaf_source_without_leaves_says_so() -> None:
    class Bare(LeafSource):
        pass

    with pytest.raises(NotImplementedError):
        len(Bare())
    with pytest.raises(NotImplementedError):
        Bare().read(0, 1)
    with pytest.raises(NotImplementedError):
        Bare().leaf(0)


# -- a verifier's answer is exactly True or False ------------------------------------------------------------


def test_every_refused_inclusion_is_exactly_false() -> None:
    source = HashList(LEAVES[:7])
    r, path, leaf = source.root(7), source.inclusion_path(2, 7), LEAVES[2]
    assert verify_inclusion(leaf, 2, 7, path, r) is True
    refused = [
        (leaf[:31], 2, 7, path, r),  # not a hash
        (leaf, 2, 7, path, r[:31]),
        (leaf, -1, 7, path, r),  # not a size
        (leaf, 7, 7, path, r),  # index = size
        (leaf, 2, 7, [*path[:2], b"short"], r),  # a path hash that is not 32 bytes
        (leaf, 2, 7, [*path, h(1)], r),  # one node too many: the walk reaches the root first
        (leaf, 2, 7, path[:-1], r),  # one node too few
        (leaf, 3, 7, path, r),  # another index
        (LEAVES[0], 0, 1, [h(1)], LEAVES[0]),  # a tree of one leaf has an empty path
    ]
    for args in refused:
        assert verify_inclusion(*args) is False, args


def test_every_refused_consistency_is_exactly_false() -> None:
    source = HashList(LEAVES[:9])
    r3, r4, r8, r9 = (source.root(n) for n in (3, 4, 8, 9))
    proof = source.consistency_proof(3, 9)
    assert verify_consistency(3, 9, r3, r9, proof) is True
    assert verify_consistency(9, 9, r9, r9, []) is True
    refused = [
        (3, 9, r3[:31], r9, proof),  # not a hash
        (-3, 9, r3, r9, proof),  # not a size
        (3, 9, r3, r9, [*proof[:1], b"short", *proof[2:]]),  # a proof hash that is not 32 bytes
        (9, 9, r9, r9, [r9]),  # equal sizes take an empty proof
        (9, 9, r9, r8, []),  # equal sizes, other roots
        (9, 3, r9, r3, proof),  # the wrong way round
        (0, 9, EMPTY_ROOT, r9, proof),  # no tree is empty
        (3, 9, r3, r9, []),  # no proof at all
        (3, 9, r3, r9, [*proof, h(2)]),  # one node too many: the walk reaches the root first
        (3, 9, r3, r9, proof[:-1]),  # one node too few
        (4, 9, r4, r9, proof),  # another old size
        (8, 9, r8, r9, source.consistency_proof(4, 9)),  # a proof between trees other than these
    ]
    for args in refused:
        assert verify_consistency(*args) is False, args


# -- truncating the leaves held ------------------------------------------------------------------------------


def test_truncating_to_every_size_held_and_no_further() -> None:
    for size in (0, 1, 6, 7):
        source = HashList(LEAVES[:7])
        source.root()  # keep some subtrees, which truncation must forget
        source.truncate(size)
        assert len(source) == size and source.root() == mth(LEAVES[:size])
    source = HashList(LEAVES[:7])
    for bad in (8, -1):
        with pytest.raises(InvalidInput) as info:
            source.truncate(bad)
        assert str(info.value) == f"cannot truncate 7 leaves to {bad}"
    assert source.raw() == b"".join(LEAVES[:7])


def test_an_honest_proof_under_smaller_sizes_is_refused() -> None:
    """A tree of 2**k + m leaves has the perfect subtree of 2**k on its left: the honest proofs of its
    right part, one node longer, must not pass for the smaller sizes of that right part alone."""
    source = HashList(LEAVES[:8])
    r6, r7, r8 = source.root(6), source.root(7), source.root(8)
    proof = source.consistency_proof(7, 8)  # PROOF(3, D[4:8]) + [MTH(D[0:4])]
    assert verify_consistency(7, 8, r7, r8, proof) is True
    assert verify_consistency(3, 4, r7, r8, proof) is False
    assert verify_consistency(3, 8, r7, r8, proof) is False
    path = source.inclusion_path(5, 6)  # PATH(1, D[4:6]) + [MTH(D[0:4])]
    assert verify_inclusion(LEAVES[5], 5, 6, path, r6) is True
    assert verify_inclusion(LEAVES[5], 1, 2, path, r6) is False
    assert verify_inclusion(LEAVES[5], 1, 6, path, r6) is False
    path = source.inclusion_path(7, 8)
    assert verify_inclusion(LEAVES[7], 7, 8, path, r8) is True
    assert verify_inclusion(LEAVES[7], 3, 4, path, r8) is False
    assert verify_inclusion(LEAVES[7], 1, 2, path, r8) is False


# -- the compact range fed leaf hashes back to back, with and without the native speedups ------------------


@pytest.mark.parametrize("native", [True, False])
def test_leaf_hashes_back_to_back_give_the_root_of_every_size(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemo.chain import tree

    if not native:
        monkeypatch.setattr(tree, "speedups", None)
    for n in (0, 1, 2, 3, 16, 17, 37):
        cr = tree.CompactRange()
        cr.add_leaf_hashes(b"".join(LEAVES[:n]))
        assert cr.size == n and cr.root() == mth(LEAVES[:n]), n
        cr.add_leaf_hashes(b"".join(LEAVES[n:40]))
        assert cr.size == 40 and cr.root() == mth(LEAVES[:40])
    cr = tree.CompactRange()
    with pytest.raises(InvalidInput) as info:
        cr.add_leaf_hashes(b"".join(LEAVES[:3]) + b"x")
    assert str(info.value) == "leaf hashes are 32 bytes each" and cr.size == 0


@pytest.mark.parametrize("cpu_paths", [True, False])
def test_leaf_hashes_in_pieces_of_any_size_leave_the_stack_pushing_them_one_by_one_leaves(cpu_paths: bool) -> None:
    """The native push adds leaves as whole perfect subtrees where the size allows (up to 1,024 leaves
    at a time, their nodes hashed two at a time): in pieces of any size, from any size, the compact range
    is the one pushing each leaf in Python gives, with the CPU's SHA-256 path and without."""
    import importlib
    import random

    from mnemo.chain import tree

    native = importlib.import_module("mnemo._speedups")
    before = native.cpu_paths()
    native.cpu_paths(cpu_paths)
    try:
        leaves = [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(5000)]
        rng = random.Random(11)
        for cuts in ([], [1], [1023, 1024, 2048], [3, 1030, 4095], *(sorted(rng.sample(range(1, 5000), 4))
                                                                  for _ in range(6))):
            fast, slow = tree.CompactRange(), tree.CompactRange()
            for lo, hi in zip([0, *cuts], [*cuts, 5000], strict=True):
                fast.add_leaf_hashes(b"".join(leaves[lo:hi]))
                for leaf in leaves[lo:hi]:
                    slow._push(leaf)
                assert (fast.size, fast.hashes()) == (slow.size, slow.hashes()), (cuts, hi)
        assert fast.root() == mth(leaves)
    finally:
        native.cpu_paths(any(before))


def test_a_compact_range_of_every_small_size_round_trips() -> None:
    from mnemo.chain.tree import CompactRange

    for n in (0, 1, 2, 3, 4, 5):
        cr = CompactRange()
        cr.extend(LEAVES[:n])
        data = cr.to_bytes()
        assert len(data) == 9 + 32 * bin(n).count("1")
        for form in (data, bytearray(data), memoryview(data)):
            back = CompactRange.from_bytes(form)
            assert back == cr and back.head() == (n, mth(LEAVES[:n]))
    for bad in (b"\x01" + bytes(7), "not bytes", None):
        with pytest.raises(InvalidInput) as info:
            CompactRange.from_bytes(bad)  # type: ignore[arg-type]
        assert str(info.value) == "not a serialised compact range"
