"""The query syntax, and what it means for one document to match a query.

A query is words separated by white space:

- `word`: any of the words may match; a document matching more, and rarer, words ranks higher.
- `"a phrase"`: the words in this order, next to each other.
- `-word`, `-"a phrase"`, `-word*`: a document matching it is left out.
- `word*`: any term that starts with `word` (at least MIN_PREFIX characters after analysis): `snake*`
  finds `snake_case` and `snake`, `file.p*` finds `file.py`. The word before `*` must analyse to one word
  and not be a run of a spaceless script longer than a bigram.

Each word goes through the same analysis as documents (mnemo.recall.analysis). A word that analyses to
one word is that word's whole term: `camelCase` is the term `camelcase` and `snake_case` the term
`snake_case`, so an identifier finds itself exactly (its parts are found by typing a part). A word that
analyses to several (`state-of-the-art`, `foo,bar`, or a run of Chinese, Japanese or Thai, which is its
bigrams) is the phrase of their atoms, as if it had been quoted. A quoted phrase of one word is that
word. A query that cannot be read is `InvalidInput`, whose message says what is wrong and what to type.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from mnemo.errors import InvalidInput
from mnemo.recall.analysis import Analysed, Word, atoms, counted, phrase_count, words

MAX_QUERY_CHARS = 1000
"""A longer query is refused: recall answers short queries, not documents pasted as queries."""
MAX_CLAUSES = 32
"""A query of more words, phrases and prefixes (excluded ones included) is refused."""
MIN_PREFIX = 2
"""A prefix shorter than this, after analysis, is refused: it would expand to most of the vocabulary."""

_CHUNK = re.compile(r'(-?)(?:"([^"]*)("?)|([^\s"]+))')


@dataclass(frozen=True)
class Term:
    """One analysed term: a simple word or an identifier's whole."""

    text: str


@dataclass(frozen=True)
class Phrase:
    """Atoms that must appear in this order, next to each other (at least two)."""

    atoms: tuple[str, ...]


@dataclass(frozen=True)
class Prefix:
    """Every term starting with `text`; each such term counts as a Term of its own."""

    text: str


Clause = Term | Phrase | Prefix
Feature = Term | Phrase
"""What BM25 counts: a term (a prefix counts as each of the terms it expands to) or a phrase."""


@dataclass(frozen=True)
class Query:
    """A parsed query: at least one clause to find, and those whose documents are left out."""

    include: tuple[Clause, ...]
    exclude: tuple[Clause, ...]
    # What an embedder is given for semantic recall: the included words as typed (no quotes, no `*`),
    # neither analysed nor lower-cased, since a model reads case and accents too.
    meaning: str = field(default="", compare=False)

    @property
    def highlights(self) -> tuple[frozenset[str], tuple[str, ...]]:
        """The terms and prefixes that mark a line of a result (analysis.matching_lines): the included
        terms, every atom of the included phrases (a phrase may span lines) and the included prefixes."""
        wanted, prefixes = _terms_and_prefixes(self.include)
        return frozenset(wanted), tuple(prefixes)

    @property
    def looked_up(self) -> tuple[list[str], list[str]]:
        """The terms whose postings an index is read for (every term and phrase atom, of included and
        excluded clauses alike), and the prefixes whose terms it expands, each sorted."""
        terms, prefixes = _terms_and_prefixes((*self.include, *self.exclude))
        return sorted(terms), sorted(set(prefixes))

    @property
    def phrase_atoms(self) -> list[str]:
        """The atoms of its phrases, included and excluded (those an index keeping positions reads with
        theirs), sorted."""
        return sorted({atom for clause in (*self.include, *self.exclude) if isinstance(clause, Phrase)
                       for atom in clause.atoms})

    def matches(self, text: str) -> bool:
        """Whether `features` finds `text` (analysed) a match, without counting every feature: its terms
        counted, and its atoms read for a phrase only, each by the C extension where it counts them."""
        counts = counted(text)[1]
        if any(_occurs(clause, counts, text) for clause in self.exclude):
            return False
        return any(_occurs(clause, counts, text) for clause in self.include)

    def features(self, document: Analysed) -> dict[Feature, int] | None:
        """The frequency in `document` of each feature of the included clauses it holds, or None when
        the document does not match: no included clause occurs in it, or an excluded one does. A term
        occurring n times has frequency n; a prefix adds each term it expands to, with that term's
        frequency; a phrase's frequency is the number of positions where it starts. A term both typed and
        reached by a prefix is one feature, counted once."""
        counts = Counter(document.terms)
        for clause in self.exclude:
            if _frequencies(clause, counts, document.atoms):
                return None
        found: dict[Feature, int] = {}
        for clause in self.include:
            found.update(_frequencies(clause, counts, document.atoms))
        return found or None


