"""Builders for hand-made log files (docs/FORMAT.md), used by the audit, CLI and chain-vector tests.

They write logs with the library's own encoders (codec, framing), so the tests need no client, and they
can damage or forge a log in every way the verifier must catch.
"""

from __future__ import annotations

import os
import random
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemo.audit import load_private_key, sign_checkpoint
from mnemo.chain.codec import (
    ZERO_HASH,
    Entry,
    encode_forget_payload,
    encode_put_payload,
    make_entry,
    pack_record_fields,
    payload_digest,
)
from mnemo.storage.file.framing import FRAME_HEADER, TRAILER, encode_file_header, encode_frame, parse_frame

DB_ID = bytes(range(16))
TS0 = 1_764_500_000_000_000_000
SEED = b"\x42" * 32


@dataclass
class Built:
    """A log file's bytes plus where each frame, entry and slot lies in it."""

    data: bytearray
    entries: list[Entry]
    frame_spans: list[tuple[int, int]]  # (start, end) of each frame
    frame_of: dict[int, int]  # seq -> index of its frame
    slots: dict[int, tuple[int, int]]  # seq -> (slot offset, slot length) for entries with a payload

    def write(self, path: Path) -> Path:
        path.write_bytes(bytes(self.data))
        return path

    def frame_bytes(self, seq: int) -> bytes:
        start, end = self.frame_spans[self.frame_of[seq]]
        return bytes(self.data[start:end])


class LogBuilder:
    """Append entries (each its own frame unless grouped) and build the log file's bytes."""

    def __init__(self, owner: str = "owner", db_id: bytes = DB_ID, ts0: int = TS0) -> None:
        self.db_id = db_id
        self.ts = ts0
        self.items: list[tuple[Entry, bytes | None]] = []
        self.frames: list[list[int]] = []
        self._group: list[int] | None = None
        self.versions: dict[str, int] = {}
        self.add("genesis", owner, {"db_id": db_id, "format": 1})

    @property
    def head(self) -> Entry:
        return self.items[-1][0]

    def add(self, op: str, agent: str, body: dict[str, Any], payload: bytes | None = None) -> Entry:
        seq = len(self.items)
        prev = self.head.hash if self.items else ZERO_HASH
        entry = make_entry(seq, self.ts + seq * 1000, prev, op, agent, body)
        self.items.append((entry, payload))
        if self._group is not None:
            self._group.append(seq)
        else:
            self.frames.append([seq])
        return entry

    @contextmanager
    def frame(self) -> Iterator[None]:
        """Entries added inside share one frame."""
        self._group = []
        try:
            yield
        finally:
            if self._group:
                self.frames.append(self._group)
            self._group = None

    def put(
        self, agent: str, rid: str, content: str | bytes, tags: tuple[str, ...] | list[str] = (),
        metadata: dict[str, Any] | None = None, scope: str | None = None, salt: bytes | None = None,
    ) -> Entry:
        salt = salt if salt is not None else os.urandom(16)
        packed = pack_record_fields(content, list(tags), metadata or {})
        ver = self.versions.get(rid, 0) + 1
        self.versions[rid] = ver
        size = len(content.encode()) if isinstance(content, str) else len(content)
        body = {"digest": payload_digest(salt, packed), "id": rid, "scope": scope or f"agent:{agent}",
                "size": size, "ver": ver}
        return self.add("put", agent, body, encode_put_payload(salt, packed))

    def forget(self, agent: str, ids: list[str], reason: str | None = None) -> Entry:
        for rid in ids:
            self.versions.pop(rid, None)
        return self.add("forget", agent, {"ids": ids}, encode_forget_payload(reason))

    def grant(self, agent: str, principal: str, scope: str, perms: list[str], op: str = "grant") -> Entry:
        return self.add(op, agent, {"perms": sorted(perms), "principal": principal, "scope": scope})

    def checkpoint(self, key: Any = SEED, agent: str = "owner") -> Entry:
        head = self.head
        return self.add("checkpoint", agent, sign_checkpoint(key, self.db_id, head.seq, head.hash))

    def build(self) -> Built:
        data = bytearray(encode_file_header(self.db_id))
        spans: list[tuple[int, int]] = []
        frame_of: dict[int, int] = {}
        slots: dict[int, tuple[int, int]] = {}
        for i, seqs in enumerate(self.frames):
            blob = encode_frame([(self.items[s][0].raw, self.items[s][1]) for s in seqs])
            start = len(data)
            frame = parse_frame(blob, 0, start)
            for s, slot in zip(seqs, frame.slots, strict=True):
                frame_of[s] = i
                if slot.length:
                    slots[s] = (slot.offset, slot.length)
            data += blob
            spans.append((start, len(data)))
        return Built(data, [e for e, _ in self.items], spans, frame_of, slots)


