"""`mnemo import` and `mnemo export`: their output, --json, exit codes, a new database made by an import,
--sync asking on a terminal and needing --yes elsewhere, and errors with the database unchanged."""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import is_empty, snapshot
from helpers.cli import run
from helpers.transfer import read_tree, write_tree

from mnemo import MnemoClient


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "src", {"a.md": "alpha\n", "notes/b.md": "beta\n", ".hidden": "h"})


def test_import_makes_the_database_and_reports(source: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "new.mnemo.db")
    assert run(capsys, "import", db, str(source)) == (
        2, "", f"mnemo: error: {db} does not exist: give --agent (or $MNEMO_AGENT) to create it as that agent's "
               "database\n")
    assert not os.path.exists(db)
    code, out, err = run(capsys, "import", db, str(source), "--agent", "agent-1")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (f"imported {source} (folder) into /memories in scope agent:agent-1: 2 created, 0 updated, "
                        "0 unchanged, 0 forgotten, 1 skipped; commit seq 2")
    assert lines[1:] == ["  created    /memories/a.md", "  created    /memories/notes/b.md",
                         f"  skipped    {source}/.hidden: a hidden file: its name starts with '.', and the SDK's "
                         "filesystem memory tool lists no such name"]
    code, out, _ = run(capsys, "import", db, str(source), "--json")  # the owner, by default
    doc = json.loads(out)
    assert code == 0 and doc["unchanged"] == ["/memories/a.md", "/memories/notes/b.md"] and doc["entry"] is None
    assert run(capsys, "cat", db, "/memories/notes/b.md")[1] == "beta\n"


def test_import_into_a_folder_and_scope_dry_run(db: str, source: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with MnemoClient(db, "owner", durability="none") as owner:
        owner.remember("x")
    before = snapshot(db)
    code, out, _ = run(capsys, "import", db, str(source), "--scope", "team:x", "--into", "/memories/imported",
                       "--dry-run")
    assert code == 0 and out.startswith(f"would import {source} (folder) into /memories/imported in scope team:x: "
                                        "2 created, 0 updated, 0 unchanged, 0 forgotten, 1 skipped; nothing "
                                        "written (a dry run)\n")
    assert snapshot(db) == before


def test_a_dry_run_into_a_database_not_made_yet_says_what_an_import_would_do(
    tmp_path: Path, source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "new.mnemo.db"
    scratch = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("mnemo-dry-run-")}
    code, out, err = run(capsys, "import", db, source, "--agent", "agent-1", "--dry-run")
    assert (code, err) == (0, "") and out.startswith(
        f"would import {source} (folder) into /memories in scope agent:agent-1: 2 created, 0 updated, 0 unchanged, "
        "0 forgotten, 1 skipped; nothing written (a dry run)\n")
    # nothing made, not even the database; the scratch database of the run is gone
    assert not any(p.name.startswith("new.mnemo.db") for p in tmp_path.iterdir())
    assert {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("mnemo-dry-run-")} <= scratch
    assert run(capsys, "import", db, source, "--dry-run")[0] == 2  # still: who would own it


def test_import_sync_needs_yes_without_a_terminal_and_asks_on_one(
    db: str, source: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "import", db, str(source), "--agent", "agent-1")[0] == 0
    (source / "a.md").unlink()
    before = snapshot(db)
    assert run(capsys, "import", db, str(source), "--sync") == (
        2, "", "mnemo: error: --sync would forget 1 file the source no longer has (--dry-run lists them): give --yes "
               "to forget them when standard input is not a terminal\n")
    assert snapshot(db) == before
    from mnemo.cli import output as cli_output

    monkeypatch.setattr(cli_output, "isatty", lambda stream: stream is sys.stdin)
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    code, out, err = run(capsys, "import", db, str(source), "--sync")
    assert (code, out) == (1, "") and err == (
        "--sync forgets 1 file(s) the source no longer has, erased for good:\n  /memories/a.md\n"
        "Forget them? [y/N]: mnemo: nothing imported\n")
    assert snapshot(db) == before
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    code, out, _ = run(capsys, "import", db, str(source), "--sync")
    assert code == 0 and "  forgotten  /memories/a.md" in out.splitlines()
    assert run(capsys, "import", db, str(source), "--sync", "--yes")[1].splitlines()[0].endswith(
        "0 created, 0 updated, 1 unchanged, 0 forgotten, 1 skipped; nothing written")


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["{missing}"], 2, "cannot import {missing}: No such file or directory"),
    (["{fifo}"], 2, "cannot import {fifo}: it is a FIFO (named pipe), neither a folder nor a file"),
    (["{graph}"], 2, "{graph} line 2: not JSON (Expecting value at column 1), so not a knowledge graph's line (an "
                     "entity or a relation object)"),
    (["{src}", "--into", "/etc"], 2, "Path must start with /memories, got: /etc"),
    (["{src}", "--agent", "stranger", "--scope", "agent:agent-1"], 1,
     "stranger may not read in scope agent:agent-1"),
])
def test_import_errors_leave_the_database_unchanged(
    db: str, source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int,
    message: str,
) -> None:
    with MnemoClient(db, "agent-1", durability="none") as agent:
        agent.remember("x")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "g.jsonl").write_text('{"type":"relation","from":"a","to":"b","relationType":"r"}\nnope\n')
    names = {"missing": str(tmp_path / "missing"), "fifo": str(tmp_path / "fifo"), "graph": str(tmp_path / "g.jsonl"),
             "src": str(source)}
    before = snapshot(db)
    got, out, err = run(capsys, "import", db, *(a.format(**names) for a in argv), "--json")
    error = json.loads(err)["error"]
    assert (got, out, error["exit_code"]) == (code, "", code)
    assert error["message"] == message.format(**names)
    assert snapshot(db) == before


