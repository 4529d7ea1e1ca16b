"""`verify` of a PostgreSQL database: the same checks as for a log file, fed from rows.

The rows of `mnemo_entries` and `mnemo_payloads`, in seq order, go through the chain rules every backend
applies (mnemo.chain.rules.ChainVerifier), entry by entry: every hash is recomputed from the stored
bytes, every link and seq checked, payloads against their digests, erasures, checkpoint signatures, an
expected head. Nothing a column says about an entry is trusted: a stored hash, seq or op that disagrees
with the entry's bytes is a problem of its own, so an entry edited by someone who disabled the triggers
is found. Then the derived tables (records, versions, tags, forgotten ids, the head row, recall's text
index) are compared with what the chain says they must hold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from itertools import groupby
from operator import itemgetter
from typing import Any, NamedTuple, Protocol

import psycopg

from ...chain.codec import SALT_SIZE, EntryDecodeError, decode_entry
from ...chain.rules import ChainVerifier, ExpectedIndex, verify_arguments
from ...chain.tree import CompactRange
from ...record import Problem, VerifyReport
from ..types import Progress
from .errors import storage_error
from .text_index import Doc, doc_of
from .vectors import vector_problems


class _Rows(Protocol):
    """What verify reads through: the store's name, its db_id and a connection of its own."""

    @property
    def path(self) -> str: ...

    @property
    def db_id(self) -> bytes: ...

    def _connect(self, autocommit: bool) -> psycopg.Connection[Any]: ...


class _Payload:
    """Where the rules read payload bytes from: the current row's payload."""

    data = b""

    def get(self, _offset: int, _n: int) -> bytes:
        return self.data


class _RowSlot(NamedTuple):
    """A row's payload as the rules see a slot: there or not (a row holds no byte offsets)."""

    offset: int
    length: int
    state: str

    def payload_range(self) -> tuple[int, int]:
        return 0, self.length


class _RowVerifier(ChainVerifier):
    """The chain rules, fed rows: problems carry a seq but no byte offset."""

    def problem(self, kind: str, message: str, seq: int | None, offset: int | None) -> None:
        self.problems.append(Problem(kind, message, seq, None))


def verify_postgres(
    store: _Rows, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None,
    recompute: bool = False,
) -> VerifyReport:
    head = verify_arguments(pubkey, expect_head)
    v = _RowVerifier(pubkey, head)
    v.db_id = store.db_id
    v.index = expected = ExpectedIndex.empty()
    window = _Payload()
    conn = store._connect(autocommit=False)
    try:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        [(n_rows,)] = conn.execute("SELECT count(*) FROM mnemo_entries").fetchall()
        # the saved compact ranges of the tree, each checked against the tree over the entries up to it
        saved = {int(size): bytes(data) for size, data in conn.execute("SELECT size, range FROM mnemo_tree")}
        tree = CompactRange() if saved else None
        tree_problems: list[Problem] = []
        with conn.cursor(name="mnemo_verify") as cur:
            cur.itersize = 2000
            # each payload row's copy of its entry's bytes (schema version 10), compared by the server
            cur.execute(
                "SELECT e.seq, e.op, e.raw, e.hash, p.payload, p.raw IS DISTINCT FROM e.raw FROM mnemo_entries e "
                "LEFT JOIN mnemo_payloads p ON p.seq = e.seq ORDER BY e.seq"
            )
            for done, (seq, op, raw, stored_hash, payload, other_copy) in enumerate(cur, 1):
                _row(v, window, seq, op, bytes(raw), bytes(stored_hash), None if payload is None else bytes(payload))
                if payload is not None and other_copy:
                    tree_problems.append(Problem("tables", f"the payload row of seq {seq} holds other entry bytes "
                                                 "than the chain's (mnemo_payloads.raw)"))
                if tree is not None:
                    tree.append_entry(bytes(raw))
                    if tree.size in saved and saved.pop(tree.size) != tree.to_bytes():
                        tree_problems.append(Problem("tables", f"the tree state saved at size {tree.size} "
                                                     "(mnemo_tree) is not the tree over the entries"))
                if progress is not None and done % 4096 == 0:
                    progress(done, n_rows)
        v.finish()
        report = v.report()
        problems = list(report.problems)
        problems += tree_problems
        problems += [Problem("tables", f"mnemo_tree saves a tree of {size} entries, more than the chain holds")
                     for size in sorted(saved)]
        if report.ok:
            expected.head_seq, expected.entries = report.head_seq, report.entries
            problems += _table_problems(conn, expected, report)
            problems += [Problem("tables", msg) for msg in vector_problems(conn, getattr(store, "embedder", None),
                                                                                   recompute)]
        conn.rollback()
    except psycopg.Error as exc:
        raise storage_error(exc, store.path) from None
    finally:
        conn.close()
    if progress is not None:
        progress(n_rows, n_rows)
    if len(problems) == len(report.problems):
        return report
    return VerifyReport(False, report.entries, report.head_seq, report.head_hash, tuple(problems), report.erased,
                        report.checkpoints, report.notes)


