"""The example budget of the longest model tests (hypothesis state machines, a fresh database an
example): the default run tries half of each, to keep within its time; with MNEMO_FULL_BUDGET=1, which
.ci/run sets in steps of its own, each tries all of its examples."""

from __future__ import annotations

import os

FULL_BUDGET = "MNEMO_FULL_BUDGET"


def examples(full: int) -> int:
    """`full` with MNEMO_FULL_BUDGET=1, else half of it (at least one)."""
    return full if os.environ.get(FULL_BUDGET) == "1" else max(1, full // 2)
