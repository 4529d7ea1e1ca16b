"""`mnemo audit export`, `mnemo audit verify` and `mnemo keygen`."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

import pytest
from helpers.cli import run
from helpers.logs import pubkey_hex, sample_log
from helpers.victims import make_victim, unchanged


def test_export_to_stdout(sample_db_erased: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "audit", "export", str(sample_db_erased))
    assert code == 0 and err == ""
    lines = [json.loads(x) for x in out.splitlines()]
    assert [x["seq"] for x in lines] == list(range(13))
    assert all("payload" not in x for x in lines)
    assert lines[3]["erased"] is True


def test_export_options(sample_db_erased: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "audit.jsonl"
    code, out, err = run(capsys, "audit", "export", str(sample_db_erased), "-o", str(dest), "--since", "4",
                         "--include-content")
    assert code == 0 and out == ""
    assert err == f"exported 9 entries to {dest}\n"
    lines = [json.loads(x) for x in dest.read_text().splitlines()]
    assert lines[0]["seq"] == 4 and lines[0]["payload"]["content"] == "memory number 2"
    assert run(capsys, "audit", "export", str(sample_db_erased), "--since", "-1")[0] == 2


def test_export_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(capsys, "audit", "export", str(tmp_path / "missing.db"))
    assert code == 2 and "cannot open" in err
    _b, built = sample_log()
    built.data[built.frame_spans[2][0] + 40] ^= 1
    bad = built.write(tmp_path / "bad.db")
    code, _out, err = run(capsys, "audit", "export", str(bad), "-o", str(tmp_path / "x.jsonl"))
    assert code == 1 and "damaged frame at offset" in err and "mnemo verify" in err
    assert not (tmp_path / "x.jsonl").exists()
    code, _out, err = run(capsys, "audit", "export", str(bad), "-o", str(tmp_path / "no" / "dir.jsonl"))
    assert code in (1, 2)


def test_audit_verify(sample_db_erased: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "audit.jsonl"
    assert run(capsys, "audit", "export", str(sample_db_erased), "-o", str(dest), "--include-content")[0] == 0
    code, out, _err = run(capsys, "audit", "verify", str(dest), "--pubkey", pubkey_hex())
    assert code == 0 and out.startswith(f"OK: {dest}: 13 entries")
    code, out, _err = run(capsys, "audit", "verify", str(dest), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True and doc["erased"] == 1 and doc["checkpoints"] == 1

    lines = dest.read_text().splitlines()
    edited = json.loads(lines[5])
    edited["payload"]["content"] = "something else"
    lines[5] = json.dumps(edited)
    dest.write_text("\n".join(lines) + "\n")
    code, out, _err = run(capsys, "audit", "verify", str(dest))
    assert code == 1 and "problem [payload] seq 5" in out and "line 6" in out
    code, out, _err = run(capsys, "audit", "verify", str(dest), "--json")
    assert code == 1 and json.loads(out)["problems"][0]["seq"] == 5


def test_audit_verify_stdin(
    sample_db_erased: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, exported, _err = run(capsys, "audit", "export", str(sample_db_erased), "--since", "6")
    assert code == 0 and exported
    monkeypatch.setattr("sys.stdin", io.StringIO(exported))
    code, out, _err = run(capsys, "audit", "verify", "-")
    assert code == 0 and "7 entries" in out


def test_audit_verify_unreadable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(capsys, "audit", "verify", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "cannot open" in err
    assert run(capsys, "audit", "verify", str(tmp_path))[0] == 2
    junk = tmp_path / "junk.jsonl"
    junk.write_text("this is not JSON\n")
    code, out, _err = run(capsys, "audit", "verify", str(junk))
    assert code == 1 and "[line]" in out


def test_keygen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "signer"
    code, out, _err = run(capsys, "keygen", "-o", str(prefix))
    assert code == 0
    pub = (tmp_path / "signer.pub").read_text().strip()
    assert len(pub) == 64 and out.strip().endswith(pub)
    assert prefix.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert stat.S_IMODE(prefix.stat().st_mode) == 0o600
    code, _out, err = run(capsys, "keygen", "-o", str(prefix))
    assert code == 2 and "exists" in err and (tmp_path / "signer.pub").read_text().strip() == pub
    code, out, _err = run(capsys, "keygen", "-o", str(prefix), "--force", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["public_key"] != pub and set(doc) == {"private_key_file", "public_key_file",
                                                                    "public_key"}


def test_keygen_sign_and_verify_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mnemo import MnemoClient

    prefix = tmp_path / "key"
    assert run(capsys, "keygen", "-o", str(prefix))[0] == 0
    db = tmp_path / "signed.db"
    with MnemoClient(db, "owner", durability="none", signing_key=str(prefix)) as c:
        c.remember("signed memory")
    pub = str(prefix) + ".pub"
    code, out, _err = run(capsys, "verify", str(db), "--pubkey", pub)
    assert code == 0 and "checkpoints verified: 1" in out
    export = tmp_path / "audit.jsonl"
    assert run(capsys, "audit", "export", str(db), "-o", str(export))[0] == 0
    assert run(capsys, "audit", "verify", str(export), "--pubkey", pub)[0] == 0
    with MnemoClient(db, "owner", durability="none") as c:  # a write without the key
        c.remember("unsigned memory")
    code, out, _err = run(capsys, "verify", str(db), "--pubkey", pub)
    assert code == 1 and "[unsigned]" in out


def test_export_never_overwrites_the_database(
    sample_file_erased: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = sample_file_erased
    before = db.read_bytes()
    link = tmp_path / "same.db"
    link.symlink_to(db)
    for dest in (db, link):
        code, out, err = run(capsys, "audit", "export", str(db), "-o", str(dest))
        assert (code, out) == (2, "")
        assert err == f"mnemo: error: cannot write {dest}: it is the database being exported\n"
    assert db.read_bytes() == before


def test_keygen_force_makes_an_existing_private_key_file_owner_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = tmp_path / "signer"
    prefix.write_text("an old file, readable by all\n")
    prefix.chmod(0o644)
    assert run(capsys, "keygen", "-o", str(prefix), "--force")[0] == 0
    assert stat.S_IMODE(prefix.stat().st_mode) == 0o600
    assert prefix.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")


@pytest.mark.parametrize("which", ["private", "public"])
@pytest.mark.parametrize("force", [False, True], ids=["new", "force"])
def test_keygen_never_writes_a_key_through_a_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str, force: bool
) -> None:
    """A link at a key file's name (dangling, so no file seems to be there; or, with --force, to another
    file) is refused with the name and what to do; the file it points to is not made or changed."""
    prefix = tmp_path / "signer"
    link = prefix if which == "private" else tmp_path / "signer.pub"
    target = make_victim(tmp_path) if force else tmp_path / "nowhere"
    link.symlink_to(target)
    code, out, err = run(capsys, "keygen", "-o", str(prefix), *(["--force"] if force else []))
    if force:
        assert (code, out) == (2, "")
        assert err == (f"mnemo: error: {link} is a symbolic link, which key files are never written through: "
                       "remove it, or choose another -o PREFIX\n")
        assert unchanged(target)
    else:
        assert (code, out, err) == (2, "", f"mnemo: error: {link} exists; pass --force to overwrite it\n")
        assert not target.exists()
    assert link.is_symlink()


@pytest.mark.parametrize(("mode", "umask", "expected"), [(0o600, 0o022, 0o600), (0o640, 0o022, 0o640),
                                                           (0o644, 0o077, 0o600)])
@pytest.mark.parametrize("content", [False, True], ids=["chain", "with-content"])
def test_an_export_is_never_readable_by_more_than_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int, umask: int, expected: int, content: bool
) -> None:
    db = sample_log()[1].write(tmp_path / "src.db")
    db.chmod(mode)
    dest = tmp_path / "audit.jsonl"
    old = os.umask(umask)
    try:
        code, _out, _err = run(capsys, "audit", "export", str(db), "-o", str(dest),
                               *(["--include-content"] if content else []))
    finally:
        os.umask(old)
    assert code == 0 and stat.S_IMODE(dest.stat().st_mode) == expected


def test_an_export_never_writes_through_a_link_at_its_temp_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = sample_log()[1].write(tmp_path / "src.db")
    victim = make_victim(tmp_path)
    dest = tmp_path / "audit.jsonl"
    temp = Path(f"{dest}.tmp{os.getpid()}")
    temp.symlink_to(victim)
    code, _out, err = run(capsys, "audit", "export", str(db), "-o", str(dest), "--include-content")
    assert code == 0 and err.startswith("exported ")
    assert unchanged(victim)
    assert not dest.is_symlink() and not os.path.lexists(temp) and dest.read_text().startswith("{")
