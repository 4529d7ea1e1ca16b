"""The corpus of recall's labelled quality set (tests/data/recall_quality/): the first paragraph of the
docstring of each public function and class of some modules of Python's standard library (PSF License
2.0), one record each, named `module.name`. `python -m benchmarks.quality_corpus` writes corpus.jsonl
from the Python that runs it; the file shipped was made with CPython 3.11."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from pathlib import Path

MODULES = (
    "os", "os.path", "shutil", "glob", "fnmatch", "tempfile", "pathlib", "json", "csv", "re", "string", "textwrap",
    "difflib", "random", "math", "statistics", "itertools", "functools", "operator", "collections", "heapq", "bisect",
    "copy", "pickle", "pprint", "datetime", "time", "calendar", "zoneinfo", "urllib.parse", "base64", "binascii",
    "hashlib", "hmac", "secrets", "uuid", "zlib", "gzip", "zipfile", "tarfile", "subprocess", "threading", "queue",
    "socket", "ipaddress", "email.utils", "html", "inspect", "traceback", "logging", "getpass", "platform",
    "locale", "unicodedata", "sys", "gc", "signal", "sched", "contextlib", "dataclasses", "enum", "typing",
    "decimal", "fractions", "struct", "array", "io", "codecs", "mimetypes", "webbrowser", "shlex", "warnings",
)
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "recall_quality" / "corpus.jsonl"


def first_paragraph(doc: str) -> str:
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def records() -> list[dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in sorted(getattr(module, "__all__", None) or dir(module)):
            if attr.startswith("_"):
                continue
            obj = getattr(module, attr, None)
            if not (inspect.isfunction(obj) or inspect.isbuiltin(obj) or inspect.isclass(obj)):
                continue
            doc = inspect.getdoc(obj)
            if not doc:
                continue
            text = first_paragraph(doc)
            if len(text) < 30 or text.startswith(("Initialize self", "Create and return a new object")):
                continue
            key = f"{name}.{attr}"
            if text not in {r["text"] for r in out.values()}:
                out[key] = {"id": key, "text": text}
    return list(out.values())


def main() -> int:
    rows = records()
    with OUT.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} records from {len(MODULES)} modules of Python {sys.version.split()[0]} -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
