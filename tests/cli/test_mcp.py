"""`mnemo mcp` on the command line: its options, and the usage errors it refuses before serving."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from helpers.cli import run

from mnemo import MnemoClient


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tokens", "t.txt"], "--tokens: only with --transport http"),
        (["--host", "0.0.0.0", "--port", "9000"], "--host, --port: only with --transport http"),
        (["--max-connections", "5", "--read-timeout", "2"],
         "--max-connections, --read-timeout: only with --transport http"),
        (["--max-open-agents", "2"], "--max-open-agents: only with --transport http"),

        (["--transport", "http"], "the HTTP transport needs bearer tokens: --tokens FILE or $MNEMO_MCP_TOKENS"),
        (["--agent", ""], "--agent: agent must be a non-empty string, got ''"),
    ],
)
def test_usage_errors_exit_2_before_anything_opens(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MNEMO_MCP_TOKENS", raising=False)
    db = tmp_path / "m.db"
    code, out, err = run(capsys, "mcp", "--db", str(db), *argv)
    assert (code, out, err) == (2, "", f"mnemo: error: {message}\n")
    code, out, err = run(capsys, "mcp", "--db", str(db), *argv, "--json")
    assert (code, out) == (2, "")
    assert json.loads(err)["error"]["message"] == message
    assert list(tmp_path.iterdir()) == []  # no database, no lock file: nothing was opened


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        *(
            (["--read-timeout", bad],
             f"Invalid value for '--read-timeout': expected a finite, positive number of seconds, got '{bad}'")
            for bad in ("0", "-1", "nan", "inf", "soon")
        ),
        (["--max-connections", "0"], "Invalid value for '--max-connections': 0 is not in the range x>=1."),
    ],
)
def test_http_bounds_must_be_positive(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MNEMO_MCP_TOKENS", "tok-0123456789abcdef a")
    code, out, err = run(capsys, "mcp", "--db", str(tmp_path / "m.db"), "--transport", "http", *argv)
    assert (code, out) == (2, "")
    assert err.endswith(f"Error: {message}\n")
    assert list(tmp_path.iterdir()) == []


def test_an_empty_mnemo_agent_is_refused_never_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MNEMO_AGENT", "")
    code, out, err = run(capsys, "mcp", "--db", str(tmp_path / "m.db"))
    assert (code, out, err) == (2, "", "mnemo: error: $MNEMO_AGENT: agent must be a non-empty string, got ''\n")
    code, _, err = run(capsys, "mcp", "--port", "70000", "--transport", "http")
    assert code == 2 and "--port" in err and "70000" in err


def test_a_database_that_cannot_be_opened_stops_the_server_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("mcp")
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("not mnemo\n")
    # It fails before the protocol starts, so it can run in this process: stdin and stdout are not touched.
    code, out, err = run(capsys, "mcp", "--db", str(not_a_db), "--agent", "a")
    assert (code, out) == (1, "")
    hint = f"(run `mnemo verify {not_a_db}` for the full report)"
    assert err == f"mnemo: {not_a_db}: file is shorter than a Mnemo header {hint}\n"
    assert not_a_db.read_text() == "not mnemo\n"
    code, out, err = run(capsys, "mcp", "--db", str(not_a_db), "--read-only", "--json")
    assert (code, out) == (1, "") and json.loads(err)["error"]["type"] == "IntegrityError"


def test_a_port_in_use_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    monkeypatch.setenv("MNEMO_MCP_TOKENS", "tok-0123456789abcdef a")
    db = tmp_path / "m.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, out, err = run(capsys, "mcp", "--db", str(db), "--transport", "http", "--port", str(port))
    assert (code, out, err) == (2, "", "mnemo: error: Address already in use\n")
    with MnemoClient(db, "claude", readonly=True) as reader:  # the server's agent had opened it: it owns it
        assert reader.stats()["entries"] == 1


def test_the_help_names_every_tool_served_and_every_tool_read_only_serves(capsys: pytest.CaptureFixture[str]) -> None:
    from mnemo.tools.mcp import tools_for  # noqa: PLC0415

    code, out, _ = run(capsys, "mcp", "--help")
    assert code == 0
    text = " ".join(out.split())  # click wraps the help
    described, read_only_help = text.split(" Options: ", 1)
    for tool in tools_for(read_only=False):
        assert tool.name in described
    read_only_help = read_only_help.split("--read-only ", 1)[1].split(" --transport ", 1)[0]
    assert read_only_help == (
        "open the database read-only and offer only "
        + ", ".join(tool.name for tool in tools_for(read_only=True)[:-1])
        + f" and {tools_for(read_only=True)[-1].name}"
    )
