"""The scan loop replay and verify share: frames of canonical puts read by their bytes, as columns.

`scan` takes frames from `buf[pos:]` for as long as each frame is whole in the buffer, starts at the
expected seq, has a good CRC and trailer, and holds only canonical puts (codec.make_entry's bytes) that
link to the entry before, each with an `ok` slot whose packed fields are exactly [content, sorted tags,
metadata] with content of the put's `size` (and, with DIGEST, whose payload hashes to the put's
digest). It stops at the first frame it does not take and leaves that frame to the caller's general
path, which then finds exactly what is wrong with it or reads what this loop does not (other ops,
erased slots, a record's version numbering, which the caller checks). It never raises for what the
buffer holds.

The C extension mnemo._speedups implements the same function; this module is its pure-Python twin,
which runs without a compiler or with MNEMO_PURE_PYTHON=1, and must return equal results for every
input (tests/storage/file/test_scan.py holds the two to it).
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from array import array
from typing import Any, NamedTuple

import msgpack

from ..._native import implementation, speedups

DIGEST = 1  # check each payload against its put's digest (verify does; replay trusts the chain)
LEAVES = 2  # also return each entry's Merkle leaf hash, SHA-256(0x00 || entry)
MAX_DEPTH = 32  # metadata nested deeper goes the general way

_FH, _EH, _SC, _SALT = 24, 8, 4, 16
_MIN_PUT_SLOT = _SC + _SALT + 1
_FRAME_HEADER_AT = struct.Struct(">4sIQII").unpack_from
_ENTRY_HEADER_AT = struct.Struct(">II").unpack_from
_U32_AT = struct.Struct(">I").unpack_from
_U64_AT = struct.Struct(">Q").unpack_from
_PUT = b"\xa3put"
_DIGEST_KEY = b"\x85\xa6digest\xc4\x20"
_ID_KEY = b"\xa2id"
_SCOPE_KEY = b"\xa5scope"
_SIZE_KEY = b"\xa4size"
_VER_KEY = b"\xa3ver"
_INT_COLUMNS = (("ver", "I"), ("slot_len", "I"), ("entry_len", "I"), ("seq", "q"), ("ts", "q"), ("size", "q"),
                ("slot_off", "q"), ("entry_off", "q"))


class ScanResult(NamedTuple):
    """What `scan` took. Offsets in `frames` and the columns are file offsets (buffer offset + base)."""

    pos: int  # buffer offset where the scan stopped: the first frame it did not take
    seq: int  # the seq expected next
    last: bytes  # hash of the last entry taken (the `last_hash` given if none)
    need: int  # > 0: the frame at `pos` was not taken only because it is not whole in the buffer
    frames: bytes  # (offset, end) of each frame taken, i64 pairs in machine order
    counts: bytes  # entries of each frame, u32
    id_bytes: bytes  # each entry's id in UTF-8, back to back
    id_ends: bytes  # where each id ends in id_bytes, i64
    id_width: int  # the first id's width when it is ASCII, else 0; and how many ids from the first on
    id_run: int  # are ASCII of that width in strictly ascending order (a SortedIds blob: index_columns.py)
    scopes: list[str]  # distinct scopes, and each entry's code into them (u32)
    scope_codes: bytes
    agents: list[str]
    agent_codes: bytes
    tagsets: list[tuple[str, ...]]
    tagset_codes: bytes
    tags: list[str]  # distinct tags, first seen first; for each, how many entries hold it (u32) and,
    tag_lens: bytes  # tag by tag, the rows of those entries (u32: row0 + the entry's position)
    tag_rows: bytes
    columns: dict[str, bytes]  # ver, slot_len, entry_len (u32); seq, ts, size, slot_off, entry_off (i64)
    hashes: bytes  # 32 bytes per entry
    leaves: bytes  # 32 bytes per entry with LEAVES, else empty

    @property
    def entries(self) -> int:
        return len(self.id_ends) // 8

    @property
    def ids(self) -> list[str]:
        """The entries' ids, as str."""
        w = self.id_width
        if w and self.id_run == self.entries:
            text = self.id_bytes.decode()
            return [text[i : i + w] for i in range(0, len(text), w)]
        raw, start, out = self.id_bytes, 0, []
        for end in array("q", self.id_ends):
            out.append(raw[start:end].decode())
            start = end
        return out

    def frame_spans(self) -> list[tuple[int, int, int]]:
        """(offset, end, entries) of each frame taken."""
        spans, counts = array("q", self.frames), array("I", self.counts)
        return [(spans[2 * i], spans[2 * i + 1], counts[i]) for i in range(len(counts))]


