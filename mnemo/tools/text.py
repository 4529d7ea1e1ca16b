"""The exact texts of the memory tool's results (docs/MEMORY_TOOL.md §3 and §5–§7), each within a size bound.

Pure functions, no store access. Every result the server returns is at most `max_chars` characters:
a file view shows whole numbered lines while they fit and ends with a note saying what was left out
(and how to see it); a listing does the same with its lines; a str_replace snippet cuts its long
lines; a value the model sent is echoed whole up to an echo limit and cut after it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from mnemo.validation import REFUSED_PATH_CATEGORIES

__all__ = [
    "MAX_LINES",
    "CommandResult",
    "MAX_OCCURRENCES_SHOWN",
    "cut_to",
    "echo",
    "echo_sent",
    "format_directory_view",
    "format_file_view",
    "format_search",
    "format_size",
    "insert_text",
    "numbered_lines",
    "occurrence_lines",
    "occurrence_list",
    "replace_snippet",
]

MAX_LINES = 999_999
MAX_OCCURRENCES_SHOWN = 100
EDITED = "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
FILE_HEADER = "Here's the content of {} with line numbers:\n"
DIR_HEADER = "Here're the files and directories up to 2 levels deep in {}, excluding hidden items and node_modules:"
LINES_NOTE = "... (showing lines {start}-{b} of {n}; use view_range to see the rest)"
CUT_LINE_NOTE = (
    "... (showing lines {start}-{start} of {n}, line {start} cut after {c} of {length} characters; "
    "a result holds at most {limit} characters: split long lines with str_replace to read them whole, "
    "and use view_range to see other lines)"
)
LISTING_NOTE = "... (showing {k} of {m} entries; to list what a subdirectory holds, view its path)"
ECHO_MARK = "[... {m} more characters]"
# the search (docs/MEMORY_TOOL.md §11)
SEARCH_HEADER = "Here're the files in {path} that match `{query}`, best match first, with their matching lines:"
SEARCH_EMPTY = (
    "No file in {path} matches `{query}`. Try other or fewer words, a prefix such as plan* (it finds plan, "
    "plans, planning), or a wider path; or view the path to see what it holds."
)
SEARCH_MORE_NOTE = (
    "... (the best {k} files are shown and more match: add words, search a narrower path, or raise limit "
    "to see the others)"
)
SEARCH_CUT_NOTE = (
    "... (showing {k} of the {m} files found: add words, or search a narrower path, to see the others; "
    "view a file to read it whole)"
)
MORE_OCCURRENCES = f", ... (over {MAX_OCCURRENCES_SHOWN} occurrences)"
# room for a snippet line's number and tab (7), newline (1) and echo mark (at most 29 for 1 MiB)
SNIPPET_SLACK = 40


@dataclass(frozen=True)
class CommandResult:
    """The outcome of one memory-tool command: the result text, and whether it is an error result."""

    text: str
    is_error: bool = False


def echo(text: str, limit: int | None) -> str:
    """`text` as a message quotes it: whole up to `limit` characters, else cut after them with a mark."""
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + ECHO_MARK.format(m=len(text) - limit)


def echo_sent(text: str, limit: int | None) -> str:
    """`text`, a value the model sent, as a message quotes it (`echo`): as sent, or, when it holds a
    character a path refuses as invalid (a control such as ESC, CR, a line break or NUL; a format
    character such as U+202E; a lone surrogate; U+2028 or U+2029), as its `repr`, the form the `Invalid
    path` error gives a path, so that nothing of it acts on a terminal or shows as a line of its own."""
    if any(unicodedata.category(ch) in REFUSED_PATH_CATEGORIES for ch in text):
        text = repr(text)
    return echo(text, limit)


def cut_to(text: str, limit: int) -> str:
    """`text` whole if it has at most `limit` characters, else the longest start of it that, with the echo
    mark after it, makes at most `limit`."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(ECHO_MARK.format(m=len(text))))
    while keep < len(text) and keep + 1 + len(ECHO_MARK.format(m=len(text) - keep - 1)) <= limit:
        keep += 1  # the rest's count may have fewer digits than the whole length's
    return text[:keep] + ECHO_MARK.format(m=len(text) - keep)


def format_size(n: int) -> str:
    """Human-readable size exactly as the memory tool prints it (`0B`, `1023B`, `1K`, `1.5K`, `1.2M`)."""
    if n == 0:
        return "0B"
    i = min((n.bit_length() - 1) // 10, 3)
    unit = "BKMG"[i]
    s = n / 1024**i
    if s == int(s):
        return f"{int(s)}{unit}"
    return f"{s:.1f}{unit}"


def _numbered(lines: Sequence[str], first: int) -> str:
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, first))


