"""verify_db's fast path (canonical puts read by their bytes, docs/FORMAT.md §5.1) reports exactly what the
general path reports: on clean logs, on every kind of damage and forgery, and in what it gathers for a
client's index comparison. Each log here is verified both ways and the reports must be equal."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import msgpack
import pytest
from helpers.logs import (
    SEED,
    LogBuilder,
    erase_slot,
    fix_frame_crc,
    fix_slot_crc,
    pubkey_hex,
    rich_log,
    sample_log,
)

from mnemo import MnemoClient
from mnemo.audit import ExpectedIndex, verify_db, verify_db_and_index
from mnemo.chain.codec import encode_put_payload, make_entry, pack_record_fields, payload_digest
from mnemo.record import VerifyReport
from mnemo.storage.file import reader as filelog
from mnemo.storage.file import scan
from mnemo.storage.file import verify as verify_file
from mnemo.storage.file.framing import FRAME_HEADER, encode_frame

PUB = bytes.fromhex(pubkey_hex())


@contextmanager
def general_path_only() -> Iterator[None]:
    with mock.patch.object(verify_file._DbVerifier, "fast_frames", lambda self, win, pos: pos):
        yield


@contextmanager
def counting_general_frames() -> Iterator[list[int]]:
    """Counts the frames the general path reads."""
    seen: list[int] = []
    general = verify_file._DbVerifier.frame

    def frame(self: Any, frame: Any, crc_ok: bool, win: Any) -> None:
        seen.append(len(frame.entries))
        general(self, frame, crc_ok, win)

    with mock.patch.object(verify_file._DbVerifier, "frame", frame):
        yield seen


def state(index: ExpectedIndex) -> tuple[Any, ...]:
    return (index.live, index.older, index.forgotten, index.acl.to_state(), index.acl.owner, index.head_seq,
            index.head_hash, index.entries)


def both(path: Path, **kw: Any) -> VerifyReport:
    """verify_db with the fast path and with the general path alone: the same report, and the same
    index gathered for a client; returns the report."""
    fast = verify_db(path, **kw)
    fast2, fast_index = verify_db_and_index(path, **kw)
    with general_path_only():
        slow = verify_db(path, **kw)
        slow2, slow_index = verify_db_and_index(path, **kw)
    assert fast == slow
    assert fast2 == slow2 == slow
    if slow.ok:
        assert state(fast_index) == state(slow_index)
    return fast


def write(path: Path, data: bytes | bytearray) -> Path:
    path.write_bytes(bytes(data))
    return path


def test_clean_logs_verify_the_same_both_ways(db_path: Path) -> None:
    _b, built = sample_log(n_puts=30, checkpoint=True)
    assert both(write(db_path, built.data), pubkey=PUB).ok
    built = rich_log().build()
    r = both(write(db_path, built.data), pubkey=PUB)
    assert r.ok, r.problems
    head = built.entries[-10]
    assert both(db_path, expect_head=(head.seq, head.hash.hex())).ok  # its frame goes the general way


def test_the_fast_path_reads_the_puts(db_path: Path) -> None:
    b = LogBuilder()
    for i in range(50):
        b.put("a", f"x{i}", f"content {i}", tags=["t"])
    with b.frame():
        for i in range(50):
            b.put("a", f"y{i}", f"content {i}")
    b.checkpoint()
    write(db_path, b.build().data)
    with counting_general_frames() as general:
        assert verify_db(db_path).ok
    assert general == [1, 1]  # the genesis and the checkpoint; 100 puts in 51 frames went fast


def test_the_fast_path_reads_frames_up_to_the_files_last_byte(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read in small chunks, each frame of puts still goes the fast way, the one ending the file too."""
    b = LogBuilder()
    for i in range(6):
        b.put("a", f"x{i}", f"content {i} " + "y" * 40)
    write(db_path, b.build().data)
    monkeypatch.setattr(filelog, "CHUNK", 64)
    with counting_general_frames() as general:
        assert verify_db(db_path).ok
    assert general == [1]  # only the genesis


