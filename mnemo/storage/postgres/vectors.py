"""Semantic recall on PostgreSQL (docs/POSTGRES.md, "Recall"): the vectors in `mnemo_vectors`, a row per
document of `mnemo_docs` (a live record's latest version whose content is text: its seq, scope and unit
vector in float32), made by the embedder `mnemo_embedder` names.

A commit by a writer with the embedder writes its documents' vectors in its own transaction (commit.py);
a document written without it (a writer with no embedder, a migration, a copy) has no row until semantic
recall next runs, which embeds the caller's such documents and inserts their rows, each only while its
document is still there (locked FOR SHARE: a forget waits for it, and its trigger then deletes the row).
A document that leaves mnemo_docs (an update or a forget) takes its vector with it, by a trigger in the
same transaction; `compact` rewrites the table, so that no page keeps a deleted vector's bytes.

A client keeps the vectors it has read in memory (`VectorCache`), and a recall reads only what changed
since its last (CHANGES: the vectors and departed documents stamped since, schema version 7): a departed
document's row is zeroed at once. The scan is the file backend's: an einsum over the cached rows, whose
cosines do not depend on how many rows there are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ...chain.codec import SALT_SIZE
from ...errors import EmbedderMismatch
from ...recall._numpy import np
from ...recall.embedding import Embedder, describe, embed, sampled, unit_or_zero
from ...recall.local import recorded_as
from ..recall import searchable_text

if TYPE_CHECKING:
    from numpy.typing import NDArray

INSERT_VECTORS = (
    "INSERT INTO mnemo_vectors (seq, scope, vector) SELECT d.seq, d.scope, u.vector "
    "FROM unnest(%s::bigint[], %s::bytea[]) u(seq, vector) JOIN mnemo_docs d ON d.seq = u.seq "
    "ORDER BY d.seq FOR SHARE OF d"
)
# (FOR SHARE: a document forgotten meanwhile is not found, and one found cannot be deleted until this
# transaction ends, when the forget's trigger deletes the row inserted here)
INSERT_COMMITTED = (
    "INSERT INTO mnemo_vectors (seq, scope, vector) SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bytea[])"
)


def check_recorded(conn: Any, embedder: Embedder, path: str, claim: bool) -> None:
    """EmbedderMismatch unless the database's vectors are `embedder`'s (or it has none); with `claim`,
    record `embedder` as the one when none is, and the local embedder's name of today where the one of
    before its weights' hash was part of it is recorded (local.recorded_as; on the psycopg connection
    `conn`, autocommit)."""
    row = conn.execute("SELECT name, dimension FROM mnemo_embedder").fetchone()
    if row is None and claim:
        conn.execute("INSERT INTO mnemo_embedder (name, dimension) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                     [embedder.name, embedder.dimension])
        row = conn.execute("SELECT name, dimension FROM mnemo_embedder").fetchone()
    if row is not None and row[0] != embedder.name and row[1] == embedder.dimension and recorded_as(row[0],
                                                                                                      embedder.name):
        if claim:  # the local model's name of before its weights' hash was part of it: recorded as today's
            conn.execute("UPDATE mnemo_embedder SET name = %s WHERE name = %s", [embedder.name, row[0]])
        row = (embedder.name, row[1])
    if row is not None and (row[0], row[1]) != (embedder.name, embedder.dimension):
        raise EmbedderMismatch(
            f"the vectors of {path} were made by the embedder {row[0]!r} (dimension {row[1]}), not by "
            f"{describe(embedder)}: open it with that embedder, or rebuild its vectors with `mnemo reindex DB` "
            "(mnemo.reindex in Python)"
        )


def packed(vectors: NDArray[np.float32]) -> list[bytes]:
    """Each vector's bytes as mnemo_vectors holds them: float32, little-endian."""
    return [row.astype("<f4").tobytes() for row in vectors]


