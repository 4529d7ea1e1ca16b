"""What semantic recall asks of an embedder, and the checks on what one answers.

An embedder is any object with a `name` (which model made the vectors: a database records it, and an
open with another is refused), a `dimension`, and `embed(texts)`, which returns one float32 vector of
that dimension per text as a numpy array of shape (len(texts), dimension). Vectors are compared by
cosine: they are scaled to unit length here, so an embedder need not do it. `"local"` names the default
one (mnemo/recall/local.py), whose weights ship in a package on PyPI: nothing is downloaded.

numpy comes with the `semantic` extra; without it nothing here is called (a client without an embedder
recalls lexically only), and a client given an embedder is told what to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import EmbedderError, InvalidInput
from ._numpy import installed, np
from .local import INSTALL_HINT, local_embedder

if TYPE_CHECKING:
    from numpy.typing import NDArray

    Vectors = NDArray[np.float32]
else:
    Vectors = Any

MODES = ("hybrid", "lexical", "semantic")
MAX_DIMENSION = 8192
MAX_NAME = 200
BATCH = 256  # texts per call to embed(): a catch-up of a million rows never asks for them at once


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. `name` names the model (and anything else that changes its vectors):
    vectors of two names are never compared."""

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One float32 vector of `dimension` per text, as an array of shape (len(texts), dimension)."""
        ...


def check_mode(mode: object, embedder: Embedder | None) -> str:
    """`mode` if recall can serve it: "lexical" always, "hybrid" and "semantic" with an embedder."""
    if not isinstance(mode, str) or mode not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    if mode != "lexical" and embedder is None:
        raise InvalidInput(
            f"mode={mode!r} needs an embedder, and this client has none: open it with embedder='local' "
            f"(the model shipped with the `semantic` extra: {INSTALL_HINT}) or any object with a name, a "
            "dimension and embed(texts) (docs/RECALL.md, \"Semantic recall\"); mode='lexical' needs none"
        )
    return mode


def check_embedder(embedder: object) -> Embedder:
    """The embedder a client was given, checked: "local" is the default model (local.py); anything else
    must have a name, a dimension and an embed method. InvalidInput saying what is wrong otherwise."""
    if isinstance(embedder, str):
        if embedder != "local":
            raise InvalidInput(
                f"embedder must be 'local' or an object with name, dimension and embed(texts), got {embedder!r}")
        return local_embedder()
    if not installed():
        raise InvalidInput(f"an embedder needs numpy, which the `semantic` extra installs: {INSTALL_HINT}")
    name = getattr(embedder, "name", None)
    dimension = getattr(embedder, "dimension", None)
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not name.isprintable():
        raise InvalidInput(f"an embedder's name must be a printable string of 1 to {MAX_NAME} characters, got {name!r}")
    if not isinstance(dimension, int) or isinstance(dimension, bool) or not 1 <= dimension <= MAX_DIMENSION:
        raise InvalidInput(f"an embedder's dimension must be an int from 1 to {MAX_DIMENSION}, got {dimension!r}")
    if not callable(getattr(embedder, "embed", None)):
        raise InvalidInput(f"the embedder {name!r} has no embed(texts) method")
    return embedder  # type: ignore[return-value]  # (its members were checked one by one above)


def load_embedder(spec: str) -> Embedder:
    """The embedder a command line names: "local", or "module:attribute" (the attribute may be dotted), an
    object with a name, a dimension and embed(texts), or a callable of no arguments returning one (a class
    or factory). InvalidInput saying what is wrong otherwise (the module's own errors included)."""
    if spec == "local":
        return check_embedder(spec)
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise InvalidInput(
            f"an embedder is 'local' or 'module:attribute' (an embedder, or a factory of one), got {spec!r}")
    try:
        found: object = importlib.import_module(module_name)
    except Exception as exc:
        raise InvalidInput(
            f"cannot import the embedder's module {module_name!r}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise InvalidInput(f"the module {module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    if callable(found) and not callable(getattr(found, "embed", None)) or isinstance(found, type):
        try:
            found = found()  # (a factory)
        except Exception as exc:
            raise InvalidInput(f"the embedder factory {spec!r} failed: {type(exc).__name__}: {exc}") from None
    return check_embedder(found)


def embed(embedder: Embedder, texts: Sequence[str]) -> Vectors:
    """The unit vectors of `texts` (zero for a text whose vector is zero), asked of `embedder` BATCH at a
    time and checked: EmbedderError, saying what came back, if it raised or answered anything but a
    finite float32 array of shape (len(texts), dimension)."""
    out = np.empty((len(texts), embedder.dimension), dtype=np.float32)
    for start in range(0, len(texts), BATCH):
        chunk = list(texts[start:start + BATCH])
        try:
            got = embedder.embed(chunk)
        except Exception as exc:
            raise EmbedderError(f"the embedder {embedder.name!r} failed: {type(exc).__name__}: {exc}") from exc
        out[start:start + len(chunk)] = _checked(embedder, got, len(chunk))
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


def _checked(embedder: Embedder, got: object, n: int) -> Vectors:
    what = f"the embedder {embedder.name!r} returned"
    if not isinstance(got, np.ndarray):
        raise EmbedderError(f"{what} a {type(got).__name__}, not a numpy array of float32")
    if got.dtype != np.float32:
        raise EmbedderError(f"{what} an array of {got.dtype}, not float32")
    if got.shape != (n, embedder.dimension):
        raise EmbedderError(f"{what} an array of shape {got.shape} for {n} texts, expected ({n}, {embedder.dimension})")
    if not np.isfinite(got).all():
        raise EmbedderError(f"{what} a vector holding NaN or infinity")
    return got


EMBEDDINGS = ("check", "recompute")
VERIFY_SAMPLE = 32  # vectors verify embeds again by default, spread over the whole set


def check_embeddings(embeddings: object) -> str:
    """verify's `embeddings`: "check" (every vector's place, length and values, and a sample of
    VERIFY_SAMPLE embedded again) or "recompute" (every vector embedded again)."""
    if not isinstance(embeddings, str) or embeddings not in EMBEDDINGS:
        raise InvalidInput(f"embeddings must be one of {', '.join(map(repr, EMBEDDINGS))}, got {embeddings!r}")
    return embeddings


def sampled(n: int, recompute: bool) -> list[int]:
    """The positions, among n vectors in a fixed order, that verify embeds again: all of them with
    `recompute`, else VERIFY_SAMPLE spread evenly from the first to the last."""
    if recompute or n <= VERIFY_SAMPLE:
        return list(range(n))
    return sorted({round(i * (n - 1) / (VERIFY_SAMPLE - 1)) for i in range(VERIFY_SAMPLE)})


def unit_or_zero(vector: Vectors) -> bool:
    """Whether a kept vector is as embed() leaves one: finite, of unit length, or zero."""
    if not np.isfinite(vector).all():
        return False
    norm = float(np.linalg.norm(vector))
    return norm == 0.0 or abs(norm - 1.0) <= 1e-3


def describe(embedder: Embedder) -> str:
    """How messages name an embedder: its name and dimension."""
    return f"{embedder.name!r} (dimension {embedder.dimension})"


__all__ = [
    "BATCH", "EMBEDDINGS", "MODES", "VERIFY_SAMPLE", "Embedder", "Vectors", "check_embedder", "check_embeddings",
    "check_mode", "describe", "embed", "load_embedder", "sampled", "unit_or_zero",
]
