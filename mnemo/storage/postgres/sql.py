"""The SQL the PostgreSQL store sends beside its schema (the schema package): the calls that commit, the columns
and subqueries of a record's reads, the WHERE conditions that scopes and a query's tags make; and the
records read back from their rows."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from ...chain.codec import SALT_SIZE, served_put_problem
from ...recall.bm25 import K1, B
from ...record import MemoryRecord
from ...validation import PATH_TAG_PREFIX
from ..records import record_of
from ..types import Query, Rec, ScopeFilter, Version
from .text_index import NOT_KEPT, TERM_KEY

VERSION_COLUMNS = "v.ver, v.seq, v.ts_ns, v.agent, v.size, v.hash, v.entry_len, v.payload_len"
# A record's row: its id and scope, then its latest version's columns (as VERSION_COLUMNS), schema version 10
RECORD_COLUMNS = "id, scope, ver, seq, ts_ns, agent, size, hash, entry_len, payload_len"
TAGS = "(SELECT coalesce(array_agg(t.tag ORDER BY t.tag), '{}') FROM mnemo_tags t WHERE t.id = r.id)"
# A record's versions, looked up by key for each record `r` (OFFSET 0: never flattened into a join)
VERSIONS = "(SELECT * FROM mnemo_versions w WHERE w.id = r.id OFFSET 0) v"
PUT_CALL = (
    "CALL mnemo_put(%s, %s, %s::bigint[], %s::bytea[], %s::bytea[], %s::text[], %s::text[], %s::text[], "
    "%s::bigint[], %s::text[], %s::integer[], %s::integer[], %s::integer[], %s::text[], %s::integer[], %s::integer[], "
    "%b::bytea[])"
)
TEXT_CALL = (
    "SELECT mnemo_index_text(%s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::text[], %s::integer[], "
    "%s::text[], %s::integer[], %s::integer[], %b::bytea[])"
)
COMMIT_CALL = (
    "SELECT mnemo_commit(%s::bigint[], %s::text[], %s::bytea[], %s::bytea[], %s::bigint[], %s::bytea[], "
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::integer[], %s::text[], %s::text[], %s::integer[], "
    "%s::text[], %s::integer[], %s::bigint[], %s::bigint[], %s::text[], %s::bigint[], %s::bytea[], "
    "%s::integer[], %s::integer[], %s::text[], %s::text[], %s::text[], %s, %s, %s, %s)"
)


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _prefix_sql(column: str, prefix: str) -> tuple[str, list[Any]]:
    """A condition that `column` (of collation "C": bytes order, which is code point order) starts with
    `prefix`, and its parameters: the LIKE says it exactly; the range beside it is what an index scan
    bounds itself by, also in a generic plan, where the planner does not see the pattern."""
    upper = _successor(prefix)
    sql = f"{column} LIKE %s AND {column} >= %s" + ("" if upper is None else f" AND {column} < %s")
    return sql, [_like_prefix(prefix), prefix] + ([] if upper is None else [upper])


def _successor(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix`, or None if there is none."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code == 0xD800:
            code = 0xE000  # surrogates are no characters of a stored text
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None


def scope_sql(scopes: ScopeFilter, column: str = "r.scope") -> tuple[str, list[Any]]:
    """A WHERE condition admitting exactly the scopes `scopes` admits, and its parameters. The scopes of an
    agent granted no scope prefix are compared by equality alone, which an index on (…, scope) reads as a
    bound: a reader of one scope of four reads that scope's entries of an index, not the four's."""
    parts: list[str] = []
    params: list[Any] = []
    if not scopes.everything:
        if not scopes.prefixes:
            parts.append(f"{column} = ANY(%s::text[])")
            params.append(sorted(scopes.exact))
        else:
            parts.append(f"({column} = ANY(%s::text[]) OR {column} LIKE ANY(%s::text[]))")
            params += [sorted(scopes.exact), [_like_prefix(p) for p in scopes.prefixes]]
    requested = scopes.requested
    if requested is not None:
        if requested.endswith("*"):
            sql, prefix_params = _prefix_sql(column, requested[:-1])
            parts.append(sql)
            params += prefix_params
        else:
            parts.append(f"{column} = %s")
            params.append(requested)
    return (" AND ".join(parts) or "true"), params


def _tags_sql(tags: Query, doc: str) -> tuple[str, list[Any]]:
    """A condition that the record `doc` names has the tags `tags` asks for (by its mnemo_tags rows), and
    its parameters."""
    conds: list[str] = []
    params: list[Any] = []
    for tag in tags.tags:
        conds.append(f"EXISTS (SELECT 1 FROM mnemo_tags g WHERE g.tag = %s AND g.id = {doc})")
        params.append(tag)
    if tags.any_tags or tags.any_prefixes:
        sql, any_params = _any_tag_sql("g.tag", tags)
        conds.append(f"EXISTS (SELECT 1 FROM mnemo_tags g WHERE g.id = {doc} AND {sql})")
        params += any_params
    if tags.tag_prefix is not None:
        sql, prefix_params = _prefix_sql("g.tag", tags.tag_prefix)
        conds.append(f"EXISTS (SELECT 1 FROM mnemo_tags g WHERE g.id = {doc} AND {sql})")
        params += prefix_params
    return " AND ".join(conds) or "true", params


def _any_tag_sql(column: str, query: Query) -> tuple[str, list[Any]]:
    """A condition that the tag in `column` is one of the query's `any_tags` or starts with one of its
    `any_prefixes`, and its parameters."""
    parts = [f"{column} = ANY(%s::text[])"]
    params: list[Any] = [list(query.any_tags)]
    for prefix in query.any_prefixes:
        sql, prefix_params = _prefix_sql(column, prefix)
        parts.append(f"({sql})")
        params += prefix_params
    return "(" + " OR ".join(parts) + ")", params


def recall_sql(
    exact: list[str], prefixes: list[str], scopes: ScopeFilter, tags: Query, touched: list[str],
    positional: list[str], prefetch: int = 0,
) -> tuple[str, list[Any]]:
    """One read of the text index for a recall, in one statement (one snapshot), and its parameters. The
    corpus is the documents of the scopes `scopes` admits; its rows are (kind, name, a, b, seqs, tfs,
    lengths, terms, counts, positions), and with `prefetch`, 13 columns more (NULL but in kind 5):

    - (0, NULL, documents, total length, NULL...): the corpus's, summed over its scopes' totals;
    - (1, NULL, NULL, NULL, seqs, tfs, lengths, terms, counts): the postings of the `exact` terms and of
      each term starting with one of the `prefixes` that a document of the corpus holds, all in one row:
      `terms` lists those terms, `counts` how many postings each has, and the postings follow in that
      order, each column packed (text_index.unpacked reads them): the documents' seqs (8 bytes each), how
      often each holds its term, their lengths and the counts (4 bytes each), big-endian; all NULL when
      there are none;
    - (2, NULL, NULL, NULL, seqs, NULL...) when `tags` asks for tags: the documents of those postings
      whose tag rows match them, packed as the seqs above (none is NULL);
    - (3, id, seq, length, NULL...) for the document in the corpus of each record of `touched`;
    - (4, NULL, NULL, NULL, seqs, tfs, lengths, terms, counts, positions): as kind 1, for the terms of
      `positional` (the words of phrases, which are among `exact`; their postings are in this row only,
      unless a prefix reaches them too), with each posting's positions: `positions` all of them one
      posting after the other, as mnemo_terms holds them (text_index.pack_places: each says where it
      ends), text_index.NOT_KEPT where mnemo_terms keeps none (NULL);
    - with `prefetch` (a number of documents), (5, NULL..., then latest_sql's columns) for each version of
      the records of the `prefetch` best documents of the postings read, by their BM25 scores computed
      here, when those postings number PREFETCH_POSTINGS at most (none otherwise), in the scopes `scopes`
      admits, their latest payloads with them: what the hits read would read, when the ranking's best
      are among them. Each term read is a feature of its own (the query's words and its prefixes' terms;
      no phrase: the caller asks for none when the query has one, or excludes anything), so these are
      the engine's scores but for the order of their sums and a logarithm computed otherwise: their last
      bits may differ, and the caller ranks the postings itself and reads what is not among these.

    A term's postings come from mnemo_terms' index on (key, scope), which holds their seq, tf and length:
    a term shorter than TERM_KEY characters is its own key, so its postings are read from the index alone
    (an index-only scan); a longer one is found by its key, then compared whole in the table. A prefix is
    a range of keys (LIKE on the key when it is shorter than a key, on the term otherwise); the terms it
    reaches that are longer than a key are read from the table by their documents. Each posting is read
    once: a term typed that a prefix reaches, or a prefix another one reaches, is left to that prefix (a
    word of a phrase is read with its positions all the same, and so may be read twice). Precondition:
    `exact` or `prefixes` is not empty, and `positional` is among `exact`."""
    # a character is 1 to 4 bytes, and a database whose encoding is SQL_ASCII counts bytes: a term of
    # fewer than TERM_KEY // 4 characters here is shorter than a key there, whatever the encoding
    short = TERM_KEY // 4
    prefixes = [p for p in sorted(set(prefixes)) if not any(p != q and p.startswith(q) for q in prefixes)]
    positional = sorted(set(positional))
    exact = sorted({term for term in exact if not term.startswith(tuple(prefixes))}.difference(positional))
    where, scope_params = scope_sql(scopes, "t.scope")
    columns = "t.seq, t.tf, t.length FROM mnemo_terms t"
    parts, params = _exact_parts(exact, where, scope_params, columns)
    # each part's postings aggregated by term (`terms`, below), and their parameters
    grouped, grouped_params = [_grouped(part) for part in parts], list(params)
    with_positions, positional_params = _exact_parts(positional, where, scope_params,
                                                     "t.seq, t.tf, t.length, t.positions FROM mnemo_terms t")
    for prefix in prefixes:
        if len(prefix) < short:
            sql, prefix_params = _prefix_sql("t.key", prefix)
            parts.append(f"SELECT t.key, {columns} WHERE {where} AND {sql} AND length(t.key) < {TERM_KEY}")
            params += [*scope_params, *prefix_params]
            # the terms longer than a key: their documents by the index, then their rows in the table
            parts.append(
                f"SELECT x.term, x.seq, x.tf, x.length FROM (SELECT DISTINCT t.key, t.seq FROM mnemo_terms t "
                f"WHERE {where} AND {sql} AND length(t.key) >= {TERM_KEY}) l CROSS JOIN LATERAL (SELECT x.term, "
                "x.seq, x.tf, x.length FROM mnemo_terms x WHERE x.seq = l.seq AND x.key = l.key OFFSET 0) x"
            )
            params += [*scope_params, *prefix_params]
            # aggregated, the range is scanned once: every key's postings grouped in the index's order,
            # and a key as long as a key (terms longer than it share it) read again by its rows, by term
            x_where, _same = scope_sql(scopes, "x.scope")
            grouped.append(
                f"SELECT coalesce(y.term, g.key), coalesce(y.seqs, g.seqs), coalesce(y.tfs, g.tfs), "
                f"coalesce(y.lengths, g.lengths), coalesce(y.n, g.n) FROM (SELECT t.key, {_AGGREGATES.format('t')} "
                f"FROM mnemo_terms t WHERE {where} AND {sql} GROUP BY t.key) g(key, seqs, tfs, lengths, n) "
                f"LEFT JOIN LATERAL (SELECT x.term, {_AGGREGATES.format('x')} FROM (SELECT x.term, x.seq, x.tf, "
                f"x.length FROM mnemo_terms x WHERE length(g.key) >= {TERM_KEY} AND x.key = g.key AND {x_where} "
                "ORDER BY x.term) x GROUP BY x.term) y(term, seqs, tfs, lengths, n) ON true"
            )
            grouped_params += [*scope_params, *prefix_params, *scope_params]
        else:
            sql, prefix_params = _prefix_sql("t.key", prefix[:short])
            parts.append(f"SELECT t.term, {columns} WHERE {where} AND {sql} AND t.term LIKE %s")
            params += [*scope_params, *prefix_params, _like_prefix(prefix)]
            grouped.append(_grouped(parts[-1]))
            grouped_params += [*scope_params, *prefix_params, _like_prefix(prefix)]
    # the postings of every term, without positions (for the tags of their documents)
    postings = " UNION ALL ".join([*parts, *(part.replace(", t.positions FROM", " FROM") for part in with_positions)])
    where, scope_params = scope_sql(scopes, "d.scope")
    sql = (
        "SELECT 0, NULL::text, coalesce(sum(d.docs), 0)::bigint, coalesce(sum(d.length), 0)::bigint, NULL::bytea, "
        f"NULL::bytea, NULL::bytea, NULL::text[], NULL::bytea, NULL::bytea FROM mnemo_text_scopes d "
        f"WHERE {where} "
    )
    # each part's terms are its own: aggregated apart, each in the order its index gives (no sort); then
    # every term's postings in one row (the aggregates of one node read its rows in one order)
    terms = " UNION ALL ".join(grouped)
    touched_sql = ("UNION ALL SELECT 3, d.id, d.seq, d.length, NULL, NULL, NULL, NULL, NULL, NULL FROM mnemo_docs d "
                   f"WHERE d.id = ANY(%s::text[]) AND {where}")
    every_term = ("UNION ALL SELECT 1, NULL, NULL, NULL, string_agg(g.seqs, ''::bytea), string_agg(g.tfs, ''::bytea), "
                  "string_agg(g.lengths, ''::bytea), array_agg(g.key), string_agg(int4send(g.n), ''::bytea), NULL "
                  f"FROM ({terms}) g(key, seqs, tfs, lengths, n) ") if parts else ""
    if prefetch and parts and not with_positions and not tags.filters_tags:
        best, best_params = _best_sql(postings, params, where, scope_params, prefetch)
        records_where, records_params = scope_sql(scopes)
        source = (f"(SELECT DISTINCT w.id FROM ({best}) c JOIN mnemo_versions w ON w.seq = c.seq) c "
                  f"CROSS JOIN LATERAL {records_of('c.id')}")
        sql = (f"SELECT i.*, {', '.join(['NULL'] * 13)} FROM ({sql}{every_term}{touched_sql}) i UNION ALL SELECT 5, "
               f"{', '.join(['NULL'] * 9)}, z.* "
               f"FROM ({latest_sql(source, records_where, '', 'c.raw, c.payload', False, index_tags=False)}) z")
        return planned_once(sql), [*scope_params, *grouped_params, touched, *scope_params, *best_params,
                                   *records_params]
    sql += every_term
    if with_positions:
        terms = " UNION ALL ".join(
            "SELECT p.key, string_agg(int8send(p.seq), ''::bytea), string_agg(int4send(p.tf), ''::bytea), "
            "string_agg(int4send(p.length), ''::bytea), count(*)::integer, "
            f"string_agg(coalesce(p.positions, '\\x{NOT_KEPT.hex()}'::bytea), ''::bytea) "
            f"FROM ({part}) p(key, seq, tf, length, positions) GROUP BY p.key" for part in with_positions)
        sql += ("UNION ALL SELECT 4, NULL, NULL, NULL, string_agg(g.seqs, ''::bytea), string_agg(g.tfs, ''::bytea), "
                "string_agg(g.lengths, ''::bytea), array_agg(g.key), string_agg(int4send(g.n), ''::bytea), "
                "string_agg(g.positions, ''::bytea) "
                f"FROM ({terms}) g(key, seqs, tfs, lengths, n, positions) ")
    postings_params = [*params, *positional_params]
    params = [*scope_params, *grouped_params, *positional_params]  # (none without positions)
    if tags.filters_tags:
        tagged, tag_params = _tags_sql(tags, "d.id")
        # the postings read again, from the index as above, for their documents' tags
        sql += ("UNION ALL SELECT 2, NULL, NULL, NULL, coalesce(string_agg(int8send(q.seq), ''::bytea), ''::bytea), "
                "NULL, NULL, NULL, NULL, NULL "
                f"FROM (SELECT DISTINCT p.seq FROM ({postings}) p(key, seq, tf, length)) q "
                "CROSS JOIN LATERAL (SELECT d.id FROM mnemo_docs d WHERE d.seq = q.seq OFFSET 0) d "
                f"WHERE {tagged} ")
        params += [*postings_params, *tag_params]
    sql += touched_sql
    return planned_once(sql), [*params, touched, *scope_params]


_AGGREGATES = ("string_agg(int8send({0}.seq), ''::bytea), string_agg(int4send({0}.tf), ''::bytea), "
               "string_agg(int4send({0}.length), ''::bytea), count(*)::integer")


def _grouped(part: str) -> str:
    """recall_sql's postings of a part (rows of key, seq, tf, length), a row for each of its terms: the
    term, then its postings' columns packed, and how many they are."""
    return f"SELECT p.key, {_AGGREGATES.format('p')} FROM ({part}) p(key, seq, tf, length) GROUP BY p.key"


PREFETCH_POSTINGS = 512
"""recall_sql's prefetch ranks the postings it read when they number this many at most (a rare word's, or a
few rare words'): it counts that many at most to find out (a read of the term index, no sort), and so
costs a query of more postings little."""


def _double(value: float) -> str:
    return f"'{value!r}'::float8"  # (a literal such as 2.2 alone is a numeric: exact, and not a double)


_SATURATION = (f"x.tf * {_double(K1 + 1)} / (x.tf + {_double(K1)} * ({_double(1 - B)} + {_double(B)} * x.length "
               "/ (n.total / n.docs)))")
_IDF = f"ln({_double(1.0)} + (n.docs - x.df + {_double(0.5)}) / (x.df + {_double(0.5)}))"


@functools.lru_cache(maxsize=256)
def _best_text(postings: str, where: str, limit: int) -> str:
    """_best_sql's statement (its text depends on the shape of the query alone, so it is made once)."""
    return (
        "SELECT x.seq FROM (SELECT p.seq, p.tf::float8 AS tf, p.length::float8 AS length, "
        f"(count(*) OVER (PARTITION BY p.key))::float8 AS df FROM (SELECT * FROM ({postings}) p "
        f"LIMIT {PREFETCH_POSTINGS + 1}) p(key, seq, tf, length)) x, "
        "(SELECT sum(d.docs)::float8 AS docs, sum(d.length)::float8 AS total "
        f"FROM mnemo_text_scopes d WHERE {where}) n "
        f"WHERE (SELECT count(*) FROM (SELECT 1 FROM ({postings}) c LIMIT {PREFETCH_POSTINGS + 1}) c) "
        f"<= {PREFETCH_POSTINGS} AND n.docs > 0 AND n.total > 0 GROUP BY x.seq "
        f"ORDER BY sum({_IDF} * ({_SATURATION})) DESC, x.seq DESC LIMIT {limit}"
    )


def _best_sql(
    postings: str, postings_params: list[Any], where: str, scope_params: list[Any], limit: int
) -> tuple[str, list[Any]]:
    """The seqs of the `limit` best documents by BM25 (score down, then seq down) among the `postings`
    (rows of key, seq, tf, length: each key a feature; the corpus's totals those of the scopes `where`
    admits in mnemo_text_scopes), when there are PREFETCH_POSTINGS of them at most (none otherwise, and
    the postings are not ranked: the condition is checked first, once), and its parameters. The
    expression is bm25.saturation's and engine.norm's, operation by operation."""
    sql = _best_text(postings, where, int(limit))
    return sql, [*postings_params, *scope_params, *postings_params]


_PARAMETER = re.compile(r"%s((?:::[a-z]+(?:\[\])?)?)")


@functools.lru_cache(maxsize=256)
def planned_once(sql: str) -> str:
    """`sql` with each of its parameters read through a subquery of its own, `(SELECT %s::T)::T` (the cast
    again: an expression, which `= ANY(...)` takes as an array, not as a subquery's rows), which the
    planner plans as an initial step and whose value it does not look at: its estimates, and so its plan,
    are the same whatever the values. Prepared (psycopg prepares a statement at its sixth run), such a
    statement is planned for its values five times and then, its plan for any values costing no more,
    kept planned once (PostgreSQL's plan cache, plan_cache_mode auto): planning recall's statement took
    more of the server's time than running it for a rare word (0.18 of 0.26 ms). The plans are those the
    values made already: lookups by an index, bounded by the values when the scan starts."""
    return _PARAMETER.sub(r"(SELECT %s\1)\1", sql)


def usage_sql(scope: str, query: Query) -> tuple[str, list[Any]]:
    """A statement of (id, latest ver, ver, size) for every version of the live records of exactly `scope`
    with the query's one tag (and a tag starting with its `tag_prefix`, if any), by their mnemo_tags rows,
    and its parameters (quotas: usage)."""
    sql = ("SELECT r.id, r.ver, v.ver, v.size FROM mnemo_records r JOIN mnemo_tags t ON t.id = r.id AND t.tag = %s "
           "JOIN mnemo_versions v ON v.id = r.id WHERE r.scope = %s")
    params: list[Any] = [query.tags[0], scope]
    if query.tag_prefix is not None:
        prefix, prefix_params = _prefix_sql("p.tag", query.tag_prefix)
        sql += f" AND EXISTS (SELECT 1 FROM mnemo_tags p WHERE p.id = r.id AND {prefix})"
        params += prefix_params
    return sql, params


def _exact_parts(terms: list[str], where: str, scope_params: list[Any], columns: str) -> tuple[list[str], list[Any]]:
    """The parts of recall_sql reading the postings of `terms` (their `columns`), and their parameters: the
    terms shorter than a key by their key alone, the others by their key, then compared whole."""
    parts: list[str] = []
    params: list[Any] = []
    if terms:
        parts.append(f"SELECT t.key, {columns} WHERE {where} AND t.key = ANY(ARRAY(SELECT x FROM "
                     f"unnest(%s::text[]) x WHERE length(x) < {TERM_KEY}))")
        params += [*scope_params, terms]
    if any(len(term) >= TERM_KEY // 4 for term in terms):
        parts.append(f"SELECT t.term, {columns} WHERE {where} AND t.key = ANY(ARRAY(SELECT left(x, {TERM_KEY}) "
                     f"FROM unnest(%s::text[]) x WHERE length(x) >= {TERM_KEY})) AND t.term = ANY(%s::text[])")
        params += [*scope_params, terms, terms]
    return parts, params


def select_source(query: Query, scope: str | None = None) -> tuple[str, list[Any], list[tuple[str, list[Any]]]]:
    """The FROM clause of a select's records `r`, its parameters, and the conditions left on `r`.

    Whenever the query names tags, the tag index drives: its key is (tag, id), so the candidates come by
    an index range and each finds its record by key. The LATERAL subquery ends in OFFSET 0 so that the
    planner cannot flatten it into a join costed on guesses (it keeps no statistics of tags, schema/v1_v3.py,
    and none at all of a table autovacuum has not analysed yet): the plan stays index lookups.

    But a select of one exact `scope` (the caller's condition on r.scope says so) by a `tag_prefix` of
    the memory tool's `path:` tags alone is driven by that scope: mnemo_records_scope, (scope, id), gives
    its records in id order and each one's tags are looked up by id. A range of the tag index would list
    the `path:/memories/...` tags of every scope, so that a listing of one scope's files cost what every
    scope holds; this costs what that scope holds. The record's tags are read in a subquery ending in
    OFFSET 0, into which the planner pushes no condition: they are found by id alone (mnemo_tags_id),
    never by a range of every scope's tags (the primary key, (tag, id)), and the prefix tested on them."""
    conds: list[tuple[str, list[Any]]] = []
    params: list[Any]
    prefix = query.tag_prefix
    if (scope is not None and prefix is not None and prefix.startswith(PATH_TAG_PREFIX)
            and not (query.tags or query.any_tags or query.any_prefixes)):
        sql, params = _prefix_sql("p.tag", prefix)
        tags_of = "(SELECT g.tag FROM mnemo_tags g WHERE g.id = r.id OFFSET 0) p"
        return "mnemo_records r", [], [(f"EXISTS (SELECT 1 FROM {tags_of} WHERE {sql})", params)]
    if query.tags:
        driver, params = "SELECT t0.id FROM mnemo_tags t0 WHERE t0.tag = %s", [query.tags[0]]
        conds += [(f"EXISTS (SELECT 1 FROM mnemo_tags t{i} WHERE t{i}.tag = %s AND t{i}.id = r.id)", [tag])
                  for i, tag in enumerate(query.tags[1:], 1)]
    elif query.any_tags or query.any_prefixes:
        # one index range per tag or prefix (an OR of them could not use the index as ranges)
        driver = "SELECT t0.id FROM mnemo_tags t0 WHERE t0.tag = ANY(%s::text[])"
        params = [list(query.any_tags)]
        for prefix in query.any_prefixes:
            sql, prefix_params = _prefix_sql("t0.tag", prefix)
            driver += f" UNION SELECT t0.id FROM mnemo_tags t0 WHERE {sql}"
            params += prefix_params
        if not query.any_prefixes:
            driver = driver.replace("SELECT t0.id", "SELECT DISTINCT t0.id", 1)
    elif query.tag_prefix is not None:
        sql, params = _prefix_sql("t0.tag", query.tag_prefix)
        driver = f"SELECT DISTINCT t0.id FROM mnemo_tags t0 WHERE {sql}"
    else:
        return "mnemo_records r", [], conds
    if (query.any_tags or query.any_prefixes) and query.tags:
        sql, any_params = _any_tag_sql("a.tag", query)
        conds.append((f"EXISTS (SELECT 1 FROM mnemo_tags a WHERE a.id = r.id AND {sql})", any_params))
    if query.tag_prefix is not None and (query.tags or query.any_tags or query.any_prefixes):
        sql, prefix_params = _prefix_sql("p.tag", query.tag_prefix)
        conds.append((f"EXISTS (SELECT 1 FROM mnemo_tags p WHERE p.id = r.id AND {sql})", prefix_params))
    return f"({driver}) c CROSS JOIN LATERAL {records_of('c.id')}", params, conds


def records_of(ids: str) -> str:
    """A FROM item of the record `r` whose id is `ids` (a column of the item before it), looked up by key
    (with its row's ctid, as the table itself has it: _copied reads the row again by it)."""
    return f"(SELECT x.ctid AS ctid, x.* FROM mnemo_records x WHERE x.id = {ids} OFFSET 0) r"


def _copied(limit: str) -> tuple[list[str], str]:
    """How a read of records `r` in a subquery `h` gets each one's copy of its latest entry and payload
    (schema version 12) as `c.raw`, `c.payload`: (the columns of `r` that `h` takes for it, the FROM item
    `c` after `h`). Without a limit, `h` takes the copy itself, on the row it found; with one, `h` takes
    only the row's ctid and the copy is read after the limit, from the same row (a TID scan, in the
    statement's one snapshot: no index is descended again), so that the copies of the candidates a limit
    leaves out are never sorted with them."""
    if limit:
        return ["r.ctid AS tid"], ("LEFT JOIN LATERAL (SELECT x.raw, x.payload FROM mnemo_records x "
                                   "WHERE x.ctid = h.tid) c ON true")
    return ["r.raw", "r.payload"], "CROSS JOIN LATERAL (SELECT h.raw, h.payload) c"


@functools.lru_cache(maxsize=512)
def latest_sql(source: str, where: str, limit: str, loaded: str | None, older: bool | None,
               index_tags: bool = True) -> str:
    """The rows of the records `r` of `source` that `where` admits, in id order (`limit`: a LIMIT clause
    or nothing): (id, scope, tags, version columns, raw, payload) for each of their versions, in version
    order. A record's latest version comes from its own row (schema version 10), and `loaded` from the
    copy of that version's entry and payload on it (schema version 12, _copied): columns of `c` ("c.raw,
    c.payload", or what checks them without the content; None: two NULLs): one look-up by key for a
    record of one version. Its earlier versions, for a record that has some, come from mnemo_versions
    unless `older` is None, with their entry and payload (from mnemo_payloads) when it is true (else
    NULLs). Without `index_tags`, the tags column is NULL: the caller takes each record's tags from its
    put, and mnemo_tags is not read for them (a look-up and an aggregate a record fewer); with them, they
    are on the latest version's row."""
    tags = ("(SELECT coalesce(array_agg(t.tag ORDER BY t.tag), '{}') FROM mnemo_tags t WHERE t.id = h.id)"
            if index_tags else "NULL::text[]")
    latest = "h.ver, h.seq, h.ts_ns, h.agent, h.size, h.hash, h.entry_len, h.payload_len"
    columns = ["r." + column for column in RECORD_COLUMNS.split(", ")]
    copy, copied = _copied(limit) if loaded else ([], "")
    sql = (
        f"WITH h AS MATERIALIZED (SELECT {', '.join(columns + copy)} FROM {source} "
        f"WHERE {where} ORDER BY r.id{limit}) "
        f"SELECT h.id, h.scope, {tags}, {latest}, {loaded or 'NULL::bytea, NULL::bytea'} FROM h {copied}"
    )
    if older is not None:
        payloads = ("LEFT JOIN LATERAL (SELECT p.raw, p.payload FROM mnemo_payloads p WHERE p.seq = v.seq OFFSET 0) p "
                    "ON true")
        sql += (
            f" UNION ALL SELECT h.id, h.scope, NULL, {VERSION_COLUMNS}, "
            f"{'p.raw, p.payload' if older else 'NULL, NULL'} "
            "FROM h CROSS JOIN LATERAL (SELECT * FROM mnemo_versions w WHERE w.id = h.id AND w.ver < h.ver OFFSET 0) v "
            + (payloads if older else "") + " WHERE h.ver > 1 ORDER BY 1, 4"
        )
    return sql


def records_sql(source: str, where: str, limit: str) -> str:
    """The rows of the records `r` of `source` that `where` admits, in id order (`limit`: a LIMIT clause or
    nothing), one row a record: what latest_records builds each one's record of, in RECORD_ROW's columns
    (id, scope, ver, seq, ts_ns, agent, hash, raw, payload, first_ts). Its latest version, with that
    version's entry and payload (schema version 12, _copied), is on its own row: one look-up by key; the
    time of its first version, for a record of more than one, from mnemo_versions (a second).

    The records come from a subquery in id order (OFFSET 0: never flattened, so a limit is applied before
    any first version is looked up, or any copy read), and are sorted once, in that subquery
    (docs/POSTGRES.md, "Performance")."""
    copy, copied = _copied(limit)
    return (
        "SELECT h.id, h.scope, h.ver, h.seq, h.ts_ns, h.agent, h.hash, c.raw, c.payload, CASE WHEN h.ver > 1 THEN "
        "(SELECT w.ts_ns FROM mnemo_versions w WHERE w.id = h.id ORDER BY w.ver LIMIT 1) END "
        f"FROM (SELECT r.id, r.scope, r.ver, r.seq, r.ts_ns, r.agent, r.hash, {', '.join(copy)} FROM {source} "
        f"WHERE {where} ORDER BY r.id{limit} OFFSET 0) h {copied} ORDER BY h.id"
    )


# Where records_sql's columns are, as latest_records takes them: (id, scope, ver, hash, raw, payload, seq,
# ts, agent, first_ts)
RECORD_ROW = (0, 1, 2, 6, 7, 8, 3, 4, 5, 9)


def latest_records(rows: list[Any], cols: tuple[int, ...], record_type: type) -> list[MemoryRecord | None]:
    """The record of each row (one a record, as records_sql reads them), its latest version checked as
    served_rows checks it and built as record_of builds it; None where served_rows gives None or the
    fields do not decode (the caller's general path then reads the record again, and builds it or says
    what is wrong). `cols`: where (id, scope, ver, hash, raw, payload, seq, ts, agent, first_ts) are in
    the rows; `record_type` is MemoryRecord (the C extension makes its instances itself). The pure-Python
    twin of mnemo/_pgread.c's latest_records, which must never build a record this does not build alike."""
    i_id, i_scope, i_ver, i_hash, _raw, _payload, i_seq, i_ts, i_agent, i_first = cols
    out: list[MemoryRecord | None] = []
    for row, packed in zip(rows, served_rows(rows, (i_id, i_scope, i_ver, i_hash, _raw, _payload)), strict=True):
        if packed is None:
            out.append(None)
            continue
        latest = Version(row[i_ver], row[i_seq], row[i_ts], row[i_agent], 0, bytes(row[i_hash]), row[i_seq], 0)
        first = latest if row[i_first] is None else latest._replace(ver=0, ts_ns=row[i_first])
        out.append(record_of(Rec(row[i_id], row[i_scope], (), (first, latest)), latest, packed))
    return out


def _version(row: tuple[Any, ...]) -> Version:
    ver, seq, ts_ns, agent, size, hash_, entry_len, payload_len = row
    # the row keys stand where the log file keeps offsets: the entry and its payload are both found by seq
    return Version(ver, seq, ts_ns, agent, size, bytes(hash_), seq, payload_len, seq, entry_len)


def group_rows(rows: list[Any], with_payloads: bool) -> Iterator[tuple[Rec, list[tuple[Any, Any]]]]:
    """Recs from rows of (id, scope, tags, version columns..., [raw, payload]) in (id, ver) order,
    with the (raw, payload) of each version that carries them; a record's tags are on the row of its
    latest version. Tags NULL (not read) make a Rec of no tags, which its reader fills in."""
    i, n = 0, len(rows)
    while i < n:
        row = rows[i]
        rec_id = row[0]
        end = i + 1
        while end < n and rows[end][0] == rec_id:
            end += 1
        if end == i + 1:  # a record of one version: most are
            versions: tuple[Version, ...] = (_version(row[3:11]),)
            loaded = [(row[11], row[12]) if with_payloads else (None, None)]
        else:
            group = rows[i:end]
            versions = tuple(_version(r[3:11]) for r in group)
            loaded = [(r[11], r[12]) if with_payloads else (None, None) for r in group]
            row = group[-1]  # the latest version's row holds the tags
        tags = row[2]
        yield Rec(rec_id, row[1], () if tags is None else tuple(tags), versions), loaded
        i = end


def served_rows(rows: list[Any], cols: tuple[int, int, int, int, int, int]) -> list[bytes | None]:
    """The packed fields (the payload without its salt) of each row's version, checked against the
    chain (as the store's _checked checks them), or None where the row carries no entry or payload, or
    a check fails: the caller then checks that row through its general path, which says what is wrong.
    `cols` are the indexes of the rows' (id, scope, ver, hash, raw, payload) columns. The pure-Python
    twin of mnemo/_pgread.c's served_rows, which must never serve what this refuses, nor anything else
    than what it serves."""
    i_id, i_scope, i_ver, i_hash, i_raw, i_payload = cols
    out: list[bytes | None] = []
    for row in rows:
        raw, payload = row[i_raw], row[i_payload]
        ok = raw is not None and payload is not None and served_put_problem(
            raw, row[i_hash], row[i_id], row[i_ver], row[i_scope], payload
        ) is None
        out.append(bytes(payload[SALT_SIZE:]) if ok else None)
    return out


__all__ = [
    "COMMIT_CALL", "PUT_CALL", "RECORD_COLUMNS", "TAGS", "TEXT_CALL", "VERSIONS", "VERSION_COLUMNS", "group_rows",
    "RECORD_ROW", "latest_records", "latest_sql", "recall_sql", "records_of", "records_sql", "scope_sql",
    "select_source", "served_rows", "usage_sql",
]
