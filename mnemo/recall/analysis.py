"""Text analysis: how a text becomes the terms recall indexes and a query is matched against.

The same function analyses a record's text and a query's words, so whatever a text says can be found by
typing it. The steps, in order:

1. Normalisation: Unicode NFKC (full-width `Ａ` is `A`, the ligature `ﬁ` is `fi`, `①` is `1`), accents
   folded (the text is decomposed and the combining diacritical marks, U+0300–U+036F and their extension
   and supplement blocks, are dropped, so `café` is `cafe`), and the case folded (`Straße` is `strasse`).
   The vowel signs and tone marks of Thai, Indic, Hebrew and Arabic are letters of their words, not
   accents, and stay. Case is folded after words are split, so that `camelCase` still shows its parts.
2. Words: maximal runs of Unicode word characters (Python's `\\w`: letters, digits, `_`, plus the marks of
   the Indic, Hebrew and Arabic scripts), where a `.` between two word characters joins (`file.py`,
   `3.11`, `e.g`). Everything else (spaces, punctuation, symbols, `-`) separates words.
3. Scripts written without spaces (Han, Hiragana, Katakana, Thai, Lao, Myanmar, Khmer): a run of their
   characters is indexed as its overlapping character bigrams (`東京都` gives `東京`, `京都`); a run of
   one character is that character. A word of those scripts is found as the phrase of its bigrams.
4. Identifiers: a word holding `_` or `.`, or with an ASCII case change (`camelCase`, `HTTPServer`),
   is found whole and by parts. Its pieces are what lies between `_` and `.`; a piece's parts are it split
   before an upper-case letter that follows a lower-case one or a digit, or that starts a capitalised word
   after capitals. The word yields its whole, then for each piece: the piece itself (unless it is the
   whole word) and, when it has more than one, its parts. So `snake_case` gives `snake_case`, `snake`,
   `case`; `camelCase` gives `camelcase`, `camel`, `case`; `file.py` gives `file.py`, `file`, `py`; `3.11`
   gives `3.11`, `3`, `11`; `get_fooBar` gives `get_foobar`, `get`, `foobar`, `foo`, `bar` (so the query
   `fooBar` finds it). A word of only `_` yields nothing. Letters and digits are not split apart (`utf8` is
   one word). No stemming. Analysing the terms of a text again gives the same set of terms.

Terms and positions: `terms(text)` lists every term in text order, a word's whole before its parts, and a
document's length (for BM25) is the length of that list: a simple word counts 1, a bigram 1, an
identifier 1 for its whole and 1 for each piece and part it yields (`file.py` 3, `get_fooBar` 5).
`atoms(text)` is the sequence phrases are matched against, one position each: a simple word, each part
of an identifier (`get_fooBar`: `get`, `foo`, `bar`), each bigram. No term is longer than its word, and
none is cut.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Sequence
from typing import NamedTuple

from .._native import speedups

LINE_CHARS = 200
"""A line of a result is cut to this many characters (code points)."""

# Scripts written without spaces between words: Thai, Lao, Myanmar, Khmer, the iteration and closing marks
# of CJK, Hiragana, Katakana (and its phonetic extension), and the CJK unified ideographs of every plane.
_SPACELESS = (
    "\u0e01-\u0e3a\u0e40-\u0e4e\u0e50-\u0e59\u0e81-\u0edf\u1000-\u109f\u1780-\u17dd\u17e0-\u17e9"
    "\u3005-\u3007\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\U00020000-\U0002fa1f\U00030000-\U0003134f"
)
# Marks that Python's \w leaves out but that belong to their word: Hebrew points, Arabic harakat, and the
# vowel signs and viramas of the Indic blocks (Devanagari to Sinhala, without the dandas U+0964, U+0965).
_MARKED = "\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0900-\u0963\u0966-\u0dff"
_CHAR = rf"(?:[^\W{_SPACELESS}]|[{_MARKED}])"
_TOKEN = re.compile(rf"([{_SPACELESS}]+)|({_CHAR}+(?:\.{_CHAR}+)*)")
# The same words in ASCII text, which holds no spaceless script and no mark (and whose \w is these).
_ASCII_WORD = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*")
_PAIRS = re.compile(r"(?=(..))", re.DOTALL)
_SEPARATORS = re.compile(r"[._]+")
_CASE_CHANGE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# The accents folded away: Combining Diacritical Marks, its Extended and Supplement blocks, the marks
# for symbols and the combining half marks.
_ACCENTS = {
    code: None
    for first, last in ((0x300, 0x36F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F))
    for code in range(first, last + 1)
}


class Analysed(NamedTuple):
    """A text's terms (what BM25 counts; `len(terms)` is the document's length) and its atoms (the
    positions phrases are matched against)."""

    terms: list[str]
    atoms: list[str]


class Word(NamedTuple):
    """One word of a text: its whole term and the atoms it stands for (itself, its identifier parts, or
    its bigrams for a run of a spaceless script, whose `whole` is then the run itself, and `bigrams` is
    true when that run is longer than one bigram)."""

    whole: str
    atoms: tuple[str, ...]
    bigrams: bool = False


def fold(text: str) -> str:
    """NFKC with the accents dropped (steps 1 without the case): NFKD, accents removed, NFC. ASCII is
    returned as it is, which is what the three steps would give it."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", unicodedata.normalize("NFKD", text).translate(_ACCENTS))


