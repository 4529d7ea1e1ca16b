"""PostgresStore's part that serves semantic and hybrid recall (docs/RECALL.md §6) over the vectors in
mnemo_vectors (vectors.py): the caller's documents that have no vector yet embedded and stored, the
corpus's cosines computed over the vectors this client has read, the BM25 scores of hybrid mode read as
lexical recall reads them (one statement), and the hits' latest versions read and checked."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import psycopg

from ...errors import EmbedderMismatch, IntegrityError
from ...recall._numpy import np
from ...recall.embedding import Embedder, describe, embed
from ...recall.engine import Staged
from ...recall.fusion import fuse
from ...recall.local import recorded_as
from ...recall.query import Query as RecallQuery
from ..recall import Hit, lexical_side, searchable_text
from ..types import Found, Progress, Query, Rec, ScopeFilter
from .errors import storage_error
from .reads import Loaded
from .sql import _tags_sql, recall_sql
from .text_recall import TextRecall
from .vectors import CHANGES, INSERT_VECTORS, VectorCache, check_recorded, packed

if TYPE_CHECKING:
    from ..batch import Batch

MEANING_READS = 8  # rankings a recall makes at most while the records change under it
CATCH_UP_CHUNK = 1024  # documents read, then embedded, at a time by a catch-up


class _Changed(Exception):
    """A hit's record changed since the vectors were read: rank again (without the document `seq`)."""

    def __init__(self, seq: int) -> None:
        super().__init__(seq)
        self.seq = seq


