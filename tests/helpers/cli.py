"""Running `mnemo` in the test's own process: main() with the arguments, and what it printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemo.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    """`mnemo ARGV...` through main(): its exit code, and its stdout and stderr as captured by capsys."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err