def test_updates_and_records_put_again_go_the_fast_way(db_path: Path) -> None:
    """Versions past 1, in frames of one put and of several, the same record twice in one frame."""
    b = LogBuilder()
    b.put("a", "x", "x v1")
    b.put("a", "x", "x v2")
    b.put("a", "y", "y v1")
    with b.frame():
        b.put("a", "x", "x v3")
        b.put("a", "z", "z v1")
        b.put("a", "z", "z v2")
        b.put("a", "y", "y v2")
    b.put("a", "w", "w v1")
    write(db_path, b.build().data)
    with counting_general_frames() as general:
        assert verify_db(db_path).ok
    assert general == [1]  # only the genesis
    assert both(db_path).ok


def test_seq_encodings_across_their_boundaries(db_path: Path) -> None:
    b = LogBuilder()
    with b.frame():
        for i in range(300):  # seq 1..300: fixint, uint8 and uint16 encodings, in one frame
            b.put("a", f"x{i}", "c")
    for i in range(3):
        b.put("a", f"z{i}", "c")
    assert both(write(db_path, b.build().data)).ok
    with counting_general_frames() as general:
        assert verify_db(db_path).ok
    assert general == [1]  # only the genesis
    big = make_entry(0x10000, 1 << 60, b"\x00" * 32, "put", "a", {"digest": b"\x01" * 32, "id": "q", "scope": "s",
                                                            "size": 1, "ver": 1})
    assert scan._seq_head(0x10000) == big.raw[:len(scan._seq_head(0x10000))]
    huge = make_entry(1 << 40, 1 << 60, b"\x00" * 32, "put", "a", big.body)
    assert scan._seq_head(1 << 40) == huge.raw[:len(scan._seq_head(1 << 40))]


def test_every_single_damage_is_reported_the_same(db_path: Path) -> None:
    """Byte flips anywhere, with and without a forger's fixed checksums, erased slots, cuts."""
    built = rich_log(25).build()
    rng = random.Random(2024)
    clean = bytes(built.data)
    spans = built.frame_spans
    for trial in range(400):
        data = bytearray(clean)
        kind = trial % 6
        if kind == 0:  # any byte
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == 1:  # a byte of an entry, the frame checksum fixed
            start, end = spans[rng.randrange(1, len(spans))]
            _m, _c, _f, elen, _p = FRAME_HEADER.unpack_from(data, start)
            data[start + FRAME_HEADER.size + rng.randrange(elen)] ^= 1 << rng.randrange(8)
            fix_frame_crc(data, start)
        elif kind == 2:  # a byte of a payload, the slot checksum fixed
            seq = rng.choice(sorted(built.slots))
            off, length = built.slots[seq]
            data[off + 4 + rng.randrange(length - 4)] ^= 1 << rng.randrange(8)
            fix_slot_crc(data, off, length)
        elif kind == 3:  # an erased slot
            erase_slot(data, built, rng.choice(sorted(built.slots)))
        elif kind == 4:  # a cut
            del data[rng.randrange(33, len(data)):]
        else:  # two frames swapped
            k = rng.randrange(1, len(spans) - 1)
            (a0, a1), (b0, b1) = spans[k], spans[k + 1]
            data[a0:b1] = data[b0:b1] + data[a0:a1]
        both(write(db_path, data))
        both(db_path, pubkey=PUB)


