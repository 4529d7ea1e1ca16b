"""PostgresStore's part that serves semantic and hybrid recall (docs/RECALL.md §6) over the vectors in
mnemo_vectors (vectors.py): the caller's documents that have no vector yet embedded and stored, the
corpus's cosines computed over the vectors this client has read, the BM25 scores of hybrid mode read as
lexical recall reads them (one statement), and the hits' latest versions read and checked."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import psycopg

from ...errors import IntegrityError
from ...recall._numpy import np
from ...recall.embedding import Embedder, embed
from ...recall.engine import Staged
from ...recall.fusion import fuse
from ...recall.query import Query as RecallQuery
from ..recall import Hit, in_transaction, lexical_side, searchable_text
from ..types import Found, Progress, Query, Rec, ScopeFilter
from .commit import Commits
from .errors import storage_error
from .sql import _tags_sql, recall_sql, scope_sql
from .vectors import INSERT_VECTORS, VectorCache, catch_up_rows, check_recorded

if TYPE_CHECKING:
    from ..batch import Batch
    from .text_index import TableSource

    Loaded = dict[int, "tuple[Rec, bytes] | None"]

MEANING_READS = 8  # rankings a recall makes at most while the records change under it


class _Changed(Exception):
    """A hit's record changed since the vectors were read: rank again."""


