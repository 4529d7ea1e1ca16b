"""The optional C extension (mnemo/_speedups.c): loaded once, unless MNEMO_PURE_PYTHON is set to
anything but "" or "0", in which case (as without a compiler at install time) every caller runs its
pure-Python twin."""

from __future__ import annotations

import importlib
import os
from typing import Any


def _load() -> Any:
    if os.environ.get("MNEMO_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("mnemo._speedups")
    except ImportError:
        return None


speedups: Any = _load()


def implementation() -> str:
    """"native" when the C scan core is in use, else "python"."""
    return "native" if speedups is not None else "python"


__all__ = ["implementation", "speedups"]
