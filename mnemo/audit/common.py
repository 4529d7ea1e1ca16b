"""The audit's errors and the formatting its exports and reports share (times, JSON values)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from ..errors import MnemoError


class UnreadableExport(MnemoError):
    """The export file cannot be opened or read at all."""


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


def entry_summary(op: str, body: dict[str, Any]) -> str:
    """One line on what a chain entry did (`mnemo log`, the UI's chain page); entries hold no content,
    only ids, scopes and digests. A body of an unexpected shape is shown as its JSON."""
    try:
        if op == "genesis":
            return f"db_id {body['db_id'].hex()} format {body['format']}"
        if op == "put":
            return f"{body['id']} v{body['ver']} scope {body['scope']} {body['size']} bytes"
        if op == "forget":
            return "forget " + ", ".join(str(i) for i in body["ids"])
        if op in ("grant", "revoke"):
            return f"{body['principal']} {','.join(body['perms']) or '-'} on {body['scope']}"
        if op == "checkpoint":
            return f"signs seq {body['seq']} {body['head'].hex()[:12]} key {body['key'].hex()[:12]}"
    except (KeyError, AttributeError, TypeError):
        pass
    return json.dumps(jsonable(body), default=str)


def json_default(value: Any) -> Any:
    return repr(value)
