"""The read-side checks of the chain encoding (docs/FORMAT.md §1): which entry bytes decode and which are
refused, with what message; the constants the format fixes; payloads shorter than a salt and a field;
record fields of the wrong shape; and why a payload may not be served as a version."""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack
import pytest

from mnemo.chain import codec
from mnemo.chain.codec import (
    EntryDecodeError,
    canonical,
    checkpoint_message,
    decode_entry,
    decode_put_payload,
    decode_record_fields,
    encode_forget_payload,
    make_entry,
    pack_record_fields,
    packb,
    served_digest_problem,
    served_put_problem,
    unpackb,
)

PREV = b"p" * 32


def _raw(*items: Any) -> bytes:
    return msgpack.packb(list(items), use_bin_type=True)


def _entry(version: Any = 1, seq: Any = 3, ts: Any = 5, prev: Any = PREV, op: Any = "put", agent: Any = "a",
           body: Any = None) -> bytes:
    return _raw(version, seq, ts, prev, op, agent, {"k": 1} if body is None else body)


def test_the_format_constants() -> None:
    assert codec.FORMAT_VERSION == 1
    assert codec.ZERO_HASH == b"\x00" * 32
    assert codec.SALT_SIZE == 16
    assert codec.CHECKPOINT_DOMAIN == b"mnemo-checkpoint/v1"
    assert codec.OPS == ("genesis", "put", "forget", "grant", "revoke", "checkpoint")


def test_a_well_formed_entry_decodes_to_its_fields_and_hash() -> None:
    raw = _entry()
    e = decode_entry(raw)
    assert (e.seq, e.ts_ns, e.prev, e.op, e.agent, e.body) == (3, 5, PREV, "put", "a", {"k": 1})
    assert e.raw == raw and e.hash == hashlib.sha256(raw).digest()
    assert decode_entry(_entry(seq=0, ts=-1)).seq == 0  # seq 0 and any integer time
    for op in codec.OPS:
        assert decode_entry(_entry(op=op)).op == op


@pytest.mark.parametrize(("raw", "message"), [
    (b"\xc1", "entry is not valid msgpack: "),
    (msgpack.packb({"a": 1}), "entry is not an array of 7 items"),
    (_raw(1, 3, 5, PREV, "put", "a"), "entry is not an array of 7 items"),
    (_raw(1, 3, 5, PREV, "put", "a", {}, 0), "entry is not an array of 7 items"),
    (_entry(version=2), "unknown entry format version 2"),
    (_entry(version=0), "unknown entry format version 0"),
    (_entry(version="1"), "unknown entry format version '1'"),
    (_entry(seq=-1), "entry seq or timestamp is not an integer"),
    (_entry(seq="3"), "entry seq or timestamp is not an integer"),
    (_entry(ts="5"), "entry seq or timestamp is not an integer"),
    (_entry(ts=5.0), "entry seq or timestamp is not an integer"),
    (_entry(prev=b"p" * 31), "entry prev is not 32 bytes"),
    (_entry(prev=b"p" * 33), "entry prev is not 32 bytes"),
    (_entry(prev="p" * 32), "entry prev is not 32 bytes"),
    (_entry(op="erase"), "entry op 'erase', agent or body has the wrong type"),
    (_entry(agent=7), "entry op 'put', agent or body has the wrong type"),
    (_entry(body=[1]), "entry op 'put', agent or body has the wrong type"),
])
def test_a_malformed_entry_is_refused_with_its_reason(raw: bytes, message: str) -> None:
    with pytest.raises(EntryDecodeError) as exc:
        decode_entry(raw)
    assert str(exc.value).startswith(message)
    if not message.endswith(": "):
        assert str(exc.value) == message


def test_canonical_sorts_every_map_at_every_depth() -> None:
    value = {"b": [{"z": 1, "y": (2, {"d": 0, "c": 1})}], "a": {"q": 1, "p": 2}}
    out = canonical(value)
    assert out == {"a": {"p": 2, "q": 1}, "b": [{"y": [2, {"c": 1, "d": 0}], "z": 1}]}
    assert list(out) == ["a", "b"]
    assert list(out["a"]) == ["p", "q"]
    assert list(out["b"][0]) == ["y", "z"]
    assert list(out["b"][0]["y"][1]) == ["c", "d"]
    assert out["b"][0]["y"] == [2, {"c": 1, "d": 0}]  # a tuple is packed as a list
    assert canonical(7) == 7 and canonical("s") == "s" and canonical(None) is None


