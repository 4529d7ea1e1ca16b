"""Inclusion bundles (c2sp.org/tlog-proof@v1) and consistency JSON: the §8 vectors byte for byte, their
verification, and every tampering refused with the finding that names it."""

from __future__ import annotations

import base64
import json
import re

import pytest
from helpers.transparency_vectors import BUNDLE_1, CONSISTENCY_3_5_DISPLAY, ENTRIES, NOTE_5, ORIGIN, PUBKEY, SEED, VKEY

from mnemo.audit import load_private_key, public_key_bytes
from mnemo.chain.tree import HashList, leaf_hash
from mnemo.transparency.bundle import NotABundle, build_bundle, bundle_json, verify_bundle
from mnemo.transparency.consistency import NotJSON, parse_consistency, verify_consistency_proof
from mnemo.transparency.keys import key_id
from mnemo.transparency.note import sign_checkpoint_note

LEAVES = HashList([leaf_hash(e) for e in ENTRIES])
OTHER = b"\x07" * 32
OTHER_PUB = public_key_bytes(load_private_key(OTHER))
OK_LINE = (f"OK: seq 1 (put by agent-1, hash 879499c8fb8947a09b50e7ac102646702b8ee4a67e875ad3067c6b2ae4d5a414) "
           f"is in the tree of 5 entries of {ORIGIN}")


def note(size: int, key: bytes = SEED, origin: str = ORIGIN) -> str:
    return sign_checkpoint_note(origin, size, LEAVES.root(size), key)


def bundle(seq: int, size: int = 5, **kw: object) -> str:
    return build_bundle(ENTRIES[seq], seq, LEAVES.inclusion_path(seq, size), note(size, **kw))  # type: ignore[arg-type]


def findings(text: str | bytes, key: object = PUBKEY, origin: str | None = None) -> list[tuple[str, str]]:
    check = verify_bundle(text, key, origin)  # type: ignore[arg-type]
    assert check.ok == (not check.problems)
    return [(p.kind, p.message) for p in check.problems]


def test_the_seq_1_bundle_byte_for_byte() -> None:
    assert bundle(1) == BUNDLE_1
    check = verify_bundle(BUNDLE_1, PUBKEY, ORIGIN)
    assert check.ok and check.summary() == OK_LINE
    assert (check.seq, check.op, check.agent, check.tree_size, check.origin) == (1, "put", "agent-1", 5, ORIGIN)
    assert verify_bundle(BUNDLE_1.encode(), VKEY).ok


@pytest.mark.parametrize("size", range(1, 6))
def test_every_entry_at_every_size_verifies(size: int) -> None:
    for seq in range(size):
        text = bundle(seq, size)
        assert text.count("\n\n") == 2  # proof | note text | signatures
        assert len(text.split("\n\n")[0].split("\n")) == 3 + len(LEAVES.inclusion_path(seq, size))
        assert findings(text, origin=ORIGIN) == []


def test_the_json_form() -> None:
    obj = bundle_json(ENTRIES[1], 1, LEAVES.inclusion_path(1, 5), NOTE_5)
    assert list(obj) == ["origin", "tree_size", "leaf_index", "entry_b64", "inclusion", "checkpoint"]
    assert obj["origin"] == ORIGIN and obj["tree_size"] == 5 and obj["leaf_index"] == 1
    assert base64.b64decode(obj["entry_b64"]) == ENTRIES[1] and obj["checkpoint"] == NOTE_5
    assert obj["inclusion"] == BUNDLE_1.split("\n\n")[0].split("\n")[3:]
    assert verify_bundle(json.dumps(obj), PUBKEY).summary() == OK_LINE
    obj["tree_size"] = 4
    assert findings(json.dumps(obj)) == [("bundle", "\"tree_size\" is 4, but the checkpoint says otherwise")]
    obj["tree_size"], obj["inclusion"] = 5, obj["inclusion"][:2]
    assert [k for k, _ in findings(json.dumps(obj))] == ["path"]
    with pytest.raises(NotABundle):
        verify_bundle("[1, 2]", PUBKEY)
    with pytest.raises(NotABundle):
        verify_bundle("{not json", PUBKEY)
    with pytest.raises(NotABundle):  # nested deeper than the parser reaches: no RecursionError
        verify_bundle('{"a":' * 100_000 + "1" + "}" * 100_000, PUBKEY)