def test_damage_deep_in_a_big_frame(db_path: Path) -> None:
    """A frame of many puts where one entry is wrong: the fast path reads the ones before it, then
    leaves the whole frame to the general path with no trace of them."""
    for bad in range(5):
        b = LogBuilder()
        b.put("a", "x0", "before")
        with b.frame():
            for i in range(5):
                b.put("a", f"y{i}", f"content {i}", tags=["t"])
        b.put("a", "x1", "after")
        built = b.build()
        seq = 2 + bad
        start, _end = built.frame_spans[built.frame_of[seq]]
        for damage in ("digest", "version", "size", "tags"):
            data = bytearray(built.data)
            off, length = built.slots[seq]
            if damage == "digest":
                data[off + 4] ^= 1
                fix_slot_crc(data, off, length)
            else:
                e = built.entries[seq]
                body = dict(e.body)
                payload = bytes(data[off + 4:off + length])
                if damage == "version":
                    body["ver"] = 2
                elif damage == "size":
                    body["size"] += 1
                else:  # unsorted tags, with a digest that matches them
                    packed = msgpack.packb([f"content {bad}", ["z", "a"], {}], use_bin_type=True)
                    payload = encode_put_payload(payload[:16], packed)
                    body["digest"] = payload_digest(payload[:16], packed)
                assert len(payload) == length - 4 or damage == "tags"
                forged = b.items[:]
                forged[seq] = (make_entry(e.seq, e.ts_ns, e.prev, "put", e.agent, body), payload)
                data = bytearray(_rebuild(b, forged))
            r = both(write(db_path, data))
            assert not r.ok and any(p.seq in (seq, seq + 1) for p in r.problems), (damage, r.problems)


def _rebuild(b: LogBuilder, items: list[tuple[Any, bytes | None]]) -> bytes:
    data = bytearray(b.build().data[:32])
    for seqs in b.frames:
        data += encode_frame([(items[s][0].raw, items[s][1]) for s in seqs])
    return bytes(data)


def _frame_of_raw(entries: list[tuple[bytes, bytes | None]], first: int) -> bytes:
    return encode_frame(entries, first)


def test_non_canonical_and_undecodable_entries(db_path: Path) -> None:
    """Entries the fast path does not read (non-canonical msgpack that decodes all the same, non-str
    map keys, garbage under a valid checksum) go the general way, with the same report."""
    b = LogBuilder()
    b.put("a", "x0", "zero")
    built = b.build()
    head = built.entries[-1]
    salt = b"\x05" * 16
    packed = pack_record_fields("hello", ["t"], {})
    payload = encode_put_payload(salt, packed)
    body = {"digest": payload_digest(salt, packed), "id": "x1", "scope": "agent:a", "size": 5, "ver": 1}

    def put_raw(seq: int, prev: bytes, body_map: Any, seq_bytes: bytes | None = None) -> bytes:
        raw = msgpack.packb([1, seq, 7, prev, "put", "a", body_map], use_bin_type=True)
        if seq_bytes is not None:  # the same seq, encoded longer than it need be
            raw = raw[:2] + seq_bytes + raw[3:]
        return raw

    import hashlib

    variants: list[list[tuple[bytes, bytes | None]]] = []
    reordered = dict(sorted(body.items(), reverse=True))  # keys out of order: decodes all the same
    variants.append([(put_raw(2, head.hash, reordered), payload)])
    variants.append([(put_raw(2, head.hash, body, seq_bytes=b"\xce\x00\x00\x00\x02"), payload)])
    odd_packed = msgpack.packb(["hello", ["t"], {1: "int key"}], use_bin_type=True)
    odd = dict(body, digest=payload_digest(salt, odd_packed))
    variants.append([(put_raw(2, head.hash, odd), encode_put_payload(salt, odd_packed))])
    # a frame of three: a good put, a good put, and garbage (its checksum valid all the same)
    r1 = put_raw(2, head.hash, body)
    body2 = dict(body, id="x2")
    r2 = put_raw(3, hashlib.sha256(r1).digest(), body2)
    variants.append([(r1, payload), (r2, payload), (b"\x97\x01\x04garbage", None)])
    variants.append([(r1, payload), (r2, payload)])
    for entries in variants:
        data = bytes(built.data) + encode_frame(entries, 2)
        both(write(db_path, data))
        both(write(db_path, data + encode_frame([(put_raw(2 + len(entries), b"\x00" * 32, dict(body, id="z")),
                                                  payload)], 2 + len(entries))))