# What changed since stamp %s, in one statement (one snapshot: a stamp read means every smaller one is
# read too): the recorded embedder and the last stamp compact pruned ('e'), the vectors stamped after it
# with their documents' ids and scopes ('v'), the documents that left mnemo_docs ('g'), and the documents
# after seq %s that have no vector ('u'), then the head's seq ('h'), up to which the documents were read.
# Each part is looked up by its index whatever the stamp (a subquery per row, never a join the planner
# could make a scan of every document or vector, as a generic plan for a cached statement would).
CHANGES = (
    "SELECT 'e', (SELECT pruned FROM mnemo_vector_state), NULL::bigint, e.name, NULL::text, NULL::bytea, e.dimension "
    "FROM (SELECT 1) one LEFT JOIN mnemo_embedder e ON true "
    "UNION ALL SELECT 'v', v.stamp, v.seq, (SELECT d.id FROM mnemo_docs d WHERE d.seq = v.seq), v.scope, v.vector, "
    "NULL FROM mnemo_vectors v WHERE v.stamp > %s "
    "UNION ALL SELECT 'g', g.stamp, g.seq, NULL, NULL, NULL, NULL FROM mnemo_vectors_gone g WHERE g.stamp > %s "
    "UNION ALL SELECT 'u', NULL, d.seq, d.id, d.scope, NULL, NULL FROM mnemo_docs d WHERE d.seq > %s "
    "AND (SELECT true FROM mnemo_vectors v WHERE v.seq = d.seq) IS NULL "
    "UNION ALL SELECT 'h', NULL, h.seq, NULL, NULL, NULL, NULL FROM mnemo_head h"
)

# What compact does to the departures (under the head row): they go, and the last stamp among them is
# recorded, so that a client that had read less reads everything again.
PRUNE = ("WITH g AS (DELETE FROM mnemo_vectors_gone RETURNING stamp) "
         "UPDATE mnemo_vector_state SET pruned = greatest(pruned, (SELECT max(stamp) FROM g))")


