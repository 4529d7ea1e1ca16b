"""Pausing the cyclic garbage collector around bulk work, and giving back what it freed."""

from __future__ import annotations

import contextlib
import ctypes
import gc
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Building an index or checking a log allocates millions of small containers and no cycles; the
    cyclic collector would rescan them all, again and again (over half the time of a large open).
    Pause it meanwhile."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]  # type: ignore[attr-defined]
    return trim


_trim = _malloc_trim()


def release_freed_memory() -> None:
    """Hand the heap that bulk work freed back to the system. A replay of a large log frees hundreds of
    megabytes of temporaries interleaved with what the index keeps; glibc keeps such freed heap
    mapped (about as much again as the index itself at a million records) unless asked to trim it."""
    if _trim is not None:
        _trim(0)
