"""The soak runs print their figures at the end of the session, whether or not output is captured."""

from __future__ import annotations

from collections.abc import Callable

import pytest

FIGURES: list[str] = []


@pytest.fixture
def record_figure() -> Callable[[str], None]:
    def record(line: str) -> None:
        print(line)
        FIGURES.append(line)

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("reliability soak figures")
        for line in FIGURES:
            terminalreporter.write_line(line)
