"""`mnemo demo`: its database kept with --dir, the chain catching a changed byte on a copy, the text
wrapped to the terminal, and next steps whose commands work; the scripted demo (offline) and `mnemo chat`
(the SDK's real tool runner, here against a scripted API)."""

from __future__ import annotations

import importlib.util
import io
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from mnemo import MnemoClient
from mnemo.cli import main
from mnemo.demo import run_chat, run_demo, terminal_width

RAW = ("  {", "  ...", "  mnemo ", "$ mnemo ")  # data (audit JSON) and commands: never wrapped


def test_the_attack_on_a_copy_and_the_next_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "new" / "demo dir"  # created, and a path that needs quoting
    code = main(["demo", "--dir", str(folder)])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    db, copy = folder / "demo.mnemo.db", folder / "tampered.mnemo.db"
    assert db.is_file() and copy.is_file()
    attack = out.split("--- an attacker edits the profile (on a copy of the database) ---\n", 1)[1]
    assert "now says 'planes over trains' instead of 'trains over planes'" in " ".join(attack.split())
    assert f"$ mnemo verify {shlex.quote(str(copy))}\n" in attack
    assert f"FAILED: {copy}: 1 problem in 10 entries read" in " ".join(attack.split())
    assert "\n  problem [payload] seq 7, offset " in attack
    assert "payload digest SHA-256(salt + packed) does not match the put's digest" in " ".join(attack.split())
    assert "A client reading that record from the copy: the client refuses it: IntegrityError:" in attack
    assert b"planes over trains" in copy.read_bytes() and b"planes over trains" not in db.read_bytes()

    steps = out.split("Next steps, to look at what it stored:\n", 1)[1].splitlines()
    assert f"The database is kept in {db}" in " ".join(out.split("Next steps")[0].split())
    q_db, q_copy, profile = shlex.quote(str(db)), shlex.quote(str(copy)), "/memories/people/ana/profile.md"
    assert steps == [f"  mnemo ls {q_db}", f"  mnemo cat {q_db} {profile}", f"  mnemo history {q_db} {profile}",
                     f"  mnemo log {q_db}", f"  mnemo verify {q_db}", f"  mnemo verify {q_copy}"]
    for step in steps:  # each works as printed
        argv = shlex.split(step)
        assert argv[0] == "mnemo"
        code = main(argv[1:])
        out_step, err_step = capsys.readouterr()
        assert code == (1 if argv[-1] == str(copy) else 0), (step, err_step)
        if argv[1] == "cat":
            assert out_step == "# Ana\n- vegetarian\n- prefers trains over planes\n"

    assert main(["demo", "--dir", str(folder)]) == 2
    assert capsys.readouterr().out == f"mnemo demo: {db} already exists; give an empty directory\n"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["demo", "--dir", str(a_file)]) == 2
    assert capsys.readouterr().out == f"mnemo demo: {a_file} is not a directory\n"


def test_without_a_folder_the_next_steps_say_how_to_keep_one() -> None:
    out = io.StringIO()
    assert run_demo(out) == 0
    text = out.getvalue()
    database = text.split("database: ")[1].split()[0]
    assert not Path(database).exists()
    assert text.endswith("  mnemo demo --dir mnemo-demo\n  mnemo ls mnemo-demo/demo.mnemo.db\n"
                         "  mnemo cat mnemo-demo/demo.mnemo.db /memories/people/ana/profile.md\n"
                         "  mnemo log mnemo-demo/demo.mnemo.db\n  mnemo verify mnemo-demo/demo.mnemo.db\n")


