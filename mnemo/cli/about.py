"""What `mnemo --version` says: the version, which scan core runs (the C extension or its pure-Python
twin, and why), and which of the optional extras can be imported, each with the install line that
brings it."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import _native
from .._install import install_hint
from .._version import __version__
from ..errors import InvalidInput
from ..recall.local import model_folder

# The extras whose code the `mnemo` command and the library load, each with the module that needs it
# (importing it is the test) and the distribution whose version is shown.
# `semantic`'s files are looked for, its package not imported: wordllama's import configures logging
# (mnemo/recall/local.py), and the embedder reads its files without it.
EXTRAS: tuple[tuple[str, Callable[[], object], str], ...] = (
    ("anthropic-memory-tool", lambda: importlib.import_module("mnemo.tools.anthropic"), "anthropic"),
    ("mcp", lambda: importlib.import_module("mnemo.tools.mcp.app"), "mcp"),
    ("postgres", lambda: importlib.import_module("psycopg"), "psycopg"),
    ("semantic", model_folder, "wordllama"),
    ("ui", lambda: importlib.import_module("mnemo.ui"), "jinja2"),
)


@dataclass(frozen=True)
class Extra:
    name: str
    importable: bool
    distribution: str
    version: str | None
    error: str | None


def _extra(name: str, probe: Callable[[], object], distribution: str) -> Extra:
    try:
        probe()
    except (ImportError, InvalidInput) as exc:
        return Extra(name, False, distribution, None, str(exc).splitlines()[0])
    try:
        version: str | None = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return Extra(name, True, distribution, version, None)


def extras() -> list[Extra]:
    return [_extra(*spec) for spec in EXTRAS]


def version_json() -> dict[str, Any]:
    return {
        "version": __version__,
        "python": sys.version.split()[0],
        "scan_core": {"implementation": _native.implementation(), "why_pure_python": _native.why_pure},
        "extras": {e.name: {"importable": e.importable, "distribution": e.distribution, "version": e.version,
                            "error": e.error} for e in extras()},
    }


def version_lines() -> list[str]:
    if _native.speedups is not None:
        core = "native (the C extension mnemo._speedups)"
    else:
        core = f"pure Python, several times slower: {_native.why_pure}"
    lines = [f"mnemo {__version__} (Python {sys.version.split()[0]})", f"scan core: {core}", "extras:"]
    width = max(len(name) for name, _, _ in EXTRAS)
    for e in extras():
        if e.importable:
            what = f"importable ({e.distribution} {e.version or '?'})"
        else:
            hint = "" if "pip install" in (e.error or "") else f"; {install_hint(e.name)}"
            what = f"not importable: {e.error}{hint}"
        lines.append(f"  {e.name:<{width}}  {what}")
    return lines


__all__ = ["EXTRAS", "Extra", "extras", "version_json", "version_lines"]
