"""The one wording of an install hint for an optional extra. The distribution `mnemo-chain` is not
published yet, so a hint says how to install the extra from a checkout, and names the published form
for when it is."""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """`pip install -e '.[EXTRA]'` in a checkout, and the published name for later."""
    return f"pip install -e '.[{extra}]' in a checkout of Mnemo (mnemo-chain[{extra}] once it is published)"


__all__ = ["install_hint"]
