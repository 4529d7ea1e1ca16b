"""Embedders that call a service: OpenAI's and Voyage AI's embeddings APIs, each a small class of the
embedder protocol (docs/RECALL.md §6.2), with the standard library's urllib and numpy only.

    OPENAI_API_KEY=... python examples/http_embedders.py openai "the user hates flying" "air travel"
    VOYAGE_API_KEY=... python examples/http_embedders.py voyage "the user hates flying" "air travel"

prints each text's vector's first values and the cosine of the first text with each other. In a
program: `MnemoClient(db, agent, embedder=VoyageEmbedder())`, or on the command line
`mnemo recall DB QUERY --mode hybrid --embedder http_embedders:VoyageEmbedder` with this folder on
PYTHONPATH. OPENAI_BASE_URL and VOYAGE_BASE_URL, when set, replace the services' addresses (a proxy, or
the fake servers the tests run: tests/docs/test_http_embedders.py).

What the protocol asks, and how these meet it:
- `name` names the model and the dimension, both of which change the vectors: a database records it,
  and an open with another is refused, so a model change cannot mix two models' vectors;
- `dimension` is asked of the service (`dimensions` for OpenAI, `output_dimension` for Voyage), and
  every vector that comes back is checked to have it;
- `embed(texts)` returns one float32 row per text in the order given (the answers are put back in
  order by their `index`), sending at most `batch` texts and about `max_chars` characters a request;
  an empty text gets the zero vector without being sent (both services refuse an empty input).
Each sends every text it embeds to its service: a record's text when it is embedded, and each query.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np


class HTTPEmbedder:
    """An embeddings endpoint taking {"model", "input": [texts], ...} with a bearer key and answering
    {"data": [{"index", "embedding"}]}: the shape OpenAI's and Voyage AI's share."""

    provider = ""
    default_url = ""
    key_variable = ""
    url_variable = ""

    def __init__(self, model: str, dimension: int, *, api_key: str | None = None, base_url: str | None = None,
                 batch: int = 128, max_chars: int = 200_000, timeout: float = 60.0) -> None:
        self.model, self.dimension = model, dimension
        self.name = f"{self.provider}/{model}/{dimension}"
        self.api_key = api_key if api_key is not None else os.environ.get(self.key_variable, "")
        self.url = (base_url or os.environ.get(self.url_variable) or self.default_url).rstrip("/") + "/embeddings"
        self.batch, self.max_chars, self.timeout = batch, max_chars, timeout

    def body(self, texts: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for positions in self._requests(texts):
            out[positions] = self._post([texts[i] for i in positions])
        return out

    def _requests(self, texts: Sequence[str]) -> list[list[int]]:
        """The positions of the non-empty texts, in requests of at most `batch` texts and `max_chars`."""
        requests: list[list[int]] = []
        current: list[int] = []
        size = 0
        for i, text in enumerate(texts):
            if not text:
                continue
            if current and (len(current) == self.batch or size + len(text) > self.max_chars):
                requests.append(current)
                current, size = [], 0
            current.append(i)
            size += len(text)
        if current:
            requests.append(current)
        return requests

    def _post(self, texts: list[str]) -> np.ndarray:
        if not self.api_key:
            raise RuntimeError(f"{self.key_variable} is not set")
        request = urllib.request.Request(self.url, json.dumps(self.body(texts)).encode(), {
            "Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout) as answer:
            data = json.load(answer)["data"]
        if sorted(item["index"] for item in data) != list(range(len(texts))):
            raise RuntimeError(f"{self.name}: {len(data)} embeddings came back for {len(texts)} texts")
        vectors = np.array([item["embedding"] for item in sorted(data, key=lambda item: item["index"])],
                           dtype=np.float32)
        if vectors.shape != (len(texts), self.dimension):
            raise RuntimeError(f"{self.name}: vectors of shape {vectors.shape} came back, "
                               f"expected ({len(texts)}, {self.dimension})")
        return vectors


class OpenAIEmbedder(HTTPEmbedder):
    """OpenAI's embeddings (POST /v1/embeddings); text-embedding-3 models shorten their vectors to
    `dimension` themselves."""

    provider, default_url = "openai", "https://api.openai.com/v1"
    key_variable, url_variable = "OPENAI_API_KEY", "OPENAI_BASE_URL"

    def __init__(self, model: str = "text-embedding-3-small", dimension: int = 1536, **options: Any) -> None:
        super().__init__(model, dimension, **options)

    def body(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": texts, "dimensions": self.dimension, "encoding_format": "float"}


class VoyageEmbedder(HTTPEmbedder):
    """Voyage AI's embeddings (POST /v1/embeddings), asked for float vectors of `dimension` (voyage-3.5
    makes 256, 512, 1024 or 2048)."""

    provider, default_url = "voyage", "https://api.voyageai.com/v1"
    key_variable, url_variable = "VOYAGE_API_KEY", "VOYAGE_BASE_URL"

    def __init__(self, model: str = "voyage-3.5", dimension: int = 1024, **options: Any) -> None:
        super().__init__(model, dimension, **options)

    def body(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": texts, "output_dimension": self.dimension, "output_dtype": "float"}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("openai", "voyage"):
        print("usage: python examples/http_embedders.py openai|voyage TEXT...", file=sys.stderr)
        return 2
    embedder = OpenAIEmbedder() if argv[0] == "openai" else VoyageEmbedder()
    vectors = embedder.embed(argv[1:])
    print(f"{embedder.name}: {len(vectors)} vectors of {vectors.shape[1]} float32 values")
    units = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    for text, vector, unit in zip(argv[1:], vectors, units, strict=True):
        first = ", ".join(f"{x:.3f}" for x in vector[:3])
        print(f"{text!r}: [{first}, ...] cosine with the first {unit @ units[0]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