def numbered_lines(prefix: str, lines: Sequence[str], first: int, total: int, max_chars: int | None) -> str:
    """`prefix` and then `lines` numbered from `first`, as a file view or a snippet shows them.

    When the whole text would be longer than `max_chars`, it shows the most whole lines that fit with
    the note `LINES_NOTE` after them (`total` is the file's line count); when not even the first line
    fits, it shows as much of that line as fits, with `CUT_LINE_NOTE`.
    """
    whole = prefix + _numbered(lines, first)
    if max_chars is None or len(whole) <= max_chars:
        return whole
    # The note's length depends on the line numbers in it, so each candidate is measured with its own.
    length = len(prefix)
    shown = 0
    for n, line in enumerate(lines, first):
        piece = (1 if shown else 0) + max(6, len(str(n))) + 1 + len(line)
        note = LINES_NOTE.format(start=first, b=n, n=total)
        if length + piece + 1 + len(note) > max_chars:
            break
        length += piece
        shown += 1
    if shown:
        note = LINES_NOTE.format(start=first, b=first + shown - 1, n=total)
        return prefix + _numbered(lines[:shown], first) + "\n" + note
    line = lines[0]
    head = prefix + f"{first:>6}\t"

    def note_for(c: int) -> str:
        return CUT_LINE_NOTE.format(start=first, n=total, c=c, length=len(line), limit=max_chars)

    c = max(0, max_chars - len(head) - 1 - len(note_for(len(line))))
    while c < len(line) and len(head) + c + 1 + 1 + len(note_for(c + 1)) <= max_chars:
        c += 1  # a shorter number in the note may leave room for a few more characters
    return head + line[:c] + "\n" + note_for(c)


def format_directory_view(
    sent_path: str,
    directory: str,
    files: Sequence[tuple[str, int]],
    max_chars: int | None = None,
    directories: Sequence[str] = (),
) -> str:
    """The `view` text of a directory.

    `directory` is the canonical directory; `files` holds `(canonical path, size in bytes)` of every
    file beneath it at any depth (hidden ones included: they count toward directory sizes);
    `directories` the canonical paths beneath it of directories that exist with no file in them (mount
    points). Over `max_chars`, the listing keeps the most whole entry lines that fit and ends with
    `LISTING_NOTE`.
    """
    # (name, is_dir) -> size, for the children, and per child directory for the grandchildren
    level1: dict[tuple[str, bool], int] = {}
    level2: dict[str, dict[tuple[str, bool], int]] = {}
    total = 0
    cut = len(directory) + 1
    for path, size in files:
        total += size
        parts = path[cut:].split("/")
        key1 = (parts[0], len(parts) > 1)
        level1[key1] = level1.get(key1, 0) + size
        if len(parts) > 1:
            below = level2.setdefault(parts[0], {})
            key2 = (parts[1], len(parts) > 2)
            below[key2] = below.get(key2, 0) + size
    for path in directories:
        parts = path[cut:].split("/")
        level1.setdefault((parts[0], True), 0)
        if len(parts) > 1:
            level2.setdefault(parts[0], {}).setdefault((parts[1], True), 0)
    head = DIR_HEADER.format(sent_path) + "\n" + f"{format_size(total)}\t{directory}"
    entries: list[str] = []
    for name, is_dir in sorted(level1):
        if _hidden(name):
            continue
        size = level1[(name, is_dir)]
        if not is_dir:
            entries.append(f"{format_size(size)}\t{directory}/{name}")
            continue
        entries.append(f"{format_size(size)}\t{directory}/{name}/")
        below = level2.get(name, {})
        for sub, sub_is_dir in sorted(below):
            if _hidden(sub):
                continue
            suffix = "/" if sub_is_dir else ""
            entries.append(f"{format_size(below[(sub, sub_is_dir)])}\t{directory}/{name}/{sub}{suffix}")
    whole_length = len(head) + sum(1 + len(e) for e in entries)
    if max_chars is None or whole_length <= max_chars:
        return "\n".join([head, *entries])
    return _cut(head, entries, max_chars, LISTING_NOTE)


def _cut(head: str, entries: list[str], max_chars: int, note: str) -> str:
    """`head` and as many of `entries` (one line or more each) as fit in `max_chars` with the note that
    says how many of them are shown (`note`, formatted with k shown of m)."""
    length = len(head)
    shown = 0
    for entry in entries:
        if length + 1 + len(entry) + 1 + len(note.format(k=shown + 1, m=len(entries))) > max_chars:
            break
        length += 1 + len(entry)
        shown += 1
    return "\n".join([head, *entries[:shown], note.format(k=shown, m=len(entries))])


def _hidden(name: str) -> bool:
    return name.startswith(".") or name == "node_modules"