@pytest.mark.parametrize(("name", "text", "message"), [
    ("missing.json", None, "cannot import {src}: No such file or directory"),
    ("long.json", '{"results": [{"id": "1", "memory": "x", "n": %s}]}' % ("9" * 5000),
     "cannot import {src}: its JSON holds an integer of more than 4300 digits, more than the parser converts, so "
     "not a JSON export it reads"),
])
def test_a_source_refused_before_reading_makes_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str | None, message: str
) -> None:
    """A source that is not there, or that the import cannot tell (or parse), is refused before the
    database is made: no new database is left behind."""
    src = tmp_path / name
    if text is not None:
        src.write_text(text)
    new = tmp_path / "new.mnemo"
    got, out, err = run(capsys, "import", new, src, "--agent", "agent-1", "--json")
    assert (got, out, json.loads(err)["error"]["message"]) == (2, "", message.format(src=src))
    assert sorted(p.name for p in tmp_path.iterdir()) == ([name] if text is not None else [])


# Every format, each with a source missing, one of the wrong kind and one that does not parse: (format, name, text
# or None for missing, or "dir" for an empty folder; the error message).
BAD_SOURCES = [
    ("folder", "missing", None, "cannot import {src}: No such file or directory"),
    ("folder", "notes.md", "a file", "cannot import {src} as a folder: it is a file, not a folder"),
    ("claude-code", "missing", None, "cannot import {src}: No such file or directory"),
    ("claude-code", "project", "dir", "no Claude Code memory found for {src}: none of {src}/CLAUDE.md, "),
    ("mcp-knowledge-graph", "missing.jsonl", None, "cannot import {src}: No such file or directory"),
    ("mcp-knowledge-graph", "g.jsonl", '{"type":"entity","name":"a","entityType":"t","observations":[]}\nnope\n',
     "{src} line 2: not JSON (Expecting value at column 1), so not a knowledge graph's line (an entity or a "
     "relation object)"),
    ("mcp-knowledge-graph", "folder", "dir",
     "cannot import {src} as a knowledge graph (JSON Lines): it is a directory, not a regular file"),
    ("mcp-memory-service", "missing.json", None, "cannot import {src}: No such file or directory"),
    ("mcp-memory-service", "bad.json", "{bad", "cannot import {src}: not JSON (Expecting property name enclosed in "
     "double quotes at line 1 column 2), so not "),
    ("mem0", "missing.json", None, "cannot import {src}: No such file or directory"),
    ("mem0", "bad.json", "\xff\xfe", "cannot import {src}: not JSON ("),
    ("mem0", "folder", "dir", "cannot import {src} as mem0 memories (the JSON of get_all()): it is a directory, not a "
     "regular file"),
]


def _bad_source(folder: Path, name: str, text: str | None) -> Path:
    src = folder / name
    if text == "dir":
        src.mkdir()
    elif text is not None:
        src.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    return src


