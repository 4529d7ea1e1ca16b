"""Checkpoint notes and note keys at their limits, played by an attacker: a note of exactly the largest size
and one byte more, characters at the edges of what a note may hold, the tree size at 2**63 - 1 and 2**63,
each malformed signature line named by its number, vkeys changed one part at a time, and key files at
the edge of what is read. Each refusal is asserted exactly; each honest input verifies."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest
from helpers.transparency_vectors import ENTRIES, KEY_ID, NOTE_5, ORIGIN, PUBKEY, SEED, VKEY

from mnemo.audit import KeyFileError, load_private_key, public_key_bytes
from mnemo.errors import InvalidInput
from mnemo.transparency.keys import (
    SIG_COSIGNATURE,
    SIG_ED25519,
    VerifierKey,
    key_id,
    load_signing_key,
    load_verifier_key,
    parse_vkey,
    valid_key_name,
    vkey,
)
from mnemo.transparency.note import (
    MalformedNote,
    Note,
    check_origin,
    parse_checkpoint,
    parse_checkpoint_text,
    parse_note,
    sign_checkpoint_note,
    sign_note_text,
    verify_checkpoint_note,
)
from mnemo.transparency.tree import HashList, leaf_hash

ROOT5 = HashList([leaf_hash(e) for e in ENTRIES]).root(5)
TEXT = NOTE_5.split("\n\n")[0] + "\n"
SIG_LINE = NOTE_5.split("\n\n")[1]
OTHER_PUB = public_key_bytes(load_private_key(b"\x07" * 32))
LIMIT = 1 << 20


def signed(text: str, key: bytes = SEED, name: str = ORIGIN) -> str:
    return str(Note(text, (sign_note_text(text, name, key),)))


def findings(note: str | bytes, key: object = PUBKEY, origin: str | None = ORIGIN) -> list[tuple[str, str]]:
    check = verify_checkpoint_note(note, key, origin)  # type: ignore[arg-type]
    assert check.ok == (not check.problems)
    return [(p.kind, p.message) for p in check.problems]


# -- the size of a note ---------------------------------------------------------------------------------------


def padded_note(total: int) -> str:
    """A note signed by the log's key, with one extension line making it exactly `total` bytes."""
    bare = signed(TEXT + "x\n")
    text = TEXT + "x" * (total - len(bare.encode()) + 1) + "\n"
    note = signed(text)
    assert len(note.encode()) == total
    return note


def test_a_note_of_the_largest_size_verifies_and_one_byte_more_is_refused() -> None:
    # as bytes the limit counts bytes; as text it counts characters (the em dash is 3 bytes, 1 character)
    at_bytes, at_chars = padded_note(LIMIT), padded_note(LIMIT + 2)
    assert len(at_chars) == LIMIT
    assert findings(at_bytes.encode()) == [] and findings(at_chars) == []
    for data in (padded_note(LIMIT + 1).encode(), padded_note(LIMIT + 3)):
        assert findings(data) == [("note", f"the note is larger than {LIMIT} bytes")]
        with pytest.raises(MalformedNote) as info:
            parse_note(data)
        assert info.value.exit_code == 1  # a defect inside a readable input


def test_a_note_must_be_text() -> None:
    for bad in (5, None, ["a note"]):
        with pytest.raises(InvalidInput) as info:
            parse_note(bad)  # type: ignore[arg-type]
        assert str(info.value) == "a note is text"


# -- the characters a note may hold ----------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["\ud7ff", "\ue000", "\u007f", " ", "\u2014"])
def test_characters_at_the_edge_of_the_allowed_are_signed_and_verified(char: str) -> None:
    text = TEXT + f"ext{char}line\n"
    check = verify_checkpoint_note(signed(text), PUBKEY, ORIGIN)
    assert check.ok and check.checkpoint is not None and check.checkpoint.extensions == (f"ext{char}line",)