class VectorCache:
    """The vectors of mnemo_vectors a client has read, in the rows ("slots") of one float32 matrix, each
    slot with its document's seq, record id and scope code; kept up to date by CHANGES from `stamp` on.
    `unembedded` holds the documents (seq -> (id, scope)) known to have no vector, read up to seq
    `docs_upto`. Not thread-safe: the store's cache lock is held by whoever reads or changes it."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.matrix: NDArray[np.float32] = np.zeros((0, dimension), dtype=np.float32)
        self.slot_seq: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.slot_scope: NDArray[np.int64] = np.zeros(0, dtype=np.int64)  # -1: a free slot
        self.slot_id: list[str | None] = []
        self.slot_of: dict[int, int] = {}  # seq -> slot
        self.slot_of_id: dict[str, int] = {}
        self.scopes: dict[str, int] = {}  # scope -> code
        self.free: list[int] = []
        self.used = 0
        self.stamp = 0
        self.docs_upto = -1
        self.unembedded: dict[int, tuple[str, str]] = {}

    def apply(self, rows: Iterable[tuple[Any, ...]]) -> tuple[str, int] | None:
        """Take CHANGES' rows (in their order: the embedder's row first); the recorded embedder's name and
        dimension (None: none is). ValueError on a vector that is not `dimension` finite float32 values."""
        recorded: tuple[str, int] | None = None
        if self.used == 0:  # a first read: its vectors put in at once
            rows = self._put_all(list(rows))
        for kind, stamp, seq, rec_id, scope, vector, dimension in rows:
            if kind == "e":
                recorded = None if rec_id is None else (rec_id, dimension)
            elif kind == "v":
                self.unembedded.pop(seq, None)
                self.put(seq, rec_id, scope, vector)
                self.stamp = max(self.stamp, stamp)
            elif kind == "g":
                self.unembedded.pop(seq, None)
                self.drop(seq)
                self.stamp = max(self.stamp, stamp)
            elif kind == "u":
                if seq not in self.slot_of:
                    self.unembedded[seq] = (rec_id, scope)
            else:
                self.docs_upto = max(self.docs_upto, seq)
        return recorded

    def _put_all(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Into an empty cache, the vectors of CHANGES' 'v' rows as one matrix (the first read of every
        vector); the other rows, left to apply. ValueError as put's."""
        fresh = [row for row in rows if row[0] == "v"]
        if not fresh or any(row[0] == "g" for row in rows):
            return rows
        bad = next((row[2] for row in fresh if len(row[5]) != 4 * self.dimension), None)
        if bad is None:
            matrix = np.frombuffer(b"".join(bytes(row[5]) for row in fresh), dtype="<f4").reshape(
                len(fresh), self.dimension).astype(np.float32)
            finite = np.isfinite(matrix).all(axis=1)
            bad = None if finite.all() else fresh[int(np.flatnonzero(~finite)[0])][2]
        if bad is not None:
            raise ValueError(f"the vector of seq {bad} is not {self.dimension} finite float32 values")
        n = len(fresh)
        self.matrix = matrix
        self.slot_seq = np.fromiter((row[2] for row in fresh), dtype=np.int64, count=n)
        for row in fresh:
            self.scopes.setdefault(row[4], len(self.scopes))
        self.slot_scope = np.fromiter((self.scopes[row[4]] for row in fresh), dtype=np.int64, count=n)
        self.slot_id = [row[3] for row in fresh]
        self.slot_of = {row[2]: slot for slot, row in enumerate(fresh)}
        self.slot_of_id = {row[3]: slot for slot, row in enumerate(fresh)}
        self.used = n
        self.stamp = max(self.stamp, max(row[1] for row in fresh))
        for row in fresh:
            self.unembedded.pop(row[2], None)
        return [row for row in rows if row[0] != "v"]

    def drop(self, seq: int) -> None:
        """Zero and free the slot of the document `seq`, if it has one (it left the database)."""
        slot = self.slot_of.pop(seq, None)
        if slot is None:
            return
        rec_id = self.slot_id[slot]
        if rec_id is not None and self.slot_of_id.get(rec_id) == slot:
            del self.slot_of_id[rec_id]
        self.matrix[slot] = 0.0
        self.slot_scope[slot] = -1
        self.slot_seq[slot] = -1
        self.slot_id[slot] = None
        self.free.append(slot)

    def put(self, seq: int, rec_id: str, scope: str, blob: bytes | NDArray[np.float32]) -> None:
        """The vector of the document `seq` (record `rec_id`, in `scope`): bytes as mnemo_vectors holds
        them, or an array. ValueError on a vector that is not `dimension` finite float32 values."""
        vector = np.frombuffer(bytes(blob), dtype="<f4") if isinstance(blob, (bytes, memoryview)) else blob
        if len(vector) != self.dimension or not np.isfinite(vector).all():
            raise ValueError(f"the vector of seq {seq} is not {self.dimension} finite float32 values")
        self.drop(seq)
        other = self.slot_of_id.get(rec_id)
        if other is not None:  # (a version this cache has not heard leave yet: only the latest is a document)
            self.drop(int(self.slot_seq[other]))
        if self.free:
            slot = self.free.pop()
        else:
            if self.used == len(self.matrix):
                size = max(16, 2 * self.used)
                self.matrix = _grown(self.matrix, size)
                self.slot_seq = _grown(self.slot_seq, size, -1)
                self.slot_scope = _grown(self.slot_scope, size, -1)
                self.slot_id.extend([None] * (size - len(self.slot_id)))
            slot = self.used
            self.used += 1
        code = self.scopes.get(scope)
        if code is None:
            code = self.scopes[scope] = len(self.scopes)
        self.matrix[slot] = vector
        self.slot_seq[slot] = seq
        self.slot_scope[slot] = code
        self.slot_id[slot] = rec_id
        self.slot_of[seq] = slot
        self.slot_of_id[rec_id] = slot

    def corpus(self, admits: Callable[[str], bool], hidden: Iterable[str]) -> NDArray[np.int64]:
        """The live slots in a scope `admits` takes, less those of the records `hidden`, in slot order."""
        codes = [code for scope, code in self.scopes.items() if admits(scope)]
        live = np.isin(self.slot_scope[:self.used], np.asarray(codes, dtype=np.int64))
        for rec_id in hidden:
            slot = self.slot_of_id.get(rec_id)
            if slot is not None:
                live[slot] = False
        return np.flatnonzero(live)

    def cosines(self, query: NDArray[np.float32]) -> NDArray[np.float32]:
        """The cosine of `query` with every slot's vector (free slots: 0), each computed alike whatever
        the number of slots (file/vector_index.py's note)."""
        found: NDArray[np.float32] = np.einsum("ij,j->i", self.matrix[:self.used], query)
        return found


