"""Witness cosignatures (c2sp.org/tlog-cosignature, Ed25519, signature type 0x04, timestamped).

A witness that last saw checkpoint A of a log and is shown checkpoint B with a consistency proof from A
to B checks the log's signature on both and the proof (as tlog-witness's add-checkpoint does), then
adds its line: `— <witness name> base64(key ID || timestamp u64 || Ed25519 signature)` over
`cosignature/v1\\ntime <timestamp>\\n` followed by B's note text. A verifier that trusts some witnesses
then knows they all saw one history of the log, not a view forked for one auditor.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature

from ..chain.tree import verify_consistency
from ..errors import InvalidInput
from ..keys import PrivateKeyLike, public_key_bytes
from .errors import Finding, Rejected
from .keys import SIG_COSIGNATURE, KeyLike, VerifierKey, key_id, load_signing_key, load_verifier_key, valid_key_name
from .note import (
    Checkpoint,
    Note,
    NoteCheck,
    NoteSignature,
    verify_checkpoint_note,
)

MAX_TIMESTAMP = (1 << 63) - 1

WitnessLike = VerifierKey | str | tuple[str, KeyLike]


def cosignature_message(text: str, timestamp: int) -> bytes:
    """What a v1 Ed25519 cosignature signs: the header line, the time line, then the note text."""
    return f"cosignature/v1\ntime {timestamp}\n".encode() + text.encode("utf-8")


def cosign_note_text(text: str, name: str, key: PrivateKeyLike, timestamp: int) -> NoteSignature:
    """The cosignature line of witness `name` (key `key`) over the checkpoint text `text`."""
    if not valid_key_name(name):
        raise InvalidInput(f"witness name {name!r} must be non-empty, without spaces or '+'")
    if not (isinstance(timestamp, int) and not isinstance(timestamp, bool) and 1 <= timestamp <= MAX_TIMESTAMP):
        raise InvalidInput("a cosignature's timestamp is between 1 and 2**63 - 1 seconds")
    sk = load_signing_key(key)
    sig = sk.sign(cosignature_message(text, timestamp))
    return NoteSignature(name, key_id(name, public_key_bytes(sk), SIG_COSIGNATURE), timestamp.to_bytes(8, "big") + sig)


def load_witness_key(witness: WitnessLike) -> VerifierKey:
    """A witness's verifier key, named: a vkey of type 0x04, a VerifierKey with a name, or (name, key)."""
    if isinstance(witness, tuple):
        name, key = witness
        if not valid_key_name(name):
            raise InvalidInput(f"witness name {name!r} must be non-empty, without spaces or '+'")
        found = load_verifier_key(key, SIG_COSIGNATURE)
        return VerifierKey(found.public_key, SIG_COSIGNATURE, name, found.key_id if found.name == name else None)
    found = load_verifier_key(witness, SIG_COSIGNATURE)
    if found.name is None:
        raise InvalidInput("a witness key needs its name: give a vkey or (name, key)")
    return found


@dataclass(frozen=True)
class CosignatureCheck:
    name: str
    key_id: bytes
    ok: bool
    timestamp: int | None
    problem: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "key_id": self.key_id.hex(), "ok": self.ok, "timestamp": self.timestamp,
                "problem": self.problem}


def check_cosignature(note: Note, witness: VerifierKey) -> CosignatureCheck:
    """Find and check the cosignature of one witness (its name and type-0x04 key ID) in `note`."""
    name = witness.name_for("")
    kid = witness.id_for(name)
    lines = [s for s in note.signatures if s.name == name and s.key_id == kid]
    if not lines:
        return CosignatureCheck(name, kid, False, None, f"no cosignature of witness {name} (key ID {kid.hex()})")
    if len(lines) > 1:
        return CosignatureCheck(name, kid, False, None, f"{len(lines)} cosignature lines of witness {name}")
    sig = lines[0].signature
    if len(sig) != 8 + 64:
        return CosignatureCheck(name, kid, False, None, f"the cosignature of witness {name} is {len(sig)} "
                                "bytes, not a timestamp and an Ed25519 signature (72)")
    ts = int.from_bytes(sig[:8], "big")
    if ts > MAX_TIMESTAMP:
        return CosignatureCheck(name, kid, False, ts, f"the cosignature of witness {name} has a timestamp "
                                "above 2**63 - 1")
    try:
        witness.verifier().verify(sig[8:], cosignature_message(note.text, ts))
    except InvalidSignature:
        return CosignatureCheck(name, kid, False, ts, f"the cosignature of witness {name} does not verify")
    return CosignatureCheck(name, kid, True, ts, None)


