"""Errors, formatting and the shape checks of entry bodies and payloads, shared by every verifier."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Union

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..acl import PERMISSIONS
from ..chain.codec import (
    decode_record_fields,
    payload_digest,
)
from ..errors import MnemoError

PrivateKeyLike = Union[Ed25519PrivateKey, bytes, str, "os.PathLike[str]"]
PublicKeyLike = Union[Ed25519PublicKey, bytes, str, "os.PathLike[str]"]


class UnreadableDatabase(MnemoError):
    """The database file cannot be opened or read at all (missing, a directory, no permission, I/O error).

    Damage inside a readable file is never this: it is a Problem in the VerifyReport."""


class UnreadableExport(MnemoError):
    """The export file cannot be opened or read at all."""


class KeyFileError(MnemoError, ValueError):
    """A key file or key string is missing, unreadable or not an Ed25519 key."""


# -- small formatting helpers --------------------------------------------------------------------------


def format_ts(ts_ns: int) -> str:
    """RFC 3339 UTC with all nine fractional digits, e.g. 2025-11-30T10:53:20.000000001Z."""
    secs, frac = divmod(ts_ns, 1_000_000_000)
    try:
        whole = datetime.fromtimestamp(secs, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"{ts_ns}ns"  # outside what a calendar date can say; still unambiguous
    return f"{whole}.{frac:09d}Z"


def jsonable(value: Any) -> Any:
    """The JSON form of a decoded msgpack value: bytes as hex, map keys as str, tuples as lists."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {(k.hex() if isinstance(k, bytes) else str(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    return repr(value)


def _short(h: bytes | str, n: int = 12) -> str:
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


def _body_problem(op: str, body: dict[str, Any]) -> str | None:
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


def _packed_problems(body: dict[str, Any], salt: bytes, packed: bytes) -> tuple[list[str], Any]:
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
