"""Checkpoint notes (C2SP signed-note + tlog-checkpoint): the §8 vectors byte for byte, keys and vkeys,
and everything an attacker may do to a note, each refused with the finding that names it.

Checkpoint notes and note keys at their limits, played by an attacker: a note of exactly the largest size
and one byte more, characters at the edges of what a note may hold, the tree size at 2**63 - 1 and 2**63,
each malformed signature line named by its number, vkeys changed one part at a time, and key files at
the edge of what is read. Each refusal is asserted exactly; each honest input verifies."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from helpers.transparency_vectors import DB_ID, ENTRIES, KEY_ID, NOTE_5, ORIGIN, PUBKEY, ROOTS, SEED, VKEY

from mnemo.audit import KeyFileError, generate_keypair, load_private_key, public_key_bytes
from mnemo.chain.tree import HashList, leaf_hash
from mnemo.errors import InvalidInput
from mnemo.transparency.cosign import cosign_note_text
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
    NoteSignature,
    check_origin,
    default_origin,
    parse_checkpoint,
    parse_checkpoint_text,
    parse_note,
    sign_checkpoint_note,
    sign_note_text,
    verify_checkpoint_note,
)

OTHER = b"\x07" * 32
OTHER_PUB = public_key_bytes(load_private_key(OTHER))


def vector_root(n: int) -> bytes:
    return HashList([leaf_hash(e) for e in ENTRIES]).root(n)


@pytest.mark.parametrize("n", sorted(ROOTS))
def test_mnemo_vector_roots(n: int) -> None:
    r = vector_root(n)
    assert (r.hex(), base64.b64encode(r).decode()) == ROOTS[n]


def test_key_id_vkey_and_origin_vectors() -> None:
    assert default_origin(DB_ID) == ORIGIN
    assert PUBKEY.hex() == "2152f8d19b791d24453242e15f2eab6cb7cffa7b6a5ed30097960e069881db12"
    assert key_id(ORIGIN, PUBKEY).hex() == KEY_ID
    assert key_id(ORIGIN, PUBKEY) == hashlib.sha256(ORIGIN.encode() + b"\n\x01" + PUBKEY).digest()[:4]
    assert vkey(ORIGIN, PUBKEY) == VKEY
    parsed = parse_vkey(VKEY)
    assert (parsed.name, parsed.key_id.hex() if parsed.key_id else None, parsed.public_key) == (ORIGIN, KEY_ID, PUBKEY)


def test_the_size_5_note_byte_for_byte() -> None:
    note = sign_checkpoint_note(ORIGIN, 5, vector_root(5), SEED)
    assert note == NOTE_5
    assert note.encode("utf-8")[-1:] == b"\n" and "\u2014".encode() == b"\xe2\x80\x94"
    assert sign_checkpoint_note(ORIGIN, 5, vector_root(5), load_private_key(SEED)) == NOTE_5  # deterministic


@pytest.mark.parametrize("key", [PUBKEY, PUBKEY.hex(), base64.b64encode(PUBKEY).decode(), VKEY,
                                 VerifierKey(PUBKEY), load_private_key(SEED).public_key()])
def test_verifies_with_every_form_of_the_public_key(key: object) -> None:
    check = verify_checkpoint_note(NOTE_5, key, ORIGIN)  # type: ignore[arg-type]
    assert check.ok and check.problems == ()
    assert check.checkpoint is not None and (check.checkpoint.size, check.checkpoint.origin) == (5, ORIGIN)


def test_verifies_with_key_files(tmp_path: Path) -> None:
    pem = load_private_key(SEED).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    files = {"k.pub": PUBKEY.hex().encode() + b"\n", "k.pem": pem, "k.vkey": VKEY.encode() + b"\n"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        assert verify_checkpoint_note(NOTE_5, tmp_path / name).ok, name
        assert verify_checkpoint_note(NOTE_5, str(tmp_path / name)).ok, name


@pytest.mark.parametrize("bad", ["nothex", "00" * 31, VKEY.replace("+ASFS", "+BSFS"), "a+b+c"])
def test_an_unusable_key_is_a_key_error(bad: str) -> None:
    with pytest.raises(KeyFileError):
        verify_checkpoint_note(NOTE_5, bad)


def test_a_cosigner_vkey_is_not_a_log_key() -> None:
    witness = vkey("witness.example/w", OTHER_PUB, SIG_COSIGNATURE)
    with pytest.raises(KeyFileError, match="type 0x04"):
        load_verifier_key(witness)
    assert load_verifier_key(witness, SIG_COSIGNATURE).name == "witness.example/w"


def test_parse_checkpoint() -> None:
    cp, note = parse_checkpoint(NOTE_5)
    assert (cp.origin, cp.size, cp.root, cp.extensions) == (ORIGIN, 5, vector_root(5), ())
    assert note.text == NOTE_5.split("\n\n")[0] + "\n" and len(note.signatures) == 1
    assert str(note) == NOTE_5
    assert parse_checkpoint(NOTE_5.encode()) == (cp, note)


# -- the attacker ----------------------------------------------------------------------------------------


def findings(note: str | bytes, key: object = PUBKEY, origin: str | None = ORIGIN) -> list[tuple[str, str]]:
    check = verify_checkpoint_note(note, key, origin)  # type: ignore[arg-type]
    assert check.ok == (not check.problems)
    return [(p.kind, p.message) for p in check.problems]


SIG_LINE = NOTE_5.split("\n\n")[1]
TEXT = NOTE_5.split("\n\n")[0] + "\n"


def test_every_flipped_signature_bit_is_refused() -> None:
    blob = base64.b64decode(SIG_LINE.split(" ")[2])
    for i in range(4, len(blob)):
        bad = bytearray(blob)
        bad[i] ^= 1 << (i % 8)
        line = f"\u2014 {ORIGIN} {base64.b64encode(bytes(bad)).decode()}\n"
        assert findings(TEXT + "\n" + line) == [
            ("signature", f"the signature of the given key (key ID {KEY_ID}) does not verify over the note text")]
    # a flipped key ID: the line is another key's, so no line of the given key is left
    bad = bytearray(blob)
    bad[0] ^= 1
    line = f"\u2014 {ORIGIN} {base64.b64encode(bytes(bad)).decode()}\n"
    assert findings(TEXT + "\n" + line) == [
        ("signature", f"no signature line of the given key (name {ORIGIN!r}, key ID {KEY_ID})")]


def test_another_key_is_refused() -> None:
    other_id = key_id(ORIGIN, OTHER_PUB).hex()
    assert findings(NOTE_5, OTHER_PUB) == [
        ("signature", f"no signature line of the given key (name {ORIGIN!r}, key ID {other_id})")]
    forged = sign_checkpoint_note(ORIGIN, 5, vector_root(5), OTHER)
    assert findings(forged) == [("signature", f"no signature line of the given key (name {ORIGIN!r}, key ID {KEY_ID})")]


def test_the_wrong_origin_is_refused() -> None:
    assert findings(NOTE_5, origin="mnemo.local/ffffffffffffffffffffffffffffffff") == [
        ("origin", f"the checkpoint's origin is {ORIGIN!r}, not 'mnemo.local/ffffffffffffffffffffffffffffffff'")]
    other = sign_checkpoint_note("example.com/log", 5, vector_root(5), SEED)
    assert findings(other)[0][0] == "origin"
    assert findings(other, origin=None) == []  # no origin expected: any, as long as the key signed it
    # a vkey names its key: a note of another origin has no line of it
    assert findings(other, VKEY, None) == [
        ("signature", f"the key is named {ORIGIN!r}, but the log's key name is its origin 'example.com/log': "
                      "no signature line of this key")]


@pytest.mark.parametrize("altered", [
    TEXT.replace("\n5\n", "\n6\n"),
    TEXT.replace("Fi3eh3", "Fi3eh4"),
    TEXT + "extension line\n",
    TEXT.replace("0f\n", "0e\n", 1),
])
def test_an_altered_note_line_is_refused(altered: str) -> None:
    found = findings(altered + "\n" + SIG_LINE, origin=None)
    assert found and found[-1][0] == "signature"


def test_a_duplicated_signature_line_is_refused() -> None:
    assert findings(NOTE_5 + SIG_LINE) == [
        ("signature", f"2 signature lines of the given key (key ID {KEY_ID}): a log signs a checkpoint once")]


def test_a_missing_signature_line_is_refused() -> None:
    assert findings(TEXT + "\n") == [("note", "the note has no signature lines")]
    assert findings(TEXT) == [("note", "the note has no blank line before its signature lines")]
    other_line = sign_note_text(TEXT, ORIGIN, OTHER).line()
    assert findings(TEXT + "\n" + other_line) == [
        ("signature", f"no signature line of the given key (name {ORIGIN!r}, key ID {KEY_ID})")]


def test_other_keys_lines_are_ignored_up_to_many_signatures() -> None:
    others = [sign_note_text(TEXT, f"example.com/w{i}", bytes([i + 1]) * 32).line() for i in range(20)]
    assert findings(TEXT + "\n" + "".join(others[:10]) + SIG_LINE + "".join(others[10:])) == []
    # same name, another key ID; same key ID, another name: neither is the log's line, so both ignored
    kid = bytes.fromhex(KEY_ID)
    same_name = NoteSignature(ORIGIN, b"\x00\x01\x02\x03", b"\x00" * 64).line()
    same_id = NoteSignature("example.com/x", kid, b"\x00" * 64).line()
    assert findings(TEXT + "\n" + same_name + same_id + SIG_LINE) == []
    # 256 signature lines are accepted, 257 are not
    filler = NoteSignature("example.com/f", b"\x00\x00\x00\x00", b"\x01").line()
    assert findings(TEXT + "\n" + filler * 255 + SIG_LINE) == []
    assert findings(TEXT + "\n" + filler * 256 + SIG_LINE) == [
        ("note", "the note has 257 signature lines, more than 256")]


def test_cosignature_lines_are_ignored_by_the_log_key_check() -> None:
    # a type 0x04 line under the origin's name, by the log's own key: its key ID differs, so it is ignored
    cosig = cosign_note_text(TEXT, ORIGIN, SEED, 1_700_000_000).line()
    assert cosig.split(" ")[1] == ORIGIN
    assert findings(NOTE_5 + cosig) == []
    assert findings(TEXT + "\n" + cosig)[0][0] == "signature"


def test_extension_lines_are_signed_and_accepted() -> None:
    text = TEXT + "some extension\n"
    note = str(Note(text, (sign_note_text(text, ORIGIN, SEED),)))
    check = verify_checkpoint_note(note, PUBKEY, ORIGIN)
    assert check.ok and check.checkpoint is not None and check.checkpoint.extensions == ("some extension",)


@pytest.mark.parametrize(("note", "message"), [
    (TEXT.replace("\n5\n", "\n05\n"), "the tree size '05' is not a decimal number without leading zeros"),
    (TEXT.replace("\n5\n", "\n\uff15\n"), "the tree size '\uff15' is not a decimal number without leading zeros"),
    (TEXT.replace("\n5\n", "\n-5\n"), "the tree size '-5' is not a decimal number without leading zeros"),
    (TEXT.replace("\n5\n", "\n99999999999999999999\n"), "is not a decimal number"),
    (TEXT.replace("Fi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY80=", "Fi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY8="),
     "is not standard base64"),
    (TEXT.replace("Fi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY80=", "Fi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY81="),
     "is not standard base64"),  # non-canonical: the padding bits are not zero
    (TEXT.replace("Fi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY80=", "AAAA"), "the root is 3 bytes, not 32"),
    (ORIGIN + "\n5\n", "the checkpoint has 2 lines, not at least 3 (origin, size, root)"),
])
def test_malformed_checkpoint_text(note: str, message: str) -> None:
    found = findings(note + "\n" + SIG_LINE, origin=None)
    assert len(found) == 1 and found[0][0] == "note" and message in found[0][1]


@pytest.mark.parametrize(("note", "message"), [
    (NOTE_5.replace("\n5\n", "\r\n5\n"), "control character U+000D"),
    (NOTE_5.replace("\n5\n", "\n5\t\n"), "control character U+0009"),
    (NOTE_5.encode().replace(b"5\n", b"5\xff\n", 1), "not UTF-8"),
    (NOTE_5[:-1], "does not end in a newline"),
    (NOTE_5.replace("\u2014 ", "- "), "does not start with an em dash"),
    (NOTE_5.replace(f"\u2014 {ORIGIN} ", f"\u2014 {ORIGIN}  "), "not base64"),
    (NOTE_5.replace(f"\u2014 {ORIGIN} ", "\u2014 a+b "), "no valid key name"),
    (NOTE_5.replace("Qo=\n", "Qo\n"), "not base64"),
    (TEXT + "\n\u2014 x AAAA\n", "shorter than a key ID"),
])
def test_malformed_notes(note: str | bytes, message: str) -> None:
    found = findings(note, origin=None)
    assert len(found) == 1 and found[0][0] == "note" and message in found[0][1]
    with pytest.raises(MalformedNote):
        parse_note(note)


def test_signing_refuses_what_it_must_not_sign() -> None:
    for origin in ("", "a b", "a+b", "a\nb", "tab\there", "nbsp\u00a0here"):
        with pytest.raises(InvalidInput):
            sign_checkpoint_note(origin, 5, vector_root(5), SEED)
    with pytest.raises(InvalidInput, match="at least 1"):
        sign_checkpoint_note(ORIGIN, 0, vector_root(5), SEED)
    with pytest.raises(InvalidInput):
        sign_checkpoint_note(ORIGIN, 5, b"short", SEED)
    with pytest.raises(KeyFileError):
        sign_checkpoint_note(ORIGIN, 5, vector_root(5), b"not a key")


def test_keygen_keys_sign_and_verify(tmp_path: Path) -> None:
    pem, pub = generate_keypair()
    (tmp_path / "k").write_bytes(pem)
    note = sign_checkpoint_note(ORIGIN, 3, vector_root(3), tmp_path / "k")
    assert verify_checkpoint_note(note, pub).ok
    assert verify_checkpoint_note(note, vkey(ORIGIN, pub)).ok
    assert not verify_checkpoint_note(note, PUBKEY).ok


# -- the same notes as tlog-scales ------------------------------------------------------------------------


def test_notes_and_vkeys_agree_with_tlog_scales() -> None:
    pytest.importorskip("tlog_scales.tlog")
    from tlog_scales.signing import PlainEd25519Signer, Vkey
    from tlog_scales.tlog import Checkpoint

    theirs = Vkey.from_string(VKEY)
    assert theirs.serialize() == VKEY and theirs.key_id == int(KEY_ID, 16)
    signer = PlainEd25519Signer(ORIGIN, Ed25519PrivateKey.from_private_bytes(SEED))
    assert signer.vkey.serialize() == VKEY
    for n in range(1, 6):
        mine = sign_checkpoint_note(ORIGIN, n, vector_root(n), SEED)
        cp = Checkpoint.make_signed(ORIGIN, n, vector_root(n), [signer])
        assert cp.serialize() == mine
        Checkpoint.from_text(mine).verify(theirs)  # raises if it does not verify
        assert verify_checkpoint_note(cp.serialize(), PUBKEY, ORIGIN).ok


def test_parsed_notes_checkpoints_and_signatures_are_values_that_cannot_be_changed() -> None:
    """What a parse returns stays what the text said: assigning to a checkpoint, a note or one of its
    signatures raises, and a second parse of the same text gives equal values."""
    import dataclasses

    cp, note = parse_checkpoint(NOTE_5)
    sig = note.signatures[0]
    for value, field in ((cp, "size"), (note, "text"), (sig, "name")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)
    assert parse_checkpoint(NOTE_5) == (cp, note) and hash(sig) == hash(parse_note(NOTE_5).signatures[0])


def test_a_verifier_key_loads_from_a_file_named_by_a_path_or_a_string(tmp_path: Path) -> None:
    """A vkey file, or mnemo keygen's .pub file, given as a Path or as its name in a str, is read; a
    Path to a file that is not there is a key error naming it."""
    vkey_file = tmp_path / "log.vkey"
    vkey_file.write_text(VKEY + "\n", encoding="ascii")
    for given in (vkey_file, str(vkey_file)):
        key = load_verifier_key(given)
        assert (key.name, key.public_key) == (ORIGIN, PUBKEY)
    with pytest.raises(KeyFileError) as info:
        load_verifier_key(tmp_path / "missing.vkey")
    assert str(info.value) == f"cannot read key file {tmp_path / 'missing.vkey'}: No such file or directory"


ROOT5 = HashList([leaf_hash(e) for e in ENTRIES]).root(5)


LIMIT = 1 << 20


def signed(text: str, key: bytes = SEED, name: str = ORIGIN) -> str:
    return str(Note(text, (sign_note_text(text, name, key),)))


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