@dataclass(frozen=True)
class CosignedCheck:
    """The log key's check of a checkpoint (`log`) and each given witness's cosignature."""

    ok: bool
    log: NoteCheck
    cosignatures: tuple[CosignatureCheck, ...]
    problems: tuple[Finding, ...]

    @property
    def checkpoint(self) -> Checkpoint | None:
        return self.log.checkpoint

    def to_json(self) -> dict[str, Any]:
        out = self.log.to_json()
        out.update(ok=self.ok, cosignatures=[c.to_json() for c in self.cosignatures],
                   problems=[p.to_json() for p in self.problems])
        return out


def verify_cosigned_checkpoint(
    note: str | bytes,
    pubkey: KeyLike,
    witnesses: Iterable[WitnessLike],
    origin: str | None = None,
    quorum: int | None = None,
) -> CosignedCheck:
    """Verify a checkpoint with the log's key, and its cosignatures by `witnesses`: at least `quorum` of
    them (default: all) must verify. Lines of other keys are ignored."""
    keys = [load_witness_key(w) for w in witnesses]
    need = len(keys) if quorum is None else quorum
    if not (isinstance(need, int) and 0 <= need <= len(keys)):
        raise InvalidInput(f"quorum {quorum!r} must be between 0 and the number of witnesses ({len(keys)})")
    log = verify_checkpoint_note(note, pubkey, origin)
    found = list(log.problems)
    checks: tuple[CosignatureCheck, ...] = ()
    if log.note is not None:
        checks = tuple(check_cosignature(log.note, k) for k in keys)
        good = sum(c.ok for c in checks)
        if good < need:
            found.extend(Finding("cosignature", c.problem or "") for c in checks if not c.ok)
            found.append(Finding("cosignature", f"{good} of the {len(keys)} given witnesses cosigned, {need} needed"))
    return CosignedCheck(not found, log, checks, tuple(found))


def cosign(
    new_note: str | bytes,
    *,
    witness_key: PrivateKeyLike,
    witness_name: str,
    log_key: KeyLike,
    old_note: str | bytes | None = None,
    proof: Sequence[bytes] = (),
    origin: str | None = None,
    timestamp: int | None = None,
) -> str:
    """Act as a witness: check `new_note` with the log's key, check it extends `old_note` (the last
    checkpoint this witness saw of the log, or None if it saw none) by the consistency proof `proof`,
    and return `new_note` with this witness's cosignature line added (replacing an earlier one of the
    same key). Raises Rejected with every finding if any check fails; nothing is signed then."""
    if not valid_key_name(witness_name):
        raise InvalidInput(f"witness name {witness_name!r} must be non-empty, without spaces or '+'")
    signer = load_signing_key(witness_key)
    new = verify_checkpoint_note(new_note, log_key, origin)
    found = [Finding(p.kind, f"new checkpoint: {p.message}") for p in new.problems]
    if old_note is None:
        if proof:
            found.append(Finding("consistency", "a consistency proof was given without the old checkpoint"))
    else:
        old = verify_checkpoint_note(old_note, log_key, origin)
        found += [Finding(p.kind, f"old checkpoint: {p.message}") for p in old.problems]
        a, b = old.checkpoint, new.checkpoint
        if a is not None and b is not None:
            if a.origin != b.origin:
                found.append(Finding("origin", f"the old checkpoint is of {a.origin!r}, the new one of {b.origin!r}"))
            elif a.size > b.size:
                found.append(Finding("consistency", f"the old checkpoint's size {a.size} is above the new "
                                     f"one's {b.size}: the log went back"))
            elif not verify_consistency(a.size, b.size, a.root, b.root, proof):
                what = "the roots differ at one size" if a.size == b.size else "the consistency proof does not verify"
                found.append(Finding("consistency", f"from size {a.size} to {b.size}: {what}"))
    if found:
        raise Rejected("the witness refuses to cosign: " + "; ".join(p.message for p in found), tuple(found))
    assert new.note is not None
    ts = int(time.time()) if timestamp is None else timestamp
    line = cosign_note_text(new.note.text, witness_name, signer, ts)
    kept = tuple(s for s in new.note.signatures if (s.name, s.key_id) != (line.name, line.key_id))
    return str(Note(new.note.text, (*kept, line)))


def cosigner_vkey(name: str, key: PrivateKeyLike) -> str:
    """The vkey (type 0x04) of a witness named `name`, from its private key."""
    return VerifierKey(public_key_bytes(load_signing_key(key)), SIG_COSIGNATURE, name).vkey(name)


__all__ = [
    "CosignatureCheck",
    "CosignedCheck",
    "check_cosignature",
    "cosign",
    "cosign_note_text",
    "cosignature_message",
    "cosigner_vkey",
    "load_witness_key",
    "verify_cosigned_checkpoint",
]
