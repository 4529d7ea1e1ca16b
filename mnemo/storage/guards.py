"""The checks every store makes before it reads or writes: open, writable, which batch is this thread's.

Both backends keep the same state for them (`closed`, `readonly`, `_failed`: the error that stopped
writes until a reopen, `_local.batch`: this thread's open transaction) and for their writer context
(writer.py: `durability`, `lock_timeout`, `_mutex`: the writer lock), so they share one copy.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..errors import Closed, DurabilityError, ReadOnly

if TYPE_CHECKING:
    from .batch import Batch


class ThreadBatch(threading.local):
    """Each thread's open transaction: `batch`, None (the class's) until the thread opens one, so that
    asking costs an attribute read and never a failed lookup."""

    batch: Batch | None = None


class StoreGuards:
    """The state both backends' checks and writer context read, and the checks."""

    def __init__(self, readonly: bool, durability: str, lock_timeout: float) -> None:
        self.readonly = readonly
        self.durability = durability
        self.lock_timeout = lock_timeout
        self.closed = False
        self._failed: BaseException | None = None
        self._mutex = threading.RLock()  # one writer thread of this process at a time, held through a transaction
        self._local = ThreadBatch()

    def _check_open(self) -> None:
        if self.closed:
            raise Closed("the client is closed")

    def check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise ReadOnly("the client was opened with readonly=True")
        if self._failed is not None:
            raise DurabilityError(f"an earlier write failed ({self._failed}); reopen the database")

    def current_batch(self) -> Batch | None:
        return self._local.batch
