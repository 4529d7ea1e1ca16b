"""The memory-tool benchmark runs end to end (a smoke run with tiny sizes), and the suite's runner goes on
without the baselines of the `bench` extra, saying which workloads it leaves out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.procs import subprocess_env

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_memory_tool.py"
COMMANDS = ["view_dir", "view_file", "create", "str_replace", "insert", "rename", "delete"]


def test_benchmark_quick_run(tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
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


def test_the_suite_runs_without_the_anthropic_sdk(tmp_path: Path) -> None:
    """benchmarks/README.md's command on an install without the `bench` extra: the workload whose baseline
    is the SDK's filesystem memory tool is left out, saying why, and the others run (one here, for time)."""
    code = ("import sys; sys.modules['anthropic'] = None; from benchmarks.run import main; "
            "sys.exit(main(sys.argv[1:]))")
    why = "it needs anthropic, which is not installed (the `bench` extra: pip install -e '.[bench]')"
    listed = subprocess.run([sys.executable, "-c", code, "--list"], capture_output=True, text=True, timeout=120,
                            cwd=ROOT, env=subprocess_env())
    assert listed.returncode == 0, listed.stderr
    assert f"memory_tool (not available: {why})" in listed.stdout.splitlines()
    assert "mounts" in listed.stdout.splitlines()
    done = subprocess.run([sys.executable, "-c", code, "--quick", "--only", "mounts", "--reps", "1", "--dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    assert f"# memory_tool: skipped, {why}" in done.stderr.splitlines()
    assert done.stdout.rstrip().endswith(f"memory_tool: not run, {why}")
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) > 2 and rows[2].startswith("| mixed commands, 2 mounts + root"), done.stdout  # measured
