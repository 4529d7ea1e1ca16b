"""`mnemo ls`, `cat`, `history`, `log`, `stats`, `compact`: thin shells over MnemoClient and the log; the
record commands' default database (`mnemo mcp`'s) and what an empty listing says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import is_pg
from helpers.cli import run

from mnemo import MnemoClient
from mnemo.cli import main
from mnemo.storage.contract import shown_name
from mnemo.tools.mcp.defaults import DEFAULT_AGENT, default_db_path, ensure_parent
from mnemo.tools.server import MnemoMemoryToolServer


def ndjson(out: str) -> list[dict[str, Any]]:
    """A stream's lines: one JSON object each."""
    docs = [json.loads(line) for line in out.splitlines()]
    assert all(isinstance(d, dict) for d in docs)
    return docs


@pytest.fixture
def cli_db(db: str) -> tuple[str, dict[str, str]]:
    path = db
    ids: dict[str, str] = {}
    with MnemoClient(path, "owner", durability="none") as owner:
        ids["note"] = owner.remember("first note", tags=["note", "x"], metadata={"k": 1}).id
        owner.update(ids["note"], content="first note, edited")
        ids["bin"] = owner.remember(b"\x00\x01\x02", tags=["bin"]).id
        ids["gone"] = owner.remember("to be forgotten", tags=["note"]).id
        owner.forget([ids["gone"]])
    with MnemoClient(path, "agent-2", durability="none") as other:
        ids["other"] = other.remember("agent two's own", tags=["note"]).id
    return path, ids