class Meaning(Commits):
    """Semantic and hybrid recall, and the vectors they keep."""

    _cache: VectorCache | None = None
    _cache_lock = threading.Lock()

    if TYPE_CHECKING:  # PostgresStore's (store.py)
        def _load_texts(self, seqs: list[int], scopes: ScopeFilter, batch: Batch | None,
                        conn: psycopg.Connection[Any] | None, loaded: Loaded) -> None: ...
        def _read_text_index(self, sql: str, params: list[Any], exact: list[str], prefixes: list[str],
                             filtered: bool, loaded: Loaded, scopes: ScopeFilter, batch: Batch | None,
                             conn: psycopg.Connection[Any] | None) -> TableSource: ...
        def _load_phrase_texts(self, query: RecallQuery, source: TableSource, loaded: Loaded, scopes: ScopeFilter,
                               batch: Batch | None, conn: psycopg.Connection[Any] | None) -> None: ...
        def _overlay_found(self, rec: Rec, payloads: Any, batch: Batch,
                           conn: psycopg.Connection[Any] | None) -> Found: ...

    # -- the embedder the database records --------------------------------------------------------
    def _open_vectors(self, embedder: Embedder | None, reindex: bool) -> None:
        """Take `embedder` for semantic recall: EmbedderMismatch if the database's vectors are another's
        (unless `reindex`, which makes them again); a writer records it when none is."""
        self.embedder = embedder
        self._cache_lock = threading.Lock()
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
                conn.execute("LOCK TABLE mnemo_vectors IN EXCLUSIVE MODE")  # no catch-up inserts meanwhile
                conn.execute("DELETE FROM mnemo_vectors")
                conn.execute("DELETE FROM mnemo_embedder")
                conn.execute("INSERT INTO mnemo_embedder (name, dimension) VALUES (%s, %s)",
                             [embedder.name, embedder.dimension])
        except psycopg.Error as exc:
            raise storage_error(exc, self.path) from None
        finally:
            conn.close()
        with self._cache_lock:
            self._cache = None
        return self._catch_up_vectors(ScopeFilter(True), None, None, progress)

    # -- making the vectors a recall needs --------------------------------------------------------
    def _catch_up_vectors(
        self, scopes: ScopeFilter, batch: Batch | None, conn: psycopg.Connection[Any] | None,
        progress: Progress | None = None,
    ) -> int:
        """Embed and store the vector of every document in `scopes` that has none (a read-only client
        keeps them in its cache only); how many were made."""
        embedder = self.embedder
        assert embedder is not None
        where, params = scope_sql(scopes, "d.scope")
        seqs = [seq for (seq,) in self._fetch(
            "SELECT d.seq FROM mnemo_docs d WHERE NOT EXISTS (SELECT 1 FROM mnemo_vectors v WHERE v.seq = d.seq) "
            f"AND {where} ORDER BY d.seq", params, conn)]
        if not seqs:
            return 0
        loaded: Loaded = {}
        self._load_texts(seqs, ScopeFilter(True), batch, conn, loaded)
        pending = []
        for seq in seqs:
            found = loaded.get(seq)
            if found is not None and found[0].latest.seq == seq:
                text = searchable_text(found[1])
                if text is not None:
                    pending.append((seq, text))
        done = 0
        for chunk_seqs, blobs in catch_up_rows(pending, lambda texts: embed(embedder, texts)):
            if self.readonly:
                with self._cache_lock:
                    self._vector_cache().add(zip(chunk_seqs, blobs, strict=True))
            else:
                self._store_vectors(chunk_seqs, blobs)
            done += len(chunk_seqs)
            if progress is not None:
                progress(done, len(pending))
        return done

    def _store_vectors(self, seqs: list[int], blobs: list[bytes]) -> None:
        writer = self._connect(autocommit=False)
        try:
            with writer.transaction():
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
            self._catch_up_vectors(scopes, batch, conn)
            try:
                return self._rank_by_meaning(query, scopes, tags, limit, mode, batch, conn)
            except _Changed:
                continue
        raise IntegrityError(f"{self.path}: recall could not read its hits: the records keep changing under it")

    def _rank_by_meaning(
        self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int, mode: str, batch: Batch | None,
        conn: psycopg.Connection[Any] | None,
    ) -> list[Hit]:
        embedder = self.embedder
        assert embedder is not None
        filtered = bool(tags.tags or tags.any_tags or tags.tag_prefix is not None)
        # every document (so that the cache lets go of the vectors of those gone), with its record and scope
        # (a read-only client's vectors of documents that have no row are in its cache alone)
        rows = self._fetch("SELECT d.seq, d.id, d.scope FROM mnemo_docs d", None, conn)
        touched = set(batch.recs) if batch is not None else set()
        admitted: dict[str, bool] = {}
        corpus: list[int] = []
        ids: dict[int, str] = {}
        for seq, rec_id, scope in rows:
            ok = admitted.get(scope)
            if ok is None:
                ok = admitted[scope] = scopes.admits(scope)
            if ok and rec_id not in touched:
                corpus.append(seq)
                ids[seq] = rec_id
        staged: list[Rec] = []
        staged_texts: list[str] = []
        for rec in (batch.recs.values() if batch is not None else ()):
            if rec is not None and scopes.admits(rec.scope):
                assert batch is not None
                text = searchable_text(self._overlay_found(rec, "latest", batch, conn).packed[0])
                if text is not None:
                    staged.append(rec)
                    staged_texts.append(text)
        found = embed(embedder, [query.meaning, *staged_texts])
        with self._cache_lock:
            cache = self._vector_cache()
            cache.keep_only(seq for seq, *_ in rows)
            missing = cache.missing(corpus)
            if missing:
                try:
                    cache.add(self._fetch("SELECT seq, vector FROM mnemo_vectors WHERE seq = ANY(%s::bigint[])",
                                          [missing], conn, binary=True))
                except ValueError as exc:
                    raise IntegrityError(f"{self.path}: mnemo_vectors holds a bad row ({exc}): run verify") from None
            # (a document written since the catch-up, and not embedded yet, waits for the next recall)
            corpus = [seq for seq in corpus if seq in cache.row_of]
            committed = cache.cosines(found[0], corpus)
        cosines = np.concatenate([committed, np.einsum("ij,j->i", found[1:], found[0])])
        seqs = np.asarray(corpus + [rec.latest.seq for rec in staged], dtype=np.int64)
        position = {seq: i for i, seq in enumerate(corpus)}
        staged_at = {rec.id: len(corpus) + i for i, rec in enumerate(staged)}

        def at(key: int | Staged) -> int:
            return staged_at.get(key.rec_id, -1) if isinstance(key, Staged) else position.get(key, -1)

        lexical = None
        excluded = np.zeros(len(seqs), dtype=np.bool_)
        if mode == "hybrid" or query.exclude:
            exact, prefixes = query.looked_up
            sql, params = recall_sql(exact, prefixes, scopes, Query(), sorted(touched))
            loaded: Loaded = {}
            base = self._read_text_index(sql, params, exact, prefixes, False, loaded, scopes, batch, conn)
            self._load_phrase_texts(query, base, loaded, scopes, batch, conn)

            def staged_text(rec: Rec) -> str | None:
                assert batch is not None
                return searchable_text(self._overlay_found(rec, "latest", batch, conn).packed[0])

            source: Any = in_transaction(base, batch, scopes, base.touched.get, staged_text)
            lexical, excluded = lexical_side(query, source, mode, len(seqs), at)
        tagged: set[int] | None = None
        if filtered:
            tagged = self._tagged(corpus, tags, conn)

        def keep(i: int) -> bool:
            if i >= len(corpus):
                return tags.matches(staged[i - len(corpus)].tags)
            return tagged is not None and corpus[i] in tagged

        ranked = fuse(mode, cosines, seqs, lexical, excluded, limit, keep if filtered else None)
        wanted = [corpus[hit.position] for hit in ranked if hit.position < len(corpus)]
        loaded_hits: Loaded = {}
        if wanted:
            self._load_texts(wanted, scopes, batch, conn, loaded_hits)
        hits: list[Hit] = []
        for hit in ranked:
            if hit.position >= len(corpus):
                rec = staged[hit.position - len(corpus)]
                assert batch is not None
                hits.append(Hit(self._overlay_found(rec, "latest", batch, conn), hit.score, hit.lexical, hit.semantic))
                continue
            seq = corpus[hit.position]
            got = loaded_hits.get(seq)
            if got is None or got[0].latest.seq != seq or got[0].id != ids[seq]:
                raise _Changed()  # the record changed (or was forgotten) since the vectors were read
            rec, packed_fields = got
            if not tags.matches(rec.tags):
                raise _Changed()
            hits.append(Hit(Found(rec, (packed_fields,)), hit.score, hit.lexical, hit.semantic))
        return hits

    def _tagged(self, seqs: list[int], tags: Query, conn: psycopg.Connection[Any] | None) -> set[int]:
        """Which of the documents `seqs` have records with the tags `tags` asks for (by the tag index)."""
        condition, params = _tags_sql(tags, "d.id")
        rows = self._fetch(f"SELECT d.seq FROM mnemo_docs d WHERE d.seq = ANY(%s::bigint[]) AND {condition}",
                           [seqs, *params], conn)
        return {seq for (seq,) in rows}


__all__ = ["Meaning"]
