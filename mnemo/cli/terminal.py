"""What a terminal would act on rather than show, escaped: the one rendering of text for people that
every line `mnemo` prints goes through, its output (mnemo.cli.output) and its error messages alike.

Stored text, a path or a name a person gave may hold escape sequences (they move the cursor, clear the
screen or recolour what follows), a carriage return or a bidirectional override (a line shows as
another), or a lone surrogate (a name that is not UTF-8, which cannot be written to a UTF-8 terminal):
each is shown as an escape. Tabs and line breaks are layout, kept by `terminal`; `inline`,
for a one-line field or message, escapes them too, so that no line break makes a fake row.
"""

from __future__ import annotations

__all__ = ["inline", "terminal"]

_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
_TERMINAL = {c: f"\\x{c:02x}" for c in _CONTROLS if c not in (0x09, 0x0A)}
_TERMINAL.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))})
# A lone surrogate: a name the operating system gave that is not UTF-8 (the byte 0xff is U+DCFF), which
# cannot be written to a UTF-8 terminal at all: shown as its escape, as `repr` shows it.
_TERMINAL.update({c: f"\\u{c:04x}" for c in range(0xD800, 0xE000)})
_INLINE = {**_TERMINAL, 0x09: "\\t", 0x0A: "\\n"}


def terminal(text: str) -> str:
    """`text` with what a terminal would act on escaped; tabs and line breaks kept."""
    return text.translate(_TERMINAL)


def inline(text: str) -> str:
    """`text` as one field of a line, or a one-line message: tabs and line breaks escaped too."""
    return text.translate(_INLINE)
