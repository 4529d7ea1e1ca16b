"""Record ids: 32 hex digits, time-ordered (48-bit milliseconds, then 80 random bits, like UUIDv7)."""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last = 0

# One getrandom() call per few hundred ids and salts instead of one per id: the syscall was a visible
# part of a write's CPU cost. A forked child must never reuse the parent's unread bytes (the two would
# make the same ids and salts), so the pool is dropped in the child.
_POOL_SIZE = 4096
_pool = b""
_pos = 0


def _reset_pool() -> None:
    global _lock, _pool, _pos
    _lock = threading.Lock()  # another thread of the parent may have held it at the fork
    _pool, _pos = b"", 0


os.register_at_fork(after_in_child=_reset_pool)


def random_bytes(n: int) -> bytes:
    """n bytes from the OS's CSPRNG (os.urandom), drawn in bulk."""
    global _pool, _pos
    with _lock:
        if _pos + n > len(_pool):
            _pool, _pos = os.urandom(max(_POOL_SIZE, n)), 0
        _pos += n
        return _pool[_pos - n : _pos]


def new_id() -> str:
    """A fresh id, strictly greater than every id this process made before."""
    global _last, _pool, _pos
    with _lock:
        if _pos + 10 > len(_pool):
            _pool, _pos = os.urandom(_POOL_SIZE), 0
        _pos += 10
        value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(_pool[_pos - 10 : _pos], "big")
        if value <= _last:
            value = _last + 1
        _last = value
    return value.to_bytes(16, "big").hex()  # 32 hex digits, as f"{value:032x}" but cheaper
