"""Checkpoints as C2SP signed notes (docs/TRANSPARENCY.md §3): formatting, parsing, signing with the
log's Ed25519 key (signature type 0x01) and verifying.

A note is UTF-8 text with no control character but U+000A: the note text (origin, tree size, root,
optional extension lines), a blank line, then signature lines `— <key name> <base64(key ID || sig)>`.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature

from ..chain.tree import HASH_SIZE
from ..errors import InvalidInput
from ..keys import PrivateKeyLike, public_key_bytes
from .errors import Finding, TransparencyError
from .keys import SIG_ED25519, KeyLike, VerifierKey, key_id, load_signing_key, load_verifier_key, valid_key_name

SIGNATURE_PREFIX = "\u2014 "  # em dash, space
MAX_SIGNATURES = 256  # C2SP asks verifiers to accept at least 16
MAX_NOTE_BYTES = 1 << 20
DEFAULT_ORIGIN_PREFIX = "mnemo.local/"
DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")


class MalformedNote(TransparencyError):
    """Text that is not a well-formed signed note or checkpoint (a defect inside a readable input)."""

    exit_code = 1


def default_origin(db_id: bytes) -> str:
    """`mnemo.local/<db_id as 32 lowercase hex digits>`."""
    return DEFAULT_ORIGIN_PREFIX + db_id.hex()


def check_origin(origin: object) -> str:
    """An origin Mnemo may sign: non-empty, no Unicode space, no '+', no control character."""
    if not valid_key_name(origin):
        raise InvalidInput(f"origin {origin!r} must be non-empty, without spaces, '+' or control characters")
    assert isinstance(origin, str)
    return origin


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64_strict(text: str) -> bytes:
    """Standard base64 with padding, canonical (re-encoding gives the same text); ValueError otherwise."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("not base64") from None
    if b64(data) != text:
        raise ValueError("not canonical base64")
    return data


@dataclass(frozen=True)
class NoteSignature:
    name: str
    key_id: bytes
    signature: bytes  # what follows the key ID

    def line(self) -> str:
        return f"{SIGNATURE_PREFIX}{self.name} {b64(self.key_id + self.signature)}\n"


@dataclass(frozen=True)
class Note:
    """A parsed signed note: `text` ends in a newline; `signatures` in their order in the note."""

    text: str
    signatures: tuple[NoteSignature, ...]

    def __str__(self) -> str:
        return self.text + "\n" + "".join(s.line() for s in self.signatures)