def _row(
    v: _RowVerifier, window: _Payload, seq: int, op: str, raw: bytes, stored: bytes, payload: bytes | None
) -> None:
    if hashlib.sha256(raw).digest() != stored:
        v.problem("hash-column", f"the stored hash of seq {seq} is not SHA-256 of its entry bytes: the row was "
                  "changed after it was written", seq, None)
    try:
        entry = decode_entry(raw)
    except EntryDecodeError as exc:
        v.problem("bad-entry", f"the entry at seq {seq} does not decode: {exc}", seq, None)
        v.next_seq = max(v.next_seq, seq + 1)
        v.lost_before = True
        return
    if entry.seq != seq or entry.op != op:
        v.problem("row", f"the row of seq {seq} ({op}) holds the entry of seq {entry.seq} ({entry.op})", seq, None)
    if payload is None:
        slot = _RowSlot(0, 0, "erased" if entry.op == "put" else "none")
    else:
        window.data = payload
        slot = _RowSlot(0, len(payload), "ok")
    v.entry(entry, slot, 0, window)


def _table_problems(conn: psycopg.Connection[Any], expected: ExpectedIndex, report: VerifyReport) -> list[Problem]:
    """How the derived tables differ from what the chain says they must hold."""
    out: list[str] = []
    want_records = {rid: (row[1], row[3]) for rid, row in expected.live.items()}
    have_records = {rid: (scope, ver) for rid, scope, ver in conn.execute("SELECT id, scope, ver FROM mnemo_records")}
    for rid in sorted(want_records.keys() ^ have_records.keys()):
        where = "the chain" if rid in want_records else "mnemo_records"
        out.append(f"record {rid} is only in {where}")
    out += [f"record {rid} has another scope or version in mnemo_records than in the chain"
            for rid in sorted(want_records.keys() & have_records.keys()) if want_records[rid] != have_records[rid]]
    # the latest version's columns beside each record (schema version 10), as mnemo_versions holds them
    want_latest = {rid: (p[4], p[5], p[6], p[7], p[8], p[12], p[10]) for rid, p in expected.live.items()}
    have_latest = {
        rid: (seq, ts, agent, size, bytes(h), elen, plen)
        for rid, seq, ts, agent, size, h, elen, plen in conn.execute(
            "SELECT id, seq, ts_ns, agent, size, hash, entry_len, payload_len FROM mnemo_records")
    }
    out += [f"record {rid} has another latest version in mnemo_records than in the chain (seq {want_latest[rid][0]})"
            for rid in sorted(want_latest.keys() & have_latest.keys())
            if want_records[rid] == have_records[rid] and want_latest[rid] != have_latest[rid]]
    # the copy of its latest version's entry and payload on each record's row (schema version 12), compared
    # by the server with the chain's entry and the payload row of that version (checked against the chain
    # above), for each record whose latest version is the chain's (one that is not is named above)
    out += [f"record {rid} holds another copy of its latest version's entry or payload than the chain's "
            f"(seq {seq}: mnemo_records.raw, mnemo_records.payload)"
            for rid, seq in conn.execute(
                "SELECT r.id, r.seq FROM mnemo_records r LEFT JOIN mnemo_entries e ON e.seq = r.seq "
                "LEFT JOIN mnemo_payloads p ON p.seq = r.seq "
                "WHERE r.raw IS DISTINCT FROM e.raw OR r.payload IS DISTINCT FROM p.payload ORDER BY r.id")
            if rid in want_latest and have_latest.get(rid) == want_latest[rid]]

    def version_row(put: tuple[Any, ...]) -> tuple[Any, ...]:
        return (put[0], put[3], put[4], put[5], put[6], put[7], put[8], put[12])

    want_versions = {version_row(p) for rid, p in expected.live.items()}
    want_versions |= {version_row(p) for older in expected.older.values() for p in older}
    have_versions = {
        (rid, ver, seq, ts, agent, size, bytes(h), elen)
        for rid, ver, seq, ts, agent, size, h, elen in conn.execute(
            "SELECT id, ver, seq, ts_ns, agent, size, hash, entry_len FROM mnemo_versions"
        )
    }
    if want_versions != have_versions:
        for row in sorted(want_versions - have_versions, key=lambda r: r[2]):
            out.append(f"version {row[1]} of record {row[0]} (seq {row[2]}) is missing from mnemo_versions or differs")
        for row in sorted(have_versions - want_versions, key=lambda r: r[2]):
            out.append(f"mnemo_versions holds version {row[1]} of record {row[0]} (seq {row[2]}), which the chain "
                       "does not")
    want_tags = {(tag, rid) for rid, row in expected.live.items() for tag in row[2]}
    have_tags = {(tag, rid) for tag, rid in conn.execute("SELECT tag, id FROM mnemo_tags")}
    for tag, rid in sorted(want_tags - have_tags):
        out.append(f"record {rid} is missing from the index of tag {tag!r}")
    for tag, rid in sorted(have_tags - want_tags):
        out.append(f"mnemo_tags lists record {rid} under tag {tag!r}, which its latest version does not hold")
    have_forgotten = {rid for (rid,) in conn.execute("SELECT id FROM mnemo_forgotten")}
    if have_forgotten != expected.forgotten:
        out.append("mnemo_forgotten differs from the ids the chain's forgets name")
    head = conn.execute("SELECT seq, hash FROM mnemo_head").fetchone()
    if head is None or (head[0], bytes(head[1]).hex()) != (report.head_seq, report.head_hash):
        out.append("mnemo_head does not name the last entry of the chain")
    live_seqs = {p[4] for p in expected.live.values()} | {p[4] for o in expected.older.values() for p in o}
    orphans = [
        seq for (seq,) in conn.execute(
            "SELECT p.seq FROM mnemo_payloads p JOIN mnemo_entries e ON e.seq = p.seq WHERE e.op = 'put'"
        ) if seq not in live_seqs
    ]
    out += [f"the payload of seq {seq} is still stored, though a forget names its record" for seq in orphans[:20]]
    [(strays,)] = conn.execute(
        "SELECT count(*) FROM mnemo_payloads p LEFT JOIN mnemo_entries e ON e.seq = p.seq WHERE e.seq IS NULL"
    ).fetchall()
    if strays:
        out.append(f"{strays} payload rows belong to no entry")
    out += _text_problems(conn, expected)
    return [Problem("tables", msg) for msg in out]


