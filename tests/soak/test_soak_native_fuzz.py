"""The long fuzzing runs of the C extensions (see tests/storage/file/test_scan_fuzz.py,
tests/storage/file/test_readpath.py, tests/chain/test_writepath.py, tests/storage/postgres/test_served_rows.py
and tests/recall/test_analysis_native.py): for the scan core, the read path, the write path, the checks of
PostgreSQL's rows and recall's term count and index, 5 minutes each
coverage-guided over the twin, then 5 minutes through the AddressSanitizer + UBSan build.
MNEMO_FUZZ_SECONDS sets each."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.native_fuzz import fuzz

pytestmark = [pytest.mark.soak, pytest.mark.timeout(0)]  # runs as long as it was asked to


@pytest.mark.parametrize("target", ["scan", "analysis", "postings", "vocabulary", "readpath", "writepath", "pgread"])
def test_soak_native_fuzz(tmp_path: Path, record_figure: Callable[[str], None], target: str) -> None:
    seconds = int(os.environ.get("MNEMO_FUZZ_SECONDS", "300"))
    guided, sanitized = fuzz(tmp_path, seconds, seconds, target)
    record_figure(f"{target} fuzz, guided over the twin: {guided.runs:,} inputs in {guided.seconds} s, "
                  f"corpus {guided.corpus}")
    record_figure(f"{target} fuzz, ASan + UBSan build: {sanitized.runs:,} inputs in {sanitized.seconds} s")
    assert guided.runs > 0 and sanitized.runs > 0
