"""Per-scope quotas of the memory tool (docs/MEMORY_TOOL.md §10): what one scope's files may hold.

Four limits, each `None` to disable it: the versions one file keeps, the number of files, the bytes of
their latest versions, and the bytes of every version they keep. The last is what a model could
otherwise grow without end (every edit appends a whole new version of the file); the per-file version
cap bounds the per-version overhead of tiny files edited often, which a byte budget alone would not.
A command is refused only by a limit it would push usage past; the texts say which limit, the
usage, and what frees room.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mnemo.errors import InvalidInput

__all__ = ["DEFAULT_QUOTAS", "Quotas", "Usage", "refusal"]

VERSIONS_TEXT = (
    "Error: Cannot {action}: {file} already has {n} versions, the most a file may keep is {limit}. "
    "Delete it and create it again to drop its old versions (view it first to keep what it holds)."
)
FILES_TEXT = (
    "Error: Cannot {action}: the memory already holds {n} files, the most it may hold is {limit}. "
    "Delete files you no longer need to make room."
)
BYTES_TEXT = (
    "Error: Cannot {action}: the memory's files would hold {new} bytes, over the limit of {limit} bytes "
    "(they hold {now} bytes now). Delete files you no longer need, or shorten them, to make room."
)
HISTORY_TEXT = (
    "Error: Cannot {action}: the memory would keep {new} bytes of file versions, over the limit of {limit} "
    "bytes (it keeps {now} bytes now). Every change keeps the previous version of the file: delete files you "
    "no longer need, or delete a file and create it again to drop its old versions."
)

# The same refusals for an agent that may write in the scope but not read it: a limit it would exceed,
# never the scope's figures (the refusal itself tells it no more than that the limit is reached).
FILES_TEXT_BLIND = (
    "Error: Cannot {action}: the memory holds as many files as it may ({limit}). Ask an agent that reads it "
    "to delete files no longer needed."
)
BYTES_TEXT_BLIND = (
    "Error: Cannot {action}: the memory's files would hold more than the limit of {limit} bytes. Ask an agent "
    "that reads it to delete or shorten files no longer needed."
)
HISTORY_TEXT_BLIND = (
    "Error: Cannot {action}: the memory would keep more than the limit of {limit} bytes of file versions. Ask "
    "an agent that reads it to delete files no longer needed."
)


@dataclass(frozen=True)
class Usage:
    """What the memory-tool files of one scope hold: files, bytes of latest versions, bytes of all versions."""

    files: int
    live_bytes: int
    history_bytes: int


@dataclass(frozen=True)
class Quotas:
    """The limits of one server; see the module docstring. The defaults bound a scope's kept versions to
    64 MiB of content in at most 1,000,000 versions (1,000 files of 1,000 versions, each version
    about 0.3 KB of log beside its content)."""

    max_versions_per_file: int | None = 1000
    max_files: int | None = 1000
    max_total_bytes: int | None = 16 << 20
    max_history_bytes: int | None = 64 << 20

    def __post_init__(self) -> None:
        for name in ("max_versions_per_file", "max_files", "max_total_bytes", "max_history_bytes"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise InvalidInput(f"{name} must be a positive integer or None, got {value!r}")

    @property
    def scans(self) -> bool:
        """Whether a write needs the scope's usage at all."""
        return any(q is not None for q in (self.max_files, self.max_total_bytes, self.max_history_bytes))


DEFAULT_QUOTAS = Quotas()


def refusal(
    quotas: Quotas,
    usage: Callable[[], Usage],
    action: str,
    new_files: int = 0,
    live_delta: int = 0,
    history_delta: int = 0,
    versioned: Sequence[tuple[str, int]] = (),
    readable: bool = True,
) -> str | None:
    """The refusal text of the first limit a write would exceed, or None if it may go ahead.

    `action` names the command (`create /memories/a`, `edit ...`, `rename ...`); the write adds
    `new_files` files, changes live bytes by `live_delta`, adds `history_delta` bytes of versions, and
    adds one version to each `(canonical path, versions kept now)` in `versioned`. `usage` is called
    only when a scope-wide limit applies, at most once. Unless the writer may read the scope
    (`readable`), the texts name the limit and never the scope's usage.
    """
    cap = quotas.max_versions_per_file
    if cap is not None:
        for path, kept in versioned:
            if kept + 1 > cap:
                return VERSIONS_TEXT.format(action=action, file=path, n=kept, limit=cap)
    grows = (
        (quotas.max_files is not None and new_files > 0)
        or (quotas.max_total_bytes is not None and live_delta > 0)
        or (quotas.max_history_bytes is not None and history_delta > 0)
    )
    if not grows:
        return None
    now = usage()
    if quotas.max_files is not None and new_files > 0 and now.files + new_files > quotas.max_files:
        text = FILES_TEXT if readable else FILES_TEXT_BLIND
        return text.format(action=action, n=now.files, limit=quotas.max_files)
    if quotas.max_total_bytes is not None and live_delta > 0:
        new = now.live_bytes + live_delta
        if new > quotas.max_total_bytes:
            text = BYTES_TEXT if readable else BYTES_TEXT_BLIND
            return text.format(action=action, new=new, limit=quotas.max_total_bytes, now=now.live_bytes)
    if quotas.max_history_bytes is not None and history_delta > 0:
        new = now.history_bytes + history_delta
        if new > quotas.max_history_bytes:
            text = HISTORY_TEXT if readable else HISTORY_TEXT_BLIND
            return text.format(action=action, new=new, limit=quotas.max_history_bytes, now=now.history_bytes)
    return None
