"""The embedded backend: one chained log file (docs/FORMAT.md) and the sidecars beside it. Only this
package touches the database's files."""

from .store import FileStore

__all__ = ["FileStore"]
