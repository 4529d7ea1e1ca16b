"""`mnemo recall DB QUERY`: MnemoClient.recall on the command line, as text and as NDJSON, through the
ACL; no match, a bad query and bad options, with their exit codes and messages. On the file backend,
whose storage serves recall."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.cli import run

from mnemo import MnemoClient
from mnemo.tools import MnemoMemoryToolServer


@pytest.fixture
def cli_db(db_path: Path) -> tuple[str, dict[str, str]]:
    path = str(db_path)
    ids: dict[str, str] = {}
    with MnemoClient(path, "owner", durability="none") as owner:
        ids["deploy"] = owner.remember("Deploys go out on Tuesdays.\nNever deploy on a Friday.", tags=["ops"]).id
        ids["train"] = owner.remember("The user travels by night train.", tags=["prefs"], metadata={"k": 1}).id
        server = MnemoMemoryToolServer(owner)
        server.execute({"command": "create", "path": "/memories/trips/lisbon.md",
                        "file_text": "# Lisbon\n- night train via Madrid\n"})
        ids["file"] = owner.list_records(tags=["memorytool"])[0].id
        team = MnemoMemoryToolServer(owner, scope="team:x")
        team.execute({"command": "create", "path": "/memories/plan.md", "file_text": "deploy the trains"})
        ids["team"] = owner.list_records(tags=["memorytool"], scope="team:x")[0].id
        owner.remember(b"train bytes are not searched", tags=["bin"])
    with MnemoClient(path, "agent-2", durability="none") as other:
        ids["other"] = other.remember("agent two takes the train too").id
    return path, ids


def test_text_output_is_the_library_call_rendered(cli_db: tuple[str, dict[str, str]],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, err = run(capsys, "recall", path, "night train*")  # as the owner, who reads every scope
    assert (code, err) == (0, "")
    with MnemoClient(path, "owner", readonly=True) as owner:
        hits = owner.recall("night train*")
    assert {h.record.id for h in hits} == {ids["train"], ids["file"], ids["team"], ids["other"]}
    expected = []
    for hit in hits:
        path_tag = next((t[5:] for t in hit.record.tags if t.startswith("path:")), None)
        expected.append(f"{hit.score:.3f}  {hit.record.id}  {hit.record.scope}" + (f"  {path_tag}" if path_tag else ""))
        expected.extend(f"{n:>6}\t{text}" for n, text in hit.lines)
    assert out == "\n".join(expected) + "\n"
    # one result, exactly
    code, out, err = run(capsys, "recall", path, "madrid")
    score = out.split()[0]
    assert (code, err) == (0, "")
    assert out == f"{score}  {ids['file']}  agent:owner  /memories/trips/lisbon.md\n     2\t- night train via Madrid\n"
    assert len(score.split(".")[1]) == 3


def test_scope_tag_limit_and_agent(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db

    def found(*args: str) -> list[str]:
        code, out, err = run(capsys, "recall", path, *args, "--json")
        assert (code, err) == (0, "")
        return [json.loads(line)["id"] for line in out.splitlines()]

    assert set(found("train*")) == {ids["train"], ids["file"], ids["team"], ids["other"]}
    assert found("train*", "--scope", "team:*") == [ids["team"]]
    assert found("train*", "--tag", "prefs") == [ids["train"]]
    assert found("train* deploy*", "--tag", "memorytool", "--tag", "path:/memories/plan.md") == [ids["team"]]
    assert len(found("train*", "--limit", "2")) == 2
    # as another agent, through the ACL: only what it may read
    assert found("train* deploy*", "--agent", "agent-2") == [ids["other"]]
    assert found("train*", "--agent", "agent-2", "--scope", "team:x") == []


def test_json_is_one_object_per_result(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, err = run(capsys, "recall", path, "madrid", "--json")
    assert (code, err) == (0, "")
    (doc,) = [json.loads(line) for line in out.splitlines()]
    with MnemoClient(path, "owner", readonly=True) as owner:
        (hit,) = owner.recall("madrid")
        record = owner.get(ids["file"])
    assert list(doc) == ["score", "lexical", "semantic", "path", "lines", "id", "version", "content", "tags",
                         "metadata", "scope", "agent_id", "created_at", "updated_at", "seq", "hash"]
    assert doc["score"] == doc["lexical"] == hit.score and doc["semantic"] is None  # lexical, the default
    assert doc["path"] == "/memories/trips/lisbon.md"
    assert doc["lines"] == [{"line": 2, "text": "- night train via Madrid"}]
    assert (doc["id"], doc["version"], doc["content"], doc["scope"], doc["seq"], doc["hash"]) == (
        record.id, record.version, record.content, record.scope, record.seq, record.hash
    )
    assert doc["tags"] == ["memorytool", "path:/memories/trips/lisbon.md"]
    code, out, _ = run(capsys, "recall", path, "tuesdays", "--json")
    (plain,) = [json.loads(line) for line in out.splitlines()]
    assert (plain["path"], plain["metadata"], plain["lines"]) == (None, {}, [{"line": 1, "text":
                                                                             "Deploys go out on Tuesdays."}])


def test_no_match_is_said_on_stderr_with_exit_0(cli_db: tuple[str, dict[str, str]],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path, _ids = cli_db
    assert run(capsys, "recall", path, "zebra") == (
        0, "", f"mnemo recall: no record that owner may read in {path} matches 'zebra'\n"
    )
    assert run(capsys, "recall", path, "zebra", "--json") == (0, "", "")
    # a binary record is not searched, whatever its bytes say
    assert run(capsys, "recall", path, "bytes", "--agent", "agent-2")[2] == (
        f"mnemo recall: no record that agent-2 may read in {path} matches 'bytes'\n"
    )


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ('"night', "the query has an unclosed quote in '\"night': close the phrase with \" or remove the quote"),
        ("-train", "the query has only excluded words (-word): add at least one word to search for"),
        ("", "the query is empty: give one or more words to search for"),
        ("t*", "the prefix 't*' is too short: give at least 2 characters before the *"),
    ],
)
def test_a_bad_query_is_a_usage_error_saying_why(cli_db: tuple[str, dict[str, str]], query: str, reason: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path, _ids = cli_db
    before = Path(path).read_bytes()
    assert run(capsys, "recall", path, "--", query) == (2, "", f"mnemo: error: {reason}\n")
    code, out, err = run(capsys, "recall", path, "--json", "--", query)
    assert (code, out) == (2, "")
    assert json.loads(err) == {"error": {"message": reason, "type": "InvalidInput", "exit_code": 2}}
    assert Path(path).read_bytes() == before


def test_bad_options_and_files(cli_db: tuple[str, dict[str, str]], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    path, _ids = cli_db
    code, out, err = run(capsys, "recall", path, "train", "--limit", "0")
    assert (code, out) == (2, "") and "Invalid value for '--limit': 0 is not in the range 1<=x<=1000." in err
    code, _, err = run(capsys, "recall", path, "train", "--limit", "1001")
    assert code == 2 and "1001 is not in the range 1<=x<=1000" in err
    code, _, err = run(capsys, "recall", path)
    assert code == 2 and "Missing argument 'QUERY'" in err
    missing = tmp_path / "nope.db"
    assert run(capsys, "recall", str(missing), "train") == (
        2, "", f"mnemo: error: cannot open {missing}: No such file or directory\n"
    )
    not_db = tmp_path / "text.txt"
    not_db.write_text("hello")
    assert run(capsys, "recall", str(not_db), "train") == (
        2, "", f"mnemo: error: cannot open {not_db}: not a Mnemo database (it does not start with a Mnemo file "
               "header)\n"
    )
    code, _, err = run(capsys, "recall", path, "train", "--scope", "bad*scope*")
    assert code == 2 and err.startswith("mnemo: error: ")
    code, _, err = run(capsys, "recall", path, "train", "--agent", "")
    assert code == 2 and err.startswith("mnemo: error: --agent: ")


def test_a_query_that_begins_with_a_dash_goes_after_double_dash(cli_db: tuple[str, dict[str, str]],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, err = run(capsys, "recall", path, "--json", "--", "-friday deploy*")
    assert (code, err) == (0, "")
    assert [json.loads(line)["id"] for line in out.splitlines()] == [ids["team"]]
