"""The rules every chain keeps, whatever stores it (docs/FORMAT.md §5.1): entry bodies of the right shape,
put payloads that match their digests, and checkpoints whose signatures verify. Each backend's
verification and the audit export's apply them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..acl import PERMISSIONS
from .codec import checkpoint_message, decode_record_fields, payload_digest


def short_hash(h: bytes | str, n: int = 12) -> str:
    """The first `n` hex digits of a hash, as findings name one."""
    return (h.hex() if isinstance(h, bytes) else h)[:n]


def _content_size(content: str | bytes) -> int:
    return len(content.encode("utf-8", "surrogatepass")) if isinstance(content, str) else len(content)


# -- entry bodies ----------------------------------------------------------------------------------------


def _is_bin(n: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, bytes) and len(v) == n


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


_BODIES: dict[str, dict[str, Callable[[Any], bool]]] = {
    "genesis": {"db_id": _is_bin(16), "format": _is_int},
    "put": {"digest": _is_bin(32), "id": _is_str, "scope": _is_str, "size": _is_int, "ver": _is_int},
    "forget": {"ids": _is_str_list},
    "grant": {"perms": _is_str_list, "principal": _is_str, "scope": _is_str},
    "revoke": {"perms": _is_str_list, "principal": _is_str, "scope": _is_str},
    "checkpoint": {
        "db_id": _is_bin(16), "head": _is_bin(32), "key": _is_bin(32), "seq": _is_int, "sig": _is_bin(64),
    },
}


_BODY_KEYS = {op: frozenset(schema) for op, schema in _BODIES.items()}


def body_problem(op: str, body: dict[str, Any]) -> str | None:
    """Why `body` is not a well-formed body of `op`, or None."""
    schema = _BODIES[op]
    if body.keys() == _BODY_KEYS[op]:
        for check_field in schema.items():
            if not check_field[1](body[check_field[0]]):
                break
        else:
            if op == "put":
                return None if body["ver"] >= 1 else "put version must be at least 1"
            if op not in ("grant", "revoke"):
                return None
    missing = sorted(set(schema) - set(body))
    extra = sorted(str(k) for k in set(body) - set(schema))
    if missing or extra:
        parts = ([f"lacks {', '.join(missing)}"] if missing else []) + (
            [f"has unknown {', '.join(extra)}"] if extra else []
        )
        return f"{op} body {' and '.join(parts)}"
    bad = [k for k, check in schema.items() if not check(body[k])]
    if bad:
        return f"{op} body field {', '.join(bad)} has the wrong type"
    if op in ("grant", "revoke"):
        perms = body["perms"]
        if perms != sorted(set(perms)) or not set(perms) <= set(PERMISSIONS):
            return f"{op} perms {perms!r} are not a sorted set of {', '.join(PERMISSIONS)}"
    if op == "put" and body["ver"] < 1:
        return "put version must be at least 1"
    return None


def packed_problems(body: dict[str, Any], salt: bytes, packed: bytes) -> tuple[list[str], Any]:
    """Check a put payload against its body; (messages, (content, tags, metadata) or None)."""
    msgs: list[str] = []
    if payload_digest(salt, packed) != body["digest"]:
        msgs.append("payload digest SHA-256(salt + packed) does not match the put's digest")
    try:
        content, tags, metadata = decode_record_fields(packed)
    except Exception as exc:
        msgs.append(f"packed record fields do not decode: {exc}")
        return msgs, None
    if _content_size(content) != body["size"]:
        msgs.append(f"content is {_content_size(content)} bytes, the put says {body['size']}")
    tag_list = list(tags)
    if not set(map(type, tag_list)) <= {str} or tag_list != sorted(tag_list):
        msgs.append("packed tags are not a sorted list of strings")
    return msgs, (content, tags, metadata)


def checkpoint_findings(
    entry_seq: int, prev: bytes, body: dict[str, Any], db_id: bytes | None, pubkey: bytes | None
) -> list[tuple[str, str]]:
    """(kind, message) for everything wrong with a well-typed checkpoint body; empty when it verifies."""
    found: list[tuple[str, str]] = []
    if db_id is not None and body["db_id"] != db_id:
        found.append(("checkpoint", f"checkpoint names db_id {body['db_id'].hex()}, not {db_id.hex()}"))
    if body["seq"] != entry_seq - 1 or body["head"] != prev:
        found.append((
            "checkpoint",
            f"checkpoint signs seq {body['seq']} head {short_hash(body['head'])}, not the entry before it "
            f"(seq {entry_seq - 1}, {short_hash(prev)})",
        ))
    try:
        Ed25519PublicKey.from_public_bytes(body["key"]).verify(
            body["sig"], checkpoint_message(body["db_id"], body["seq"], body["head"])
        )
    except (InvalidSignature, ValueError):
        found.append(
            ("checkpoint-signature", f"checkpoint signature does not verify with key {body['key'].hex()}")
        )
    if pubkey is not None and body["key"] != pubkey:
        found.append(("checkpoint-key", f"checkpoint signed by key {body['key'].hex()}, not the given key"))
    return found