def test_ls(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, err = run(capsys, "ls", str(path))  # as the owner, who may read every scope
    assert code == 0 and err == ""
    listed = [line.split()[0] for line in out.splitlines()]
    assert sorted(listed) == sorted([ids["note"], ids["bin"], ids["other"]])
    code, out, _err = run(capsys, "ls", str(path), "--agent", "agent-2", "--json")
    doc = ndjson(out)
    assert code == 0 and [r["id"] for r in doc] == [ids["other"]]
    assert set(doc[0]) == {"id", "version", "scope", "tags", "size", "agent_id", "created_at", "updated_at",
                           "seq"}
    code, out, _err = run(capsys, "ls", str(path), "--tag", "note", "--json")
    assert sorted(r["id"] for r in ndjson(out)) == sorted([ids["note"], ids["other"]])


def test_cat(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, _err = run(capsys, "cat", str(path), ids["note"])
    assert (code, out) == (0, "first note, edited\n")
    code, out, _err = run(capsys, "cat", str(path), ids["note"], "--version", "1")
    assert (code, out) == (0, "first note\n")
    code, out, _err = run(capsys, "cat", str(path), ids["note"], "--json")
    doc = json.loads(out)
    assert doc["content"] == "first note, edited" and doc["version"] == 2 and doc["metadata"] == {"k": 1}
    assert doc["tags"] == ["note", "x"] and len(doc["hash"]) == 64
    code, out, _err = run(capsys, "cat", str(path), ids["bin"], "--json")
    assert json.loads(out)["content_b64"] == "AAEC"


@pytest.mark.parametrize(("arg", "meant"), [
    ("user.md", "/memories/user.md"), ("memories/notes/a.md", "/memories/notes/a.md"), ("01A2", "/memories/01A2")])
@pytest.mark.parametrize("command", ["cat", "history"])
def test_an_argument_neither_id_nor_path_says_what_names_a_record(
    cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str], command: str, arg: str, meant: str,
) -> None:
    path, _ids = cli_db
    assert run(capsys, command, str(path), arg) == (
        1, "", f"mnemo: no record {arg!r}: a record is named by its ID (32 hex digits, as `mnemo ls` shows) or by a "
               f"memory-tool path, which starts with /memories (such as {meant})\n")


def test_cat_binary_raw(cli_db: tuple[str, dict[str, str]], capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    path, ids = cli_db
    assert main(["cat", str(path), ids["bin"]]) == 0
    assert capfdbinary.readouterr().out == b"\x00\x01\x02"


def test_refusals_exit_1(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, err = run(capsys, "cat", str(path), ids["gone"])
    assert code == 1 and out == "" and ids["gone"] in err
    code, _out, err = run(capsys, "cat", str(path), ids["note"], "--agent", "agent-2")
    assert code == 1 and "may read" in err
    code, _out, err = run(capsys, "cat", str(path), ids["note"], "--version", "9")
    assert code == 1 and "no version 9" in err
    code, _out, err = run(capsys, "history", str(path), "nope")
    assert code == 1


def test_history(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, _err = run(capsys, "history", str(path), ids["note"])
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2
    assert lines[0].startswith("v1") and "first note" in lines[0] and lines[1].startswith("v2")
    code, out, _err = run(capsys, "history", str(path), ids["note"], "--json")
    assert [r["version"] for r in ndjson(out)] == [1, 2]


def test_what_a_terminal_would_act_on_is_printed_escaped(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Stored text cannot drive the terminal of the person reading a listing: escape sequences, carriage
    returns and bidirectional overrides are shown as escapes, and a line break in a tag or a preview
    makes no row of its own; --json is unchanged. (`mnemo get` prints the content as it is, as cat does.)"""
    with MnemoClient(db, "owner", durability="none") as c:
        rec = c.remember("zebra \x1b[2J\x1b[31mFAKE: verify OK\rover\u202eright\nnext", tags=["a\nfake line", "t\tu"])
    code, out, _err = run(capsys, "ls", db)
    assert code == 0 and len(out.splitlines()) == 1 and "\x1b" not in out
    assert out.endswith("  a\\nfake line t\\tu\n")
    code, out, _err = run(capsys, "history", db, rec.id)
    assert code == 0 and len(out.splitlines()) == 1 and "\x1b" not in out and "\r" not in out
    assert out.endswith("[a\\nfake line t\\tu]  zebra \\x1b[2J\\x1b[31mFAKE: verify OK\\x0dover\\u202eright next\n")
    code, out, _err = run(capsys, "recall", db, "zebra")
    assert code == 0 and out.splitlines()[1:] == ["     1\tzebra \\x1b[2J\\x1b[31mFAKE: verify OK\\x0dover\\u202eright"]
    code, out, _err = run(capsys, "ls", db, "--json")
    assert json.loads(out)["tags"] == ["a\nfake line", "t\tu"]


def test_stats(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ids = cli_db
    code, out, _err = run(capsys, "stats", str(path), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["entries"] == 7 and doc["head_seq"] == 6 and doc["records"] == 3
    code, out, _err = run(capsys, "stats", str(path))
    assert code == 0 and "entries" in out and "head_hash" in out


def test_default_agent_from_the_environment(
    cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, ids = cli_db
    monkeypatch.setenv("MNEMO_AGENT", "agent-2")
    code, out, _err = run(capsys, "ls", str(path), "--json")
    assert [r["id"] for r in ndjson(out)] == [ids["other"]]


def test_log(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, _err = run(capsys, "log", str(path))
    lines = out.splitlines()
    assert code == 0 and len(lines) == 7
    assert lines[0].split()[:3] == ["0", lines[0].split()[1], "genesis"]
    assert "forget" in lines[5] and ids["gone"] in lines[5]
    code, out, _err = run(capsys, "log", str(path), "--json", "--op", "put", "--since", "2", "--limit", "2")
    docs = [json.loads(x) for x in out.splitlines()]
    assert [d["seq"] for d in docs] == [2, 3] and all(d["op"] == "put" for d in docs)
    assert set(docs[0]) == {"seq", "ts", "op", "agent", "prev", "hash", "body"}
    code, out, _err = run(capsys, "log", str(path), "--agent", "agent-2")
    assert len(out.splitlines()) == 1
    assert "to be forgotten" not in out


def test_missing_or_damaged_db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in (["ls"], ["stats"], ["log"], ["cat", "x"], ["history", "x"], ["compact"]):
        code, _out, err = run(capsys, cmd[0], str(tmp_path / "missing.db"), *cmd[1:])
        assert code == 2 and "cannot open" in err, cmd
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"MNEMOLOG" + b"\x00" * 100)
    code, _out, err = run(capsys, "ls", str(junk), "--agent", "a")
    assert code == 1 and "mnemo verify" in err
    code, _out, err = run(capsys, "log", str(junk))
    assert code == 1


def test_compact(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, _err = run(capsys, "compact", str(path), "--json")
    assert code == 0, _err
    result = json.loads(out)
    assert result["reclaimed"] == result["bytes_before"] - result["bytes_after"]
    if not is_pg(path):  # the log file itself is smaller
        assert result["reclaimed"] > 0 and Path(path).stat().st_size == result["bytes_after"]
    code, out, _err = run(capsys, "verify", str(path))
    assert code == 0 and "erased versions: 1" in out
    code, _out, err = run(capsys, "compact", str(path), "--agent", "agent-2")
    assert code == 1 and "admin" in err
    assert run(capsys, "cat", str(path), ids["note"])[1] == "first note, edited\n"


def test_demo_and_chat_call_the_demo_module(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import types

    fake = types.ModuleType("mnemo.demo")
    calls: list[str] = []

    def run_demo(out: object, db_dir: str | None) -> None:
        calls.append(f"demo in {db_dir}")
        print("demo ran", file=out)  # type: ignore[call-overload]

    def run_chat() -> int:
        calls.append("chat")
        return 3

    fake.run_demo = run_demo  # type: ignore[attr-defined]
    fake.run_chat = run_chat  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mnemo.demo", fake)
    assert run(capsys, "demo") == (0, "demo ran\n", "")
    assert run(capsys, "demo", "--dir", "kept")[0] == 0
    assert run(capsys, "chat")[0] == 3
    assert calls == ["demo in None", "demo in kept", "chat"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "--version")
    assert code == 0 and out.startswith("mnemo ")


def test_ls_of_nothing_says_why(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    """An empty listing is an answer (exit 0), but not a silent one: standard error says no record is
    readable by that agent and who owns the database."""
    path, _ids = cli_db
    shown = shown_name(path)
    assert run(capsys, "ls", path, "--agent", "newcomer") == (0, "", (
        f"mnemo ls: no record that newcomer may read in {shown}; the database's owner is owner: --agent owner "
        "lists every record\n"))
    assert run(capsys, "ls", path, "--agent", "agent-2", "--tag", "x", "--scope", "agent:*") == (0, "", (
        f"mnemo ls: no record that agent-2 may read in {shown} that matches --tag x --scope agent:*; the "
        "database's owner is owner: --agent owner lists every record\n"))
    assert run(capsys, "ls", path, "--tag", "nope") == (0, "", (
        f"mnemo ls: no record in {shown} that matches --tag nope (listed as owner, its owner, who may read "
        "every record)\n"))
    assert run(capsys, "ls", path, "--agent", "newcomer", "--json") == (0, "", "")  # an empty stream
    assert run(capsys, "ls", path, "--limit", "0") == (0, "", "")  # nothing was asked for


MISSING_DEFAULT = ("mnemo: error: cannot open {}: No such file or directory; it is the default database, the one "
                   "`mnemo mcp` serves when given no --db (and creates on its first start): give DB to name another\n")


def test_the_record_commands_default_to_the_database_of_mnemo_mcp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("MNEMO_AGENT", raising=False)
    default = default_db_path()
    assert default == tmp_path / "data" / "mnemo" / "memory.mnemo.db"
    for argv in (["ls"], ["stats"], ["compact"], ["cat", "/memories/x.md"], ["history", "/memories/x.md"]):
        assert run(capsys, *argv) == (2, "", MISSING_DEFAULT.format(default)), argv
    assert not default.parent.exists()  # nothing was made
    # what `mnemo mcp` alone writes: its default agent's memory-tool files, in its default database
    ensure_parent(default)
    with MnemoClient(default, DEFAULT_AGENT, durability="none") as client:
        server = MnemoMemoryToolServer(client)
        server.execute({"command": "create", "path": "/memories/x.md", "file_text": "draft\n"})
        server.execute({"command": "str_replace", "path": "/memories/x.md", "old_str": "draft", "new_str": "final"})
        rec_id = client.list_records()[0].id
    code, out, err = run(capsys, "ls")
    assert (code, err) == (0, "") and out.split()[:3] == [rec_id, "v2", f"agent:{DEFAULT_AGENT}"]
    assert out.rstrip().endswith("memorytool path:/memories/x.md")
    assert run(capsys, "cat", "/memories/x.md") == (0, "final\n", "")
    assert run(capsys, "cat", rec_id, "--version", "1") == (0, "draft\n", "")
    code, out, _ = run(capsys, "history", "/memories/x.md")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["v1", "v2"]
    assert json.loads(run(capsys, "stats", "--json")[1])["records"] == 1
    assert run(capsys, "compact")[0] == 0
    # DB named as before; the database alone where a record is expected; one argument too many
    assert run(capsys, "cat", str(default), "/memories/x.md") == (0, "final\n", "")
    assert run(capsys, "cat", str(default)) == (2, "", (
        f"mnemo: error: {default} is a database, not a record: give DB ID|PATH (the record's id, or a /memories "
        "path, after the database)\n"))
    assert run(capsys, "history", str(default), rec_id, "x") == (
        2, "", "mnemo: error: expected [DB] ID|PATH, got 3 arguments\n")
