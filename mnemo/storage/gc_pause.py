"""Pausing the cyclic garbage collector around bulk work."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


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