def _case(word: str) -> str:
    folded = word.casefold()
    # casefold can leave a combining mark (İ gives i + U+0307) or an unnormalised sequence
    return folded if folded.isascii() else fold(folded)


def _split(word: str) -> tuple[list[str], list[str]] | None:
    """The terms an identifier yields after its whole, and its atoms (each case-folded); None for a
    simple word, whose one term and atom is itself."""
    # the common words, which _CASE_CHANGE cannot split, without running it: lower case, capitalised,
    # and capitals with no digit
    if "_" not in word and "." not in word and (
            word.islower() or word[1:].islower() or (word.isupper() and word.isalpha())):
        return None
    pieces = [piece for piece in _SEPARATORS.split(word) if piece]
    after: list[str] = []
    found: list[str] = []
    for piece in pieces:
        parts = [_case(part) for part in _CASE_CHANGE.split(piece)]
        if piece != word:
            after.append(_case(piece))
        if len(parts) > 1:
            after += parts
        found += parts
    if not after and len(found) == 1:
        return None
    return after, found


def _bigrams(run: str) -> list[str]:
    return _PAIRS.findall(run) or [run]


def _word(word: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The terms and atoms of one word (not a run of a spaceless script)."""
    split = _split(word)
    if split is None:
        whole = (_case(word),)
        return whole, whole
    if not split[1]:
        return (), ()
    return (_case(word), *split[0]), tuple(split[1])


Seen = dict[str, tuple[tuple[str, ...], tuple[str, ...]]]
"""Words already analysed, with their terms and atoms (see analyse)."""
SEEN_MAX = 200_000


def analyse(text: str, seen: Seen | None = None) -> Analysed:
    """The terms and atoms of `text`, in one pass. Never raises for any str. `seen`, when given, keeps
    each word's analysis for the next texts (most words of a text are common ones, and looking one up
    costs a fraction of analysing it again), up to SEEN_MAX words: for a batch of texts analysed
    together, and dropped after it, so that nothing keeps the words of a text once it is forgotten."""
    terms: list[str] = []
    atoms: list[str] = []
    if seen is None:
        seen = {}
    # ASCII text has no accents and no spaceless runs: its words alone, found by a simpler pattern
    ascii_text = text.isascii()
    tokens = [("", word) for word in _ASCII_WORD.findall(text)] if ascii_text else _TOKEN.findall(fold(text))
    for run, word in tokens:
        if run:
            grams = _bigrams(run)
            terms += grams
            atoms += grams
            continue
        found = seen.get(word)
        if found is None:
            found = _word(word)
            if len(seen) < SEEN_MAX:
                seen[word] = found
        terms += found[0]
        atoms += found[1]
    return Analysed(terms, atoms)


def terms(text: str, seen: Seen | None = None) -> list[str]:
    """Every term of `text` in order, each identifier's whole before its parts; the length BM25 uses is
    the length of this list. `seen`: as for analyse."""
    return analyse(text, seen).terms


def counted(text: str, seen: Seen | None = None) -> tuple[int, dict[str, int]]:
    """`len(terms(text))` (the document's length) and how often each term occurs, the terms in the order
    they first occur. The C extension counts an ASCII text (mnemo/_speedups.c, count_terms: the same
    analysis, tested and fuzzed against this one); `seen`: as for analyse."""
    if speedups is not None:
        native: tuple[int, dict[str, int]] | None = speedups.count_terms(text)
        if native is not None:
            return native
    found = terms(text, seen)
    return len(found), dict(Counter(found))


def phrase_count(text: str, phrase: tuple[str, ...]) -> int | None:
    """How many positions of `atoms(text)` start the sequence `phrase` (each an atom: analysed, lower
    case), counted by the C extension for an ASCII text (mnemo/_speedups.c, count_phrase: the same
    atoms, tested and fuzzed against this analysis); None where it does not count it (the text is not
    ASCII, or the extension is not built), for the caller to count over `atoms(text)`."""
    if speedups is None:
        return None
    found: int | None = speedups.count_phrase(text, phrase)
    return found


def atoms(text: str) -> list[str]:
    """The positions of `text` for phrase matching: simple words, identifier parts and bigrams."""
    return analyse(text).atoms


def words(text: str) -> list[Word]:
    """The words of `text` as a query reads them (a run of a spaceless script is one word)."""
    found: list[Word] = []
    for run, word in _TOKEN.findall(fold(text)):
        if run:
            found.append(Word(run, tuple(_bigrams(run)), len(run) > 2))
            continue
        split = _split(word)
        if split is None:
            whole = _case(word)
            found.append(Word(whole, (whole,)))
        elif split[1]:
            found.append(Word(_case(word), tuple(split[1])))
    return found


def first_lines(text: str, limit: int = 3) -> list[tuple[int, str]]:
    """The first `limit` lines of `text` that hold more than white space, as matching_lines gives lines:
    what a result found by meaning alone shows (none of its lines holds a word of the query)."""
    out: list[tuple[int, str]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if len(out) == limit:
            break
        if line.strip():
            out.append((number, line[:LINE_CHARS]))
    return out


def matching_lines(
    text: str, wanted: Collection[str], prefixes: Sequence[str] = (), limit: int = 3
) -> list[tuple[int, str]]:
    """The best `limit` lines of `text` that hold any of the `wanted` terms or a term starting with one of
    `prefixes`, as `(line_number, line)`: numbered from 1, lines split at `\\n` only (as the memory tool
    numbers them), each cut to LINE_CHARS characters. Best means the most distinct wanted terms and
    prefixes, then the earliest; they are returned in line order. Precondition: `limit >= 0`; `wanted`
    and `prefixes` are analysed terms (what `terms` gives), for example a query's `highlights`."""
    ranked: list[tuple[int, int, str]] = []
    needles = (*wanted, *prefixes)
    for number, line in enumerate(text.split("\n"), start=1):
        # An ASCII line's terms are substrings of it lower-cased: a line holding none of the needles
        # is passed over without being analysed.
        if line.isascii():
            lowered = line.lower()
            if not any(needle in lowered for needle in needles):
                continue
        present = counted(line)[1].keys()  # (by the C extension, for an ASCII line)
        hits = len(present & set(wanted))
        hits += sum(1 for prefix in prefixes if any(term.startswith(prefix) for term in present))
        if hits:
            ranked.append((-hits, number, line))
    ranked.sort()
    return sorted((number, line[:LINE_CHARS]) for _, number, line in ranked[:limit])


def marked_spans(line: str, wanted: Collection[str], prefixes: Sequence[str] = ()) -> list[tuple[int, int]]:
    """Where `line` holds what matching_lines counts: the (start, end) character offsets, in order and
    never overlapping, of each word of `line` that yields one of the `wanted` terms or a term starting
    with one of `prefixes` (a run of a spaceless script is marked whole when one of its bigrams is
    wanted). For showing a result's lines with their matching words marked."""
    spans: list[tuple[int, int]] = []
    for match in _TOKEN.finditer(line):
        found = terms(match.group())
        if any(term in wanted or term.startswith(tuple(prefixes)) for term in found):
            spans.append(match.span())
    return spans