def test_frames_appended_while_reading_and_small_chunks(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = rich_log(20).build()
    write(db_path, built.data)
    expected = both(db_path)
    for chunk in (7, 64, 333, 4096):
        monkeypatch.setattr(filelog, "CHUNK", chunk)
        assert verify_db(db_path) == expected


def test_the_fast_path_reads_in_windows_of_any_size(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scanned in windows smaller than a frame header, than a frame, and of a few frames, every frame of
    puts still goes the fast way (a frame cut by a window's end is read again whole), and a log damaged
    anywhere is reported as the general path reports it."""
    b = LogBuilder()
    for i in range(20):
        b.put("a", f"x{i:02d}", f"content {i} " + "y" * (i * 7))
        if i % 6 == 5:
            with b.frame():
                for k in range(4):
                    b.put("a", f"x{i:02d}-{k}", f"in a frame {k}", tags=["f", f"t{k}"])
    built = b.build()
    clean = write(db_path, built.data).read_bytes()
    expected = both(db_path)
    rng = random.Random(38)
    for window in (1, 23, 24, 100, 333, 1000, 4096):
        monkeypatch.setattr(verify_file, "SCAN_WINDOW", window)
        write(db_path, clean)
        with counting_general_frames() as general:
            assert verify_db(db_path) == expected
        assert general == [1]  # only the genesis
        for _ in range(5):
            data = bytearray(clean)
            data[rng.randrange(33, len(data))] ^= 1 << rng.randrange(8)
            both(write(db_path, data))


def test_frames_between_runs_of_puts_are_read_from_the_scans_window(db_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A grant after every few puts sends each to the general path: the scan goes on in the window it read
    and hands the grant's frame to the reader, so the file is read once (the header's read takes the first
    CHUNK, the scan's window the rest), not again a CHUNK at a time around the grants; the report is the
    general path's."""
    assert verify_file.SCAN_WINDOW >= 64 * 4096
    b = LogBuilder()
    for i in range(400):
        b.put("a", f"x{i:03d}", f"content {i}", tags=["t"])
        if i % 8 == 7:
            b.grant("owner", f"bob{i}", "team:*", ["read"])
    size = len(write(db_path, b.build().data).read_bytes())
    read: list[int] = []
    pread, pread_into = filelog.pread, verify_file.pread_into

    def counted(fd: int, n: int, offset: int) -> bytes:
        data = pread(fd, n, offset)
        read.append(len(data))
        return data

    def counted_into(fd: int, view: memoryview, offset: int) -> int:
        read.append(pread_into(fd, view, offset))
        return read[-1]

    monkeypatch.setattr(filelog, "pread", counted)
    monkeypatch.setattr(verify_file, "pread_into", counted_into)
    for module in (filelog, verify_file):  # a log many CHUNKs long
        monkeypatch.setattr(module, "CHUNK", 4096)
    with counting_general_frames() as general:
        report = verify_db(db_path)
    assert report.ok and len(general) == 1 + 50  # the genesis and the grants
    assert sum(read) <= size + 2 * 4096
    for window in (100, 5000):
        monkeypatch.setattr(verify_file, "SCAN_WINDOW", window)
        assert both(db_path) == report


def test_a_client_database_verifies_and_gathers_the_same(db_path: Path) -> None:
    with MnemoClient(db_path, "agent-1", durability="none", signing_key=SEED, checkpoint_every=7) as c:
        ids = [c.remember(f"memory {i} ✓" * (i % 3 + 1), tags=[f"t{i % 3}", "all"],
                          metadata={"i": i}).id for i in range(30)]
        for rid in ids[:10]:
            c.update(rid, content="updated", expected_version=1)
        c.update(ids[0], tags=["x"])
        with c.transaction():
            for i in range(20):
                c.remember(b"\x00binary" * i, tags=["bin"])
        c.grant("bob", "agent:agent-1", ["read"])
        c.forget(ids[5:15], reason="asked")
        c.revoke("bob", "agent:agent-1")
        c.remember("last")
    assert both(db_path, pubkey=PUB).ok
