"""The chain contract's test vectors (tests/data/chain-vectors.json; the chain of docs/FORMAT.md §1), byte for byte."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from helpers.transparency_vectors import VECTORS, vector_log

from mnemo.audit import (
    export_audit,
    load_private_key,
    public_key_bytes,
    sign_checkpoint,
    verify_db,
    verify_export,
)
from mnemo.chain.codec import (
    Entry,
    checkpoint_message,
    decode_entry,
    make_entry,
    pack_record_fields,
    payload_digest,
)

BYTES_FIELDS = {"db_id", "digest", "head", "key", "sig"}


def body_of(v: dict[str, Any]) -> dict[str, Any]:
    return {k: bytes.fromhex(x) if k in BYTES_FIELDS else x for k, x in v["body"].items()}


def entry_of(v: dict[str, Any]) -> Entry:
    return make_entry(v["seq"], v["ts_ns"], bytes.fromhex(v["prev"]), v["op"], v["agent"], body_of(v))


@pytest.mark.parametrize("v", VECTORS, ids=[v["op"] for v in VECTORS])
def test_entry_bytes_and_hash(v: dict[str, Any]) -> None:
    e = entry_of(v)
    assert e.raw.hex() == v["entry_hex"]
    assert e.hash.hex() == v["hash"] == hashlib.sha256(bytes.fromhex(v["entry_hex"])).hexdigest()
    back = decode_entry(bytes.fromhex(v["entry_hex"]))
    assert (back.seq, back.ts_ns, back.prev.hex(), back.op, back.agent) == (
        v["seq"], v["ts_ns"], v["prev"], v["op"], v["agent"])
    assert back.body == body_of(v)


def test_vectors_form_a_chain() -> None:
    assert [v["seq"] for v in VECTORS] == list(range(len(VECTORS)))
    assert VECTORS[0]["prev"] == "00" * 32
    for before, after in zip(VECTORS, VECTORS[1:], strict=False):
        assert after["prev"] == before["hash"]


def test_payload_packed_and_digest() -> None:
    (v,) = [v for v in VECTORS if "payload" in v]
    p = v["payload"]
    packed = pack_record_fields(p["content"], p["tags"], p["metadata"])
    assert packed.hex() == p["packed_hex"]
    digest = payload_digest(bytes.fromhex(p["salt"]), packed)
    assert digest.hex() == p["digest"] == v["body"]["digest"]
    # tags in another order and metadata keys in another order pack to the same bytes
    shuffled = {"source": "chat", "n": {"z": 1, "a": [1, 2]}}
    assert pack_record_fields(p["content"], list(reversed(p["tags"])), shuffled) == packed


def test_checkpoint_signature_reproduces_from_the_seed() -> None:
    (v,) = [v for v in VECTORS if v["op"] == "checkpoint"]
    seed = bytes.fromhex(v["private_key_seed_hex"])
    assert seed == b"\x42" * 32
    body = body_of(v)
    msg = checkpoint_message(body["db_id"], body["seq"], body["head"])
    assert msg.hex() == v["signed_message_hex"]
    signed = sign_checkpoint(seed, body["db_id"], body["seq"], body["head"])
    assert signed == body  # Ed25519 is deterministic: the same key and message give the same signature
    assert public_key_bytes(load_private_key(seed)).hex() == v["body"]["key"]


def test_the_vector_chain_verifies(tmp_path: Path) -> None:
    db = tmp_path / "vectors.db"
    db.write_bytes(vector_log())
    key = public_key_bytes(load_private_key(b"\x42" * 32))
    report = verify_db(db, pubkey=key, expect_head=(4, VECTORS[-1]["hash"]))
    assert report.ok, report.problems
    assert (report.entries, report.head_seq, report.head_hash) == (5, 4, VECTORS[-1]["hash"])
    assert report.checkpoints == 1
    # the put at seq 1 was forgotten at seq 3 but its payload is still there: pending, not damage
    assert report.erased == 0 and any("erasure pending" in n for n in report.notes)

    out = io.StringIO()
    assert export_audit(db, out, include_content=True) == 5
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["hash"] for x in lines] == [v["hash"] for v in VECTORS]
    assert lines[1]["erased"] is True and "payload" not in lines[1]
    assert lines[1]["forgotten_by"] == {"seq": 3, "agent": "agent-1", "ts": "2025-11-30T10:53:20.000003000Z"}
    out.seek(0)
    report = verify_export(out, pubkey=key)
    assert report.ok, report.problems
    assert (report.erased, report.checkpoints) == (1, 1)
