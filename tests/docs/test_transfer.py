"""docs/TRANSFER.md's "Checking an export" runs as written: its shell lines check an export's files and
records.jsonl, and its `mnemo verify` line, with the placeholders filled in, passes on the database."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.cli import run
from helpers.paths import ROOT

from mnemo import MnemoClient, MnemoMemoryToolServer

SECTION = (ROOT / "docs" / "TRANSFER.md").read_text(encoding="utf-8").split("**Checking an export.**", 1)[1]


def exported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, dict[str, object]]:
    """A database with a file and a record, its key and checkpoint note, and its export in DIR."""
    db = tmp_path / "memory.mnemo.db"
    with MnemoClient(str(db), agent_id="agent-1") as client:
        MnemoMemoryToolServer(client).execute({"command": "create", "path": "/memories/a.md", "file_text": "hi\n"})
        client.remember("a plain record")
    for argv in (("keygen", "-o", tmp_path / "KEY"), ("checkpoint", db, "--key", tmp_path / "KEY", "-o",
                                                      tmp_path / "export.note"), ("export", db, tmp_path / "DIR")):
        code, _, err = run(capsys, *argv)
        assert code == 0, err
    return db, tmp_path / "DIR", json.loads((tmp_path / "DIR" / "manifest.json").read_text(encoding="utf-8"))


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="the doc's lines use sha256sum (GNU coreutils)")
def test_the_shell_lines_check_the_files_and_the_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, manifest = exported(tmp_path, capsys)
    block = SECTION.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 2
    outputs = [subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=60)
               for line in lines]
    assert [(p.returncode, p.stdout, p.stderr) for p in outputs] == [
        (0, "memories/a.md: OK\n", ""), (0, "records.jsonl: OK\n", "")]
    assert manifest["records"]["count"] == 1  # type: ignore[index]
    (tmp_path / "DIR" / "records.jsonl").write_text("{}\n", encoding="utf-8")
    tampered = subprocess.run(["bash", "-c", lines[1]], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (tampered.returncode, tampered.stdout) == (1, "records.jsonl: FAILED\n")


def test_the_verify_line_with_a_checkpoint_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, _, manifest = exported(tmp_path, capsys)
    paragraph = " ".join(SECTION.split())
    command = re.search(r"`(mnemo verify DB [^`]*--checkpoint[^`]*)`", paragraph)
    assert command is not None, "the verify line with --checkpoint is gone"
    head = manifest["head"]
    filled = {"DB": str(db), "KEY.pub": str(tmp_path / "KEY.pub"), "export.note": str(tmp_path / "export.note"),
              "SEQ:HASH": f"{head['seq']}:{head['hash']}"}  # type: ignore[index]
    argv = [filled.get(word, word) for word in shlex.split(command.group(1))]
    code, out, err = run(capsys, *argv[1:])
    assert (code, err) == (0, "")
    assert f"checkpoint {tmp_path / 'export.note'}: OK: the log (" in out
