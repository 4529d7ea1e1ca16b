"""verify_db on log files: every kind of damage and tampering is found, with the right seq and offset, all
at once; and on damaged and forged logs, every finding it reports, exactly (kind, message, seq and byte
offset), every note, and nothing more; a clean log reports none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.erase_journal import write_erase_journal
from helpers.logs import (
    SEED,
    TS0,
    Built,
    LogBuilder,
    erase_slot,
    fix_frame_crc,
    fix_slot_crc,
    pubkey_hex,
    sample_log,
)
from helpers.snapshots import replace, tamper

import mnemo.audit as audit
from mnemo.audit import UnreadableDatabase, sign_checkpoint, verify_db
from mnemo.chain.codec import encode_put_payload, make_entry, pack_record_fields
from mnemo.chain.rules import short_hash as _short
from mnemo.errors import InvalidInput
from mnemo.record import Problem, VerifyReport
from mnemo.storage.file import reader as filelog
from mnemo.storage.file.framing import HEADER_SIZE, encode_frame

PUB = bytes.fromhex(pubkey_hex())


def seq_of(built: Built, op: str, rid: str | None = None, ver: int = 1) -> int:
    for e in built.entries:
        if e.op == op and (rid is None or (e.body.get("id") == rid and e.body.get("ver") == ver)):
            return e.seq
    raise AssertionError(f"no {op} {rid}")


def kinds(report: VerifyReport) -> set[tuple[str, int | None]]:
    return {(p.kind, p.seq) for p in report.problems}


def check(path: Path, data: bytes | bytearray, **kw: object) -> VerifyReport:
    path.write_bytes(bytes(data))
    report = verify_db(path, **kw)  # type: ignore[arg-type]
    assert report.ok == (not report.problems)
    return report


def test_clean_log_verifies(db_path: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    r = check(db_path, built.data, pubkey=PUB)
    assert r.ok, r.problems
    last = built.entries[-1]
    assert (r.entries, r.head_seq, r.head_hash) == (len(built.entries), last.seq, last.hash.hex())
    assert r.checkpoints == 1
    assert r.erased == 0 and any("erasure pending" in n for n in r.notes)
    assert r.to_json()["ok"] is True


def test_erased_slot_of_forgotten_record_is_fine(db_path: Path) -> None:
    _b, built = sample_log()
    erase_slot(built.data, built, seq_of(built, "put", "r1"))
    r = check(db_path, built.data)
    assert r.ok, r.problems
    assert r.erased == 1
    assert not any("pending" in n for n in r.notes)


def test_erased_slot_of_live_record_is_a_problem(db_path: Path) -> None:
    _b, built = sample_log()
    s = seq_of(built, "put", "r2")
    erase_slot(built.data, built, s)
    r = check(db_path, built.data)
    assert kinds(r) == {("erased", s)}
    assert r.problems[0].offset == built.slots[s][0]


def test_erased_slot_before_a_reput_of_the_same_id(db_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.forget("a", ["x"])
    b.put("a", "x", "again")  # version 1 of a new record that reuses the id
    built = b.build()
    erase_slot(built.data, built, 1)
    assert check(db_path, built.data).ok
    erase_slot(built.data, built, 3)
    assert kinds(check(db_path, built.data)) == {("erased", 3)}


def test_changed_content_byte(db_path: Path) -> None:
    _b, built = sample_log()
    s = seq_of(built, "put", "r3")
    off, length = built.slots[s]
    i = built.data.index(b"memory number 3", off, off + length)
    built.data[i] ^= 0x01
    r = check(db_path, built.data)
    assert kinds(r) == {("slot", s)}
    assert r.problems[0].offset == off
    fix_slot_crc(built.data, off, length)  # a forger who also fixes the slot checksum
    r = check(db_path, built.data)
    assert kinds(r) == {("payload", s)}
    assert "digest" in r.problems[0].message


def test_changed_tag(db_path: Path) -> None:
    b, built = sample_log()
    s = seq_of(built, "put", "r4")
    off, length = built.slots[s]
    old = bytes(built.data[off + 4: off + length])
    salt = old[:16]
    packed = pack_record_fields("memory number 4", ["all", "t1"], {"i": 4})
    forged = pack_record_fields("memory number 4", ["all", "tX"], {"i": 4})
    assert encode_put_payload(salt, packed) == old and len(forged) == len(packed)
    built.data[off + 4: off + length] = encode_put_payload(salt, forged)
    fix_slot_crc(built.data, off, length)
    r = check(db_path, built.data)
    assert kinds(r) == {("payload", s)}


def test_changed_body_field(db_path: Path) -> None:
    _b, built = sample_log()
    s = seq_of(built, "put", "r2")
    start, end = built.frame_spans[built.frame_of[s]]
    raw = built.entries[s].raw
    i = built.data.index(raw, start, end)
    j = raw.index(b"agent:agent-1")
    built.data[i + j + len("agent:")] = ord("A")  # scope agent:Agent-1
    r = check(db_path, built.data)
    assert ("frame-checksum", s) in kinds(r)
    assert ("link", s + 1) in kinds(r)
    assert next(p for p in r.problems if p.kind == "frame-checksum").offset == start
    fix_frame_crc(built.data, start)  # a forger who recomputes the frame checksum
    r = check(db_path, built.data)
    assert kinds(r) == {("link", s + 1)}
    assert f"seq {s}" in r.problems[0].message


def test_changed_size_is_caught_by_the_payload(db_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "hello")
    built = b.build()
    start, end = built.frame_spans[1]
    i = built.data.index(b"\xa4size\x05", start, end)
    built.data[i + 5] = 6
    fix_frame_crc(built.data, start)
    r = check(db_path, built.data)
    assert kinds(r) == {("payload", 1)}
    assert "bytes" in r.problems[0].message


def test_swapped_pair_of_entries(db_path: Path) -> None:
    _b, built = sample_log()
    k = 4
    (a0, a1), (b0, b1) = built.frame_spans[built.frame_of[k]], built.frame_spans[built.frame_of[k + 1]]
    assert a1 == b0
    data = built.data[:a0] + built.data[b0:b1] + built.data[a0:a1] + built.data[b1:]
    r = check(db_path, data)
    seqs = {p.seq for p in r.problems}
    assert {k, k + 1} <= seqs
    assert {p.kind for p in r.problems} == {"seq", "link"}


def test_deleted_entry(db_path: Path) -> None:
    _b, built = sample_log()
    k = 5
    a0, a1 = built.frame_spans[built.frame_of[k]]
    r = check(db_path, built.data[:a0] + built.data[a1:])
    assert kinds(r) == {("seq", k), ("link", k + 1)}
    assert all(p.offset == a0 + 24 for p in r.problems)  # the entry that now stands there


def test_truncated_tail(db_path: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    head = built.entries[-1]
    cut = built.frame_spans[-3][0]  # the last two frames: the forget and the checkpoint
    r = check(db_path, built.data[:cut])
    assert r.ok  # a clean cut at a frame boundary is invisible on its own ...
    r = check(db_path, built.data[:cut], expect_head=(head.seq, head.hash.hex()))
    assert kinds(r) == {("expect-head", head.seq)}  # ... but not against a head saved earlier
    assert "truncated" in r.problems[0].message
    r = check(db_path, built.data[:cut], pubkey=PUB)
    assert kinds(r) == {("unsigned", None)}  # nor with the signing key: no signed checkpoint is left
    r = check(db_path, built.data[:-5])  # a cut inside the last frame: a torn tail
    assert kinds(r) == {("torn-tail", head.seq)}
    assert r.problems[0].offset == built.frame_spans[-1][0]


def test_truncated_after_a_checkpoint(db_path: Path) -> None:
    b, _ = sample_log(checkpoint=True)
    b.put("agent-1", "late", "after the checkpoint")
    b.checkpoint()
    built = b.build()
    cut = built.frame_spans[-1][0]  # the final checkpoint goes; the put before it stays
    r = check(db_path, built.data[:cut], pubkey=PUB)
    last_signed = built.entries[-3].seq
    assert kinds(r) == {("unsigned", last_signed + 1)}


def test_rewritten_head(db_path: Path) -> None:
    _b, built = sample_log()
    head = built.entries[-1]
    r = check(db_path, built.data, expect_head=(head.seq, "ab" * 32))
    assert kinds(r) == {("expect-head", head.seq)}
    assert "rewritten" in r.problems[0].message
    mid = built.entries[5]
    assert check(db_path, built.data, expect_head=(mid.seq, mid.hash.hex())).ok


def test_appended_forged_entry(db_path: Path) -> None:
    b, _ = sample_log(checkpoint=True)
    forged = b.put("agent-1", "forged", "I was never written by the owner")
    built = b.build()
    assert check(db_path, built.data).ok  # a well-formed append is indistinguishable without a key ...
    r = check(db_path, built.data, pubkey=PUB)
    assert kinds(r) == {("unsigned", forged.seq)}  # ... but it is not covered by any signature
    # a forger who does not know the chain's head: the link breaks
    bad = make_entry(forged.seq, forged.ts_ns, b"\x11" * 32, "put", "agent-1", forged.body)
    data = built.data[: built.frame_spans[-1][0]] + encode_frame([(bad.raw, b.items[-1][1])])
    assert kinds(check(db_path, data)) == {("link", forged.seq)}


def test_forged_checkpoint_signature(db_path: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    cp = built.entries[-1]
    start, end = built.frame_spans[-1]
    i = built.data.index(cp.body["sig"], start, end)
    built.data[i + 10] ^= 0xFF
    fix_frame_crc(built.data, start)
    r = check(db_path, built.data)
    assert kinds(r) == {("checkpoint-signature", cp.seq)}
    r = check(db_path, built.data, pubkey=PUB)
    assert ("checkpoint-signature", cp.seq) in kinds(r)


def test_checkpoint_by_another_key(db_path: Path) -> None:
    b, _ = sample_log()
    cp = b.checkpoint(key=b"\x07" * 32)
    built = b.build()
    assert check(db_path, built.data).ok
    r = check(db_path, built.data, pubkey=PUB)
    assert kinds(r) == {("checkpoint-key", cp.seq), ("unsigned", None)}


def test_checkpoint_over_the_wrong_head(db_path: Path) -> None:
    b, _ = sample_log()
    body = audit.sign_checkpoint(SEED, b.db_id, 2, b.items[2][0].hash)  # a valid signature, replayed
    e = b.add("checkpoint", "owner", body)
    r = check(db_path, b.build().data)
    assert kinds(r) == {("checkpoint", e.seq)}


def test_every_problem_is_reported(db_path: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    s1, s2 = seq_of(built, "put", "r2"), seq_of(built, "put", "r5")
    erase_slot(built.data, built, s1)
    off, _ = built.slots[s2]
    built.data[off + 10] ^= 1
    head = built.entries[-1]
    r = check(db_path, built.data[:-3], pubkey=PUB, expect_head=(head.seq, head.hash.hex()))
    assert kinds(r) == {("erased", s1), ("slot", s2), ("torn-tail", head.seq), ("expect-head", head.seq),
                        ("unsigned", None)}
    offsets = [p.offset for p in r.problems if p.offset is not None]
    assert offsets == sorted(offsets)


def test_garbage_in_the_middle_resyncs(db_path: Path) -> None:
    _b, built = sample_log()
    k = 3
    a0, a1 = built.frame_spans[built.frame_of[k]]
    built.data[a0: a0 + 4] = b"XXXX"  # the frame's magic: its entry is lost
    s = seq_of(built, "put", "r5")
    erase_slot(built.data, built, s)  # and a later problem is still found
    r = check(db_path, built.data)
    assert kinds(r) == {("bad-frame", k), ("erased", s)}
    p = r.problems[0]
    assert p.offset == a0 and f"entries seq {k}..{k}" in p.message
    assert r.entries == len(built.entries) - 1


def test_inserted_garbage_between_frames(db_path: Path) -> None:
    _b, built = sample_log()
    a0 = built.frame_spans[4][0]
    data = built.data[:a0] + b"MNFR garbage that is no frame" + built.data[a0:]
    r = check(db_path, data)
    assert [(p.kind, p.offset) for p in r.problems] == [("bad-frame", a0)]
    assert r.entries == len(built.entries)


def test_bad_last_frame_is_reported(db_path: Path) -> None:
    _b, built = sample_log()
    start, end = built.frame_spans[-1]
    built.data[end - 2] ^= 0xFF  # the trailer's end magic
    r = check(db_path, built.data)
    assert kinds(r) == {("bad-frame", built.entries[-1].seq)}


def test_bad_header_is_a_problem_not_an_error(db_path: Path) -> None:
    _b, built = sample_log()
    built.data[0:8] = b"NOTMNEMO"
    r = check(db_path, built.data)
    assert kinds(r) == {("header", None)}
    assert r.problems[0].offset == 0 and r.entries == len(built.entries)
    built.data[0:8] = b"MNEMOLOG"
    built.data[12] ^= 1  # db_id: the header checksum fails
    assert kinds(check(db_path, built.data)) == {("header", None)}


def test_header_and_genesis_disagree(db_path: Path) -> None:
    b = LogBuilder(db_id=b"\x01" * 16)
    built = b.build()
    built.data[:HEADER_SIZE] = LogBuilder(db_id=b"\x02" * 16).build().data[:HEADER_SIZE]
    assert kinds(check(db_path, built.data)) == {("genesis", 0)}


def test_not_a_mnemo_file(db_path: Path) -> None:
    r = check(db_path, b"hello, world\n" * 10)
    assert {p.kind for p in r.problems} == {"header", "bad-frame"}
    r = check(db_path, b"short")
    assert kinds(r) == {("header", None)}
    r = check(db_path, b"")
    assert kinds(r) == {("header", None)} and "empty" in r.problems[0].message


def test_header_only_has_no_genesis(db_path: Path) -> None:
    built = LogBuilder().build()
    r = check(db_path, built.data[:HEADER_SIZE])
    assert kinds(r) == {("genesis", None)}


def test_unreadable_files_raise(tmp_path: Path) -> None:
    with pytest.raises(UnreadableDatabase, match="cannot open"):
        verify_db(tmp_path / "missing.db")
    with pytest.raises(UnreadableDatabase):
        verify_db(tmp_path)


def test_genesis_rules(db_path: Path) -> None:
    b = LogBuilder()
    e = make_entry(0, 1, b"\x00" * 32, "grant", "x", {"perms": ["read"], "principal": "p", "scope": "s"})
    b.items[0] = (e, None)
    b.add("genesis", "owner", {"db_id": b.db_id, "format": 1})
    r = check(db_path, b.build().data)
    assert ("genesis", 0) in kinds(r) and ("genesis", 1) in kinds(r)


def test_wrong_version_and_bad_body(db_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.versions["x"] = 5
    bad_ver = b.put("a", "x", "two")
    bad_body = b.add("grant", "owner", {"perms": ["write", "read"], "principal": "p", "scope": "s"})
    unknown = b.add("revoke", "owner", {"perms": [], "principal": "p", "scope": "s", "extra": 1})
    r = check(db_path, b.build().data)
    assert kinds(r) == {("version", bad_ver.seq), ("body", bad_body.seq), ("body", unknown.seq)}


def test_put_without_payload(db_path: Path) -> None:
    b = LogBuilder()
    e = b.put("a", "x", "one")
    b.items[-1] = (e, None)
    r = check(db_path, b.build().data)
    assert kinds(r) == {("payload", e.seq)}
    b.forget("a", ["x"])  # a forgotten version without a payload: compacted away
    assert check(db_path, b.build().data).ok


def test_interrupted_erasure_listed_in_the_journal(db_path: Path) -> None:
    built = sample_log_appended()
    s = seq_of(built, "put", "r1")
    off, length = built.slots[s]
    built.data[off: off + length // 2] = bytes(length // 2)  # half zeroed: neither ok nor erased
    r = check(db_path, built.data)
    assert kinds(r) == {("slot", s)}
    write_erase_journal(str(db_path) + ".erase", bytes(built.data[12:28]), [(off, length)])
    r = check(db_path, built.data)
    assert r.ok, r.problems
    assert any("part-way erased" in n for n in r.notes) and any(".erase" in n for n in r.notes)
    # a journal does not excuse damage to a record nobody forgot
    s2 = seq_of(built, "put", "r2")
    off2, len2 = built.slots[s2]
    built.data[off2 + 7] ^= 1
    write_erase_journal(str(db_path) + ".erase", bytes(built.data[12:28]), [(off, length), (off2, len2)])
    assert kinds(check(db_path, built.data)) == {("slot", s2)}


def test_multi_entry_frames_and_offsets(db_path: Path) -> None:
    b = LogBuilder()
    with b.frame():
        for i in range(5):
            b.put("a", f"x{i}", f"content {i}")
    built = b.build()
    s = 3
    off, length = built.slots[s]
    built.data[off + 8] ^= 1
    r = check(db_path, built.data)
    assert kinds(r) == {("slot", s)} and r.problems[0].offset == off


def test_small_chunks_give_the_same_report(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _b, built = sample_log(n_puts=40, checkpoint=True)
    erase_slot(built.data, built, seq_of(built, "put", "r7"))
    a0 = built.frame_spans[20][0]
    built.data[a0 + 30] ^= 1
    db_path.write_bytes(bytes(built.data))
    expected = verify_db(db_path, pubkey=PUB)
    assert not expected.ok
    for chunk in (7, 64, 333):
        monkeypatch.setattr(filelog, "CHUNK", chunk)
        assert verify_db(db_path, pubkey=PUB) == expected


def test_progress_is_reported(db_path: Path) -> None:
    _b, built = sample_log()
    db_path.write_bytes(bytes(built.data))
    calls: list[tuple[int, int]] = []
    verify_db(db_path, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (len(built.data), len(built.data))
    assert all(d <= t for d, t in calls)


def test_bad_arguments(db_path: Path) -> None:
    _b, built = sample_log()
    db_path.write_bytes(bytes(built.data))
    with pytest.raises(InvalidInput):
        verify_db(db_path, expect_head=(1, "xyz"))
    with pytest.raises(InvalidInput):
        verify_db(db_path, pubkey=b"short")


def test_problem_json_shape(db_path: Path) -> None:
    _b, built = sample_log()
    built.data[-1] ^= 1
    r = check(db_path, built.data)
    j = r.to_json()
    assert set(j) == {"ok", "entries", "head_seq", "head_hash", "erased", "checkpoints", "problems", "notes"}
    assert j["ok"] is False
    assert set(j["problems"][0]) == {"kind", "message", "seq", "offset"}
    assert isinstance(r.problems[0], Problem)


def test_verify_never_writes(db_path: Path) -> None:
    _b, built = sample_log()
    built.data[-7] ^= 1
    db_path.write_bytes(bytes(built.data))
    before = db_path.read_bytes()
    verify_db(db_path)
    assert db_path.read_bytes() == before
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]


def test_a_client_database_verifies(db_path: Path) -> None:
    from mnemo import MnemoClient

    with MnemoClient(db_path, "agent-1", durability="none", signing_key=SEED) as c:
        r1 = c.remember("hello", tags=["a"], metadata={"k": [1, 2]})
        c.remember(b"\x00binary", tags=["b"])
        c.update(r1.id, content="hello again")
        with c.transaction():
            c.remember("in a transaction")
            c.remember("also")
        c.grant("bob", "agent:agent-1", ["read"])
        c.forget([r1.id], reason="asked")
        head = c.head
    r = verify_db(db_path, pubkey=PUB, expect_head=head)
    assert r.ok, r.problems
    assert r.erased == 2 and r.checkpoints >= 1


def test_a_frame_appended_during_verification_is_not_torn(db_path: Path) -> None:
    _b, built = sample_log()
    full = bytes(built.data)
    db_path.write_bytes(full[:-10])  # a writer is in the middle of appending the last frame ...

    def finish_the_write(done: int, total: int) -> None:
        if db_path.stat().st_size < len(full):
            with open(db_path, "ab") as f:  # ... and completes it while the verifier reads
                f.write(full[-10:])

    r = verify_db(db_path, progress=finish_the_write)
    assert r.ok, r.problems
    assert r.entries == len(built.entries)


# -- every finding, exactly ------------------------------------------------------------------------------

PENDING = ("1 forgotten versions still hold their payload: erasure pending (the next writer to open the log "
           "completes it)")


FH = 24  # a frame header: an entry of a frame's first slot starts this far into it


Finding = tuple[str, str, int | None, int | None]


def sample_log_appended() -> Built:
    """sample_log with a put after its forget: a log whose last frame forgets nothing, so that a slot
    failing its checksum is damage unless a journal names it."""
    b, _built = sample_log()
    b.put("agent-1", "later", "written after the forget")
    return b.build()


def findings(path: Path, data: bytes | bytearray, **kw: Any) -> tuple[list[Finding], list[str]]:
    """Every problem verify_db reports, in its order, and its notes; the file is left as it was."""
    path.write_bytes(bytes(data))
    r = verify_db(path, **kw)
    assert path.read_bytes() == bytes(data)
    assert r.ok == (not r.problems)
    return [(p.kind, p.message, p.seq, p.offset) for p in r.problems], list(r.notes)


def entry_offset(built: Built, seq: int) -> int:
    """The offset of an entry's length header: where verify_db places the findings about the entry."""
    start, end = built.frame_spans[built.frame_of[seq]]
    return built.data.index(built.entries[seq].raw, start, end) - 8


