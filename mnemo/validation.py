"""Checks on everything a caller passes in: types, limits, JSON-compatibility, and the memory tool's
rules for the tags that make a record one of its files. Each failure is an InvalidInput naming the
argument, raised before anything is written. Names (agent ids, principals, scopes, patterns) have
their one rule in acl/names.py."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from .errors import InvalidInput

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1

# The memory tool's files (docs/MEMORY_TOOL.md §4): a record tagged MEMORY_TAG and one path tag.
PATH_TAG_PREFIX = "path:"
MEMORY_TAG = "memorytool"
MAX_SEGMENT_BYTES = 255
PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
# Refused in a path: controls, format characters (invisible and bidirectional ones: U+200B, U+202E,
# U+FEFF, ...), lone surrogates, line and paragraph separators.
REFUSED_PATH_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# One tag grammar on both backends: PostgreSQL's text cannot hold U+0000, so no tag may.
NUL_TAG = "tag {tag!r} contains a NUL character (U+0000), which PostgreSQL cannot store: remove it"

# What is refused of the memory tool's tags, whatever writes them (docs/MEMORY_TOOL.md §4.1, word for word)
NOT_A_PATH = (
    "tag {tag!r} is not a memory-tool path: {problem}. A path: tag names one memory-tool file by its canonical "
    "path (docs/MEMORY_TOOL.md §4): give the path in that form, or use another prefix for a tag of your own"
)
NOT_ROOTED = "it must be an absolute path of a root and a name below it, such as /memories/notes.md"
BACKSLASH = "it holds a backslash"
PERCENT = "it holds a percent-escape (%XX)"
CHARACTER = "it holds U+{code} {name}, a control, format (invisible or bidirectional) or separator character"
BLANK = "it holds U+{code} {name}, which draws as blank space: the path would look like another"
LOOKS_LIKE = "it holds U+{code} {name}, which looks like {like!r}: the path would look like another"
SPACED = "a segment begins or ends with a space: the path would look like another"
DOT_SEGMENT = "it has a '.' or '..' segment"
EMPTY_SEGMENT = "it has an empty segment (a '//', or a '/' at the end)"
LONG_SEGMENT = f"a segment is {{n}} bytes in UTF-8, over the limit of {MAX_SEGMENT_BYTES}"
NOT_NFC = "it is not in Unicode normal form NFC (in NFC it is {nfc!r})"
TWO_PATHS = "a record holds at most one path: tag (a memory-tool file has one path), got {first!r} and {second!r}"
MARKER_ALONE = (
    f"the tag {MEMORY_TAG!r} marks a memory-tool file, which needs a path: tag beside it (such as "
    f"path:/memories/notes.md): add one, or leave {MEMORY_TAG!r} out"
)
PATH_TAKEN = (
    "scope {scope} already has a memory-tool file at {path}, readable by you or not: a path names one file; "
    "choose another path"
)
PATH_UNDER_FILE = (
    "scope {scope} has a memory-tool file at {ancestor}, readable by you or not, so {path} cannot be a file "
    "beneath it; choose another path"
)
PATH_IS_DIRECTORY = (
    "scope {scope} has memory-tool files beneath {path}, readable by you or not: {path} is a directory, so it "
    "cannot be a file; choose another path"
)


@dataclass(frozen=True)
class Limits:
    """Configurable bounds on what one record may hold."""

    max_content_bytes: int = 1 << 20
    max_tag_chars: int = 2048
    max_tags: int = 256
    max_metadata_bytes: int = 64 << 10
    max_id_chars: int = 256


def check_content(content: Any, limits: Limits) -> tuple[str | bytes, int]:
    if type(content) is str and content.isascii():  # as many bytes in UTF-8 as characters
        size = len(content)
    elif isinstance(content, str):
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidInput("content contains lone surrogates and cannot be stored as UTF-8") from None
    elif isinstance(content, bytes):
        size = len(content)
    else:
        raise InvalidInput(f"content must be str or bytes, got {type(content).__name__}")
    if size > limits.max_content_bytes:
        raise InvalidInput(f"content is {size} bytes, over the limit of {limits.max_content_bytes} bytes")
    return content, size


def check_tags(tags: Any, limits: Limits, what: str = "tags") -> tuple[str, ...]:
    """The distinct tags, sorted (the form that is packed and returned)."""
    if type(tags) not in (tuple, list) and (isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable)):
        raise InvalidInput(f"{what} must be a list of strings, got {type(tags).__name__}")
    out = set()
    max_chars = limits.max_tag_chars
    for tag in tags:
        # A short ASCII str without NUL, the usual tag, passes every check below: skip them.
        if not (type(tag) is str and tag.isascii() and 0 < len(tag) <= max_chars and "\x00" not in tag):
            _check_tag(tag, limits)
        out.add(tag)
    if len(out) > limits.max_tags:
        raise InvalidInput(f"{len(out)} tags, over the limit of {limits.max_tags}")
    return tuple(sorted(out))


def _check_tag(tag: Any, limits: Limits) -> None:
    if not isinstance(tag, str) or not tag:
        raise InvalidInput(f"every tag must be a non-empty string, got {tag!r}")
    if len(tag) > limits.max_tag_chars:
        raise InvalidInput(f"a tag is {len(tag)} characters, over the limit of {limits.max_tag_chars}")
    try:
        tag.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"tag {tag!r} contains lone surrogates") from None
    if "\x00" in tag:
        raise InvalidInput(NUL_TAG.format(tag=tag))


def check_tag_prefix(prefix: Any) -> str | None:
    """A `tag_prefix` filter: None, or a string that a tag could start with (no lone surrogate, no NUL)."""
    if prefix is None:
        return None
    if not isinstance(prefix, str):
        raise InvalidInput("tag_prefix must be a string or None")
    if not prefix.isascii():
        try:
            prefix.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(f"tag_prefix {prefix!r} contains lone surrogates") from None
    if "\x00" in prefix:
        raise InvalidInput(f"tag_prefix {prefix!r} contains a NUL character (U+0000), which no tag holds: remove it")
    return prefix


# Assigned characters outside the refused categories that still draw as blank space (with every space
# character but U+0020, the fillers and the variation selectors): a name or a path holding one looks like
# another. The names rule (acl/names.py) and the path rules refuse them alike.
BLANK_NAMES = frozenset(("COMBINING GRAPHEME JOINER", "BRAILLE PATTERN BLANK", "KHMER VOWEL INHERENT AQ",
                         "KHMER VOWEL INHERENT AA"))


def is_blank(ch: str) -> bool:
    """Whether `ch` (of no refused category) draws as blank space and is not U+0020 SPACE."""
    if unicodedata.category(ch) == "Zs":
        return ch != " "
    name = unicodedata.name(ch, "")
    return name in BLANK_NAMES or "FILLER" in name or name.startswith("VARIATION SELECTOR")


# The slashes of mathematics and box drawing, which draw as a path's `/` and have no compatibility
# form that says so (U+FF0F FULLWIDTH SOLIDUS has one: `/`).
SLASH_LOOK_ALIKES = frozenset("\u2044\u2215\u2571\u27cb\u29f8\U0001f67c")


def separator_look_alike(ch: str) -> str | None:
    """The text of a path's own punctuation that `ch` draws as without being it, or None: `/` for a
    slash of SLASH_LOOK_ALIKES, else, for a character that is no letter or number, its compatibility form
    (NFKC) when that holds a `/` or a `.` (U+FF0F FULLWIDTH SOLIDUS is `/`, U+2024 ONE DOT LEADER `.`,
    U+2026 HORIZONTAL ELLIPSIS `...`). Letters and numbers are names (U+2488 `⒈` among them)."""
    if ch in SLASH_LOOK_ALIKES:
        return "/"
    if unicodedata.category(ch)[0] in "LN":
        return None
    compatible = unicodedata.normalize("NFKC", ch)
    if compatible != ch and ("/" in compatible or "." in compatible):
        return compatible
    return None


def path_look_alike(path: str) -> str | None:
    """What makes `path` look like another path in a listing, or None: a character that draws as blank
    space (but U+0020, and a variation selector after a symbol: `❤️` is U+2764 and U+FE0F), one that draws
    as a `/` or a `.` without being one (`/memories/team\u2215notes.md` would show as a file of a folder
    `team`), or a segment that begins or ends with a space. (The refused categories are checked apart,
    first.)"""
    if not path.isascii():
        before = "/"
        for ch in path:
            if is_blank(ch) and not (unicodedata.category(before).startswith("S")
                                     and unicodedata.name(ch, "").startswith("VARIATION SELECTOR")):
                return BLANK.format(code=f"{ord(ch):04X}", name=unicodedata.name(ch, "(unnamed)"))
            like = separator_look_alike(ch) if not ch.isascii() else None
            if like is not None:
                return LOOKS_LIKE.format(code=f"{ord(ch):04X}", name=unicodedata.name(ch, "(unnamed)"), like=like)
            before = ch
    if " /" in path or "/ " in path or path.endswith(" "):
        return SPACED
    return None


def path_problem(path: str) -> str | None:
    """What keeps `path` from being the canonical path of a memory-tool file under some root (a root
    and at least one name below it, every rule of docs/MEMORY_TOOL.md §4, already in canonical form),
    or None. The tool's own check (tools/paths.py) applies the same rules to a path as the model sent it."""
    segments = path.split("/")
    if segments[0] != "" or len(segments) < 3:
        return NOT_ROOTED
    if "\\" in path:
        return BACKSLASH
    if PERCENT_ESCAPE.search(path) is not None:
        return PERCENT
    for ch in path:
        if unicodedata.category(ch) in REFUSED_PATH_CATEGORIES:
            return CHARACTER.format(code=f"{ord(ch):04X}", name=unicodedata.name(ch, "(unnamed)"))
    look_alike = path_look_alike(path)
    if look_alike is not None:
        return look_alike
    if any(segment in (".", "..") for segment in segments):
        return DOT_SEGMENT
    if any(segment == "" for segment in segments[1:]):
        return EMPTY_SEGMENT
    for segment in segments:
        size = len(segment.encode("utf-8"))
        if size > MAX_SEGMENT_BYTES:
            return LONG_SEGMENT.format(n=size)
    composed = unicodedata.normalize("NFC", path)
    if composed != path:
        return NOT_NFC.format(nfc=composed)
    return None


