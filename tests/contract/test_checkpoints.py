"""Signed checkpoints written by the client: on checkpoint(), every N entries, and on close; checked by
verify with the right key, and refused with another. On both backends."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from helpers.backends import entries as read_entries

from mnemo import MnemoClient
from mnemo.audit import verify_db
from mnemo.chain.codec import checkpoint_message

SEED = b"\x07" * 32


def _pub(seed: bytes) -> bytes:
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def checkpoints(db: str) -> list[int]:
    return [e.seq for e in read_entries(db) if e.op == "checkpoint"]


def test_checkpoint_every_n_entries_and_on_close(db: str) -> None:
    with MnemoClient(db, "owner", durability="none", signing_key=SEED, checkpoint_every=10) as c:
        for i in range(25):
            c.remember(f"r{i}")
        assert len(checkpoints(db)) == 2  # after the 10th and the 20th write
        explicit = c.checkpoint()
        assert explicit is not None and checkpoints(db)[-1] == explicit
        c.remember("after the explicit one")
    cps = checkpoints(db)
    assert len(cps) == 4 and cps[-1] == read_entries(db)[-1].seq  # close signs the head
    report = verify_db(db, pubkey=_pub(SEED))
    assert report.ok, report.problems
    assert report.checkpoints == 4


def test_checkpoint_body_signs_the_entry_before_it(db: str) -> None:
    with MnemoClient(db, "owner", durability="none", signing_key=SEED) as c:
        c.remember("x")
        seq = c.checkpoint()
    entries = read_entries(db)
    cp = entries[seq]  # type: ignore[index]
    before = entries[seq - 1]  # type: ignore[operator]
    assert cp.body["seq"] == before.seq and cp.body["head"] == before.hash
    assert cp.body["key"] == _pub(SEED)
    message = checkpoint_message(cp.body["db_id"], before.seq, before.hash)
    Ed25519PrivateKey.from_private_bytes(SEED).public_key().verify(cp.body["sig"], message)


def test_verify_with_another_key_fails_and_without_a_key_passes(db: str) -> None:
    with MnemoClient(db, "owner", durability="none", signing_key=SEED) as c:
        c.remember("x")
    assert verify_db(db).ok
    report = verify_db(db, pubkey=_pub(b"\x08" * 32))
    assert not report.ok
    assert {p.kind for p in report.problems} >= {"unsigned"}


def test_no_signing_key_writes_no_checkpoint(db: str) -> None:
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("x")
        assert c.checkpoint() is None
    assert checkpoints(db) == []