@pytest.mark.parametrize(("char", "code"), [("\ud800", "D800"), ("\udfff", "DFFF"), ("\x1f", "001F"),
                                            ("\x00", "0000"), ("\r", "000D")])
def test_a_surrogate_or_control_character_is_refused(char: str, code: str) -> None:
    note = TEXT + f"ext{char}line\n" + "\n" + SIG_LINE
    assert findings(note) == [("note", f"the note holds the control character U+{code}")]


# -- the checkpoint text -----------------------------------------------------------------------------------------


def test_an_empty_line_inside_the_checkpoint_is_named() -> None:
    lines = TEXT.split("\n")
    for at in (1, 2, 3):
        text = "\n".join([*lines[:at], "", *lines[at:]])
        assert findings(text + "\n" + SIG_LINE, origin=None) == [
            ("note", f"line {at + 1} of the checkpoint is empty")]


def test_the_tree_size_at_the_largest_and_one_past_it() -> None:
    largest = parse_checkpoint_text(f"{ORIGIN}\n{(1 << 63) - 1}\n{base64.b64encode(ROOT5).decode()}\n")
    assert largest.size == (1 << 63) - 1
    note = sign_checkpoint_note(ORIGIN, (1 << 63) - 1, ROOT5, SEED)
    assert findings(note) == [] and parse_checkpoint(note)[0].size == (1 << 63) - 1
    for past in (1 << 63, 99999999999999999999):
        with pytest.raises(MalformedNote) as info:
            parse_checkpoint_text(f"{ORIGIN}\n{past}\n{base64.b64encode(ROOT5).decode()}\n")
        assert str(info.value) == f"the tree size '{past}' is not a decimal number without leading zeros"
    assert parse_checkpoint_text(f"{ORIGIN}\n0\n{base64.b64encode(ROOT5).decode()}\n").size == 0


def test_checkpoint_text_without_its_last_newline_is_refused() -> None:
    text = f"{ORIGIN}\n5\n{base64.b64encode(ROOT5).decode()}\n"
    assert parse_checkpoint_text(text).size == 5
    with pytest.raises(MalformedNote) as info:
        parse_checkpoint_text(text[:-1])
    assert str(info.value) == "the checkpoint text does not end in a newline"


@pytest.mark.parametrize("size", [0, -1, True, 1 << 63, 5.0, "5"])
def test_signing_refuses_a_size_no_checkpoint_names(size: object) -> None:
    with pytest.raises(InvalidInput) as info:
        sign_checkpoint_note(ORIGIN, size, ROOT5, SEED)  # type: ignore[arg-type]
    assert str(info.value) == f"tree size {size!r} must be at least 1: no Mnemo tree is empty"


def test_signing_a_size_of_one_and_checking_the_origin() -> None:
    assert findings(sign_checkpoint_note(ORIGIN, 1, ROOT5, SEED)) == []
    assert check_origin("example.com/log") == "example.com/log"
    for bad in (None, 5, "", "a b", "a+b"):
        with pytest.raises(InvalidInput) as info:
            check_origin(bad)
        assert str(info.value) == f"origin {bad!r} must be non-empty, without spaces, '+' or control characters"


# -- signature lines, each defect named by its line number ---------------------------------------------------


@pytest.mark.parametrize(("line", "message"), [
    ("- x AAAAAAA=", "signature line 2 does not start with an em dash and a space"),
    ("\u2014 a+b AAAAAAA=", "signature line 2 has no valid key name"),
    ("\u2014 nameonly", "signature line 2 has no valid key name"),
    ("\u2014 x AAAAAAA", "signature line 2: the signature is not base64"),
    ("\u2014 x AAAAAA==", "signature line 2: the signature is shorter than a key ID and one byte"),
])
def test_a_bad_second_signature_line_is_named(line: str, message: str) -> None:
    note = NOTE_5 + line + "\n"
    assert findings(note) == [("note", message)]


