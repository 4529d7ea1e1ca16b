"""A brief fuzzing run of the scan core (a thousand inputs; the long one is in tests/soak): atheris feeds
mutated log frames to the C scan and its pure-Python twin, which must agree and raise nothing, then
the corpus goes through an AddressSanitizer + UBSan build of the extension: no read out of bounds, no
undefined behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.native_fuzz import fuzz


@pytest.mark.slow  # with the sanitized build it needs; .ci/run runs it (-m slow)
def test_the_scan_core_survives_a_brief_fuzzing_run(tmp_path: Path) -> None:
    guided, sanitized = fuzz(tmp_path, 1000, 1000, unit="runs")
    assert guided.runs >= 1000 and sanitized.runs >= 1000
    assert guided.corpus > 4  # it found inputs beyond the seeds