def _grown(column: NDArray[Any], size: int, fill: int = 0) -> NDArray[Any]:
    out = np.full((size, *column.shape[1:]), fill, dtype=column.dtype)
    out[:len(column)] = column
    return out


__all__ = [
    "CHANGES", "INSERT_COMMITTED", "INSERT_VECTORS", "PRUNE", "VectorCache", "check_recorded", "packed",
    "vector_problems",
]


def vector_problems(conn: Any, embedder: Embedder | None, recompute: bool = False) -> list[str]:
    """How mnemo_vectors differs from what the documents give (in the caller's snapshot, on `conn`): a
    vector of no document, or of another scope; a vector of another length than the recorded embedder's;
    vectors with no embedder recorded; a vector not finite, or not of unit length (nor zero); and, when
    `embedder` is the recorded one, a vector other than the one its document's text gives now: every
    vector with `recompute`, else a sample of VERIFY_SAMPLE (a vector is tied to its version by seq, and a
    version's text never changes: the sample finds a model changed under the same name)."""
    out = [f"mnemo_vectors holds a vector of seq {seq}, which is no document of mnemo_docs in its scope"
           for (seq,) in conn.execute("SELECT v.seq FROM mnemo_vectors v LEFT JOIN mnemo_docs d ON d.seq = v.seq "
                                      "WHERE d.seq IS NULL OR d.scope <> v.scope ORDER BY v.seq")]
    recorded = conn.execute("SELECT name, dimension FROM mnemo_embedder").fetchone()
    if recorded is None:
        if conn.execute("SELECT EXISTS (SELECT 1 FROM mnemo_vectors)").fetchone()[0]:
            out.append("mnemo_vectors holds vectors but mnemo_embedder names no embedder")
        return out
    name, dimension = recorded
    out += [f"the vector of seq {seq} holds {size} bytes, not the {4 * dimension} of the embedder {name!r}"
            for seq, size in conn.execute("SELECT seq, length(vector) FROM mnemo_vectors "
                                          "WHERE length(vector) <> 4 * %s ORDER BY seq", [dimension])]
    seqs: list[int] = []
    for seq, blob in conn.cursor(binary=True).execute(
            "SELECT seq, vector FROM mnemo_vectors WHERE length(vector) = 4 * %s ORDER BY seq", [dimension]):
        seqs.append(seq)
        if not unit_or_zero(np.frombuffer(bytes(blob), dtype="<f4")):
            out.append(f"the vector of seq {seq} is not finite and of unit length")
    if embedder is None or (embedder.dimension != dimension or not recorded_as(name, embedder.name)):
        return out
    wanted = [seqs[i] for i in sampled(len(seqs), recompute)]
    for start in range(0, len(wanted), 1024):
        rows = conn.execute("SELECT v.seq, v.vector, p.payload FROM mnemo_vectors v JOIN mnemo_payloads p "
                            "ON p.seq = v.seq WHERE v.seq = ANY(%s::bigint[]) ORDER BY v.seq",
                            [wanted[start:start + 1024]]).fetchall()
        fresh = embed(embedder, [searchable_text(bytes(payload)[SALT_SIZE:]) or "" for _s, _v, payload in rows])
        for (seq, vector, _payload), want in zip(rows, fresh, strict=True):
            if not np.allclose(np.frombuffer(bytes(vector), dtype="<f4"), want, atol=1e-5):
                out.append(f"the vector of seq {seq} differs from the one its text gives now")
    return out
