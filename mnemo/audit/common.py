"""The audit's errors and the formatting its exports and reports share (times, JSON values)."""

from __future__ import annotations

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


def json_default(value: Any) -> Any:
    return repr(value)
