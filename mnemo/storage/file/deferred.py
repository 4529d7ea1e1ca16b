"""Parts of a snapshot loaded after the open (snapshot.DEFERRED_KEYS: recall's text index): each is read,
checked and built by a thread of its own, started as the snapshot's main part is loaded, so that an open
waits for none of it; whoever first needs the part waits for that thread.

The thread reads through a descriptor of the snapshot taken at the open, and closes it as soon as the
part is read: a snapshot another process replaces or removes meanwhile (a forget removes it) is still
the one whose main part was loaded, and its bytes are freed by the file system once that read ends, as
they are after an open that reads the whole snapshot at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from . import snapshot as snap

T = TypeVar("T")


class SnapshotParts:
    """Where a snapshot's deferred parts are read from: a descriptor of the file (this object's, closed by
    `close`) and the offset at which its main part ends."""

    def __init__(self, fd: int, end: int) -> None:
        self.fd, self.end = fd, end

    def load(self, key: str, ref: Any, build: Callable[[Any], T]) -> DeferredPart[T]:
        """Start loading the part `key` that the main part's reference `ref` names, built by `build` from
        its state (build raises ValueError, KeyError, TypeError, IndexError, UnicodeError or
        OverflowError on a state it refuses)."""
        return DeferredPart(os.dup(self.fd), self.end, ref, key, build)

    def close(self) -> None:
        os.close(self.fd)


class DeferredPart(Generic[T]):
    """One deferred part, loading in its own thread until `result()` is first asked for."""

    def __init__(self, fd: int, end: int, ref: Any, key: str, build: Callable[[Any], T]) -> None:
        self._fd, self._end, self._ref, self._key, self._build = fd, end, ref, key, build
        self._built: T | None = None
        self._refused: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"mnemo-snapshot-{key}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            try:
                state = snap.read_part(self._fd, self._end, self._ref, self._key)
            finally:
                os.close(self._fd)
            self._built = self._build(state)
        except Exception as exc:  # a part that cannot be read or built is refused, never half used
            self._refused = str(exc) or type(exc).__name__

    def result(self) -> tuple[T | None, str | None]:
        """(what the part holds, None), or (None, why it was refused), once the thread is done."""
        self._thread.join()
        return self._built, self._refused


__all__ = ["DeferredPart", "SnapshotParts"]
