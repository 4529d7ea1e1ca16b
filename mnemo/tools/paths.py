"""Memory-tool paths: confinement to the root and canonical form (docs/MEMORY_TOOL.md §4).

Every check here runs on the path exactly as the model sent it, before any normalisation, so that
nothing a later step does (joining, stripping, decoding) can turn a refused path into an accepted one;
and then again on its NFC form, the form that is stored and compared, since composing characters can
change a path's length.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from mnemo.tools.text import echo, echo_sent
from mnemo.validation import (
    MAX_SEGMENT_BYTES,
    MEMORY_TAG,
    PATH_TAG_PREFIX,
    PERCENT_ESCAPE,
    REFUSED_PATH_CATEGORIES,
    path_look_alike,
)

__all__ = [
    "DEFAULT_MAX_PATH_LENGTH",
    "DEFAULT_ROOT",
    "MEMORY_TAG",
    "MAX_SEGMENT_BYTES",
    "PathError",
    "ancestors",
    "canonicalize",
    "check_root",
    "is_within",
    "path_tag",
    "PATH_TAG_PREFIX",
    "retagged",
]

DEFAULT_ROOT = "/memories"
DEFAULT_MAX_PATH_LENGTH = 1024
# MEMORY_TAG, with a path tag, is what makes a record a memory-tool file. These rules are defined in
# mnemo.validation, which applies them to the path tags a client writes by any other door.
_PERCENT_ESCAPE = PERCENT_ESCAPE
_REFUSED_CATEGORIES = REFUSED_PATH_CATEGORIES


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
        raise ValueError(f"root must not hold control, format or separator characters, got: {root!r}")
    if unicodedata.normalize("NFC", stripped) != stripped:
        raise ValueError(f"root must be in Unicode normal form NFC, got: {root!r}")
    return stripped


def canonicalize(
    path: str,
    root: str = DEFAULT_ROOT,
    max_path_length: int = DEFAULT_MAX_PATH_LENGTH,
    echo_limit: int | None = None,
) -> str:
    """Return the canonical form of `path`, or raise `PathError` with the tool's error text.

    `root` must already be canonical (see `check_root`). The checks run in the contract's order: the
    root prefix, then traversal (a `..` segment, a percent-escape, a backslash), then invalid
    characters and lengths; first on the path as sent, then on its NFC form. Only then are `//`, `.`
    segments and a trailing `/` normalised away. Messages echo the path as sent, cut after
    `echo_limit` characters (see `text.echo`).
    """
    _check(path, path, root, max_path_length, echo_limit)
    composed = unicodedata.normalize("NFC", path)
    if composed != path:
        _check(composed, path, root, max_path_length, echo_limit)
    segments = [segment for segment in composed[len(root) :].split("/") if segment not in ("", ".")]
    return root + "".join("/" + segment for segment in segments)


def _check(candidate: str, sent: str, root: str, max_path_length: int, echo_limit: int | None) -> None:
    """Raise `PathError` (naming the path as `sent`) unless `candidate` passes every rule of §4."""
    if candidate != root and not candidate.startswith(root + "/"):
        raise PathError(f"Path must start with {root}, got: {echo_sent(sent, echo_limit)}")
    if "\\" in candidate or _PERCENT_ESCAPE.search(candidate) is not None or ".." in candidate.split("/"):
        raise PathError(f"Path {echo_sent(sent, echo_limit)} would escape {root} directory")
    # the length first: a path too long is refused without a pass over its characters
    if (
        len(candidate) > max_path_length
        or any(unicodedata.category(ch) in _REFUSED_CATEGORIES for ch in candidate)
        or any(len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES for segment in candidate.split("/"))
        or path_look_alike(candidate) is not None
    ):
        raise PathError(f"Invalid path: {echo(repr(sent), echo_limit)}")


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


def retagged(tags: Sequence[str], canonical: str) -> tuple[str, ...]:
    """A moved file's tags: its own in their order (the memory-tool tag it was found by among them),
    with its path tag replaced by the one of `canonical`, last."""
    return tuple(tag for tag in tags if not tag.startswith(PATH_TAG_PREFIX)) + (path_tag(canonical),)
