"""Semantic recall on PostgreSQL (docs/POSTGRES.md, "Recall"): the vectors in `mnemo_vectors`, a row per
document of `mnemo_docs` (a live record's latest version whose content is text: its seq, scope and unit
vector in float32), made by the embedder `mnemo_embedder` names.

A commit by a writer with the embedder writes its documents' vectors in its own transaction (commit.py);
a document written without it (a writer with no embedder, a migration, a copy) has no row until semantic
recall next runs, which embeds the caller's such documents and inserts their rows, each only while its
document is still there (locked FOR SHARE: a forget waits for it, and its trigger then deletes the row).
A document that leaves mnemo_docs (an update or a forget) takes its vector with it, by a trigger in the
same transaction; `compact` rewrites the table, so that no page keeps a deleted vector's bytes.

A client keeps the vectors it has read in memory (`VectorCache`), by seq: a recall reads the seqs of every
vector and only the vectors it has not seen; a vector whose row is gone is zeroed. The scan is the file
backend's: an einsum over the cached rows, whose cosines do not depend on how many rows there are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ...chain.codec import SALT_SIZE
from ...errors import EmbedderMismatch
from ...recall._numpy import np
from ...recall.embedding import Embedder, describe, embed
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


class VectorCache:
    """Vectors read from mnemo_vectors, by seq, in the rows of one float32 matrix. Not thread-safe: the
    store's cache lock is held by whoever reads or changes it."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.matrix: NDArray[np.float32] = np.zeros((0, dimension), dtype=np.float32)
        self.row_of: dict[int, int] = {}
        self.free: list[int] = []
        self.used = 0

    def keep_only(self, seqs: Iterable[int]) -> None:
        """Zero and free the rows of every seq not among `seqs` (their vectors left the database)."""
        alive = set(seqs)
        for seq in [seq for seq in self.row_of if seq not in alive]:
            row = self.row_of.pop(seq)
            self.matrix[row] = 0.0
            self.free.append(row)

    def missing(self, seqs: Iterable[int]) -> list[int]:
        return [seq for seq in seqs if seq not in self.row_of]

    def add(self, rows: Iterable[tuple[int, bytes]]) -> None:
        """The vectors of (seq, bytes) rows; a row of the wrong length is refused (ValueError)."""
        for seq, blob in rows:
            vector = np.frombuffer(bytes(blob), dtype="<f4")
            if len(vector) != self.dimension or not np.isfinite(vector).all():
                raise ValueError(f"the vector of seq {seq} is not {self.dimension} finite float32 values")
            if self.free:
                row = self.free.pop()
            else:
                if self.used == len(self.matrix):
                    grown = np.zeros((max(16, 2 * self.used), self.dimension), dtype=np.float32)
                    grown[:self.used] = self.matrix[:self.used]
                    self.matrix = grown
                row = self.used
                self.used += 1
            self.matrix[row] = vector
            self.row_of[seq] = row

    def cosines(self, query: NDArray[np.float32], seqs: list[int]) -> NDArray[np.float32]:
        """The cosine of `query` with the vector of each of `seqs` (all cached), in their order."""
        every: NDArray[np.float32] = np.einsum("ij,j->i", self.matrix[:self.used], query)
        return every[np.fromiter((self.row_of[seq] for seq in seqs), dtype=np.int64, count=len(seqs))]


def catch_up_rows(
    pending: list[tuple[int, str]], embed_texts: Callable[[list[str]], NDArray[np.float32]], chunk: int = 1024,
) -> Iterable[tuple[list[int], list[bytes]]]:
    """(seqs, vector bytes) of the pending documents (seq, text), `chunk` at a time."""
    for start in range(0, len(pending), chunk):
        part = pending[start:start + chunk]
        yield [seq for seq, _ in part], packed(embed_texts([text for _, text in part]))


__all__ = [
    "INSERT_COMMITTED", "INSERT_VECTORS", "VectorCache", "catch_up_rows", "check_recorded", "packed", "vector_problems",
]


def vector_problems(conn: Any, embedder: Embedder | None) -> list[str]:
    """How mnemo_vectors differs from what the documents give (in the caller's snapshot, on `conn`): a
    vector of no document, or of another scope; a vector of another length than the recorded embedder's;
    vectors with no embedder recorded; and, when `embedder` is the recorded one, a vector other than the
    one its document's text gives now."""
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
    if embedder is None or (embedder.name, embedder.dimension) != (name, dimension):
        return out
    rows = conn.execute("SELECT v.seq, v.vector, p.payload FROM mnemo_vectors v JOIN mnemo_payloads p "
                        "ON p.seq = v.seq WHERE length(v.vector) = 4 * %s ORDER BY v.seq", [dimension]).fetchall()
    texts = [searchable_text(bytes(payload)[SALT_SIZE:]) or "" for _seq, _vector, payload in rows]
    for start in range(0, len(rows), 1024):
        fresh = embed(embedder, texts[start:start + 1024])
        for (seq, vector, _payload), want in zip(rows[start:start + 1024], fresh, strict=True):
            if not np.allclose(np.frombuffer(bytes(vector), dtype="<f4"), want, atol=1e-5):
                out.append(f"the vector of seq {seq} differs from the one its text gives now")
    return out