@pytest.mark.parametrize("columns", [50, 72])
def test_text_is_wrapped_to_the_terminal(columns: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert terminal_width() == columns
    out = io.StringIO()
    assert run_demo(out, db_dir=str(tmp_path)) == 0
    lines = out.getvalue().splitlines()
    prose = [line for line in lines if not line.startswith(RAW)]
    assert len(prose) > 60
    for line in prose:
        # a line runs over only where one word (a path, a hash) is longer than the line itself
        assert len(line) <= columns or max(map(len, line.split())) > columns // 2, line
    assert max(map(len, prose)) > columns - 12  # and the width is used
    at = next(i for i, line in enumerate(lines) if line.startswith("Claude: Done: the trip is forgotten"))
    assert lines[at + 1].startswith(" " * len("Claude: ")) and lines[at + 1][len("Claude: ")] != " "  # hangs


def test_the_width_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    assert terminal_width() == 100
    monkeypatch.setenv("COLUMNS", "10")
    assert terminal_width() == 40


def test_demo_transcript_chain_check_and_audit(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_demo(out, db_dir=str(tmp_path)) == 0
    text = out.getvalue()
    for expected in [
        "User: Hi! I'm Ana.",
        "  > memory.view /memories\n",
        "  = File created successfully at: /memories/trips/lisbon.md\n",
        "  = The file /memories/trips/lisbon.md has been edited.\n",
        "  ! Error: Path /memories/../../etc/passwd would escape /memories directory\n",
        "  = Successfully deleted /memories/trips\n",
        "  = Successfully renamed /memories/user to /memories/people/ana\n",
        "Claude: Done: the trip is forgotten",
        "Bytes of the forgotten trip ('Lisbon') left in the database files: 0\n",
        "Chain check: OK: ",
        "0 problems\n",
        "Audit export (JSON Lines, ",
    ]:
        assert expected in text, expected
    excerpt = text.split("Audit export")[1].split("\n\n")[0]  # the attack on a copy follows it
    audit_lines = [line.strip() for line in excerpt.splitlines()[1:] if line.strip() != "..."]
    assert len(audit_lines) == 4
    entries = [json.loads(line) for line in audit_lines]
    assert entries[0]["op"] == "genesis"
    assert {"seq", "ts", "op", "agent", "prev", "hash", "entry", "body"} <= set(entries[-1])
    assert all("payload" not in entry for entry in entries)  # exported without content
    with MnemoClient(str(tmp_path / "demo.mnemo.db"), "demo-agent", readonly=True) as client:
        paths = [t for info in client.list_records() for t in info.tags if t.startswith("path:")]
        assert paths == ["path:/memories/people/ana/profile.md", "path:/memories/people/ana/food.md",
                         "path:/memories/work/deploys.md"]
        assert client.verify().ok
    again = io.StringIO()
    assert run_demo(again, db_dir=str(tmp_path)) == 2
    assert "already exists" in again.getvalue()


def test_demo_shows_a_search_and_one_across_mounts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    out = io.StringIO()
    assert run_demo(out, db_dir=str(tmp_path)) == 0
    text = out.getvalue()
    search = text.split('  > memory_search "train* plane*"\n', 1)[1].split("\nClaude: ", 1)[0]
    assert search == (
        "  = Here're the files in /memories that match `train* plane*`, best match first, with their matching\n"
        "    lines:\n"
        "      /memories/user/profile.md\n"
        "           3  - prefers trains over planes\n"
        "      /memories/trips/lisbon.md\n"
        "           4  - book: night train via Madrid"
    )
    across = text.split('  > concierge: memory_search "lisbon tram*"\n', 1)[1].split("\nThe move of", 1)[0]
    # the concierge's own file and the team's, each at its tree path
    assert "      /memories/team/lisbon.md\n           1  # Lisbon, June" in across
    assert "      /memories/hotels.md\n           1  - Alfama, near the tram" in across


def test_demo_in_a_temporary_directory() -> None:
    out = io.StringIO()
    assert run_demo(out) == 0
    database = out.getvalue().split("database: ")[1].split()[0]
    assert not Path(database).exists()


def test_chat_without_a_key_says_what_is_missing() -> None:
    out = io.StringIO()
    assert run_chat(out, io.StringIO("hello\n"), environ={}) == 2
    assert out.getvalue() == (
        "mnemo chat needs an Anthropic API key: set ANTHROPIC_API_KEY in the environment "
        "(for an offline run, try `mnemo demo`).\n"
    )


def test_chat_through_the_tool_runner(tmp_path: Path) -> None:
    anthropic = pytest.importorskip("anthropic")
    httpx2 = pytest.importorskip("httpx2")
    replies: list[dict[str, Any]] = [
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "memory",
            "input": {"command": "view", "path": "/memories"},
        },
        {
            "type": "tool_use",
            "id": "toolu_2",
            "name": "memory",
            "input": {"command": "create", "path": "/memories/likes.md", "file_text": "tea\n"},
        },
        {"type": "text", "text": "I'll remember that you like tea."},
        {"type": "text", "text": "Goodbye!"},
    ]
    requests: list[dict[str, Any]] = []

    def api(request: Any) -> Any:
        requests.append(json.loads(request.content))
        block = replies[len(requests) - 1]
        return httpx2.Response(
            200,
            json={
                "id": f"msg_{len(requests)}",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [block],
                "stop_reason": "tool_use" if block["type"] == "tool_use" else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        )

    def make_client() -> Any:
        return anthropic.Anthropic(
            api_key="sk-test", max_retries=0, http_client=httpx2.Client(transport=httpx2.MockTransport(api))
        )

    out = io.StringIO()
    db = str(tmp_path / "chat.mnemo.db")
    code = run_chat(
        out,
        io.StringIO("I like tea.\nbye\n\n"),
        db_path=db,
        model="claude-test",
        environ={},
        make_client=make_client,
    )
    assert code == 0, out.getvalue()
    text = out.getvalue()
    assert "  > memory.create /memories/likes.md\n  = File created successfully at: /memories/likes.md\n" in text
    assert "claude: I'll remember that you like tea.\n" in text
    assert "claude: Goodbye!\n" in text
    assert requests[0]["model"] == "claude-test"
    assert requests[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    with MnemoClient(db, "chat", readonly=True) as client:
        assert [r.content for r in client.query(tags=("path:/memories/likes.md",))] == ["tea\n"]


def test_demo_two_agents_share_a_team_folder(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_demo(out, db_dir=str(tmp_path), width=100) == 0
    shared = out.getvalue().split("--- a shared team folder: two agents, one of them read-only ---\n", 1)[1]
    shared = shared.split("\n\n", 1)[0]
    for expected in [
        "  > assistant: memory.create /memories/team/lisbon.md\n"
        "  = File created successfully at: /memories/team/lisbon.md\n",
        # the concierge sees the team's folder, not the assistant's own notes
        "  > concierge: memory.view /memories\n  = Here're the files and directories up to 2 levels deep in /memories,",
        "      53B  /memories\n      53B  /memories/team/\n      53B  /memories/team/lisbon.md\n  > concierge",
        '  > concierge: memory.str_replace /memories/team/lisbon.md "June" -> "July"\n'
        "  ! Error: Permission denied: concierge may not write in scope team:trips\n",
        "  > concierge: memory.rename /memories/hotels.md -> /memories/team/hotels.md\n"
        "  ! Error: Permission denied: concierge may not write in scope team:trips\n",
        "  = Successfully renamed /memories/notes.md to /memories/team/notes.md\n",
        "      79B  /memories/team\n      53B  /memories/team/lisbon.md\n      26B  /memories/team/notes.md\n",
        "Chain check of team.mnemo.db: OK: 8 entries",
    ]:
        assert expected in shared, expected
    with MnemoClient(str(tmp_path / "team.mnemo.db"), "demo-agent", readonly=True) as owner:
        stored = sorted((r.scope, r.tags, r.content) for r in owner.query(tags=("memorytool",)))
    assert stored == [
        ("agent:concierge", ("memorytool", "path:/memories/hotels.md"), "- Alfama, near the tram\n"),
        ("team:trips", ("memorytool", "path:/memories/lisbon.md"),
         "# Lisbon, June\n- two travellers\n- trains, no flights\n"),
        ("team:trips", ("memorytool", "path:/memories/notes.md"), "Ana prefers window seats.\n"),
    ]


def test_demo_finds_by_meaning_what_words_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    out = io.StringIO()
    assert run_demo(out, db_dir=str(tmp_path)) == 0
    scene = out.getvalue().split("--- conversation 3 ", 1)[1].split("\nChain check", 1)[0]
    lexical = scene.split('  > memory_search "air travel preferences" (mode lexical)\n', 1)[1].split("\nClaude: ")[0]
    assert lexical.startswith("  = No file in /memories matches `air travel preferences`.")
    if importlib.util.find_spec("wordllama") is None:
        assert "Searching by meaning needs the `semantic` extra: pip install -e '.[semantic]'" in scene
        return
    hybrid = scene.split('  > memory_search "air travel preferences" (mode hybrid)\n', 1)[1].split("\nClaude: ")[0]
    assert hybrid.splitlines()[2:4] == ["      /memories/people/ana/profile.md", "           1  # Ana"]
    assert "Claude: By meaning: you prefer trains over planes" in scene
