"""`mnemo recall --mode` and `mnemo reindex`: a paraphrase found by meaning with the local model, the
vectors kept for the next run, NDJSON with what each ranking gave, a database whose vectors another
embedder made refused with a pointer to `mnemo reindex`, and reindex making them again. File backend."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from helpers.cli import run
from helpers.embedders import Concepts

from mnemo import MnemoClient

pytestmark = pytest.mark.skipif(importlib.util.find_spec("wordllama") is None,
                                reason="the `semantic` extra is not installed")


@pytest.fixture
def cli_db(db_path: Path) -> tuple[str, str]:
    with MnemoClient(db_path, "owner", durability="none") as owner:
        flying = owner.remember("The user hates flying and takes the train.").id
        owner.remember("Deploys go out on Tuesdays.")
        owner.remember("The build cache lives in /var/cache/build.")
    return str(db_path), flying


def test_a_paraphrase_is_found_by_meaning(cli_db: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    path, flying = cli_db
    code, out, err = run(capsys, "recall", path, "air travel preferences")
    assert (code, out) == (0, "") and "matches 'air travel preferences'" in err  # lexical, the default
    code, out, err = run(capsys, "recall", path, "air travel preferences", "--mode", "semantic", "--limit", "1")
    assert (code, err) == (0, "")
    head, line = out.splitlines()
    assert head.split()[1:3] == [flying, "agent:owner"]
    assert line == "     1\tThe user hates flying and takes the train."  # found by meaning: its first line
    code, out, err = run(capsys, "recall", path, "flying", "--mode", "hybrid", "--json")
    first = json.loads(out.splitlines()[0])
    assert first["id"] == flying
    assert first["lines"] == [{"line": 1, "text": "The user hates flying and takes the train."}]
    assert first["lexical"] > 0 and 0 < first["semantic"] <= 1 and first["score"] == pytest.approx(1.0)
    assert [json.loads(x)["lexical"] for x in out.splitlines()[1:]] == [0.0, 0.0]


def test_the_vectors_made_are_kept_for_the_next_run(
    cli_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = cli_db
    assert run(capsys, "recall", path, "trains", "--mode", "hybrid")[0] == 0
    with MnemoClient(path, "owner", readonly=True) as client:
        vectors = client._store.index.vectors  # type: ignore[attr-defined]
        assert vectors is not None and len(vectors.row_slot) == 3 and not vectors.pending


def test_another_embedders_vectors_are_a_usage_error_until_reindex(
    cli_db: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, flying = cli_db
    with MnemoClient(path, "owner", embedder=Concepts()) as client:
        client.recall("flying", mode="semantic")
    code, out, err = run(capsys, "recall", path, "air travel", "--mode", "semantic")
    assert code == 2 and out == ""
    assert "made by the embedder 'test/concepts' (dimension 32)" in err and "mnemo reindex DB" in err
    assert run(capsys, "recall", path, "flying")[0] == 0  # lexical needs no embedder
    code, out, err = run(capsys, "reindex", path)
    assert (code, out) == (0, f"made 3 vectors of {path} with the local model\n")
    code, out, err = run(capsys, "recall", path, "air travel preferences", "--mode", "semantic", "--limit", "1")
    assert code == 0 and out.split()[1] == flying


def test_reindex_needs_admin(cli_db: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = cli_db
    code, out, err = run(capsys, "reindex", path, "--agent", "someone")
    assert code != 0 and "needs admin on *" in err
