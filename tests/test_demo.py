"""`mnemo demo`: its database kept with --dir, the chain catching a changed byte on a copy, the text
wrapped to the terminal, and next steps whose commands work."""

from __future__ import annotations

import io
import shlex
from pathlib import Path

import pytest

from mnemo.cli import main
from mnemo.demo import run_demo, terminal_width

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
    assert f"FAILED: {copy}: 1 problem in 8 entries read" in " ".join(attack.split())
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
