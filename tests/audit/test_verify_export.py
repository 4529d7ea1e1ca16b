"""verify_export on tampered audit bundles: every finding it reports, exactly (kind, message, seq and the
byte offset of the line), its notes and counts, and nothing more; a clean bundle reports none."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import msgpack
import pytest
from helpers.logs import SEED, LogBuilder, erase_slot, pubkey_hex, sample_log

from mnemo.audit import UnreadableExport, export_audit, format_ts, sign_checkpoint, verify_export
from mnemo.audit.common import jsonable
from mnemo.chain.codec import make_entry
from mnemo.chain.rules import short_hash as _short
from mnemo.errors import InvalidInput
from mnemo.record import VerifyReport

PUB = bytes.fromhex(pubkey_hex())
Line = dict[str, Any]
Finding = tuple[str, str, int | None, int | None]


def exported(tmp_path: Path, builder: LogBuilder | None = None, erase: bool = True, **kw: Any) -> list[Line]:
    """The export, with content, of the sample log (checkpointed; r1, seq 3, forgotten by seq 11 and
    erased), or of `builder`'s log."""
    if builder is None:
        builder, built = sample_log(checkpoint=True)
        if erase:
            erase_slot(built.data, built, 3)
    else:
        built = builder.build()
    path = built.write(tmp_path / "exported.mnemo.db")
    out = io.StringIO()
    export_audit(path, out, include_content=kw.pop("include_content", True), **kw)
    return [json.loads(x) for x in out.getvalue().splitlines()]


def text_of(lines: list[Any]) -> str:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)


def at(lines: list[Any], i: int) -> int:
    """The byte offset of line i (0-based) in text_of(lines)."""
    return len(text_of(lines[:i]).encode())


def report_of(lines: list[Any], **kw: Any) -> VerifyReport:
    r = verify_export(io.StringIO(text_of(lines)), **kw)
    assert r.ok == (not r.problems)
    return r


def findings(lines: list[Any], **kw: Any) -> tuple[list[Finding], list[str]]:
    r = report_of(lines, **kw)
    return [(p.kind, p.message, p.seq, p.offset) for p in r.problems], list(r.notes)


def entry_line(seq: int, prev: str, op: str, agent: str, body: dict[str, Any], ts_ns: int = 1) -> Line:
    e = make_entry(seq, ts_ns, bytes.fromhex(prev), op, agent, body)
    return {"seq": seq, "ts": format_ts(ts_ns), "op": op, "agent": agent, "prev": prev, "hash": e.hash.hex(),
            "entry": base64.b64encode(e.raw).decode(), "body": jsonable(body)}


