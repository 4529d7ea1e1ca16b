"""PostgresStore's part that serves recall by words over the text index's tables (text_index.py): the
index read in one statement (sql.recall_sql: with the best documents' records, when the query allows),
a Source over it (text_source.py) ranked with the open transaction's writes, and each hit's record
read and checked as every read's are (reads.py). The tables are the index, not the truth: a hit the
chain does not bear out is read again or left out."""

from __future__ import annotations

from typing import Any

import psycopg

from ...errors import IntegrityError
from ...recall.engine import Staged, search
from ...recall.query import Phrase
from ...recall.query import Query as RecallQuery
from ..batch import Batch
from ..recall import Hit, in_transaction, searchable_text
from ..types import Found, Query, Rec, ScopeFilter
from .reads import Loaded, Reads
from .sql import PREFETCH_POSTINGS, recall_sql
from .text_source import IndexDisagrees, TableSource

RECALL_READS = 8  # reads of the text index a recall makes at most while the records change under it
PREFETCH_SLACK = 2  # documents read with the index beyond `limit`: the last bits of the server's scores may differ
PREFETCH_MAX = 100  # a recall of a greater limit reads its hits apart
POSTINGS_SEEN = 4096  # the terms whose numbers of postings a store keeps (all forgotten past it)
INDEX_COLUMNS = 10  # the columns of recall_sql's rows of the index; those of kind PREFETCHED, a record's after them
PREFETCHED = 5
PREFETCHED_SEQ = 4  # where the seq of a version is in the rows of kind PREFETCHED (latest_sql's, after INDEX_COLUMNS)
# The rows of the records recall_sql read with the index (latest_sql's), each record's by its versions' seqs
Prefetched = dict[int, list[Any]]


def _id_and_version(row: Any) -> tuple[str, int]:
    return row[0], row[3]


class _Unserved(Exception):
    """A document recall ranked (named by its seq) that the chain does not bear out: no record the caller
    may read has it as its latest version (`changed`: a commit since the index was read, or a row of the
    index), or one has, and its content is not text matching the query or its tags do not match."""

    def __init__(self, seq: int, changed: bool) -> None:
        super().__init__(seq)
        self.seq, self.changed = seq, changed


