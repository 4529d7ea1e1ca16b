"""Witness cosignatures (c2sp.org/tlog-cosignature, Ed25519, type 0x04): the line a witness adds, what
it refuses to cosign, and checkpoints verified with the witnesses' keys."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from helpers.transparency_vectors import ENTRIES, NOTE_5, ORIGIN, PUBKEY, SEED

from mnemo.audit import load_private_key, public_key_bytes
from mnemo.errors import InvalidInput
from mnemo.transparency.commands import cosign_checkpoint
from mnemo.transparency.consistency import ConsistencyProof
from mnemo.transparency.cosign import (
    check_cosignature,
    cosign,
    cosignature_message,
    cosigner_vkey,
    load_witness_key,
    verify_cosigned_checkpoint,
)
from mnemo.transparency.errors import Rejected, UsageError
from mnemo.transparency.keys import SIG_COSIGNATURE, key_id
from mnemo.transparency.note import parse_checkpoint, parse_note, sign_checkpoint_note, verify_checkpoint_note
from mnemo.transparency.tree import HashList, leaf_hash

LEAVES = HashList([leaf_hash(e) for e in ENTRIES])
W1, W2 = b"\x11" * 32, b"\x22" * 32
W1_PUB, W2_PUB = (public_key_bytes(load_private_key(k)) for k in (W1, W2))
N1, N2 = "witness.example/w1", "witness.example/w2"
T = 1_700_000_000


def note(size: int, key: bytes = SEED, origin: str = ORIGIN) -> str:
    return sign_checkpoint_note(origin, size, LEAVES.root(size), key)


def proof(old: int, new: int) -> list[bytes]:
    return LEAVES.consistency_proof(old, new)


def test_the_cosignature_line() -> None:
    cosigned = cosign(NOTE_5, witness_key=W1, witness_name=N1, log_key=PUBKEY, timestamp=T)
    assert cosigned.startswith(NOTE_5)  # the log's line stays, the witness's follows
    line = cosigned[len(NOTE_5):]
    assert line.startswith(f"\u2014 {N1} ") and line.endswith("\n") and line.count("\n") == 1
    blob = base64.b64decode(line.split(" ")[2])
    assert blob[:4] == key_id(N1, W1_PUB, SIG_COSIGNATURE)
    assert blob[:4] == hashlib.sha256(N1.encode() + b"\n\x04" + W1_PUB).digest()[:4]
    assert int.from_bytes(blob[4:12], "big") == T and len(blob) == 4 + 8 + 64
    text = NOTE_5.split("\n\n")[0] + "\n"
    assert cosignature_message(text, T) == f"cosignature/v1\ntime {T}\n".encode() + text.encode()
    Ed25519PrivateKey.from_private_bytes(W1).public_key().verify(blob[12:], cosignature_message(text, T))
    # the log-key check ignores it; the witness check finds it
    assert verify_checkpoint_note(cosigned, PUBKEY, ORIGIN).ok
    check = check_cosignature(parse_note(cosigned), load_witness_key((N1, W1_PUB)))
    assert (check.ok, check.timestamp, check.problem) == (True, T, None)


def test_cosignatures_agree_with_tlog_scales() -> None:
    pytest.importorskip("tlog_scales.tlog")
    from tlog_scales.signing import Vkey
    from tlog_scales.tlog import Checkpoint

    cosigned = cosign(NOTE_5, witness_key=W1, witness_name=N1, log_key=PUBKEY, timestamp=T)
    theirs = Vkey(N1, None, 4, W1_PUB)
    assert theirs.serialize() == cosigner_vkey(N1, W1)
    cp = Checkpoint.from_text(cosigned)
    (sig,) = [s for s in cp.signatures if theirs.match(s)]
    theirs.get_verifier().verify(sig.payload, cp)  # raises if it does not verify


def test_a_witness_cosigns_a_checkpoint_that_extends_the_last_it_saw() -> None:
    first = cosign(note(3), witness_key=W1, witness_name=N1, log_key=PUBKEY, timestamp=T)
    second = cosign(note(5), witness_key=W1, witness_name=N1, log_key=PUBKEY, old_note=first,
                    proof=proof(3, 5), timestamp=T + 60)
    assert verify_cosigned_checkpoint(second, PUBKEY, [(N1, W1_PUB)], ORIGIN).ok
    # the same size again: no proof, equal roots
    again = cosign(note(5), witness_key=W1, witness_name=N1, log_key=PUBKEY, old_note=second, timestamp=T + 61)
    assert verify_cosigned_checkpoint(again, PUBKEY, [(N1, W1_PUB)]).ok
    # cosigning a cosigned note again replaces the witness's own line, keeps the others
    both = cosign(again, witness_key=W2, witness_name=N2, log_key=PUBKEY, timestamp=T + 62)
    redone = cosign(both, witness_key=W1, witness_name=N1, log_key=PUBKEY, timestamp=T + 63)
    names = [s.name for s in parse_note(redone).signatures]
    assert names == [ORIGIN, N2, N1]
    assert check_cosignature(parse_note(redone), load_witness_key((N1, W1_PUB))).timestamp == T + 63


def refusal(**kw: object) -> list[tuple[str, str]]:
    args: dict[str, object] = {"witness_key": W1, "witness_name": N1, "log_key": PUBKEY, "timestamp": T}
    args.update(kw)
    new = args.pop("new_note", note(5))
    with pytest.raises(Rejected) as info:
        cosign(new, **args)  # type: ignore[arg-type]
    return [(p.kind, p.message) for p in info.value.problems]


def test_what_a_witness_refuses_to_cosign() -> None:
    fails = [("consistency", "from size 3 to 5: the consistency proof does not verify")]
    assert refusal(old_note=note(3), proof=[bytes(32), *proof(3, 5)[1:]]) == fails
    assert refusal(old_note=note(3), proof=[]) == fails
    assert refusal(old_note=note(5), new_note=note(3)) == [
        ("consistency", "the old checkpoint's size 5 is above the new one's 3: the log went back")]
    assert refusal(proof=proof(3, 5)) == [("consistency", "a consistency proof was given without the old checkpoint")]
    assert refusal(old_note=note(3, origin="example.com/x"), proof=proof(3, 5))[0][0] == "origin"
    found = refusal(new_note=note(5, key=W2))
    assert found and found[0][0] == "signature" and found[0][1].startswith("new checkpoint: ")
    found = refusal(old_note=note(3, key=W2), proof=proof(3, 5))
    assert found[0][0] == "signature" and found[0][1].startswith("old checkpoint: ")
    assert refusal(new_note=note(5), origin="example.com/other")[0][0] == "origin"
    # a rewritten log: a checkpoint of the same size with another root
    forked = sign_checkpoint_note(ORIGIN, 5, LEAVES.root(4), SEED)
    assert refusal(old_note=note(5), new_note=forked) == [
        ("consistency", "from size 5 to 5: the roots differ at one size")]
    # an old or new checkpoint that does not even parse is a finding, never a crash
    found = refusal(old_note="not a checkpoint\n", proof=proof(3, 5))
    assert found and found[0][1].startswith("old checkpoint: ")
    found = refusal(new_note="not a checkpoint\n", old_note=note(3), proof=proof(3, 5))
    assert found and found[0][1].startswith("new checkpoint: ")
    with pytest.raises(InvalidInput):
        cosign(note(5), witness_key=W1, witness_name="bad name", log_key=PUBKEY)
    with pytest.raises(InvalidInput) as bad_name:  # the caller's mistake comes before the checkpoint's
        cosign(note(5, key=W2), witness_key=W1, witness_name="bad name", log_key=PUBKEY, timestamp=T)
    assert str(bad_name.value) == "witness name 'bad name' must be non-empty, without spaces or '+'"
    with pytest.raises(InvalidInput):
        cosign(note(5), witness_key=W1, witness_name=N1, log_key=PUBKEY, timestamp=0)


def test_verifying_cosignatures_with_a_quorum() -> None:
    one = cosign(NOTE_5, witness_key=W1, witness_name=N1, log_key=PUBKEY, timestamp=T)
    two = cosign(one, witness_key=W2, witness_name=N2, log_key=PUBKEY, timestamp=T)
    witnesses = [(N1, W1_PUB), cosigner_vkey(N2, W2)]
    assert verify_cosigned_checkpoint(two, PUBKEY, witnesses).ok
    check = verify_cosigned_checkpoint(one, PUBKEY, witnesses)
    assert not check.ok and [(p.kind, p.message) for p in check.problems] == [
        ("cosignature", f"no cosignature of witness {N2} (key ID {key_id(N2, W2_PUB, SIG_COSIGNATURE).hex()})"),
        ("cosignature", "1 of the 2 given witnesses cosigned, 2 needed")]
    assert verify_cosigned_checkpoint(one, PUBKEY, witnesses, quorum=1).ok
    with pytest.raises(InvalidInput):
        verify_cosigned_checkpoint(one, PUBKEY, witnesses, quorum=3)
    with pytest.raises(InvalidInput):
        load_witness_key(W1_PUB.hex())  # a witness key needs its name


def test_tampered_or_duplicated_cosignatures_fail() -> None:
    one = cosign(NOTE_5, witness_key=W1, witness_name=N1, log_key=PUBKEY, timestamp=T)
    line = one[len(NOTE_5):]
    blob = bytearray(base64.b64decode(line.split(" ")[2]))
    for at, what in ((11, "does not verify"), (40, "does not verify")):  # the timestamp, the signature
        bad = bytearray(blob)
        bad[at] ^= 1
        tampered = NOTE_5 + f"\u2014 {N1} {base64.b64encode(bytes(bad)).decode()}\n"
        check = verify_cosigned_checkpoint(tampered, PUBKEY, [(N1, W1_PUB)])
        assert not check.ok and what in check.problems[0].message
    assert "2 cosignature lines" in verify_cosigned_checkpoint(one + line, PUBKEY, [(N1, W1_PUB)]).problems[0].message
    short = NOTE_5 + f"\u2014 {N1} {base64.b64encode(bytes(blob[:40])).decode()}\n"
    assert "not a timestamp and an Ed25519 signature" in verify_cosigned_checkpoint(
        short, PUBKEY, [(N1, W1_PUB)]).problems[0].message
    # the log key's check still stands on its own
    assert not verify_cosigned_checkpoint(one, b"\x01" * 32, [(N1, W1_PUB)]).ok


def test_cosign_command_with_files(tmp_path: Path) -> None:
    (tmp_path / "old").write_text(note(3))
    (tmp_path / "new").write_text(note(5))
    c = ConsistencyProof(ORIGIN, 3, 5, LEAVES.root(3), LEAVES.root(5), tuple(proof(3, 5)))
    (tmp_path / "p.json").write_text(c.to_text())
    (tmp_path / "w1").write_bytes(W1)
    out = cosign_checkpoint(tmp_path / "new", key=tmp_path / "w1", name=N1, log_pubkey=PUBKEY.hex(),
                            old=tmp_path / "old", proof=tmp_path / "p.json", timestamp=T)
    assert verify_cosigned_checkpoint(out, PUBKEY, [(N1, W1_PUB)]).ok
    assert parse_checkpoint(out)[0].size == 5
    # the proof must run between exactly these two checkpoints
    (tmp_path / "p2.json").write_text(json.dumps(dict(json.loads(c.to_text()), old_size=2)))
    with pytest.raises(Rejected, match="does not start at the old checkpoint"):
        cosign_checkpoint(tmp_path / "new", key=W1, name=N1, log_pubkey=PUBKEY, old=tmp_path / "old",
                          proof=tmp_path / "p2.json")
    with pytest.raises(UsageError):
        cosign_checkpoint(tmp_path / "new", key=W1, name=N1, log_pubkey=PUBKEY, proof=tmp_path / "p.json")
    with pytest.raises(UsageError):
        cosign_checkpoint(tmp_path / "new", key=W1, name="a b", log_pubkey=PUBKEY)


def test_cosignature_verdicts_are_values_that_cannot_be_changed() -> None:
    import dataclasses

    one = cosign(NOTE_5, witness_key=W1, witness_name=N1, log_key=PUBKEY, timestamp=T)
    check = verify_cosigned_checkpoint(one, PUBKEY, [(N1, W1_PUB)])
    assert check.ok and check.cosignatures[0].ok
    for value, field in ((check, "ok"), (check.cosignatures[0], "ok")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, False)
    assert verify_cosigned_checkpoint(one, PUBKEY, [(N1, W1_PUB)]) == check