def test_a_clean_export_reports_nothing(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    r = report_of(lines, pubkey=PUB)
    assert (r.ok, r.problems, r.notes) == (True, (), ())
    assert (r.entries, r.head_seq, r.head_hash, r.erased, r.checkpoints) == (13, 12, lines[-1]["hash"], 1, 1)
    r = report_of(lines)
    assert (r.ok, r.erased, r.checkpoints) == (True, 1, 1)


def test_an_export_that_starts_later_is_anchored(tmp_path: Path) -> None:
    lines = exported(tmp_path, since=5)
    assert findings(lines, pubkey=PUB) == ([], [
        f"the export starts at seq 5; it is anchored at its first entry, whose prev {lines[0]['prev']} is the "
        "hash of seq 4: compare it with a head you trust",
    ])
    r = report_of(lines)
    assert (r.entries, r.head_seq, r.erased, r.checkpoints) == (8, 12, 0, 1)  # r1 (seq 3) is before it


def test_an_empty_export(tmp_path: Path) -> None:
    r = report_of([])
    assert [(p.kind, p.message, p.seq, p.offset) for p in r.problems] == [
        ("line", "the export holds no entries", None, None)]
    assert (r.ok, r.entries, r.head_seq, r.head_hash) == (False, 0, -1, "")
    assert findings(["", "   "], pubkey=PUB)[0] == [("line", "the export holds no entries", None, None)]


def test_unreadable_lines_are_named_and_the_rest_still_checked(tmp_path: Path) -> None:
    lines: list[Any] = exported(tmp_path)
    lines[4] = "[1, 2]"
    lines[6] = json.dumps({k: v for k, v in lines[6].items() if k != "entry"})
    entry = lines[8]["entry"]
    lines[8] = json.dumps(dict(lines[8], entry=entry[:8] + "*" + entry[8:]))  # a character outside base64
    lines[10] = json.dumps(dict(lines[10], entry=base64.b64encode(b"\x93\x01\x02").decode(), seq="ten"))
    found, _notes = findings(lines)
    assert found[:3] == [
        ("line", "line 5: unreadable export line: not a JSON object", 4, at(lines, 4)),
        ("line", 'line 7: unreadable export line: no "entry" string', 6, at(lines, 6)),
        ("line", 'line 9: unreadable export line: "entry" is not base64', 8, at(lines, 8)),
    ]
    assert [(k, s, o) for k, _m, s, o in found[3:]] == [("line", 10, at(lines, 10))]
    assert found[3][1].startswith("line 11: unreadable export line: ")
    r = report_of(lines)
    assert (r.entries, r.head_seq) == (9, 12)


def test_an_unreadable_line_is_placed_by_its_own_seq(tmp_path: Path) -> None:
    lines: list[Any] = exported(tmp_path)
    lines[4] = json.dumps(dict(lines[4], entry="AA==", seq=77))
    lines[0] = "{not json"
    found, _notes = findings(lines)
    assert [(k, s, o) for k, _m, s, o in found] == [("line", None, 0), ("line", 77, at(lines, 4))]
    assert found[0][1].startswith("line 1: unreadable export line: ")


def test_lines_that_are_not_utf8(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    raw = text_of(lines).encode().splitlines(keepends=True)
    raw[5] = b"\xff\xfe not text\n"
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"".join(raw))
    r = verify_export(path)
    assert [(p.kind, p.message, p.seq, p.offset) for p in r.problems] == [
        ("line", "line 6: not UTF-8 text", 5, len(b"".join(raw[:5]))),
    ]  # and seq 6, after the lost line, is not reported as a jump
    raw[0] = b"\xff\n"
    path.write_bytes(b"".join(raw))
    r = verify_export(path)
    assert [(p.kind, p.message, p.seq, p.offset) for p in r.problems] == [
        ("line", "line 1: not UTF-8 text", None, 0),
        ("line", "line 6: not UTF-8 text", 5, len(b"".join(raw[:5]))),
    ]
    assert r.notes == ()  # the export does not start late: its first line was lost


def test_offsets_count_bytes_not_characters(tmp_path: Path) -> None:
    b = LogBuilder()
    b.put("ägent-ü", "x", "ünïcødé ✓ content")
    b.put("ägent-ü", "y", "more")
    lines = exported(tmp_path, b)
    lines[2]["hash"] = "00" * 32
    text = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
    offset = len("".join(text.splitlines(keepends=True)[:2]).encode())
    assert offset > len("".join(text.splitlines(keepends=True)[:2]))
    want = [("hash", f"line 3: hash is not SHA-256 of the entry bytes ({_hash(lines[2])})",
             2, offset)]
    r = verify_export(io.StringIO(text))
    assert [(p.kind, p.message, p.seq, p.offset) for p in r.problems] == want
    path = tmp_path / "audit.jsonl"
    path.write_text(text, encoding="utf-8")
    r = verify_export(path)
    assert [(p.kind, p.message, p.seq, p.offset) for p in r.problems] == want
    with open(path, "rb") as f:
        r = verify_export(f)
        assert not f.closed  # a caller's stream is left open
    assert [(p.kind, p.message, p.seq, p.offset) for p in r.problems] == want


def _hash(line: Line) -> str:
    import hashlib

    return hashlib.sha256(base64.b64decode(line["entry"])).hexdigest()


def test_each_field_that_does_not_match_its_entry_is_named(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    lines[2]["seq"] = 20
    lines[3]["ts"] = "2020-01-01T00:00:00.000000000Z"
    lines[4]["op"] = "grant"
    lines[5]["agent"] = "owner"
    lines[6]["prev"] = "00" * 32
    lines[7]["body"]["size"] = 1
    lines[8]["hash"] = "11" * 32
    found, _notes = findings(lines)
    assert found == [
        ("mismatch", f'line {i + 1}: "{key}" does not match the entry bytes', i, at(lines, i))
        for i, key in enumerate(["seq", "ts", "op", "agent", "prev", "body"], 2)
    ] + [("hash", f"line 9: hash is not SHA-256 of the entry bytes ({_hash(lines[8])})", 8, at(lines, 8))]


def test_deleted_and_swapped_lines(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    h = [x["hash"] for x in lines]
    gone = lines[:4] + lines[6:]
    assert findings(gone)[0] == [
        ("seq", "line 5: seq follows seq 3", 4, at(gone, 4)),
        ("link", f"line 5: prev {_short(h[5])} is not the hash of the line before (seq 3, {_short(h[3])})", 6,
         at(gone, 4)),
    ]
    swapped = lines[:4] + [lines[5], lines[4]] + lines[6:]
    assert findings(swapped)[0] == [
        ("seq", "line 5: seq follows seq 3", 4, at(swapped, 4)),
        ("link", f"line 5: prev {_short(h[4])} is not the hash of the line before (seq 3, {_short(h[3])})", 5,
         at(swapped, 4)),
        ("seq", "line 6: seq follows seq 5", 4, at(swapped, 5)),
        ("link", f"line 6: prev {_short(h[3])} is not the hash of the line before (seq 5, {_short(h[5])})", 4,
         at(swapped, 5)),
        ("seq", "line 7: seq follows seq 4", 5, at(swapped, 6)),
        ("link", f"line 7: prev {_short(h[5])} is not the hash of the line before (seq 4, {_short(h[4])})", 6,
         at(swapped, 6)),
    ]


def test_a_repeated_line(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    twice = lines[:5] + [lines[4]] + lines[5:]
    h = [x["hash"] for x in lines]
    assert findings(twice)[0] == [
        ("seq", "line 6: seq follows seq 4", 4, at(twice, 5)),
        ("link", f"line 6: prev {_short(h[3])} is not the hash of the line before (seq 4, {_short(h[4])})", 4,
         at(twice, 5)),
    ]


def test_genesis_rules(tmp_path: Path) -> None:
    zero = "00" * 32
    grant = entry_line(0, zero, "grant", "owner", {"perms": ["read"], "principal": "p", "scope": "s"})
    genesis = entry_line(1, grant["hash"], "genesis", "owner", {"db_id": bytes(16), "format": 1})
    lines = [grant, genesis]
    found, _notes = findings(lines)
    assert found == [
        ("genesis", "line 1: seq 0 is not a genesis entry with a zero prev", 0, 0),
        ("genesis", "line 1: seq 0 is a grant entry, not genesis", 0, 0),
        ("genesis", "line 2: genesis entry after seq 0", 1, at(lines, 1)),
    ]
    linked = entry_line(0, "11" * 32, "genesis", "owner", {"db_id": bytes(16), "format": 1})
    assert findings([linked])[0] == [("genesis", "line 1: seq 0 is not a genesis entry with a zero prev", 0, 0)]


def test_a_bad_body(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    bad = entry_line(13, lines[-1]["hash"], "grant", "owner", {"perms": ["write", "read"], "principal": "p",
                                                                "scope": "s"})
    lines.append(bad)
    found, _notes = findings(lines)
    assert [(k, s, o) for k, _m, s, o in found] == [("body", 13, at(lines, 13))]
    assert found[0][1].startswith("line 14: ")


def test_payloads_and_erased_markers_where_none_belong(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    lines[1]["payload"] = {"reason": None}
    lines[1]["erased"] = True
    lines[12]["payload"] = {}
    found, _notes = findings(lines)
    assert found == [
        ("payload", "line 2: a grant line carries a payload", 1, at(lines, 1)),
        ("erased", "line 2: only a put can be marked erased", 1, at(lines, 1)),
        ("payload", "line 13: a checkpoint line carries a payload", 12, at(lines, 12)),
    ]


def test_forget_payloads(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    assert lines[11]["payload"] == {"reason": "asked to"}
    for ok in ({}, {"reason": None}):
        lines[11]["payload"] = ok
        assert findings(lines)[0] == []
    for bad in ({"reason": "x", "who": 1}, ["reason"], "asked to"):
        lines[11]["payload"] = bad
        assert findings(lines)[0] == [
            ("payload", "line 12: a forget's payload holds only its reason", 11, at(lines, 11))]


def test_erased_markers_of_the_forgotten_version(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    r1 = lines[3]
    assert r1["erased"] is True and r1["forgotten_by"]["seq"] == 11
    assert findings(lines)[0] == []
    where = at(lines, 3)
    for marker in ({"erased": False, "forgotten_by": r1["forgotten_by"]}, {"erased": True},
                   {"erased": True, "forgotten_by": "seq 11"}, {"erased": 1, "forgotten_by": r1["forgotten_by"]}):
        edited = [dict(x) for x in lines]
        del edited[3]["erased"], edited[3]["forgotten_by"]
        edited[3].update(marker)
        assert findings(edited)[0] == [
            ("erased", "line 4: malformed erased marker", 3, where),
            ("erased", "seq 3 is a version of record r1, which seq 11 forgets, but it is not marked erased", 3,
             None),
        ], marker
    wrong = dict(r1["forgotten_by"], agent="owner")
    lines[3]["forgotten_by"] = wrong
    assert findings(lines)[0] == [
        ("erased", "the erased marker of seq 3 does not name the forget at seq 11", 3, None)]
    lines[3]["forgotten_by"] = dict(wrong, agent="agent-1", seq=12)
    assert findings(lines)[0] == [
        ("erased", "the erased marker of seq 3 does not name the forget at seq 11", 3, None)]


def test_content_of_a_forgotten_version_in_the_export(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    lines[3]["payload"] = dict(lines[4]["payload"])  # some content: what matters is that there is any
    found, _notes = findings(lines)
    assert found[0] == ("erased", "line 4: marked erased, yet carries a payload", 3, at(lines, 3))
    assert ("erased", "line 12 forgets record r1, yet the export holds the content of its version at seq 3", 3,
            None) in found
    del lines[3]["erased"], lines[3]["forgotten_by"]
    found, _notes = findings(lines)
    assert [(k, m, s, o) for k, m, s, o in found if k == "erased"] == [
        ("erased", "line 12 forgets record r1, yet the export holds the content of its version at seq 3", 3,
         None),
        ("erased", "seq 3 is a version of record r1, which seq 11 forgets, but it is not marked erased", 3,
         None),
    ]


def test_a_version_marked_erased_that_nothing_forgets(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    x = lines[4]
    del x["payload"]
    x["erased"] = True
    x["forgotten_by"] = {"seq": 11, "agent": "agent-1", "ts": lines[11]["ts"]}
    r = report_of(lines)
    assert [(p.kind, p.message, p.seq, p.offset) for p in r.problems] == [
        ("erased", "seq 4 is marked erased by seq 11, but no later line forgets its record", 4, None)]
    assert r.erased == 1
    cut = lines[:11]  # the forget of r1 is cut off: r1's marker names nothing left
    assert findings(cut)[0] == [
        ("erased", "seq 3 is marked erased by seq 11, but no later line forgets its record", 3, None),
        ("erased", "seq 4 is marked erased by seq 11, but no later line forgets its record", 4, None),
    ]


def test_an_export_without_content_is_sound(tmp_path: Path) -> None:
    lines = exported(tmp_path, include_content=False)
    r = report_of(lines, pubkey=PUB)
    assert (r.ok, r.erased, r.checkpoints, r.notes) == (True, 1, 1, ())


def test_put_payloads_that_are_not_well_formed(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    good = dict(lines[4]["payload"])
    lacks = "payload lacks a 16-byte hex salt or base64 packed bytes"
    cases: list[tuple[Any, str]] = [
        ("text", "payload is not an object"),
        (dict(good, salt=good["salt"][:-2]), lacks),
        (dict(good, salt=good["salt"] + "00"), lacks),
        (dict(good, salt=16), lacks),
        (dict(good, salt="zz" * 16), lacks),
        (dict(good, packed=good["packed"] + "!"), lacks),
        (dict(good, packed=None), lacks),
        ({k: v for k, v in good.items() if k != "packed"}, lacks),
    ]
    for payload, message in cases:
        lines[4]["payload"] = payload
        assert findings(lines)[0] == [("payload", f"line 5: {message}", 4, at(lines, 4))], payload
    lines[4]["payload"] = good
    assert findings(lines)[0] == []


def test_put_payload_fields_that_do_not_match_the_packed_bytes(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    good = dict(lines[4]["payload"])
    content_msg = 'payload "content" does not match packed'
    cases: list[tuple[dict[str, Any], list[str]]] = [
        (dict(good, content="other"), [content_msg]),
        ({k: v for k, v in good.items() if k != "content"}, [content_msg]),
        (dict(good, content_b64=base64.b64encode(good["content"].encode()).decode()), [content_msg]),
        (dict(good, tags=["all"]), ['payload "tags" do not match packed']),
        (dict(good, metadata={"i": 5}), ['payload "metadata" does not match packed']),
        (dict(good, content="x", tags=[], metadata={}), [content_msg, 'payload "tags" do not match packed',
                                                         'payload "metadata" does not match packed']),
    ]
    for payload, messages in cases:
        lines[4]["payload"] = payload
        assert findings(lines)[0] == [("payload", f"line 5: {m}", 4, at(lines, 4)) for m in messages], payload


def test_binary_content_is_shown_as_base64(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    tx1 = lines[9]
    good = dict(tx1["payload"])
    assert base64.b64decode(good["content_b64"]) == b"\x00\x01binary" and "content" not in good
    b64_msg = 'payload "content_b64" does not match packed'
    for payload in (dict(good, content_b64=base64.b64encode(b"\x00\x01binarY").decode()),
                    dict(good, content_b64="not base64!"), dict(good, content_b64=7),
                    dict(good, content_b64=good["content_b64"][:4] + "!" + good["content_b64"][4:]),  # never skipped
                    {k: v for k, v in good.items() if k != "content_b64"},
                    dict(good, content="\x00\x01binary")):
        tx1["payload"] = payload
        assert findings(lines)[0] == [("payload", f"line 10: {b64_msg}", 9, at(lines, 9))], payload


def test_a_forged_packed_payload(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    p = lines[4]["payload"]
    content, _tags, metadata = msgpack.unpackb(base64.b64decode(p["packed"]), raw=False)
    p["packed"] = base64.b64encode(msgpack.packb([content, ["tX"], metadata])).decode()
    p["tags"] = ["tX"]
    assert findings(lines)[0] == [(
        "payload", "line 5: payload digest SHA-256(salt + packed) does not match the put's digest", 4,
        at(lines, 4))]
    p["packed"] = base64.b64encode(b"\xc1").decode()
    found, _notes = findings(lines)
    assert found[0] == ("payload", "line 5: payload digest SHA-256(salt + packed) does not match the put's "
                        "digest", 4, at(lines, 4))
    assert found[1][1].startswith("line 5: packed record fields do not decode") and len(found) == 2


def test_checkpoints_in_an_export(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    cp = lines[12]
    assert findings(lines[:12], pubkey=PUB)[0] == [
        ("unsigned", "no checkpoint in the export is signed by the given key", None, None)]
    assert findings(lines[:12])[0] == []
    late = entry_line(13, cp["hash"], "grant", "owner", {"perms": ["read"], "principal": "m", "scope": "*"})
    later = entry_line(14, late["hash"], "grant", "owner", {"perms": ["read"], "principal": "n", "scope": "*"})
    assert findings([*lines, late, later], pubkey=PUB)[0] == [
        ("unsigned", "entries seq 13..14 follow the last checkpoint signed by the given key", 13, None)]
    assert findings([*lines, late, later])[0] == []
    r = report_of(lines, pubkey=b"\x07" * 32)
    assert [(p.kind, p.seq, p.offset) for p in r.problems] == [
        ("checkpoint-key", 12, at(lines, 12)), ("unsigned", None, None)]
    assert r.problems[0].message == f"line 13: checkpoint signed by key {PUB.hex()}, not the given key"
    assert r.checkpoints == 0


def test_a_checkpoint_of_another_database(tmp_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    head = b.head
    body = sign_checkpoint(SEED, b"\x09" * 16, head.seq, head.hash)
    b.add("checkpoint", "owner", body)
    lines = exported(tmp_path, b)
    assert findings(lines)[0] == [(
        "checkpoint", f"line 3: checkpoint names db_id {'09' * 16}, not {b.db_id.hex()}", 2, at(lines, 2))]
    # exported from seq 1 on, there is no genesis to name the database: the checkpoint names it
    r = report_of(lines[1:], pubkey=PUB)
    assert (r.ok, r.checkpoints) == (True, 1)


def test_a_checkpoint_after_a_late_start_is_still_judged_by_the_first_db_id(tmp_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.checkpoint()
    head = b.head
    b.add("checkpoint", "owner", sign_checkpoint(SEED, b"\x09" * 16, head.seq, head.hash))
    lines = exported(tmp_path, b)[1:]
    assert findings(lines)[0] == [(
        "checkpoint", f"line 3: checkpoint names db_id {'09' * 16}, not {b.db_id.hex()}", 3, at(lines, 2))]


def test_bad_pubkeys_are_refused() -> None:
    for key in (b"\x00" * 31, b"\x00" * 33, "00" * 32, bytearray(32)):
        with pytest.raises(InvalidInput, match="^pubkey must be a raw 32-byte Ed25519 public key$"):
            verify_export(io.StringIO(""), pubkey=key)  # type: ignore[arg-type]


def test_progress_over_a_long_export(tmp_path: Path) -> None:
    lines = exported(tmp_path)
    text = text_of(lines) + "\n" * 8200  # blank lines count as lines, but hold nothing to check
    path = tmp_path / "audit.jsonl"
    path.write_text(text)
    calls: list[tuple[int, int]] = []
    r = verify_export(path, progress=lambda done, total: calls.append((done, total)))
    assert r.ok
    n = len(text)
    first = len(text_of(lines)) + (4096 - 1 - len(lines))  # the offset of line 4096
    assert calls == [(first, n), (first + 4096, n), (n, n)]
    calls.clear()
    assert verify_export(io.StringIO(text), progress=lambda d, t: calls.append((d, t))).ok
    assert calls == []  # a stream's size is not known


class _FailingStream:
    name = "the-stream"

    def __iter__(self) -> Any:
        yield b'{"seq": 0}\n'
        raise OSError(5, "Input/output error")


def test_a_read_error_is_raised_as_unreadable() -> None:
    with pytest.raises(UnreadableExport, match="^cannot read the-stream: Input/output error$"):
        verify_export(_FailingStream())  # type: ignore[arg-type]


def test_an_entry_nested_too_deeply_to_check_is_a_finding(tmp_path: Path) -> None:
    """An entry whose body msgpack reads (about a thousand levels deep, under msgpack's own limit) but
    that is too deep to check is named as such, with its seq and line offset; nothing crashes."""
    lines: list[Any] = exported(tmp_path)
    last = lines[-1]
    depth = 1010
    body = b"\x81" + msgpack.packb("x") + b"\x91" * depth + b"\xc0"  # {"x": [[[...[nil]...]]]}
    raw = (b"\x97" + b"".join(msgpack.packb(v, use_bin_type=True) for v in (
        1, last["seq"] + 1, 1, bytes.fromhex(last["hash"]), "grant", "owner")) + body)
    lines.append({"seq": last["seq"] + 1, "entry": base64.b64encode(raw).decode(),
                  "hash": hashlib.sha256(raw).hexdigest()})
    found, _notes = findings(lines)
    n = len(lines)
    assert found == [("line", f"line {n}: nested too deeply to check", last["seq"] + 1, at(lines, n - 1))]