def file_path(tags: tuple[str, ...]) -> str | None:
    """The path of the memory-tool file a record with these tags (as check_tags returns them) is, or
    None when it is none. InvalidInput when the tags break the memory tool's rules: a `path:` tag that
    is no canonical path, two of them, or the MEMORY_TAG marker without one."""
    path: str | None = None
    marked = False
    for tag in tags:
        if tag.startswith(PATH_TAG_PREFIX):
            if path is not None:
                raise InvalidInput(TWO_PATHS.format(first=PATH_TAG_PREFIX + path, second=tag))
            path = tag[len(PATH_TAG_PREFIX) :]
            problem = path_problem(path)
            if problem is not None:
                raise InvalidInput(NOT_A_PATH.format(tag=tag, problem=problem))
        elif tag == MEMORY_TAG:
            marked = True
    if marked and path is None:
        raise InvalidInput(MARKER_ALONE)
    return path if marked else None


def path_ancestors(path: str) -> list[str]:
    """The ancestors of canonical `path` that could be files (a root and a name at least), nearest
    the root first: `/a/b/c/d` has `/a/b` and `/a/b/c`."""
    segments = path.split("/")
    return ["/".join(segments[:end]) for end in range(3, len(segments))]


def _check_text(value: str, path: str) -> None:
    if not value.isascii():  # ASCII always encodes; only the rest can hold lone surrogates
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(f"metadata {path} contains lone surrogates") from None


