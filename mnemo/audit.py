"""Verification of a database file and of audit exports; audit export; checkpoint keys and signatures.

`verify_db` reads the log file itself, in chunks, never as a client and never writing: it checks the
header, the framing, every hash and link, sequence numbers, genesis, payload digests and slot checksums,
erasures and checkpoint signatures, and reports every problem it finds with its seq and byte offset.
`export_audit` writes the chain as JSON Lines (docs/FORMAT.md §5.2) and `verify_export` checks such a file with
nothing but SHA-256, msgpack and Ed25519. docs/FORMAT.md ("Verification") spells out both algorithms.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import hashlib
import json
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, Any, Union

import msgpack
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .acl import PERMISSIONS, Acl
from .errors import IntegrityError, InvalidInput, MnemoError
from .record import Problem, VerifyReport
from .storage.codec import (
    FORMAT_VERSION,
    ZERO_HASH,
    Entry,
    EntryDecodeError,
    checkpoint_message,
    decode_entry,
    decode_put_payload,
    decode_record_fields,
    payload_digest,
    unpackb,
)
from .storage.framing import (
    ENTRY_HEADER,
    FILE_MAGIC,
    FRAME_END,
    FRAME_HEADER,
    FRAME_MAGIC,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    SLOT_CRC,
    TRAILER,
    Frame,
    FrameError,
    HeaderError,
    Slot,
    decode_file_header,
    frame_length,
    parse_frame,
)
from .storage.gc_pause import gc_paused
from .storage.logfile import complete_with_damaged_length, read_exact
from .storage.snapshot import read_erase_journal

PathArg = Union[str, "os.PathLike[str]"]
PrivateKeyLike = Union[Ed25519PrivateKey, bytes, str, "os.PathLike[str]"]
PublicKeyLike = Union[Ed25519PublicKey, bytes, str, "os.PathLike[str]"]
Progress = Callable[[int, int], None]

CHUNK = 1 << 20
_BIG_FRAME = 4 * CHUNK  # above this, a frame's trailer magic is checked before the frame is read whole


class UnreadableDatabase(MnemoError):
    """The database file cannot be opened or read at all (missing, a directory, no permission, I/O error).

    Damage inside a readable file is never this: it is a Problem in the VerifyReport."""


class UnreadableExport(MnemoError):
    """The export file cannot be opened or read at all."""


class KeyFileError(MnemoError, ValueError):
    """A key file or key string is missing, unreadable or not an Ed25519 key."""


# -- small formatting helpers --------------------------------------------------------------------------


def format_ts(ts_ns: int) -> str:
    """RFC 3339 UTC with all nine fractional digits, e.g. 2025-11-30T10:53:20.000000001Z."""
    secs, frac = divmod(ts_ns, 1_000_000_000)
    try:
        whole = datetime.fromtimestamp(secs, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"{ts_ns}ns"  # outside what a calendar date can say; still unambiguous
    return f"{whole}.{frac:09d}Z"


def jsonable(value: Any) -> Any:
    """The JSON form of a decoded msgpack value: bytes as hex, map keys as str, tuples as lists."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {(k.hex() if isinstance(k, bytes) else str(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    return repr(value)


def _short(h: bytes | str, n: int = 12) -> str:
    return (h.hex() if isinstance(h, bytes) else h)[:n]


def _content_size(content: str | bytes) -> int:
    return len(content.encode("utf-8", "surrogatepass")) if isinstance(content, str) else len(content)


# -- keys and checkpoint signatures --------------------------------------------------------------------


def public_key_bytes(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    """The raw 32-byte Ed25519 public key (the `key` field of a checkpoint)."""
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def generate_keypair() -> tuple[bytes, bytes]:
    """A new Ed25519 key pair: (private key as PKCS#8 PEM, raw 32-byte public key)."""
    sk = Ed25519PrivateKey.generate()
    pem = sk.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem, public_key_bytes(sk)


def _read_key_file(path: PathArg) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 16)
    except OSError as exc:
        raise KeyFileError(f"cannot read key file {os.fspath(path)}: {exc.strerror or exc}") from None


