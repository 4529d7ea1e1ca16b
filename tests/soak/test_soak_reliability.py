"""The long runs of the reliability suite (issue 7), deselected by default:

    python -m pytest -m soak tests/soak

200 crash-matrix rounds, 4 processes x 8 threads for 30 s, and tens of thousands of fuzz inputs.
The figures are printed in a section at the end of the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.reliability_concurrency import run as run_concurrency
from helpers.reliability_crash import crash_matrix
from helpers.reliability_fuzz import fuzz_files, fuzz_handle

pytestmark = [pytest.mark.soak, pytest.mark.timeout(0)]  # runs as long as it was asked to

Record = Callable[[str], None]


def test_soak_crash_matrix(tmp_path: Path, record_figure: Record) -> None:
    start = time.monotonic()
    stats = crash_matrix(tmp_path, 200, seed=2026)
    record_figure(f"{stats.summary()}; {time.monotonic() - start:.0f}s")
    assert stats.rounds == 200


def test_soak_concurrency(tmp_path: Path, record_figure: Record) -> None:
    figures = run_concurrency(tmp_path / "shared.mnemo.db", processes=4, threads=8, seconds=30.0, seed=2026)
    record_figure(figures.summary())
    assert figures.refused == 0


def test_soak_fuzz_handle(tmp_path: Path, record_figure: Record) -> None:
    start = time.monotonic()
    count = fuzz_handle(tmp_path, examples=4000, derandomize=False)
    record_figure(f"fuzz handle(): {count.tried} inputs tried ({count.errors} error results, {count.writes} "
                  f"successful writes), no exception, nothing outside the db; {time.monotonic() - start:.0f}s")


def test_soak_fuzz_db_files(tmp_path: Path, record_figure: Record) -> None:
    start = time.monotonic()
    count = fuzz_files(tmp_path, examples=6000, derandomize=False, sidecars=False)
    record_figure(f"fuzz open/verify of mutated logs: {count}; {time.monotonic() - start:.0f}s")


def test_soak_fuzz_db_sidecars(tmp_path: Path, record_figure: Record) -> None:
    start = time.monotonic()
    count = fuzz_files(tmp_path, examples=3000, derandomize=False, sidecars=True)
    record_figure(f"fuzz open/verify with damaged sidecars: {count}; {time.monotonic() - start:.0f}s")