def _text_problems(conn: psycopg.Connection[Any], expected: ExpectedIndex) -> list[str]:
    """How recall's index (mnemo_docs, mnemo_terms, mnemo_text_scopes) differs from what the chain's live
    records give it: a document for the latest version of each one whose content is text, each of its
    terms as often as it holds it, each scope's totals, and nothing else. The latest payloads (which the
    chain's rules checked, in this snapshot) and the term rows are read in seq order side by side, a
    document at a time."""
    out: list[str] = []
    live = sorted((put[4], rid, put[1]) for rid, put in expected.live.items())  # (seq, id, scope)
    owner = {seq: (rid, scope) for seq, rid, scope in live}
    have_docs = {seq: (rid, scope, length) for seq, rid, scope, length in conn.execute(
        "SELECT seq, id, scope, length FROM mnemo_docs")}
    totals: dict[str, tuple[int, int]] = {}
    with conn.cursor(name="mnemo_verify_texts") as payloads, conn.cursor(name="mnemo_verify_terms") as terms:
        payloads.itersize = terms.itersize = 2000
        payloads.execute("SELECT x.seq, p.payload FROM unnest(%s::bigint[]) x(seq) "
                         "LEFT JOIN mnemo_payloads p ON p.seq = x.seq ORDER BY x.seq", [[seq for seq, _r, _s in live]])
        terms.execute("SELECT seq, term, tf, length, scope, positions FROM mnemo_terms ORDER BY seq")
        wanted = ((seq, _doc(payload)) for seq, payload in payloads)
        held = ((seq, [row[1:] for row in rows]) for seq, rows in groupby(terms, key=itemgetter(0)))
        for seq, doc, have in _side_by_side(wanted, held):
            rid, scope = owner.get(seq, ("", ""))
            row = have_docs.pop(seq, None)
            if doc is not None:
                docs, length = totals.get(scope, (0, 0))
                totals[scope] = (docs + 1, length + doc.length)
                if row is None:
                    out.append(f"record {rid} (seq {seq}) is missing from the text index (mnemo_docs)")
                elif row != (rid, scope, doc.length):
                    out.append(f"mnemo_docs gives the document of seq {seq} another record, scope or length than "
                               f"the chain (record {rid} in scope {scope!r}, {doc.length} terms)")
            elif row is not None:
                out.append(_not_a_document(seq, row[0]))
            name = f"record {rid} (seq {seq})" if rid else f"seq {seq}"
            out += _term_problems(name, doc, scope, have or [])
    out += [_not_a_document(seq, row[0]) for seq, row in sorted(have_docs.items())]
    have_totals = {scope: (docs, length) for scope, docs, length in conn.execute(
        "SELECT scope, docs, length FROM mnemo_text_scopes")}
    for scope in sorted(totals.keys() | have_totals.keys()):
        (want_docs, want_len), (have_docs_n, have_len) = totals.get(scope, (0, 0)), have_totals.get(scope, (0, 0))
        if (want_docs, want_len) != (have_docs_n, have_len):
            out.append(f"mnemo_text_scopes counts {have_docs_n} documents of {have_len} terms in scope {scope!r}, the "
                       f"chain {want_docs} of {want_len}")
    return out


