"""--embedder on `mnemo recall`, `mnemo reindex` and `mnemo mcp`: `local` or `module:attribute` (an embedder,
or a class or factory making one), a test module's embedder used end to end, and every bad name a usage
error (exit 2) saying what is wrong, with the database unchanged. File backend."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("numpy")

from helpers.cli import run
from helpers.embedders import Concepts  # noqa: E402

from mnemo import MnemoClient  # noqa: E402

FACTORY = "helpers.embedders:Concepts"


@pytest.fixture
def cli_db(db_path: Path) -> tuple[str, str]:
    with MnemoClient(db_path, "owner", durability="none") as owner:
        flying = owner.remember("The user hates flying and takes the train.").id
        owner.remember("Deploys go out on Tuesdays.")
        owner.remember("Pizza for dinner on Fridays.")
    return str(db_path), flying


def test_recall_and_reindex_take_a_module_attribute(
    cli_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, flying = cli_db
    code, out, err = run(capsys, "recall", path, "air travel", "--mode", "semantic", "--embedder", FACTORY,
                         "--limit", "1", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["id"] == flying
    with MnemoClient(path, "owner", embedder=Concepts()) as client:  # the vectors are the test embedder's
        counting = client.embedder
        assert [r.record.id for r in client.recall("air travel", mode="semantic", limit=1)] == [flying]
        assert isinstance(counting, Concepts) and counting.embedded == 1  # the query alone: the rest were kept
    code, out, err = run(capsys, "reindex", path, "--embedder", FACTORY)
    assert (code, out) == (0, f"made 3 vectors of {path} with the embedder 'test/concepts'\n")


def test_an_object_attribute_is_taken_as_it_is(cli_db: tuple[str, str], capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path, flying = cli_db
    import helpers.embedders as module

    made = Concepts()
    monkeypatch.setattr(module, "MADE", made, raising=False)
    code, out, _err = run(capsys, "recall", path, "air travel", "--mode", "hybrid", "--embedder",
                          "helpers.embedders:MADE", "--limit", "1", "--json")
    assert code == 0 and json.loads(out)["id"] == flying
    assert made.embedded == 3 + 1  # the three records and the query, by that very object


@pytest.mark.parametrize(("spec", "said"), [
    ("concepts", "an embedder is 'local' or 'module:attribute' (an embedder, or a factory of one), got 'concepts'"),
    ("helpers.embedders:", "an embedder is 'local' or 'module:attribute'"),
    ("no_such_module_here:X", "cannot import the embedder's module 'no_such_module_here': ModuleNotFoundError"),
    ("helpers.embedders:Nothing", "the module 'helpers.embedders' has no attribute 'Nothing'"),
    ("helpers.embedders:CONCEPTS", "an embedder's name must be a printable string"),
    ("helpers.embedders:Answering", "the embedder factory 'helpers.embedders:Answering' failed: TypeError"),
])
def test_a_bad_embedder_is_a_usage_error_and_changes_nothing(
    cli_db: tuple[str, str], capsys: pytest.CaptureFixture[str], spec: str, said: str
) -> None:
    path, _ = cli_db
    before = Path(path).read_bytes()
    for argv in (("recall", path, "air", "--mode", "semantic", "--embedder", spec),
                 ("reindex", path, "--embedder", spec),
                 ("mcp", "--db", path, "--embedder", spec)):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, "")
        assert "Invalid value for '--embedder'" in err and said in err
    assert Path(path).read_bytes() == before


def test_mcp_serves_with_a_module_attribute_embedder(db_path: Path) -> None:
    pytest.importorskip("mcp")
    from helpers.mcp_procs import run_async, stdio_session, text_of

    from mnemo.tools.server import MnemoMemoryToolServer

    path = str(db_path)
    with MnemoClient(path, "owner", durability="none") as client:
        server = MnemoMemoryToolServer(client)
        for file, text in {"/memories/profile.md": "- hates flying\n", "/memories/food.md": "- pizza\n"}.items():
            assert not server.execute({"command": "create", "path": file, "file_text": text}).is_error
    tests = str(Path(__file__).resolve().parents[1])
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}

    async def body() -> str:
        async with stdio_session("--db", path, "--agent", "owner", "--embedder", FACTORY, env=env) as session:
            return text_of(await session.call_tool("memory_search", {"query": "air travel", "mode": "semantic",
                                                                      "limit": 1}))

    found = run_async(body)
    assert found.splitlines()[1] == "/memories/profile.md"  # found by meaning: no word is shared


@pytest.mark.skipif(importlib.util.find_spec("wordllama") is None, reason="the `semantic` extra is not installed")
def test_local_is_the_default_of_recall_and_reindex(
    cli_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, flying = cli_db
    code, out, _err = run(capsys, "recall", path, "air travel preferences", "--mode", "semantic", "--limit", "1")
    assert code == 0 and out.split()[1] == flying
    code, out, _err = run(capsys, "recall", path, "air travel preferences", "--mode", "semantic", "--limit", "1",
                          "--embedder", "local")
    assert code == 0 and out.split()[1] == flying
    assert run(capsys, "reindex", path)[1] == f"made 3 vectors of {path} with the local model\n"
