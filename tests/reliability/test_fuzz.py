"""Fuzzing: handle() on arbitrary JSON-like tool_use blocks and paths (on both backends), and open /
verify of arbitrary and mutated db files (random bytes, truncations, bit flips, spliced and foreign
frames, damaged or forged sidecars). Only tool_result dicts come back, nothing is written outside the
db's directory, opening raises only MnemoError subclasses, verify_db returns a report, and nothing
hangs. tests/soak runs the same with many more inputs."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from helpers.erase_journal import write_erase_journal
from helpers.reliability_fuzz import fuzz_files, fuzz_handle

from mnemo import MnemoClient
from mnemo.errors import MnemoError
from mnemo.storage.file.snapshot import decode_snapshot, encode_snapshot


def test_fuzz_memory_tool_handle(tmp_path: Path, db: str, backend: str) -> None:
    # the same inputs on both; fewer of them on PostgreSQL, where each write is a round trip
    count = fuzz_handle(tmp_path, examples=250 if backend == "file" else 100, derandomize=True,
                        db=None if backend == "file" else db)
    print(f"\nfuzz handle(): {count.tried} inputs tried, {count.errors} error results, {count.writes} writes")
    assert count.tried >= (250 if backend == "file" else 100)
    assert count.writes > 0 and count.errors > 0


def test_fuzz_open_and_verify_mutated_logs(tmp_path: Path) -> None:
    count = fuzz_files(tmp_path, examples=300, derandomize=True, sidecars=False)
    print(f"\nfuzz db files: {count}")
    assert count.tried >= 300
    assert count.opened_writer > 0 and count.refused


def test_fuzz_open_with_damaged_or_forged_sidecars(tmp_path: Path) -> None:
    count = fuzz_files(tmp_path, examples=150, derandomize=True, sidecars=True)
    print(f"\nfuzz db files with sidecars: {count}")
    assert count.tried >= 150


# -- what the fuzzers found, pinned ------------------------------------------------------------------


@pytest.mark.parametrize("keep", [32, 40, 60])
def test_torn_genesis_frame_is_not_cut(tmp_path: Path, keep: int) -> None:
    db = tmp_path / "m.mnemo.db"
    MnemoClient(db, "owner").close()
    os.truncate(db, keep)
    try:
        c = MnemoClient(db, "owner")
    except MnemoError:
        return  # refusing to open is a fine answer
    with c:
        c.remember("hello")
        assert c.verify().ok


def test_foreign_erase_journal_is_not_applied(tmp_path: Path) -> None:
    db = tmp_path / "m.mnemo.db"
    with MnemoClient(db, "owner") as c:
        c.remember("hello")
    before = db.read_bytes()
    write_erase_journal(str(db) + ".erase", os.urandom(16), [(0, 32)])
    with contextlib.suppress(MnemoError):
        MnemoClient(db, "owner").close()
    assert db.read_bytes() == before


@pytest.mark.parametrize("field", [
    "id_blob", "rows", "columns", "hashes", "posting_rows", "posting_lens", "tagset_tags", "tagset_lens",
    "tagset_refs", "older", "forgotten", "acl",
])
def test_forged_snapshot_is_discarded(tmp_path: Path, field: str) -> None:
    db = tmp_path / "m.mnemo.db"
    with MnemoClient(db, "owner") as c:
        c.remember("hello", tags=["t"])
    snap = Path(str(db) + ".snap")
    body = decode_snapshot(snap.read_bytes())
    assert body is not None
    body["index"][field] = None if field != "acl" else b"junk"
    snap.write_bytes(encode_snapshot(body))  # re-sealed: only its content gives it away
    with MnemoClient(db, "owner") as c:
        assert [r.content for r in c.query(tags=["t"])] == ["hello"]


def test_genesis_of_another_db_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.mnemo.db", tmp_path / "b.mnemo.db"
    MnemoClient(a, "owner").close()
    MnemoClient(b, "owner").close()
    spliced = a.read_bytes()[:32] + b.read_bytes()[32:]  # a's header, b's frames
    Path(str(a) + ".snap").unlink(missing_ok=True)
    a.write_bytes(spliced)
    try:
        c = MnemoClient(a, "owner")
    except MnemoError:
        return  # refusing to open is the answer wanted
    with c:
        c.remember("hello")
        assert c.verify().ok