def _not_a_document(seq: int, rec_id: str) -> str:
    return (f"mnemo_docs indexes seq {seq} (record {rec_id}), which is not the latest version of a live record "
            "whose content is text")


def _doc(payload: Any) -> Doc | None:
    """The document of a checked live payload, or None (not text, or none)."""
    return None if payload is None else doc_of(bytes(payload)[SALT_SIZE:])


def _term_problems(
    name: str, doc: Doc | None, scope: str, have: list[tuple[str, int, int, str, bytes | None]]
) -> list[str]:
    """How the term rows (term, tf, length, scope, positions) of the document `name` names differ from
    its terms, each with its length, scope and positions (None: it has none)."""
    want = {} if doc is None else doc.counts
    held = {term: tf for term, tf, _length, _scope, _positions in have}
    if len(held) == len(have) and held == want and (doc is None or all(
            length == doc.length and row_scope == scope and _same_positions(positions, doc.positions[term])
            for term, _tf, length, row_scope, positions in have)):
        return []  # each term once, as often and where the text holds it: the rows are the text's
    out: list[str] = []
    seen: set[str] = set()
    for term, tf, length, row_scope, positions in sorted(have, key=lambda row: row[:4]):
        if term in seen:
            out.append(f"mnemo_terms lists {name} under term {term!r} more than once")
        elif term not in want:
            out.append(f"mnemo_terms lists {name} under term {term!r}, which its text does not hold")
        elif want[term] != tf:
            out.append(f"mnemo_terms gives {name} term {term!r} {tf} times, its text holds it {want[term]} times")
        elif doc is not None and (length, row_scope) != (doc.length, scope):
            out.append(f"mnemo_terms gives {name} another length or scope under term {term!r} than its document "
                       f"has ({doc.length} terms, scope {scope!r})")
        elif doc is not None and not _same_positions(positions, doc.positions[term]):
            out.append(f"mnemo_terms gives {name} other positions of term {term!r} than its text has")
        seen.add(term)
    out += [f"{name} is missing from the postings of term {term!r} (mnemo_terms)"
            for term in sorted(want) if term not in seen]
    return out


def _same_positions(held: Any, want: bytes | None) -> bool:
    return (None if held is None else bytes(held)) == want


def _side_by_side(
    left: Iterator[tuple[int, Doc | None]], right: Iterator[tuple[int, list[Any]]]
) -> Iterator[tuple[int, Doc | None, list[Any] | None]]:
    """Two streams of (seq, value) in increasing seq order as one: (seq, left value, right value), None
    for the side that lacks the seq."""
    a, b = next(left, None), next(right, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):
            assert a is not None
            yield a[0], a[1], None
            a = next(left, None)
        elif a is None or b[0] < a[0]:
            yield b[0], None, b[1]
            b = next(right, None)
        else:
            yield a[0], a[1], b[1]
            a, b = next(left, None), next(right, None)


__all__ = ["verify_postgres"]
