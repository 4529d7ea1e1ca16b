"""The rules every chain keeps, whatever stores it (docs/FORMAT.md §5.1): entry bodies of the right shape,
put payloads that match their digests, checkpoints whose signatures verify, and, entry by entry, the
whole chain (`ChainVerifier`: seqs, links, versions, erasures, an expected head, the signed tail). Each
backend's verification feeds the entries it stores through a ChainVerifier; the audit export's
verification applies the same shape and signature checks to its lines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..acl import PERMISSIONS, Acl
from ..errors import InvalidInput
from ..record import Problem, VerifyReport
from .codec import (
    FORMAT_VERSION,
    ZERO_HASH,
    Entry,
    checkpoint_message,
    decode_put_payload,
    decode_record_fields,
    payload_digest,
    unpackb,
)
from .tree import CompactRange


def short_hash(h: bytes | str, n: int = 12) -> str:
    """The first `n` hex digits of a hash, as findings name one."""
    return (h.hex() if isinstance(h, bytes) else h)[:n]


def _content_size(content: str | bytes) -> int:
    return len(content.encode("utf-8", "surrogatepass")) if isinstance(content, str) else len(content)


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


def body_problem(op: str, body: dict[str, Any]) -> str | None:
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


def packed_problems(body: dict[str, Any], salt: bytes, packed: bytes) -> tuple[list[str], Any]:
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


def checkpoint_findings(
    entry_seq: int, prev: bytes, body: dict[str, Any], db_id: bytes | None, pubkey: bytes | None
) -> list[tuple[str, str]]:
    """(kind, message) for everything wrong with a well-typed checkpoint body; empty when it verifies."""
    found: list[tuple[str, str]] = []
    if db_id is not None and body["db_id"] != db_id:
        found.append(("checkpoint", f"checkpoint names db_id {body['db_id'].hex()}, not {db_id.hex()}"))
    if body["seq"] != entry_seq - 1 or body["head"] != prev:
        found.append((
            "checkpoint",
            f"checkpoint signs seq {body['seq']} head {short_hash(body['head'])}, not the entry before it "
            f"(seq {entry_seq - 1}, {short_hash(prev)})",
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


# -- the chain, entry by entry ----------------------------------------------------------------------------


# a put as an index holds it: (id, scope, tags, ver, seq, ts_ns, agent, size, hash, slot offset, slot length,
# entry offset, entry length); a store that keeps no byte offsets puts 0 in them
PutRow = tuple[str, str, list[str], int, int, int, str, int, bytes, int, int, int, int]


@dataclass
class ExpectedIndex:
    """What the index of a store must hold, as its chain says: gathered by a ChainVerifier given one, in
    its one pass over the chain, for the store to compare with what it serves (the file backend's
    `index_differences`, PostgreSQL's derived tables)."""

    # id -> its latest put since the last forget naming it
    live: dict[str, PutRow]
    # id -> its earlier puts since that forget, oldest first (records with more than one version)
    older: dict[str, list[PutRow]]
    forgotten: set[str]  # every id a forget named
    acl: Acl
    head_seq: int = -1
    head_hash: bytes = ZERO_HASH
    entries: int = 0
    tree: tuple[int, bytes] | None = None  # (size, root) of the Merkle tree over the entries

    @classmethod
    def empty(cls) -> ExpectedIndex:
        """One to gather into: nothing live, nothing forgotten, an ACL with no owner yet."""
        return cls({}, {}, set(), Acl())


def parse_expect_head(expect_head: tuple[int, str] | None) -> tuple[int, bytes] | None:
    """An expected head as given to verify, (seq, 64 hex digits), as (seq, hash); InvalidInput if it is not."""
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


def verify_arguments(pubkey: bytes | None, expect_head: tuple[int, str] | None) -> tuple[int, bytes] | None:
    """The arguments every backend's verify takes, checked before anything is read: the expected head
    parsed, and InvalidInput for either one that is not what it must be."""
    head = parse_expect_head(expect_head)
    if pubkey is not None and not (isinstance(pubkey, bytes) and len(pubkey) == 32):
        raise InvalidInput("pubkey must be a raw 32-byte Ed25519 public key")
    return head


class PayloadSlot(Protocol):
    """Where a store keeps an entry's payload, as the rules see it: its `state` ("ok", "bad" for one whose
    checksum fails, "erased", "none" for an entry without one), an `offset` that findings name, and
    `payload_range()`, the (offset, length) to read the payload bytes at through a PayloadBytes."""

    @property
    def offset(self) -> int: ...

    @property
    def length(self) -> int: ...

    @property
    def state(self) -> str: ...

    def payload_range(self) -> tuple[int, int]: ...


class PayloadBytes(Protocol):
    """Hands out the payload bytes of the entry being checked (a file's window, a row's payload column)."""

    def get(self, offset: int, n: int) -> bytes: ...


class ChainVerifier:
    """The chain rules, entry by entry (docs/FORMAT.md §5.1): seqs that follow from genesis, links, entry
    bodies, version numbers, put and forget payloads against their entries, erasures that forgets
    explain, checkpoint signatures, an expected head and the signed tail; `report()` then says all.

    Preconditions: `entry` is called for every entry the store holds, in the order it holds them, with
    `next_seq` and `lost_before` set by the caller where entries could not be read at all (so that the
    gap is one finding, not a cascade of them); `db_id`, when the store names it apart from the chain
    (a file's header), is set before the genesis is checked; `index` and `tree`, when set, are empty.
    A store's verifier overrides `problem` (to drop byte offsets it has none of) and `erasure_listed`."""

    FIRST_OFFSET: int | None = None  # where the first entry would be, for the finding that there is none
    ENTRY_HEADER_SIZE = 0  # bytes between an entry's offset and its own bytes (a file's length header)

    def __init__(self, pubkey: bytes | None, expect_head: tuple[int, bytes] | None) -> None:
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
        self.index: ExpectedIndex | None = None  # gathered for a client's verify(), when asked
        self.tree: CompactRange | None = None  # the tree over the entries, when the index is gathered
        self.erased = 0
        self.awaiting = 0
        self.interrupted = 0
        # seq -> the finding of a put's slot that fails its checksum, held until its forget is read; and
        # (seq of that forget's frame's last entry, finding) for each such slot a forget named
        self.unexplained: dict[int, str] = {}
        self.part_erased: list[tuple[int, int, int, str]] = []
        self.frame_last_seq = -1  # the seq of the last entry of the frame being read (a store of frames)
        self.checkpoints = 0
        self.signed_upto = -1
        self.keys: set[bytes] = set()
        self.head_hashes: list[bytes] = []
        self.ops: dict[str, Callable[[Entry, PayloadSlot, int, PayloadBytes], None]] = {
            "genesis": self.op_genesis, "put": self.op_put, "forget": self.op_forget,
            "grant": self.op_grant, "revoke": self.op_grant, "checkpoint": self.op_checkpoint,
        }

    def problem(self, kind: str, message: str, seq: int | None, offset: int | None) -> None:
        self.problems.append(Problem(kind, message, seq, offset))

    def erasure_listed(self, slot: PayloadSlot) -> bool:
        """Whether a slot whose checksum fails is one the store lists as being erased (an erasure that
        was interrupted, which a writer completes), not damage; a store that keeps no such list has none."""
        return False

    # Whether a slot whose checksum fails, whose version the forget in the store's last frame names, is
    # a part-way erasure (a store that fsyncs each erasure before it appends anything after its forget,
    # as the log file does: docs/FORMAT.md §3); `frame_last_seq` is then kept up by the store's verifier.
    PART_ERASED_IN_LAST_FRAME = False

    def entry(self, e: Entry, slot: PayloadSlot, off: int, win: PayloadBytes) -> None:
        """Check the next entry the store holds: `off` is its offset, which findings name, `slot` its
        payload's, read through `win` when the rules need its bytes."""
        self.entries += 1
        if self.tree is not None:
            self.tree.append_entry(e.raw)
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
            self.problem("link", f"prev of seq {e.seq} is {short_hash(e.prev)}, but the entry before it "
                         f"(seq {self.last_seq}) hashes to {short_hash(last_hash)}", e.seq, off)
        self.lost_before = False
        self.next_seq = max(self.next_seq, e.seq + 1)
        self.last_seq, self.last_hash = e.seq, e.hash
        if self.expect_head is not None and e.seq == self.expect_head[0]:
            self.head_hashes.append(e.hash)

        why = body_problem(e.op, e.body)
        if why is not None:
            self.problem("body", why, e.seq, off)
            if e.op == "put" and slot.state == "bad" and not self.erasure_listed(slot):
                self.problem("slot", f"payload slot checksum mismatch (seq {e.seq})", e.seq, slot.offset)
            return
        self.ops[e.op](e, slot, off, win)

    def no_payload(self, e: Entry, slot: PayloadSlot) -> None:
        if slot.state != "none":
            self.problem("payload", f"a {e.op} entry carries a payload slot ({slot.state})",
                         e.seq, slot.offset)

    def op_genesis(self, e: Entry, slot: PayloadSlot, off: int, win: PayloadBytes) -> None:
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

    def op_put(self, e: Entry, slot: PayloadSlot, off: int, win: PayloadBytes) -> None:
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
                data = win.get(*slot.payload_range())
                salt, packed = decode_put_payload(data)
            except Exception as exc:
                msg = f"put payload does not decode: {exc}"
                self.problem("payload", msg, e.seq, slot.offset)
            else:
                msgs, fields = packed_problems(body, salt, packed)
                for msg in msgs:
                    self.problem("payload", f"record {rid} v{ver}: {msg}", e.seq, slot.offset)
                if fields is not None:
                    tags = list(fields[1])
        elif state == "bad":
            msg = f"payload slot checksum mismatch (seq {e.seq}, record {rid} v{ver})"
            if self.erasure_listed(slot):
                state = "interrupted"
            elif self.PART_ERASED_IN_LAST_FRAME:
                state = "unexplained"  # a part-way erasure if the last frame forgets it (finish), else damage
                self.unexplained[e.seq] = msg
            else:
                self.problem("slot", msg, e.seq, slot.offset)
        if state != "ok":
            self.pending.setdefault(rid, []).append((e.seq, slot.offset, state))
        index = self.index
        if index is not None:
            if old:
                index.older.setdefault(rid, []).append(index.live[rid])
            index.live[rid] = (rid, body["scope"], tags, ver, e.seq, e.ts_ns, e.agent, body["size"], e.hash,
                               slot.offset, slot.length, off + self.ENTRY_HEADER_SIZE, len(e.raw))

    def op_forget(self, e: Entry, slot: PayloadSlot, off: int, win: PayloadBytes) -> None:
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
                elif state == "unexplained":
                    self.part_erased.append((_seq, _off, self.frame_last_seq, self.unexplained.pop(_seq)))
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

    def op_grant(self, e: Entry, slot: PayloadSlot, off: int, win: PayloadBytes) -> None:
        self.seq0_check(e, off)
        self.no_payload(e, slot)
        if self.index is not None:
            body = e.body
            if e.op == "grant":
                self.index.acl.grant(body["principal"], body["scope"], body["perms"])
            else:
                self.index.acl.revoke(body["principal"], body["scope"], body["perms"])

    def op_checkpoint(self, e: Entry, slot: PayloadSlot, off: int, win: PayloadBytes) -> None:
        self.seq0_check(e, off)
        self.no_payload(e, slot)
        self.keys.add(e.body["key"])
        found = checkpoint_findings(e.seq, e.prev, e.body, self.db_id, self.pubkey)
        for kind, msg in found:
            self.problem(kind, msg, e.seq, off)
        if not found:
            self.checkpoints += 1
            if self.pubkey is not None:
                self.signed_upto = e.seq

    # the end
    def finish(self) -> None:
        """After the last entry: the findings only the whole chain shows, and the notes."""
        if self.entries == 0 and not self.problems:
            self.problem("genesis", "the log holds no entries (no genesis)", None, self.FIRST_OFFSET)
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
                elif state == "unexplained":
                    self.problem("slot", self.unexplained.pop(seq), seq, offset)
        for seq, offset, forget_end, msg in self.part_erased:
            if forget_end >= 0 and forget_end == self.last_seq:
                self.interrupted += 1  # the erasure of the log's last frame, cut short by a crash
            else:
                self.problem("slot", msg, seq, offset)
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
                              "(forgotten in the log's last frame, or listed in DB.erase): the next writer to "
                              "open the log completes the erasure")
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