def _hex_or_none(text: bytes, nbytes: int) -> bytes | None:
    if len(text) != 2 * nbytes:
        return None
    try:
        return bytes.fromhex(text.decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return None


def _private_from_bytes(data: bytes) -> Ed25519PrivateKey:
    text = data.strip()
    if text.startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise KeyFileError(f"not a usable PEM private key: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError("the PEM private key is not an Ed25519 key")
        return key
    if len(data) == 32:
        return Ed25519PrivateKey.from_private_bytes(data)
    seed = _hex_or_none(text, 32)
    if seed is not None:
        return Ed25519PrivateKey.from_private_bytes(seed)
    raise KeyFileError("not an Ed25519 private key (expected PKCS#8 PEM, a 32-byte seed or its hex)")


def load_private_key(key: PrivateKeyLike) -> Ed25519PrivateKey:
    """An Ed25519 private key from a key object, PEM bytes, a raw 32-byte seed, or a key file's path."""
    if isinstance(key, Ed25519PrivateKey):
        return key
    if isinstance(key, (bytes, bytearray)):
        return _private_from_bytes(bytes(key))
    return _private_from_bytes(_read_key_file(key))


def _public_from_bytes(data: bytes) -> bytes:
    text = data.strip()
    if text.startswith(b"-----BEGIN"):
        try:
            if b"PRIVATE KEY" in text.split(b"\n", 1)[0]:
                return public_key_bytes(_private_from_bytes(text))
            key = serialization.load_pem_public_key(text)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise KeyFileError(f"not a usable PEM public key: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFileError("the PEM public key is not an Ed25519 key")
        return public_key_bytes(key)
    if len(data) == 32:
        return data
    raw = _hex_or_none(text, 32)
    if raw is None and len(text) == 44:
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raw = None
    if raw is None or len(raw) != 32:
        raise KeyFileError("not an Ed25519 public key (expected 64 hex digits, base64, PEM or 32 raw bytes)")
    return raw


def load_public_key(key: PublicKeyLike) -> bytes:
    """A raw 32-byte Ed25519 public key from a key object, raw or hex bytes, a hex string, or a file path.

    A string of 64 hex digits that is not the name of an existing file is taken as the key itself."""
    if isinstance(key, Ed25519PublicKey):
        return public_key_bytes(key)
    if isinstance(key, (bytes, bytearray)):
        return _public_from_bytes(bytes(key))
    if isinstance(key, str) and not os.path.exists(key):
        raw = _hex_or_none(key.strip().encode("ascii", "replace"), 32)
        if raw is not None:
            return raw
    return _public_from_bytes(_read_key_file(key))


def sign_checkpoint(private_key: PrivateKeyLike, db_id: bytes, seq: int, head: bytes) -> dict[str, Any]:
    """The body of a `checkpoint` entry signing (`seq`, `head`), the entry just before it."""
    if not (isinstance(db_id, bytes) and len(db_id) == 16):
        raise InvalidInput("db_id must be 16 bytes")
    if not (isinstance(head, bytes) and len(head) == 32):
        raise InvalidInput("head must be a 32-byte hash")
    if not (isinstance(seq, int) and 0 <= seq < 1 << 64):
        raise InvalidInput("seq must be a non-negative 64-bit integer")
    sk = load_private_key(private_key)
    sig = sk.sign(checkpoint_message(db_id, seq, head))
    return {"db_id": db_id, "head": head, "key": public_key_bytes(sk), "seq": seq, "sig": sig}


def _checkpoint_findings(
    entry_seq: int, prev: bytes, body: dict[str, Any], db_id: bytes | None, pubkey: bytes | None
) -> list[tuple[str, str]]:
    """(kind, message) for everything wrong with a well-typed checkpoint body; empty when it verifies."""
    found: list[tuple[str, str]] = []
    if db_id is not None and body["db_id"] != db_id:
        found.append(("checkpoint", f"checkpoint names db_id {body['db_id'].hex()}, not {db_id.hex()}"))
    if body["seq"] != entry_seq - 1 or body["head"] != prev:
        found.append((
            "checkpoint",
            f"checkpoint signs seq {body['seq']} head {_short(body['head'])}, not the entry before it "
            f"(seq {entry_seq - 1}, {_short(prev)})",
        ))
    try:
        Ed25519PublicKey.from_public_bytes(body["key"]).verify(
            body["sig"], checkpoint_message(body["db_id"], body["seq"], body["head"])
        )
    except (InvalidSignature, ValueError):
        found.append(
            ("checkpoint-signature", f"checkpoint signature does not verify with key {body['key'].hex()}")
        )
    if pubkey is not None and body["key"] != pubkey:
        found.append(("checkpoint-key", f"checkpoint signed by key {body['key'].hex()}, not the given key"))
    return found


# -- entry bodies ----------------------------------------------------------------------------------------


def _is_bin(n: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, bytes) and len(v) == n


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


_BODIES: dict[str, dict[str, Callable[[Any], bool]]] = {
    "genesis": {"db_id": _is_bin(16), "format": _is_int},
    "put": {"digest": _is_bin(32), "id": _is_str, "scope": _is_str, "size": _is_int, "ver": _is_int},
    "forget": {"ids": _is_str_list},
    "grant": {"perms": _is_str_list, "principal": _is_str, "scope": _is_str},
    "revoke": {"perms": _is_str_list, "principal": _is_str, "scope": _is_str},
    "checkpoint": {
        "db_id": _is_bin(16), "head": _is_bin(32), "key": _is_bin(32), "seq": _is_int, "sig": _is_bin(64),
    },
}


_BODY_KEYS = {op: frozenset(schema) for op, schema in _BODIES.items()}


def _body_problem(op: str, body: dict[str, Any]) -> str | None:
    """Why `body` is not a well-formed body of `op`, or None."""
    schema = _BODIES[op]
    if body.keys() == _BODY_KEYS[op]:
        for check_field in schema.items():
            if not check_field[1](body[check_field[0]]):
                break
        else:
            if op == "put":
                return None if body["ver"] >= 1 else "put version must be at least 1"
            if op not in ("grant", "revoke"):
                return None
    missing = sorted(set(schema) - set(body))
    extra = sorted(str(k) for k in set(body) - set(schema))
    if missing or extra:
        parts = ([f"lacks {', '.join(missing)}"] if missing else []) + (
            [f"has unknown {', '.join(extra)}"] if extra else []
        )
        return f"{op} body {' and '.join(parts)}"
    bad = [k for k, check in schema.items() if not check(body[k])]
    if bad:
        return f"{op} body field {', '.join(bad)} has the wrong type"
    if op in ("grant", "revoke"):
        perms = body["perms"]
        if perms != sorted(set(perms)) or not set(perms) <= set(PERMISSIONS):
            return f"{op} perms {perms!r} are not a sorted set of {', '.join(PERMISSIONS)}"
    if op == "put" and body["ver"] < 1:
        return "put version must be at least 1"
    return None


def _packed_problems(body: dict[str, Any], salt: bytes, packed: bytes) -> tuple[list[str], Any]:
    """Check a put payload against its body; (messages, (content, tags, metadata) or None)."""
    msgs: list[str] = []
    if payload_digest(salt, packed) != body["digest"]:
        msgs.append("payload digest SHA-256(salt + packed) does not match the put's digest")
    try:
        content, tags, metadata = decode_record_fields(packed)
    except Exception as exc:
        msgs.append(f"packed record fields do not decode: {exc}")
        return msgs, None
    if _content_size(content) != body["size"]:
        msgs.append(f"content is {_content_size(content)} bytes, the put says {body['size']}")
    tag_list = list(tags)
    if not set(map(type, tag_list)) <= {str} or tag_list != sorted(tag_list):
        msgs.append("packed tags are not a sorted list of strings")
    return msgs, (content, tags, metadata)


# -- reading the log in chunks ---------------------------------------------------------------------------


class _Window:
    """A sliding window over the log file: at most a chunk (or one frame) in memory at a time."""

    def __init__(
        self, fd: int, size: int, path: str, progress: Progress | None, growable: bool = True
    ) -> None:
        self.fd = fd
        self.size = size
        self.path = path
        self.progress = progress
        self.growable = growable
        self.start = 0
        self.buf = b""

    def grew(self) -> bool:
        """Whether the file grew since it was opened (a writer appending): then read on to its new end."""
        if not self.growable:
            return False
        try:
            size = os.fstat(self.fd).st_size
        except OSError:
            return False
        if size <= self.size:
            return False
        self.size = size
        return True

    def ensure(self, offset: int, n: int) -> None:
        """Make bytes [offset, offset + n) (clamped to the file's end) available in self.buf."""
        end = min(offset + n, self.size)
        bstart, bend = self.start, self.start + len(self.buf)
        if bstart <= offset and end <= bend:
            return
        keep = self.buf[offset - bstart:] if bstart <= offset <= bend else b""
        want = max(end, min(offset + CHUNK, self.size)) - offset - len(keep)
        data = self.pread(offset + len(keep), want)
        self.buf = keep + data
        self.start = offset
        if len(data) < want:  # the file shrank under us: it ends here now
            self.size = offset + len(self.buf)
        if self.progress is not None:
            self.progress(min(offset, self.size), self.size)

    def pread(self, offset: int, n: int) -> bytes:
        try:
            return read_exact(self.fd, offset, n)
        except OSError as exc:
            raise UnreadableDatabase(f"cannot read {self.path} at offset {offset}: {exc.strerror}") from None

    def get(self, offset: int, n: int) -> bytes:
        self.ensure(offset, n)
        rel = offset - self.start
        return self.buf[rel:rel + n]


def _read_frame(win: _Window, pos: int, lenient: bool) -> tuple[Frame, bool]:
    """Parse the frame at `pos`: (frame, checksum ok). Raises FrameError.

    With `lenient`, a frame whose only fault is its checksum is still returned (checksum ok = False), so
    that its entries can be checked and reported by seq."""
    if pos + FRAME_HEADER.size > win.size:
        win.grew()  # a frame being appended right now is not a torn one
    win.ensure(pos, FRAME_HEADER.size)
    total = frame_length(win.buf, pos - win.start, pos)
    if pos + total > win.size and not (win.grew() and pos + total <= win.size):
        raise FrameError("incomplete", f"the file ends inside the frame at offset {pos}", pos, total)
    if total > _BIG_FRAME and win.pread(pos + total - len(FRAME_END), len(FRAME_END)) != FRAME_END:
        raise FrameError("bad", f"frame at offset {pos} has no end marker where its length says", pos, total)
    win.ensure(pos, total)
    rel = pos - win.start
    try:
        return parse_frame(win.buf, rel, pos), True
    except FrameError as exc:
        if not lenient or exc.kind != "bad":
            raise
        original = exc
    data = bytearray(win.buf[rel:rel + total])
    _magic, _count, _first, elen, plen = FRAME_HEADER.unpack_from(data, 0)
    crc_at = FRAME_HEADER.size + elen + plen
    crc, end_magic = TRAILER.unpack_from(data, crc_at)
    good_crc = zlib.crc32(data[:FRAME_HEADER.size + elen])
    if end_magic != FRAME_END or crc == good_crc:
        raise original  # the fault is not (only) the checksum
    struct.pack_into(">I", data, crc_at, good_crc)
    try:
        return parse_frame(bytes(data), 0, pos), False
    except FrameError:
        raise original from None


def _resync(win: _Window, start: int) -> int | None:
    """The offset of the first frame at or after `start` that parses with a good checksum, or None."""
    p = start
    while p < win.size:
        win.ensure(p, CHUNK)
        i = win.buf.find(FRAME_MAGIC, p - win.start)
        if i < 0:
            bend = win.start + len(win.buf)
            if bend >= win.size:
                return None
            p = max(p + 1, bend - len(FRAME_MAGIC) + 1)
            continue
        cand = win.start + i
        try:
            _read_frame(win, cand, lenient=False)
            return cand
        except FrameError:
            p = cand + 1
    return None


@dataclass(frozen=True)
class _Damage:
    offset: int
    resume: int | None  # the next good frame, or None when nothing readable follows
    torn: bool  # the file ends inside this frame, and nothing readable follows: a torn write
    message: str


def _scan(
    win: _Window, lenient: bool, skip: Callable[[_Window, int], int] | None = None
) -> Iterator[tuple[Frame, bool] | _Damage]:
    """Every frame from offset 32 on, with damaged stretches between them reported and skipped.
    `skip(win, pos)`, if given, takes care of the frames from `pos` on that it can, and returns the
    offset where they end."""
    pos = HEADER_SIZE
    while pos < win.size:
        if skip is not None:
            pos = skip(win, pos)
            if pos >= win.size:
                break
        try:
            item = _read_frame(win, pos, lenient)
        except FrameError as exc:
            resume = _resync(win, pos + 1)
            # as the engine judges it: only a frame cut short, with nothing after it, is a torn write
            torn = exc.kind == "incomplete" and resume is None and not complete_with_damaged_length(
                win.fd, pos, win.size
            )
            yield _Damage(pos, resume, torn, str(exc))
            if resume is None:
                return
            pos = resume
            continue
        yield item
        pos = item[0].end


def _entry_offsets(frame: Frame) -> list[int]:
    """File offset of each entry's length header inside the frame."""
    out: list[int] = []
    off = frame.offset + FRAME_HEADER.size
    for e in frame.entries:
        out.append(off)
        off += 8 + len(e.raw)
    return out




def _open_db(path: PathArg) -> tuple[int, int, str]:
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY)
    except OSError as exc:
        raise UnreadableDatabase(f"cannot open {name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not os.path.isfile(name) or (st.st_mode & 0o170000) != 0o100000:
            raise UnreadableDatabase(f"cannot read {name}: not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size, name


# -- verify_db -------------------------------------------------------------------------------------------

# The fast path reads the canonical msgpack of a put (codec.make_entry) by its bytes:
#   97 01 <seq> cf <ts: 8> c4 20 <prev: 32> a3 "put" <agent> 85 a6 "digest" c4 20 <digest: 32>
#   a2 "id" <id> a5 "scope" <scope> a4 "size" <uint> a3 "ver" <uint>
_PUT_OP = b"\xa3put"
_DIGEST_KEY = b"\x85\xa6digest\xc4\x20"
_ID_KEY = b"\xa2id"
_SCOPE_KEY = b"\xa5scope"
_SIZE_KEY = b"\xa4size"
_VER_KEY = b"\xa3ver"
_BIN32 = b"\xc4\x20"
_SEQ16 = struct.Struct(">3sHB").pack
_SEQ32 = struct.Struct(">3sIB").pack
_SEQ16_TAG = b"\x97\x01\xcd"
_SEQ32_TAG = b"\x97\x01\xce"
_U64_AT = struct.Struct(">Q").unpack_from
_SLOT_CRC_AT = SLOT_CRC.unpack_from
_ENTRY_HEADER_AT = ENTRY_HEADER.unpack_from
_FRAME_HEADER_AT = FRAME_HEADER.unpack_from
_TRAILER_AT = TRAILER.unpack_from
_MAX_TAILS = 4096
_FH, _EH, _SC = FRAME_HEADER.size, ENTRY_HEADER.size, SLOT_CRC.size
_MIN_PUT_SLOT = _SC + 17  # a checksum, a salt and at least one byte of packed fields


PutRow = tuple[str, str, list[str], int, int, int, str, int, bytes, int, int, int, int]


@dataclass
class ExpectedIndex:
    """What the index of a client must hold, as the log says: gathered by verify_db in its one pass over
    the file (`verify_db_and_index`), for `Store.index_differences` to compare with."""

    # id -> its latest put since the last forget naming it, as
    # (id, scope, tags, ver, seq, ts_ns, agent, size, hash, slot offset, slot length, entry offset,
    # entry length)
    live: dict[str, PutRow]
    # id -> its earlier puts since that forget, oldest first (records with more than one version)
    older: dict[str, list[PutRow]]
    forgotten: set[str]  # every id a forget named
    acl: Acl
    head_seq: int = -1
    head_hash: bytes = ZERO_HASH
    entries: int = 0


class _NotFast(Exception):
    """An entry the fast path does not read by its bytes: the frame goes the general way."""


def _seq_head(seq: int) -> bytes:
    """The bytes a canonical entry of `seq` starts with: array header, format version, seq, and the
    marker of a uint64 timestamp."""
    if seq < 0x80:
        return bytes((0x97, 1, seq, 0xCF))
    if seq < 0x100:
        return bytes((0x97, 1, 0xCC, seq, 0xCF))
    if seq < 0x10000:
        return _SEQ16(_SEQ16_TAG, seq, 0xCF)
    if seq < 0x100000000:
        return _SEQ32(_SEQ32_TAG, seq, 0xCF)
    return b"\x97\x01\xcf" + seq.to_bytes(8, "big") + b"\xcf"


def _str_at(data: bytes, i: int) -> tuple[int, int]:
    """(start, length) of the msgpack str whose header is at data[i]."""
    b = data[i]
    if 0xA0 <= b <= 0xBF:
        start, n = i + 1, b - 0xA0
    elif b == 0xD9:
        start, n = i + 2, data[i + 1]
    elif b == 0xDA:
        start, n = i + 3, int.from_bytes(data[i + 1:i + 3], "big")
    else:
        raise _NotFast
    if start + n > len(data):
        raise _NotFast
    return start, n


def _uint_at(data: bytes, i: int) -> tuple[int, int]:
    """(value, end) of the msgpack unsigned integer at data[i]."""
    b = data[i]
    if b < 0x80:
        return b, i + 1
    n = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}.get(b)
    if n is None or i + 1 + n > len(data):
        raise _NotFast
    return int.from_bytes(data[i + 1:i + 1 + n], "big"), i + 1 + n


def _put_tail(tail: bytes) -> tuple[str, int, int]:
    """(scope, size, ver) from the bytes of a canonical put body that follow its id."""
    if not tail.startswith(_SCOPE_KEY):
        raise _NotFast
    start, n = _str_at(tail, len(_SCOPE_KEY))
    scope = tail[start:start + n].decode()
    i = start + n
    if not tail.startswith(_SIZE_KEY, i):
        raise _NotFast
    size, i = _uint_at(tail, i + len(_SIZE_KEY))
    if not tail.startswith(_VER_KEY, i):
        raise _NotFast
    ver, i = _uint_at(tail, i + len(_VER_KEY))
    if i != len(tail) or ver < 1:
        raise _NotFast
    return scope, size, ver


def _put_head(raw: bytes, i: int) -> tuple[int, str]:
    """Where the digest starts in a canonical put whose op is at raw[i], and the put's agent."""
    if not raw.startswith(_PUT_OP, i):
        raise _NotFast
    start, n = _str_at(raw, i + len(_PUT_OP))
    agent = raw[start:start + n].decode()  # valid UTF-8, as msgpack will insist
    if not raw.startswith(_DIGEST_KEY, start + n):
        raise _NotFast
    return start + n + len(_DIGEST_KEY), agent


class _DbVerifier:
    def __init__(
        self, path: str, size: int, pubkey: bytes | None, expect_head: tuple[int, bytes] | None
    ) -> None:
        self.path = path
        self.size = size
        self.pubkey = pubkey
        self.expect_head = expect_head
        self.problems: list[Problem] = []
        self.notes: list[str] = []
        self.db_id: bytes | None = None
        self.entries = 0
        self.last_seq = -1  # seq and hash of the last entry read
        self.last_hash: bytes | None = None
        self.next_seq = 0
        self.lost_before = False  # entries were lost to damage right before the next one read
        self.seen_first = False
        # Per record id, the versions no forget has named yet: the latest version number, and (only for
        # ids whose puts numbered their versions wrongly) how many more versions there are than that.
        self.versions: dict[str, int] = {}
        self.extra: dict[str, int] = {}
        # id -> [(seq, slot offset, state)] of those versions whose slot is not `ok`
        self.pending: dict[str, list[tuple[int, int, str]]] = {}
        # What the fast path (fast_frames) read in the puts before, each decoded once: the bytes from a
        # put's op to its digest (op, agent, body map header; b"\x00" matches none) and that agent, the
        # bytes of its id's key and header and the id's length, and what follows ids (scope, size, ver).
        self.put_head, self.agent = b"\x00", ""
        self.id_head, self.id_len = b"\x00", 0
        self.tails: dict[bytes, tuple[str, int, int]] = {}
        self.index: ExpectedIndex | None = None  # gathered for a client's verify(), when asked
        self.erased = 0
        self.awaiting = 0
        self.interrupted = 0
        self.checkpoints = 0
        self.signed_upto = -1
        self.keys: set[bytes] = set()
        self.head_hashes: list[bytes] = []
        self.journal: set[tuple[int, int]] | None = None
        self.pending_damage: tuple[_Damage, int] | None = None
        self.ops: dict[str, Callable[[Entry, Slot, int, _Window], None]] = {
            "genesis": self.op_genesis, "put": self.op_put, "forget": self.op_forget,
            "grant": self.op_grant, "revoke": self.op_grant, "checkpoint": self.op_checkpoint,
        }

    def problem(self, kind: str, message: str, seq: int | None, offset: int | None) -> None:
        self.problems.append(Problem(kind, message, seq, offset))

    # header and sidecars
    def header(self, data: bytes) -> None:
        if not data:
            self.problem("header", "the file is empty: not a Mnemo log", None, 0)
            return
        if not FILE_MAGIC.startswith(data[: len(FILE_MAGIC)]):
            self.problem("header", "bad file header: not a Mnemo log (bad magic)", None, 0)
            return
        try:
            self.db_id = decode_file_header(data)
        except HeaderError as exc:
            self.problem("header", f"bad file header: {exc}", None, 0)

    def load_journal(self) -> None:
        regions = read_erase_journal(self.path + ".erase")
        self.journal = None if regions is None else set(regions)
        if self.journal is not None:
            self.notes.append(
                f"an erasure journal ({os.path.basename(self.path)}.erase) lists {len(self.journal)} "
                "regions: an interrupted erasure the next writer completes"
            )

    def leftovers(self) -> None:
        for suffix in (".compact", ".snap.tmp", ".erase.tmp"):
            if os.path.exists(self.path + suffix):
                self.notes.append(
                    f"{os.path.basename(self.path)}{suffix} is left over from a writer that crashed; it may hold "
                    "payload bytes, and the next writer to open the database, or the next forget, removes it"
                )

    def in_journal(self, slot: Slot) -> bool:
        # exactly a slot: a journal never stands for anything but whole payload slots
        return self.journal is not None and (slot.offset, slot.length) in self.journal

    # damage
    def damage(self, d: _Damage) -> None:
        exp = self.next_seq
        if d.torn:
            self.problem(
                "torn-tail",
                f"the last frame is incomplete ({self.size - d.offset} bytes at the end of the file): "
                f"a torn write that the next writer to open the log cuts off ({d.message})",
                exp, d.offset,
            )
            return
        if d.resume is None:
            self.problem("bad-frame", f"{d.message}; no readable frame follows "
                         f"({self.size - d.offset} bytes to the end of the file)", exp, d.offset)
            self.lost_before = True
            return
        self.pending_damage = (d, exp)

    def resumed(self, first_seq: int) -> None:
        if self.pending_damage is None:
            return
        d, exp = self.pending_damage
        self.pending_damage = None
        resume = d.resume if d.resume is not None else d.offset
        lost = f"; entries seq {exp}..{first_seq - 1} are unreadable" if first_seq > exp else ""
        self.problem("bad-frame", f"{d.message}; {resume - d.offset} bytes skipped up to the next good "
                     f"frame at offset {resume}{lost}", exp, d.offset)
        self.lost_before = first_seq > exp

    # frames and entries
    def frame(self, frame: Frame, crc_ok: bool, win: _Window) -> None:
        first = frame.entries[0].seq
        self.resumed(first)
        if not crc_ok:
            last = frame.entries[-1].seq
            span = f"seq {first}" if first == last else f"seq {first}..{last}"
            self.problem("frame-checksum", f"frame checksum mismatch at offset {frame.offset} ({span}): "
                         "its entries were changed after it was written", first, frame.offset)
        if len(frame.entries) == 1:
            self.entry(frame.entries[0], frame.slots[0], frame.offset + FRAME_HEADER.size, win)
            return
        for e, slot, off in zip(frame.entries, frame.slots, _entry_offsets(frame), strict=True):
            self.entry(e, slot, off, win)

    def entry(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        self.entries += 1
        last_hash = self.last_hash
        exp = self.next_seq
        before = self.last_seq if last_hash is not None else "?"
        if not self.seen_first:
            self.seen_first = True
            if e.seq != 0 and not self.lost_before:
                self.problem("genesis", f"the log starts at seq {e.seq}, not with genesis", e.seq, off)
        elif e.seq != exp:
            if e.seq > exp and not self.lost_before:
                missing = f"{exp}" if e.seq == exp + 1 else f"{exp}..{e.seq - 1}"
                msg = f"seq jumps from {before} to {e.seq}: entry {missing} is missing"
                self.problem("seq", msg, exp, off)
            elif e.seq < exp:
                self.problem("seq", f"seq {e.seq} out of order (after seq {before})", e.seq, off)
        if last_hash is not None and not self.lost_before and e.prev != last_hash:
            self.problem("link", f"prev of seq {e.seq} is {_short(e.prev)}, but the entry before it "
                         f"(seq {self.last_seq}) hashes to {_short(last_hash)}", e.seq, off)
        self.lost_before = False
        self.next_seq = max(self.next_seq, e.seq + 1)
        self.last_seq, self.last_hash = e.seq, e.hash
        if self.expect_head is not None and e.seq == self.expect_head[0]:
            self.head_hashes.append(e.hash)

        why = _body_problem(e.op, e.body)
        if why is not None:
            self.problem("body", why, e.seq, off)
            if e.op == "put" and slot.state == "bad" and not self.in_journal(slot):
                self.problem("slot", f"payload slot checksum mismatch (seq {e.seq})", e.seq, slot.offset)
            return
        self.ops[e.op](e, slot, off, win)

    # the fast path
    def fast_frames(self, win: _Window, pos: int) -> int:
        """Check the frames from `pos` on for as long as each holds only canonical puts with nothing wrong
        with them, reading the entries by their bytes instead of decoding them into objects; return the
        offset of the first frame left to the general path (`frame`), which then finds exactly what is
        wrong with it, or checks an op this path does not read.

        It makes every check `frame` and `op_put` make, to the same outcome, and changes the state as
        they would; a frame it leaves to the general path leaves no trace."""
        if self.pending_damage is not None or self.lost_before or self.last_hash is None or self.next_seq < 1:
            return pos
        want = self.expect_head[0] if self.expect_head is not None else -1
        end = win.size
        versions, tails, index = self.versions, self.tails, self.index
        live, older = (index.live, index.older) if index is not None else ({}, {})
        put_head, id_head, id_len, agent = self.put_head, self.id_head, self.id_len, self.agent
        n_put_head, n_id_head = len(put_head), len(id_head)
        seq, last, entries = self.next_seq, self.last_hash, self.entries
        sha256, crc32, unpack = hashlib.sha256, zlib.crc32, msgpack.unpackb
        buf, bstart = win.buf, win.start
        start = pos
        while pos + _FH <= end:
            rel = pos - bstart
            if rel < 0 or rel + _FH > len(buf):
                win.ensure(pos, _FH)
                buf, bstart = win.buf, win.start
                rel = pos - bstart
            magic, count, first, elen, plen = _FRAME_HEADER_AT(buf, rel)
            total = FRAME_OVERHEAD + elen + plen
            if (magic != FRAME_MAGIC or first != seq or not 0 < count * _EH <= elen
                    or total > _BIG_FRAME or pos + total > end or first <= want < first + count):
                break
            if rel + total > len(buf):
                win.ensure(pos, total)
                buf, bstart = win.buf, win.start
                rel = pos - bstart
                if rel + total > len(buf):
                    break
            crc_end = rel + _FH + elen
            slot_end = crc_end + plen
            crc, end_magic = _TRAILER_AT(buf, slot_end)
            if end_magic != FRAME_END or crc != crc32(buf[rel:crc_end]):
                break
            # Entries and slots are read in step; a length that overruns its section makes the two
            # end anywhere but at the section ends, checked after the loop.
            p, sp = rel + _FH, crc_end
            s, h = seq, last
            rids: list[str] = []
            try:
                for _ in range(count):
                    rlen, slen = _ENTRY_HEADER_AT(buf, p)
                    p += _EH
                    e_at = p
                    raw = buf[p:p + rlen]
                    p += rlen
                    # seq, the timestamp's marker, and prev: the link to the entry before
                    if 0xFFFF < s <= 0xFFFFFFFF:
                        head = _SEQ32(_SEQ32_TAG, s, 0xCF)
                    elif 0xFF < s <= 0xFFFF:
                        head = _SEQ16(_SEQ16_TAG, s, 0xCF)
                    else:
                        head = _seq_head(s)
                    o = len(head)
                    if not (raw.startswith(head) and raw.startswith(_BIN32, o + 8) and raw.startswith(h, o + 10)):
                        raise _NotFast
                    # op, agent and the body's map header: as in the put before, or read afresh
                    q = o + 42
                    if not raw.startswith(put_head, q):
                        d, agent = _put_head(raw, q)
                        put_head = raw[q:d]
                        n_put_head = d - q
                    d = q + n_put_head  # the digest, checked against the payload below
                    i = d + 32
                    if not raw.startswith(id_head, i):
                        if not raw.startswith(_ID_KEY, i):
                            raise _NotFast
                        j, id_len = _str_at(raw, i + len(_ID_KEY))
                        id_head = raw[i:j]
                        n_id_head = j - i
                    i += n_id_head
                    rid = raw[i:i + id_len].decode()
                    tail = raw[i + id_len:]
                    t = tails.get(tail)
                    if t is None:
                        t = _put_tail(tail)
                        if len(tails) >= _MAX_TAILS:
                            tails.clear()
                        tails[tail] = t
                    scope, size, ver = t
                    old = versions.get(rid, 0)
                    if old + 1 != ver:
                        raise _NotFast
                    # the payload: slot checksum, digest, and [content, sorted tags, metadata]
                    payload = buf[sp + _SC:sp + slen]
                    if (slen < _MIN_PUT_SLOT or _SLOT_CRC_AT(buf, sp)[0] != crc32(payload)
                            or not raw.startswith(sha256(payload).digest(), d)):
                        raise _NotFast
                    # (msgpack's defaults decode as codec.unpackb does, but refuse non-str map keys:
                    # a record with those goes the general way)
                    content, tags, metadata = unpack(payload[16:])
                    if type(content) is str:
                        n = len(content) if content.isascii() else len(content.encode())
                    elif type(content) is bytes:
                        n = len(content)
                    else:
                        raise _NotFast
                    if n != size or type(tags) is not list or type(metadata) is not dict:
                        raise _NotFast
                    if tags:
                        "".join(tags)  # a TypeError unless every tag is a str
                        if len(tags) > 1 and tags != sorted(tags):
                            raise _NotFast
                    h = sha256(raw).digest()
                    versions[rid] = ver
                    rids.append(rid)
                    if index is not None:
                        if old:
                            older.setdefault(rid, []).append(live[rid])
                        ts = _U64_AT(raw, o)[0]
                        live[rid] = (rid, scope, tags, ver, s, ts, agent, size, h, bstart + sp, slen,
                                     bstart + e_at, rlen)
                    sp += slen
                    s += 1
                if p != crc_end or sp != slot_end:
                    raise _NotFast
            except Exception:
                for rid in reversed(rids):  # each put raised its record's version by one
                    ver = versions[rid] - 1
                    if ver:
                        versions[rid] = ver
                    else:
                        del versions[rid]
                    if index is not None:
                        if ver:
                            live[rid] = older[rid].pop()
                            if not older[rid]:
                                del older[rid]
                        else:
                            del live[rid]
                break
            seq, last = s, h
            entries += count
            pos += total
        if pos != start:
            self.next_seq, self.last_seq, self.last_hash, self.entries = seq, seq - 1, last, entries
        self.put_head, self.id_head, self.id_len, self.agent = put_head, id_head, id_len, agent
        return pos

    def no_payload(self, e: Entry, slot: Slot) -> None:
        if slot.state != "none":
            self.problem("payload", f"a {e.op} entry carries a payload slot ({slot.state})",
                         e.seq, slot.offset)

    def op_genesis(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        if e.seq != 0:
            self.problem("genesis", f"genesis entry at seq {e.seq}", e.seq, off)
        else:
            if e.prev != ZERO_HASH:
                self.problem("genesis", "genesis prev is not 32 zero bytes", 0, off)
            if e.body["format"] != FORMAT_VERSION:
                msg = f"genesis format {e.body['format']}, expected {FORMAT_VERSION}"
                self.problem("genesis", msg, 0, off)
            if self.db_id is not None and e.body["db_id"] != self.db_id:
                self.problem("genesis", f"genesis db_id {e.body['db_id'].hex()} differs from the header's "
                             f"{self.db_id.hex()}", 0, off)
            elif self.db_id is None:
                self.db_id = e.body["db_id"]
            if self.index is not None:
                self.index.acl.owner = e.agent
        self.no_payload(e, slot)

    def seq0_check(self, e: Entry, off: int) -> None:
        if e.seq == 0:
            self.problem("genesis", f"seq 0 is a {e.op} entry, not genesis", 0, off)

    def op_put(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        self.seq0_check(e, off)
        body = e.body
        rid, ver = body["id"], body["ver"]
        expected = self.versions.get(rid, 0) + 1
        if ver != expected:
            self.problem("version", f"seq {e.seq} puts version {ver} of record {rid}, expected {expected}",
                         e.seq, off)
            extra = expected + self.extra.pop(rid, 0) - ver  # versions not yet forgotten, minus ver
            if extra:
                self.extra[rid] = extra
        old = self.versions.get(rid, 0)
        self.versions[rid] = ver
        state = slot.state
        tags: list[str] = []
        if state == "ok":
            try:
                data = win.get(slot.offset + SLOT_CRC.size, slot.length - SLOT_CRC.size)
                salt, packed = decode_put_payload(data)
            except Exception as exc:
                msg = f"put payload does not decode: {exc}"
                self.problem("payload", msg, e.seq, slot.offset)
            else:
                msgs, fields = _packed_problems(body, salt, packed)
                for msg in msgs:
                    self.problem("payload", f"record {rid} v{ver}: {msg}", e.seq, slot.offset)
                if fields is not None:
                    tags = list(fields[1])
        elif state == "bad":
            if self.in_journal(slot):
                state = "interrupted"
            else:
                self.problem("slot", f"payload slot checksum mismatch (seq {e.seq}, record {rid} v{ver})",
                             e.seq, slot.offset)
        if state != "ok":
            self.pending.setdefault(rid, []).append((e.seq, slot.offset, state))
        index = self.index
        if index is not None:
            if old:
                index.older.setdefault(rid, []).append(index.live[rid])
            index.live[rid] = (rid, body["scope"], tags, ver, e.seq, e.ts_ns, e.agent, body["size"], e.hash,
                               slot.offset, slot.length, off + ENTRY_HEADER.size, len(e.raw))

    def op_forget(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        self.seq0_check(e, off)
        for rid in e.body["ids"]:
            named = self.versions.pop(rid, 0) + self.extra.pop(rid, 0)
            others = self.pending.pop(rid, ())
            self.awaiting += named - len(others)  # versions with an `ok` slot: erasure still to do
            for _seq, _off, state in others:
                if state in ("erased", "none"):
                    self.erased += 1
                elif state == "interrupted":
                    self.interrupted += 1
            if self.index is not None:
                self.index.live.pop(rid, None)
                self.index.older.pop(rid, None)
                self.index.forgotten.add(rid)
        if slot.state == "ok":
            start, length = slot.payload_range()
            try:
                obj = unpackb(win.get(start, length))
                if not (isinstance(obj, dict) and set(obj) == {"reason"}
                        and isinstance(obj["reason"], (str, type(None)))):
                    raise ValueError("not a map {reason: str or nil}")
            except Exception as exc:
                msg = f"forget payload does not decode: {exc}"
                self.problem("payload", msg, e.seq, slot.offset)
        elif slot.state in ("bad", "erased"):
            what = "checksum mismatch" if slot.state == "bad" else "is erased (all zero)"
            self.problem("slot", f"forget payload slot {what} (seq {e.seq})", e.seq, slot.offset)

    def op_grant(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        self.seq0_check(e, off)
        self.no_payload(e, slot)
        if self.index is not None:
            body = e.body
            if e.op == "grant":
                self.index.acl.grant(body["principal"], body["scope"], body["perms"])
            else:
                self.index.acl.revoke(body["principal"], body["scope"], body["perms"])

    def op_checkpoint(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        self.seq0_check(e, off)
        self.no_payload(e, slot)
        self.keys.add(e.body["key"])
        found = _checkpoint_findings(e.seq, e.prev, e.body, self.db_id, self.pubkey)
        for kind, msg in found:
            self.problem(kind, msg, e.seq, off)
        if not found:
            self.checkpoints += 1
            if self.pubkey is not None:
                self.signed_upto = e.seq

    # the end
    def finish(self) -> None:
        self.resumed(self.next_seq)  # a resync always finds a frame, so this is a no-op
        if self.entries == 0 and not self.problems:
            self.problem("genesis", "the log holds no entries (no genesis)", None, HEADER_SIZE)
        for rid, versions in self.pending.items():
            for seq, offset, state in versions:
                if state == "erased":
                    self.problem("erased", f"payload of seq {seq} (record {rid}) is erased, but no later "
                                 "forget names the record", seq, offset)
                elif state == "none":
                    self.problem("payload", f"seq {seq} (record {rid}) has no payload, but no later forget "
                                 "names the record", seq, offset)
                elif state == "interrupted":
                    self.problem("slot", f"payload slot of seq {seq} (record {rid}) is damaged; DB.erase "
                                 "lists it, but no forget names the record", seq, offset)
        last_seq = self.last_seq if self.last_hash is not None else None
        if self.expect_head is not None:
            seq, want = self.expect_head
            if not self.head_hashes:
                end = f"it ends at seq {last_seq}" if last_seq is not None else "it holds no entries"
                self.problem("expect-head", f"the expected head seq {seq} is not in the log ({end}): "
                             "the log was truncated", seq, None)
            elif want not in self.head_hashes:
                self.problem("expect-head", f"seq {seq} hashes to {self.head_hashes[0].hex()}, not the "
                             f"expected {want.hex()}: the log was rewritten", seq, None)
        if self.pubkey is not None and last_seq is not None:
            if self.signed_upto < 0:
                self.problem("unsigned", "no checkpoint in the log is signed by the given key", None, None)
            elif last_seq > self.signed_upto:
                self.problem("unsigned", f"entries seq {self.signed_upto + 1}..{last_seq} follow the last "
                             "checkpoint signed by the given key: appended later, or its signed tail was "
                             "cut off", self.signed_upto + 1, None)
        if self.awaiting:
            self.notes.append(f"{self.awaiting} forgotten versions still hold their payload: erasure pending "
                              "(the next writer to open the log completes it)")
        if self.interrupted:
            self.notes.append(f"{self.interrupted} forgotten versions are part-way erased "
                              "(listed in DB.erase)")
        if self.checkpoints and self.pubkey is None:
            keys = ", ".join(sorted(k.hex() for k in self.keys))
            self.notes.append(f"checkpoint signatures were checked against the keys they name ({keys}); "
                              "give the expected public key to check who signed them")

    def report(self) -> VerifyReport:
        problems = sorted(self.problems, key=lambda p: (p.offset is None, p.offset or 0))
        last_hash = self.last_hash
        return VerifyReport(
            ok=not problems,
            entries=self.entries,
            head_seq=self.last_seq if last_hash is not None else -1,
            head_hash=last_hash.hex() if last_hash is not None else "",
            problems=tuple(problems),
            erased=self.erased,
            checkpoints=self.checkpoints,
            notes=tuple(self.notes),
        )


def _parse_expect_head(expect_head: tuple[int, str] | None) -> tuple[int, bytes] | None:
    if expect_head is None:
        return None
    seq, hexhash = expect_head
    try:
        raw = bytes.fromhex(hexhash)
    except (ValueError, TypeError):
        raw = b""
    if not (isinstance(seq, int) and seq >= 0 and len(raw) == 32):
        raise InvalidInput("expect_head must be (seq >= 0, 64 hex digits)")
    return seq, raw


def verify_db(
    path: PathArg,
    *,
    pubkey: bytes | None = None,
    expect_head: tuple[int, str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check a database log file completely and report every problem found (docs/FORMAT.md §5.1).

    Reads the file in chunks, without opening it as a client, without locks and without writing.
    `pubkey`: raw 32-byte Ed25519 key every checkpoint must be signed by (and that must sign the head).
    `expect_head`: (seq, hex hash) saved earlier; the log must still hold that entry with that hash.
    `progress(done_bytes, total_bytes)` is called as the file is read.
    Raises UnreadableDatabase only if the file cannot be opened or read at all."""
    return _verify_db(path, pubkey, expect_head, progress, None)


def verify_db_and_index(
    path: PathArg, *, pubkey: bytes | None = None, expect_head: tuple[int, str] | None = None
) -> tuple[VerifyReport, ExpectedIndex]:
    """verify_db, and, from the same pass over the file, what a client's index of it must hold (for
    `Store.index_differences`; meaningful only when the report is ok). The snapshot file is left to
    the caller, which compares the index it serves."""
    index = ExpectedIndex({}, {}, set(), Acl())
    report = _verify_db(path, pubkey, expect_head, None, index, check_snapshot=False)
    return report, index


def _verify_db(
    path: PathArg, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None,
    index: ExpectedIndex | None, check_snapshot: bool = True,
) -> VerifyReport:
    head = _parse_expect_head(expect_head)
    if pubkey is not None and not (isinstance(pubkey, bytes) and len(pubkey) == 32):
        raise InvalidInput("pubkey must be a raw 32-byte Ed25519 public key")
    fd, size, name = _open_db(path)
    snapshot = check_snapshot and os.path.exists(name + ".snap")
    if snapshot and index is None:
        index = ExpectedIndex({}, {}, set(), Acl())
    try:
        v = _DbVerifier(name, size, pubkey, head)
        v.index = index
        win = _Window(fd, size, name, progress)
        v.header(win.get(0, HEADER_SIZE))
        v.load_journal()
        v.leftovers()
        with gc_paused():
            for item in _scan(win, lenient=True, skip=v.fast_frames):
                if isinstance(item, _Damage):
                    v.damage(item)
                else:
                    v.frame(item[0], item[1], win)
        v.finish()
        if progress is not None:
            progress(win.size, win.size)
    finally:
        os.close(fd)
    report = v.report()
    if index is not None:
        index.head_seq, index.entries = report.head_seq, report.entries
        index.head_hash = bytes.fromhex(report.head_hash) if report.head_hash else ZERO_HASH
    if snapshot and report.ok and index is not None:
        problems, notes = check_snapshot_file(name, index)
        if problems or notes:
            report = dataclasses.replace(
                report, ok=not problems, problems=report.problems + tuple(problems), notes=report.notes + tuple(notes)
            )
    return report


def check_snapshot_file(path: str, expected: ExpectedIndex) -> tuple[list[Problem], list[str]]:
    """Whether the index snapshot beside a sound log holds exactly what the log says (problems), or is
    stale and would be ignored (notes). Opens the database as a read-only client would, from the
    snapshot, so that what is compared is what a client would serve."""
    from .storage.engine import Store

    label = f"the index snapshot {os.path.basename(path)}.snap"
    try:
        store = Store(path, "", readonly=True)
    except MnemoError as exc:
        return [Problem("snapshot", f"{label}: the database does not open from it: {exc}")], []
    try:
        if store.snapshot_refused is not None:
            return [Problem("snapshot", f"{label} ends at this log's head but was refused "
                            f"({store.snapshot_refused}): it was altered; clients replay the log instead")], []
        if not store.snapshot_used:
            return [], [f"{label} is stale (clients ignore it; the next writer rewrites it)"]
        return [Problem("snapshot", f"{d}: {label} was altered") for d in store.index_differences(expected)], []
    finally:
        store.close()


# -- reading the chain strictly (export, `mnemo log`) -----------------------------------------------------


@dataclass(frozen=True)
class LogItem:
    """One chain entry as read from the log, with its offset and its payload slot."""

    entry: Entry
    offset: int
    slot: Slot
    payload: bytes | None  # the payload bytes of an `ok` slot, when asked for


def _strict_items(win: _Window, payloads: bool) -> Iterator[LogItem]:
    try:
        decode_file_header(win.get(0, HEADER_SIZE))
    except HeaderError as exc:
        raise IntegrityError(f"{win.path}: bad file header: {exc}", 0) from None
    for item in _scan(win, lenient=False):
        if isinstance(item, _Damage):
            if item.torn:
                return  # a torn or in-progress last write: a reader stops before it
            raise IntegrityError(f"{win.path}: damaged frame at offset {item.offset} ({item.message}); "
                                 "run `mnemo verify` for the full report", item.offset)
        frame = item[0]
        for e, slot, off in zip(frame.entries, frame.slots, _entry_offsets(frame), strict=True):
            data = None
            if payloads and slot.state == "ok":
                start, length = slot.payload_range()
                data = win.get(start, length)
            yield LogItem(e, off, slot, data)


def read_log(path: PathArg, *, payloads: bool = False) -> Iterator[LogItem]:
    """Every entry of the log in order, read in chunks without opening the database as a client.

    Stops before an incomplete last frame (a torn or in-progress write); raises IntegrityError at damage
    anywhere else and UnreadableDatabase if the file cannot be read. Does not check hashes or links:
    that is verify_db's work."""
    fd, size, name = _open_db(path)
    try:
        yield from _strict_items(_Window(fd, size, name, None), payloads)
    finally:
        os.close(fd)


# -- export ----------------------------------------------------------------------------------------------


def _forgotten_by(items: Iterable[LogItem]) -> dict[int, tuple[int, str, int]]:
    """put seq -> (seq, agent, ts_ns) of the forget that erased that version."""
    pending: dict[str, list[int]] = {}
    out: dict[int, tuple[int, str, int]] = {}
    for item in items:
        e = item.entry
        if e.op == "put" and isinstance(e.body.get("id"), str):
            pending.setdefault(e.body["id"], []).append(e.seq)
        elif e.op == "forget" and isinstance(e.body.get("ids"), list):
            for rid in e.body["ids"]:
                for seq in pending.pop(rid, ()) if isinstance(rid, str) else ():
                    out[seq] = (e.seq, e.agent, e.ts_ns)
    return out


def _payload_json(item: LogItem, path: str) -> dict[str, Any] | None:
    e = item.entry
    if item.payload is None:
        if e.op == "put":
            raise IntegrityError(f"{path}: the payload of seq {e.seq} is {item.slot.state} "
                                 "though its record was not forgotten", item.slot.offset)
        return None
    try:
        if e.op == "forget":
            obj = unpackb(item.payload)
            return {"reason": obj.get("reason") if isinstance(obj, dict) else None}
        if e.op != "put":
            return None
        salt, packed = decode_put_payload(item.payload)
        content, tags, metadata = decode_record_fields(packed)
    except Exception as exc:
        raise IntegrityError(f"{path}: unreadable payload of seq {e.seq}: {exc}", item.slot.offset) from None
    out: dict[str, Any] = {"salt": salt.hex(), "packed": base64.b64encode(packed).decode("ascii")}
    if isinstance(content, str):
        out["content"] = content
    else:
        out["content_b64"] = base64.b64encode(content).decode("ascii")
    out["tags"] = list(tags)
    out["metadata"] = jsonable(metadata)
    return out


def export_line(entry: Entry) -> dict[str, Any]:
    """The fields of an export line that come from the entry alone."""
    return {
        "seq": entry.seq,
        "ts": format_ts(entry.ts_ns),
        "op": entry.op,
        "agent": entry.agent,
        "prev": entry.prev.hex(),
        "hash": entry.hash.hex(),
        "entry": base64.b64encode(entry.raw).decode("ascii"),
        "body": jsonable(entry.body),
    }


def export_audit(
    db_path: PathArg,
    dest: PathArg | IO[str],
    *,
    since: int = 0,
    include_content: bool = False,
    progress: Progress | None = None,
) -> int:
    """Write the chain from seq `since` on as JSON Lines (docs/FORMAT.md §5.2); returns the number of lines.

    Versions of forgotten records are marked `"erased": true` with `"forgotten_by": {seq, agent, ts}`
    and never carry a payload. A path `dest` is written to a temporary file and renamed into place.
    Raises IntegrityError if the log is damaged (run verify_db for the full report)."""
    if not (isinstance(since, int) and since >= 0):
        raise InvalidInput("since must be a non-negative integer")
    fd, size, name = _open_db(db_path)
    try:
        win = _Window(fd, size, name, None)
        forgotten = _forgotten_by(_strict_items(win, payloads=False))
        end = win.size
        win = _Window(fd, end, name, progress, growable=False)  # exactly what the first pass read
        if isinstance(dest, (str, os.PathLike)):
            target = os.fspath(dest)
            tmp = f"{target}.tmp{os.getpid()}"
            try:
                with open(tmp, "w", encoding="utf-8", newline="\n") as out:
                    n = _write_export(win, out, since, include_content, forgotten)
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        else:
            n = _write_export(win, dest, since, include_content, forgotten)
        if progress is not None:
            progress(end, end)
        return n
    finally:
        os.close(fd)


def _write_export(
    win: _Window, out: IO[str], since: int, include_content: bool, forgotten: dict[int, tuple[int, str, int]]
) -> int:
    n = 0
    for item in _strict_items(win, payloads=include_content):
        e = item.entry
        if e.seq < since:
            continue
        line = export_line(e)
        by = forgotten.get(e.seq) if e.op == "put" else None
        if by is not None:
            line["erased"] = True
            line["forgotten_by"] = {"seq": by[0], "agent": by[1], "ts": format_ts(by[2])}
        elif include_content and e.op in ("put", "forget"):
            payload = _payload_json(item, win.path)
            if payload is not None:
                line["payload"] = payload
        out.write(json.dumps(line, ensure_ascii=True, separators=(",", ":"), default=_json_default))
        out.write("\n")
        n += 1
    return n


# -- verify_export ---------------------------------------------------------------------------------------


_HEX64 = frozenset("0123456789abcdef")


def _hex32(v: Any) -> bytes | None:
    if isinstance(v, str) and len(v) == 64 and set(v) <= _HEX64:
        return bytes.fromhex(v)
    return None


class _LineError(ValueError):
    pass


class _ExportVerifier:
    def __init__(self, pubkey: bytes | None) -> None:
        self.pubkey = pubkey
        self.problems: list[Problem] = []
        self.notes: list[str] = []
        self.entries = 0
        self.last: Entry | None = None
        self.lost_before = False
        self.db_id: bytes | None = None
        self.checkpoints = 0
        self.signed_upto = -1
        self.erased = 0
        # id -> [(seq, has payload, forgotten_by marker or None)] of puts no forget line has named yet
        self.pending: dict[str, list[tuple[int, bool, Any]]] = {}
        self.forgets: dict[int, Entry] = {}

    def problem(self, kind: str, message: str, seq: int | None, offset: int | None) -> None:
        self.problems.append(Problem(kind, message, seq, offset))

    def expected_seq(self) -> int | None:
        return self.last.seq + 1 if self.last is not None else None

    def line(self, text: str, lineno: int, offset: int) -> None:
        obj: Any = None
        try:
            obj = json.loads(text)
            if not isinstance(obj, dict):
                raise _LineError("not a JSON object")
            raw_b64 = obj.get("entry")
            if not isinstance(raw_b64, str):
                raise _LineError('no "entry" string')
            try:
                raw = base64.b64decode(raw_b64, validate=True)
            except (binascii.Error, ValueError):
                raise _LineError('"entry" is not base64') from None
            e = decode_entry(raw)
        except (ValueError, EntryDecodeError, RecursionError) as exc:
            seq = obj.get("seq") if isinstance(obj, dict) else None
            self.problem("line", f"line {lineno}: unreadable export line: {exc}",
                         seq if isinstance(seq, int) else self.expected_seq(), offset)
            self.lost_before = True
            return
        self.entries += 1
        try:
            self.entry(obj, e, lineno, offset)
        except RecursionError:
            self.problem("line", f"line {lineno}: nested too deeply to check", e.seq, offset)

    def entry(self, obj: dict[str, Any], e: Entry, lineno: int, offset: int) -> None:
        s = e.seq
        where = f"line {lineno}"
        if obj.get("hash") != e.hash.hex():
            msg = f"{where}: hash is not SHA-256 of the entry bytes ({e.hash.hex()})"
            self.problem("hash", msg, s, offset)
        expected = {
            "seq": e.seq, "ts": format_ts(e.ts_ns), "op": e.op, "agent": e.agent, "prev": e.prev.hex(),
            "body": jsonable(e.body),
        }
        for key, want in expected.items():
            if obj.get(key) != want:
                self.problem("mismatch", f"{where}: \"{key}\" does not match the entry bytes", s, offset)
        last = self.last
        if last is None:
            if s == 0:
                if e.prev != ZERO_HASH or e.op != "genesis":
                    msg = f"{where}: seq 0 is not a genesis entry with a zero prev"
                    self.problem("genesis", msg, s, offset)
            elif not self.lost_before:
                self.notes.append(f"the export starts at seq {s}; it is anchored at its first entry, whose "
                                  f"prev {e.prev.hex()} is the hash of seq {s - 1}: compare it with a head "
                                  "you trust")
        elif not self.lost_before:
            if s != last.seq + 1:
                self.problem("seq", f"{where}: seq follows seq {last.seq}", min(s, last.seq + 1), offset)
            if e.prev != last.hash:
                self.problem("link", f"{where}: prev {_short(e.prev)} is not the hash of the line before "
                             f"(seq {last.seq}, {_short(last.hash)})", s, offset)
        self.lost_before = False
        self.last = e
        why = _body_problem(e.op, e.body)
        if why is not None:
            self.problem("body", f"{where}: {why}", s, offset)
            return
        if e.op == "genesis":
            if s != 0:
                self.problem("genesis", f"{where}: genesis entry after seq 0", s, offset)
            self.db_id = e.body["db_id"]
        elif s == 0:
            self.problem("genesis", f"{where}: seq 0 is a {e.op} entry, not genesis", s, offset)
        payload = obj.get("payload")
        if payload is not None and e.op not in ("put", "forget"):
            self.problem("payload", f"{where}: a {e.op} line carries a payload", s, offset)
        if e.op == "put":
            self.put(obj, e, payload, where, offset)
        elif e.op == "forget":
            self.forget(e, payload, where, offset)
        elif e.op == "checkpoint":
            self.checkpoint(e, where, offset)
        if "erased" in obj and e.op != "put":
            self.problem("erased", f"{where}: only a put can be marked erased", s, offset)

    def put(self, obj: dict[str, Any], e: Entry, payload: Any, where: str, offset: int) -> None:
        s = e.seq
        marker = obj.get("forgotten_by") if obj.get("erased") is True else None
        if "erased" in obj and (obj["erased"] is not True or not isinstance(marker, dict)):
            self.problem("erased", f"{where}: malformed erased marker", s, offset)
            marker = None
        if payload is not None:
            if marker is not None:
                self.problem("erased", f"{where}: marked erased, yet carries a payload", s, offset)
            for msg in self.put_payload(e, payload):
                self.problem("payload", f"{where}: {msg}", s, offset)
        self.pending.setdefault(e.body["id"], []).append((s, payload is not None, marker))

    def put_payload(self, e: Entry, payload: Any) -> list[str]:
        if not isinstance(payload, dict):
            return ["payload is not an object"]
        salt_hex, packed_b64 = payload.get("salt"), payload.get("packed")
        try:
            salt = bytes.fromhex(salt_hex) if isinstance(salt_hex, str) else b""
            packed = base64.b64decode(packed_b64, validate=True) if isinstance(packed_b64, str) else None
        except (ValueError, binascii.Error):
            packed = None
        if len(salt) != 16 or packed is None:
            return ["payload lacks a 16-byte hex salt or base64 packed bytes"]
        msgs, fields = _packed_problems(e.body, salt, packed)
        if fields is None:
            return msgs
        content, tags, metadata = fields
        if isinstance(content, str):
            if payload.get("content") != content or "content_b64" in payload:
                msgs.append('payload "content" does not match packed')
        else:
            shown = payload.get("content_b64")
            try:
                ok = isinstance(shown, str) and base64.b64decode(shown, validate=True) == content
            except (ValueError, binascii.Error):
                ok = False
            if not ok or "content" in payload:
                msgs.append('payload "content_b64" does not match packed')
        if payload.get("tags") != jsonable(list(tags)):
            msgs.append('payload "tags" do not match packed')
        if payload.get("metadata") != jsonable(metadata):
            msgs.append('payload "metadata" does not match packed')
        return msgs

    def forget(self, e: Entry, payload: Any, where: str, offset: int) -> None:
        if payload is not None and not (isinstance(payload, dict) and set(payload) <= {"reason"}):
            self.problem("payload", f"{where}: a forget's payload holds only its reason", e.seq, offset)
        ts = format_ts(e.ts_ns)
        for rid in e.body["ids"]:
            for seq, has_payload, marker in self.pending.pop(rid, ()):
                if has_payload:
                    self.problem("erased", f"{where} forgets record {rid}, yet the export holds the content "
                                 f"of its version at seq {seq}", seq, None)
                if marker is None:
                    self.problem("erased", f"seq {seq} is a version of record {rid}, which seq {e.seq} "
                                 "forgets, but it is not marked erased", seq, None)
                elif marker != {"seq": e.seq, "agent": e.agent, "ts": ts}:
                    self.problem("erased", f"the erased marker of seq {seq} does not name the forget at "
                                 f"seq {e.seq}", seq, None)
                else:
                    self.erased += 1

    def checkpoint(self, e: Entry, where: str, offset: int) -> None:
        if self.db_id is None:
            self.db_id = e.body["db_id"]
        found = _checkpoint_findings(e.seq, e.prev, e.body, self.db_id, self.pubkey)
        for kind, msg in found:
            self.problem(kind, f"{where}: {msg}", e.seq, offset)
        if not found:
            self.checkpoints += 1
            if self.pubkey is not None:
                self.signed_upto = e.seq

    def finish(self) -> VerifyReport:
        for _rid, versions in self.pending.items():
            for seq, _has, marker in versions:
                if marker is not None:
                    self.problem("erased", f"seq {seq} is marked erased by seq {marker.get('seq')}, but no "
                                 "later line forgets its record", seq, None)
        last = self.last
        if last is None and not self.problems:
            self.problem("line", "the export holds no entries", None, None)
        if self.pubkey is not None and last is not None:
            if self.signed_upto < 0:
                self.problem("unsigned", "no checkpoint in the export is signed by the given key", None, None)
            elif last.seq > self.signed_upto:
                self.problem("unsigned", f"entries seq {self.signed_upto + 1}..{last.seq} follow the last "
                             "checkpoint signed by the given key", self.signed_upto + 1, None)
        return VerifyReport(
            ok=not self.problems,
            entries=self.entries,
            head_seq=last.seq if last else -1,
            head_hash=last.hash.hex() if last else "",
            problems=tuple(self.problems),
            erased=self.erased,
            checkpoints=self.checkpoints,
            notes=tuple(self.notes),
        )


def _export_lines(f: IO[Any]) -> Iterator[tuple[str | None, int]]:
    """(line text or None if it is not UTF-8, byte offset) for each line of an export."""
    offset = 0
    for raw in f:
        data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
        n = len(data)
        try:
            text: str | None = raw if isinstance(raw, str) else raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        yield text, offset
        offset += n


def verify_export(
    file: PathArg | IO[str] | IO[bytes],
    *,
    pubkey: bytes | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check an audit export offline (docs/FORMAT.md §5.2), reporting every problem with its seq and the byte
    offset of its line. An export that starts after seq 0 is anchored at its first line.
    Raises UnreadableExport only if the file cannot be opened or read at all."""
    if pubkey is not None and not (isinstance(pubkey, bytes) and len(pubkey) == 32):
        raise InvalidInput("pubkey must be a raw 32-byte Ed25519 public key")
    v = _ExportVerifier(pubkey)
    if isinstance(file, (str, os.PathLike)):
        name = os.fspath(file)
        try:
            f: IO[Any] = open(name, "rb")  # noqa: SIM115 - closed below
            total = os.fstat(f.fileno()).st_size
        except OSError as exc:
            raise UnreadableExport(f"cannot open {name}: {exc.strerror or exc}") from None
        if os.path.isdir(name):
            f.close()
            raise UnreadableExport(f"cannot read {name}: it is a directory")
    else:
        name, f, total = getattr(file, "name", "<stream>"), file, 0
    try:
        lineno = 0
        try:
            for text, offset in _export_lines(f):
                lineno += 1
                if progress is not None and total and lineno % 4096 == 0:
                    progress(offset, total)
                if text is None:
                    v.problem("line", f"line {lineno}: not UTF-8 text", v.expected_seq(), offset)
                    v.lost_before = True
                elif text.strip():
                    v.line(text, lineno, offset)
        except OSError as exc:
            raise UnreadableExport(f"cannot read {name}: {exc.strerror or exc}") from None
    finally:
        if f is not file:
            f.close()
    if progress is not None and total:
        progress(total, total)
    return v.finish()


__all__ = [
    "ExpectedIndex",
    "KeyFileError",
    "LogItem",
    "UnreadableDatabase",
    "UnreadableExport",
    "export_audit",
    "export_line",
    "format_ts",
    "generate_keypair",
    "jsonable",
    "load_private_key",
    "load_public_key",
    "public_key_bytes",
    "read_log",
    "sign_checkpoint",
    "verify_db",
    "verify_db_and_index",
    "verify_export",
]
