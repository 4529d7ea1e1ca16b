"""The long fuzzing run of the scan core (see tests/storage/file/test_scan_fuzz.py): 5 minutes
coverage-guided over the twin, then 5 minutes through the AddressSanitizer + UBSan build.
MNEMO_FUZZ_SECONDS sets each."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.scan_fuzz import fuzz

pytestmark = [pytest.mark.soak, pytest.mark.timeout(0)]  # runs as long as it was asked to


def test_soak_scan_fuzz(tmp_path: Path, record_figure: Callable[[str], None]) -> None:
    seconds = int(os.environ.get("MNEMO_FUZZ_SECONDS", "300"))
    guided, sanitized = fuzz(tmp_path, seconds, seconds)
    record_figure(f"scan fuzz, guided over the twin: {guided.runs:,} inputs in {guided.seconds} s, "
                  f"corpus {guided.corpus}")
    record_figure(f"scan fuzz, ASan + UBSan build: {sanitized.runs:,} inputs in {sanitized.seconds} s")
    assert guided.runs > 0 and sanitized.runs > 0