def test_a_signature_of_a_key_id_and_one_byte_is_well_formed() -> None:
    five = "\u2014 example.com/w " + base64.b64encode(b"\x00\x01\x02\x03\x04").decode() + "\n"
    note = parse_note(NOTE_5 + five)
    assert [(s.name, s.key_id, s.signature) for s in note.signatures][1:] == [
        ("example.com/w", b"\x00\x01\x02\x03", b"\x04")]
    assert findings(NOTE_5 + five) == []  # another key's line: ignored
    four = "\u2014 example.com/w " + base64.b64encode(b"\x00\x01\x02\x03").decode() + "\n"
    assert findings(NOTE_5 + four) == [
        ("note", "signature line 2: the signature is shorter than a key ID and one byte")]


@pytest.mark.parametrize("length", [63, 65, 1])
def test_a_log_signature_of_the_wrong_length_does_not_verify(length: int) -> None:
    blob = base64.b64decode(SIG_LINE.split(" ")[2])
    sig = (blob[4:] + b"\x00")[:length]
    line = f"\u2014 {ORIGIN} {base64.b64encode(blob[:4] + sig).decode()}\n"
    assert findings(TEXT + "\n" + line) == [
        ("signature", f"the signature of the given key (key ID {KEY_ID}) does not verify over the note text")]


# -- what a check reports, as JSON; checks and checkpoints are values ---------------------------------------


def test_a_note_check_as_json() -> None:
    assert verify_checkpoint_note(NOTE_5, PUBKEY, ORIGIN).to_json() == {
        "ok": True, "origin": ORIGIN, "tree_size": 5, "root": base64.b64encode(ROOT5).decode(), "problems": []}
    assert verify_checkpoint_note("garbage", PUBKEY).to_json() == {
        "ok": False, "origin": None, "tree_size": None, "root": None,
        "problems": [{"kind": "note", "message": "the note has no blank line before its signature lines"}]}


def test_checks_and_checkpoints_cannot_be_altered() -> None:
    check = verify_checkpoint_note(NOTE_5, PUBKEY, ORIGIN)
    cp = check.checkpoint
    assert cp is not None and hash(cp) == hash(parse_checkpoint(NOTE_5)[0]) and hash(check) == hash(
        verify_checkpoint_note(NOTE_5, PUBKEY, ORIGIN))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cp.size = 6  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        check.ok = False  # type: ignore[misc]


# -- key names and vkeys ------------------------------------------------------------------------------------


def test_key_names() -> None:
    assert valid_key_name(ORIGIN) and valid_key_name("x") and valid_key_name("\u2014")
    assert all(valid_key_name(f"a{c}b") for c in "!\"#$%&'()*,-./:;<=>?@[\\]^_`{|}~")  # printable ASCII but +
    for bad in (None, 5, b"name", "", "a+b", "a b", "a\tb", "a\x1fb", "a\x7fb", "a\u00a0b", "a\nb"):
        assert valid_key_name(bad) is False, bad


def test_vkey_refuses_a_bad_name_or_key() -> None:
    for name in ("a b", "", "a+b"):
        with pytest.raises(InvalidInput) as info:
            vkey(name, PUBKEY)
        assert str(info.value) == f"{name!r} is not a valid key name (non-empty, no spaces, no '+')"
    for key in (PUBKEY[:31], PUBKEY + b"\x00", PUBKEY.hex(), bytearray(PUBKEY)):
        with pytest.raises(InvalidInput) as info:
            vkey(ORIGIN, key)  # type: ignore[arg-type]
        assert str(info.value) == "an Ed25519 public key is 32 bytes"
    assert VerifierKey(PUBKEY).vkey(ORIGIN) == VKEY == VerifierKey(PUBKEY, name=ORIGIN).vkey()


def vkey_parts() -> list[str]:
    return VKEY.split("+", 2)


def blob(sig_type: int, key: bytes = PUBKEY) -> str:
    return base64.b64encode(bytes([sig_type]) + key).decode()


