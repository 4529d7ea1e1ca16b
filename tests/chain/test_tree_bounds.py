"""The tree at its bounds, played by an attacker: sizes and indexes at 0, 1, 2**k, 2**k + 1, size - 1 and
size, the largest tree size (2**63 - 1) and the first size past it, every subtree range, and the exact
InvalidInput each out-of-range question gets."""

from __future__ import annotations

import hashlib

import pytest

from mnemo.errors import InvalidInput
from mnemo.transparency.tree import (
    EMPTY_ROOT,
    HashList,
    LeafSource,
    leaf_hash,
    node_hash,
    verify_consistency,
    verify_inclusion,
)

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
    from mnemo.transparency import tree

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


def test_a_compact_range_of_every_small_size_round_trips() -> None:
    from mnemo.transparency.tree import CompactRange

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
