"""The scan core (mnemo/storage/file/scan.py and its C twin mnemo/_speedups.c): the two return equal
results on every buffer, clean or damaged; replay and verify through either give the indexes and the
reports that the general path (frames decoded one by one) gives; MNEMO_PURE_PYTHON picks the twin."""

from __future__ import annotations

import hashlib
import importlib
import os
import random
import subprocess
import sys
import zlib
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import msgpack
import pytest
from helpers.logs import LogBuilder, erase_slot, fix_frame_crc, fix_slot_crc, rich_log
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.audit import verify_db, verify_db_and_index
from mnemo.chain.codec import ZERO_HASH, encode_put_payload, make_entry, payload_digest
from mnemo.errors import MnemoError
from mnemo.storage.file import replay, scan
from mnemo.storage.file import verify as verify_file
from mnemo.storage.file.framing import FRAME_HEADER, HEADER_SIZE, encode_frame, parse_frame
from mnemo.storage.file.store import FileStore

# The C extension is built by the package's install (README): these tests hold it to its twin.
speedups = importlib.import_module("mnemo._speedups")
FLAGS = (0, scan.DIGEST, scan.LEAVES, scan.DIGEST | scan.LEAVES)


def native(*args: Any) -> scan.ScanResult:
    """The C scan, called as scan.scan_frames is (row0 defaulting to 0)."""
    return scan.ScanResult(*speedups.scan(*args, *((0,) if len(args) == 8 else ())))


def assert_twins(buf: bytes | bytearray, base: int, pos: int, seq: int, last: bytes, stop: int = -1,
                 max_frame: int = 1 << 31, flags: int = 3, row0: int = 0) -> scan.ScanResult:
    args = (buf, base, pos, seq, last, stop, max_frame, flags, row0)
    want = scan.pure_scan(*args)
    assert native(*args) == want
    return want


def damaged_logs(n: int = 25, trials: int = 240, seed: int = 2024) -> Iterator[bytes]:
    """The corruption corpus of the verifier's tests (audit/test_fast_path.py): byte flips anywhere, flips under
    a forger's fixed frame or slot checksum, erased slots, cuts and swapped frames."""
    built = rich_log(n).build()
    rng = random.Random(seed)
    clean = bytes(built.data)
    spans = built.frame_spans
    yield clean
    for trial in range(trials):
        data = bytearray(clean)
        kind = trial % 6
        if kind == 0:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == 1:
            start, _end = spans[rng.randrange(1, len(spans))]
            _m, _c, _f, elen, _p = FRAME_HEADER.unpack_from(data, start)
            data[start + FRAME_HEADER.size + rng.randrange(elen)] ^= 1 << rng.randrange(8)
            fix_frame_crc(data, start)
        elif kind == 2:
            off, length = built.slots[rng.choice(sorted(built.slots))]
            data[off + 4 + rng.randrange(length - 4)] ^= 1 << rng.randrange(8)
            fix_slot_crc(data, off, length)
        elif kind == 3:
            erase_slot(data, built, rng.choice(sorted(built.slots)))
        elif kind == 4:
            del data[rng.randrange(33, len(data)):]
        else:
            k = rng.randrange(1, len(spans) - 1)
            (a0, a1), (b0, b1) = spans[k], spans[k + 1]
            data[a0:b1] = data[b0:b1] + data[a0:a1]
        yield bytes(data)