def test_a_clean_log_reports_nothing_but_its_pending_erasure(db_path: Path) -> None:
    _b, built = sample_log()
    path = db_path
    path.write_bytes(bytes(built.data))
    r = verify_db(path)
    assert r.ok and r.problems == ()
    assert r.notes == (PENDING,)
    assert (r.entries, r.head_seq, r.head_hash, r.erased, r.checkpoints) == (
        12, 11, built.entries[-1].hash.hex(), 0, 0)


def test_checkpoint_notes_with_and_without_the_key(db_path: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    assert findings(db_path, built.data) == ([], [
        PENDING,
        f"checkpoint signatures were checked against the keys they name ({PUB.hex()}); give the expected "
        "public key to check who signed them",
    ])
    assert findings(db_path, built.data, pubkey=PUB) == ([], [PENDING])


def test_a_header_whose_checksum_fails(db_path: Path) -> None:
    _b, built = sample_log()
    built.data[12] ^= 1  # a byte of the db_id
    assert findings(db_path, built.data) == (
        [("header", "bad file header: file header checksum mismatch", None, 0)], [PENDING])


def test_the_first_frame_lost_to_damage(db_path: Path) -> None:
    _b, built = sample_log()
    built.data[HEADER_SIZE] ^= 0xFF  # the genesis frame's magic
    end = built.frame_spans[0][1]
    assert findings(db_path, built.data) == ([(
        "bad-frame", f"bad frame magic at offset 32; {end - 32} bytes skipped up to the next good frame at "
        f"offset {end}; entries seq 0..0 are unreadable", 0, 32,
    )], [PENDING])


def test_a_middle_frame_lost_to_damage(db_path: Path) -> None:
    _b, built = sample_log()
    a0, a1 = built.frame_spans[4]
    built.data[a0:a0 + 4] = b"XXXX"
    assert findings(db_path, built.data) == ([(
        "bad-frame", f"bad frame magic at offset {a0}; {a1 - a0} bytes skipped up to the next good frame at "
        f"offset {a1}; entries seq 4..4 are unreadable", 4, a0,
    )], [PENDING])


def test_two_frames_lost_to_damage(db_path: Path) -> None:
    _b, built = sample_log()
    a0, _ = built.frame_spans[4]
    _, b1 = built.frame_spans[5]
    built.data[a0:a0 + 4] = b"XXXX"
    built.data[b1 - 4:b1] = b"XXXX"  # the end magic of the next frame: it is lost too
    assert findings(db_path, built.data) == ([(
        "bad-frame", f"bad frame magic at offset {a0}; {b1 - a0} bytes skipped up to the next good frame at "
        f"offset {b1}; entries seq 4..5 are unreadable", 4, a0,
    )], [PENDING])


def test_garbage_between_frames_loses_no_entry(db_path: Path) -> None:
    _b, built = sample_log()
    a0 = built.frame_spans[4][0]
    junk = b"not a frame at all"
    data = built.data[:a0] + junk + built.data[a0:]
    assert findings(db_path, data) == ([(
        "bad-frame", f"bad frame magic at offset {a0}; {len(junk)} bytes skipped up to the next good frame at "
        f"offset {a0 + len(junk)}", 4, a0,
    )], [PENDING])


def test_garbage_after_the_last_frame(db_path: Path) -> None:
    _b, built = sample_log()
    n = len(built.data)
    junk = b"MNFR junk junk junk junk junk junk junk junk"
    assert findings(db_path, built.data + junk) == ([(
        "bad-frame", f"impossible frame lengths at offset {n}; no readable frame follows ({len(junk)} bytes to "
        "the end of the file)", 12, n,
    )], [PENDING])


def test_a_torn_last_frame(db_path: Path) -> None:
    _b, built = sample_log()
    start = built.frame_spans[-1][0]
    data = built.data[:-5]
    assert findings(db_path, data) == ([(
        "torn-tail", f"the last frame is incomplete ({len(data) - start} bytes at the end of the file): a torn "
        f"write that the next writer to open the log cuts off (the file ends inside the frame at offset {start})",
        11, start,
    )], [])


def test_a_changed_frame_checksum_names_the_frame_and_its_entries(db_path: Path) -> None:
    _b, built = sample_log()
    a0, a1 = built.frame_spans[4]  # one entry: seq 4
    built.data[a1 - 8] ^= 1
    m0, m1 = built.frame_spans[built.frame_of[9]]  # the transaction frame: seq 9 and 10
    built.data[m1 - 8] ^= 1
    changed = "its entries were changed after it was written"
    assert findings(db_path, built.data) == ([
        ("frame-checksum", f"frame checksum mismatch at offset {a0} (seq 4): {changed}", 4, a0),
        ("frame-checksum", f"frame checksum mismatch at offset {m0} (seq 9..10): {changed}", 9, m0),
    ], [PENDING])


def _without_frames(built: Built, first: int, last: int) -> bytes:
    return bytes(built.data[:built.frame_spans[first][0]] + built.data[built.frame_spans[last][1]:])


def test_one_deleted_entry(db_path: Path) -> None:
    _b, built = sample_log()
    e = built.entries
    at = built.frame_spans[5][0] + FH
    assert findings(db_path, _without_frames(built, 5, 5)) == ([
        ("seq", "seq jumps from 4 to 6: entry 5 is missing", 5, at),
        ("link", f"prev of seq 6 is {_short(e[5].hash)}, but the entry before it (seq 4) hashes to "
         f"{_short(e[4].hash)}", 6, at),
    ], [PENDING])


def test_two_deleted_entries(db_path: Path) -> None:
    _b, built = sample_log()
    e = built.entries
    at = built.frame_spans[5][0] + FH
    assert findings(db_path, _without_frames(built, 5, 6)) == ([
        ("seq", "seq jumps from 4 to 7: entry 5..6 is missing", 5, at),
        ("link", f"prev of seq 7 is {_short(e[6].hash)}, but the entry before it (seq 4) hashes to "
         f"{_short(e[4].hash)}", 7, at),
    ], [PENDING])


def test_two_swapped_entries(db_path: Path) -> None:
    _b, built = sample_log()
    e = built.entries
    (a0, a1), (b0, b1) = built.frame_spans[4], built.frame_spans[5]
    data = built.data[:a0] + built.data[b0:b1] + built.data[a0:a1] + built.data[b1:]
    second = a0 + (b1 - b0) + FH
    assert findings(db_path, data) == ([
        ("seq", "seq jumps from 3 to 5: entry 4 is missing", 4, a0 + FH),
        ("link", f"prev of seq 5 is {_short(e[4].hash)}, but the entry before it (seq 3) hashes to "
         f"{_short(e[3].hash)}", 5, a0 + FH),
        ("seq", "seq 4 out of order (after seq 5)", 4, second),
        ("link", f"prev of seq 4 is {_short(e[3].hash)}, but the entry before it (seq 5) hashes to "
         f"{_short(e[5].hash)}", 4, second),
        ("link", f"prev of seq 6 is {_short(e[5].hash)}, but the entry before it (seq 4) hashes to "
         f"{_short(e[4].hash)}", 6, b1 + FH),
    ], [PENDING])


def test_a_put_with_a_bad_body_and_a_damaged_slot(db_path: Path) -> None:
    b = LogBuilder()
    e = b.put("a", "x", "hello")
    b.items.pop()
    b.frames.pop()
    body = dict(e.body, extra=1)
    b.add("put", "a", body, encode_put_payload(bytes(16), pack_record_fields("hello", [], {})))
    built = b.build()
    off, _length = built.slots[1]
    built.data[off + 6] ^= 1
    assert findings(db_path, built.data) == ([
        ("body", "put body has unknown extra", 1, entry_offset(built, 1)),
        ("slot", "payload slot checksum mismatch (seq 1)", 1, off),
    ], [])


def test_a_grant_with_a_bad_body_and_a_payload_slot(db_path: Path) -> None:
    """Only a put's slot is judged when its body is bad: a grant's slot is simply one it should not have."""
    b = LogBuilder()
    b.add("grant", "owner", {"perms": ["write", "read"], "principal": "p", "scope": "s"}, b"\x00" * 5)
    built = b.build()
    off, _length = built.slots[1]
    built.data[off + 6] ^= 1
    found, _notes = findings(db_path, built.data)
    assert [(k, s, o) for k, _m, s, o in found] == [("body", 1, entry_offset(built, 1))]


def test_genesis_with_a_prev_and_a_format_of_its_own(db_path: Path) -> None:
    b = LogBuilder()
    b.items[0] = (make_entry(0, 1, b"\x01" * 32, "genesis", "owner", {"db_id": b.db_id, "format": 2}), None)
    at = HEADER_SIZE + FH
    assert findings(db_path, b.build().data) == ([
        ("genesis", "genesis prev is not 32 zero bytes", 0, at),
        ("genesis", "genesis format 2, expected 1", 0, at),
    ], [])


def test_genesis_whose_db_id_is_not_the_headers(db_path: Path) -> None:
    built = LogBuilder(db_id=b"\x01" * 16).build()
    built.data[:HEADER_SIZE] = LogBuilder(db_id=b"\x02" * 16).build().data[:HEADER_SIZE]
    assert findings(db_path, built.data) == ([(
        "genesis", f"genesis db_id {'01' * 16} differs from the header's {'02' * 16}", 0, HEADER_SIZE + FH,
    )], [])


def test_a_second_genesis_and_a_log_that_starts_with_a_grant(db_path: Path) -> None:
    b = LogBuilder()
    e = make_entry(0, 1, b"\x00" * 32, "grant", "x", {"perms": ["read"], "principal": "p", "scope": "s"})
    b.items[0] = (e, None)
    b.add("genesis", "owner", {"db_id": b.db_id, "format": 1})
    built = b.build()
    assert findings(db_path, built.data) == ([
        ("genesis", "seq 0 is a grant entry, not genesis", 0, HEADER_SIZE + FH),
        ("genesis", "genesis entry at seq 1", 1, entry_offset(built, 1)),
    ], [])


def test_a_log_that_starts_after_seq_0(db_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    built = b.build()
    data = _without_frames(built, 0, 0)
    assert findings(db_path, data) == ([
        ("genesis", "the log starts at seq 1, not with genesis", 1, HEADER_SIZE + FH),
    ], [])


def test_versions_that_do_not_follow(db_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.versions["x"] = 5
    b.put("a", "x", "two")  # version 6 where 2 was due
    b.put("a", "x", "three")  # version 7 follows 6
    b.versions["y"] = 1
    b.put("a", "y", "first of y")  # version 2 of a new record
    built = b.build()
    assert findings(db_path, built.data) == ([
        ("version", "seq 2 puts version 6 of record x, expected 2", 2, entry_offset(built, 2)),
        ("version", "seq 4 puts version 2 of record y, expected 1", 4, entry_offset(built, 4)),
    ], [])


def test_a_record_put_twice_at_version_1_and_forgotten(db_path: Path) -> None:
    """Both versions hold their payload until the forget's erasure: the forget leaves two pending."""
    b = LogBuilder()
    b.put("a", "x", "one")
    b.versions.clear()
    b.put("a", "x", "one again")
    b.forget("a", ["x"])
    built = b.build()
    found, notes = findings(db_path, built.data)
    assert found == [("version", "seq 2 puts version 1 of record x, expected 2", 2, entry_offset(built, 2))]
    assert notes == ["2 forgotten versions still hold their payload: erasure pending (the next writer to open "
                     "the log completes it)"]


def test_a_put_payload_that_does_not_decode(db_path: Path) -> None:
    b = LogBuilder()
    e = b.put("a", "x", "one")
    b.items[-1] = (e, b"\x00" * 4)  # shorter than a salt
    built = b.build()
    off, length = built.slots[1]
    assert findings(db_path, built.data) == ([
        ("payload", "put payload does not decode: put payload is shorter than a salt and packed fields", 1, off),
    ], [])
    built = b.build()
    b.items[-1] = (e, None)
    b.put("a", "y", "two")
    built = b.build()
    off, length = built.slots[2]
    built.data[off + 20:off + length] = b"\xc1" * (length - 20)  # its packed fields are no msgpack
    fix_slot_crc(built.data, off, length)
    found, _notes = findings(db_path, built.data)
    assert found[1:] == [
        ("payload", "record y v1: payload digest SHA-256(salt + packed) does not match the put's digest", 2, off),
        ("payload", "record y v1: packed record fields do not decode: ", 2, off),
    ]


def test_a_changed_content_byte_under_a_fixed_slot_checksum(db_path: Path) -> None:
    _b, built = sample_log()
    off, length = built.slots[6]
    i = built.data.index(b"memory number 4", off, off + length)
    built.data[i] ^= 0x01
    found, _notes = findings(db_path, built.data)
    assert found == [("slot", "payload slot checksum mismatch (seq 6, record r4 v1)", 6, off)]
    fix_slot_crc(built.data, off, length)
    found, _notes = findings(db_path, built.data)
    assert found == [("payload", "record r4 v1: payload digest SHA-256(salt + packed) does not match the put's "
                      "digest", 6, off)]


def test_a_put_without_a_payload_and_a_grant_with_one(db_path: Path) -> None:
    b = LogBuilder()
    e = b.put("a", "x", "one")
    b.items[-1] = (e, None)
    g = b.grant("owner", "bob", "agent:a", ["read"])
    b.items[-1] = (g, b"\x00" * 8)
    built = b.build()
    off, _length = built.slots[2]
    empty_slot = built.frame_spans[1][0] + FH + 8 + len(e.raw)  # where its slot would begin
    assert findings(db_path, built.data) == ([
        ("payload", "seq 1 (record x) has no payload, but no later forget names the record", 1, empty_slot),
        ("payload", "a grant entry carries a payload slot (ok)", 2, off),
    ], [])


def test_an_erased_slot_no_forget_names(db_path: Path) -> None:
    _b, built = sample_log()
    erase_slot(built.data, built, 4)
    off, _length = built.slots[4]
    assert findings(db_path, built.data) == ([
        ("erased", "payload of seq 4 (record r2) is erased, but no later forget names the record", 4, off),
    ], [PENDING])


def test_forget_payloads_damaged_erased_or_malformed(db_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.forget("a", ["x"], reason="why")  # seq 2: its slot damaged
    b.put("a", "y", "two")
    b.forget("a", ["y"])  # seq 4: its slot erased
    b.put("a", "z", "three")
    b.add("forget", "a", {"ids": ["z"]}, b"\x81\xa3why\x01")  # seq 6: {why: 1}
    b.put("a", "w", "four")
    b.add("forget", "a", {"ids": ["w"]}, b"\x81\xa6reason\x01")  # seq 8: {reason: 1}
    built = b.build()
    off2, len2 = built.slots[2]
    built.data[off2 + len2 - 1] ^= 1
    erase_slot(built.data, built, 4)
    found, notes = findings(db_path, built.data)
    assert found == [
        ("slot", "forget payload slot checksum mismatch (seq 2)", 2, off2),
        ("slot", "forget payload slot is erased (all zero) (seq 4)", 4, built.slots[4][0]),
        ("payload", "forget payload does not decode: not a map {reason: str or nil}", 6, built.slots[6][0]),
        ("payload", "forget payload does not decode: not a map {reason: str or nil}", 8, built.slots[8][0]),
    ]
    assert notes == ["4 forgotten versions still hold their payload: erasure pending (the next writer to open "
                     "the log completes it)"]


def test_a_forget_with_a_reason_or_none_is_sound(db_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.put("a", "y", "two")
    b.forget("a", ["x"], reason="asked")
    b.forget("a", ["y"])
    built = b.build()
    erase_slot(built.data, built, 1)
    erase_slot(built.data, built, 2)
    path = db_path
    path.write_bytes(bytes(built.data))
    r = verify_db(path)
    assert (r.ok, r.erased, r.notes) == (True, 2, ())


def test_a_compacted_forgotten_version_counts_as_erased(db_path: Path) -> None:
    b = LogBuilder()
    e = b.put("a", "x", "one")
    b.items[-1] = (e, None)  # compaction drops a forgotten version's slot
    b.forget("a", ["x"])
    db_path.write_bytes(bytes(b.build().data))
    r = verify_db(db_path)
    assert (r.ok, r.erased, r.notes) == (True, 1, ())


def test_an_interrupted_erasure(db_path: Path) -> None:
    built = sample_log_appended()
    off, length = built.slots[3]  # r1, which the forget names
    built.data[off:off + length // 2] = bytes(length // 2)
    assert findings(db_path, built.data) == ([
        ("slot", "payload slot checksum mismatch (seq 3, record r1 v1)", 3, off),
    ], [])
    write_erase_journal(str(db_path) + ".erase", bytes(built.data[12:28]), [(off, length)])
    assert findings(db_path, built.data) == ([], [
        "an erasure journal (memory.mnemo.db.erase) lists 1 regions: an interrupted erasure the next writer "
        "completes",
        PART_ERASED_NOTE.format(1),
    ])


PART_ERASED_NOTE = ("{} forgotten versions are part-way erased (forgotten in the log's last frame, or listed in "
                    "DB.erase): the next writer to open the log completes the erasure")


def test_an_interrupted_erasure_of_the_last_frames_forget(db_path: Path) -> None:
    """No journal: a slot failing its checksum whose version the log's last frame forgets is an erasure a
    crash cut short (nothing is appended after a forget until its zeros are fsynced); the same slot with
    any frame after that forget, or of a version the last frame does not forget, is damage."""
    _b, built = sample_log()
    off, length = built.slots[3]  # r1, which the forget (the last frame) names
    built.data[off:off + length // 2] = bytes(length // 2)
    assert findings(db_path, built.data) == ([], [PART_ERASED_NOTE.format(1)])
    built.data[off + length - 1] ^= 1  # any bytes at all: the crash may have left any prefix of the zeros
    assert findings(db_path, built.data) == ([], [PART_ERASED_NOTE.format(1)])
    # a slot of a record the forget does not name is damage, forget in the last frame or not
    s2 = seq_of(built, "put", "r2")
    off2, _len2 = built.slots[s2]
    built.data[off2 + 7] ^= 1
    assert findings(db_path, built.data) == ([
        ("slot", f"payload slot checksum mismatch (seq {s2}, record r2 v1)", s2, off2),
    ], [PART_ERASED_NOTE.format(1)])


def test_a_part_erased_slot_of_an_earlier_forget_is_damage(db_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.forget("a", ["x"])
    b.put("a", "y", "two")  # appended after the forget: its erasure had been fsynced
    built = b.build()
    off, _length = built.slots[1]
    built.data[off:off + 9] = bytes(9)
    assert findings(db_path, built.data) == ([
        ("slot", "payload slot checksum mismatch (seq 1, record x v1)", 1, off),
    ], [])
    # an id put again after its forget: the last frame's forget names it, but not the version it dropped
    b2 = LogBuilder()
    b2.put("a", "x", "one")
    b2.forget("a", ["x"])
    b2.put("a", "x", "again")
    b2.forget("a", ["x"])
    built2 = b2.build()
    off, _length = built2.slots[1]
    built2.data[off:off + 9] = bytes(9)
    assert findings(db_path, built2.data) == ([
        ("slot", "payload slot checksum mismatch (seq 1, record x v1)", 1, off),
    ], ["1 forgotten versions still hold their payload: erasure pending (the next writer to open the log "
        "completes it)"])


def test_an_interrupted_erasure_of_a_record_no_forget_names(db_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    built = b.build()
    off, length = built.slots[1]
    built.data[off + 5] ^= 1
    write_erase_journal(str(db_path) + ".erase", bytes(built.data[12:28]), [(off, length)])
    assert findings(db_path, built.data) == ([
        ("slot", "payload slot of seq 1 (record x) is damaged; DB.erase lists it, but no forget names the record",
         1, off),
    ], ["an erasure journal (memory.mnemo.db.erase) lists 1 regions: an interrupted erasure the next writer "
        "completes"])


def test_a_journal_region_that_is_not_exactly_a_slot(db_path: Path) -> None:
    built = sample_log_appended()
    off, length = built.slots[3]
    built.data[off + 5] ^= 1
    write_erase_journal(str(db_path) + ".erase", bytes(built.data[12:28]), [(off, length - 1)])
    found, _notes = findings(db_path, built.data)
    assert found == [("slot", "payload slot checksum mismatch (seq 3, record r1 v1)", 3, off)]


def test_leftover_files_are_noted(db_path: Path) -> None:
    _b, built = sample_log()
    for suffix in (".compact", ".snap.tmp", ".erase.tmp"):
        Path(str(db_path) + suffix).write_bytes(b"x")
    _found, notes = findings(db_path, built.data)
    assert notes == [
        f"memory.mnemo.db{suffix} is left over from a writer that crashed; it may hold payload bytes, and the "
        "next writer to open the database, or the next forget, removes it"
        for suffix in (".compact", ".snap.tmp", ".erase.tmp")
    ] + [PENDING]


def test_the_expected_head_cut_off_or_rewritten(db_path: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    head = built.entries[-1]
    cut = bytes(built.data[:built.frame_spans[-1][0]])
    assert findings(db_path, cut, expect_head=(head.seq, head.hash.hex())) == ([(
        "expect-head", "the expected head seq 12 is not in the log (it ends at seq 11): the log was truncated",
        12, None,
    )], [PENDING])
    assert findings(db_path, built.data, expect_head=(head.seq, "ab" * 32)) == ([(
        "expect-head", f"seq 12 hashes to {head.hash.hex()}, not the expected {'ab' * 32}: the log was rewritten",
        12, None,
    )], [PENDING, f"checkpoint signatures were checked against the keys they name ({PUB.hex()}); give the "
         "expected public key to check who signed them"])
    assert findings(db_path, built.data[:HEADER_SIZE], expect_head=(0, "ab" * 32)) == ([(
        "genesis", "the log holds no entries (no genesis)", None, HEADER_SIZE), (
        "expect-head", "the expected head seq 0 is not in the log (it holds no entries): the log was truncated",
        0, None,
    )], [])
    mid = built.entries[5]
    assert findings(db_path, built.data, expect_head=(mid.seq, mid.hash.hex()))[0] == []
    assert findings(db_path, built.data, expect_head=(0, built.entries[0].hash.hex()))[0] == []


def test_an_unsigned_tail_and_an_unsigned_log(db_path: Path) -> None:
    b, _ = sample_log(checkpoint=True)
    b.put("agent-1", "late", "after the checkpoint")
    b.put("agent-1", "later", "after it too")
    built = b.build()
    assert findings(db_path, built.data, pubkey=PUB) == ([(
        "unsigned", "entries seq 13..14 follow the last checkpoint signed by the given key: appended later, or "
        "its signed tail was cut off", 13, None,
    )], [PENDING])
    _b, unsigned = sample_log()
    assert findings(db_path, unsigned.data, pubkey=PUB) == ([(
        "unsigned", "no checkpoint in the log is signed by the given key", None, None,
    )], [PENDING])
    assert findings(db_path, unsigned.data[:HEADER_SIZE], pubkey=PUB) == ([(
        "genesis", "the log holds no entries (no genesis)", None, HEADER_SIZE,
    )], [])


def test_a_checkpoint_at_the_head_signs_the_whole_log(db_path: Path) -> None:
    b = LogBuilder()
    b.checkpoint()  # seq 1 signs the genesis
    path = db_path
    path.write_bytes(bytes(b.build().data))
    r = verify_db(path, pubkey=PUB)
    assert (r.ok, r.checkpoints, r.head_seq) == (True, 1, 1)


def test_checkpoint_findings_carry_its_seq_and_offset(db_path: Path) -> None:
    b, _ = sample_log()
    body = sign_checkpoint(SEED, b.db_id, 2, b.items[2][0].hash)  # a valid signature, replayed later
    e = b.add("checkpoint", "owner", body)
    built = b.build()
    found, _notes = findings(db_path, built.data, pubkey=PUB)
    at = entry_offset(built, e.seq)
    assert found == [
        ("checkpoint", f"checkpoint signs seq 2 head {_short(b.items[2][0].hash)}, not the entry before it "
         f"(seq {e.seq - 1}, {_short(b.items[e.seq - 1][0].hash)})", e.seq, at),
        ("unsigned", "no checkpoint in the log is signed by the given key", None, None),
    ]


@pytest.mark.parametrize("wrong", ["seq", "head"])
def test_a_checkpoint_must_sign_both_the_seq_and_the_head_before_it(db_path: Path, wrong: str) -> None:
    """A signature over the right seq with another head (a fork's), or over the head with another seq, is
    as wrong as one over neither: each is a finding, and the checkpoint signs nothing."""
    b, _ = sample_log()
    before = b.head
    seq, head = (before.seq + 1, before.hash) if wrong == "seq" else (before.seq, b"\x5a" * 32)
    e = b.add("checkpoint", "owner", sign_checkpoint(SEED, b.db_id, seq, head))
    built = b.build()
    found, _notes = findings(db_path, built.data, pubkey=PUB)
    assert found == [
        ("checkpoint", f"checkpoint signs seq {seq} head {_short(head)}, not the entry before it "
         f"(seq {before.seq}, {_short(before.hash)})", e.seq, entry_offset(built, e.seq)),
        ("unsigned", "no checkpoint in the log is signed by the given key", None, None),
    ]
    assert not verify_db(db_path, pubkey=PUB).ok


def test_findings_are_ordered_by_offset_with_the_unplaced_last(db_path: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    head = built.entries[-1]
    erase_slot(built.data, built, 4)
    start = built.frame_spans[6][0]
    built.data[start + 60] ^= 1  # a byte of seq 6's prev: its frame's checksum fails, its link, seq 7's link
    found, _notes = findings(db_path, built.data, expect_head=(head.seq, "cd" * 32))
    assert [(k, s) for k, _m, s, _o in found] == [
        ("erased", 4), ("frame-checksum", 6), ("link", 6), ("link", 7), ("expect-head", head.seq)]
    fix_frame_crc(built.data, start)
    found, _notes = findings(db_path, built.data)
    assert [(k, s) for k, _m, s, _o in found] == [("erased", 4), ("link", 6), ("link", 7)]


@pytest.mark.parametrize("size", [2, 4])
def test_a_frame_of_several_puts_places_each_finding_at_its_entry(db_path: Path, size: int) -> None:
    """The wrong version is the frame's last put: each put of a frame is checked, not only its first."""
    b = LogBuilder()
    b.versions[f"x{size - 1}"] = 3
    with b.frame():
        for i in range(size):
            b.put("a", f"x{i}", f"content {i}")
    built = b.build()
    assert findings(db_path, built.data) == ([
        ("version", f"seq {size} puts version 4 of record x{size - 1}, expected 1", size, entry_offset(built, size)),
    ], [])
    assert entry_offset(built, size) > built.frame_spans[1][0] + FH


def test_a_single_put_frame_places_its_finding_after_the_frame_header(db_path: Path) -> None:
    b = LogBuilder()
    b.versions["x"] = 1
    b.put("a", "x", "one")
    built = b.build()
    assert findings(db_path, built.data) == ([
        ("version", "seq 1 puts version 2 of record x, expected 1", 1, built.frame_spans[1][0] + FH),
    ], [])


def test_bad_expect_head_and_pubkey_are_refused(db_path: Path) -> None:
    from mnemo.errors import InvalidInput

    _b, built = sample_log()
    db_path.write_bytes(bytes(built.data))
    head = built.entries[-1].hash.hex()
    for bad in [(-1, head), (1, head[:-2]), (1, head + "00"), (1, "zz" * 32), (1.0, head), (1, None)]:
        with pytest.raises(InvalidInput, match=r"^expect_head must be \(seq >= 0, 64 hex digits\)$"):
            verify_db(db_path, expect_head=bad)  # type: ignore[arg-type]
    for key in (b"\x00" * 31, b"\x00" * 33, "00" * 32):
        with pytest.raises(InvalidInput, match="^pubkey must be a raw 32-byte Ed25519 public key$"):
            verify_db(db_path, pubkey=key)  # type: ignore[arg-type]
    assert verify_db(db_path, expect_head=(0, built.entries[0].hash.hex())).ok


def test_a_damaged_header_leaves_the_db_id_to_the_genesis(db_path: Path) -> None:
    """With the header's db_id unreadable, the genesis names the database: a checkpoint of another one is
    still caught."""
    b = LogBuilder()
    b.put("a", "x", "one")
    head = b.head
    b.add("checkpoint", "owner", sign_checkpoint(SEED, b"\x09" * 16, head.seq, head.hash))
    built = b.build()
    built.data[12] ^= 1
    assert findings(db_path, built.data) == ([
        ("header", "bad file header: file header checksum mismatch", None, 0),
        ("checkpoint", f"checkpoint names db_id {'09' * 16}, not {b.db_id.hex()}", 2, entry_offset(built, 2)),
    ], [])


def test_a_forget_of_ids_never_put_leaves_nothing_pending(db_path: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.forget("a", ["nobody", "x", "no-one"])
    built = b.build()
    erase_slot(built.data, built, 1)
    db_path.write_bytes(bytes(built.data))
    r = verify_db(db_path)
    assert (r.ok, r.erased, r.notes) == (True, 1, ())


def test_a_log_of_no_entries_has_no_head(db_path: Path) -> None:
    db_path.write_bytes(bytes(LogBuilder().build().data[:HEADER_SIZE]))
    r = verify_db(db_path)
    assert (r.ok, r.entries, r.head_seq, r.head_hash) == (False, 0, -1, "")


def test_the_index_gathered_names_the_logs_head_and_tree(db_path: Path) -> None:
    from mnemo.audit import verify_db_and_index
    from mnemo.chain.codec import ZERO_HASH
    from mnemo.chain.tree import CompactRange

    _b, built = sample_log(checkpoint=True)
    db_path.write_bytes(bytes(built.data))
    report, index = verify_db_and_index(db_path)
    tree = CompactRange()
    for e in built.entries:
        tree.append_entry(e.raw)
    head = tree.head()
    last = built.entries[-1]
    assert report.ok
    assert (index.head_seq, index.head_hash, index.entries, index.tree) == (
        last.seq, last.hash, len(built.entries), (head.size, head.root))
    db_path.write_bytes(bytes(built.data[:HEADER_SIZE]))
    report, index = verify_db_and_index(db_path)
    assert (index.head_seq, index.head_hash, index.entries) == (-1, ZERO_HASH, 0)


def test_verify_db_checks_the_index_snapshot_beside_the_log(tmp_path: Path) -> None:
    from mnemo import MnemoClient

    db = tmp_path / "i.db"
    with MnemoClient(db, "owner", durability="none") as c:
        rid = c.remember("hello", tags=["a"]).id
        c.remember("other")
    assert Path(str(db) + ".snap").exists()
    r = verify_db(db)
    assert (r.ok, r.problems, r.notes) == (True, (), ())
    tamper(db, replace(rid, tags=("a", "injected")))
    r = verify_db(db)
    assert [(p.kind, p.message, p.seq, p.offset) for p in r.problems] == [(
        "snapshot", f"record {rid} differs between the index and the log: the index snapshot i.db.snap was altered",
        None, None,
    )]
    assert (r.ok, r.entries, r.notes) == (False, 3, ())


def test_an_empty_file_is_one_finding_at_offset_0(db_path: Path) -> None:
    assert findings(db_path, b"") == ([("header", "the file is empty: not a Mnemo log", None, 0)], [])


def _forked(ts0: int) -> Built:
    """The sample log's first entries, written by a builder whose timestamps (so hashes) are its own."""
    b = LogBuilder(ts0=ts0)
    b.grant("owner", "bob", "agent:agent-1", ["read"])
    for i in range(6):
        b.put("agent-1", f"r{i}", f"memory number {i}")
    return b.build()


def test_garbage_that_loses_no_entry_still_leaves_the_next_link_checked(db_path: Path) -> None:
    """Junk between two frames skips no entry, so the entry after it must still link to the one before:
    here it is another log's entry at the same seq, and its link is reported."""
    ours, theirs = _forked(TS0), _forked(TS0 + 1)
    cut = ours.frame_spans[4][0]
    junk = b"junk junk junk"
    data = ours.data[:cut] + junk + theirs.data[theirs.frame_spans[4][0]:]
    assert findings(db_path, data) == ([
        ("bad-frame", f"bad frame magic at offset {cut}; {len(junk)} bytes skipped up to the next good frame at "
         f"offset {cut + len(junk)}", 4, cut),
        ("link", f"prev of seq 4 is {_short(theirs.entries[4].prev)}, but the entry before it (seq 3) hashes to "
         f"{_short(ours.entries[3].hash)}", 4, cut + len(junk) + FH),
    ], [])


def test_an_expected_head_seq_written_twice_names_the_first_entry_at_it(db_path: Path) -> None:
    ours, theirs = _forked(TS0), _forked(TS0 + 1)
    last = ours.entries[-1]
    data = ours.data + theirs.data[theirs.frame_spans[-1][0]:]  # seq 7 again, another log's
    found, _notes = findings(db_path, data, expect_head=(last.seq, "ab" * 32))
    assert found[-1] == (
        "expect-head", f"seq 7 hashes to {last.hash.hex()}, not the expected {'ab' * 32}: the log was rewritten",
        7, None,
    )
    assert [k for k, _m, _s, _o in found] == ["seq", "link", "version", "expect-head"]


@pytest.mark.parametrize("tail", [bytes(FH), b"MNFR" + bytes(FH - 4)], ids=["zeros", "magic"])
def test_a_frame_headers_worth_of_junk_at_the_end_is_reported(db_path: Path, tail: bytes) -> None:
    """Exactly one frame header of bytes after a run of puts: the fast path hands it on rather than reading
    it again and again, and the general path reports it."""
    b = LogBuilder()
    for i in range(5):
        b.put("a", f"r{i}", f"memory {i}")
    built = b.build()
    n = len(built.data)
    why = "bad frame magic" if tail == bytes(FH) else "impossible frame lengths"
    assert findings(db_path, built.data + tail) == ([
        ("bad-frame", f"{why} at offset {n}; no readable frame follows ({FH} bytes to the end of the file)", 6, n),
    ], [])


def test_every_extra_version_of_a_wrongly_numbered_record_is_counted_at_its_forget(db_path: Path) -> None:
    """Three puts all at version 1: the forget names three versions whose payload is still to erase."""
    b = LogBuilder()
    for text in ("one", "one again", "one more time"):
        b.versions.clear()
        b.put("a", "x", text)
    b.forget("a", ["x"])
    built = b.build()
    found, notes = findings(db_path, built.data)
    assert found == [
        ("version", f"seq {seq} puts version 1 of record x, expected 2", seq, entry_offset(built, seq))
        for seq in (2, 3)
    ]
    assert notes == ["3 forgotten versions still hold their payload: erasure pending (the next writer to open "
                     "the log completes it)"]


def test_checking_the_snapshot_opens_the_database_as_a_reader(tmp_path: Path) -> None:
    """The snapshot is compared through a read-only open: a writer's open would remove the leftover file a
    crashed compaction left, and verify must change nothing."""
    from mnemo import MnemoClient

    db = tmp_path / "v.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("hello")
    leftover = Path(str(db) + ".compact")
    leftover.write_bytes(b"left over")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    r = verify_db(db)
    assert (r.ok, r.problems) == (True, ())
    assert r.notes == ("v.db.compact is left over from a writer that crashed; it may hold payload bytes, and the "
                       "next writer to open the database, or the next forget, removes it",)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
