"""One function per transparency command of the `mnemo` command line (docs/TRANSPARENCY.md §6), so the
command line is a thin shell: each returns the data to print, or raises a TransparencyError whose
`exit_code` is the command's (1: a defect inside a readable input, such as a damaged log; 2: a usage
error, or a file or key that cannot be read at all). The verifiers return reports whose `ok` is
False (exit 1) when they found problems.

| command                               | function                    |
|---------------------------------------|-----------------------------|
| `mnemo checkpoint`                    | `checkpoint`, `vkey_of`     |
| `mnemo prove --seq`                   | `prove_seq`                 |
| `mnemo prove --from/--to`             | `prove_range`               |
| `mnemo audit verify-proof`            | `audit_verify_proof`        |
| `mnemo audit verify-consistency`      | `audit_verify_consistency`  |
| `mnemo cosign`                        | `cosign_checkpoint`         |
| `mnemo verify --checkpoint`           | `verify_checkpoint`         |
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..audit import PathArg
from ..errors import InvalidInput
from ..keys import KeyFileError, PrivateKeyLike, public_key_bytes
from ..storage.file.atomic import write_text_atomic
from .bundle import BundleCheck, build_bundle, bundle_json, verify_bundle
from .consistency import ConsistencyCheck, ConsistencyProof, parse_consistency, verify_consistency_proof
from .cosign import cosign
from .errors import Finding, Rejected, UnreadableInput, UsageError
from .extends import ExtendsReport, log_extends
from .keys import KeyLike, VerifierKey, load_signing_key, load_verifier_key, vkey
from .log import header_db_id, read_tree
from .note import MalformedNote, b64, check_origin, default_origin, parse_checkpoint, sign_checkpoint_note


def _signing_key(key: PrivateKeyLike) -> Ed25519PrivateKey:
    try:
        return load_signing_key(key)
    except KeyFileError as exc:
        raise UnreadableInput(f"unreadable key: {exc}") from None


def _verifier(key: KeyLike) -> VerifierKey:
    try:
        return load_verifier_key(key)
    except KeyFileError as exc:
        raise UnreadableInput(f"unreadable public key: {exc}") from None


def public_key(key: KeyLike) -> bytes:
    """The raw public key of anything `--pubkey` takes, a vkey included; UnreadableInput (exit 2)."""
    return _verifier(key).public_key


def _origin(origin: str | None, db_id: bytes) -> str:
    if origin is None:
        return default_origin(db_id)
    try:
        return check_origin(origin)
    except InvalidInput as exc:
        raise UsageError(str(exc)) from None


def _size_arg(value: object, what: str) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool)):
        raise UsageError(f"{what} must be an integer")
    return value


def read_text_file(path: PathArg, what: str) -> bytes:
    """The bytes of a file, or UnreadableInput (exit 2)."""
    name = os.fspath(path)
    if os.path.isdir(name):
        raise UnreadableInput(f"cannot read the {what} {name}: it is a directory")
    try:
        with open(name, "rb") as f:
            return f.read()
    except OSError as exc:
        raise UnreadableInput(f"cannot read the {what} {name}: {exc.strerror or exc}") from None


def write_file_atomic(path: PathArg, text: str) -> None:
    """Write `text` to `path` through `path.tmp`, fsync and a rename, so that a reader never sees half
    of it and a crash leaves the old file or the new one."""
    try:
        write_text_atomic(path, lambda out: out.write(text))
    except OSError as exc:
        raise UnreadableInput(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None


# -- mnemo checkpoint -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointResult:
    origin: str
    tree_size: int
    root: bytes
    note: str

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "tree_size": self.tree_size, "root": b64(self.root), "note": self.note}


def checkpoint(db: PathArg, key: PrivateKeyLike, origin: str | None = None) -> CheckpointResult:
    """The signed checkpoint note of the current tree (read as an auditor; a damaged log raises
    DamagedLog and nothing is signed)."""
    sk = _signing_key(key)
    tree = read_tree(db)
    name = _origin(origin, tree.db_id)
    root = tree.root()
    return CheckpointResult(name, tree.size, root, sign_checkpoint_note(name, tree.size, root, sk))


def vkey_of(db: PathArg, key: PrivateKeyLike, origin: str | None = None) -> str:
    """The vkey of the log key (`mnemo checkpoint DB --key K --vkey`): name = origin, type 0x01."""
    sk = _signing_key(key)
    name = _origin(origin, header_db_id(os.fspath(db)))
    return vkey(name, public_key_bytes(sk))


# -- mnemo prove ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InclusionResult:
    bundle: str
    json: dict[str, Any]

    def to_text(self, as_json: bool = False) -> str:
        return json.dumps(self.json) + "\n" if as_json else self.bundle


def prove_seq(
    db: PathArg,
    seq: int,
    *,
    size: int | None = None,
    key: PrivateKeyLike | None = None,
    checkpoint: str | bytes | None = None,
    origin: str | None = None,
) -> InclusionResult:
    """The bundle for entry `seq` in the tree of `size` entries (default: the current tree). With `key`
    a fresh note of that size is signed; with `checkpoint` (a note's text), that note is embedded and
    `size` is its size: its root must be the log's root at that size (else Rejected, exit 1)."""
    if (key is None) == (checkpoint is None):
        raise UsageError("give exactly one of a signing key and a checkpoint")
    seq = _size_arg(seq, "seq")
    if seq < 0:
        raise UsageError(f"seq {seq} is negative")
    sk = _signing_key(key) if key is not None else None
    cp = None
    if checkpoint is not None:
        try:
            cp, _ = parse_checkpoint(checkpoint)
        except MalformedNote as exc:
            raise Rejected(f"the checkpoint is not a checkpoint note: {exc}", (Finding("note", str(exc)),)) from None
        if size is not None and _size_arg(size, "size") != cp.size:
            raise UsageError(f"--size {size} is not the checkpoint's size {cp.size}")
        if origin is not None and origin != cp.origin:
            raise Rejected(f"the checkpoint is of {cp.origin!r}, not {origin!r}")
        size = cp.size
    tree = read_tree(db, keep=[seq])
    if size is None:
        size = tree.size
    size = _size_arg(size, "size")
    if cp is not None and not 1 <= size <= tree.size:
        raise Rejected(f"the checkpoint covers {size} entries, the log holds {tree.size}: it is not of this log")
    if not 1 <= size <= tree.size:
        raise UsageError(f"size {size} is not between 1 and the tree size {tree.size}")
    if seq >= size:
        raise UsageError(f"seq {seq} is not in the tree of {size} entries")
    root = tree.root(size)
    if cp is not None:
        if cp.root != root:
            raise Rejected(f"the checkpoint's root is {b64(cp.root)}, but the log's root at size {size} is "
                           f"{b64(root)}", (Finding("root", "the checkpoint's root is not the log's"),))
        note = checkpoint.decode("utf-8") if isinstance(checkpoint, bytes) else checkpoint
        assert isinstance(note, str)
    else:
        assert sk is not None
        note = sign_checkpoint_note(_origin(origin, tree.db_id), size, root, sk)
    path = tree.leaves.inclusion_path(seq, size)
    entry = tree.entries[seq]
    return InclusionResult(build_bundle(entry, seq, path, note), bundle_json(entry, seq, path, note))


def prove_range(db: PathArg, old_size: int, new_size: int | None = None, origin: str | None = None) -> ConsistencyProof:
    """The consistency proof (§5) from `old_size` to `new_size` (default: the current size)."""
    old_size = _size_arg(old_size, "old size")
    tree = read_tree(db)
    new = tree.size if new_size is None else _size_arg(new_size, "new size")
    if not 1 <= old_size <= new <= tree.size:
        raise UsageError(f"sizes {old_size}..{new} are not 1 <= old <= new <= the tree size {tree.size}")
    return ConsistencyProof(_origin(origin, tree.db_id), old_size, new, tree.root(old_size), tree.root(new),
                            tuple(tree.leaves.consistency_proof(old_size, new)))


# -- mnemo audit verify-proof / verify-consistency -----------------------------------------------------


def audit_verify_proof(bundle: PathArg, pubkey: KeyLike, origin: str | None = None) -> BundleCheck:
    """Check a bundle file offline. Raises UnreadableInput (exit 2) for a missing or unreadable file,
    text that is not UTF-8 or not a bundle, or an unreadable key."""
    key = _verifier(pubkey)
    return verify_bundle(read_text_file(bundle, "bundle"), key, origin)


def audit_verify_consistency(
    old: PathArg, new: PathArg, proof: PathArg, pubkey: KeyLike, origin: str | None = None
) -> ConsistencyCheck:
    """Check a consistency proof file between two checkpoint files offline."""
    key = _verifier(pubkey)
    old_note, new_note = read_text_file(old, "old checkpoint"), read_text_file(new, "new checkpoint")
    return verify_consistency_proof(old_note, new_note, read_text_file(proof, "consistency proof"), key, origin)


# -- mnemo cosign ---------------------------------------------------------------------------------------


def cosign_checkpoint(
    new: PathArg,
    *,
    key: PrivateKeyLike,
    name: str,
    log_pubkey: KeyLike,
    old: PathArg | None = None,
    proof: PathArg | None = None,
    origin: str | None = None,
    timestamp: int | None = None,
) -> str:
    """Cosign the checkpoint file `new` as witness `name` (key `key`), having checked it with the log's
    key and, when `old` (the last checkpoint this witness cosigned) is given, checked the consistency
    proof file `proof` (§5) from it. Returns the note with the cosignature line added."""
    if proof is not None and old is None:
        raise UsageError("a consistency proof needs the old checkpoint it starts from")
    sk = _signing_key(key)
    log_key = _verifier(log_pubkey)
    new_note = read_text_file(new, "checkpoint")
    old_note = read_text_file(old, "old checkpoint") if old is not None else None
    hashes: tuple[bytes, ...] = ()
    if proof is not None:
        parsed, problems = parse_consistency(read_text_file(proof, "consistency proof"))
        if parsed is None:
            raise Rejected("the consistency proof is malformed", problems)
        mismatch = _proof_mismatch(parsed, old_note, new_note)
        if mismatch:
            raise Rejected(mismatch, (Finding("proof", mismatch),))
        hashes = parsed.proof
    try:
        return cosign(new_note, witness_key=sk, witness_name=name, log_key=log_key, old_note=old_note,
                      proof=hashes, origin=origin, timestamp=timestamp)
    except InvalidInput as exc:
        raise UsageError(str(exc)) from None


def _proof_mismatch(proof: ConsistencyProof, old_note: bytes | None, new_note: bytes) -> str | None:
    try:
        new, _ = parse_checkpoint(new_note)
        old = parse_checkpoint(old_note)[0] if old_note is not None else None
    except MalformedNote:
        return None  # cosign() reports what is wrong with the note
    if old is not None and (proof.old_size, proof.old_root) != (old.size, old.root):
        return "the consistency proof does not start at the old checkpoint"
    if (proof.new_size, proof.new_root) != (new.size, new.root):
        return "the consistency proof does not end at the new checkpoint"
    return None


# -- mnemo verify --checkpoint --------------------------------------------------------------------------


def verify_checkpoint(db: PathArg, note: PathArg, pubkey: KeyLike, origin: str | None = None) -> ExtendsReport:
    """Whether the log at `db` extends the checkpoint in the file `note` (every finding reported)."""
    key = _verifier(pubkey)
    return log_extends(db, read_text_file(note, "checkpoint"), key, origin)


__all__ = [
    "CheckpointResult",
    "InclusionResult",
    "audit_verify_consistency",
    "audit_verify_proof",
    "checkpoint",
    "cosign_checkpoint",
    "prove_range",
    "prove_seq",
    "public_key",
    "read_text_file",
    "verify_checkpoint",
    "vkey_of",
    "write_file_atomic",
]