def _occurs(clause: Clause, counts: dict[str, int], text: str) -> bool:
    """Whether `clause` occurs in `text`, whose terms are counted in `counts` (what features finds)."""
    if isinstance(clause, Term):
        return counts.get(clause.text, 0) > 0
    if isinstance(clause, Prefix):
        return any(term.startswith(clause.text) for term in counts)
    if counts.get(clause.atoms[0], 0) == 0:
        return False
    found = phrase_count(text, clause.atoms)
    return bool(found if found is not None else occurrences(clause, atoms(text)))


def _frequencies(clause: Clause, counts: Counter[str], atoms: Sequence[str]) -> dict[Feature, int]:
    if isinstance(clause, Term):
        n = counts.get(clause.text, 0)
        return {clause: n} if n else {}
    if isinstance(clause, Prefix):
        return {Term(term): n for term, n in counts.items() if term.startswith(clause.text)}
    if counts.get(clause.atoms[0], 0) == 0:
        return {}
    starts = occurrences(clause, atoms)
    return {clause: starts} if starts else {}


def occurrences(phrase: Phrase, atoms: Sequence[str]) -> int:
    """How many positions of `atoms` (analysis.atoms of a document) the phrase starts at."""
    first, width = phrase.atoms[0], len(phrase.atoms)
    return sum(
        1 for i in range(len(atoms) - width + 1) if atoms[i] == first and tuple(atoms[i:i + width]) == phrase.atoms
    )


def _terms_and_prefixes(clauses: Sequence[Clause]) -> tuple[set[str], list[str]]:
    """The terms of `clauses` (their words and their phrases' atoms) and their prefixes, in order."""
    terms: set[str] = set()
    prefixes: list[str] = []
    for clause in clauses:
        if isinstance(clause, Term):
            terms.add(clause.text)
        elif isinstance(clause, Phrase):
            terms.update(clause.atoms)
        else:
            prefixes.append(clause.text)
    return terms, prefixes


def _clause(found: list[Word], shown: str) -> Clause:
    if not found:
        raise InvalidInput(f"the query word {shown!r} has no letters or digits to search for: remove it")
    if len(found) == 1 and not found[0].bigrams:
        return Term(found[0].whole)
    return Phrase(tuple(atom for word in found for atom in word.atoms))


def parse(query: str) -> Query:
    """The query `query` parsed, or InvalidInput naming what is wrong. Precondition: `query` is a str."""
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"the query is {len(query)} characters long, over the limit of {MAX_QUERY_CHARS}: "
            "search for a few distinctive words instead")
    if not query.strip():
        raise InvalidInput("the query is empty: give one or more words to search for")
    include: list[Clause] = []
    exclude: list[Clause] = []
    meaning: list[str] = []
    for chunk in _CHUNK.finditer(query):
        minus, quoted, closing, bare = chunk.groups()
        shown = chunk.group(0)
        if not minus:
            meaning.append(quoted if quoted is not None else bare.removesuffix("*"))
        if quoted is not None:
            if not closing:
                raise InvalidInput(
                    f"the query has an unclosed quote in {shown!r}: close the phrase with \" or remove the quote")
            clause = _phrase(quoted, shown)
        else:
            clause = _bare(bare, shown)
        (exclude if minus else include).append(clause)
    if len(include) + len(exclude) > MAX_CLAUSES:
        raise InvalidInput(
            f"the query has {len(include) + len(exclude)} words, phrases and prefixes, over the limit of "
            f"{MAX_CLAUSES}: search for fewer words")
    if not include:
        raise InvalidInput(
            "the query has only excluded words (-word): add at least one word to search for")
    return Query(tuple(include), tuple(exclude), " ".join(meaning))


def _phrase(inside: str, shown: str) -> Clause:
    if not inside.strip():
        raise InvalidInput(f"the query has an empty phrase {shown!r}: put words between the quotes")
    return _clause(words(inside), shown)


def _bare(text: str, shown: str) -> Clause:
    if text == "-":
        raise InvalidInput(f"the query has a lone {shown!r}: write -word to exclude a word")
    if text.endswith("*"):
        stem = text[:-1]
        if stem == "":
            raise InvalidInput(f"the query has a lone {shown!r}: write word* to find words starting with word")
        if "*" in stem:
            raise InvalidInput(f"the query word {shown!r} has * inside it: * may only end a word, as in word*")
        found = words(stem)
        if len(found) == 1 and found[0].bigrams:
            raise InvalidInput(
                f"the prefix {shown!r} is longer than a bigram of a script written without spaces: "
                "give at most 2 of its characters before the *, or search for the whole word without *")
        if len(found) != 1:
            raise InvalidInput(
                f"the prefix {shown!r} is not a single word: write word* with no punctuation before the *")
        if len(found[0].whole) < MIN_PREFIX:
            raise InvalidInput(
                f"the prefix {shown!r} is too short: give at least {MIN_PREFIX} characters before the *")
        return Prefix(found[0].whole)
    if "*" in text:
        raise InvalidInput(f"the query word {shown!r} has * inside it: * may only end a word, as in word*")
    return _clause(words(text), shown)
