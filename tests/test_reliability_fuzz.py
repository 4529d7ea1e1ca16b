"""Fuzzing: handle() on arbitrary JSON-like tool_use blocks and paths, and open / verify of arbitrary and
mutated db files (random bytes, truncations, bit flips, spliced and foreign frames, damaged or forged
sidecars). Only tool_result dicts come back, nothing is written outside the db's directory, opening
raises only MnemoError subclasses, verify_db returns a report, and nothing hangs. tests/soak runs the
same with many more inputs."""

from __future__ import annotations

from pathlib import Path

from helpers.reliability_fuzz import fuzz_files, fuzz_handle


def test_fuzz_memory_tool_handle(tmp_path: Path) -> None:
    count = fuzz_handle(tmp_path, examples=250, derandomize=True)
    print(f"\nfuzz handle(): {count.tried} inputs tried, {count.errors} error results, {count.writes} writes")
    assert count.tried >= 250
    assert count.writes > 0 and count.errors > 0


def test_fuzz_open_and_verify_mutated_logs(tmp_path: Path) -> None:
    count = fuzz_files(tmp_path, examples=300, derandomize=True, sidecars=False)
    print(f"\nfuzz db files: {count}")
    assert count.tried >= 300
    assert count.opened_writer > 0 and count.refused


def test_fuzz_open_with_damaged_or_forged_sidecars(tmp_path: Path) -> None:
    count = fuzz_files(tmp_path, examples=150, derandomize=True, sidecars=True)
    print(f"\nfuzz db files with sidecars: {count}")
    assert count.tried >= 150
