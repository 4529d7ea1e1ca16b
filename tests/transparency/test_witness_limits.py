"""Witness cosignatures at their limits, played by an attacker: timestamps at 1 and 2**63 - 1 and past
them, a witness key under another name, a quorum of 0 and of every witness, and what a check reports."""

from __future__ import annotations

import base64
import dataclasses

import pytest
from helpers.transparency_vectors import NOTE_5, ORIGIN, PUBKEY

from mnemo.audit import load_private_key, public_key_bytes
from mnemo.errors import InvalidInput
from mnemo.transparency.cosign import (
    check_cosignature,
    cosign,
    cosign_note_text,
    cosignature_message,
    cosigner_vkey,
    load_witness_key,
    verify_cosigned_checkpoint,
)
from mnemo.transparency.keys import SIG_COSIGNATURE, VerifierKey, key_id, vkey
from mnemo.transparency.note import NoteSignature, parse_note

W1, W2 = b"\x11" * 32, b"\x22" * 32
W1_PUB, W2_PUB = (public_key_bytes(load_private_key(k)) for k in (W1, W2))
N1, N2 = "witness.example/w1", "witness.example/w2"
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
