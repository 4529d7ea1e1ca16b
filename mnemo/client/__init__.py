"""MnemoClient, the one public API (mnemo/client/api.py), and the values and functions beside it."""

from .api import MnemoClient
from .core import RecordUnavailable
from .database import reindex
from .paths import PathUse, ScopeUsage
from .recall import MAX_RECALL

__all__ = ["MAX_RECALL", "MnemoClient", "PathUse", "RecordUnavailable", "ScopeUsage", "reindex"]
