"""Inclusion bundles cut, reordered and forged line by line, in the text form and the JSON form: each
asserts the exact findings, and the honest bundle beside it verifies."""

from __future__ import annotations

import base64
import json

import pytest
from helpers.transparency_vectors import BUNDLE_1, ENTRIES, NOTE_5, ORIGIN, PUBKEY, SEED

from mnemo.chain.tree import HashList, leaf_hash
from mnemo.transparency.bundle import NotABundle, build_bundle, bundle_json, verify_bundle
from mnemo.transparency.note import sign_checkpoint_note

LEAVES = HashList([leaf_hash(e) for e in ENTRIES])
HEADER = "c2sp.org/tlog-proof@v1"
PROOF_LINES = BUNDLE_1.split("\n\n")[0].split("\n")  # header, extra, index, three hashes
HASHES = PROOF_LINES[3:]
PATH_FAILS = ("path", "the inclusion path (3 hashes) does not lead from the entry at index 1 to the root of the "
                      "tree of 5 entries")


def findings(text: str | bytes, origin: str | None = None) -> list[tuple[str, str]]:
    check = verify_bundle(text, PUBKEY, origin)
    assert check.ok == (not check.problems)
    return [(p.kind, p.message) for p in check.problems]


def text_of(lines: list[str], note: str = NOTE_5) -> str:
    return "\n".join(lines) + "\n\n" + note


def note(size: int) -> str:
    return sign_checkpoint_note(ORIGIN, size, LEAVES.root(size), SEED)


# -- the text form ------------------------------------------------------------------------------------------


def test_the_honest_bundle_and_its_parts() -> None:
    assert text_of(PROOF_LINES) == BUNDLE_1
    check = verify_bundle(BUNDLE_1, PUBKEY, ORIGIN)
    assert check.ok and (check.index, check.seq, check.tree_size, check.origin) == (1, 1, 5, ORIGIN)
    assert build_bundle(ENTRIES[1], 1, LEAVES.inclusion_path(1, 5), NOTE_5) == BUNDLE_1


def test_a_bundle_cut_after_its_proof_is_truncated() -> None:
    truncated = ("bundle", "no blank line and checkpoint after the proof: the bundle is truncated")
    assert findings("\n".join(PROOF_LINES) + "\n") == [truncated]
    assert findings("\n".join(PROOF_LINES)) == [truncated]
    # a blank line and nothing after it: the checkpoint is there, and empty
    assert findings("\n".join(PROOF_LINES) + "\n\n") == [
        ("note", "checkpoint: the note has no blank line before its signature lines")]


def test_a_bundle_of_nothing_but_its_checkpoint() -> None:
    assert findings(HEADER + "\n\n" + NOTE_5) == [
        ("bundle", "no extra line: a Mnemo bundle carries the entry's bytes"),
        ("bundle", "no index line after the extra line")]


def test_a_bundle_without_an_index_line() -> None:
    assert findings(text_of(PROOF_LINES[:2])) == [("bundle", "no index line after the extra line")]
    # the hashes are read as the path all the same, but with no index there is nothing to check them against
    assert findings(text_of([*PROOF_LINES[:2], *HASHES])) == [("bundle", "no index line after the extra line")]


def test_the_index_at_the_largest_and_one_past_it() -> None:
    largest = (1 << 63) - 1
    lines = [*PROOF_LINES[:2], f"index {largest}", *HASHES]
    assert findings(text_of(lines)) == [("entry", f"extra is the entry of seq 1, not of index {largest}"),
                                        ("index", f"index {largest} is not in the tree of 5 entries")]
    lines[2] = f"index {1 << 63}"
    assert findings(text_of(lines)) == [
        ("bundle", f"the index '{1 << 63}' is not a decimal number without leading zeros")]
    lines[2] = "index 4"
    assert findings(text_of(lines)) == [("entry", "extra is the entry of seq 1, not of index 4"),
                                        ("path", PATH_FAILS[1].replace("index 1", "index 4"))]


def test_each_bad_path_line_is_named_by_its_line() -> None:
    for at in (3, 4, 5):
        lines = list(PROOF_LINES)
        lines[at] = "not base64!"
        assert findings(text_of(lines)) == [("bundle", f"line {at + 1} of the inclusion path is not base64")]
        lines[at] = base64.b64encode(bytes(31)).decode()
        assert findings(text_of(lines)) == [
            ("bundle", f"line {at + 1} of the inclusion path is 31 bytes, not a 32-byte hash")]
    lines = [*PROOF_LINES[:3], "AAAA", "!", *HASHES]
    assert findings(text_of(lines)) == [("bundle", "line 4 of the inclusion path is 3 bytes, not a 32-byte hash"),
                                        ("bundle", "line 5 of the inclusion path is not base64")]


def test_a_hash_line_moved_or_swapped_is_refused() -> None:
    swapped = [*PROOF_LINES[:3], HASHES[1], HASHES[0], HASHES[2]]
    assert findings(text_of(swapped)) == [PATH_FAILS]
    assert findings(text_of([*PROOF_LINES[:3], *HASHES[:2]])) == [
        ("path", PATH_FAILS[1].replace("(3 hashes)", "(2 hashes)"))]
    assert findings(text_of([*PROOF_LINES[:3], *HASHES, HASHES[0]])) == [
        ("path", PATH_FAILS[1].replace("(3 hashes)", "(4 hashes)"))]
    # the index line before the extra line: no extra line, and the extra line where the path begins
    assert findings(text_of([HEADER, PROOF_LINES[2], PROOF_LINES[1], *HASHES])) == [
        ("bundle", "no extra line: a Mnemo bundle carries the entry's bytes"),
        ("bundle", "line 3 of the inclusion path is not base64")]