@pytest.mark.parametrize(("fmt", "name", "text", "message"), BAD_SOURCES)
def test_a_bad_source_of_any_format_makes_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, name: str, text: str | None, message: str
) -> None:
    """Named with --format, a source is read only once the import runs, with the database open: the new
    database is made beside DB and put in place only once the import is done, so a source missing, of the
    wrong kind or that does not parse leaves nothing at DB, no sidecar and no folder it was made in."""
    (tmp_path / "sources").mkdir()
    src = _bad_source(tmp_path / "sources", name, text)
    (tmp_path / "dbs").mkdir()
    new = tmp_path / "dbs" / "new.mnemo.db"
    got, out, err = run(capsys, "import", new, src, "--format", fmt, "--agent", "agent-1", "--json")
    assert (got, out) == (2, "")
    assert json.loads(err)["error"]["message"].startswith(message.format(src=src))
    assert os.listdir(tmp_path / "dbs") == []


@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize(("fmt", "name", "text", "message"), BAD_SOURCES)
def test_a_bad_source_makes_no_tables_in_a_postgresql_database_without_them(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, name: str, text: str | None, message: str
) -> None:
    """The tables of a new database on PostgreSQL are made only by an import that succeeds: it runs as a dry
    run into a scratch database first, so that a bad source makes none."""
    src = _bad_source(tmp_path, name, text)
    got, out, err = run(capsys, "import", db, src, "--format", fmt, "--agent", "agent-1", "--json")
    assert (got, out) == (2, "")
    assert json.loads(err)["error"]["message"].startswith(message.format(src=src))
    assert is_empty(db)
    good = _good_source(tmp_path)
    assert run(capsys, "import", db, good, "--agent", "agent-1", "--into", "/etc")[0] == 2  # a folder refused
    assert is_empty(db)
    code, out, err = run(capsys, "import", db, good, "--agent", "agent-1")
    assert (code, err) == (0, "") and "1 created" in out
    assert run(capsys, "cat", db, "/memories/a.md", "--agent", "agent-1")[1] == "alpha\n"


def _good_source(folder: Path) -> Path:
    return write_tree(folder / "good", {"a.md": "alpha\n"})


@pytest.mark.parametrize(("fmt", "name", "text", "message"), BAD_SOURCES)
def test_a_bad_source_of_any_format_leaves_the_database_byte_identical(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, name: str, text: str | None,
    message: str
) -> None:
    with MnemoClient(db, "agent-1", durability="none") as agent:
        agent.remember("x")
    (tmp_path / "sources").mkdir()
    src = _bad_source(tmp_path / "sources", name, text)
    folder = None if db.startswith("postgresql:") else Path(db).parent

    def files() -> dict[str, bytes | None]:  # every file of DB's folder, sidecars too, byte for byte
        return {} if folder is None else {p.name: p.read_bytes() if p.is_file() else None for p in folder.iterdir()}

    before, whole = snapshot(db), files()
    got, out, err = run(capsys, "import", db, src, "--format", fmt, "--json")
    assert (got, out) == (2, "")
    assert json.loads(err)["error"]["message"].startswith(message.format(src=src))
    assert snapshot(db) == before
    assert files() == whole


