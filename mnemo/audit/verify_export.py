"""`verify_export`: an audit export checked with nothing but SHA-256, msgpack and Ed25519."""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterator
from typing import IO, Any

from ..chain.codec import (
    ZERO_HASH,
    Entry,
    EntryDecodeError,
    decode_entry,
)
from ..chain.rules import body_problem, checkpoint_findings, packed_problems, short_hash
from ..errors import InvalidInput
from ..record import Problem, VerifyReport
from ..storage.contract import PathArg, Progress
from ..storage.file.reader import open_regular
from .common import UnreadableExport, format_ts, jsonable

# -- verify_export ---------------------------------------------------------------------------------------


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
                self.problem("link", f"{where}: prev {short_hash(e.prev)} is not the hash of the line before "
                             f"(seq {last.seq}, {short_hash(last.hash)})", s, offset)
        self.lost_before = False
        self.last = e
        why = body_problem(e.op, e.body)
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
            salt, packed = b"", None
        if len(salt) != 16 or packed is None:
            return ["payload lacks a 16-byte hex salt or base64 packed bytes"]
        msgs, fields = packed_problems(e.body, salt, packed)
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
        found = checkpoint_findings(e.seq, e.prev, e.body, self.db_id, self.pubkey)
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
        fd, total = open_regular(name, UnreadableExport)
        f: IO[Any] = os.fdopen(fd, "rb")
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
