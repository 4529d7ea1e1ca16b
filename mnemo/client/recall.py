"""Recall: the readable records whose content best matches a query, best first, each with the lines
that match (docs/RECALL.md). The ranking is the backend's; here are the checks of the call, the mode
chosen, and the results as the API returns them."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import InvalidInput
from ..recall.analysis import first_lines, matching_lines
from ..recall.embedding import check_mode
from ..recall.query import Query as RecallQuery
from ..recall.query import parse as parse_recall_query
from ..record import Recalled
from ..storage.recall import Hit
from .core import ClientCore

MAX_RECALL = 1000
"""The most results one recall returns."""


def recall(
    self: ClientCore,
    query: str,
    *,
    scope: str | None = None,
    tags: Iterable[str] = (),
    any_tags: Iterable[str] = (),
    tag_prefix: str | None = None,
    limit: int = 10,
    mode: str | None = None,
) -> list[Recalled]:
    """The readable records whose content best matches `query` (docs/RECALL.md: words, "phrases",
    -excluded, prefix*), best first, ranked over the live records this agent may read in `scope`
    (exact, or a `prefix*` pattern) whose content is text, so that records it cannot read change
    neither the hits nor a score. `mode`: "lexical" ranks by BM25 over the words; "semantic" by
    the cosine of each record's vector with the query's, made by the client's embedder; "hybrid"
    by both (docs/RECALL.md §6); None is "hybrid" with an embedder and "lexical" without. `tags`,
    `any_tags` and `tag_prefix` keep only hits with all of `tags`, one of `any_tags` and a tag
    starting with `tag_prefix` (as `query` filters), before the `limit` best are taken; they leave
    the corpus, and so the scores, as they are. At most `limit` (1 to 1,000) results; each has the
    matching lines of its content (a record found by meaning alone, its first lines) and what each
    ranking gave it. A query that cannot be read, or a
    mode other than lexical without an embedder, is InvalidInput, saying what is wrong."""
    store = self._store

    def read() -> tuple[list[Hit], RecallQuery, str]:
        if not isinstance(query, str):
            raise InvalidInput(f"the query must be a string, got {type(query).__name__}")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_RECALL:
            raise InvalidInput(f"limit must be an int from 1 to {MAX_RECALL}, got {limit!r}")
        chosen = check_mode(default_mode(self) if mode is None else mode, self.embedder)
        parsed = parse_recall_query(query)
        filters, scopes = self._query(tags, any_tags, tag_prefix, scope, None)
        return store.recall(parsed, scopes, filters, limit, chosen), parsed, chosen

    # A lexical recall's first statement (the text index's) brings the head too, as get and query
    # do; a recall by meaning first catches up its vectors, and the head in a statement of its own.
    if mode == "lexical" or (mode is None and self.embedder is None):
        hits, parsed, chosen = store.read_fresh(read)
    else:
        store.refresh()
        hits, parsed, chosen = read()
    records = self._latest_records([hit.found for hit in hits])
    wanted, prefixes = parsed.highlights
    out = []
    for record, hit in zip(records, hits, strict=True):
        content = record.content
        lines = matching_lines(content, wanted, prefixes) if isinstance(content, str) else []
        if not lines and chosen != "lexical" and isinstance(content, str):
            lines = first_lines(content)  # found by meaning alone: no line holds a word of the query
        out.append(Recalled(record, hit.score, tuple(lines),
                            hit.score if chosen == "lexical" else hit.lexical, hit.semantic))
    return out


def default_mode(self: ClientCore) -> str:
    """The mode `recall` uses when none is given: "hybrid" with an embedder, else "lexical"."""
    return "lexical" if self.embedder is None else "hybrid"