def format_file_view(
    sent_path: str, content: str, view_range: Sequence[int] | None, max_view_chars: int | None
) -> CommandResult:
    """The `view` result of a file (§5), including the `view_range` and size rules."""
    if view_range is not None and view_range[1] < -1:
        return CommandResult(f"Error: Invalid `view_range`: {list(view_range)}", True)
    lines = content.split("\n")
    n = len(lines)
    if n > MAX_LINES:
        return CommandResult(f"File {sent_path} exceeds maximum line limit of 999,999 lines.", True)
    header = FILE_HEADER.format(sent_path)
    start, end = 1, n
    if view_range is not None:
        start = max(1, view_range[0])
        end = n if view_range[1] == -1 else min(view_range[1], n)
    if start > end:
        return CommandResult(header)
    return CommandResult(numbered_lines(header, lines[start - 1 : end], start, n, max_view_chars))


def occurrence_lines(content: str, old_str: str) -> list[int]:
    """1-based line of every start position of `old_str` in `content`, overlapping starts included."""
    out: list[int] = []
    line = 1
    counted_to = 0
    start = 0
    while True:
        pos = content.find(old_str, start)
        if pos == -1:
            return out
        line += content.count("\n", counted_to, pos)
        counted_to = pos
        out.append(line)
        start = pos + 1


def occurrence_list(content: str, old_str: str) -> str:
    """The `{lines}` of the "Multiple occurrences" message: the lines of the first
    `MAX_OCCURRENCES_SHOWN` start positions, then `, ... (over 100 occurrences)` when there are more.

    Stopping there bounds the work: each start is one `find`, linear in the file, and a long `old_str`
    that overlaps itself can start at nearly every position."""
    shown: list[int] = []
    line = 1
    counted_to = 0
    pos = content.find(old_str)
    while pos != -1 and len(shown) < MAX_OCCURRENCES_SHOWN:
        line += content.count("\n", counted_to, pos)
        counted_to = pos
        shown.append(line)
        pos = content.find(old_str, pos + 1)
    text = ", ".join(map(str, shown))
    return text if pos == -1 else f"{text}{MORE_OCCURRENCES}"


def replace_snippet(new_content: str, changed_line_index: int, prefix: str = "", max_chars: int | None = None) -> str:
    """`prefix`, then the lines around an edit, numbered: from two lines before the change to three after
    its first line.

    When that is longer than `max_chars`, every line of the snippet longer than
    `(max_chars - len(prefix)) // (number of lines) - SNIPPET_SLACK` characters is cut after them with
    the echo mark, so that the changed line still shows (the slack holds the number and the mark)."""
    new_lines = new_content.split("\n")
    first = max(0, changed_line_index - 2) + 1
    last = min(len(new_lines), changed_line_index + 3)
    lines = new_lines[first - 1 : last]
    whole = prefix + _numbered(lines, first)
    if max_chars is None or len(whole) <= max_chars:
        return whole
    width = max(0, (max_chars - len(prefix)) // len(lines) - SNIPPET_SLACK)
    return prefix + _numbered([echo(line, width) for line in lines], first)


def insert_text(content: str, insert_line: int, text: str) -> str | int:
    """Content after inserting `text` after line `insert_line`; or the line count when out of range."""
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    if insert_line < 0 or insert_line > len(lines):
        return len(lines)
    lines.insert(insert_line, text.rstrip("\n"))
    new_content = "\n".join(lines)
    if not new_content.endswith("\n"):
        new_content += "\n"
    return new_content


def format_search(
    sent_path: str,
    query: str,
    files: Sequence[tuple[str, Sequence[tuple[int, str, int]]]],
    more: bool,
    max_chars: int | None = None,
    echo_limit: int | None = None,
) -> str:
    """The text of a search (§11): a header, then for each file, best first, its canonical path on a line
    of its own and its matching lines numbered as `view` numbers them. The query is echoed as
    `echo_sent` quotes it: whole up to `echo_limit` characters, else cut after them with the echo mark.

    `files` holds `(path, lines)`, each line `(number, text shown, length of the whole line)`: a line
    shown shorter than it is ends with the echo mark. `more`: files beyond these match too. With no
    file, `SEARCH_EMPTY`. Over `max_chars`, the text keeps the most whole files that fit, then
    `SEARCH_CUT_NOTE`; otherwise, with `more`, it ends with `SEARCH_MORE_NOTE`.
    """
    query = echo_sent(query, echo_limit)
    if not files:
        return SEARCH_EMPTY.format(path=sent_path, query=query)
    head = SEARCH_HEADER.format(path=sent_path, query=query)
    entries: list[str] = []
    for path, lines in files:
        shown = [
            f"{n:>6}\t{text}" + (ECHO_MARK.format(m=length - len(text)) if length > len(text) else "")
            for n, text, length in lines
        ]
        entries.append("\n".join([path, *shown]))
    note = [SEARCH_MORE_NOTE.format(k=len(files))] if more else []
    whole = "\n".join([head, *entries, *note])
    if max_chars is None or len(whole) <= max_chars:
        return whole
    return _cut(head, entries, max_chars, SEARCH_CUT_NOTE)
