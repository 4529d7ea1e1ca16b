"""Checks on everything a caller passes in: types, limits, JSON-compatibility. Each failure is an
InvalidInput naming the argument, raised before anything is written."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .errors import InvalidInput
from .storage.codec import pack_canonical

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


@dataclass(frozen=True)
class Limits:
    """Configurable bounds on what one record may hold (README.md, "Limits")."""

    max_content_bytes: int = 1 << 20
    max_tag_chars: int = 2048
    max_tags: int = 256
    max_metadata_bytes: int = 64 << 10
    max_id_chars: int = 256


def check_name(value: Any, what: str, limit: int = 256) -> str:
    """Agent ids, principals and scopes: non-empty text of printable characters."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > limit:
        raise InvalidInput(f"{what} is {len(value)} characters, over the limit of {limit}")
    if any(unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") for ch in value):
        raise InvalidInput(f"{what} {value!r} contains control or invalid characters")
    return value


def check_scope(value: Any, what: str = "scope") -> str:
    check_name(value, what)
    if "*" in value:
        raise InvalidInput(f"{what} {value!r} must not contain `*` (patterns are for grants)")
    return str(value)


def check_content(content: Any, limits: Limits) -> tuple[str | bytes, int]:
    if isinstance(content, str):
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidInput("content contains lone surrogates and cannot be stored as UTF-8") from None
    elif isinstance(content, bytes):
        size = len(content)
    else:
        raise InvalidInput(f"content must be str or bytes, got {type(content).__name__}")
    if size > limits.max_content_bytes:
        raise InvalidInput(f"content is {size} bytes, over the limit of {limits.max_content_bytes} bytes")
    return content, size


def check_tags(tags: Any, limits: Limits, what: str = "tags") -> tuple[str, ...]:
    """The distinct tags, sorted (the form that is packed and returned)."""
    if type(tags) not in (tuple, list) and (isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable)):
        raise InvalidInput(f"{what} must be a list of strings, got {type(tags).__name__}")
    out = set()
    max_chars = limits.max_tag_chars
    for tag in tags:
        # A short ASCII str, the usual tag, passes every check below: skip them (encoding included).
        if not (type(tag) is str and tag.isascii() and 0 < len(tag) <= max_chars):
            _check_tag(tag, limits)
        out.add(tag)
    if len(out) > limits.max_tags:
        raise InvalidInput(f"{len(out)} tags, over the limit of {limits.max_tags}")
    return tuple(sorted(out))


def _check_tag(tag: Any, limits: Limits) -> None:
    if not isinstance(tag, str) or not tag:
        raise InvalidInput(f"every tag must be a non-empty string, got {tag!r}")
    if len(tag) > limits.max_tag_chars:
        raise InvalidInput(f"a tag is {len(tag)} characters, over the limit of {limits.max_tag_chars}")
    try:
        tag.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"tag {tag!r} contains lone surrogates") from None


def _check_text(value: str, path: str) -> None:
    if not value.isascii():  # ASCII always encodes; only the rest can hold lone surrogates
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(f"metadata {path} contains lone surrogates") from None


def _canonical_json(value: Any, path: str, depth: int = 0) -> Any:
    """Check that value is JSON-compatible and return it in canonical form (every map's keys sorted,
    tuples as lists), the form that is packed and returned: one walk does both."""
    if depth > 32:
        raise InvalidInput(f"metadata nests deeper than 32 levels at {path}")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        _check_text(value, path)
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise InvalidInput(f"metadata {path} is an integer out of the 64-bit range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"metadata {path} is {value}, which JSON cannot hold")
        return value
    if isinstance(value, (list, tuple)):
        return [_canonical_json(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        items = []
        for key, item in value.items():  # checked in the caller's order, so the first error is its first
            if not isinstance(key, str):
                raise InvalidInput(f"metadata keys must be strings, got {key!r} at {path}")
            if depth + 1 > 32:
                raise InvalidInput(f"metadata nests deeper than 32 levels at {path} key")
            if not key.isascii():
                _check_text(key, f"{path} key")
            cls = type(item)
            if (cls is str and item.isascii()) or (cls is int and _INT_MIN <= item <= _INT_MAX) or item is None:
                items.append((key, item))  # the usual flat value: nothing to check or convert
            else:
                items.append((key, _canonical_json(item, f"{path}.{key}", depth + 1)))
        items.sort()  # keys are distinct, so only keys are ever compared
        return dict(items)
    raise InvalidInput(f"metadata {path} is a {type(value).__name__}, which is not JSON-compatible")


def canonical_metadata(metadata: Any) -> dict[str, Any]:
    """The metadata, checked to be a JSON-compatible map, as a new dict in canonical form (keys
    sorted, recursively): callers pack and return it as it is, without canonicalising again.
    Its size is checked apart (check_metadata_size), once it is packed."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InvalidInput(f"metadata must be a dict, got {type(metadata).__name__}")
    canonical: dict[str, Any] = _canonical_json(metadata, "metadata")
    return canonical


def check_metadata_size(metadata: dict[str, Any], limits: Limits, packed_fields: bytes | None = None) -> None:
    """Refuse metadata over the size limit, packed. `packed_fields`, a record's packed fields, hold
    the packed metadata: when they fit in the limit it does too, and needs no packing of its own."""
    if packed_fields is not None and len(packed_fields) <= limits.max_metadata_bytes:
        return
    size = len(pack_canonical(metadata))
    if size > limits.max_metadata_bytes:
        raise InvalidInput(f"metadata is {size} bytes packed, over the limit of {limits.max_metadata_bytes}")


def check_metadata(metadata: Any, limits: Limits) -> dict[str, Any]:
    """canonical_metadata, with its size checked."""
    canonical = canonical_metadata(metadata)
    check_metadata_size(canonical, limits)
    return canonical


def check_ids(ids: Any) -> list[str]:
    if isinstance(ids, str):
        ids = [ids]
    if isinstance(ids, bytes) or not isinstance(ids, Iterable):
        raise InvalidInput(f"ids must be a string or a list of strings, got {type(ids).__name__}")
    out: dict[str, None] = {}  # ordered and de-duplicated in linear time
    for rec_id in ids:
        if not isinstance(rec_id, str):
            raise InvalidInput(f"a record id must be a string, got {rec_id!r}")
        out[rec_id] = None
    return list(out)


def check_optional_str(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string or None, got {type(value).__name__}")
    return value
