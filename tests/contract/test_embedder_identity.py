"""The embedder a database records names its weights: the local embedder records the SHA-256 of the weights
file it loaded, so an open with other weights under the model's name is refused, naming both; a database
recorded under the model's bare name (before the hash was part of it) is taken as the local embedder's
only when the weights installed are the ones shipped then, and is recorded under today's name from then
on. On every backend."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import pytest

np = pytest.importorskip("numpy")

from mnemo import MnemoClient  # noqa: E402
from mnemo.errors import EmbedderMismatch  # noqa: E402
from mnemo.recall import local  # noqa: E402

OWNER = "owner"
needs_local = pytest.mark.skipif(importlib.util.find_spec("wordllama") is None,
                                 reason="the `semantic` extra is not installed")


class Named:
    """An embedder of the local model's dimension under any name, whose vectors are the local model's
    (so that recall after taking its vectors as the local embedder's is meaningful)."""

    dimension = local.DIMENSION

    def __init__(self, name: str) -> None:
        self.name = name

    def embed(self, texts: Sequence[str]) -> Any:
        return local.local_embedder().embed(texts)


def recorded(db: str) -> str | None:
    """The name of the embedder whose vectors the database holds."""
    if db.startswith("postgresql"):
        import psycopg

        with psycopg.connect(db) as conn:
            row = conn.execute("SELECT name FROM mnemo_embedder").fetchone()
            return None if row is None else str(row[0])
    with MnemoClient(db, OWNER, readonly=True) as client:
        vectors = client._store.index.vectors  # type: ignore[attr-defined]
        return None if vectors is None else str(vectors.name)


def fill(db: str, embedder: Any) -> None:
    with MnemoClient(db, OWNER, embedder=embedder) as client:
        client.remember("The user hates flying and takes the train.")
        client.remember("Deploys go out on Tuesdays.")
        client.recall("air travel", mode="semantic")


@needs_local
def test_the_local_name_is_the_model_and_the_weights_hash() -> None:
    embedder = local.local_embedder()
    assert embedder.name == f"wordllama/l2_supercat/256@sha256:{embedder.weights_sha256}"
    assert embedder.weights_sha256 == local.SHIPPED_SHA256  # the weights wordllama 0.4.0.post1 ships
    assert embedder.name == local.NAME


@needs_local
def test_other_weights_under_the_model_name_are_refused_naming_both(db: str) -> None:
    fill(db, "local")
    assert recorded(db) == local.NAME
    other = local.identity("0" * 64)
    with pytest.raises(EmbedderMismatch) as caught:
        MnemoClient(db, OWNER, embedder=Named(other))
    assert f"made by the embedder {local.NAME!r} (dimension 256), not by {other!r} (dimension 256)" in str(caught.value)
    assert recorded(db) == local.NAME


@needs_local
def test_a_database_of_the_bare_model_name_opens_with_the_shipped_weights_and_is_renamed(db: str) -> None:
    fill(db, Named(local.LEGACY_NAME))
    assert recorded(db) == local.LEGACY_NAME
    counting = Counting()
    with MnemoClient(db, OWNER, embedder=counting) as client:
        hits = client.recall("air travel preferences", mode="semantic", limit=1)
        assert hits[0].record.content == "The user hates flying and takes the train."
        assert counting.embedded == 1  # the query alone: the vectors recorded under the bare name were kept
        client.remember("Pizza on Fridays.")  # (the file backend's snapshot is written by a close after a change)
    assert recorded(db) == local.NAME


@needs_local
def test_a_database_of_the_bare_model_name_is_refused_to_other_weights(db: str) -> None:
    fill(db, Named(local.LEGACY_NAME))
    other = local.identity("f" * 64)
    with pytest.raises(EmbedderMismatch, match=f"made by the embedder {local.LEGACY_NAME!r} "
                                               rf"\(dimension 256\), not by {other!r}"):
        MnemoClient(db, OWNER, embedder=Named(other))
    assert recorded(db) == local.LEGACY_NAME


class Counting:
    """The local embedder, counting the texts it embeds."""

    dimension = local.DIMENSION

    def __init__(self) -> None:
        self.inner = local.local_embedder()
        self.name = self.inner.name
        self.embedded = 0

    def embed(self, texts: Sequence[str]) -> Any:
        self.embedded += len(texts)
        return self.inner.embed(texts)
