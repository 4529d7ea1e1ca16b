"""Record ids: 32 hex digits, time-ordered (48-bit milliseconds, then 80 random bits, like UUIDv7)."""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last = 0


def new_id() -> str:
    """A fresh id, strictly greater than every id this process made before."""
    global _last
    with _lock:
        value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
        if value <= _last:
            value = _last + 1
        _last = value
    return f"{value:032x}"