@pytest.mark.parametrize(("text", "message"), [
    ("a+b", "not a vkey (<name>+<key ID>+<base64 key>)"),
    (f"{ORIGIN}+053b890+{blob(1)}", "not a vkey: the key ID is not 8 hex digits or the key is not base64"),
    (f"{ORIGIN}+053b890200+{blob(1)}", "not a vkey: the key ID is not 8 hex digits or the key is not base64"),
    (f"{ORIGIN}+053b890g+{blob(1)}", "not a vkey: the key ID is not 8 hex digits or the key is not base64"),
    (f"{ORIGIN}+053b8902+{blob(1)[:10]}!{blob(1)[10:]}",
     "not a vkey: the key ID is not 8 hex digits or the key is not base64"),
    (f"a b+053b8902+{blob(1)}", "not a vkey: 'a b' is not a valid key name"),
    (f"{ORIGIN}+053b8902+{blob(2)}", "the vkey is not an Ed25519 note key (type 0x01) or cosigner key (type 0x04)"),
    (f"{ORIGIN}+053b8902+{blob(1, PUBKEY[:31])}",
     "the vkey is not an Ed25519 note key (type 0x01) or cosigner key (type 0x04)"),
    (f"{ORIGIN}+053b8902+{blob(1, PUBKEY + b'x')}",
     "the vkey is not an Ed25519 note key (type 0x01) or cosigner key (type 0x04)"),
])
def test_a_vkey_changed_in_one_part_is_refused(text: str, message: str) -> None:
    with pytest.raises(KeyFileError) as info:
        parse_vkey(text)
    assert str(info.value) == message


def test_a_vkey_of_the_other_signature_type() -> None:
    witness = vkey("witness.example/w", OTHER_PUB, SIG_COSIGNATURE)
    assert parse_vkey(witness).sig_type == SIG_COSIGNATURE and parse_vkey(VKEY).sig_type == SIG_ED25519
    # asked for the type it is: the type byte is the first, whatever the key's bytes end in
    assert parse_vkey(VKEY, SIG_ED25519).public_key == PUBKEY
    assert parse_vkey(witness, SIG_COSIGNATURE).public_key == OTHER_PUB
    with pytest.raises(KeyFileError) as info:
        parse_vkey(VKEY, SIG_COSIGNATURE)
    assert str(info.value) == "the vkey is of signature type 0x01, not 0x04"
    with pytest.raises(KeyFileError) as info:
        parse_vkey(witness, SIG_ED25519)
    assert str(info.value) == "the vkey is of signature type 0x04, not 0x01"
    with pytest.raises(KeyFileError) as info:
        load_verifier_key(witness)
    assert str(info.value) == "the vkey is of signature type 0x04, not 0x01"
    key = parse_vkey(VKEY)
    assert (key.public_key, key.sig_type, key.name, key.key_id) == (PUBKEY, 1, ORIGIN, bytes.fromhex(KEY_ID))


def test_a_vkey_carries_its_key_id_and_name() -> None:
    forged_id = f"{ORIGIN}+00000000+{blob(1)}"  # the right key, a key ID no line of the log shows
    assert findings(NOTE_5, forged_id) == [
        ("signature", f"no signature line of the given key (name {ORIGIN!r}, key ID 00000000)")]
    assert key_id(ORIGIN, PUBKEY).hex() == KEY_ID


# -- key files ------------------------------------------------------------------------------------------------


def test_key_files_are_read_up_to_64_kib(tmp_path: Path) -> None:
    at_limit = tmp_path / "at.vkey"
    at_limit.write_bytes(b"\n" * ((1 << 16) - len(VKEY)) + VKEY.encode())
    assert at_limit.stat().st_size == 1 << 16 and findings(NOTE_5, at_limit) == []
    past = tmp_path / "past.vkey"
    past.write_bytes(b"\n" * ((1 << 16) - len(VKEY) + 1) + VKEY.encode())
    assert load_verifier_key(at_limit).name == ORIGIN
    with pytest.raises(KeyFileError):
        load_verifier_key(past)  # only the first 64 KiB are read: no key in them