def _seq_head(seq: int) -> bytes:
    if seq < 0x80:
        head = bytes((0x97, 1, seq))
    elif seq < 0x100:
        head = bytes((0x97, 1, 0xCC, seq))
    elif seq < 0x10000:
        head = b"\x97\x01\xcd" + seq.to_bytes(2, "big")
    elif seq < 0x100000000:
        head = b"\x97\x01\xce" + seq.to_bytes(4, "big")
    else:
        head = b"\x97\x01\xcf" + seq.to_bytes(8, "big")
    return head + b"\xcf"


class _Reject(Exception):
    pass


def _str_at(data: bytes, i: int) -> tuple[int, int]:
    """(start, length) of a fixstr, str8 or str16 at data[i] (the forms a canonical entry uses)."""
    if i >= len(data):
        raise _Reject
    b = data[i]
    if 0xA0 <= b <= 0xBF:
        start, n = i + 1, b - 0xA0
    elif b == 0xD9 and i + 2 <= len(data):
        start, n = i + 2, data[i + 1]
    elif b == 0xDA and i + 3 <= len(data):
        start, n = i + 3, int.from_bytes(data[i + 1:i + 3], "big")
    else:
        raise _Reject
    if start + n > len(data):
        raise _Reject
    return start, n


def _uint_at(data: bytes, i: int) -> tuple[int, int]:
    if i >= len(data):
        raise _Reject
    b = data[i]
    if b < 0x80:
        return b, i + 1
    w = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}.get(b)
    if w is None or i + 1 + w > len(data):
        raise _Reject
    return int.from_bytes(data[i + 1:i + 1 + w], "big"), i + 1 + w


def _text(data: bytes, start: int, n: int) -> str:
    try:
        return data[start:start + n].decode()
    except UnicodeDecodeError:
        raise _Reject from None


def _put_entry(raw: bytes, seq: int, prev: bytes) -> tuple[int, int, int, int, int, int, int, int, int, int]:
    """Spans of a canonical put of `seq` after `prev`: (ts, agent start, agent len, digest at, id start,
    id len, scope start, scope len, size, ver). The twin of put_entry in _speedups.c."""
    head = _seq_head(seq)
    o = len(head)
    if not raw.startswith(head) or len(raw) - o < 42:
        raise _Reject
    ts = _U64_AT(raw, o)[0]
    if ts >= 1 << 63 or raw[o + 8:o + 10] != b"\xc4\x20" or raw[o + 10:o + 42] != prev:
        raise _Reject
    q = o + 42
    if not raw.startswith(_PUT, q):
        raise _Reject
    a_st, a_len = _str_at(raw, q + 4)
    _text(raw, a_st, a_len)
    d = a_st + a_len
    if not raw.startswith(_DIGEST_KEY, d):
        raise _Reject
    d += len(_DIGEST_KEY)
    i = d + 32
    if not raw.startswith(_ID_KEY, i):
        raise _Reject
    i_st, i_len = _str_at(raw, i + 3)
    _text(raw, i_st, i_len)
    i = i_st + i_len
    if not raw.startswith(_SCOPE_KEY, i):
        raise _Reject
    s_st, s_len = _str_at(raw, i + 6)
    _text(raw, s_st, s_len)
    i = s_st + s_len
    if not raw.startswith(_SIZE_KEY, i):
        raise _Reject
    size, i = _uint_at(raw, i + 5)
    if not raw.startswith(_VER_KEY, i):
        raise _Reject
    ver, i = _uint_at(raw, i + 4)
    if i != len(raw) or not 1 <= ver <= 0xFFFFFFFF or size >= 1 << 63:
        raise _Reject
    return ts, a_st, a_len, d, i_st, i_len, s_st, s_len, size, ver


def _plain(value: Any, depth: int) -> bool:
    """Whether a decoded metadata value is what the C loop's skip_obj admits: plain values, lists and
    maps with str keys, nested at most MAX_DEPTH deep."""
    if depth > MAX_DEPTH:
        return False
    t = type(value)
    if t is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    if t is list:
        return all(_plain(v, depth + 1) for v in value)
    return value is None or t in (bool, int, float, str, bytes)


