"""export_audit and verify_export (docs/FORMAT.md §5.2), and the standalone examples/verify_export.py; the
exports of the sample log on both backends (copied into PostgreSQL), of damaged logs on the file."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from helpers.logs import SEED, LogBuilder, fix_frame_crc, pubkey_hex, sample_log
from helpers.paths import ROOT

from mnemo.audit import UnreadableExport, export_audit, format_ts, verify_db, verify_export
from mnemo.chain.codec import make_entry
from mnemo.errors import IntegrityError
from mnemo.record import VerifyReport

EXAMPLE = ROOT / "examples" / "verify_export.py"
PUB = bytes.fromhex(pubkey_hex())
LINE_KEYS = {"seq", "ts", "op", "agent", "prev", "hash", "entry", "body"}

Line = dict[str, Any]


def export_lines(db: Path, **kw: Any) -> list[Line]:
    out = io.StringIO()
    n = export_audit(db, out, **kw)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert n == len(lines)
    return lines


def dumps(lines: list[Line]) -> str:
    return "".join(json.dumps(x) + "\n" for x in lines)


def verify_lines(lines: list[Line], **kw: Any) -> VerifyReport:
    report = verify_export(io.StringIO(dumps(lines)), **kw)
    assert report.ok == (not report.problems)
    return report


def kinds(report: VerifyReport) -> set[tuple[str, int | None]]:
    return {(p.kind, p.seq) for p in report.problems}


def run_example(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLE), str(path), *args],
                          capture_output=True, text=True, timeout=60)


def test_export_lines_follow_the_contract(sample_db_erased: Path) -> None:
    lines = export_lines(sample_db_erased)
    assert [x["seq"] for x in lines] == list(range(len(lines)))
    for x in lines:
        assert set(x) - LINE_KEYS <= {"erased", "forgotten_by"} and not LINE_KEYS - set(x)
        raw = base64.b64decode(x["entry"])
        assert hashlib.sha256(raw).hexdigest() == x["hash"]
        version, seq, ts_ns, prev, op, agent, body = msgpack.unpackb(raw, raw=False)
        assert (version, seq, op, agent, prev.hex()) == (1, x["seq"], x["op"], x["agent"], x["prev"])
        assert x["ts"] == format_ts(ts_ns) and x["ts"].endswith("Z")
    genesis = lines[0]
    assert genesis["body"] == {"db_id": "000102030405060708090a0b0c0d0e0f", "format": 1}
    assert genesis["ts"] == "2025-11-30T10:53:20.000000000Z"
    assert lines[1]["ts"] == "2025-11-30T10:53:20.000001000Z"


def test_format_ts_keeps_nanoseconds() -> None:
    assert format_ts(1_764_500_000_000_000_001) == "2025-11-30T10:53:20.000000001Z"
    assert format_ts(0) == "1970-01-01T00:00:00.000000000Z"


def test_include_content(sample_db_erased: Path) -> None:
    lines = export_lines(sample_db_erased, include_content=True)
    by_id = {x["body"].get("id"): x for x in lines if x["op"] == "put"}
    r0 = by_id["r0"]  # the latest put of r0 (v2) overrides v1 in this dict
    p = r0["payload"]
    assert set(p) == {"salt", "packed", "content", "tags", "metadata"}
    assert p["content"] == "memory number 0, updated" and p["tags"] == ["all"]
    assert p["metadata"] == {"i": 0, "v": 2}
    assert hashlib.sha256(bytes.fromhex(p["salt"]) + base64.b64decode(p["packed"])).hexdigest() ==\
        r0["body"]["digest"]
    assert base64.b64decode(by_id["tx1"]["payload"]["content_b64"]) == b"\x00\x01binary"
    assert "content" not in by_id["tx1"]["payload"]
    forgotten = by_id["r1"]
    forget = next(x for x in lines if x["op"] == "forget")
    assert "payload" not in forgotten and forgotten["erased"] is True
    assert forgotten["forgotten_by"] == {"seq": forget["seq"], "agent": forget["agent"], "ts": forget["ts"]}
    assert forget["payload"] == {"reason": "asked to"}
    assert all("payload" not in x for x in lines if x["op"] in ("genesis", "grant", "checkpoint"))


def test_no_content_without_the_flag(sample_db_erased: Path) -> None:
    lines = export_lines(sample_db_erased)
    assert all("payload" not in x for x in lines)
    assert sum(1 for x in lines if x.get("erased")) == 1  # the marker does not depend on the flag


def test_pending_erasure_is_never_exported(tmp_path: Path) -> None:
    _b, built = sample_log()  # r1 is forgotten, its slot not yet zeroed
    db = built.write(tmp_path / "db")
    lines = export_lines(db, include_content=True)
    r1 = next(x for x in lines if x["body"].get("id") == "r1")
    assert r1["erased"] is True and "payload" not in r1
    assert b"memory number 1" not in dumps(lines).encode()


def test_clean_export_verifies(sample_db_erased: Path) -> None:
    for flag in (False, True):
        lines = export_lines(sample_db_erased, include_content=flag)
        r = verify_lines(lines, pubkey=PUB)
        assert r.ok, r.problems
        db_report = verify_db(sample_db_erased)
        assert (r.entries, r.head_seq, r.head_hash) == (db_report.entries, db_report.head_seq,
                                                         db_report.head_hash)
        assert (r.erased, r.checkpoints) == (1, 1)


def test_export_since_verifies_on_its_own(sample_db_erased: Path) -> None:
    lines = export_lines(sample_db_erased, since=5, include_content=True)
    assert lines[0]["seq"] == 5
    r = verify_lines(lines, pubkey=PUB)
    assert r.ok, r.problems
    assert any("anchored" in n and lines[0]["prev"] in n for n in r.notes)
    assert export_lines(sample_db_erased, since=10_000) == []


def test_export_to_a_path(sample_db_erased: Path, tmp_path: Path) -> None:
    dest = tmp_path / "audit.jsonl"
    n = export_audit(sample_db_erased, dest, include_content=True)
    assert n == len(dest.read_text().splitlines())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.jsonl", "memory.mnemo.db"]
    assert verify_export(dest, pubkey=PUB).ok


def test_export_of_a_damaged_log_refuses(tmp_path: Path) -> None:
    _b, built = sample_log()
    start, _end = built.frame_spans[3]
    built.data[start + 30] ^= 1
    db = built.write(tmp_path / "db")
    with pytest.raises(IntegrityError) as info:
        export_audit(db, io.StringIO())
    assert info.value.offset == start


def test_export_stops_before_a_torn_tail(tmp_path: Path) -> None:
    _b, built = sample_log()
    db = tmp_path / "db"
    db.write_bytes(bytes(built.data[:-4]))
    lines = export_lines(db)
    assert lines[-1]["seq"] == built.entries[-2].seq


# -- tampering with an export ----------------------------------------------------------------------------


def tampered(db: Path, edit: Callable[[list[Line]], object], **kw: Any) -> VerifyReport:
    lines = export_lines(db, include_content=True)
    edit(lines)
    return verify_lines(lines, **kw)


def test_edited_body_field(sample_db_erased: Path) -> None:
    def edit(lines: list[Line]) -> None:
        lines[4]["body"]["scope"] = "agent:someone-else"

    assert kinds(tampered(sample_db_erased, edit)) == {("mismatch", 4)}


def test_edited_agent_and_time(sample_db_erased: Path) -> None:
    def edit(lines: list[Line]) -> None:
        lines[3]["agent"] = "owner"
        lines[5]["ts"] = "2020-01-01T00:00:00.000000000Z"

    assert kinds(tampered(sample_db_erased, edit)) == {("mismatch", 3), ("mismatch", 5)}


def test_edited_content(sample_db_erased: Path) -> None:
    def edit(lines: list[Line]) -> None:
        lines[2]["payload"]["content"] = "memory number 0, but different"

    r = tampered(sample_db_erased, edit)
    assert kinds(r) == {("payload", 2)} and "content" in r.problems[0].message


def test_edited_tags_and_packed(sample_db_erased: Path) -> None:
    def edit(lines: list[Line]) -> None:
        p = lines[4]["payload"]
        p["tags"] = ["all", "tX"]
        content, _tags, metadata = msgpack.unpackb(base64.b64decode(p["packed"]), raw=False)
        p["packed"] = base64.b64encode(msgpack.packb([content, ["all", "tX"], metadata])).decode()

    r = tampered(sample_db_erased, edit)
    assert kinds(r) == {("payload", 4)} and "digest" in r.problems[0].message


def test_rewritten_entry_with_recomputed_hash(sample_db_erased: Path) -> None:
    def edit(lines: list[Line]) -> None:
        x = lines[6]
        version, seq, ts_ns, prev, op, agent, body = msgpack.unpackb(base64.b64decode(x["entry"]), raw=False)
        e = make_entry(seq, ts_ns, prev, op, "owner", body)
        x.update(agent="owner", entry=base64.b64encode(e.raw).decode(), hash=e.hash.hex())

    assert kinds(tampered(sample_db_erased, edit)) == {("link", 7)}


def test_hash_field_edited(sample_db_erased: Path) -> None:
    def edit(lines: list[Line]) -> None:
        lines[2]["hash"] = "00" * 32

    assert kinds(tampered(sample_db_erased, edit)) == {("hash", 2)}


def test_deleted_and_swapped_lines(sample_db_erased: Path) -> None:
    r = tampered(sample_db_erased, lambda lines: lines.pop(4))
    assert kinds(r) == {("seq", 4), ("link", 5)}

    def swap(lines: list[Line]) -> None:
        lines[3], lines[4] = lines[4], lines[3]

    r = tampered(sample_db_erased, swap)
    assert {3, 4} <= {p.seq for p in r.problems}


def test_unreadable_line_and_the_rest_still_checked(sample_db_erased: Path) -> None:
    lines = export_lines(sample_db_erased, include_content=True)
    lines[6]["payload"]["content"] = "changed"
    text = dumps(lines).splitlines(keepends=True)
    text[3] = "{not json\n"
    r = verify_export(io.StringIO("".join(text)))
    assert kinds(r) == {("line", 3), ("payload", 6)}
    offset = len("".join(text[:3]).encode())
    assert next(p for p in r.problems if p.kind == "line").offset == offset


def test_forged_checkpoint_in_export(sample_db_erased: Path) -> None:
    def edit(lines: list[Line]) -> None:
        x = lines[-1]
        version, seq, ts_ns, prev, op, agent, body = msgpack.unpackb(base64.b64decode(x["entry"]), raw=False)
        body["sig"] = bytes(64)
        e = make_entry(seq, ts_ns, prev, op, agent, body)
        x.update(entry=base64.b64encode(e.raw).decode(), hash=e.hash.hex())
        x["body"]["sig"] = "00" * 64

    last = export_lines(sample_db_erased)[-1]["seq"]
    assert kinds(tampered(sample_db_erased, edit)) == {("checkpoint-signature", last)}
    assert kinds(tampered(sample_db_erased, edit, pubkey=PUB)) == {("checkpoint-signature", last), ("unsigned", None)}


def test_erased_markers_are_checked(sample_db_erased: Path) -> None:
    def leak(lines: list[Line]) -> None:
        x = next(x for x in lines if x.get("erased"))
        del x["erased"], x["forgotten_by"]

    r = tampered(sample_db_erased, leak)
    assert {k for k, _ in kinds(r)} == {"erased"}

    def fake(lines: list[Line]) -> None:
        x = lines[4]
        x["erased"] = True
        x["forgotten_by"] = {"seq": 11, "agent": "agent-1", "ts": lines[11]["ts"]}
        del x["payload"]

    assert kinds(tampered(sample_db_erased, fake)) == {("erased", 4)}


def test_a_payload_salt_that_is_not_hex_is_a_finding(sample_db_erased: Path) -> None:
    def edit(lines: list[Line]) -> None:
        lines[2]["payload"]["salt"] = "zz" * 16

    r = tampered(sample_db_erased, edit)
    assert [(p.kind, p.message, p.seq) for p in r.problems] == [
        ("payload", "line 3: payload lacks a 16-byte hex salt or base64 packed bytes", 2)]


def test_appended_line_without_signature(sample_db_erased: Path) -> None:
    def edit(lines: list[Line]) -> None:
        last = lines[-1]
        e = make_entry(last["seq"] + 1, 1, bytes.fromhex(last["hash"]), "grant", "owner",
                       {"perms": ["admin"], "principal": "mallory", "scope": "*"})
        lines.append({"seq": e.seq, "ts": format_ts(1), "op": "grant", "agent": "owner", "prev": last["hash"],
                      "hash": e.hash.hex(), "entry": base64.b64encode(e.raw).decode(),
                      "body": {"perms": ["admin"], "principal": "mallory", "scope": "*"}})

    assert tampered(sample_db_erased, edit).ok
    n = len(export_lines(sample_db_erased))
    assert kinds(tampered(sample_db_erased, edit, pubkey=PUB)) == {("unsigned", n)}


def test_empty_and_unreadable_exports(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert kinds(verify_export(empty)) == {("line", None)}
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage\n")
    assert {k for k, _ in kinds(verify_export(binary))} == {"line"}
    with pytest.raises(UnreadableExport):
        verify_export(tmp_path / "missing.jsonl")
    with pytest.raises(UnreadableExport):
        verify_export(tmp_path)


# -- the standalone example verifier ----------------------------------------------------------------------


def test_example_accepts_a_real_export(sample_db_erased: Path, tmp_path: Path) -> None:
    dest = tmp_path / "audit.jsonl"
    export_audit(sample_db_erased, dest, include_content=True)
    done = run_example(dest, "--pubkey", PUB.hex())
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK: head")
    partial = tmp_path / "partial.jsonl"
    export_audit(sample_db_erased, partial, since=7, include_content=True)
    assert run_example(partial).returncode == 0


def test_example_catches_tampering(sample_db_erased: Path, tmp_path: Path) -> None:
    lines = export_lines(sample_db_erased, include_content=True)
    lines[2]["payload"]["content"] = "edited"
    lines[5]["body"]["size"] = 999
    dest = tmp_path / "bad.jsonl"
    dest.write_text(dumps(lines))
    done = run_example(dest)
    assert done.returncode == 1
    assert "line 3 (seq 2): payload fields" in done.stdout
    assert "line 6 (seq 5): body does not match" in done.stdout
    assert run_example(tmp_path / "missing.jsonl").returncode == 2


def test_client_export_verified_by_both(tmp_path: Path) -> None:
    from mnemo import MnemoClient

    db = tmp_path / "client.db"
    with MnemoClient(db, "owner", durability="none", signing_key=SEED) as c:
        a = c.remember("first", tags=["x"], metadata={"nested": {"b": 1, "a": [1, 2]}})
        c.remember(b"\x00\xff", tags=["bin"])
        c.update(a.id, content="first, edited")
        c.checkpoint()
        c.forget([a.id])
        c.remember("ünïcødé ✓", tags=["path:/memories/x.md"])
    dest = tmp_path / "audit.jsonl"
    export_audit(db, dest, include_content=True)
    r = verify_export(dest, pubkey=PUB)
    assert r.ok, r.problems
    assert r.erased == 2
    assert run_example(dest, "--pubkey", PUB.hex()).returncode == 0


def test_builder_sanity() -> None:
    b = LogBuilder()
    b.put("a", "x", "y")
    built = b.build()
    fix_frame_crc(built.data, built.frame_spans[1][0])
    assert bytes(built.data) == bytes(b.build().data)