def test_a_key_file_of_base64_or_hex(tmp_path: Path) -> None:
    for name, text in (("b64", base64.b64encode(PUBKEY).decode()), ("hex", PUBKEY.hex())):
        (tmp_path / name).write_text(text)
        assert findings(NOTE_5, tmp_path / name) == [] and findings(NOTE_5, str(tmp_path / name)) == []
    assert findings(NOTE_5, " " + base64.b64encode(PUBKEY).decode() + "\n") == []


def test_an_unreadable_key_file_is_a_key_error(tmp_path: Path) -> None:
    for path in (tmp_path, str(tmp_path)):
        with pytest.raises(KeyFileError) as info:
            load_verifier_key(path)
        assert str(info.value).startswith(f"cannot read key file {tmp_path}: ")


def test_signing_keys() -> None:
    assert sign_checkpoint_note(ORIGIN, 5, ROOT5, bytearray(SEED)) == NOTE_5
    assert public_key_bytes(load_signing_key(load_private_key(SEED))) == PUBKEY
    for bad in (5, None, PUBKEY.hex()[:10], [SEED]):
        with pytest.raises(KeyFileError):
            load_signing_key(bad)
    for bad in (5, None, [SEED]):
        with pytest.raises(KeyFileError) as info:
            sign_checkpoint_note(ORIGIN, 5, ROOT5, bad)  # type: ignore[arg-type]
        assert str(info.value) == "not an Ed25519 private key"


def test_an_unreadable_key_file_is_named_whatever_the_length_of_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("d" * 44, "e" * 64, "f"):  # as long as a base64 key, as a hex key, short
        (tmp_path / name).mkdir()
        with pytest.raises(KeyFileError) as info:
            load_verifier_key(name)
        assert str(info.value).startswith(f"cannot read key file {name}: ")


def test_the_blank_line_may_be_the_notes_first_line() -> None:
    """The text is everything up to the last blank line, as golang.org/x/mod/sumdb/note.Open splits it:
    a note that begins with the blank line has a text of one empty line, which later checks judge (a
    checkpoint needs its origin), not "no blank line"."""
    sig = base64.b64encode(bytes.fromhex(KEY_ID) + b"\x00" * 64).decode()
    note = parse_note(f"\n\n\u2014 {ORIGIN} {sig}\n")
    assert note.text == "\n"
    assert [(s.name, s.key_id.hex()) for s in note.signatures] == [(ORIGIN, KEY_ID)]
    with pytest.raises(MalformedNote) as info:
        parse_note(f"\n\u2014 {ORIGIN} {sig}\n")
    assert str(info.value) == "the note has no blank line before its signature lines"


def test_a_verifier_key_is_a_value_that_cannot_be_changed() -> None:
    """A VerifierKey handed to several verifications is the same key in each: it cannot be altered after
    it is made, and equal keys are one key in a set or as a dict key (a table of witnesses)."""
    key = parse_vkey(VKEY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        key.public_key = b"\x00" * 32  # type: ignore[misc]
    again = parse_vkey(VKEY)
    assert {key: "log"}[again] == "log" and len({key, again}) == 1


def test_strict_base64_names_what_is_wrong() -> None:
    """Signatures, roots and entries are standard base64 with padding, in their one canonical form: a
    character outside the alphabet is not base64 at all (never skipped), and non-zero padding bits or
    a missing pad are refused as well."""
    from mnemo.transparency.note import b64_strict

    assert b64_strict("QUFB") == b"AAA" and b64_strict("QQ==") == b"A" and b64_strict("") == b""
    for text, message in (("QU!FB", "not base64"), ("QUF B", "not base64"), ("QUFB\n", "not base64"),
                          ("QQ", "not base64"), ("QR==", "not canonical base64"), ("é", "not base64")):
        with pytest.raises(ValueError) as info:
            b64_strict(text)
        assert str(info.value) == message, text