def _head_len(b: int, kind: str) -> int:
    """Bytes of the msgpack header whose first byte is b, for an array, a str or a bin."""
    if kind == "array":
        return 1 if 0x90 <= b <= 0x9F else 3 if b == 0xDC else 5 if b == 0xDD else 0
    if kind == "str":
        return 1 if 0xA0 <= b <= 0xBF else 2 if b == 0xD9 else 3 if b == 0xDA else 5 if b == 0xDB else 0
    return 2 if b == 0xC4 else 3 if b == 0xC5 else 5 if b == 0xC6 else 0


def _packed(packed: bytes, size: int) -> tuple[int, int, tuple[str, ...]] | None:
    """(start, end) of the tag strings in `packed` and the tags, if `packed` is exactly [content,
    sorted tags, metadata] with content `size` bytes long; else None. The twin of packed_ok."""
    if not packed or not _head_len(packed[0], "array"):
        return None
    try:
        obj = msgpack.unpackb(packed, raw=False, strict_map_key=True)
    except Exception:  # msgpack raises several unrelated types on garbage
        return None
    if type(obj) is not list or len(obj) != 3:
        return None
    content, tags, metadata = obj
    if type(content) is str:
        n = len(content) if content.isascii() else len(content.encode())
    elif type(content) is bytes:
        n = len(content)
    else:
        return None
    if n != size or type(tags) is not list or type(metadata) is not dict or not _plain(metadata, 0):
        return None
    if not all(type(t) is str for t in tags) or any(a > b for a, b in zip(tags, tags[1:], strict=False)):
        return None
    # where the tag strings lie: after the array header and the content
    i = _head_len(packed[0], "array")
    b = packed[i]
    h = _head_len(b, "str") or _head_len(b, "bin")
    i += h + n
    t0 = i + _head_len(packed[i], "array")
    j = t0
    for tag in tags:
        j += _head_len(packed[j], "str") + len(tag.encode())
    # the metadata must be a map (the C loop reads its header; msgpack decodes any map form alike)
    if not (0x80 <= packed[j] <= 0x8F or packed[j] in (0xDE, 0xDF)):
        return None
    return t0, j, tuple(tags)


