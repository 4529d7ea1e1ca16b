"""The optional C extension (mnemo/_speedups.c): loaded once, unless MNEMO_PURE_PYTHON is set to
anything but "" or "0", in which case (as without a compiler at install time) every caller runs its
pure-Python twin."""

from __future__ import annotations

import importlib
import os
from typing import Any


def _load() -> tuple[Any, str | None]:
    """The extension module, or None and why the pure-Python twin runs instead."""
    chosen = os.environ.get("MNEMO_PURE_PYTHON", "")
    if chosen not in ("", "0"):
        return None, f"MNEMO_PURE_PYTHON={chosen} is set"
    try:
        return importlib.import_module("mnemo._speedups"), None
    except ImportError as exc:
        return None, (f"the C extension mnemo._speedups is not importable ({exc}); the install builds it where "
                      "a C compiler and the headers of OpenSSL and zlib are found")


speedups: Any
why_pure: str | None
speedups, why_pure = _load()


def implementation() -> str:
    """"native" when the C scan core is in use, else "python"."""
    return "native" if speedups is not None else "python"


__all__ = ["implementation", "speedups", "why_pure"]
