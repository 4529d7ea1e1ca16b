"""What a name is: the one rule for agent ids, principals, scopes and the patterns grants are made on.

A name is never a pattern. The pattern grammar (policy.py) gives meaning to one character, `*`, so no
agent id, principal or exact scope may hold it; otherwise an agent called `al*` would own the home
scope `agent:al*` and could grant itself a pattern on it. Names are also refused where two different
strings could be read as one: invisible and control characters, odd whitespace, characters that look
like `*`, text not in Unicode normal form NFKC (fullwidth and other compatibility forms, decomposed
accents) and words mixing the letters of several scripts (a Cyrillic `а` inside `alice`). The README
("Names") states the rule for users.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Any

from ..errors import InvalidInput
from ..validation import is_blank

PATTERN_CHAR = "*"
MAX_NAME_CHARS = 256
HOME_PREFIX = "agent:"
# An agent's home scope `agent:{id}` is a name too, so an id may be that much shorter.
MAX_AGENT_ID_CHARS = MAX_NAME_CHARS - len(HOME_PREFIX)

# Categories of characters that draw nothing or are not text: controls, format characters (zero-width
# spaces and joiners, bidi overrides), surrogates, private use, unassigned, line/paragraph separators.
_REFUSED_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
# Words of letters from one script only; these mixes are how Japanese, Korean and Chinese are written
# (Unicode TR39, "highly restrictive").
_SCRIPT_ALIASES = {"CJK": "HAN", "IDEOGRAPHIC": "HAN", "HIRAGANA": "KANA", "KATAKANA": "KANA",
                   "KATAKANA-HIRAGANA": "KANA"}
_SHARED = frozenset(("COMBINING", "MODIFIER"))  # marks and modifier letters every script uses
_MIXES = (frozenset(("LATIN", "HAN", "KANA")), frozenset(("LATIN", "HAN", "HANGUL")),
          frozenset(("LATIN", "HAN", "BOPOMOFO")))


def _char(ch: str) -> str:
    return f"U+{ord(ch):04X} {unicodedata.name(ch, '(unnamed)')}"


def _spacing_problem(value: str, prefix: bool) -> str | None:
    if value[0] == " " or (value[-1] == " " and not prefix):
        return "begins or ends with a space"
    if "  " in value:
        return "holds two spaces in a row"
    return None


def _mixed_scripts(value: str) -> str | None:
    """The scripts of the first word (run of letters, marks and digits) that mixes them, if any."""
    word: set[str] = set()
    for ch in value + " ":
        kind = unicodedata.category(ch)[0]
        if kind not in "LMN":
            if len(word) > 1 and not any(word <= mix for mix in _MIXES):
                return " and ".join(sorted(word))
            word = set()
        elif kind != "N":  # digits join a word but belong to no script of their own here
            script = unicodedata.name(ch, "").split(" ", 1)[0]
            if script not in _SHARED:
                word.add(_SCRIPT_ALIASES.get(script, script))
    return None


@functools.lru_cache(maxsize=1024)  # the same few names come back on every call; checking Unicode is slow
def _problem(value: str, prefix: bool) -> str | None:
    """What is wrong with `value` as a name (as the start of one when `prefix`), or None."""
    if value.isascii():  # the usual case: only controls, `*` and spacing can be wrong
        if not value.isprintable():
            bad = next(ch for ch in value if not ch.isprintable())
            return f"contains the control character {_char(bad)}"
        if PATTERN_CHAR in value:
            return "contains `*`, the pattern character: a name is never a pattern"
        return _spacing_problem(value, prefix)
    for ch in value:
        category = unicodedata.category(ch)
        if category in _REFUSED_CATEGORIES or (category == "Zs" and ch != " "):
            return f"contains the invisible, control or space character {_char(ch)}"
        if is_blank(ch):  # assigned characters of other categories that still draw as blank space
            return f"contains the invisible character {_char(ch)}"
        name = unicodedata.name(ch, "")
        if ch == PATTERN_CHAR:
            return "contains `*`, the pattern character: a name is never a pattern"
        if "ASTERISK" in name:
            return f"contains {_char(ch)}, which looks like the pattern character `*`"
    spacing = _spacing_problem(value, prefix)
    if spacing:
        return spacing
    if not unicodedata.is_normalized("NFKC", value):
        return f"is not in Unicode normal form NFKC: write it as {unicodedata.normalize('NFKC', value)!r}"
    scripts = _mixed_scripts(value)
    if scripts:
        return f"mixes letters of the {scripts} scripts in one word, which can look alike"
    return None


def _check(value: Any, what: str, limit: int, prefix: bool = False) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > limit:
        raise InvalidInput(f"{what} is {len(value)} characters, over the limit of {limit}")
    problem = _problem(value, prefix)
    if problem is not None:
        raise InvalidInput(f"{what} {value!r} {problem}")
    return value


def check_name(value: Any, what: str = "name") -> str:
    """An exact scope (or any other name): refused with InvalidInput unless it is a valid name."""
    return _check(value, what, MAX_NAME_CHARS)


def check_agent_id(value: Any, what: str = "agent_id") -> str:
    """An agent id or a principal: a name short enough that its home scope is a name too."""
    return _check(value, what, MAX_AGENT_ID_CHARS)


def check_pattern(value: Any, what: str = "scope") -> str:
    """A grant's scope or a query's scope filter: an exact scope, `*` (every scope), or the start of a
    name followed by one `*` (`team:*`), which matches every scope that starts so."""
    if not isinstance(value, str) or not value.endswith(PATTERN_CHAR):
        return check_name(value, what)
    if len(value) > MAX_NAME_CHARS:
        raise InvalidInput(f"{what} is {len(value)} characters, over the limit of {MAX_NAME_CHARS}")
    stem = value[:-1]
    if PATTERN_CHAR in stem:
        raise InvalidInput(f"{what} pattern {value!r} may only have `*` at its end")
    if stem:
        problem = _problem(stem, prefix=True)
        if problem is not None:
            raise InvalidInput(f"{what} pattern {value!r}: its prefix {problem}")
    return value


def is_pattern(scope: str) -> bool:
    return scope.endswith(PATTERN_CHAR)


def home_scope(agent_id: str) -> str:
    return HOME_PREFIX + agent_id
