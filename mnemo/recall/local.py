"""The default embedder, `embedder="local"`: WordLlama's l2_supercat model at 256 dimensions, read from
the files the `wordllama` package ships in its wheel (its token embeddings, 32,000 x 256 in float16, and
its tokenizer). Nothing is downloaded, ever: no network, no key, no cache folder.

The vectors are WordLlama's own: a text's tokens (no special tokens added) looked up and averaged. They are
computed here with numpy rather than through `wordllama.WordLlama.load`, for three reasons: its 0.4.0
loader looks for the bundled tokenizer in a `tokenizer/` folder while the wheel has it in `tokenizers/`,
and so downloads it from the Hugging Face hub; its inference module configures the root logger when
imported; and it pads every batch to its longest text, so that one long memory in a batch of 64 would
take 64 times its own size in memory. Here each text is summed on its own, a bounded number of tokens
at a time. The choice of model, and the alternatives weighed, are in docs/RECALL.md §6.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._install import install_hint
from ..errors import InvalidInput
from ._numpy import np

if TYPE_CHECKING:
    from numpy.typing import NDArray

INSTALL_HINT = install_hint("semantic")
PACKAGE = "wordllama"
WEIGHTS = ("weights", "l2_supercat_256.safetensors")
TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
MODEL = "wordllama/l2_supercat/256"
DIMENSION = 256
SHIPPED_SHA256 = "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5"
"""The SHA-256 of the weights file wordllama 0.4.0.post1 ships: the only weights a database recorded under
the bare name MODEL (before names carried the weights' hash) can have been made with (docs/RECALL.md §6)."""
LEGACY_NAME = MODEL
_CHUNK = 8192  # tokens summed at once: 8192 x 256 float16 is 4 MB, whatever the text's length


def identity(weights_sha256: str) -> str:
    """The name the local embedder records: the model and the SHA-256 of the weights it loaded, so that
    other weights under the same model name are never taken for these."""
    return f"{MODEL}@sha256:{weights_sha256}"


NAME = identity(SHIPPED_SHA256)
"""The local embedder's name when the weights installed are the ones wordllama 0.4.0.post1 ships."""


class LocalEmbedder:
    """WordLlama l2_supercat (256 dimensions), loaded from the files its package ships. Thread-safe.
    Its name is identity() of the weights' bytes, hashed as they are loaded."""

    dimension = DIMENSION

    def __init__(self, folder: str) -> None:
        from safetensors.numpy import load  # noqa: PLC0415 - the optional `semantic` extra
        from tokenizers import Tokenizer  # noqa: PLC0415 - the optional `semantic` extra

        with open(os.path.join(folder, *WEIGHTS), "rb") as file:
            data = file.read()
        self.weights_sha256 = hashlib.sha256(data).hexdigest()
        self.name = identity(self.weights_sha256)
        table = load(data).get("embedding.weight")
        if table is None:
            raise InvalidInput(f"{os.path.join(folder, *WEIGHTS)} holds no embedding.weight tensor: "
                               f"reinstall {PACKAGE} ({INSTALL_HINT})")
        if table.ndim != 2 or table.shape[1] != DIMENSION:
            raise InvalidInput(f"{os.path.join(folder, *WEIGHTS)} holds a table of shape {table.shape}, "
                               f"expected (vocabulary, {DIMENSION}): reinstall {PACKAGE} ({INSTALL_HINT})")
        self._table: NDArray[Any] = table  # kept in float16 (16 MB); sums are taken in float32
        tokenizer = Tokenizer.from_file(os.path.join(folder, *TOKENIZER))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tokenizer = tokenizer
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Each text's mean token vector (zero for a text of no tokens), in float32."""
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        table, last = self._table, len(self._table) - 1
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for i, encoding in enumerate(encodings):
            ids = np.asarray(encoding.ids, dtype=np.int64)
            if not len(ids):
                continue
            np.clip(ids, 0, last, out=ids)
            row = out[i]
            for start in range(0, len(ids), _CHUNK):
                row += table[ids[start:start + _CHUNK]].sum(axis=0, dtype=np.float32)
            row /= np.float32(len(ids))
        return out


_loaded: LocalEmbedder | None = None
_loading = threading.Lock()


def local_embedder() -> LocalEmbedder:
    """The local embedder, loaded once per process (its table is immutable, so clients share it).
    InvalidInput saying what to install when the `semantic` extra is not."""
    global _loaded
    with _loading:
        if _loaded is None:
            _loaded = LocalEmbedder(model_folder())
        return _loaded


def model_folder() -> str:
    """Where the wordllama package's files are, found without importing it (its import configures
    logging and loads modules the embedder does not use); InvalidInput saying what to install when the
    `semantic` extra is not (or lacks the files)."""
    needed = ("numpy", "safetensors", "tokenizers", PACKAGE)
    missing = ", ".join(name for name in needed if importlib.util.find_spec(name) is None)
    if missing:
        raise InvalidInput(f"embedder='local' needs the `semantic` extra ({missing} missing): {INSTALL_HINT}")
    spec = importlib.util.find_spec(PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        if os.path.isfile(os.path.join(folder, *WEIGHTS)) and os.path.isfile(os.path.join(folder, *TOKENIZER)):
            return str(folder)
    raise InvalidInput(
        f"the {PACKAGE} package installed lacks {'/'.join(WEIGHTS)} or {'/'.join(TOKENIZER)}: "
        f"reinstall it ({INSTALL_HINT})")


def recorded_as(recorded: str, embedder_name: str) -> bool:
    """Whether vectors recorded under the name `recorded` are those of the embedder named `embedder_name`:
    the same name; or the bare model name databases recorded before names carried the weights' hash,
    for the local embedder with the weights shipped then (and no other weights: those it cannot know)."""
    return recorded == embedder_name or (recorded == LEGACY_NAME and embedder_name == NAME)


__all__ = [
    "DIMENSION", "INSTALL_HINT", "LEGACY_NAME", "MODEL", "NAME", "SHIPPED_SHA256", "LocalEmbedder", "identity",
    "local_embedder", "recorded_as",
]
