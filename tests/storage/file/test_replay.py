"""What opening a damaged or forged log file does: the replay refuses it with an IntegrityError that names
the damage and its offset, for a reader and a writer alike, and the file is left exactly as it was (a
writer cuts only a torn last frame; anything else is damage, never repaired by losing entries)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.logs import TS0, Built, LogBuilder, erase_slot, sample_log

from mnemo import IntegrityError, MnemoClient


def _puts(ts0: int = TS0) -> Built:
    b = LogBuilder(ts0=ts0)
    for i in range(4):
        b.put("a", f"r{i}", f"memory {i}")
    return b.build()


def _genesis_damaged() -> tuple[bytes, str]:
    _b, built = sample_log()
    data = bytearray(built.data)
    data[HEADER + 40] ^= 1
    return bytes(data), "the genesis frame at offset 32 is damaged (frame checksum mismatch at offset 32)"


def _complete_frame_damaged() -> tuple[bytes, str]:
    _b, built = sample_log()
    data = bytearray(built.data)
    start = built.frame_spans[3][0]
    data[start + 40] ^= 1
    return bytes(data), (f"damaged frame at offset {start} (frame checksum mismatch at offset {start}): a "
                         "complete frame that fails its checks is damage")


def _second_genesis() -> tuple[bytes, str]:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.add("genesis", "owner", {"db_id": b.db_id, "format": 1})
    built = b.build()
    return bytes(built.data), f"seq 2 is a genesis entry at offset {built.frame_spans[2][0]}"


def _no_genesis() -> tuple[bytes, str]:
    b = LogBuilder()
    b.items.clear()
    b.frames.clear()
    b.add("grant", "owner", {"perms": ["read"], "principal": "bob", "scope": "team:x"})
    return bytes(b.build().data), "seq 0 is a grant entry at offset 32"


def _broken_link() -> tuple[bytes, str]:
    """Another log's frame at the next seq: its CRC is sound, its prev is not this chain's head."""
    ours, theirs = _puts(TS0), _puts(TS0 + 1)
    cut = ours.frame_spans[3][0]
    return bytes(ours.data[:cut] + theirs.data[theirs.frame_spans[3][0]:]), (
        f"entry seq 3 at offset {cut} does not link to the chain")


def _version_out_of_order() -> tuple[bytes, str]:
    b = LogBuilder()
    b.put("a", "x", "one")
    b.versions["y"] = 1
    b.put("a", "y", "version 2 of a record never put")
    built = b.build()
    return bytes(built.data), f"bad entry in frame at offset {built.frame_spans[2][0]}: put of y version 2, expected 1"


def _a_record_made_twice() -> tuple[bytes, str]:
    """Two puts of one new id, both its version 1 (read together by the scan core)."""
    b = LogBuilder()
    b.put("a", "x", "one")
    b.versions.clear()
    b.put("a", "x", "one again")
    built = b.build()
    return bytes(built.data), f"bad entry in frame at offset {built.frame_spans[2][0]}: put of x version 1, expected 2"


def _versions_in_one_frame(second: int) -> tuple[bytes, str]:
    """One frame puts record x twice: as version 1, then as `second` (2 would follow)."""
    b = LogBuilder()
    with b.frame():
        b.put("a", "x", "one")
        b.versions["x"] = second - 1
        b.put("a", "x", "two")
    built = b.build()
    return bytes(built.data), (
        f"bad entry in frame at offset {built.frame_spans[1][0]}: put of x version {second}, expected 2")


def _payload_that_does_not_decode() -> tuple[bytes, str]:
    """A put whose payload slot checks (its CRC is of these bytes) but holds no put payload."""
    b = LogBuilder()
    b.put("a", "x", "one")
    body = dict(b.items[-1][0].body, id="y")
    b.add("put", "a", body, b"\x00" * 40)
    b.put("a", "z", "after it")
    built = b.build()
    slot = built.slots[2][0]
    return bytes(built.data), f"unreadable put payload: unpack(b) received extra data. at offset {slot}"


HEADER = 32
CASES: dict[str, Callable[[], tuple[bytes, str]]] = {
    "genesis damaged": _genesis_damaged,
    "a complete frame damaged": _complete_frame_damaged,
    "a second genesis": _second_genesis,
    "no genesis": _no_genesis,
    "a broken link": _broken_link,
    "a version out of order": _version_out_of_order,
    "a payload that does not decode": _payload_that_does_not_decode,
    "a record made twice": _a_record_made_twice,
    "a record made twice in one frame": lambda: _versions_in_one_frame(1),
    "a version skipped in one frame": lambda: _versions_in_one_frame(3),
}


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "writer"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_log_does_not_open_and_is_left_as_it_was(tmp_path: Path, case: str, readonly: bool) -> None:
    data, why = CASES[case]()
    db = tmp_path / "m.db"
    db.write_bytes(data)
    with pytest.raises(IntegrityError) as info:
        MnemoClient(db, "owner", readonly=readonly)
    assert str(info.value) == f"{db}: {why}"
    assert db.read_bytes() == data
    # beside it at most the leaf-hash cache a writer opens before it replays (a cache, rebuilt from the log)
    assert {p.name for p in tmp_path.iterdir()} <= {"m.db", "m.db.leaves"}


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "writer"])
def test_a_torn_frame_that_held_a_durable_forget_is_damage(tmp_path: Path, readonly: bool) -> None:
    """Payloads are zeroed only once their forget is durable: a last frame cut short whose forget names
    a record with an erased slot was written whole once, so it is damage, never a tear to cut."""
    b = LogBuilder()
    b.put("a", "x", "one")
    b.forget("a", ["x"])
    built = b.build()
    data = bytearray(built.data)
    erase_slot(data, built, 1)
    start, end = built.frame_spans[-1]
    torn = bytes(data[: start + (end - start) // 2])
    db = tmp_path / "m.db"
    db.write_bytes(torn)
    with pytest.raises(IntegrityError) as info:
        MnemoClient(db, "owner", readonly=readonly)
    assert str(info.value) == (
        f"{db}: damaged frame at offset {start} (file ends inside a frame); it held a durable forget")
    assert db.read_bytes() == torn


def test_a_torn_last_frame_is_cut_by_a_writer_and_named_with_its_size(tmp_path: Path) -> None:
    built = _puts()
    start, end = built.frame_spans[-1]
    db = tmp_path / "m.db"
    db.write_bytes(bytes(built.data[: start + 30]))
    with MnemoClient(db, "owner", readonly=True) as r:  # a reader stops before it, cuts nothing
        assert r.head[0] == 3 and os.path.getsize(db) == start + 30
    with MnemoClient(db, "owner") as w:
        assert w.recovery == [f"cut a torn last frame at offset {start} (30 bytes): file ends inside a frame"]
        assert w.head[0] == 3
    assert db.read_bytes() == bytes(built.data[:start])


def test_a_tear_holding_a_whole_frame_of_the_next_seq_is_still_a_tear(tmp_path: Path) -> None:
    """A last frame cut short is a tear even when its content holds a whole frame of the next seq (another
    log's, its checksum sound): that frame lies inside the torn frame's payload, where the frame's own
    header puts no frame of the chain, and it links to nothing of this chain. The writer cuts it."""
    theirs = _puts(TS0 + 1)
    frame = bytes(theirs.data[theirs.frame_spans[4][0]:theirs.frame_spans[4][1]])  # seq 4
    b = LogBuilder()
    for i in range(3):
        b.put("a", f"r{i}", f"memory {i}")
    b.put("a", "r3", b"a copy: " + frame + b" and more after it")  # seq 4 too
    built = b.build()
    start = built.frame_spans[-1][0]
    at = bytes(built.data).index(frame, start)
    torn = bytes(built.data[: at + len(frame) + 4])  # cut after the copy, inside the frame holding it
    db = tmp_path / "m.db"
    db.write_bytes(torn)
    with MnemoClient(db, "owner") as w:
        assert w.recovery == [
            f"cut a torn last frame at offset {start} ({len(torn) - start} bytes): file ends inside a frame"]
        assert w.head[0] == 3
    assert db.read_bytes() == bytes(built.data[:start])


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "writer"])
def test_a_put_making_again_a_record_the_snapshot_holds_is_damage(tmp_path: Path, readonly: bool) -> None:
    """The index comes from the snapshot (its compact form), and a frame appended after it makes,
    as version 1, a record the snapshot already holds: the replay refuses it as the general path does."""
    from helpers.frames import read_entries

    from mnemo.chain.codec import encode_put_payload, make_entry, pack_record_fields, payload_digest
    from mnemo.storage.file.framing import encode_frame

    db = tmp_path / "m.db"
    with MnemoClient(db, "owner", durability="none") as c:
        rid = c.remember("the original").id
        for i in range(3):
            c.remember(f"other {i}")
    head = read_entries(db)[-1]
    salt, packed = bytes(16), pack_record_fields("a second version 1", [], {})
    body = {"digest": payload_digest(salt, packed), "id": rid, "scope": "agent:owner", "size": 18, "ver": 1}
    forged = make_entry(head.seq + 1, head.ts_ns + 1, head.hash, "put", "owner", body)
    offset = os.path.getsize(db)
    with open(db, "ab") as f:
        f.write(encode_frame([(forged.raw, encode_put_payload(salt, packed))]))
    data = db.read_bytes()
    with pytest.raises(IntegrityError) as info:
        MnemoClient(db, "owner", readonly=readonly)
    assert str(info.value) == f"{db}: bad entry in frame at offset {offset}: put of {rid} version 1, expected 2"
    assert db.read_bytes() == data


def test_a_tree_that_does_not_follow_the_replayed_log_is_an_integrity_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for a write (tests/storage/file/test_store.py), for the puts the scan core replays: only a bug makes
    the tree refuse them, and the open says so as an IntegrityError naming the tree."""
    from mnemo import MnemoError
    from mnemo.storage.file.tree_state import TreeState

    db = tmp_path / "m.db"
    db.write_bytes(bytes(_puts().data))

    def refuse(self: TreeState, leaves: bytes, first_seq: int) -> None:
        raise MnemoError(f"leaf cache ends before seq {first_seq}")

    monkeypatch.setattr(TreeState, "add_leaves", refuse)
    with pytest.raises(IntegrityError) as info:
        MnemoClient(db, "owner", readonly=True)
    assert str(info.value) == f"{db}: the Merkle tree does not follow the log: leaf cache ends before seq 1"
