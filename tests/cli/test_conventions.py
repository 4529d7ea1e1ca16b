"""What every `mnemo` command shares: help and examples, --version, --json (documents, NDJSON streams,
error objects), one timestamp format, the agent check, the not-a-database rule and --lock-timeout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import click
import pytest
from helpers.backends import snapshot
from helpers.cli import run
from helpers.logs import sample_log
from helpers.pg import Schema
from helpers.procs import subprocess_env

import mnemo
from mnemo import MnemoClient, _native
from mnemo.cli import cli
from mnemo.storage.contract import shown_name

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z")


def ndjson(out: str) -> list[dict[str, Any]]:
    docs = [json.loads(line) for line in out.splitlines()]
    assert docs and all(isinstance(d, dict) for d in docs)
    return docs


def error_object(err: str) -> dict[str, Any]:
    """The one JSON object --json puts on stderr for an error."""
    assert err.endswith("\n") and err.count("\n") == 1, err
    doc = json.loads(err)
    assert set(doc) == {"error"} and set(doc["error"]) == {"message", "type", "exit_code"}
    error: dict[str, Any] = doc["error"]
    return error


@pytest.fixture
def cli_db(db: str) -> tuple[str, dict[str, str]]:
    path = db
    with MnemoClient(path, "owner", durability="none") as owner:
        first = owner.remember("first note", tags=["note"])
        owner.update(first.id, content="first note, edited")
        second = owner.remember("second note", tags=["note", "x"])
        gone = owner.remember("to be forgotten")
        owner.forget([gone.id])
    return path, {"first": first.id, "second": second.id, "gone": gone.id}


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*prefix, name))
        else:
            yield (*prefix, name)


# -- help, examples, version -------------------------------------------------------------------------------


def test_bare_mnemo_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)
    assert (code, err) == (0, "")
    assert out.startswith("Usage: mnemo [OPTIONS] COMMAND") or out.startswith("Usage: mnemo [OPTIONS] [COMMAND]")
    for name in ("verify", "audit", "keygen", "ls", "cat", "history", "log", "stats", "compact", "demo", "chat"):
        assert re.search(rf"^  {name} ", out, re.M), name
    assert "Exit codes: 0 fine; 1 problems found; 2 usage error" in out
    assert run(capsys, "--help")[1] == out


def test_version(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # mnemo.__version__ is the one source: the command prints it, and the installed metadata holds it
    python = sys.version.split()[0]
    native = _native.speedups is not None  # the run of the suite under MNEMO_PURE_PYTHON=1 too
    core = "native (the C extension mnemo._speedups)" if native else \
        f"pure Python, several times slower: {_native.why_pure}"
    code, out, err = run(capsys, "--version")
    assert (code, err) == (0, "")
    assert out == (
        f"mnemo {mnemo.__version__} (Python {python})\n"
        f"scan core: {core}\n"
        "extras:\n"
        f"  anthropic-memory-tool  importable (anthropic {version('anthropic')})\n"
        f"  mcp                    importable (mcp {version('mcp')})\n"
        f"  postgres               importable (psycopg {version('psycopg')})\n"
        f"  semantic               importable (wordllama {version('wordllama')})\n"
        f"  ui                     importable (jinja2 {version('jinja2')})\n"
    )
    assert version("mnemo-chain") == mnemo.__version__
    # an extra that does not import is named, with the line that installs it
    monkeypatch.setitem(sys.modules, "psycopg", None)
    assert run(capsys, "--version")[1].splitlines()[-3] == (
        "  postgres               not importable: import of psycopg halted; None in sys.modules; "
        "pip install -e '.[postgres]' in a checkout of Mnemo (mnemo-chain[postgres] once it is published)")
    code, out, err = run(capsys, "--version", "--json")
    assert (code, err) == (0, "") and json.loads(out) == {
        "version": mnemo.__version__, "python": python,
        "scan_core": {"implementation": "native" if native else "python", "why_pure_python": _native.why_pure},
        "extras": {
            "anthropic-memory-tool": {"importable": True, "distribution": "anthropic",
                                      "version": version("anthropic"), "error": None},
            "mcp": {"importable": True, "distribution": "mcp", "version": version("mcp"), "error": None},
            "postgres": {"importable": False, "distribution": "psycopg", "version": None,
                         "error": "import of psycopg halted; None in sys.modules"},
            "semantic": {"importable": True, "distribution": "wordllama", "version": version("wordllama"),
                         "error": None},
            "ui": {"importable": True, "distribution": "jinja2", "version": version("jinja2"), "error": None},
        },
    }


def test_version_says_why_the_scan_core_is_pure_python() -> None:
    def scan_core(env: dict[str, str], *prelude: str) -> str:
        code = "; ".join([*prelude, "from mnemo.cli import main", "main(['--version'])"])
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env={**subprocess_env(), **env})
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()[1]

    assert scan_core({"MNEMO_PURE_PYTHON": "1"}) == \
        "scan core: pure Python, several times slower: MNEMO_PURE_PYTHON=1 is set"
    assert scan_core({"MNEMO_PURE_PYTHON": "0"}) == "scan core: native (the C extension mnemo._speedups)"
    assert scan_core({"MNEMO_PURE_PYTHON": ""}, "import sys", "sys.modules['mnemo._speedups'] = None") == (
        "scan core: pure Python, several times slower: the C extension mnemo._speedups is not importable "
        "(import of mnemo._speedups halted; None in sys.modules); the install builds it where a C compiler "
        "and the headers of OpenSSL and zlib are found")


def test_a_group_without_its_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "audit")
    assert code == 2 and out == ""
    assert "Missing command (export, verify, verify-consistency, verify-proof)." in err


@pytest.mark.parametrize("path", list(leaf_commands(cli)), ids=" ".join)
def test_every_command_has_help_with_an_example(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *path, "--help")
    assert code == 0 and err == ""
    assert out.startswith(f"Usage: mnemo {' '.join(path)} ")
    examples = out.split("Examples:\n", 1)[1]
    assert f"mnemo {' '.join(path)}" in examples.splitlines()[0]
    assert run(capsys, *path, "-h")[1] == out


def test_every_command_but_demo_and_chat_takes_json() -> None:
    for path in leaf_commands(cli):
        command: click.Command = cli
        for name in path:
            assert isinstance(command, click.Group)
            command = command.commands[name]
        options = {opt for p in command.params for opt in getattr(p, "opts", ())}
        if path in {("demo",), ("chat",)}:  # output for people: their help says why there is no --json
            assert "--json" not in options and "No --json:" in (command.help or ""), path
        else:
            assert "--json" in options, path


# -- --json: documents, streams, errors -------------------------------------------------------------------


def test_streams_are_ndjson(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, _err = run(capsys, "ls", str(path), "--json")
    assert code == 0 and sorted(d["id"] for d in ndjson(out)) == sorted([ids["first"], ids["second"]])
    code, out, _err = run(capsys, "log", str(path), "--json")
    docs = ndjson(out)
    assert code == 0 and [d["seq"] for d in docs] == list(range(6)) and docs[5]["op"] == "forget"
    code, out, _err = run(capsys, "history", str(path), ids["first"], "--json")
    assert code == 0 and [(d["version"], d["content"]) for d in ndjson(out)] == [
        (1, "first note"), (2, "first note, edited")]
    code, out, _err = run(capsys, "audit", "export", str(path), "--json")
    assert code == 0 and [d["seq"] for d in ndjson(out)] == list(range(6))


def test_one_timestamp_format(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    stamps: list[str] = []
    for d in ndjson(run(capsys, "ls", str(path), "--json")[1]):
        stamps += [d["created_at"], d["updated_at"]]
    for d in ndjson(run(capsys, "history", str(path), ids["first"], "--json")[1]):
        stamps += [d["created_at"], d["updated_at"]]
    doc = json.loads(run(capsys, "cat", str(path), ids["first"], "--json")[1])
    stamps += [doc["created_at"], doc["updated_at"]]
    stamps += [d["ts"] for d in ndjson(run(capsys, "log", str(path), "--json")[1])]
    stamps += [d["ts"] for d in ndjson(run(capsys, "audit", "export", str(path))[1])]
    assert len(stamps) == 22 and all(TS.fullmatch(s) for s in stamps), stamps
    for command in (["ls", str(path)], ["history", str(path), ids["first"]], ["log", str(path)]):
        lines = run(capsys, *command)[1].splitlines()
        assert lines and all(len(TS.findall(line)) == 1 for line in lines), command
    created = json.loads(run(capsys, "cat", str(path), ids["first"], "--json")[1])["created_at"]
    with MnemoClient(path, "owner", readonly=True) as c:
        assert created == c.get(ids["first"]).created_at.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def test_usage_error_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify", "--frobnicate", "x", "--json")
    assert (code, out) == (2, "")
    error = error_object(err)
    assert error["type"] == "UsageError" and error["exit_code"] == 2 and "--frobnicate" in error["message"]
    code, out, err = run(capsys, "verify", "--json")
    error = error_object(err)
    assert code == 2 and error["type"] == "UsageError" and "DB" in error["message"]
    code, _out, err = run(capsys, "ls", "x.db", "--limit", "-3", "--json")
    assert code == 2 and error_object(err)["type"] == "UsageError" and "--limit" in error_object(err)["message"]
    code, out, err = run(capsys, "verify", "--frobnicate", "x")  # without --json: click's usage text
    assert code == 2 and out == "" and err.startswith("Usage: mnemo verify") and "--frobnicate" in err


def test_unreadable_file_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.db"
    for command in (["verify"], ["ls"], ["log"], ["audit", "export"], ["audit", "verify"]):
        code, out, err = run(capsys, *command, str(missing), "--json")
        assert (code, out) == (2, ""), command
        assert error_object(err) == {"message": f"cannot open {missing}: No such file or directory",
                                     "type": "UnreadableFile", "exit_code": 2}, command


def test_damaged_db_as_json(cli_db: tuple[str, dict[str, str]], tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    _b, built = sample_log()
    built.data[built.frame_spans[2][0] + 40] ^= 1  # a frame in the middle: its checksum fails
    damaged = built.write(tmp_path / "damaged.db")
    for command in (["ls", str(damaged), "--agent", "owner"], ["log", str(damaged)],
                    ["audit", "export", str(damaged)]):
        code, out, err = run(capsys, *command)
        code_json, out_json, err_json = run(capsys, *command, "--json")
        assert code == code_json == 1, command
        error = error_object(err_json)
        assert error["type"] == "IntegrityError" and error["exit_code"] == 1, command
        assert error["message"] in err and "offset" in error["message"], command
    code, out, err = run(capsys, "verify", str(damaged), "--json")  # verify reports, on stdout
    assert code == 1 and err == "" and json.loads(out)["ok"] is False
    code, out, err = run(capsys, "cat", str(path), ids["gone"], "--json")
    error = error_object(err)
    assert (code, out) == (1, "") and error["type"] == "RecordUnavailable" and ids["gone"] in error["message"]


def test_an_error_naming_a_hostile_path_shows_it_escaped_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path given (or a source, a format) holding an escape sequence, a carriage return, a line break or a
    bidirectional override: the error on standard error shows each escaped, on its one line, as every line
    for people does; --json gives the message as it is."""
    hostile = tmp_path / "x\x1b[2J\x1b[31mOK\rover\u202eright\nmnemo: fake line.db"
    shown = str(hostile).replace("\x1b", "\\x1b").replace("\r", "\\x0d").replace("\u202e", "\\u202e")
    shown = shown.replace("\n", "\\n")
    for command in (["ls"], ["verify"], ["stats"], ["log"]):
        code, out, err = run(capsys, *command, hostile)
        assert (code, out) == (2, "")
        assert err == f"mnemo: error: cannot open {shown}: No such file or directory\n", command
        code, out, err = run(capsys, *command, hostile, "--json")
        assert error_object(err)["message"] == f"cannot open {hostile}: No such file or directory"
    code, out, err = run(capsys, "import", tmp_path / "new.db", hostile, "--agent", "agent-1")
    assert (code, out, err) == (2, "", f"mnemo: error: cannot import {shown}: No such file or directory\n")
    code, out, err = run(capsys, "import", tmp_path / "new.db", tmp_path, "--format", "x\x1b[2J")
    assert code == 2 and "\x1b" not in err and "'x\\x1b[2J' is not one of" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_note_on_standard_error_shows_a_hostile_path_escaped(
    cli_db: tuple[str, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ids = cli_db
    dest = tmp_path / "audit\x1b[2J\nmnemo: fake.jsonl"
    code, out, err = run(capsys, "audit", "export", path, "-o", dest)
    assert (code, out) == (0, "") and dest.exists()
    shown = str(dest).replace("\x1b", "\\x1b").replace("\n", "\\n")
    assert err.startswith("exported ") and err.endswith(f" entries to {shown}\n") and err.count("\n") == 1


@pytest.mark.parametrize("argv", [
    ["verify", "{missing}"], ["verify", "{db}", "--pubkey", "{missing}"], ["ls", "{text}"],
    ["cat", "{db}", "no-such-id"], ["compact", "{db}", "--agent", "nobody"], ["keygen", "-o", "{db}"],
    ["ls", "{db}", "--agent", ""], ["log", "{db}", "--op", "frobnicate"],
])
def test_json_keeps_the_exit_code(argv: list[str], cli_db: tuple[str, dict[str, str]], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    names = {"db": str(cli_db[0]), "missing": str(tmp_path / "missing"), "text": str(text)}
    args = [a.format(**names) for a in argv]
    code, out, err = run(capsys, *args)
    code_json, out_json, err_json = run(capsys, *args, "--json")
    assert code == code_json and code in (1, 2) and out == out_json == ""
    assert error_object(err_json)["exit_code"] == code and err.startswith(("mnemo: ", "Usage: mnemo"))


# -- the agent --------------------------------------------------------------------------------------------


def test_empty_or_invalid_agent_is_a_usage_error(
    cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ids = cli_db
    before = snapshot(path)
    for command in (["ls"], ["stats"], ["cat", "x"], ["history", "x"], ["compact"]):
        code, out, err = run(capsys, command[0], str(path), *command[1:], "--agent", "")
        assert (code, out) == (2, "") and err == "mnemo: error: --agent: agent must be a non-empty string, got ''\n"
        code, _out, err = run(capsys, command[0], str(path), *command[1:], "--agent", "bad\nagent")
        assert code == 2 and "contains the control character U+000A" in err
    code, _out, err = run(capsys, "log", str(path), "--agent", "")
    assert code == 2 and "--agent: agent must be a non-empty string" in err
    monkeypatch.setenv("MNEMO_AGENT", "")
    for command in (["ls"], ["compact"]):
        code, out, err = run(capsys, command[0], str(path))
        assert (code, out) == (2, "")
        assert err == "mnemo: error: $MNEMO_AGENT: agent must be a non-empty string, got ''\n"
    assert snapshot(path) == before
    code, out, _err = run(capsys, "ls", str(path), "--agent", "owner")  # --agent wins over the environment
    assert code == 0 and len(out.splitlines()) == 2


# -- a database this user may read but not write ----------------------------------------------------------

UNWRITABLE = ("mnemo: error: cannot open {db} for writing: Permission denied. This command writes to the database "
              "(or holds its writer lock for one consistent read); ls, cat, history, log, stats and verify read one "
              "they may not write\n")
WRITING = [["import", "{db}", "{src}"], ["export", "{db}", "{out}"], ["forget", "{db}", "--tag", "t", "--yes"],
           ["grant", "{db}", "bob", "team:x", "read"], ["compact", "{db}"]]


def _names(tmp_path: Path, db: Path) -> dict[str, str]:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.md").write_text("a\n")
    return {"db": str(db), "src": str(tmp_path / "src"), "out": str(tmp_path / "out")}


@pytest.mark.parametrize("argv", WRITING)
def test_a_command_that_writes_to_a_database_it_may_not_write_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """The open for writing refused for want of permission (as the file store refuses it: its error caused by
    the PermissionError of the open): one line naming the file and what can read it, exit 2, nothing changed."""
    from mnemo.cli import options
    from mnemo.errors import MnemoError

    db = tmp_path / "m.mnemo.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("x", tags=["t"])
    real = options.MnemoClient

    def refusing(path: str, agent: str, *, readonly: bool = False, **kw: Any) -> MnemoClient:
        if not readonly:
            raise MnemoError(f"cannot open the database at {path}: Permission denied") from PermissionError(
                13, "Permission denied")
        return real(path, agent, readonly=readonly, **kw)

    monkeypatch.setattr(options, "MnemoClient", refusing)
    names = _names(tmp_path, db)
    before = snapshot(str(db))
    assert run(capsys, *(a.format(**names) for a in argv), "--agent", "owner") == (2, "", UNWRITABLE.format(db=db))
    assert snapshot(str(db)) == before and not (tmp_path / "out").exists()
    assert run(capsys, "ls", db, "--agent", "owner")[0] == 0


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes a read-only file")
@pytest.mark.parametrize("argv", WRITING)
def test_a_read_only_database_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    db = tmp_path / "m.mnemo.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("x", tags=["t"])
    names = _names(tmp_path, db)
    for path in tmp_path.glob("m.mnemo.db*"):
        path.chmod(0o444)
    before = snapshot(str(db))
    assert run(capsys, *(a.format(**names) for a in argv), "--agent", "owner") == (2, "", UNWRITABLE.format(db=db))
    assert snapshot(str(db)) == before


# -- files that are not Mnemo databases -------------------------------------------------------------------


def test_a_file_that_is_not_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("just some text, not a database\n")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for path, why in ((text, "it does not start with a Mnemo file header"), (empty, "it is empty")):
        expected = f"mnemo: error: cannot open {path}: not a Mnemo database ({why})\n"
        for command in (["ls"], ["stats"], ["cat", "x"], ["history", "x"], ["compact"]):
            assert run(capsys, command[0], str(path), *command[1:]) == (2, "", expected), command
            assert run(capsys, command[0], str(path), *command[1:], "--agent", "a") == (2, "", expected)
        for command in (["log"], ["audit", "export"]):
            assert run(capsys, *command, str(path)) == (2, "", expected), command
        code, out, _err = run(capsys, "verify", str(path))  # verify judges it: a problem found
        assert code == 1 and "problem [header] offset 0" in out
    assert text.read_text() == "just some text, not a database\n" and empty.read_bytes() == b""


def test_a_postgresql_database_without_mnemo_is_a_usage_error(pg: Schema, capsys: pytest.CaptureFixture[str]) -> None:
    """As a file that is not one: exit 2, whether or not an agent is named (without one, the owner is
    looked up in the database)."""
    expected = f"mnemo: error: cannot open {shown_name(pg.url)}: no Mnemo database at {shown_name(pg.url)}\n"
    for command in (["ls"], ["stats"], ["cat", "x"], ["ls", "--agent", "a"]):
        assert run(capsys, command[0], pg.url, *command[1:]) == (2, "", expected), command


# -- --lock-timeout ---------------------------------------------------------------------------------------

HOLD_LOCK = """
import sys
from mnemo import MnemoClient
with MnemoClient(sys.argv[1], "owner", durability="none") as c, c.transaction():
    print("LOCKED", flush=True)
    sys.stdin.readline()
"""


def test_lock_timeout(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=subprocess_env())
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "LOCKED\n"
        before = snapshot(path)
        started = time.monotonic()
        code, out, err = run(capsys, "compact", str(path), "--lock-timeout", "0.2")
        waited = time.monotonic() - started
        assert (code, out) == (1, "") and err.startswith("mnemo: LockTimeout: ")
        assert 0.2 <= waited < 1.5
        code, _out, err = run(capsys, "compact", str(path), "--lock-timeout", "0", "--json")
        assert code == 1 and error_object(err)["type"] == "LockTimeout"
        assert snapshot(path) == before
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)
    code, out, _err = run(capsys, "compact", str(path), "--lock-timeout", "0.2", "--json")  # released
    assert code == 0 and set(json.loads(out)) == {"bytes_before", "bytes_after", "reclaimed"}
    assert run(capsys, "cat", str(path), ids["first"])[1] == "first note, edited\n"


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon", ""])
def test_lock_timeout_must_be_seconds(value: str, cli_db: tuple[str, dict[str, str]],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path, _ids = cli_db
    before = snapshot(path)
    code, out, err = run(capsys, "compact", str(path), "--lock-timeout", value)
    assert (code, out) == (2, "") and "Invalid value for '--lock-timeout'" in err
    assert "finite, non-negative number of seconds" in err
    assert snapshot(path) == before