def test_packing_is_canonical_msgpack_with_bin_type() -> None:
    value = {"b": b"\x00", "a": "x"}
    assert packb(value) == msgpack.packb({"a": "x", "b": b"\x00"}, use_bin_type=True)
    assert codec.pack_canonical({"b": 1, "a": 2}) == msgpack.packb({"b": 1, "a": 2}, use_bin_type=True)
    assert unpackb(packb(value)) == value
    assert unpackb(msgpack.packb({1: "int key"})) == {1: "int key"}  # map keys need not be strings
    assert encode_forget_payload("why") == msgpack.packb({"reason": "why"}, use_bin_type=True)
    assert encode_forget_payload(None) == msgpack.packb({"reason": None}, use_bin_type=True)


def test_an_entry_made_untrusted_is_canonicalised_and_a_trusted_one_is_packed_as_given() -> None:
    body = {"b": 1, "a": 2}
    made = make_entry(1, 2, PREV, "put", "a", body)
    assert list(made.body) == ["a", "b"]
    assert made.raw == _raw(1, 1, 2, PREV, "put", "a", {"a": 2, "b": 1})
    assert made.hash == hashlib.sha256(made.raw).digest()
    trusted = make_entry(1, 2, PREV, "put", "a", body, trusted=True)
    assert trusted.raw == _raw(1, 1, 2, PREV, "put", "a", {"b": 1, "a": 2})
    assert decode_entry(made.raw) == made


def test_record_fields_pack_sorted_and_decode_back() -> None:
    packed = pack_record_fields("c", ["b", "a"], {"y": 1, "x": {"q": 0, "p": 1}})
    assert packed == msgpack.packb(["c", ["a", "b"], {"x": {"p": 1, "q": 0}, "y": 1}], use_bin_type=True)
    assert pack_record_fields(b"raw", [], {}) == msgpack.packb([b"raw", [], {}], use_bin_type=True)
    assert decode_record_fields(packed) == ("c", ("a", "b"), {"x": {"p": 1, "q": 0}, "y": 1})
    assert decode_record_fields(msgpack.packb([b"bytes", [], {}], use_bin_type=True)) == (b"bytes", (), {})