def test_the_first_entry_of_the_smallest_tree() -> None:
    text = build_bundle(ENTRIES[0], 0, [], note(1))
    assert text.split("\n\n")[0].split("\n") == [HEADER, "extra " + base64.b64encode(ENTRIES[0]).decode(), "index 0"]
    assert findings(text) == []
    assert findings(build_bundle(ENTRIES[0], 0, [LEAVES.leaf(1)], note(1))) == [
        ("path", "the inclusion path (1 hashes) does not lead from the entry at index 0 to the root of the tree "
                 "of 1 entries")]
    assert findings(build_bundle(ENTRIES[1], 1, [], note(1))) == [("index", "index 1 is not in the tree of 1 entries")]


# -- the JSON form -----------------------------------------------------------------------------------------


def obj(seq: int = 1, size: int = 5) -> dict[str, object]:
    return bundle_json(ENTRIES[seq], seq, LEAVES.inclusion_path(seq, size), note(size))


def jfindings(o: dict[str, object]) -> list[tuple[str, str]]:
    return findings(json.dumps(o))


def test_the_json_form_of_the_first_and_last_entries() -> None:
    for seq in (0, 4):
        assert jfindings(obj(seq)) == []
        assert verify_bundle(json.dumps(obj(seq)), PUBKEY).seq == seq
    assert jfindings(obj(0, 1)) == []
    assert verify_bundle("  " + json.dumps(obj()), PUBKEY).ok  # leading white space before the object


@pytest.mark.parametrize("index", [-1, True, 1 << 63, "1", 1.0, None])
def test_a_json_leaf_index_that_is_not_one(index: object) -> None:
    assert jfindings(dict(obj(), leaf_index=index)) == [
        ("bundle", '"leaf_index" is missing or not a non-negative integer')]


def test_the_json_leaf_index_at_the_largest() -> None:
    largest = (1 << 63) - 1
    assert jfindings(dict(obj(), leaf_index=largest)) == [
        ("entry", f"extra is the entry of seq 1, not of index {largest}"),
        ("index", f"index {largest} is not in the tree of 5 entries")]


def test_each_bad_json_hash_is_named_by_its_number() -> None:
    good = obj()["inclusion"]
    assert isinstance(good, list)
    for at in range(3):
        for bad, message in ((1, "is not base64"), (None, "is not base64"), ("!", "is not base64"),
                             ("AAAA", "is 3 bytes, not a 32-byte hash")):
            inclusion = [*good[:at], bad, *good[at + 1:]]
            assert jfindings(dict(obj(), inclusion=inclusion)) == [
                ("bundle", f"hash {at + 1} of the inclusion path {message}")]
    assert jfindings(dict(obj(), inclusion="AAAA")) == [("bundle", '"inclusion" is missing or not a list')]


def test_json_fields_missing_or_of_the_wrong_type() -> None:
    o = obj()
    assert jfindings({k: v for k, v in o.items() if k != "entry_b64"}) == [
        ("bundle", '"entry_b64" is missing or not base64')]
    assert jfindings(dict(o, entry_b64="!!")) == [("bundle", '"entry_b64" is missing or not base64')]
    assert jfindings(dict(o, entry_b64=5)) == [("bundle", '"entry_b64" is missing or not base64')]
    assert jfindings(dict(o, checkpoint=5)) == [
        ("bundle", '"checkpoint" is missing or not text'),  # and with no checkpoint, no claim holds
        ("bundle", f'"origin" is {ORIGIN!r}, but the checkpoint says otherwise'),
        ("bundle", '"tree_size" is 5, but the checkpoint says otherwise')]
    assert jfindings(dict(o, origin="example.com/x")) == [
        ("bundle", "\"origin\" is 'example.com/x', but the checkpoint says otherwise")]
    # the claims are optional; without them nothing is compared
    assert jfindings({k: v for k, v in o.items() if k not in ("origin", "tree_size")}) == []
    with pytest.raises(NotABundle) as info:
        verify_bundle(json.dumps([o]), PUBKEY)
    assert str(info.value) == f"the first line is not {HEADER}"  # JSON, but not an object
    with pytest.raises(NotABundle) as info:
        verify_bundle("{" + json.dumps(o), PUBKEY)
    assert str(info.value) == "the bundle is neither c2sp.org/tlog-proof@v1 text nor JSON"


def test_a_bundle_that_is_not_text() -> None:
    with pytest.raises(NotABundle) as info:
        verify_bundle(b"c2sp.org/tlog-proof@v1\n\xff", PUBKEY)
    assert str(info.value) == "the bundle is not UTF-8"
    assert verify_bundle(bytearray(BUNDLE_1.encode()), PUBKEY).ok
    with pytest.raises(NotABundle) as info:
        verify_bundle(HEADER, PUBKEY)  # the first line without its newline
    assert str(info.value) == f"the first line is not {HEADER}"
