"""Embedders for tests: a deterministic one that knows a few synonyms (so that a paraphrase sharing no
word with the query is near it), and ones that misbehave."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

# Words of one meaning share a dimension; any other word is hashed into the remaining ones.
CONCEPTS = {
    word: dim for dim, words in enumerate([
        ("flying", "fly", "flights", "flight", "plane", "planes", "air", "airport", "travel", "trips"),
        ("pizza", "food", "dinner", "lunch", "eat", "meal", "pasta"),
        ("dog", "dogs", "puppy", "pet", "pets", "cat", "kitten"),
        ("deploy", "deploys", "release", "ship", "shipping", "rollout"),
    ]) for word in words
}
DIMENSION = 32


class Concepts:
    """Bag of words over CONCEPTS and hashed dimensions; counts how many texts it embedded."""

    name = "test/concepts"
    dimension = DIMENSION

    def __init__(self) -> None:
        self.embedded = 0

    def embed(self, texts: Sequence[str]) -> Any:
        self.embedded += len(texts)
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                dim = CONCEPTS.get(word)
                if dim is None:
                    dim = len(set(CONCEPTS.values())) + hashlib.sha256(word.encode()).digest()[0] % (
                        DIMENSION - len(set(CONCEPTS.values())))
                out[i, dim] += 1.0
        return out


class Answering:
    """An embedder of the Concepts' name and dimension answering `answer` for every call once armed."""

    name = Concepts.name
    dimension = DIMENSION

    def __init__(self, answer: Any) -> None:
        self.answer, self.armed, self.good = answer, False, Concepts()

    def embed(self, texts: Sequence[str]) -> Any:
        if not self.armed:
            return self.good.embed(texts)
        return self.answer(len(texts)) if callable(self.answer) else self.answer
