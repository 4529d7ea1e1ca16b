"""Memory-tool paths: confinement to the root and canonical form (spec/memory-tool.md §4).

Every check here runs on the path exactly as the model sent it, before any normalisation, so that
nothing a later step does (joining, stripping, decoding) can turn a refused path into an accepted one.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "DEFAULT_MAX_PATH_LENGTH",
    "DEFAULT_ROOT",
    "MAX_SEGMENT_BYTES",
    "PathError",
    "ancestors",
    "canonicalize",
    "check_root",
    "is_within",
    "path_tag",
    "PATH_TAG_PREFIX",
]

DEFAULT_ROOT = "/memories"
DEFAULT_MAX_PATH_LENGTH = 1024
MAX_SEGMENT_BYTES = 255
PATH_TAG_PREFIX = "path:"

_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


class PathError(Exception):
    """A path the memory tool refuses. The tool's error result is `"Error: " + str(exc)`."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def check_root(root: str) -> str:
    """Validate a configured root (`/memories`, `/notes/agent-1`, ...); return it without a trailing `/`."""
    if not isinstance(root, str):
        raise ValueError("root must be a string")
    stripped = root.rstrip("/")
    if not stripped.startswith("/") or not stripped[1:]:
        raise ValueError(f"root must be an absolute path below /, got: {root!r}")
    segments = stripped[1:].split("/")
    for segment in segments:
        if segment in ("", ".", ".."):
            raise ValueError(f"root must be canonical (no empty, '.' or '..' segments), got: {root!r}")
    if "\\" in stripped or _PERCENT_ESCAPE.search(stripped):
        raise ValueError(f"root must not hold backslashes or percent-escapes, got: {root!r}")
    if any(unicodedata.category(ch) in _REFUSED_CATEGORIES for ch in stripped):
        raise ValueError(f"root must not hold control or separator characters, got: {root!r}")
    return stripped


def canonicalize(path: str, root: str = DEFAULT_ROOT, max_path_length: int = DEFAULT_MAX_PATH_LENGTH) -> str:
    """Return the canonical form of `path`, or raise `PathError` with the tool's error text.

    `root` must already be canonical (see `check_root`). The checks run in the spec's order:
    the root prefix, then traversal (a `..` segment, a percent-escape, a backslash), then invalid
    characters and lengths; only then are `//`, `.` segments and a trailing `/` normalised away.
    """
    if path != root and not path.startswith(root + "/"):
        raise PathError(f"Path must start with {root}, got: {path}")
    if "\\" in path or _PERCENT_ESCAPE.search(path) is not None or ".." in path.split("/"):
        raise PathError(f"Path {path} would escape {root} directory")
    if len(path) > max_path_length or any(unicodedata.category(ch) in _REFUSED_CATEGORIES for ch in path):
        raise PathError(f"Invalid path: {path!r}")
    segments = [segment for segment in path[len(root) :].split("/") if segment not in ("", ".")]
    for segment in segments:
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise PathError(f"Invalid path: {path!r}")
    return root + "".join("/" + segment for segment in segments)


def is_within(path: str, directory: str) -> bool:
    """True when canonical `path` is `directory` itself or lies beneath it."""
    return path == directory or path.startswith(directory + "/")


def ancestors(path: str, root: str = DEFAULT_ROOT) -> list[str]:
    """The canonical ancestors of canonical `path` strictly below `root`, nearest the root first."""
    out: list[str] = []
    rest = path[len(root) + 1 :] if path != root else ""
    if not rest:
        return out
    parts = rest.split("/")
    current = root
    for part in parts[:-1]:
        current = f"{current}/{part}"
        out.append(current)
    return out


def path_tag(canonical: str) -> str:
    """The tag that names a memory-tool file's canonical path."""
    return PATH_TAG_PREFIX + canonical