def test_a_new_database_is_made_only_by_an_import_that_succeeds(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refusal after the source is read (a folder the memory tool refuses, another process making DB
    meanwhile) leaves no database either; one that succeeds puts the database and its caches in place."""
    (tmp_path / "dbs").mkdir()
    new = tmp_path / "dbs" / "new.mnemo.db"
    assert run(capsys, "import", new, source, "--agent", "agent-1", "--into", "/etc") == (
        2, "", "mnemo: error: Path must start with /memories, got: /etc\n")
    assert os.listdir(tmp_path / "dbs") == []
    code, out, err = run(capsys, "import", new, source, "--agent", "agent-1")
    assert (code, err) == (0, "") and "2 created" in out
    assert sorted(os.listdir(tmp_path / "dbs")) == ["new.mnemo.db", "new.mnemo.db.leaves", "new.mnemo.db.snap"]
    assert oct(os.stat(new).st_mode & 0o777) == "0o600" and os.stat(new).st_nlink == 1
    assert run(capsys, "cat", new, "/memories/notes/b.md")[1] == "beta\n"


def test_a_new_database_in_the_folder_imported_is_no_file_of_it(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.md").write_text("alpha\n")
    code, out, err = run(capsys, "import", tmp_path / "new.mnemo.db", tmp_path, "--agent", "agent-1")
    assert (code, err) == (0, "") and out.splitlines() == [
        f"imported {tmp_path} (folder) into /memories in scope agent:agent-1: 1 created, 0 updated, 0 unchanged, "
        "0 forgotten, 0 skipped; commit seq 1", "  created    /memories/a.md"]


def test_a_database_made_by_another_process_during_the_import_is_left_alone(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemo.cli import transfer as cli_transfer

    new = tmp_path / "new.mnemo.db"
    real = cli_transfer._import

    def racing(*args: Any) -> Any:
        report = real(*args)
        new.write_bytes(b"theirs")  # made by someone else while the import ran
        return report

    monkeypatch.setattr(cli_transfer, "_import", racing)
    assert run(capsys, "import", new, source, "--agent", "agent-1") == (
        2, "", f"mnemo: error: {new} was made by another process during the import: nothing imported; import into "
               "it now that it exists\n")
    assert new.read_bytes() == b"theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.mnemo.db", "src"]


def test_json_naming_a_file_whose_name_is_not_utf8_is_utf8(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file name of bytes that are not UTF-8 reaches Python as lone surrogates: --json writes each as its
    JSON escape, so the document is UTF-8 (a strict reader such as jq takes it) and reads back to the name."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.md").write_text("fine")
    os.close(os.open(os.path.join(os.fsencode(src), b"\xff\xfe.md"), os.O_CREAT | os.O_WRONLY, 0o644))
    with MnemoClient(db, "agent-1", durability="none") as agent:
        agent.remember("x")
    before = snapshot(db)
    code, out, err = run(capsys, "import", db, src, "--agent", "agent-1", "--dry-run", "--json")
    assert (code, err) == (0, "")
    out.encode("utf-8")  # no lone surrogate: what is printed is UTF-8
    assert '"origin": "' + str(src) + '/\\udcff\\udcfe.md"' in out
    skipped = json.loads(out)["skipped"]
    assert skipped == [{"origin": f"{src}/\udcff\udcfe.md",
                        "reason": "a path the memory tool refuses: Invalid path: '/memories/\\udcff\\udcfe.md'"}]
    code, out, err = run(capsys, "import", db, src, "--agent", "agent-1", "--dry-run")  # for people
    assert (code, err) == (0, "") and out.splitlines()[-1] == (
        f"  skipped    {src}/\\udcff\\udcfe.md: a path the memory tool refuses: Invalid path: "
        "'/memories/\\udcff\\udcfe.md'")
    code, out, err = run(capsys, "import", tmp_path / "x\udcff.db", tmp_path / "missing\udcff", "--agent", "agent-1",
                         "--json")
    assert (code, out) == (2, "")
    err.encode("utf-8")
    assert json.loads(err)["error"]["message"] == f"cannot import {tmp_path}/missing\udcff: No such file or directory"
    assert snapshot(db) == before


def test_export(db: str, source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "import", db, str(source), "--agent", "agent-1")[0] == 0
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "export", db, str(out_dir))
    assert (code, err) == (0, "")
    with MnemoClient(db, "agent-1", readonly=True) as c:
        seq, digest = c.head
    assert out.splitlines()[0].startswith("exported 2 memory-tool files (11 bytes) and 0 other records from ")
    assert out.splitlines()[0].endswith(f" into {out_dir}; head {seq}:{digest}")
    assert out.splitlines()[1] == f"manifest: {out_dir}/manifest.json"
    assert read_tree(out_dir / "memories") == {"a.md": b"alpha\n", "notes/b.md": b"beta\n"}
    code, out, err = run(capsys, "export", db, str(out_dir), "--json")
    assert code == 2 and json.loads(err)["error"]["message"] == (
        f"cannot export into {out_dir}: it is not empty; give a new or empty folder (an export never writes beside "
        "other files)")
    code, out, _ = run(capsys, "export", db, str(tmp_path / "j"), "--format", "jsonl", "--versions", "--json",
                       "--agent", "agent-1")
    doc: dict[str, Any] = json.loads(out)
    assert code == 0 and (doc["files"], doc["records"], doc["head"], doc["format"]) == (
        0, 2, {"seq": seq, "hash": digest}, "jsonl")  # agent-1 made the database: it owns it


def test_a_skipped_name_stays_on_its_line_and_shows_no_terminal_escape(db: str, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # a hostile folder's names: one forging a "created" row, one clearing the screen
    src = write_tree(tmp_path / "src", {"x\n  created    /memories/forged.md": "x", "\x1b[2Jclear.md": "y",
                                        "ok.md": "z"})
    code, out, err = run(capsys, "import", db, str(src), "--agent", "agent-1")
    assert (code, err) == (0, "")
    assert out.splitlines()[1:] == [
        "  created    /memories/ok.md",
        f"  skipped    {src}/\\x1b[2Jclear.md: a path the memory tool refuses: Invalid path: "
        "'/memories/\\x1b[2Jclear.md'",
        f"  skipped    {src}/x\\n  created    /memories/forged.md: a path the memory tool refuses: Invalid path: "
        "'/memories/x\\n  created    /memories/forged.md'",
    ]


def test_importing_an_export_names_its_memories_folder(db: str, source: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "import", db, str(source), "--agent", "agent-1")[0] == 0
    out_dir = tmp_path / "out"
    assert run(capsys, "export", db, str(out_dir))[0] == 0
    new = str(tmp_path / "new.mnemo.db")
    with MnemoClient(new, "agent-1", durability="none") as client:
        client.remember("x")
    before = snapshot(new)
    code, out, err = run(capsys, "import", new, str(out_dir), "--json")
    assert (code, out) == (2, "")
    assert json.loads(err)["error"]["message"] == (
        f"cannot import {out_dir}: it is an export of Mnemo (mnemo-export/2, by its manifest.json), whose memory-tool "
        f"files are in {out_dir}/memories (another scope's in scopes/FOLDER/memories): import that folder (mnemo "
        f"import DB {out_dir}/memories), or name --format folder to import every file of {out_dir}, manifest "
        "included, as it is (docs/TRANSFER.md §3)")
    assert snapshot(new) == before
    code, out, _ = run(capsys, "import", new, str(out_dir / "memories"), "--json")  # as the error says
    assert code == 0 and json.loads(out)["created"] == ["/memories/a.md", "/memories/notes/b.md"]
    code, out, _ = run(capsys, "import", new, str(out_dir), "--format", "folder", "--into", "/memories/raw", "--json")
    assert code == 0 and json.loads(out)["created"] == [
        "/memories/raw/manifest.json", "/memories/raw/memories/a.md", "/memories/raw/memories/notes/b.md",
        "/memories/raw/records.jsonl"]


def test_importing_an_export_of_records_alone_says_so(db: str, source: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "import", db, str(source), "--agent", "agent-1")[0] == 0
    out_dir = tmp_path / "j"
    assert run(capsys, "export", db, str(out_dir), "--format", "jsonl")[0] == 0
    before = snapshot(db)
    code, out, err = run(capsys, "import", db, str(out_dir), "--json")
    assert (code, out) == (2, "")
    assert json.loads(err)["error"]["message"] == (
        f"cannot import {out_dir}: it is an export of Mnemo (mnemo-export/2, by its manifest.json) that holds no "
        "memory-tool files, only records.jsonl, which the import does not read: export with --format files to import "
        "the files (mnemo copy and mnemo backup move a whole database), or name --format folder to import every file "
        f"of {out_dir}, manifest included, as it is (docs/TRANSFER.md §3)")
    assert snapshot(db) == before


def test_a_folder_whose_manifest_is_not_an_export_s_is_a_folder(db: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tree(tmp_path / "src", {"manifest.json": '{"format": "mine/1"}\n', "a.md": "alpha\n"})
    code, out, _ = run(capsys, "import", db, str(src), "--agent", "agent-1", "--json")
    assert code == 0 and json.loads(out)["created"] == ["/memories/a.md", "/memories/manifest.json"]


def test_export_of_a_scope_whose_writer_stored_a_path_on_the_manifest(db: str, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with MnemoClient(db, "owner", durability="none") as owner:
        owner.grant("writer", "team:x", ["write"])
    with MnemoClient(db, "writer", durability="none") as writer:
        writer.remember("x", tags=["memorytool", "path:/manifest.json/pwn"], scope="team:x")
    out_dir = tmp_path / "D"
    code, out, err = run(capsys, "export", db, str(out_dir), "--scope", "team:x", "--agent", "owner", "--json")
    assert (code, err) == (0, "")
    assert (json.loads(out)["files"], json.loads(out)["records"]) == (0, 1)
    assert set(read_tree(out_dir)) == {"records.jsonl", "manifest.json"}
    assert json.loads((out_dir / "manifest.json").read_text())["format"] == "mnemo-export/2"
    [line] = (out_dir / "records.jsonl").read_text().splitlines()
    assert json.loads(line)["tags"] == ["memorytool", "path:/manifest.json/pwn"]
