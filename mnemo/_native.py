"""The optional C extensions, mnemo/_speedups.c (the scan core, recall's term counts and index),
mnemo/_readpath.c (the file backend's read path), mnemo/_writepath.c (a put's bytes and hashes, and the
frame) and mnemo/_pgread.c (the PostgreSQL backend's checks of the rows a query reads): loaded once, unless
MNEMO_PURE_PYTHON is set to
anything but "" or "0", in which case (as without a compiler at install time) every caller runs its
pure-Python twin."""

from __future__ import annotations

import importlib
import os
from typing import Any


def _load(name: str) -> tuple[Any, str | None]:
    """The extension module `mnemo.<name>`, or None and why the pure-Python twin runs instead."""
    chosen = os.environ.get("MNEMO_PURE_PYTHON", "")
    if chosen not in ("", "0"):
        return None, f"MNEMO_PURE_PYTHON={chosen} is set"
    try:
        return importlib.import_module(f"mnemo.{name}"), None
    except ImportError as exc:
        return None, (f"the C extension mnemo.{name} is not importable ({exc}); the install builds it where "
                      "a C compiler and the headers of OpenSSL and zlib are found")


speedups: Any
why_pure: str | None
speedups, why_pure = _load("_speedups")
readpath: Any  # read_served and find_sorted (mnemo/_readpath.c), or None
readpath, _ = _load("_readpath")
writepath: Any  # pack, seal_put, seal_checked, entry, frame, leaf_hashes (mnemo/_writepath.c), or None
writepath, _ = _load("_writepath")
pgread: Any  # served_rows (mnemo/_pgread.c), or None
pgread, _ = _load("_pgread")


def implementation() -> str:
    """"native" when the C scan core is in use, else "python"."""
    return "native" if speedups is not None else "python"


__all__ = ["implementation", "pgread", "readpath", "speedups", "why_pure", "writepath"]
