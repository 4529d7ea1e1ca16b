"""The query syntax: what each form parses to, what a document must hold to match, every refusal's
exact text, and that nothing but InvalidInput ever comes out of parse."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo.errors import InvalidInput
from mnemo.recall.analysis import analyse
from mnemo.recall.query import MAX_CLAUSES, MAX_QUERY_CHARS, MIN_PREFIX, Phrase, Prefix, Query, Term, parse


@pytest.mark.parametrize(("text", "include", "exclude"), [
    ("cat", [Term("cat")], []),
    ("  Cat   DOG ", [Term("cat"), Term("dog")], []),
    ("café", [Term("cafe")], []),
    ('"black cat" dog', [Phrase(("black", "cat")), Term("dog")], []),
    ('"Cat"', [Term("cat")], []),
    ("cat -dog", [Term("cat")], [Term("dog")]),
    ('cat -"hot dog"', [Term("cat")], [Phrase(("hot", "dog"))]),
    ("cat -do*", [Term("cat")], [Prefix("do")]),
    ("cat a-b", [Term("cat"), Phrase(("a", "b"))], []),
    ("ca*", [Prefix("ca")], []),
    ("Snake*", [Prefix("snake")], []),
    ("file.p*", [Prefix("file.p")], []),
    ("東京*", [Prefix("東京")], []),
    ("snake_case camelCase file.py 3.11", [Term("snake_case"), Term("camelcase"), Term("file.py"), Term("3.11")],
     []),
    ('"file.py loader"', [Phrase(("file", "py", "loader"))], []),
    ("東京都", [Phrase(("東京", "京都"))], []),
    ("東京", [Term("東京")], []),
    ("東", [Term("東")], []),
    ("foo,bar", [Phrase(("foo", "bar"))], []),
    ("a --b", [Term("a")], [Term("b")]),
    ('a"b c"', [Term("a"), Phrase(("b", "c"))], []),
    ("ＣＡＴ", [Term("cat")], []),
])
def test_parse(text: str, include: list[object], exclude: list[object]) -> None:
    assert parse(text) == Query(tuple(include), tuple(exclude))  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "message"), [
    ("", "the query is empty: give one or more words to search for"),
    (" \t\n", "the query is empty: give one or more words to search for"),
    ("-cat", "the query has only excluded words (-word): add at least one word to search for"),
    ('-cat -"a b" -do*', "the query has only excluded words (-word): add at least one word to search for"),
    ('"black cat', "the query has an unclosed quote in '\"black cat': close the phrase with \" or remove the quote"),
    ('cat "a" b"', "the query has an unclosed quote in '\"': close the phrase with \" or remove the quote"),
    ("*", "the query has a lone '*': write word* to find words starting with word"),
    ("cat -*", "the query has a lone '-*': write word* to find words starting with word"),
    ("cat -", "the query has a lone '-': write -word to exclude a word"),
    ("c*t", "the query word 'c*t' has * inside it: * may only end a word, as in word*"),
    ("cat**", "the query word 'cat**' has * inside it: * may only end a word, as in word*"),
    ("c*", "the prefix 'c*' is too short: give at least 2 characters before the *"),
    ("foo,bar*", "the prefix 'foo,bar*' is not a single word: write word* with no punctuation before the *"),
    ("東京都*", "the prefix '東京都*' is longer than a bigram of a script written without spaces: give at most 2 "
     "of its characters before the *, or search for the whole word without *"),
    ('cat ""', "the query has an empty phrase '\"\"': put words between the quotes"),
    ('cat " "', "the query has an empty phrase '\" \"': put words between the quotes"),
    ("cat ,,,", "the query word ',,,' has no letters or digits to search for: remove it"),
    ('cat "!!"', "the query word '\"!!\"' has no letters or digits to search for: remove it"),
    (",*", "the prefix ',*' is not a single word: write word* with no punctuation before the *"),
    ("x" * 1001, "the query is 1001 characters long, over the limit of 1000: search for a few distinctive words "
     "instead"),
    ("w " * 33, "the query has 33 words, phrases and prefixes, over the limit of 32: search for fewer words"),
])
def test_bad_queries(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse(text)
    assert str(refused.value) == message


def test_the_limits() -> None:
    assert (MAX_QUERY_CHARS, MAX_CLAUSES, MIN_PREFIX) == (1000, 32, 2)
    assert len(parse("x" * MAX_QUERY_CHARS).include) == 1
    assert len(parse("w " * MAX_CLAUSES).include) == MAX_CLAUSES


@pytest.mark.parametrize(("query", "text", "features"), [
    ("cat", "the cat sat on the cat", {Term("cat"): 2}),
    ("cat dog", "a dog", {Term("dog"): 1}),
    ("cat", "a dog", None),
    ("cat -dog", "cat and dog", None),
    ("cat -dog", "cat and bird", {Term("cat"): 1}),
    ('cat -"hot dog"', "cat, dog, hot", {Term("cat"): 1}),
    ('cat -"hot dog"', "cat hot dog", None),
    ('"black cat"', "black cat, black dog, black cat", {Phrase(("black", "cat")): 2}),
    ('"black cat"', "cat black", None),
    ("ca*", "cat cab dog cat", {Term("cat"): 2, Term("cab"): 1}),
    ("cat ca*", "cat cab", {Term("cat"): 1, Term("cab"): 1}),
    ("snake*", "my snake_case", {Term("snake_case"): 1, Term("snake"): 1}),
    ("camelCase", "a camelCase b", {Term("camelcase"): 1}),
    ("case", "a camelCase b", {Term("case"): 1}),
    ('"snake case"', "snake_case", {Phrase(("snake", "case")): 1}),
    ("東京都", "東京都に行く", {Phrase(("東京", "京都")): 1}),
    ("東京都", "京都と東京", None),
    ("cafe", "Café au lait", {Term("cafe"): 1}),
    ("strasse", "Straße", {Term("strasse"): 1}),
])
def test_features(query: str, text: str, features: dict[object, int] | None) -> None:
    assert parse(query).features(analyse(text)) == features
    assert parse(query).matches(text) is (features is not None)


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from('ab cAB_.東京-"*'), min_size=1, max_size=12),
       st.text(st.sampled_from("ab cAB_.東京,\n"), max_size=40))
def test_matches_is_whether_features_finds_a_match(query_text: str, text: str) -> None:
    try:
        query = parse(query_text)
    except InvalidInput:
        return
    assert query.matches(text) is (query.features(analyse(text)) is not None)


def test_highlights() -> None:
    assert parse('cat "black dog" -bird ca*').highlights == (frozenset({"cat", "black", "dog"}), ("ca",))


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=80) | st.text(st.sampled_from('ab "-*,東京 _.\ud800'), max_size=30))
def test_parse_raises_nothing_but_invalid_input(text: str) -> None:
    try:
        query = parse(text)
    except InvalidInput as refused:
        assert str(refused)
    else:
        assert query.include and len(query.include) + len(query.exclude) <= MAX_CLAUSES
        query.features(analyse(text))
