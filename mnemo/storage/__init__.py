"""The chained log: framing, commit, recovery, indexes, snapshots, erasure. Only this package touches
the database's files; `Store` (engine.py) is the small contract the client builds on."""

from .engine import Batch, Store

__all__ = ["Batch", "Store"]
