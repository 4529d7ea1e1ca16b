"""`mnemo verify`, exit codes, --json, and the command line's handling of bad input."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import run
from helpers.logs import SEED, erase_slot, pubkey_hex, sample_log
from helpers.paths import ROOT

from mnemo.cli import output as cli_output


def test_clean_db(sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify", str(sample_db))
    assert code == 0 and err == ""
    assert out.startswith(f"OK: {sample_db}: 13 entries, chain intact\n")
    assert "head: 12:" in out and "checkpoints verified: 1" in out


def test_json_shape(sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "verify", str(sample_db), "--json")
    doc = json.loads(out)
    assert code == 0
    assert set(doc) == {"file", "ok", "entries", "head_seq", "head_hash", "erased", "checkpoints", "problems",
                        "notes"}
    assert (doc["ok"], doc["entries"], doc["head_seq"], doc["problems"]) == (True, 13, 12, [])
    assert len(doc["head_hash"]) == 64


def test_problems_exit_1_with_seq_and_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _b, built = sample_log()
    erase_slot(built.data, built, 4)
    db = built.write(tmp_path / "db")
    off = built.slots[4][0]
    code, out, _err = run(capsys, "verify", str(db))
    assert code == 1
    assert out.startswith(f"FAILED: {db}: 1 problem in 12 entries read")
    assert f"problem [erased] seq 4, offset {off}: payload of seq 4 (record r2) is erased" in out
    code, out, _err = run(capsys, "verify", str(db), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False
    assert doc["problems"] == [{"kind": "erased", "seq": 4, "offset": off,
                                "message": doc["problems"][0]["message"]}]


def test_unreadable_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify", str(tmp_path / "missing.db"))
    assert (code, out) == (2, "")
    assert err.startswith("mnemo: error: cannot open") and "No such file" in err
    code, _out, err = run(capsys, "verify", str(tmp_path))
    assert code == 2 and "cannot" in err


def test_not_a_mnemo_file_is_a_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("just some text, not a database\n")
    code, out, _err = run(capsys, "verify", str(other))
    assert code == 1
    assert "problem [header] offset 0: bad file header: not a Mnemo log (bad magic)" in out
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    code, out, _err = run(capsys, "verify", str(empty), "--json")
    assert code == 1 and json.loads(out)["problems"][0]["kind"] == "header"


def test_torn_tail_is_a_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _b, built = sample_log()
    db = tmp_path / "db"
    db.write_bytes(bytes(built.data[:-9]))
    code, out, _err = run(capsys, "verify", str(db))
    assert code == 1 and "[torn-tail]" in out


def test_expect_head(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _b, built = sample_log()
    db = built.write(tmp_path / "db")
    head = f"{built.entries[-1].seq}:{built.entries[-1].hash.hex()}"
    assert run(capsys, "verify", str(db), "--expect-head", head)[0] == 0
    db.write_bytes(bytes(built.data[: built.frame_spans[-1][0]]))
    code, out, _err = run(capsys, "verify", str(db), "--expect-head", head)
    assert code == 1 and "[expect-head]" in out and "truncated" in out
    for bad in ("12", "x:" + "0" * 64, "3:abc", "-1:" + "0" * 64):
        code, out, err = run(capsys, "verify", str(db), "--expect-head", bad)
        assert code == 2 and "SEQ:HASH" in err


def test_pubkey_as_hex_or_file(sample_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "verify", str(sample_db), "--pubkey", pubkey_hex())[0] == 0
    keyfile = tmp_path / "k.pub"
    keyfile.write_text(pubkey_hex() + "\n")
    assert run(capsys, "verify", str(sample_db), "--pubkey", str(keyfile))[0] == 0
    other = pubkey_hex(b"\x01" * 32)
    code, out, _err = run(capsys, "verify", str(sample_db), "--pubkey", other)
    assert code == 1 and "[checkpoint-key]" in out and "[unsigned]" in out
    code, _out, err = run(capsys, "verify", str(sample_db), "--pubkey", str(tmp_path / "nope.pub"))
    assert code == 2 and "--pubkey" in err
    keyfile.write_text("not a key")
    assert run(capsys, "verify", str(sample_db), "--pubkey", str(keyfile))[0] == 2


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)  # bare `mnemo`: the help, exit 0
    assert code == 0 and out.startswith("Usage: mnemo") and "verify" in out and err == ""
    assert run(capsys, "frobnicate")[0] == 2
    code, _out, err = run(capsys, "verify")
    assert code == 2 and "DB" in err
    code, out, _err = run(capsys, "--help")
    assert code == 0 and "verify" in out and "Exit codes" in out
    assert run(capsys, "audit")[0] == 2


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_output, "PROGRESS_DELAY", 0)
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    with cli_output.progress("verifying") as bar:
        assert bar is not None
        bar(50, 100)
        bar(100, 100)
    assert "verifying" in tty.getvalue() and "100%" in tty.getvalue()
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    with cli_output.progress("verifying") as bar:
        assert bar is None
    assert plain.getvalue() == ""


def test_verify_draws_a_click_progress_bar_on_a_terminal(
    sample_db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_output, "PROGRESS_DELAY", 0)
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    code, out, _err = run(capsys, "verify", str(sample_db))
    assert code == 0 and out.startswith("OK: ")
    assert "verifying" in tty.getvalue() and "[####" in tty.getvalue() and "100%" in tty.getvalue()


def test_no_progress_when_stderr_is_not_a_terminal(sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _code, _out, err = run(capsys, "verify", str(sample_db))
    assert err == ""


def test_python_dash_m(sample_file: Path, tmp_path: Path) -> None:
    db = sample_file
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))

    def mnemo(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mnemo", *args], capture_output=True, text=True,
                              env=env, timeout=60)

    assert mnemo("verify", str(db)).returncode == 0
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(db.read_bytes()[:-1])
    done = mnemo("verify", str(damaged), "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["ok"] is False
    assert mnemo("verify", str(tmp_path / "missing")).returncode == 2
    assert mnemo("nonsense").returncode == 2
    assert SEED  # the key the sample log's checkpoint is signed with