class TextRecall(Reads):
    """Recall by words, over the text index's tables."""

    def __init__(self, dsn: str, agent: str, *, readonly: bool, durability: str, lock_timeout: float) -> None:
        super().__init__(dsn, agent, readonly=readonly, durability=durability, lock_timeout=lock_timeout)
        # how many postings each term (a prefix: "prefix*") had at the last recall that read it
        self._postings_seen: dict[str, int] = {}

    def _recall_by_words(self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int) -> list[Hit]:
        """Recall over the text index's tables (text_index.py): the corpus's statistics and the postings of
        every term the query names or its prefixes reach (a phrase's words with their positions), in one
        statement (which brings the head too, when the client reads through read_fresh); the texts of the
        documents holding every word of a phrase whose positions the index does not keep (or, inside a
        transaction, of every document holding them), in one more when there are any; the hits' latest
        versions, read and checked as select reads them, in one more (none if all were read for a
        phrase).

        The tables are the index, not the truth: a hit is served only if its record's latest version is
        the one indexed, its checked content matches the query and its checked tags match `tags`. A hit
        whose record changed since the index was read (a commit in between) makes the index be read
        again; one the chain contradicts (a row the application role wrote) is left out and the rest
        ranked again, so that `limit` is still met (verify names the row)."""
        batch = self.current_batch()
        conn = self._batch_conn()
        exact, prefixes = query.looked_up
        # the records this transaction changed that were committed: their committed documents leave
        touched = [] if batch is None else [
            rec_id for rec_id, rec in batch.recs.items() if rec is None or rec.versions[0].slot_off >= 0
        ]
        # the best documents' records read with the index, for a query of words and prefixes only (the
        # ranking of its postings is BM25 over them: recall_sql), outside a transaction (whose own writes
        # may rank among them), without tags to filter the hits by, and unless its terms had more postings
        # than the statement ranks at their last recall (its count of them costs a little)
        seen = self._postings_seen
        prefetch = limit + PREFETCH_SLACK if (
            batch is None and not query.exclude and not tags.filters_tags and limit <= PREFETCH_MAX
            and not any(isinstance(clause, Phrase) for clause in query.include)
            and sum(seen.get(term, 0) for term in (*exact, *(prefix + "*" for prefix in prefixes)))
            <= PREFETCH_POSTINGS) else 0
        sql, params = recall_sql(exact, prefixes, scopes, tags, touched, query.phrase_atoms, prefetch)
        filtered = tags.filters_tags
        left_out: set[int] = set()  # documents the chain contradicts
        suspects: set[int] = set()  # documents found changed once
        for _attempt in range(RECALL_READS):
            loaded: Loaded = {}
            prefetched: Prefetched = {}
            base = self._read_text_index(sql, params, exact, prefixes, filtered, loaded, scopes, batch, conn,
                                         prefetched)
            if len(seen) > POSTINGS_SEEN:
                seen.clear()
            seen.update(base.sizes(exact, prefixes))
            self._load_phrase_texts(query, base, loaded, scopes, batch, conn)
            changed = None
            while changed is None:
                try:
                    return self._rank(query, tags, limit, base, loaded, prefetched, left_out, scopes, batch, conn)
                except _Unserved as exc:
                    if exc.changed:
                        changed = exc.seq
                    else:
                        left_out.add(exc.seq)
            # A hit's record changed since the index was read: read it again. The same document found
            # changed twice is the index's doing, not a commit's: it is left out.
            if changed in suspects:
                left_out.add(changed)
            suspects.add(changed)
        raise IntegrityError(f"{self.path}: recall could not read its hits: the records keep changing under it")

    def _read_text_index(
        self, sql: str, params: list[Any], exact: list[str], prefixes: list[str], filtered: bool,
        loaded: Loaded, scopes: ScopeFilter, batch: Batch | None, conn: psycopg.Connection[Any] | None,
        prefetched: Prefetched | None = None,
    ) -> TableSource:
        """The index as recall reads it (one round trip); the texts it gives phrases are read into `loaded`,
        and the rows of the records it read with it (recall_sql's prefetch) into `prefetched`, each
        record's by the seq of each of its versions (checked when one is a hit: _recall_hits)."""
        rows = self._fetch(sql, params, conn, binary=True)
        if rows and len(rows[0]) > INDEX_COLUMNS:
            records: dict[str, list[Any]] = {}
            for row in sorted((row[INDEX_COLUMNS:] for row in rows if row[0] == PREFETCHED), key=_id_and_version):
                records.setdefault(row[0], []).append(row)
            for versions in records.values():
                for row in versions:
                    if prefetched is not None:
                        prefetched[row[PREFETCHED_SEQ]] = versions
            rows = [row[:INDEX_COLUMNS] for row in rows if row[0] != PREFETCHED]
        try:
            return TableSource(rows, exact, prefixes, filtered,
                               lambda seq: self._indexed_text(seq, loaded, scopes, batch, conn))
        except IndexDisagrees as exc:
            raise IntegrityError(f"{self.path}: the text index disagrees with itself ({exc}): run verify") from None

    def _rank(
        self, query: RecallQuery, tags: Query, limit: int, base: TableSource, loaded: Loaded, prefetched: Prefetched,
        left_out: set[int], scopes: ScopeFilter, batch: Batch | None, conn: psycopg.Connection[Any] | None,
    ) -> list[Hit]:
        """The best hits over `base` as this thread's open transaction sees it, none of `left_out`."""
        tagged = base.tagged

        def keep(key: int | Staged) -> bool:
            if isinstance(key, Staged):
                rec = batch.recs[key.rec_id] if batch is not None else None
                return rec is not None and tags.matches(rec.tags)
            return key not in left_out and (tagged is None or key in tagged)

        ranked = search(query, self._in_transaction(base, scopes, batch, conn), limit, keep)
        return self._recall_hits(query, tags, ranked, loaded, prefetched, scopes, batch, conn)

    def _in_transaction(
        self, base: TableSource, scopes: ScopeFilter, batch: Batch | None, conn: psycopg.Connection[Any] | None
    ) -> Any:
        """`base` as this thread's open transaction sees it (in_transaction), each staged document's text
        read from the batch."""

        def staged_text(rec: Rec) -> str | None:
            assert batch is not None  # the overlay reads only the records of an open transaction
            return self._staged_text(rec, batch, conn)

        return in_transaction(base, batch, scopes, base.touched.get, staged_text)

    def _staged_text(self, rec: Rec, batch: Batch, conn: psycopg.Connection[Any] | None) -> str | None:
        """The searchable text of the latest version of `rec`, a record of the open transaction `batch`."""
        return searchable_text(self._overlay_found(rec, "latest", batch, conn).packed[0])

    def _load_phrase_texts(
        self, query: RecallQuery, source: TableSource, loaded: Loaded, scopes: ScopeFilter,
        batch: Batch | None, conn: psycopg.Connection[Any] | None,
    ) -> None:
        """The texts the ranking will read, in one round trip: for each phrase of the query, those of the
        documents holding every word of it whose positions the index does not keep, or, when it is read
        through an open transaction's writes, of every document holding every word of it."""
        wanted: set[int] = set()
        overlaid = batch is not None and bool(batch.recs)  # (in_transaction's condition)
        for clause in (*query.include, *query.exclude):
            if isinstance(clause, Phrase):
                decided = None if overlaid else source.phrase(clause.atoms)
                if decided is not None:
                    wanted.update(decided[1])
                    continue
                lists = sorted((source.postings(atom) for atom in set(clause.atoms)), key=len)
                wanted.update(key for key in lists[0] if all(key in other for other in lists[1:]))
        wanted.difference_update(source.touched.values())  # the open transaction's documents of them are its own
        if wanted:
            self._load_texts(sorted(wanted), scopes, batch, conn, loaded)

    def _indexed_text(
        self, seq: int, loaded: Loaded, scopes: ScopeFilter, batch: Batch | None,
        conn: psycopg.Connection[Any] | None,
    ) -> str:
        """The text of the document of `seq`: its record's latest version, which must be that one
        (_Unserved otherwise)."""
        if seq not in loaded:
            self._load_texts([seq], scopes, batch, conn, loaded)
        found = loaded.get(seq)
        if found is None or found[0].latest.seq != seq:
            raise _Unserved(seq, changed=True)
        try:
            text = searchable_text(found[1])
        except Exception:  # msgpack raises several unrelated types on garbage: no text
            text = None
        if text is None:
            raise _Unserved(seq, changed=False)
        return text

    def _recall_hits(
        self, query: RecallQuery, tags: Query, ranked: list[tuple[int | Staged, float]],
        loaded: Loaded, prefetched: Prefetched, scopes: ScopeFilter, batch: Batch | None,
        conn: psycopg.Connection[Any] | None,
    ) -> list[Hit]:
        """The ranked documents as hits, each record's latest version checked (those read with the index
        from their rows, the others read in one round trip, but those read for a phrase); _Unserved for the
        first the chain does not bear out."""
        wanted = [key for key, _score in ranked if isinstance(key, int) and key not in loaded]
        rows = {id(versions): versions for key in wanted if (versions := prefetched.get(key)) is not None}
        if rows:
            self._loaded_rows([row for versions in rows.values() for row in versions], None, batch, loaded, conn)
        missing = [key for key in wanted if key not in loaded]
        if missing:
            self._load_texts(missing, scopes, batch, conn, loaded)
        hits: list[Hit] = []
        for key, score in ranked:
            if isinstance(key, Staged):
                assert batch is not None
                rec = batch.recs[key.rec_id]
                assert rec is not None  # the overlay's documents are its live records
                hits.append(Hit(self._overlay_found(rec, "latest", batch, conn), score))
                continue
            text = self._indexed_text(key, loaded, scopes, batch, conn)
            found = loaded[key]
            assert found is not None  # _indexed_text found it
            rec, packed = found
            if not query.matches(text) or not tags.matches(rec.tags):
                raise _Unserved(key, changed=False)
            hits.append(Hit(Found(rec, (packed,)), score))
        return hits


__all__ = ["PREFETCH_MAX", "PREFETCH_SLACK", "TextRecall"]
