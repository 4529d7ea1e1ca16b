"""Checkpoint notes (C2SP signed-note + tlog-checkpoint): the §8 vectors byte for byte, keys and vkeys,
and everything an attacker may do to a note, each refused with the finding that names it."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from helpers.transparency_vectors import DB_ID, ENTRIES, KEY_ID, NOTE_5, ORIGIN, PUBKEY, ROOTS, SEED, VKEY

from mnemo.audit import KeyFileError, generate_keypair, load_private_key, public_key_bytes
from mnemo.errors import InvalidInput
from mnemo.transparency.cosign import cosign_note_text
from mnemo.transparency.keys import SIG_COSIGNATURE, VerifierKey, key_id, load_verifier_key, parse_vkey, vkey
from mnemo.transparency.note import (
    MalformedNote,
    Note,
    NoteSignature,
    default_origin,
    parse_checkpoint,
    parse_note,
    sign_checkpoint_note,
    sign_note_text,
    verify_checkpoint_note,
)
from mnemo.transparency.tree import HashList, leaf_hash

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
