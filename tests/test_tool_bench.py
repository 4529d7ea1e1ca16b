"""The memory-tool benchmark runs end to end (a smoke run with tiny sizes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("anthropic")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_memory_tool.py"
COMMANDS = ["view_dir", "view_file", "create", "str_replace", "insert", "rename", "delete"]


def test_benchmark_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert "mixed workload" in result.stdout
    data = json.loads(out.read_text())
    assert list(data["latency"]) == COMMANDS
    for command in COMMANDS:
        assert set(data["latency"][command]) == {"mnemo", "reference"}
    assert data["mixed"]["mnemo"]["ops_per_s"] > 0
    assert data["big_directory"]["mnemo"]["files"] == 100
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("mnemo-bench-")]
