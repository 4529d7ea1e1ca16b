"""numpy for the modules that work on vectors, imported when one of them first uses it: numpy comes with
the `semantic` extra, and a client without an embedder (most command-line runs) never needs it, so
`import mnemo` does not pay for it."""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any


class _Deferred:
    """Stands for the numpy module: each attribute is looked up in it, imported at the first, and kept
    (the next lookup of it is an attribute's, not an import's)."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(importlib.import_module("numpy"), name)
        setattr(self, name, value)
        return value


def installed() -> bool:
    """Whether numpy can be imported (the `semantic` extra, or any other install of it)."""
    return importlib.util.find_spec("numpy") is not None


if TYPE_CHECKING:
    import numpy as np
else:
    np = _Deferred()

__all__ = ["installed", "np"]