def scan(
    buf: bytes | bytearray | memoryview, base: int, pos: int, seq: int, last_hash: bytes,
    stop_seq: int, max_frame: int, flags: int, row0: int = 0,
) -> ScanResult:
    """Take frames from buf[pos:] (file offset base + pos), the first one starting at `seq` after the
    entry whose hash is `last_hash`; a frame holding `stop_seq` or longer than `max_frame` is not taken.
    See the module doc."""
    if len(last_hash) != 32 or pos < 0 or seq < 1 or base < 0 or not 0 <= row0 <= 0xFFFFFFFF:
        raise ValueError("scan: a 32-byte hash, pos >= 0, seq >= 1, base >= 0 and 0 <= row0 < 2**32 are required")
    data = bytes(buf)
    n_buf = len(data)
    pos = min(pos, n_buf)
    sha256, crc32 = hashlib.sha256, zlib.crc32
    digest_check, leaves_on = bool(flags & DIGEST), bool(flags & LEAVES)
    last = bytes(last_hash)
    need = 0
    frames, counts = array("q"), array("I")
    ids: list[bytes] = []
    tables: list[tuple[list[Any], dict[bytes, int], array[int]]] = [([], {}, array("I")) for _ in range(3)]
    cols = {name: array(tc) for name, tc in _INT_COLUMNS}
    hashes: list[bytes] = []
    leaves: list[bytes] = []
    while n_buf - pos >= _FH:
        magic, count, first, elen, plen = _FRAME_HEADER_AT(data, pos)
        total = _FH + 8 + elen + plen
        if magic != b"MNFR" or first != seq or count == 0 or count * _EH > elen or total > max_frame:
            break
        if first <= stop_seq < first + count:
            break
        if total > n_buf - pos:
            need = total
            break
        crc_end = pos + _FH + elen
        slot_end = crc_end + plen
        if data[slot_end + 4:slot_end + 8] != b"MNFE" or _U32_AT(data, slot_end)[0] != crc32(data[pos:crc_end]):
            break
        p, sp, s, prev = pos + _FH, crc_end, seq, last
        rows: list[tuple[Any, ...]] = []
        try:
            for _ in range(count):
                if crc_end - p < _EH:
                    raise _Reject
                rlen, slen = _ENTRY_HEADER_AT(data, p)
                p += _EH
                if rlen > crc_end - p or slen > slot_end - sp or slen < _MIN_PUT_SLOT:
                    raise _Reject
                raw = data[p:p + rlen]
                ts, a_st, a_len, d, i_st, i_len, s_st, s_len, size, ver = _put_entry(raw, s, prev)
                payload = data[sp + _SC:sp + slen]
                if _U32_AT(data, sp)[0] != crc32(payload):
                    raise _Reject
                if digest_check and sha256(payload).digest() != raw[d:d + 32]:
                    raise _Reject
                fields = _packed(payload[_SALT:], size)
                if fields is None:
                    raise _Reject
                t0, t1, tags = fields
                t_off = sp + _SC + _SALT
                h = sha256(raw).digest()
                rows.append((
                    raw, p, a_st, a_len, i_st, i_len, s_st, s_len, data[t_off + t0:t_off + t1], tags,
                    ver, slen, rlen, s, ts, size, base + sp, base + p, h,
                ))
                prev = h
                p += rlen
                sp += slen
                s += 1
            if p != crc_end or sp != slot_end:
                raise _Reject
        except _Reject:
            break
        for (raw, _p, a_st, a_len, i_st, i_len, s_st, s_len, tag_bytes, tags, ver, slen, rlen, es, ts, size,
             slot_off, entry_off, h) in rows:
            ids.append(raw[i_st:i_st + i_len])
            keys: tuple[bytes, bytes, bytes] = (raw[s_st:s_st + s_len], raw[a_st:a_st + a_len], tag_bytes)
            for t, key in enumerate(keys):
                values, codes, out = tables[t]
                code = codes.get(key)
                if code is None:
                    code = codes[key] = len(values)
                    values.append(tags if t == 2 else key.decode())
                out.append(code)
            for (name, _tc), value in zip(_INT_COLUMNS, (ver, slen, rlen, es, ts, size, slot_off, entry_off),
                                          strict=True):
                cols[name].append(value)
            hashes.append(h)
            if leaves_on:
                leaves.append(sha256(b"\x00" + raw).digest())
        frames.append(base + pos)
        frames.append(base + pos + total)
        counts.append(count)
        seq, last = s, prev
        pos += total
    if ids and row0 + len(ids) - 1 > 0xFFFFFFFF:
        raise ValueError("scan: rows past 2**32")
    # the rows of each tag, tag by tag in first-seen order (keyed by the tag's UTF-8 bytes)
    tag_rows: dict[str, list[int]] = {}
    for row, tagset in enumerate(array("I", tables[2][2].tobytes()), row0):
        for tag in tables[2][0][tagset]:
            rows_of = tag_rows.get(tag)
            if rows_of is None:
                tag_rows[tag] = [row]
            else:
                rows_of.append(row)
    width, run = len(ids[0]) if ids else 0, 0
    for k, i in enumerate(ids):
        if len(i) != width or not i.isascii() or k and ids[k - 1] >= i:
            break
        run += 1
    if not run:
        width = 0
    ends, at = array("q"), 0
    for i in ids:
        at += len(i)
        ends.append(at)
    return ScanResult(
        pos, seq, last, need, frames.tobytes(), counts.tobytes(), b"".join(ids), ends.tobytes(), width, run,
        tables[0][0], tables[0][2].tobytes(), tables[1][0], tables[1][2].tobytes(), tables[2][0],
        tables[2][2].tobytes(), list(tag_rows), array("I", map(len, tag_rows.values())).tobytes(),
        array("I", [r for rows_of in tag_rows.values() for r in rows_of]).tobytes(),
        {name: col.tobytes() for name, col in cols.items()}, b"".join(hashes),
        b"".join(leaves),
    )


def pure_scan(
    buf: bytes | bytearray | memoryview, base: int, pos: int, seq: int, last_hash: bytes,
    stop_seq: int, max_frame: int, flags: int, row0: int = 0,
) -> ScanResult:
    return scan(buf, base, pos, seq, last_hash, stop_seq, max_frame, flags, row0)


def native_scan(
    buf: bytes | bytearray | memoryview, base: int, pos: int, seq: int, last_hash: bytes,
    stop_seq: int, max_frame: int, flags: int, row0: int = 0,
) -> ScanResult:
    """The C loop's result, as a ScanResult. (Only when the extension is loaded.)"""
    return ScanResult(*speedups.scan(buf, base, pos, seq, last_hash, stop_seq, max_frame, flags, row0))


scan_frames = native_scan if speedups is not None else pure_scan


__all__ = ["DIGEST", "LEAVES", "ScanResult", "implementation", "native_scan", "pure_scan", "scan_frames"]