class Meaning(TextRecall):
    """Semantic and hybrid recall, and the vectors they keep."""

    _cache: VectorCache | None = None
    _cache_lock = threading.Lock()

    # -- the embedder the database records --------------------------------------------------------
    def _open_vectors(self, embedder: Embedder | None, reindex: bool) -> None:
        """Take `embedder` for semantic recall: EmbedderMismatch if the database's vectors are another's
        (unless `reindex`, which makes them again); a writer records it when none is."""
        self.embedder = embedder
        self._cache_lock = threading.Lock()
        self._cache = None
        if embedder is None or reindex:
            return
        try:
            check_recorded(self._reads(), embedder, self.path, claim=not self.readonly)
        except psycopg.Error as exc:
            raise storage_error(exc, self.path) from None

    def reindex(self, progress: Progress | None = None) -> int:
        """Every document's vector made again with this store's embedder, which the database then records."""
        embedder = self.embedder
        assert embedder is not None  # (the client opens a store to reindex with one)
        self.check_writable()
        conn = self._connect(autocommit=False)
        try:
            with conn.transaction():
                conn.execute("SELECT 1 FROM mnemo_head FOR UPDATE")  # (stamps are taken under it: vectors.py)
                conn.execute("LOCK TABLE mnemo_vectors IN EXCLUSIVE MODE")  # no catch-up inserts meanwhile
                conn.execute("DELETE FROM mnemo_vectors")
                conn.execute("DELETE FROM mnemo_embedder")
                conn.execute("INSERT INTO mnemo_embedder (name, dimension) VALUES (%s, %s)",
                             [embedder.name, embedder.dimension])
                # every client's cache is older than this stamp: each reads the vectors again
                conn.execute("UPDATE mnemo_vector_state SET pruned = nextval('mnemo_vector_stamps')")
        except psycopg.Error as exc:
            raise storage_error(exc, self.path) from None
        finally:
            conn.close()
        with self._cache_lock:
            self._cache = None
        self._sync_vectors(None)
        return self._catch_up_vectors(ScopeFilter(True), None, None, progress)

    # -- the vectors this client has read ----------------------------------------------------------
    def _sync_vectors(self, conn: psycopg.Connection[Any] | None) -> None:
        """Bring the cache up to date with what changed since it last read (vectors.CHANGES, one
        statement): every vector stamped since, every document gone since, the documents written since
        that have no vector. EmbedderMismatch if another embedder's vectors are recorded now (a reindex
        elsewhere); the whole table read again after a compact pruned the departures it had not read."""
        embedder = self.embedder
        assert embedder is not None
        with self._cache_lock:
            for _attempt in (0, 1):
                cache = self._vector_cache()
                rows = self._fetch(CHANGES, [cache.stamp, cache.stamp, cache.docs_upto], conn, binary=True)
                pruned = rows[0][1]
                if pruned > cache.stamp and cache.docs_upto >= 0:
                    self._cache = None  # departures it has not read were pruned: read everything again
                    continue
                break
            if any(row[0] == "g" for row in rows):
                rows.sort(key=lambda row: (row[0] != "e", row[1] if row[1] is not None else 1 << 62))
            try:
                recorded = cache.apply(rows)
            except ValueError as exc:
                self._cache = None
                raise IntegrityError(f"{self.path}: mnemo_vectors holds a bad row ({exc}): run verify") from None
            cache.stamp = max(cache.stamp, pruned)
        if recorded is not None and not (recorded[1] == embedder.dimension and recorded_as(recorded[0], embedder.name)):
            raise EmbedderMismatch(
                f"the vectors of {self.path} were made by the embedder {recorded[0]!r} (dimension {recorded[1]}), "
                f"not by {describe(embedder)}: open it with that embedder, or rebuild its vectors with "
                "`mnemo reindex DB` (mnemo.reindex in Python)"
            )

    def _catch_up_vectors(
        self, scopes: ScopeFilter, batch: Batch | None, conn: psycopg.Connection[Any] | None,
        progress: Progress | None = None,
    ) -> int:
        """Embed the documents in `scopes` the cache knows to have no vector, and store their vectors (a
        read-only client, or one inside a transaction, keeps them in its cache only); how many were
        stored (0 when kept in the cache alone, which needs no new read)."""
        embedder = self.embedder
        assert embedder is not None
        with self._cache_lock:
            cache = self._vector_cache()
            admitted: dict[str, bool] = {}
            pending = sorted(seq for seq, (_id, scope) in cache.unembedded.items()
                             if admitted.setdefault(scope, scopes.admits(scope)))
        if not pending:
            return 0
        keep_only = self.readonly or batch is not None
        stored = 0
        done = 0
        for start in range(0, len(pending), CATCH_UP_CHUNK):
            chunk = pending[start:start + CATCH_UP_CHUNK]
            loaded: Loaded = {}
            self._load_texts(chunk, ScopeFilter(True), batch, conn, loaded)
            texts: list[tuple[int, str]] = []
            for seq in chunk:
                found = loaded.get(seq)
                if found is not None and found[0].latest.seq == seq:
                    text = searchable_text(found[1])
                    if text is not None:
                        texts.append((seq, text))
            vectors = embed(embedder, [text for _seq, text in texts])
            if keep_only:
                with self._cache_lock:
                    cache = self._vector_cache()
                    for (seq, _text), vector in zip(texts, vectors, strict=True):
                        doc = cache.unembedded.pop(seq, None)
                        if doc is not None:  # (still a document: a departure read meanwhile took it out)
                            cache.put(seq, doc[0], doc[1], vector)
            else:
                self._store_vectors([seq for seq, _text in texts], packed(vectors))
                stored += len(texts)
            done += len(chunk)
            if progress is not None:
                progress(done, len(pending))
        return stored

    def _store_vectors(self, seqs: list[int], blobs: list[bytes]) -> None:
        """Insert the vectors of the documents `seqs` still there, under the head row (so that their
        stamps become visible in their order: vectors.py)."""
        writer = self._connect(autocommit=False)
        try:
            with writer.transaction():
                writer.execute(self._lock_timeout_setting)
                writer.execute("SELECT 1 FROM mnemo_head FOR UPDATE")
                writer.execute(f"{INSERT_VECTORS} ON CONFLICT (seq) DO NOTHING", [seqs, blobs])
        except psycopg.Error as exc:
            raise storage_error(exc, self.path) from None
        finally:
            writer.close()

    def _vector_cache(self) -> VectorCache:
        embedder = self.embedder
        assert embedder is not None
        if self._cache is None:
            self._cache = VectorCache(embedder.dimension)
        return self._cache

    # -- the recall -------------------------------------------------------------------------------
    def _recall_by_meaning(
        self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int, mode: str
    ) -> list[Hit]:
        batch = self.current_batch()
        conn = self._batch_conn()
        for _attempt in range(MEANING_READS):
            self._sync_vectors(conn)
            if self._catch_up_vectors(scopes, batch, conn):
                self._sync_vectors(conn)  # (the vectors just stored, with their stamps)
            try:
                return self._rank_by_meaning(query, scopes, tags, limit, mode, batch, conn)
            except _Changed as changed:
                with self._cache_lock:  # (its departure is read by the next sync too; this forgets it now)
                    self._vector_cache().drop(changed.seq)
                continue
        raise IntegrityError(f"{self.path}: recall could not read its hits: the records keep changing under it")

    def _rank_by_meaning(
        self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int, mode: str, batch: Batch | None,
        conn: psycopg.Connection[Any] | None,
    ) -> list[Hit]:
        embedder = self.embedder
        assert embedder is not None
        filtered = tags.filters_tags
        touched = set(batch.recs) if batch is not None else set()
        staged: list[Rec] = []
        staged_texts: list[str] = []
        for rec in (batch.recs.values() if batch is not None else ()):
            if rec is not None and scopes.admits(rec.scope):
                assert batch is not None
                text = self._staged_text(rec, batch, conn)
                if text is not None:
                    staged.append(rec)
                    staged_texts.append(text)
        found = embed(embedder, [query.meaning, *staged_texts])
        with self._cache_lock:
            cache = self._vector_cache()
            # the caller's documents with a vector, less those of the records its transaction wrote (a
            # document written since the catch-up, and not embedded yet, waits for the next recall)
            slots = cache.corpus(scopes.admits, touched)
            committed = cache.cosines(found[0])[slots]
            corpus = cache.slot_seq[slots]
            slot_of = dict(cache.slot_of)
            position_of = np.full(cache.used, -1, dtype=np.int64)
            position_of[slots] = np.arange(len(slots))
        n_committed = len(corpus)
        cosines = np.concatenate([committed, np.einsum("ij,j->i", found[1:], found[0])])
        seqs = np.concatenate([corpus, np.asarray([rec.latest.seq for rec in staged], dtype=np.int64)])
        staged_at = {rec.id: n_committed + i for i, rec in enumerate(staged)}

        def at(key: int | Staged) -> int:
            if isinstance(key, Staged):
                return staged_at.get(key.rec_id, -1)
            slot = slot_of.get(key)
            return -1 if slot is None else int(position_of[slot])

        lexical = None
        excluded = np.zeros(len(seqs), dtype=np.bool_)
        if mode == "hybrid" or query.exclude:
            exact, prefixes = query.looked_up
            sql, params = recall_sql(exact, prefixes, scopes, Query(), sorted(touched), query.phrase_atoms)
            loaded: Loaded = {}
            base = self._read_text_index(sql, params, exact, prefixes, False, loaded, scopes, batch, conn)
            self._load_phrase_texts(query, base, loaded, scopes, batch, conn)
            source = self._in_transaction(base, scopes, batch, conn)
            lexical, excluded = lexical_side(query, source, mode, len(seqs), at)
        tagged: set[int] | None = None
        if filtered:
            tagged = self._tagged(tags, conn)

        def keep(i: int) -> bool:
            if i >= n_committed:
                return tags.matches(staged[i - n_committed].tags)
            return tagged is not None and int(corpus[i]) in tagged

        ranked = fuse(mode, cosines, seqs, lexical, excluded, limit, keep if filtered else None)
        wanted = [int(corpus[hit.position]) for hit in ranked if hit.position < n_committed]
        loaded_hits: Loaded = {}
        if wanted:
            self._load_texts(wanted, scopes, batch, conn, loaded_hits)
        hits: list[Hit] = []
        for hit in ranked:
            if hit.position >= n_committed:
                rec = staged[hit.position - n_committed]
                assert batch is not None
                hits.append(Hit(self._overlay_found(rec, "latest", batch, conn), hit.score, hit.lexical, hit.semantic))
                continue
            seq = int(corpus[hit.position])
            got = loaded_hits.get(seq)
            if got is None or got[0].latest.seq != seq:
                raise _Changed(seq)  # the record changed (or was forgotten) since the vectors were read
            rec, packed_fields = got
            if not tags.matches(rec.tags):
                raise _Changed(seq)
            hits.append(Hit(Found(rec, (packed_fields,)), hit.score, hit.lexical, hit.semantic))
        return hits

    def _tagged(self, tags: Query, conn: psycopg.Connection[Any] | None) -> set[int]:
        """The documents whose records have the tags `tags` asks for (by the tag index)."""
        condition, params = _tags_sql(tags, "d.id")
        rows = self._fetch(f"SELECT d.seq FROM mnemo_docs d WHERE {condition}", params, conn)
        return {seq for (seq,) in rows}


__all__ = ["Meaning"]
