"""verify and semantic recall's vectors, on every backend: every vector is checked for its place (a live
record's latest version, in its scope), its length and its values (finite, of unit length or zero)
without an embed; with the embedder, `embeddings="check"` (the default) embeds a sample of 32 spread over
all of them again and `embeddings="recompute"` every one; any other value is refused saying which are
taken, with the database unchanged."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")

from helpers.backends import is_pg, state  # noqa: E402
from helpers.embedders import Concepts  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.errors import InvalidInput  # noqa: E402
from mnemo.recall.embedding import VERIFY_SAMPLE, sampled  # noqa: E402

OWNER = "owner"


def fill(db: str, n: int) -> None:
    with MnemoClient(db, OWNER, embedder=Concepts()) as c, c.transaction() as t:
        for i in range(n):
            t.remember(f"note {i} about a flight")


def unsampled(n: int) -> int:
    """The first position, in seq order, that verify's sample of n vectors passes over."""
    return next(i for i in range(n) if i not in set(sampled(n, False)))


def alter(c: MnemoClient, db: str, which: str, vector: np.ndarray) -> None:
    """Set the vector of the first document ("first") or of the first that verify's sample passes over
    ("unsampled"), in seq order, to `vector`."""
    if is_pg(db):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            seqs = [seq for (seq,) in conn.execute("SELECT seq FROM mnemo_vectors ORDER BY seq")]
            seq = seqs[0] if which == "first" else seqs[unsampled(len(seqs))]
            conn.execute("UPDATE mnemo_vectors SET vector = %s WHERE seq = %s", [vector.astype("<f4").tobytes(), seq])
        return
    vectors = c._store.index.vectors  # type: ignore[attr-defined]
    order = sorted(range(vectors.used), key=lambda slot: int(vectors.slot_seq[slot]))
    slot = order[0] if which == "first" else order[unsampled(len(order))]
    vectors.vectors[slot] = vector


def test_the_sample_is_spread_from_the_first_to_the_last() -> None:
    assert sampled(5, False) == [0, 1, 2, 3, 4]
    assert sampled(1000, True) == list(range(1000))
    picked = sampled(1000, False)
    assert len(picked) == VERIFY_SAMPLE == 32 and picked[0] == 0 and picked[-1] == 999
    assert picked == sorted(set(picked))


def test_verify_embeds_a_sample_and_recompute_embeds_every_vector(db: str) -> None:
    fill(db, 100)
    counting = Concepts()
    with MnemoClient(db, OWNER, embedder=counting) as c:
        c.recall("air", mode="semantic")
        counting.embedded = 0
        assert c.verify().ok
        assert counting.embedded == VERIFY_SAMPLE
        counting.embedded = 0
        assert c.verify(embeddings="recompute").ok
        assert counting.embedded == 100


def test_a_vector_replaced_by_another_unit_vector_is_found_by_recompute(db: str) -> None:
    fill(db, 100)
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        c.recall("air", mode="semantic")
        other = Concepts().embed(["pizza for dinner"])[0]
        alter(c, db, "unsampled", other / np.linalg.norm(other))
        assert c.verify().ok  # of its place, length and values: nothing to see without embedding it
        report = c.verify(embeddings="recompute")
        assert not report.ok
        assert [p.message for p in report.problems if "differs from the one its" in p.message] != []


def test_a_vector_not_of_unit_length_or_not_finite_is_named_without_an_embed(db: str) -> None:
    fill(db, 40)
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        c.recall("air", mode="semantic")
        alter(c, db, "unsampled", np.full(32, 0.5, dtype=np.float32))
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        if not is_pg(db):  # (the file backend's vectors are the client's: the altered ones are in that client)
            c.recall("air", mode="semantic")
            alter(c, db, "unsampled", np.full(32, 0.5, dtype=np.float32))
        report = c.verify()
        assert not report.ok
        assert any("is not finite and of unit length" in p.message for p in report.problems), report.problems
    with MnemoClient(db, OWNER) as c:  # no embedder: the values are checked all the same
        if not is_pg(db):
            c.recall("air")
            vectors = c._store.index.vectors  # type: ignore[attr-defined]
            vectors.vectors[0] = np.nan
        report = c.verify()
        assert any("is not finite and of unit length" in p.message for p in report.problems), report.problems


@pytest.mark.parametrize("bad", ["all", "", None, 1, "RECOMPUTE"])
def test_a_bad_embeddings_value_is_refused_and_changes_nothing(db: str, bad: object) -> None:
    fill(db, 3)
    before = state(db)
    with MnemoClient(db, OWNER, embedder=Concepts()) as c:
        with pytest.raises(InvalidInput) as caught:
            c.verify(embeddings=bad)  # type: ignore[arg-type]
        assert str(caught.value) == f"embeddings must be one of 'check', 'recompute', got {bad!r}"
    assert state(db) == before
