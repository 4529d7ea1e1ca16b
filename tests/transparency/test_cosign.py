"""Witness cosignatures (c2sp.org/tlog-cosignature, Ed25519, type 0x04): the line a witness adds, what
it refuses to cosign, and checkpoints verified with the witnesses' keys.

Witness cosignatures at their limits, played by an attacker: timestamps at 1 and 2**63 - 1 and past
them, a witness key under another name, a quorum of 0 and of every witness, and what a check reports."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from helpers.transparency_vectors import ENTRIES, NOTE_5, ORIGIN, PUBKEY, SEED

from mnemo.audit import load_private_key, public_key_bytes
from mnemo.chain.tree import HashList, leaf_hash
from mnemo.errors import InvalidInput
from mnemo.transparency.commands import cosign_checkpoint
from mnemo.transparency.consistency import ConsistencyProof
from mnemo.transparency.cosign import (
    check_cosignature,
    cosign,
    cosign_note_text,
    cosignature_message,
    cosigner_vkey,
    load_witness_key,
    verify_cosigned_checkpoint,
)
from mnemo.transparency.errors import Rejected, UsageError
from mnemo.transparency.keys import SIG_COSIGNATURE, VerifierKey, key_id, vkey
from mnemo.transparency.note import (
    NoteSignature,
    parse_checkpoint,
    parse_note,
    sign_checkpoint_note,
    verify_checkpoint_note,
)

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


TEXT = NOTE_5.split("\n\n")[0] + "\n"


MAX = (1 << 63) - 1


def cosigned_at(ts: int) -> str:
    return cosign(NOTE_5, witness_key=W1, witness_name=N1, log_key=PUBKEY, timestamp=ts)


def w1_check(note: str) -> tuple[bool, int | None, str | None]:
    c = check_cosignature(parse_note(note), load_witness_key((N1, W1_PUB)))
    return c.ok, c.timestamp, c.problem


@pytest.mark.parametrize("ts", [1, 2, MAX - 1, MAX])
def test_every_timestamp_from_1_to_the_largest_is_cosigned_and_verifies(ts: int) -> None:
    note = cosigned_at(ts)
    assert w1_check(note) == (True, ts, None)
    assert verify_cosigned_checkpoint(note, PUBKEY, [(N1, W1_PUB)]).ok


@pytest.mark.parametrize("ts", [0, -1, MAX + 1, True, 1.0, None])
def test_a_timestamp_outside_1_to_the_largest_is_not_signed(ts: object) -> None:
    with pytest.raises(InvalidInput) as info:
        cosign_note_text(TEXT, N1, W1, ts)  # type: ignore[arg-type]
    assert str(info.value) == "a cosignature's timestamp is between 1 and 2**63 - 1 seconds"


def forged_line(ts: int) -> str:
    """The line a witness would write at timestamp `ts`, signed over that timestamp whatever it is."""
    sk = load_private_key(W1)
    sig = sk.sign(cosignature_message(TEXT, ts))
    return NoteSignature(N1, key_id(N1, W1_PUB, SIG_COSIGNATURE), ts.to_bytes(8, "big") + sig).line()


def test_a_timestamp_past_the_largest_is_refused_even_when_signed() -> None:
    assert w1_check(NOTE_5 + forged_line(MAX)) == (True, MAX, None)
    for ts in (MAX + 1, (1 << 64) - 1):
        assert w1_check(NOTE_5 + forged_line(ts)) == (
            False, ts, f"the cosignature of witness {N1} has a timestamp above 2**63 - 1")
        check = verify_cosigned_checkpoint(NOTE_5 + forged_line(ts), PUBKEY, [(N1, W1_PUB)])
        assert [(p.kind, p.message) for p in check.problems] == [
            ("cosignature", f"the cosignature of witness {N1} has a timestamp above 2**63 - 1"),
            ("cosignature", "0 of the 1 given witnesses cosigned, 1 needed")]


def test_a_cosignature_of_the_wrong_length() -> None:
    line = cosigned_at(1_700_000_000)[len(NOTE_5):]
    blob = base64.b64decode(line.split(" ")[2])
    for cut in (blob[:-1], blob + b"\x00", blob[:4 + 8]):
        bad = NOTE_5 + f"\u2014 {N1} {base64.b64encode(cut).decode()}\n"
        assert w1_check(bad) == (False, None, f"the cosignature of witness {N1} is {len(cut) - 4} bytes, not a "
                                              "timestamp and an Ed25519 signature (72)")


# -- witness keys and names -------------------------------------------------------------------------------


def test_a_witness_key_takes_the_name_it_is_given() -> None:
    own = load_witness_key((N1, cosigner_vkey(N1, W1)))
    assert (own.name, own.id_for(N1), own.public_key) == (N1, key_id(N1, W1_PUB, SIG_COSIGNATURE), W1_PUB)
    renamed = load_witness_key((N2, cosigner_vkey(N1, W1)))  # W1's key, under the name N2
    assert (renamed.name, renamed.id_for(N2)) == (N2, key_id(N2, W1_PUB, SIG_COSIGNATURE))
    note = cosigned_at(1_700_000_000)
    assert check_cosignature(parse_note(note), renamed).problem == (
        f"no cosignature of witness {N2} (key ID {key_id(N2, W1_PUB, SIG_COSIGNATURE).hex()})")
    assert check_cosignature(parse_note(note), own).ok
    # a vkey's own key ID stands when the name is its own: a forged ID finds no line
    forged = vkey(N1, W1_PUB, SIG_COSIGNATURE).split("+")
    forged[1] = "00000000"
    key = load_witness_key((N1, "+".join(forged)))
    assert key.key_id == b"\x00" * 4 and not check_cosignature(parse_note(note), key).ok
    from_vkey = load_witness_key(cosigner_vkey(N1, W1))
    assert (from_vkey.name, from_vkey.id_for(N1)) == (N1, key_id(N1, W1_PUB, SIG_COSIGNATURE))
    assert load_witness_key(VerifierKey(W1_PUB, SIG_COSIGNATURE, N1)).name == N1
    for bad in ("", "a b", "a+b"):
        with pytest.raises(InvalidInput) as info:
            load_witness_key((bad, W1_PUB))
        assert str(info.value) == f"witness name {bad!r} must be non-empty, without spaces or '+'"
    with pytest.raises(InvalidInput) as info:
        load_witness_key(W1_PUB.hex())
    assert str(info.value) == "a witness key needs its name: give a vkey or (name, key)"


def test_a_witness_name_must_be_a_key_name() -> None:
    for bad in ("", "a b", "a+b"):
        with pytest.raises(InvalidInput) as info:
            cosign_note_text(TEXT, bad, W1, 1)
        assert str(info.value) == f"witness name {bad!r} must be non-empty, without spaces or '+'"
        with pytest.raises(InvalidInput) as info:
            cosign(NOTE_5, witness_key=W1, witness_name=bad, log_key=PUBKEY, timestamp=1)
        assert str(info.value) == f"witness name {bad!r} must be non-empty, without spaces or '+'"


# -- the quorum ----------------------------------------------------------------------------------------------


def test_a_quorum_from_0_to_every_witness() -> None:
    one = cosigned_at(1_700_000_000)
    witnesses = [(N1, W1_PUB), (N2, W2_PUB)]
    assert verify_cosigned_checkpoint(NOTE_5, PUBKEY, witnesses, quorum=0).ok  # the log's key alone
    assert verify_cosigned_checkpoint(one, PUBKEY, witnesses, quorum=1).ok
    check = verify_cosigned_checkpoint(one, PUBKEY, witnesses, quorum=2)
    assert [(p.kind, p.message) for p in check.problems] == [
        ("cosignature", f"no cosignature of witness {N2} (key ID {key_id(N2, W2_PUB, SIG_COSIGNATURE).hex()})"),
        ("cosignature", "1 of the 2 given witnesses cosigned, 2 needed")]
    assert verify_cosigned_checkpoint(NOTE_5, PUBKEY, []).ok  # no witnesses asked for: none needed
    for bad in (-1, 3, 2.0, "1"):
        with pytest.raises(InvalidInput) as info:
            verify_cosigned_checkpoint(one, PUBKEY, witnesses, quorum=bad)  # type: ignore[arg-type]
        assert str(info.value) == f"quorum {bad!r} must be between 0 and the number of witnesses (2)"


def test_a_malformed_note_is_reported_before_any_cosignature() -> None:
    check = verify_cosigned_checkpoint("garbage", PUBKEY, [(N1, W1_PUB)])
    assert not check.ok and check.cosignatures == () and check.checkpoint is None
    assert [(p.kind, p.message) for p in check.problems] == [
        ("note", "the note has no blank line before its signature lines")]


# -- what a check reports ------------------------------------------------------------------------------------


def test_a_cosigned_check_as_json() -> None:
    note = cosigned_at(1_700_000_000)
    check = verify_cosigned_checkpoint(note, PUBKEY, [(N1, W1_PUB), (N2, W2_PUB)], quorum=1)
    out = check.to_json()
    assert out["ok"] is True and out["origin"] == ORIGIN and out["tree_size"] == 5 and out["problems"] == []
    assert out["cosignatures"] == [
        {"name": N1, "key_id": key_id(N1, W1_PUB, SIG_COSIGNATURE).hex(), "ok": True, "timestamp": 1_700_000_000,
         "problem": None},
        {"name": N2, "key_id": key_id(N2, W2_PUB, SIG_COSIGNATURE).hex(), "ok": False, "timestamp": None,
         "problem": f"no cosignature of witness {N2} (key ID {key_id(N2, W2_PUB, SIG_COSIGNATURE).hex()})"}]
    assert check.checkpoint is not None and check.checkpoint.size == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        check.ok = False  # type: ignore[misc]
    assert hash(check) == hash(verify_cosigned_checkpoint(note, PUBKEY, [(N1, W1_PUB), (N2, W2_PUB)], quorum=1))