def _canonical_json(value: Any, path: str, depth: int = 0) -> Any:
    """Check that value is JSON-compatible and return it in canonical form (every map's keys sorted,
    tuples as lists), the form that is packed and returned: one walk does both."""
    if depth > 32:
        raise InvalidInput(f"metadata nests deeper than 32 levels at {path}")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        _check_text(value, path)
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise InvalidInput(f"metadata {path} is an integer out of the 64-bit range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"metadata {path} is {value}, which JSON cannot hold")
        return value
    if isinstance(value, (list, tuple)):
        return [_canonical_json(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        items = []
        for key, item in value.items():  # checked in the caller's order, so the first error is its first
            if not isinstance(key, str):
                raise InvalidInput(f"metadata keys must be strings, got {key!r} at {path}")
            if depth + 1 > 32:
                raise InvalidInput(f"metadata nests deeper than 32 levels at {path} key")
            if not key.isascii():
                _check_text(key, f"{path} key")
            cls = type(item)
            if (cls is str and item.isascii()) or (cls is int and _INT_MIN <= item <= _INT_MAX) or item is None:
                items.append((key, item))  # the usual flat value: nothing to check or convert
            else:
                items.append((key, _canonical_json(item, f"{path}.{key}", depth + 1)))
        items.sort()  # keys are distinct, so only keys are ever compared
        return dict(items)
    raise InvalidInput(f"metadata {path} is a {type(value).__name__}, which is not JSON-compatible")


def canonical_metadata(metadata: Any) -> dict[str, Any]:
    """The metadata, checked to be a JSON-compatible map, as a new dict in canonical form (keys
    sorted, recursively): callers pack and return it as it is, without canonicalising again.
    Its size is checked apart (check_metadata_size), once it is packed."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InvalidInput(f"metadata must be a dict, got {type(metadata).__name__}")
    canonical: dict[str, Any] = _canonical_json(metadata, "metadata")
    return canonical


def check_metadata_size(metadata: dict[str, Any], limits: Limits, packed_size: int | None = None) -> None:
    """Refuse metadata over the size limit, packed. `packed_size`, the length of a record's packed
    fields, which hold the packed metadata: when they fit in the limit it does too, and needs no packing
    of its own."""
    if packed_size is not None and packed_size <= limits.max_metadata_bytes:
        return
    # the bytes chain.codec.pack_canonical packs it to (msgpack, bin type on): this layer is below the codec
    size = len(msgpack.packb(metadata, use_bin_type=True))
    if size > limits.max_metadata_bytes:
        raise InvalidInput(f"metadata is {size} bytes packed, over the limit of {limits.max_metadata_bytes}")


def check_metadata(metadata: Any, limits: Limits) -> dict[str, Any]:
    """canonical_metadata, with its size checked."""
    canonical = canonical_metadata(metadata)
    check_metadata_size(canonical, limits)
    return canonical


def check_ids(ids: Any) -> list[str]:
    if isinstance(ids, str):
        ids = [ids]
    if isinstance(ids, bytes) or not isinstance(ids, Iterable):
        raise InvalidInput(f"ids must be a string or a list of strings, got {type(ids).__name__}")
    out: dict[str, None] = {}  # ordered and de-duplicated in linear time
    for rec_id in ids:
        if not isinstance(rec_id, str):
            raise InvalidInput(f"a record id must be a string, got {rec_id!r}")
        out[rec_id] = None
    return list(out)


def check_optional_str(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string or None, got {type(value).__name__}")
    return value


def check_reason(reason: Any) -> str | None:
    """A forget's reason, kept in its entry as UTF-8: a string that encodes (no lone surrogate), or None."""
    text = check_optional_str(reason, "reason")
    if text is not None and not text.isascii():  # ASCII always encodes
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput("reason contains lone surrogates and cannot be stored as UTF-8") from None
    return text
