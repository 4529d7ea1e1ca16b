"""The embedder protocol's checks (mnemo/recall/embedding.py) and the local default (local.py)."""

from __future__ import annotations

import importlib.util
import socket
from collections.abc import Sequence
from typing import Any

import pytest

np = pytest.importorskip("numpy")

from mnemo.errors import EmbedderError, InvalidInput  # noqa: E402
from mnemo.recall import embedding, local  # noqa: E402
from mnemo.recall.embedding import BATCH, check_embedder, check_mode, embed  # noqa: E402


class Fixed:
    """An embedder answering what it is told to, recording what it was asked."""

    def __init__(self, answer: Any = None, name: str = "fixed", dimension: int = 3) -> None:
        self.name, self.dimension, self.answer = name, dimension, answer
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls.append(list(texts))
        if callable(self.answer):
            return self.answer(texts)
        if self.answer is not None:
            return self.answer
        return np.array([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)


def test_a_good_embedder_is_taken_as_it_is() -> None:
    fixed = Fixed()
    assert check_embedder(fixed) is fixed
    for name, dimension in (("x", 1), ("x" * 200, 8192)):  # the bounds
        edge = Fixed(name=name, dimension=dimension)
        assert check_embedder(edge) is edge


@pytest.mark.parametrize(("change", "said"), [
    ({"name": ""}, "name must be a printable string"),
    ({"name": 3}, "name must be a printable string"),
    ({"name": "a\nb"}, "name must be a printable string"),
    ({"name": "x" * 201}, "name must be a printable string"),
    ({"dimension": 0}, "dimension must be an int from 1 to 8192"),
    ({"dimension": True}, "dimension must be an int from 1 to 8192"),
    ({"dimension": 2.0}, "dimension must be an int from 1 to 8192"),
    ({"dimension": 8193}, "dimension must be an int from 1 to 8192"),
    ({"embed": None}, "has no embed(texts) method"),
])
def test_an_embedder_missing_a_part_is_refused_saying_which(change: dict[str, Any], said: str) -> None:
    fixed = Fixed()
    for key, value in change.items():
        setattr(fixed, key, value)
    with pytest.raises(InvalidInput, match=said.replace("(", r"\(").replace(")", r"\)")):
        check_embedder(fixed)


def test_a_name_other_than_local_is_refused() -> None:
    with pytest.raises(InvalidInput, match="embedder must be 'local' or an object"):
        check_embedder("openai")


def test_modes() -> None:
    assert check_mode("lexical", None) == "lexical"
    assert check_mode("hybrid", Fixed()) == "hybrid"
    with pytest.raises(InvalidInput, match="mode must be one of 'hybrid', 'lexical', 'semantic', got 'fuzzy'"):
        check_mode("fuzzy", Fixed())
    for mode in ("hybrid", "semantic"):
        with pytest.raises(InvalidInput) as raised:
            check_mode(mode, None)
        message = str(raised.value)
        assert "needs an embedder" in message and "embedder='local'" in message
        assert "pip install -e '.[semantic]'" in message


def test_vectors_come_back_of_unit_length_and_a_zero_vector_stays_zero() -> None:
    fixed = Fixed(answer=np.array([[3, 4, 0], [0, 0, 0]], dtype=np.float32))
    vectors = embed(fixed, ["a", "b"])
    assert vectors.dtype == np.float32
    assert vectors.tolist() == [[0.6000000238418579, 0.800000011920929, 0.0], [0.0, 0.0, 0.0]]


def test_texts_are_asked_for_a_batch_at_a_time() -> None:
    fixed = Fixed()
    texts = [str(i) for i in range(2 * BATCH + 1)]
    vectors = embed(fixed, texts)
    assert [len(call) for call in fixed.calls] == [BATCH, BATCH, 1]
    assert sum(fixed.calls, []) == texts
    assert vectors.shape == (len(texts), 3)


@pytest.mark.parametrize(("answer", "said"), [
    ([[1.0, 0.0, 0.0]], "returned a list, not a numpy array of float32"),
    (np.ones((1, 3), dtype=np.float64), "returned an array of float64, not float32"),
    (np.ones((1, 4), dtype=np.float32), r"returned an array of shape \(1, 4\) for 1 texts, expected \(1, 3\)"),
    (np.ones((2, 3), dtype=np.float32), r"returned an array of shape \(2, 3\) for 1 texts, expected \(1, 3\)"),
    (np.ones(3, dtype=np.float32), r"returned an array of shape \(3,\) for 1 texts"),
    (np.array([[1.0, np.nan, 0.0]], dtype=np.float32), "returned a vector holding NaN or infinity"),
    (np.array([[1.0, np.inf, 0.0]], dtype=np.float32), "returned a vector holding NaN or infinity"),
])
def test_a_bad_answer_is_an_embedder_error_saying_what_came_back(answer: Any, said: str) -> None:
    with pytest.raises(EmbedderError, match="the embedder 'fixed' " + said):
        embed(Fixed(answer=answer), ["one text"])


def test_an_embedder_that_raises_is_an_embedder_error_naming_it() -> None:
    def fail(texts: Sequence[str]) -> Any:
        raise ConnectionError("no route to host")

    with pytest.raises(EmbedderError, match="the embedder 'fixed' failed: ConnectionError: no route to host"):
        embed(Fixed(answer=fail), ["x"])


# -- the local embedder -------------------------------------------------------------------------------
needs_local = pytest.mark.skipif(
    importlib.util.find_spec("wordllama") is None, reason="the `semantic` extra (wordllama) is not installed")


@needs_local
def test_the_local_embedder_loads_and_embeds_with_the_network_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("the network is unreachable in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(local, "_loaded", None)  # loaded afresh, here, without a network
    embedder = check_embedder("local")
    assert (embedder.name, embedder.dimension) == (f"wordllama/l2_supercat/256@sha256:{local.SHIPPED_SHA256}", 256)
    vectors = embed(embedder, ["the user hates flying", "air travel preferences", "the user loves pizza", ""])
    assert vectors.shape == (4, 256)
    assert np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0)
    assert not vectors[3].any()  # no tokens: the zero vector, which is no nearer to anything than another
    # a paraphrase sharing no word with the query is nearer than a text about something else
    assert vectors[0] @ vectors[1] > vectors[2] @ vectors[1] + 0.1


@needs_local
def test_the_local_vectors_are_wordllamas_own() -> None:
    from tokenizers import Tokenizer
    from wordllama.inference import WordLlamaInference

    folder = local.model_folder()
    ours = local.local_embedder()
    theirs = WordLlamaInference(ours._table, Tokenizer.from_file(f"{folder}/{'/'.join(local.TOKENIZER)}"))
    texts = ["Remember that the deploy key rotates monthly.", "café au lait ☕ and ünïcödé", "a"]
    assert np.allclose(ours.embed(texts), theirs.embed(texts), atol=1e-6)


@needs_local
def test_a_long_text_is_embedded_a_bounded_number_of_tokens_at_a_time() -> None:
    embedder = local.local_embedder()
    one = embedder.embed(["the quick brown fox jumps over the lazy dog"])[0]
    many = embedder.embed(["the quick brown fox jumps over the lazy dog " * 5000])[0]
    assert np.allclose(one / np.linalg.norm(one), many / np.linalg.norm(many), atol=1e-3)


def test_without_the_extra_the_local_embedder_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(local, "_loaded", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wordllama" else real(name, *a))
    with pytest.raises(InvalidInput, match=r"needs the `semantic` extra \(wordllama missing\): "
                                           r"pip install -e '\.\[semantic\]'"):
        check_embedder("local")


def test_the_protocol_is_importable_as_documented() -> None:
    assert isinstance(Fixed(), embedding.Embedder)