# -- the attacker ----------------------------------------------------------------------------------------

PROOF_LINES = BUNDLE_1.split("\n\n")[0].split("\n")


def with_lines(lines: list[str], rest: str = NOTE_5) -> str:
    return "\n".join(lines) + "\n\n" + rest


def test_every_flipped_path_hash_is_refused() -> None:
    for i in range(3, len(PROOF_LINES)):
        raw = base64.b64decode(PROOF_LINES[i])
        for bit in (0, 77, 255):
            bad = bytearray(raw)
            bad[bit // 8] ^= 1 << (bit % 8)
            lines = [*PROOF_LINES[:i], base64.b64encode(bytes(bad)).decode(), *PROOF_LINES[i + 1:]]
            assert findings(with_lines(lines)) == [
                ("path", "the inclusion path (3 hashes) does not lead from the entry at index 1 to the root of "
                         "the tree of 5 entries")]


def test_a_path_with_a_hash_missing_or_added_is_refused() -> None:
    assert [k for k, _ in findings(with_lines(PROOF_LINES[:-1]))] == ["path"]
    assert [k for k, _ in findings(with_lines([*PROOF_LINES, PROOF_LINES[-1]]))] == ["path"]


def test_the_wrong_index_is_refused() -> None:
    lines = [PROOF_LINES[0], PROOF_LINES[1], "index 2", *PROOF_LINES[3:]]
    assert findings(with_lines(lines)) == [
        ("entry", "extra is the entry of seq 1, not of index 2"),
        ("path", "the inclusion path (3 hashes) does not lead from the entry at index 2 to the root of the "
                 "tree of 5 entries")]
    lines[2] = "index 5"
    assert findings(with_lines(lines)) == [("entry", "extra is the entry of seq 1, not of index 5"),
                                           ("index", "index 5 is not in the tree of 5 entries")]
    lines[2] = "index 01"
    assert findings(with_lines(lines)) == [("bundle", "the index '01' is not a decimal number without leading zeros")]


def test_another_entry_or_a_changed_entry_is_refused() -> None:
    lines = list(PROOF_LINES)
    lines[1] = "extra " + base64.b64encode(ENTRIES[2]).decode()  # the grant, claimed at index 1
    assert findings(with_lines(lines)) == [
        ("entry", "extra is the entry of seq 2, not of index 1"),
        ("path", "the inclusion path (3 hashes) does not lead from the entry at index 1 to the root of the "
                 "tree of 5 entries")]
    changed = bytearray(ENTRIES[1])
    changed[-1] ^= 1  # ver 1 -> 0: still an entry of seq 1, but not the logged one
    lines[1] = "extra " + base64.b64encode(bytes(changed)).decode()
    assert [k for k, _ in findings(with_lines(lines))] == ["path"]
    lines[1] = "extra " + base64.b64encode(b"\x93\x01\x02\x03").decode()
    found = findings(with_lines(lines))
    assert found[0] == ("entry", "extra is not a Mnemo entry: entry is not an array of 7 items")
    lines[1] = "extra !!!"
    assert findings(with_lines(lines)) == [("bundle", "the extra line is not base64")]


def test_a_bundle_without_extra_is_refused() -> None:
    assert findings(with_lines([PROOF_LINES[0], *PROOF_LINES[2:]])) == [
        ("bundle", "no extra line: a Mnemo bundle carries the entry's bytes")]


def test_a_bad_hash_line_is_refused() -> None:
    for bad, message in (("AAAA", "line 4 of the inclusion path is 3 bytes, not a 32-byte hash"),
                         ("not base64!", "line 4 of the inclusion path is not base64")):
        assert findings(with_lines([*PROOF_LINES[:3], bad, *PROOF_LINES[4:]])) == [("bundle", message)]


def test_the_wrong_key_or_origin_is_refused() -> None:
    other_id = key_id(ORIGIN, OTHER_PUB).hex()
    assert findings(BUNDLE_1, OTHER_PUB) == [
        ("signature", f"checkpoint: no signature line of the given key (name '{ORIGIN}', key ID {other_id})")]
    assert findings(bundle(1, key=OTHER))[0][0] == "signature"
    assert findings(BUNDLE_1, origin="example.com/other") == [
        ("origin", f"checkpoint: the checkpoint's origin is '{ORIGIN}', not 'example.com/other'")]


def test_an_altered_or_resigned_note_is_refused() -> None:
    head, text, sig = BUNDLE_1.split("\n\n")
    for altered in (text.replace("\n5\n", "\n4\n"), text.replace("Fi3e", "Fi3f")):
        assert [k for k, _ in findings(head + "\n\n" + altered + "\n\n" + sig)] == ["signature", "path"]
    # a correctly signed note of another size: the path does not lead to its root
    assert [k for k, _ in findings(with_lines(PROOF_LINES, note(4)))] == ["path"]
    assert [k for k, _ in findings(with_lines(PROOF_LINES, note(3)))] == ["path"]


def test_duplicated_or_missing_signature_lines_are_refused() -> None:
    sig = BUNDLE_1.split("\n\n")[2]
    assert findings(BUNDLE_1 + sig) == [("signature", "checkpoint: 2 signature lines of the given key "
                                                      "(key ID 053b8902): a log signs a checkpoint once")]
    cut = BUNDLE_1[: -len(sig)]
    assert findings(cut) == [("note", "checkpoint: the note has no signature lines")]


def test_every_truncation_is_refused() -> None:
    header = "c2sp.org/tlog-proof@v1\n"
    for n in range(len(BUNDLE_1)):
        cut = BUNDLE_1[:n]
        if not cut.startswith(header):
            with pytest.raises(NotABundle):
                verify_bundle(cut, PUBKEY)
            continue
        check = verify_bundle(cut, PUBKEY)
        assert not check.ok and check.problems, n


def test_not_a_bundle() -> None:
    for text, message in ((b"\xff\xfe", "not UTF-8"), ("", "first line"), ("c2sp.org/tlog-proof@v2\n", "first line"),
                          ("C2SP.ORG/TLOG-PROOF@V1\n", "first line")):
        with pytest.raises(NotABundle, match=message):
            verify_bundle(text, PUBKEY)


# -- consistency JSON -------------------------------------------------------------------------------------


def consistency_text(old: int, new: int) -> str:
    from mnemo.transparency.consistency import ConsistencyProof

    return ConsistencyProof(ORIGIN, old, new, LEAVES.root(old), LEAVES.root(new),
                            tuple(LEAVES.consistency_proof(old, new))).to_text()


def test_the_3_to_5_consistency_json() -> None:
    text = consistency_text(3, 5)
    assert text == re.sub(r"\n +", " ", CONSISTENCY_3_5_DISPLAY) + "\n"  # §8's object, on one line
    assert json.loads(text) == json.loads(CONSISTENCY_3_5_DISPLAY)
    assert list(json.loads(text)) == ["origin", "old_size", "new_size", "old_root", "new_root", "consistency"]
    check = verify_consistency_proof(note(3), NOTE_5, text, PUBKEY, ORIGIN)
    assert check.ok and check.summary() == f"OK: the tree of 5 entries of {ORIGIN} extends the tree of 3 entries"
    assert verify_consistency_proof(note(3), NOTE_5, CONSISTENCY_3_5_DISPLAY, VKEY).ok  # any JSON layout


@pytest.mark.parametrize(("old", "new"), [(1, 1), (1, 5), (2, 5), (4, 5), (5, 5), (2, 3)])
def test_consistency_between_any_two_sizes(old: int, new: int) -> None:
    text = consistency_text(old, new)
    assert (json.loads(text)["consistency"] == []) == (old == new)
    assert verify_consistency_proof(note(old), note(new), text, PUBKEY).ok


def cfindings(old: str, new: str, proof: str | dict[str, object], key: bytes = PUBKEY) -> list[tuple[str, str]]:
    text = proof if isinstance(proof, str) else json.dumps(proof)
    check = verify_consistency_proof(old, new, text, key)
    assert check.ok == (not check.problems)
    return [(p.kind, p.message) for p in check.problems]


def test_every_flipped_consistency_hash_is_refused() -> None:
    obj = json.loads(consistency_text(3, 5))
    for i, h in enumerate(obj["consistency"]):
        raw = bytearray(base64.b64decode(h))
        raw[i] ^= 0x10
        bad = dict(obj, consistency=[*obj["consistency"][:i], base64.b64encode(bytes(raw)).decode(),
                                     *obj["consistency"][i + 1:]])
        assert cfindings(note(3), NOTE_5, bad) == [("consistency", "the proof from size 3 to 5 does not verify")]
    assert cfindings(note(3), NOTE_5, dict(obj, consistency=obj["consistency"][:-1])) == [
        ("consistency", "the proof from size 3 to 5 does not verify")]


def test_a_proof_that_does_not_match_the_notes_is_refused() -> None:
    obj = json.loads(consistency_text(3, 5))
    assert ("proof", "the proof's old_size 2 is not the old checkpoint's 3") in cfindings(
        note(3), NOTE_5, dict(obj, old_size=2))
    assert cfindings(note(3), NOTE_5, dict(obj, new_root=obj["old_root"])) == [
        ("proof", "the proof's new_root is not the new checkpoint's root"),
        ("consistency", "the proof from size 3 to 5 does not verify")]
    assert ("proof", f"the proof is of 'example.com/x', the old checkpoint of '{ORIGIN}'") in cfindings(
        note(3), NOTE_5, dict(obj, origin="example.com/x"))
    # the notes the wrong way round
    assert ("size", "the old checkpoint's size 5 is above the new one's 3") in cfindings(
        NOTE_5, note(3), consistency_text(3, 5))
    # notes of two origins, or by another key
    found = cfindings(note(3, origin="example.com/x"), NOTE_5, obj)
    assert ("origin", f"the old checkpoint is of 'example.com/x', the new one of '{ORIGIN}'") in found
    assert [k for k, _ in cfindings(note(3, key=OTHER), NOTE_5, obj)] == ["signature"]


def test_malformed_consistency_json() -> None:
    with pytest.raises(NotJSON):
        verify_consistency_proof(note(3), NOTE_5, "not json", PUBKEY)
    with pytest.raises(NotJSON):
        verify_consistency_proof(note(3), NOTE_5, b"\xff", PUBKEY)
    with pytest.raises(NotJSON):  # nested deeper than the parser reaches: no RecursionError
        verify_consistency_proof(note(3), NOTE_5, "[" * 100_000 + "]" * 100_000, PUBKEY)
    assert cfindings(note(3), NOTE_5, "[]") == [("proof", "the consistency proof is not a JSON object")]
    assert cfindings(note(3), NOTE_5, "{}") == [
        ("proof", '"origin" is missing or not text'),
        ("proof", '"old_size" is missing or not a positive integer'),
        ("proof", '"new_size" is missing or not a positive integer'),
        ("proof", '"old_root" is missing or not base64'),
        ("proof", '"new_root" is missing or not base64'),
        ("proof", '"consistency" is missing or not a list')]
    obj = json.loads(consistency_text(3, 5))
    assert cfindings(note(3), NOTE_5, dict(obj, old_size=True)) == [
        ("proof", '"old_size" is missing or not a positive integer')]
    assert cfindings(note(3), NOTE_5, dict(obj, consistency=["AAAA"])) == [
        ("proof", "hash 1 of the proof is 3 bytes, not a 32-byte hash")]
    proof, found = parse_consistency(json.dumps(dict(obj, extra_key=1)))  # unknown keys are ignored
    assert proof is not None and found == ()


def test_a_bundle_check_is_a_value_that_cannot_be_changed() -> None:
    """A verdict handed to a caller stays what the verifier found: assigning to it raises."""
    import dataclasses

    check = verify_bundle(BUNDLE_1, PUBKEY)
    assert check.ok
    with pytest.raises(dataclasses.FrozenInstanceError):
        check.ok = False  # type: ignore[misc]
    assert verify_bundle(BUNDLE_1, PUBKEY) == check


def test_proofs_and_verdicts_are_values_that_cannot_be_changed() -> None:
    """A parsed consistency proof, its verdict and a checkpoint's verdict stay what was read and found:
    assigning to them raises."""
    import dataclasses

    from mnemo.transparency.note import verify_checkpoint_note

    text = consistency_text(3, 5)
    proof, found = parse_consistency(text)
    assert proof is not None and found == ()
    check = verify_consistency_proof(note(3), NOTE_5, text, PUBKEY, ORIGIN)
    noted = verify_checkpoint_note(NOTE_5, PUBKEY)
    assert check.ok and noted.ok
    for value, field in ((proof, "old_size"), (check, "ok"), (noted, "ok")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)
    assert parse_consistency(text)[0] == proof