def frame_starts(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(offset, first seq, prev of its first entry) of every frame that parses, found by its magic."""
    i = data.find(b"MNFR")
    while i != -1:
        try:
            frame = parse_frame(data, i, i)
            yield i, frame.entries[0].seq, frame.entries[0].prev
        except ValueError:
            pass
        i = data.find(b"MNFR", i + 1)


# -- the twins -------------------------------------------------------------------------------------------


def test_a_clean_log_is_read_whole_and_exactly() -> None:
    b = LogBuilder()
    b.put("a", "x0", "zero", tags=["b", "a"])
    with b.frame():
        for i in range(5):
            b.put("ägent", f"y{i}", f"content ✓ {i}", tags=["t", f"u{i % 2}"], metadata={"i": i})
    b.put("a", "x1", b"\x00\xff binary", scope="team:x")
    built = b.build()
    data = bytes(built.data)
    genesis = built.entries[0]
    for flags in FLAGS:
        res = assert_twins(data, 0, built.frame_spans[1][0], 1, genesis.hash, flags=flags, row0=3)
        assert res.pos == len(data) and res.need == 0 and res.seq == 8
        assert res.last == built.entries[-1].hash
        assert res.ids == ["x0", *(f"y{i}" for i in range(5)), "x1"]
        assert res.hashes == b"".join(e.hash for e in built.entries[1:])
        assert res.scopes == ["agent:a", "agent:ägent", "team:x"]
        assert res.agents == ["a", "ägent"]
        assert res.tagsets == [("a", "b"), ("t", "u0"), ("t", "u1"), ()]
        assert res.tags == ["a", "b", "t", "u0", "u1"]
        assert res.frame_spans() == [(s, e, len(f)) for (s, e), f in zip(built.frame_spans[1:], b.frames[1:],
                                                                          strict=True)]
        from array import array

        assert list(array("I", res.tag_lens)) == [1, 1, 5, 3, 2]
        assert list(array("I", res.tag_rows)) == [3, 3, 4, 5, 6, 7, 8, 4, 6, 8, 5, 7]
        cols = {k: list(array("I" if k in ("ver", "slot_len", "entry_len") else "q", v))
                for k, v in res.columns.items()}
        assert cols["seq"] == list(range(1, 8)) and cols["ver"] == [1] * 7
        assert cols["slot_off"] == [built.slots[s][0] for s in range(1, 8)]
        assert cols["slot_len"] == [built.slots[s][1] for s in range(1, 8)]
        assert cols["ts"] == [e.ts_ns for e in built.entries[1:]]
        assert cols["size"] == [4, *(len(f"content ✓ {i}".encode()) for i in range(5)), 9]
        if flags & scan.LEAVES:
            import hashlib

            assert res.leaves == b"".join(hashlib.sha256(b"\x00" + e.raw).digest() for e in built.entries[1:])
        else:
            assert res.leaves == b""


def test_distinct_values_are_numbered_first_seen_first_however_many_and_long() -> None:
    """The scan's tables of distinct values hold keys of up to 16 bytes in themselves and longer ones in
    the buffer: over hundreds of scopes, agents, tags and tag sets, short and long (some alike but for
    their last byte, some prefixes of others), seen again in another order, each gets its code."""
    b = LogBuilder()
    names = [f"v{i}" for i in range(300)] + [f"{'long-' * 4}{i:04d}" for i in range(300)]
    names += ["x" * 16, "x" * 17, "x" * 15, "x" * 40]
    order = list(range(len(names))) + [(7 * i) % len(names) for i in range(len(names))]
    with b.frame():
        for row, k in enumerate(order):
            name = names[k]
            b.put(name, f"id{row:05d}", "c", tags=sorted({name, names[(k + 1) % len(names)]}),
                  scope=f"team:{name}")
    built = b.build()
    res = assert_twins(bytes(built.data), 0, built.frame_spans[1][0], 1, built.entries[0].hash, flags=0)
    assert res.agents == names and res.scopes == [f"team:{n}" for n in names]
    assert [res.agents[c] for c in array("I", res.agent_codes)] == [names[k] for k in order]
    want_sets = [tuple(sorted({names[k], names[(k + 1) % len(names)]})) for k in order]
    assert [res.tagsets[c] for c in array("I", res.tagset_codes)] == want_sets
    assert res.tagsets == list(dict.fromkeys(want_sets))
    assert set(res.tags) == set(names)


def test_a_frame_left_to_the_general_path_numbers_none_of_its_values() -> None:
    """The values of a frame are numbered once the whole frame is taken: a frame of puts whose last put is
    damaged (its payload changed under a fixed slot checksum) gives none of its new scopes, agents, tags
    or tag sets, nor its ids, though the puts before it in the frame were read; rows of one new tag set
    in a row, and again in a later frame, are one tag set."""
    b = LogBuilder()
    with b.frame():
        for i in range(4):
            b.put("a", f"x{i}", "c", tags=["same", "set"])
    b.put("a", "x4", "c", tags=["set", "same"])
    b.put("b", "x5", "c", tags=["other"])
    with b.frame():
        b.put("new-agent-with-a-long-name", "y0", "c", tags=["fresh", "same"], scope="team:a-new-scope-long")
        b.put("a", "y1", "c", tags=["also-fresh"])
    b.put("a", "y2", "c")
    built = b.build()
    start, g = built.frame_spans[1][0], built.entries[0].hash
    for flags in FLAGS:
        clean = assert_twins(bytes(built.data), 0, start, 1, g, flags=flags)
        assert clean.ids == ["x0", "x1", "x2", "x3", "x4", "x5", "y0", "y1", "y2"]
        assert clean.tagsets == [("same", "set"), ("other",), ("fresh", "same"), ("also-fresh",), ()]
        data = bytearray(built.data)
        off, length = built.slots[8]  # y1, the frame's last put
        data[off + length - 1] ^= 1
        fix_slot_crc(data, off, length)
        res = assert_twins(bytes(data), 0, start, 1, g, flags=flags)
        assert res.pos == built.frame_spans[4][0]  # the damaged frame, left whole to the general path
        assert res.ids == ["x0", "x1", "x2", "x3", "x4", "x5"] and res.id_bytes == b"x0x1x2x3x4x5"
        assert res.scopes == ["agent:a", "agent:b"] and res.agents == ["a", "b"]
        assert res.tagsets == [("same", "set"), ("other",)] and res.tags == ["same", "set", "other"]
        assert list(array("I", res.tagset_codes)) == [0, 0, 0, 0, 0, 1]
        assert list(array("I", res.tag_lens)) == [5, 5, 1]


def test_what_the_scan_leaves_to_the_general_path() -> None:
    """It stops before: another op, a frame holding the stop seq, a frame longer than the bound, a
    frame not whole in the buffer (saying how long it is), the wrong seq or prev; never raises."""
    b = LogBuilder()
    for i in range(3):
        b.put("a", f"x{i}", f"c{i}")
    b.grant("owner", "bob", "team:*", ["read"])
    b.put("a", "x3", "c3")
    built = b.build()
    data = bytes(built.data)
    g = built.entries[0].hash
    start = built.frame_spans[1][0]
    assert assert_twins(data, 0, start, 1, g).pos == built.frame_spans[4][0]  # the grant
    assert assert_twins(data, 0, start, 1, g, stop=2).pos == built.frame_spans[2][0]
    assert assert_twins(data, 0, start, 1, g, max_frame=10).ids == []
    cut = assert_twins(data[:built.frame_spans[2][1] - 1], 0, start, 1, g)
    assert cut.pos == built.frame_spans[2][0] and cut.need == built.frame_spans[2][1] - built.frame_spans[2][0]
    assert assert_twins(data, 0, start, 2, g).ids == []
    assert assert_twins(data, 0, start, 1, ZERO_HASH).ids == []
    with pytest.raises(ValueError):
        scan.pure_scan(data, 0, start, 0, g, -1, 1 << 31, 3)
    with pytest.raises(ValueError):
        speedups.scan(data, 0, start, 0, g, -1, 1 << 31, 3, 0)
    with pytest.raises(ValueError):
        speedups.scan(data, 0, start, 1, b"short", -1, 1 << 31, 3, 0)


def test_the_twins_agree_on_the_corruption_corpus() -> None:
    for data in damaged_logs():
        starts = list(frame_starts(data))
        for k, (off, seq, prev) in enumerate(starts):
            if seq < 1:
                continue
            flags = FLAGS[k % 4]
            assert_twins(data, 7, off, seq, prev, flags=flags, row0=k)
            assert_twins(memoryview(data)[:off + 97], 0, off, seq, prev, flags=flags)  # cut inside


@pytest.fixture(params=[True, False], ids=["cpu-paths", "portable-paths"])
def cpu_paths(request: pytest.FixtureRequest) -> Iterator[bool]:
    """The C scan with its CPU-specific CRC-32 and SHA-256 (where the CPU has them), and without."""
    before = speedups.cpu_paths()
    speedups.cpu_paths(request.param)
    try:
        yield request.param
    finally:
        speedups.cpu_paths(any(before))


def test_the_twins_agree_on_the_corruption_corpus_without_the_cpu_paths() -> None:
    before = speedups.cpu_paths()
    assert speedups.cpu_paths(False) == (False, False)
    try:
        for data in damaged_logs(trials=24):
            for k, (off, seq, prev) in enumerate(frame_starts(data)):
                if seq >= 1:
                    assert_twins(data, 0, off, seq, prev, flags=FLAGS[k % 4])
    finally:
        speedups.cpu_paths(any(before))


def test_crc32_and_the_entry_hashes_are_zlibs_and_hashlibs(cpu_paths: bool) -> None:
    rng = random.Random(38)
    # every length up to 300 (each side of 16- and 64-byte blocks and SHA-256's 55/56-byte padding edge),
    # then longer ones, at every offset of an 8-byte word
    for n in [*range(301), 1000, 4096, 65_535, 65_536, 1 << 20]:
        data = rng.randbytes(n + 7)
        off = n % 8
        view = memoryview(data)[off:off + n]
        value = rng.getrandbits(32) if n % 2 else 0
        assert speedups.crc32(view, value) == zlib.crc32(view, value)
        payload = data[:n // 3 * 5 % 701]
        assert speedups.entry_hashes(view, payload) == (
            hashlib.sha256(view).digest(), hashlib.sha256(b"\0" + bytes(view)).digest(),
            hashlib.sha256(payload).digest(),
        )
    assert speedups.crc32(b"") == 0
    assert speedups.crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value


def _put_frame(prev: bytes, seq: int, packed: bytes, content_size: int, rec_id: str = "x") -> bytes:
    salt = b"\x07" * 16
    body = {"digest": payload_digest(salt, packed), "id": rec_id, "scope": "agent:a", "size": content_size,
            "ver": 1}
    e = make_entry(seq, 1_764_500_000_000_000_000, prev, "put", "a", body)
    return encode_frame([(e.raw, encode_put_payload(salt, packed))], seq)


PACKED_VARIANTS: list[tuple[Any, bool]] = [
    (["abc", ["a", "b"], {"k": [1, 2.5, None, True, b"x", {"n": -3}]}], True),
    ([b"abc", [], {}], True),
    (["abc", ["b", "a"], {}], False),  # unsorted tags
    (["abc", ["a", "a"], {}], True),  # sorted with a repeat: as the verifier reads it
    (["abc", ["a", 1], {}], False),
    (["abc", ["a"], {1: "int key"}], False),
    (["abc", ["a"], {b"k": 1}], False),
    (["abc", ["a"], []], False),
    (["abc", ["a"]], False),
    (["abcd", ["a"], {}], False),  # size says 3
    ([3, ["a"], {}], False),
    (["abc", ["a"], {"e": msgpack.ExtType(5, b"x")}], False),
    (["abc", ["a"], {"t": msgpack.Timestamp(1, 0)}], False),
]


@pytest.mark.parametrize(("fields", "taken"), PACKED_VARIANTS)
def test_packed_fields_the_scan_takes(fields: Any, taken: bool) -> None:
    genesis = make_entry(0, 1, ZERO_HASH, "genesis", "o", {"db_id": b"\x00" * 16, "format": 1})
    packed = msgpack.packb(fields, use_bin_type=True)
    data = _put_frame(genesis.hash, 1, packed, 3)
    res = assert_twins(data, 0, 0, 1, genesis.hash)
    assert bool(res.ids) == taken


def test_deep_nesting_invalid_utf8_and_overlong_strings() -> None:
    genesis = make_entry(0, 1, ZERO_HASH, "genesis", "o", {"db_id": b"\x00" * 16, "format": 1})
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    for depth, taken in ((31, True), (32, True), (33, False), (40, False)):
        nested: Any = 1
        for _ in range(depth - 1):
            nested = [nested]
        packed = msgpack.packb(["abc", [], {"d": nested}], use_bin_type=True)
        assert bool(assert_twins(_put_frame(genesis.hash, 1, packed, 3), 0, 0, 1, genesis.hash).ids) == taken
    for bad in (b"\xa3a\xc3\x28", b"\xa3\xed\xa0\x80", b"\xa2\xc0\x80", b"\xa4\xf4\x90\x80\x80", b"\xa1\x80"):
        size = bad[0] - 0xA0
        for packed in (b"\x93" + bad + b"\x90\x80", b"\x93\xa1x\x91" + bad + b"\x80",
                       b"\x93\xa1x\x90\x81" + bad + b"\x01"):
            data = _put_frame(genesis.hash, 1, packed, size if packed[1] != 0xA1 else 1)
            assert assert_twins(data, 0, 0, 1, genesis.hash).ids == []
    ok = b"\x93\xda\x00\x03abc\xdc\x00\x01\xdb\x00\x00\x00\x01a\xde\x00\x01\xd9\x01k\xcb" + b"\x00" * 8
    assert assert_twins(_put_frame(genesis.hash, 1, ok, 3), 0, 0, 1, genesis.hash).tagsets == [("a",)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_twins_agree_on_random_damage(data: st.DataObject) -> None:
    built = _sample()
    buf = bytearray(built)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(buf) - 1))
        buf[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del buf[data.draw(st.integers(HEADER_SIZE, len(buf))):]
    for off, seq, prev in list(frame_starts(bytes(buf)))[:3] or [(HEADER_SIZE, 1, ZERO_HASH)]:
        assert_twins(buf, 0, off, max(seq, 1), prev, flags=data.draw(st.sampled_from(FLAGS)))


_SAMPLE: list[bytes] = []


def _sample() -> bytes:
    if not _SAMPLE:
        _SAMPLE.append(bytes(rich_log(8).build().data))
    return _SAMPLE[0]


# -- replay and verify through either twin, and without the scan -----------------------------------------


def _replay(path: Path, how: str) -> tuple[Any, ...]:
    """Open the log read-only by replay: through the C scan, its twin, or the general path alone."""
    patches: list[Any] = []
    if how == "python":
        patches.append(mock.patch.object(replay, "scan_frames", scan.pure_scan))
    elif how == "native":
        patches.append(mock.patch.object(replay, "scan_frames", native))
    else:
        patches.append(mock.patch.object(FileStore, "_apply_scanned", lambda self, reader: False))
    for p in patches:
        p.start()
    try:
        s = FileStore(str(path), "reader", readonly=True, use_snapshot=False)
    except MnemoError as exc:
        return ("error", type(exc).__name__, str(exc))
    finally:
        for p in patches:
            p.stop()
    try:
        state = s.index.to_state()
        return (state, s.index.acl.to_state(), s.end, s.last_frame_offset, s.head_ts, s.tree.head(),
                sorted(s._erased_live))
    finally:
        s.close()


def _verify(path: Path, how: str) -> tuple[Any, ...]:
    fn: Callable[..., Any] = scan.pure_scan if how == "python" else native
    with mock.patch.object(verify_file, "scan_frames", fn):
        report = verify_db(path)
        report_index, expected = verify_db_and_index(path)
    return report, report_index, expected.live, expected.older, expected.forgotten, expected.head_hash


def test_replay_gives_the_same_index_every_way_on_the_corruption_corpus(tmp_path: Path) -> None:
    path = tmp_path / "db.mnemo"
    for i, data in enumerate(damaged_logs(trials=90, seed=99)):
        path.write_bytes(data)
        general = _replay(path, "general")
        assert _replay(path, "native") == general, i
        assert _replay(path, "python") == general, i


def test_verify_reports_the_same_through_either_twin_on_the_corruption_corpus(tmp_path: Path) -> None:
    path = tmp_path / "db.mnemo"
    for data in damaged_logs(trials=90, seed=5):
        path.write_bytes(data)
        assert _verify(path, "native") == _verify(path, "python")


def test_replay_of_updates_forgets_and_reused_ids(tmp_path: Path) -> None:
    """Updates of records of earlier frames, a record put twice in one frame, an id reused after its
    forget, a version that does not follow (an error, reported as the general path reports it)."""
    path = tmp_path / "db.mnemo"
    b = LogBuilder()
    for i in range(6):
        b.put("a", f"r{i}", f"v1 {i}", tags=["t", f"k{i % 2}"])
    with b.frame():
        b.put("a", "r1", "v2", tags=["t"])
        b.put("a", "n0", "new")
        b.put("a", "n0", "new again", tags=["z"])
    b.forget("a", ["r2"], reason="asked")
    b.put("a", "r2", "reborn")
    b.put("a", "r3", "v2")
    path.write_bytes(bytes(b.build().data))
    general = _replay(path, "general")
    assert general[0] != "error"
    assert _replay(path, "native") == general == _replay(path, "python")
    # a put whose version does not follow, in the middle of a frame of good ones
    bad = LogBuilder()
    bad.put("a", "r0", "v1")
    with bad.frame():
        bad.put("a", "q", "fine")
        bad.versions["r0"] = 5
        bad.put("a", "r0", "v6 instead of v2")
    path.write_bytes(bytes(bad.build().data))
    general = _replay(path, "general")
    assert general[0] == "error" and "version 6, expected 2" in general[2]
    assert _replay(path, "native") == general == _replay(path, "python")


def test_a_client_database_opens_to_the_same_index_every_way(tmp_path: Path) -> None:
    path = tmp_path / "db.mnemo"
    with MnemoClient(path, "agent-1", durability="none") as c:
        ids = [c.remember(f"memory {i} ✓", tags=[f"t{i % 3}", "all"], metadata={"i": i}).id for i in range(40)]
        with c.transaction():
            for i in range(30):
                c.remember(b"\x00bin" * i, tags=["bin"])
        for rid in ids[:8]:
            c.update(rid, content="updated", expected_version=1)
        c.grant("bob", "agent:agent-1", ["read"])
        c.forget(ids[10:15], reason="asked")
    general = _replay(path, "general")
    assert _replay(path, "native") == general == _replay(path, "python")


# -- the switch -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [("1", "python"), ("yes", "python"), ("0", "native"), ("", "native")])
def test_mnemo_pure_python_picks_the_twin(value: str, expected: str) -> None:
    env = dict(os.environ, MNEMO_PURE_PYTHON=value)
    code = ("from mnemo._native import implementation; from mnemo.storage.file import scan; "
            "from mnemo.chain import tree; "
            "print(implementation(), scan.scan_frames.__name__, tree.speedups is not None)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    name = "native_scan" if expected == "native" else "pure_scan"
    assert out.split() == [expected, name, str(expected == "native")]
