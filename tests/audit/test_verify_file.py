"""verify_db: every kind of damage and tampering is found, with the right seq and offset, all at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.logs import (
    SEED,
    Built,
    LogBuilder,
    erase_slot,
    fix_frame_crc,
    fix_slot_crc,
    pubkey_hex,
    sample_log,
)

import mnemo.audit as audit
from mnemo.audit import UnreadableDatabase, verify_db
from mnemo.errors import InvalidInput
from mnemo.record import Problem, VerifyReport
from mnemo.storage.codec import encode_put_payload, make_entry, pack_record_fields
from mnemo.storage.file.framing import HEADER_SIZE, encode_frame
from mnemo.storage.file.snapshot import write_erase_journal

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


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "memory.mnemo.db"


def test_clean_log_verifies(db: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    r = check(db, built.data, pubkey=PUB)
    assert r.ok, r.problems
    last = built.entries[-1]
    assert (r.entries, r.head_seq, r.head_hash) == (len(built.entries), last.seq, last.hash.hex())
    assert r.checkpoints == 1
    assert r.erased == 0 and any("erasure pending" in n for n in r.notes)
    assert r.to_json()["ok"] is True


def test_erased_slot_of_forgotten_record_is_fine(db: Path) -> None:
    _b, built = sample_log()
    erase_slot(built.data, built, seq_of(built, "put", "r1"))
    r = check(db, built.data)
    assert r.ok, r.problems
    assert r.erased == 1
    assert not any("pending" in n for n in r.notes)


def test_erased_slot_of_live_record_is_a_problem(db: Path) -> None:
    _b, built = sample_log()
    s = seq_of(built, "put", "r2")
    erase_slot(built.data, built, s)
    r = check(db, built.data)
    assert kinds(r) == {("erased", s)}
    assert r.problems[0].offset == built.slots[s][0]


def test_erased_slot_before_a_reput_of_the_same_id(db: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.forget("a", ["x"])
    b.put("a", "x", "again")  # version 1 of a new record that reuses the id
    built = b.build()
    erase_slot(built.data, built, 1)
    assert check(db, built.data).ok
    erase_slot(built.data, built, 3)
    assert kinds(check(db, built.data)) == {("erased", 3)}


def test_changed_content_byte(db: Path) -> None:
    _b, built = sample_log()
    s = seq_of(built, "put", "r3")
    off, length = built.slots[s]
    i = built.data.index(b"memory number 3", off, off + length)
    built.data[i] ^= 0x01
    r = check(db, built.data)
    assert kinds(r) == {("slot", s)}
    assert r.problems[0].offset == off
    fix_slot_crc(built.data, off, length)  # a forger who also fixes the slot checksum
    r = check(db, built.data)
    assert kinds(r) == {("payload", s)}
    assert "digest" in r.problems[0].message


def test_changed_tag(db: Path) -> None:
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
    r = check(db, built.data)
    assert kinds(r) == {("payload", s)}


def test_changed_body_field(db: Path) -> None:
    _b, built = sample_log()
    s = seq_of(built, "put", "r2")
    start, end = built.frame_spans[built.frame_of[s]]
    raw = built.entries[s].raw
    i = built.data.index(raw, start, end)
    j = raw.index(b"agent:agent-1")
    built.data[i + j + len("agent:")] = ord("A")  # scope agent:Agent-1
    r = check(db, built.data)
    assert ("frame-checksum", s) in kinds(r)
    assert ("link", s + 1) in kinds(r)
    assert next(p for p in r.problems if p.kind == "frame-checksum").offset == start
    fix_frame_crc(built.data, start)  # a forger who recomputes the frame checksum
    r = check(db, built.data)
    assert kinds(r) == {("link", s + 1)}
    assert f"seq {s}" in r.problems[0].message


def test_changed_size_is_caught_by_the_payload(db: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "hello")
    built = b.build()
    start, end = built.frame_spans[1]
    i = built.data.index(b"\xa4size\x05", start, end)
    built.data[i + 5] = 6
    fix_frame_crc(built.data, start)
    r = check(db, built.data)
    assert kinds(r) == {("payload", 1)}
    assert "bytes" in r.problems[0].message


def test_swapped_pair_of_entries(db: Path) -> None:
    _b, built = sample_log()
    k = 4
    (a0, a1), (b0, b1) = built.frame_spans[built.frame_of[k]], built.frame_spans[built.frame_of[k + 1]]
    assert a1 == b0
    data = built.data[:a0] + built.data[b0:b1] + built.data[a0:a1] + built.data[b1:]
    r = check(db, data)
    seqs = {p.seq for p in r.problems}
    assert {k, k + 1} <= seqs
    assert {p.kind for p in r.problems} == {"seq", "link"}


def test_deleted_entry(db: Path) -> None:
    _b, built = sample_log()
    k = 5
    a0, a1 = built.frame_spans[built.frame_of[k]]
    r = check(db, built.data[:a0] + built.data[a1:])
    assert kinds(r) == {("seq", k), ("link", k + 1)}
    assert all(p.offset == a0 + 24 for p in r.problems)  # the entry that now stands there


def test_truncated_tail(db: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    head = built.entries[-1]
    cut = built.frame_spans[-3][0]  # the last two frames: the forget and the checkpoint
    r = check(db, built.data[:cut])
    assert r.ok  # a clean cut at a frame boundary is invisible on its own ...
    r = check(db, built.data[:cut], expect_head=(head.seq, head.hash.hex()))
    assert kinds(r) == {("expect-head", head.seq)}  # ... but not against a head saved earlier
    assert "truncated" in r.problems[0].message
    r = check(db, built.data[:cut], pubkey=PUB)
    assert kinds(r) == {("unsigned", None)}  # nor with the signing key: no signed checkpoint is left
    r = check(db, built.data[:-5])  # a cut inside the last frame: a torn tail
    assert kinds(r) == {("torn-tail", head.seq)}
    assert r.problems[0].offset == built.frame_spans[-1][0]


def test_truncated_after_a_checkpoint(db: Path) -> None:
    b, _ = sample_log(checkpoint=True)
    b.put("agent-1", "late", "after the checkpoint")
    b.checkpoint()
    built = b.build()
    cut = built.frame_spans[-1][0]  # the final checkpoint goes; the put before it stays
    r = check(db, built.data[:cut], pubkey=PUB)
    last_signed = built.entries[-3].seq
    assert kinds(r) == {("unsigned", last_signed + 1)}


def test_rewritten_head(db: Path) -> None:
    _b, built = sample_log()
    head = built.entries[-1]
    r = check(db, built.data, expect_head=(head.seq, "ab" * 32))
    assert kinds(r) == {("expect-head", head.seq)}
    assert "rewritten" in r.problems[0].message
    mid = built.entries[5]
    assert check(db, built.data, expect_head=(mid.seq, mid.hash.hex())).ok


def test_appended_forged_entry(db: Path) -> None:
    b, _ = sample_log(checkpoint=True)
    forged = b.put("agent-1", "forged", "I was never written by the owner")
    built = b.build()
    assert check(db, built.data).ok  # a well-formed append is indistinguishable without a key ...
    r = check(db, built.data, pubkey=PUB)
    assert kinds(r) == {("unsigned", forged.seq)}  # ... but it is not covered by any signature
    # a forger who does not know the chain's head: the link breaks
    bad = make_entry(forged.seq, forged.ts_ns, b"\x11" * 32, "put", "agent-1", forged.body)
    data = built.data[: built.frame_spans[-1][0]] + encode_frame([(bad.raw, b.items[-1][1])])
    assert kinds(check(db, data)) == {("link", forged.seq)}


def test_forged_checkpoint_signature(db: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    cp = built.entries[-1]
    start, end = built.frame_spans[-1]
    i = built.data.index(cp.body["sig"], start, end)
    built.data[i + 10] ^= 0xFF
    fix_frame_crc(built.data, start)
    r = check(db, built.data)
    assert kinds(r) == {("checkpoint-signature", cp.seq)}
    r = check(db, built.data, pubkey=PUB)
    assert ("checkpoint-signature", cp.seq) in kinds(r)


def test_checkpoint_by_another_key(db: Path) -> None:
    b, _ = sample_log()
    cp = b.checkpoint(key=b"\x07" * 32)
    built = b.build()
    assert check(db, built.data).ok
    r = check(db, built.data, pubkey=PUB)
    assert kinds(r) == {("checkpoint-key", cp.seq), ("unsigned", None)}


def test_checkpoint_over_the_wrong_head(db: Path) -> None:
    b, _ = sample_log()
    body = audit.sign_checkpoint(SEED, b.db_id, 2, b.items[2][0].hash)  # a valid signature, replayed
    e = b.add("checkpoint", "owner", body)
    r = check(db, b.build().data)
    assert kinds(r) == {("checkpoint", e.seq)}


def test_every_problem_is_reported(db: Path) -> None:
    _b, built = sample_log(checkpoint=True)
    s1, s2 = seq_of(built, "put", "r2"), seq_of(built, "put", "r5")
    erase_slot(built.data, built, s1)
    off, _ = built.slots[s2]
    built.data[off + 10] ^= 1
    head = built.entries[-1]
    r = check(db, built.data[:-3], pubkey=PUB, expect_head=(head.seq, head.hash.hex()))
    assert kinds(r) == {("erased", s1), ("slot", s2), ("torn-tail", head.seq), ("expect-head", head.seq),
                        ("unsigned", None)}
    offsets = [p.offset for p in r.problems if p.offset is not None]
    assert offsets == sorted(offsets)


def test_garbage_in_the_middle_resyncs(db: Path) -> None:
    _b, built = sample_log()
    k = 3
    a0, a1 = built.frame_spans[built.frame_of[k]]
    built.data[a0: a0 + 4] = b"XXXX"  # the frame's magic: its entry is lost
    s = seq_of(built, "put", "r5")
    erase_slot(built.data, built, s)  # and a later problem is still found
    r = check(db, built.data)
    assert kinds(r) == {("bad-frame", k), ("erased", s)}
    p = r.problems[0]
    assert p.offset == a0 and f"entries seq {k}..{k}" in p.message
    assert r.entries == len(built.entries) - 1


def test_inserted_garbage_between_frames(db: Path) -> None:
    _b, built = sample_log()
    a0 = built.frame_spans[4][0]
    data = built.data[:a0] + b"MNFR garbage that is no frame" + built.data[a0:]
    r = check(db, data)
    assert [(p.kind, p.offset) for p in r.problems] == [("bad-frame", a0)]
    assert r.entries == len(built.entries)


def test_bad_last_frame_is_reported(db: Path) -> None:
    _b, built = sample_log()
    start, end = built.frame_spans[-1]
    built.data[end - 2] ^= 0xFF  # the trailer's end magic
    r = check(db, built.data)
    assert kinds(r) == {("bad-frame", built.entries[-1].seq)}


def test_bad_header_is_a_problem_not_an_error(db: Path) -> None:
    _b, built = sample_log()
    built.data[0:8] = b"NOTMNEMO"
    r = check(db, built.data)
    assert kinds(r) == {("header", None)}
    assert r.problems[0].offset == 0 and r.entries == len(built.entries)
    built.data[0:8] = b"MNEMOLOG"
    built.data[12] ^= 1  # db_id: the header checksum fails
    assert kinds(check(db, built.data)) == {("header", None)}


def test_header_and_genesis_disagree(db: Path) -> None:
    b = LogBuilder(db_id=b"\x01" * 16)
    built = b.build()
    built.data[:HEADER_SIZE] = LogBuilder(db_id=b"\x02" * 16).build().data[:HEADER_SIZE]
    assert kinds(check(db, built.data)) == {("genesis", 0)}


def test_not_a_mnemo_file(db: Path) -> None:
    r = check(db, b"hello, world\n" * 10)
    assert {p.kind for p in r.problems} == {"header", "bad-frame"}
    r = check(db, b"short")
    assert kinds(r) == {("header", None)}
    r = check(db, b"")
    assert kinds(r) == {("header", None)} and "empty" in r.problems[0].message


def test_header_only_has_no_genesis(db: Path) -> None:
    built = LogBuilder().build()
    r = check(db, built.data[:HEADER_SIZE])
    assert kinds(r) == {("genesis", None)}


def test_unreadable_files_raise(tmp_path: Path) -> None:
    with pytest.raises(UnreadableDatabase, match="cannot open"):
        verify_db(tmp_path / "missing.db")
    with pytest.raises(UnreadableDatabase):
        verify_db(tmp_path)


def test_genesis_rules(db: Path) -> None:
    b = LogBuilder()
    e = make_entry(0, 1, b"\x00" * 32, "grant", "x", {"perms": ["read"], "principal": "p", "scope": "s"})
    b.items[0] = (e, None)
    b.add("genesis", "owner", {"db_id": b.db_id, "format": 1})
    r = check(db, b.build().data)
    assert ("genesis", 0) in kinds(r) and ("genesis", 1) in kinds(r)


def test_wrong_version_and_bad_body(db: Path) -> None:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.versions["x"] = 5
    bad_ver = b.put("a", "x", "two")
    bad_body = b.add("grant", "owner", {"perms": ["write", "read"], "principal": "p", "scope": "s"})
    unknown = b.add("revoke", "owner", {"perms": [], "principal": "p", "scope": "s", "extra": 1})
    r = check(db, b.build().data)
    assert kinds(r) == {("version", bad_ver.seq), ("body", bad_body.seq), ("body", unknown.seq)}


def test_put_without_payload(db: Path) -> None:
    b = LogBuilder()
    e = b.put("a", "x", "one")
    b.items[-1] = (e, None)
    r = check(db, b.build().data)
    assert kinds(r) == {("payload", e.seq)}
    b.forget("a", ["x"])  # a forgotten version without a payload: compacted away
    assert check(db, b.build().data).ok


def test_interrupted_erasure_listed_in_the_journal(db: Path) -> None:
    _b, built = sample_log()
    s = seq_of(built, "put", "r1")
    off, length = built.slots[s]
    built.data[off: off + length // 2] = bytes(length // 2)  # half zeroed: neither ok nor erased
    r = check(db, built.data)
    assert kinds(r) == {("slot", s)}
    write_erase_journal(str(db) + ".erase", bytes(built.data[12:28]), [(off, length)])
    r = check(db, built.data)
    assert r.ok, r.problems
    assert any("part-way erased" in n for n in r.notes) and any(".erase" in n for n in r.notes)
    # a journal does not excuse damage to a record nobody forgot
    s2 = seq_of(built, "put", "r2")
    off2, len2 = built.slots[s2]
    built.data[off2 + 7] ^= 1
    write_erase_journal(str(db) + ".erase", bytes(built.data[12:28]), [(off, length), (off2, len2)])
    assert kinds(check(db, built.data)) == {("slot", s2)}


def test_multi_entry_frames_and_offsets(db: Path) -> None:
    b = LogBuilder()
    with b.frame():
        for i in range(5):
            b.put("a", f"x{i}", f"content {i}")
    built = b.build()
    s = 3
    off, length = built.slots[s]
    built.data[off + 8] ^= 1
    r = check(db, built.data)
    assert kinds(r) == {("slot", s)} and r.problems[0].offset == off


def test_small_chunks_give_the_same_report(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _b, built = sample_log(n_puts=40, checkpoint=True)
    erase_slot(built.data, built, seq_of(built, "put", "r7"))
    a0 = built.frame_spans[20][0]
    built.data[a0 + 30] ^= 1
    db.write_bytes(bytes(built.data))
    expected = verify_db(db, pubkey=PUB)
    assert not expected.ok
    for chunk in (7, 64, 333):
        monkeypatch.setattr(audit.filelog, "CHUNK", chunk)
        assert verify_db(db, pubkey=PUB) == expected


def test_progress_is_reported(db: Path) -> None:
    _b, built = sample_log()
    db.write_bytes(bytes(built.data))
    calls: list[tuple[int, int]] = []
    verify_db(db, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (len(built.data), len(built.data))
    assert all(d <= t for d, t in calls)


def test_bad_arguments(db: Path) -> None:
    _b, built = sample_log()
    db.write_bytes(bytes(built.data))
    with pytest.raises(InvalidInput):
        verify_db(db, expect_head=(1, "xyz"))
    with pytest.raises(InvalidInput):
        verify_db(db, pubkey=b"short")


def test_problem_json_shape(db: Path) -> None:
    _b, built = sample_log()
    built.data[-1] ^= 1
    r = check(db, built.data)
    j = r.to_json()
    assert set(j) == {"ok", "entries", "head_seq", "head_hash", "erased", "checkpoints", "problems", "notes"}
    assert j["ok"] is False
    assert set(j["problems"][0]) == {"kind", "message", "seq", "offset"}
    assert isinstance(r.problems[0], Problem)


def test_verify_never_writes(db: Path) -> None:
    _b, built = sample_log()
    built.data[-7] ^= 1
    db.write_bytes(bytes(built.data))
    before = db.read_bytes()
    verify_db(db)
    assert db.read_bytes() == before
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]


def test_a_client_database_verifies(db: Path) -> None:
    from mnemo import MnemoClient

    with MnemoClient(db, "agent-1", durability="none", signing_key=SEED) as c:
        r1 = c.remember("hello", tags=["a"], metadata={"k": [1, 2]})
        c.remember(b"\x00binary", tags=["b"])
        c.update(r1.id, content="hello again")
        with c.transaction():
            c.remember("in a transaction")
            c.remember("also")
        c.grant("bob", "agent:agent-1", ["read"])
        c.forget([r1.id], reason="asked")
        head = c.head
    r = verify_db(db, pubkey=PUB, expect_head=head)
    assert r.ok, r.problems
    assert r.erased == 2 and r.checkpoints >= 1


def test_a_frame_appended_during_verification_is_not_torn(db: Path) -> None:
    _b, built = sample_log()
    full = bytes(built.data)
    db.write_bytes(full[:-10])  # a writer is in the middle of appending the last frame ...

    def finish_the_write(done: int, total: int) -> None:
        if db.stat().st_size < len(full):
            with open(db, "ab") as f:  # ... and completes it while the verifier reads
                f.write(full[-10:])

    r = verify_db(db, progress=finish_the_write)
    assert r.ok, r.problems
    assert r.entries == len(built.entries)