@dataclass(frozen=True)
class Checkpoint:
    """The note text of a checkpoint (c2sp.org/tlog-checkpoint)."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [self.origin, str(self.size), b64(self.root), *self.extensions]
        return "".join(line + "\n" for line in lines)


def checkpoint_text(origin: str, size: int, root: bytes) -> str:
    """The note text Mnemo signs: origin, size and root, each with its newline; no extension lines."""
    return Checkpoint(origin, size, root).text()


def parse_note(data: str | bytes) -> Note:
    """Split a signed note into its text and signature lines; raises MalformedNote."""
    if isinstance(data, (bytes, bytearray)):
        if len(data) > MAX_NOTE_BYTES:
            raise MalformedNote(f"the note is larger than {MAX_NOTE_BYTES} bytes")
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedNote("the note is not UTF-8") from None
    if not isinstance(data, str):
        raise InvalidInput("a note is text")
    if len(data) > MAX_NOTE_BYTES:
        raise MalformedNote(f"the note is larger than {MAX_NOTE_BYTES} bytes")
    bad = next((c for c in data if (ord(c) < 0x20 and c != "\n") or 0xD800 <= ord(c) <= 0xDFFF), None)
    if bad is not None:
        raise MalformedNote(f"the note holds the control character U+{ord(bad):04X}")
    split = data.rfind("\n\n")
    if split < 0:
        raise MalformedNote("the note has no blank line before its signature lines")
    text, sigs = data[:split + 1], data[split + 2:]
    if not sigs:
        raise MalformedNote("the note has no signature lines")
    if not sigs.endswith("\n"):
        raise MalformedNote("the note's last line does not end in a newline")
    lines = sigs[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNote(f"the note has {len(lines)} signature lines, more than {MAX_SIGNATURES}")
    out: list[NoteSignature] = []
    for i, line in enumerate(lines, 1):
        if not line.startswith(SIGNATURE_PREFIX):
            raise MalformedNote(f"signature line {i} does not start with an em dash and a space")
        name, sep, blob = line[len(SIGNATURE_PREFIX):].partition(" ")
        if not sep or not valid_key_name(name):
            raise MalformedNote(f"signature line {i} has no valid key name")
        try:
            raw = b64_strict(blob)
        except ValueError:
            raise MalformedNote(f"signature line {i}: the signature is not base64") from None
        if len(raw) < 5:
            raise MalformedNote(f"signature line {i}: the signature is shorter than a key ID and one byte")
        out.append(NoteSignature(name, raw[:4], raw[4:]))
    return Note(text, tuple(out))


def parse_checkpoint_text(text: str) -> Checkpoint:
    """Parse a checkpoint's note text (ending in a newline); raises MalformedNote."""
    if not text.endswith("\n"):
        raise MalformedNote("the checkpoint text does not end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise MalformedNote(f"the checkpoint has {len(lines)} lines, not at least 3 (origin, size, root)")
    empty = next((i for i, line in enumerate(lines, 1) if not line), None)
    if empty is not None:
        raise MalformedNote(f"line {empty} of the checkpoint is empty")
    origin, size_text, root_text = lines[:3]
    if not DECIMAL.fullmatch(size_text) or int(size_text) >= 1 << 63:
        raise MalformedNote(f"the tree size {size_text!r} is not a decimal number without leading zeros")
    try:
        root = b64_strict(root_text)
    except ValueError:
        raise MalformedNote(f"the root {root_text!r} is not standard base64") from None
    if len(root) != HASH_SIZE:
        raise MalformedNote(f"the root is {len(root)} bytes, not 32")
    return Checkpoint(origin, int(size_text), root, tuple(lines[3:]))


def parse_checkpoint(data: str | bytes) -> tuple[Checkpoint, Note]:
    """Parse a checkpoint note (without checking any signature); raises MalformedNote."""
    note = parse_note(data)
    return parse_checkpoint_text(note.text), note


def sign_note_text(text: str, name: str, key: PrivateKeyLike) -> NoteSignature:
    """An Ed25519 note signature (type 0x01) by `key` under key name `name` over `text`."""
    sk = load_signing_key(key)
    return NoteSignature(name, key_id(name, public_key_bytes(sk), SIG_ED25519), sk.sign(text.encode("utf-8")))


def sign_checkpoint_note(origin: str, size: int, root: bytes, key: PrivateKeyLike) -> str:
    """The checkpoint note of the tree (`size`, `root`) signed by the log key `key`, whose key name is
    the origin. Ed25519 is deterministic: the same inputs give the same bytes."""
    check_origin(origin)
    if not (isinstance(size, int) and not isinstance(size, bool) and 1 <= size < 1 << 63):
        raise InvalidInput(f"tree size {size!r} must be at least 1: no Mnemo tree is empty")
    if not (isinstance(root, bytes) and len(root) == HASH_SIZE):
        raise InvalidInput("the root must be a 32-byte hash")
    text = checkpoint_text(origin, size, root)
    return str(Note(text, (sign_note_text(text, origin, key),)))


@dataclass(frozen=True)
class NoteCheck:
    """What verify_checkpoint_note found: `ok` when the log key's signature verifies and nothing else is
    wrong; `checkpoint` and `note` whenever the text parsed."""

    ok: bool
    checkpoint: Checkpoint | None
    note: Note | None
    problems: tuple[Finding, ...]

    def to_json(self) -> dict[str, Any]:
        cp = self.checkpoint
        return {
            "ok": self.ok,
            "origin": cp.origin if cp else None,
            "tree_size": cp.size if cp else None,
            "root": b64(cp.root) if cp else None,
            "problems": [p.to_json() for p in self.problems],
        }


def log_signature_findings(cp: Checkpoint, note: Note, key: VerifierKey) -> list[Finding]:
    """Select the signature lines of the log key (name = the origin, key ID of (origin, key)) and check
    them: none, more than one, or one that does not verify is a finding. Other lines are ignored."""
    name = key.name_for(cp.origin)
    kid = key.id_for(name)
    if name != cp.origin:
        return [Finding("signature", f"the key is named {name!r}, but the log's key name is its origin "
                        f"{cp.origin!r}: no signature line of this key")]
    selected = [s for s in note.signatures if s.name == name and s.key_id == kid]
    if not selected:
        return [Finding("signature", f"no signature line of the given key (name {name!r}, key ID {kid.hex()})")]
    found: list[Finding] = []
    if len(selected) > 1:
        found.append(Finding("signature", f"{len(selected)} signature lines of the given key (key ID "
                             f"{kid.hex()}): a log signs a checkpoint once"))
    verifier = key.verifier()
    message = note.text.encode("utf-8")
    for s in selected:
        try:
            if len(s.signature) != 64:
                raise InvalidSignature
            verifier.verify(s.signature, message)
        except InvalidSignature:
            found.append(Finding("signature", f"the signature of the given key (key ID {kid.hex()}) does not "
                                 "verify over the note text"))
    return found


def verify_checkpoint_note(note: str | bytes, pubkey: KeyLike, origin: str | None = None) -> NoteCheck:
    """Check a checkpoint note with the log's public key (anything `--pubkey` takes, or a vkey) and,
    if given, the expected origin. Reports every problem; raises only KeyFileError for an unusable key."""
    key = load_verifier_key(pubkey, SIG_ED25519)
    try:
        cp, parsed = parse_checkpoint(note)
    except MalformedNote as exc:
        return NoteCheck(False, None, None, (Finding("note", str(exc)),))
    found: list[Finding] = []
    if origin is not None and cp.origin != origin:
        found.append(Finding("origin", f"the checkpoint's origin is {cp.origin!r}, not {origin!r}"))
    found.extend(log_signature_findings(cp, parsed, key))
    return NoteCheck(not found, cp, parsed, tuple(found))


__all__ = [
    "DEFAULT_ORIGIN_PREFIX",
    "MAX_SIGNATURES",
    "Checkpoint",
    "MalformedNote",
    "Note",
    "NoteCheck",
    "NoteSignature",
    "check_origin",
    "checkpoint_text",
    "default_origin",
    "log_signature_findings",
    "parse_checkpoint",
    "parse_checkpoint_text",
    "parse_note",
    "sign_checkpoint_note",
    "sign_note_text",
    "verify_checkpoint_note",
]
