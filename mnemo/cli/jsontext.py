"""The JSON `mnemo` prints (--json documents, NDJSON streams, error objects): UTF-8 text whatever the
strings hold. A name the operating system gave that is not UTF-8 (a file name of bytes such as 0xff)
reaches Python as lone surrogates (U+DC80..U+DCFF); written as they are, they would come out as those
bytes, and a strict reader (jq) would refuse the whole document. Each is written as its JSON escape
(`\\udcff`), which JSON allows and which Python's json.loads reads back to the same string."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["dumps"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(obj: Any, indent: int | None = None) -> str:
    """`obj` as JSON text (non-ASCII kept as it is, other objects as their str), lone surrogates escaped."""
    text = json.dumps(obj, indent=indent, ensure_ascii=False, default=str)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
