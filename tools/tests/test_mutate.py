"""The mutation tool (tools/mutate.py) and its lists: an equivalent mutant keeps its name when lines move
around it and loses it when its own line changes; every mutant listed as equivalent is one the tool finds
in the source as it is now; every target names files and tests that exist. Not part of the product's
suite: `python -m pytest tools/tests` (from the checkout's root, with the `dev` extra)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mutate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutate", ROOT / "tools" / "mutate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutate"] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["mutate"]
    return module


def test_every_equivalent_mutant_is_one_the_tool_finds(mutate: ModuleType) -> None:
    equivalent = mutate.load_equivalent()
    assert mutate.stale_equivalents(equivalent) == []
    assert len(equivalent) > 100


def test_an_equivalent_keeps_its_name_when_lines_move_and_loses_it_when_its_line_changes(
    mutate: ModuleType, tmp_path: Path
) -> None:
    before = "def f(x):\n    return x + 1\n\n\ndef g(y):\n    return y + 1 + 1\n"
    after = 'import os\n\n\ndef f(x):\n    """moved down"""\n    return x + 1\n\n\ndef g(y):\n    return y + 2 + 1\n'
    keys = [m.stable_key("m.py") for m in mutate.find_mutants(before)]
    assert {(k.where, k.code, k.mutation, k.nth) for k in keys} >= {
        ("f", "return x + 1", "const 1 -> 2", 1), ("g", "return y + 1 + 1", "const 1 -> 2", 2),
    }
    chosen = [k for k in keys if k.where == "f" and k.mutation == "const 1 -> 2"] + [
        k for k in keys if k.where == "g" and k.mutation == "const 1 -> 2" and k.nth == 2]
    listed = tmp_path / "equivalent.json"
    listed.write_text("[\n" + ",\n".join(mutate.equivalent_entry(k, "why") for k in chosen) + "\n]\n", encoding="utf-8")
    loaded = mutate.load_equivalent(listed)
    assert list(loaded) == chosen and set(loaded.values()) == {"why"}
    (tmp_path / "m.py").write_text(after, encoding="utf-8")
    assert mutate.stale_equivalents(loaded, tmp_path) == [chosen[1]]  # f's moved down; g's line was edited


def test_a_key_listed_twice_or_without_a_reason_is_refused(mutate: ModuleType, tmp_path: Path) -> None:
    listed = tmp_path / "equivalent.json"
    entry = {"file": "m.py", "in": "f", "code": "return 1", "mutant": "const 1 -> 2", "why": "w"}
    listed.write_text(json.dumps([entry, entry]), encoding="utf-8")
    with pytest.raises(SystemExit, match="twice"):
        mutate.load_equivalent(listed)
    listed.write_text(json.dumps([{**entry, "why": ""}]), encoding="utf-8")
    with pytest.raises(SystemExit, match="no reason"):
        mutate.load_equivalent(listed)


def test_every_target_names_files_and_tests_that_exist(mutate: ModuleType) -> None:
    targets = mutate.load_targets()
    assert "postgres.store" in targets and "acl.names" in targets
    for target in targets.values():
        assert target.files and target.tests, target.name
        for path in [*target.files, *(t.split("::")[0] for t in target.tests)]:
            assert (ROOT / path).is_file(), f"{target.name}: {path}"
    assert mutate.missing_paths(targets) == []
    moved = {"t": mutate.Target("t", ["mnemo/gone.py"], ["tests/test_gone.py::test_x", "tests"], [], None)}
    assert mutate.missing_paths(moved) == ["t: mnemo/gone.py", "t: tests/test_gone.py::test_x"]


def test_a_rerun_moves_its_survivors_to_the_lines_they_have_now(
    mutate: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              check=True, capture_output=True, text=True).stdout.strip()

    (tmp_path / "m.py").write_text("a = 1\nb = 2\nc = 3\n", encoding="utf-8")
    git("init", "-q")
    git("add", "m.py")
    git("commit", "-qm", "one")
    rev = git("rev-parse", "HEAD")
    (tmp_path / "m.py").write_text("x = 0\na = 1\nb = 20\nc = 3\n", encoding="utf-8")
    monkeypatch.setattr(mutate, "ROOT", tmp_path)
    report = tmp_path / "run.txt"
    survivors = "  SURVIVED m.py:1:4 const 1 -> 2\n  SURVIVED m.py:2:4 const 2 -> 3\n  SURVIVED m.py:3:4 const 3 -> 4\n"
    report.write_text(f"# mutation run\ncode: {rev} with uncommitted changes\n{survivors}", encoding="utf-8")
    said: list[str] = []
    assert mutate.survivors_of(report, log=said.append) == {"m.py:2:4 const 1 -> 2", "m.py:4:4 const 3 -> 4"}
    assert said == [f"not rerun: the line of m.py:2:4 const 2 -> 3 changed since {rev[:12]} (judge it again "
                    "with --line)"]
    report.write_text(survivors, encoding="utf-8")  # an older report, without its code line
    assert mutate.survivors_of(report) == {"m.py:1:4 const 1 -> 2", "m.py:2:4 const 2 -> 3", "m.py:3:4 const 3 -> 4"}
    assert len(mutate.survivors_of(report, rev, said.append)) == 2


def test_a_decorators_mutants_span_the_lines_that_run_it(mutate: ModuleType) -> None:
    """A decorator runs with its def or class (whose statement line is the one after it): the lines
    --covered looks up for its mutant start at the decorator, so they are never an empty range."""
    source = "import functools\n\n\n@functools.lru_cache(maxsize=8)\ndef f(x: int = 1) -> int:\n    return x\n"
    spans = {m.key: m.span for m in mutate.find_mutants(source)}
    assert spans["4:29 const 8 -> 7"] == (4, 4)
    assert spans["5:15 const 1 -> 0"] == (5, 5)
    assert spans["6:4 return return value -> None"] == (6, 6)



def test_jobs_judge_each_mutant_in_a_copy_of_their_own_and_report_in_source_order(
    mutate: ModuleType, tmp_path: Path
) -> None:
    """Two mutants at a time: each copy gets its file back after its mutant, so every mutant is judged
    against the source with only its own change, and the report lists the same survivors, in source
    order, as one job does (a weak selection, one test, leaves some alive)."""
    reports = []
    for jobs in ("1", "2"):
        report = tmp_path / f"report-{jobs}.txt"
        mutate.main(["mnemo/acl/names.py", "--tests", "tests/acl/test_names.py::test_the_length_limits_on_both_sides",
                     "--max", "6", "--jobs", jobs, "--quiet", "--report", str(report)])
        lines = report.read_text(encoding="utf-8").splitlines()
        reports.append([line for line in lines if line.startswith(("mutants ", "  SURVIVED"))])
    assert reports[0][1:] == reports[1][1:] and len(reports[0]) > 1  # some survived
    assert reports[0][0].split("; unmutated")[0] == reports[1][0].split("; unmutated")[0]
    lines_of = [int(line.split(":")[1]) for line in reports[1][1:]]
    assert lines_of == sorted(lines_of)