def pubkey_hex(seed: bytes = SEED) -> str:
    from mnemo.audit import public_key_bytes

    return public_key_bytes(load_private_key(seed)).hex()


def fix_frame_crc(data: bytearray, start: int) -> None:
    """Recompute the checksum of the frame at `start`, as a forger who knows the format would."""
    _m, _count, _first, elen, plen = FRAME_HEADER.unpack_from(data, start)
    crc_end = start + FRAME_HEADER.size + elen
    struct.pack_into(">I", data, crc_end + plen, zlib.crc32(bytes(data[start:crc_end])))
    assert TRAILER.size == 8


def fix_slot_crc(data: bytearray, slot_offset: int, slot_length: int) -> None:
    payload = bytes(data[slot_offset + 4: slot_offset + slot_length])
    struct.pack_into(">I", data, slot_offset, zlib.crc32(payload))


def erase_slot(data: bytearray, built: Built, seq: int) -> None:
    off, length = built.slots[seq]
    data[off: off + length] = bytes(length)


def sample_log(n_puts: int = 6, checkpoint: bool = False) -> tuple[LogBuilder, Built]:
    """A small log: genesis, a grant, puts (one updated), a transaction frame, a forget."""
    b = LogBuilder()
    b.grant("owner", "bob", "agent:agent-1", ["read"])
    for i in range(n_puts):
        b.put("agent-1", f"r{i}", f"memory number {i}", tags=[f"t{i % 3}", "all"], metadata={"i": i})
    b.put("agent-1", "r0", "memory number 0, updated", tags=["all"], metadata={"i": 0, "v": 2})
    with b.frame():
        b.put("agent-1", "tx1", b"\x00\x01binary", tags=["bin"])
        b.put("agent-1", "tx2", "second in the frame")
    b.forget("agent-1", ["r1"], reason="asked to")
    if checkpoint:
        b.checkpoint()
    return b, b.build()


def rich_log(n: int = 40) -> LogBuilder:
    """Puts in single and multi-entry frames, updates, re-puts of a forgotten id, binary and non-ASCII
    content, several agents and scopes, grants, a revoke, forgets and checkpoints."""
    rng = random.Random(7)
    b = LogBuilder()
    b.grant("owner", "bob", "team:*", ["read", "write"])
    for i in range(n):
        agent = ("agent-1", "bob", "ägent-ü")[i % 3]
        content: str | bytes = f"memory {i}: " + "x" * rng.randrange(0, 300)
        if i % 7 == 3:
            content = bytes(range(i % 256)) + b"\xff\x00"
        elif i % 7 == 5:
            content = "ünïcödé " * (i % 5) + "✓"
        tags = sorted({f"t{i % 4}", "all", f"ü{i % 2}"})[: i % 4]
        meta: dict[str, Any] = {"i": i, "nested": {"b": [1, 2.5, None, True], "a": "x"}} if i % 2 else {}
        if i % 5 == 0:
            with b.frame():
                for j in range(4):
                    b.put(agent, f"f{i}-{j}", f"in a frame {j}", tags=tags, metadata=meta)
        b.put(agent, f"r{i % 9}", content, tags=tags, metadata=meta, scope="team:x" if i % 4 == 1 else None)
        if i % 11 == 10:
            b.forget(agent, [f"r{(i + 3) % 9}", "no-such-id"], reason="asked")
        if i % 13 == 12:
            b.checkpoint()
    b.grant("owner", "bob", "team:*", ["write"], op="revoke")
    b.checkpoint()
    return b