@pytest.mark.parametrize(("fields", "message"), [
    (["c", []], "packed record fields are not an array of 3"),
    (["c", [], {}, 1], "packed record fields are not an array of 3"),
    ({"c": 1}, "packed record fields are not an array of 3"),
    ([1, [], {}], "packed record fields have the wrong types"),
    (["c", "t", {}], "packed record fields have the wrong types"),
    (["c", [], []], "packed record fields have the wrong types"),
])
def test_record_fields_of_the_wrong_shape_are_refused(fields: Any, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        decode_record_fields(msgpack.packb(fields, use_bin_type=True))
    assert str(exc.value) == message


def test_a_put_payload_is_a_salt_and_at_least_one_byte() -> None:
    salt = bytes(range(16))
    assert decode_put_payload(salt + b"x") == (salt, b"x")
    assert decode_put_payload(salt + b"xyz") == (salt, b"xyz")
    for short in (salt, salt[:15], b""):
        with pytest.raises(ValueError) as exc:
            decode_put_payload(short)
        assert str(exc.value) == "put payload is shorter than a salt and packed fields"
    digest, payload = codec.seal_put_payload(salt, b"packed")
    assert payload == salt + b"packed" == codec.encode_put_payload(salt, b"packed")
    assert digest == hashlib.sha256(salt + b"packed").digest() == codec.payload_digest(salt, b"packed")


def test_a_checkpoint_signs_domain_db_id_seq_and_head() -> None:
    db_id, head = b"i" * 16, b"h" * 32
    msg = checkpoint_message(db_id, 258, head)
    assert msg == b"mnemo-checkpoint/v1" + db_id + b"\x00\x00\x00\x00\x00\x00\x01\x02" + head
    assert len(msg) == 19 + 16 + 8 + 32


# -- served_put_problem: what a store checks before it serves a payload as a version -----------------------

SALT = b"s" * 16


def _put(rec_id: str = "r1", ver: int = 2, scope: str = "team:a", payload: bytes = SALT + b"fields",
         op: str = "put") -> tuple[bytes, bytes, bytes]:
    body = {"digest": hashlib.sha256(payload).digest(), "id": rec_id, "scope": scope, "size": 1, "ver": ver}
    e = make_entry(4, 9, PREV, op, "a", body)
    return e.raw, e.hash, payload


def test_the_put_of_that_version_serves_its_payload() -> None:
    raw, h, payload = _put()
    assert served_put_problem(raw, h, "r1", 2, "team:a", payload) is None
    assert served_put_problem(memoryview(raw), h, "r1", 2, "team:a", memoryview(payload)) is None


def test_entry_bytes_that_are_not_the_chains_are_refused() -> None:
    raw, h, payload = _put()
    assert served_put_problem(raw + b"x", h, "r1", 2, "team:a", payload) == (
        "its entry does not hash to the chain hash of that version")
    assert served_put_problem(raw, hashlib.sha256(b"other").digest(), "r1", 2, "team:a", payload) == (
        "its entry does not hash to the chain hash of that version")


def test_entry_bytes_that_do_not_decode_are_refused() -> None:
    for raw in (b"\xc1", msgpack.packb([1, 2]), msgpack.packb(7)):
        assert served_put_problem(raw, hashlib.sha256(raw).digest(), "r1", 2, "team:a", SALT + b"x") == (
            "its entry does not decode")


@pytest.mark.parametrize(("rec_id", "ver", "scope"), [("r2", 2, "team:a"), ("r1", 1, "team:a"), ("r1", 3, "team:a"),
                                                      ("r1", 2, "team:b")])
def test_the_put_of_another_record_version_or_scope_is_refused(rec_id: str, ver: int, scope: str) -> None:
    raw, h, payload = _put()
    assert served_put_problem(raw, h, rec_id, ver, scope, payload) == (
        f"its entry is not the put of record {rec_id} version {ver} in scope {scope}")


def test_an_entry_that_is_not_a_put_is_refused() -> None:
    raw, h, payload = _put(op="grant")
    assert served_put_problem(raw, h, "r1", 2, "team:a", payload) == (
        "its entry is not the put of record r1 version 2 in scope team:a")
    raw = _raw(1, 4, 9, PREV, "put", "a", ["not", "a", "map"])
    assert served_put_problem(raw, hashlib.sha256(raw).digest(), "r1", 2, "team:a", payload) == (
        "its entry is not the put of record r1 version 2 in scope team:a")


def test_a_payload_that_is_not_the_one_the_digest_commits_to_is_refused() -> None:
    raw, h, payload = _put()
    for other in (payload + b"x", payload[:-1], SALT.replace(b"s", b"t") + b"fields"):
        assert served_put_problem(raw, h, "r1", 2, "team:a", other) == (
            "it does not match the digest its chain entry commits to")


def test_a_payload_without_packed_fields_is_refused_though_its_digest_matches() -> None:
    raw, h, payload = _put(payload=SALT)
    assert served_put_problem(raw, h, "r1", 2, "team:a", payload) == "it is shorter than a salt and packed fields"
    raw, h, payload = _put(payload=SALT + b"\xc0")  # one byte of packed fields: served, then decoded
    assert served_put_problem(raw, h, "r1", 2, "team:a", payload) is None


def test_a_payload_known_by_its_digest_and_length_is_checked_as_the_payload_itself() -> None:
    """What PostgreSQL checks a payload it does not send by: its SHA-256 and length, computed by the server."""
    raw, h, payload = _put()
    digest = hashlib.sha256(payload).digest()
    assert served_digest_problem(raw, h, "r1", 2, "team:a", digest, len(payload)) is None
    assert served_digest_problem(raw, h, "r1", 2, "team:b", digest, len(payload)) == (
        "its entry is not the put of record r1 version 2 in scope team:b")
    assert served_digest_problem(raw, h, "r1", 2, "team:a", hashlib.sha256(payload + b"x").digest(), len(payload)) == (
        "it does not match the digest its chain entry commits to")
    raw, h, payload = _put(payload=SALT)
    assert served_digest_problem(raw, h, "r1", 2, "team:a", hashlib.sha256(SALT).digest(), 16) == (
        "it is shorter than a salt and packed fields")
    assert served_digest_problem(raw, h, "r1", 2, "team:a", hashlib.sha256(SALT).digest(), 17) is None
