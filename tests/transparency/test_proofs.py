"""Consistency JSON and the cache prover at their bounds, played by an attacker: sizes 0, 1, 2**63 - 1 and
2**63, fields of the wrong type, notes that do not parse on one side or both (and what the check reports
then), and a forged leaf cache asked for roots, paths and proofs on both sides of the forged leaf."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
from helpers.transparency_vectors import ENTRIES, NOTE_5, ORIGIN, PUBKEY, SEED

from mnemo.chain.tree import CompactRange, HashList, TreeHead, leaf_hash
from mnemo.storage.file.prover import CacheProver
from mnemo.transparency.consistency import ConsistencyProof, parse_consistency, verify_consistency_proof
from mnemo.transparency.errors import StaleCache, UsageError
from mnemo.transparency.note import sign_checkpoint_note

LEAVES = HashList([leaf_hash(e) for e in ENTRIES])


def b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


def note(size: int, origin: str = ORIGIN) -> str:
    return sign_checkpoint_note(origin, size, LEAVES.root(size), SEED)


def proof_obj(old: int = 3, new: int = 5, origin: str = ORIGIN) -> dict[str, object]:
    return ConsistencyProof(origin, old, new, LEAVES.root(old), LEAVES.root(new),
                            tuple(LEAVES.consistency_proof(old, new))).to_json()


def parsed_findings(obj: object) -> list[tuple[str, str]]:
    proof, found = parse_consistency(json.dumps(obj))
    assert (proof is None) == bool(found)
    return [(p.kind, p.message) for p in found]


# -- the JSON ---------------------------------------------------------------------------------------------


def test_the_json_round_trips_as_text_and_bytes() -> None:
    proof = ConsistencyProof(ORIGIN, 3, 5, LEAVES.root(3), LEAVES.root(5), tuple(LEAVES.consistency_proof(3, 5)))
    text = proof.to_text()
    assert text.endswith("}\n") and text.count("\n") == 1 and json.loads(text) == proof.to_json()
    for data in (text, text.encode(), bytearray(text.encode())):
        assert parse_consistency(data) == (proof, ())
    assert proof.verifies() is True
    assert dataclasses.replace(proof, old_size=4).verifies() is False
    assert hash(proof) == hash(parse_consistency(text)[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        proof.old_size = 4  # type: ignore[misc]


@pytest.mark.parametrize("size", [0, -1, True, 1 << 63, "3", 3.0, None])
def test_a_size_that_is_not_a_positive_64_bit_integer(size: object) -> None:
    assert parsed_findings(dict(proof_obj(), old_size=size)) == [
        ("proof", '"old_size" is missing or not a positive integer')]
    assert parsed_findings(dict(proof_obj(), new_size=size)) == [
        ("proof", '"new_size" is missing or not a positive integer')]


def test_sizes_of_1_and_of_the_largest_are_read() -> None:
    for size in (1, (1 << 63) - 1):
        proof, found = parse_consistency(json.dumps(dict(proof_obj(), old_size=size, new_size=size)))
        assert found == () and proof is not None and (proof.old_size, proof.new_size) == (size, size)


@pytest.mark.parametrize("origin", ["", 5, None, ["x"]])
def test_an_origin_that_is_not_text(origin: object) -> None:
    assert parsed_findings(dict(proof_obj(), origin=origin)) == [("proof", '"origin" is missing or not text')]


def test_roots_and_hashes_of_the_wrong_type_are_named() -> None:
    obj = proof_obj()
    assert parsed_findings(dict(obj, old_root=5)) == [("proof", '"old_root" is missing or not base64')]
    assert parsed_findings(dict(obj, new_root=b64(bytes(33)))) == [
        ("proof", '"new_root" is 33 bytes, not a 32-byte hash')]
    hashes = obj["consistency"]
    assert isinstance(hashes, list) and len(hashes) == 4
    assert parsed_findings(dict(obj, consistency=[*hashes[:2], 7, "!", *hashes[3:]])) == [
        ("proof", "hash 3 of the proof is missing or not base64"),
        ("proof", "hash 4 of the proof is missing or not base64")]
    assert parsed_findings(dict(obj, consistency=[*hashes[:3], b64(bytes(31))])) == [
        ("proof", "hash 4 of the proof is 31 bytes, not a 32-byte hash")]
    assert parsed_findings(dict(obj, consistency="AAAA")) == [("proof", '"consistency" is missing or not a list')]


# -- checking a proof between two notes ------------------------------------------------------------------------


def check_of(old: str, new: str, obj: object) -> tuple[bool, str | None, int | None, int | None, list[tuple[str, str]]]:
    c = verify_consistency_proof(old, new, json.dumps(obj), PUBKEY)
    return c.ok, c.origin, c.old_size, c.new_size, [(p.kind, p.message) for p in c.problems]


NO_NOTE = "the note has no blank line before its signature lines"


def test_the_honest_check_and_its_report() -> None:
    c = verify_consistency_proof(note(3), NOTE_5, json.dumps(proof_obj()), PUBKEY)
    assert c.ok and c.summary() == f"OK: the tree of 5 entries of {ORIGIN} extends the tree of 3 entries"
    assert c.to_json() == {"ok": True, "origin": ORIGIN, "tree_size": 5, "old_size": 3, "new_size": 5,
                           "problems": []}
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.ok = False  # type: ignore[misc]
    for old, new in ((1, 1), (1, 5), (5, 5), (4, 5)):
        assert check_of(note(old), note(new), proof_obj(old, new))[0] is True


def test_an_old_note_that_does_not_parse() -> None:
    obj = proof_obj(origin="example.com/x")  # the proof names another log
    assert check_of("garbage", NOTE_5, obj) == (False, ORIGIN, 3, 5, [
        ("note", f"old checkpoint: {NO_NOTE}"),
        ("proof", f"the proof is of 'example.com/x', the new checkpoint of {ORIGIN!r}")])


def test_a_new_note_that_does_not_parse() -> None:
    obj = proof_obj(origin="example.com/x")
    assert check_of(note(3), "garbage", obj) == (False, ORIGIN, 3, 5, [
        ("note", f"new checkpoint: {NO_NOTE}"),
        ("proof", f"the proof is of 'example.com/x', the old checkpoint of {ORIGIN!r}")])


def test_neither_note_parses() -> None:
    assert check_of("garbage", "garbage", proof_obj(origin="example.com/x")) == (
        False, "example.com/x", 3, 5, [("note", f"old checkpoint: {NO_NOTE}"), ("note", f"new checkpoint: {NO_NOTE}")])
    assert check_of("garbage", "garbage", []) == (False, None, None, None, [
        ("note", f"old checkpoint: {NO_NOTE}"), ("note", f"new checkpoint: {NO_NOTE}"),
        ("proof", "the consistency proof is not a JSON object")])


def test_the_proof_of_another_pair_of_sizes_is_refused_on_each_side() -> None:
    assert check_of(note(3), NOTE_5, proof_obj(3, 4))[4] == [
        ("proof", "the proof's new_size 4 is not the new checkpoint's 5")]
    assert check_of(note(2), NOTE_5, proof_obj(3, 5))[4] == [
        ("proof", "the proof's old_size 3 is not the old checkpoint's 2")]
    assert check_of(note(3), note(4), proof_obj(3, 5))[4] == [
        ("proof", "the proof's new_size 5 is not the new checkpoint's 4")]
    swapped = dict(proof_obj(), old_root=b64(LEAVES.root(2)))
    assert check_of(note(3), NOTE_5, swapped)[4] == [
        ("proof", "the proof's old_root is not the old checkpoint's root"),
        ("consistency", "the proof from size 3 to 5 does not verify")]


def test_equal_sizes_are_consistent_and_an_older_note_above_the_newer_is_not() -> None:
    assert check_of(NOTE_5, NOTE_5, proof_obj(5, 5)) == (True, ORIGIN, 5, 5, [])
    assert check_of(NOTE_5, note(4), proof_obj(4, 5))[4] == [
        ("size", "the old checkpoint's size 5 is above the new one's 4"),
        ("proof", "the proof's old_size 4 is not the old checkpoint's 5"),
        ("proof", "the proof's new_size 5 is not the new checkpoint's 4")]


# -- the cache prover -------------------------------------------------------------------------------------------

N = 40
TRUE_LEAVES = [leaf_hash(b"entry %d" % i) for i in range(N)]
TRUTH = HashList(TRUE_LEAVES)


def prover(forged: int | None = None) -> CacheProver:
    leaves = list(TRUE_LEAVES)
    if forged is not None:
        leaves[forged] = leaf_hash(b"forged")
    return CacheProver(HashList(leaves), TreeHead(N, TRUTH.root()))


def test_the_prover_at_the_sizes_and_indexes_of_its_bounds() -> None:
    p = prover()
    for size in (1, 2, 16, 17, N - 1, N):
        assert p.root_at(size) == TRUTH.root(size)
        for index in (0, size - 1):
            inc = p.inclusion(index, b"entry %d" % index, size)
            assert (inc.index, inc.size, inc.root, inc.path) == (
                index, size, TRUTH.root(size), tuple(TRUTH.inclusion_path(index, size)))
        for old in (1, size):
            c = p.consistency(old, size)
            assert (c.old_size, c.new_size, c.old_root, c.new_root, c.proof) == (
                old, size, TRUTH.root(old), TRUTH.root(size), tuple(TRUTH.consistency_proof(old, size)))
    assert p.inclusion(N - 1, b"entry %d" % (N - 1)).size == N  # the head's size by default
    assert p.consistency(7).new_size == N
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.inclusion(0, b"entry 0").index = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.consistency(1).old_size = 2  # type: ignore[misc]


@pytest.mark.parametrize("size", [0, -1, N + 1, True, "3", 3.0])
def test_the_prover_refuses_a_size_outside_the_tree(size: object) -> None:
    p = prover()
    for call, what in ((lambda: p.root_at(size), "size"), (lambda: p.inclusion(0, b"entry 0", size), "size"),
                       (lambda: p.consistency(1, size), "new size"), (lambda: p.consistency(size, N), "old size")):
        with pytest.raises(UsageError) as info:
            call()  # type: ignore[no-untyped-call]
        assert str(info.value) == f"{what} {size!r} is not between 1 and the tree size {N}"


@pytest.mark.parametrize(("index", "size"), [(-1, N), (N, N), (5, 5), (1, 1), ("0", N)])
def test_the_prover_refuses_an_index_outside_the_tree(index: object, size: int) -> None:
    with pytest.raises(UsageError) as info:
        prover().inclusion(index, b"entry 0", size)  # type: ignore[arg-type]
    assert str(info.value) == f"seq {index!r} is not in the tree of {size} entries"


def test_the_prover_refuses_an_old_size_above_the_new() -> None:
    with pytest.raises(UsageError) as info:
        prover().consistency(6, 5)
    assert str(info.value) == "old size 6 is above the new size 5"


def test_a_cache_of_exactly_the_heads_leaves_or_more_is_used() -> None:
    head = TreeHead(N - 1, TRUTH.root(N - 1))
    assert CacheProver(TRUTH, head).root_at(N - 1) == TRUTH.root(N - 1)  # more leaves than the head: fine
    cr = CompactRange()
    cr.extend(TRUE_LEAVES)
    assert CacheProver(TRUTH, cr).head == (N, TRUTH.root())
    with pytest.raises(StaleCache) as info:
        CacheProver(HashList(TRUE_LEAVES[:-1]), cr)
    assert str(info.value) == f"the cache holds {N - 1} leaves, the log {N}"


@pytest.mark.parametrize("forged", [0, 15, 16, N - 1])
def test_a_forged_leaf_is_caught_at_every_size(forged: int) -> None:
    """Below the forged leaf the cached root is right, but its proof up to the head runs through the forged
    leaf: no root other than the head's own is handed out from a cache that differs anywhere."""
    p = prover(forged)
    for size in range(1, N):
        with pytest.raises(StaleCache) as info:
            p.root_at(size)
        assert str(info.value) == f"the cached root at size {size} is not consistent with the log's head"
    assert p.root_at(N) == TRUTH.root()  # the head's own root is the log's
    # the forged leaf's own path is made of its siblings, which are right; its neighbour's runs through it
    assert p.inclusion(forged, b"entry %d" % forged).path == tuple(TRUTH.inclusion_path(forged, N))
    with pytest.raises(StaleCache) as info:
        p.inclusion(forged ^ 1, b"entry %d" % (forged ^ 1))
    assert str(info.value) == f"the cached path of leaf {forged ^ 1} does not lead to the log's root"
    old = forged + 1 if forged + 1 < N else 1
    with pytest.raises(StaleCache) as info:
        p.consistency(old)
    assert str(info.value) == f"the cached proof from size {old} to {N} does not verify"


def test_the_provers_proofs_are_values_that_cannot_be_changed() -> None:
    """An inclusion or consistency proof handed out stays what the prover made: assigning to it raises,
    and the same question gives an equal proof."""
    import dataclasses

    p = prover()
    inclusion = p.inclusion(3, b"entry 3", N)
    consistency = p.consistency(3, N)
    for value, field in ((inclusion, "root"), (consistency, "proof")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)
    assert p.inclusion(3, b"entry 3", N) == inclusion and p.consistency(3, N) == consistency
