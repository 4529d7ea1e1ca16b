"""Inclusion bundles: c2sp.org/tlog-proof@v1 (docs/TRANSPARENCY.md §4).

    c2sp.org/tlog-proof@v1
    extra <base64 of the exact entry bytes of seq N>
    index <N>
    <base64 hash>            one per hash of PATH(N, D[size]), the leaf's sibling first
    (a blank line)
    <the checkpoint note of that size, verbatim>

Mnemo always writes `extra`, so a bundle is self-contained: the leaf hash is H(0x00 || extra). The
path to the signed root is what authenticates it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..chain.codec import EntryDecodeError, decode_entry
from ..chain.tree import HASH_SIZE, leaf_hash, verify_inclusion
from .errors import Finding, UnreadableInput
from .keys import KeyLike
from .note import DECIMAL, b64, b64_strict, parse_checkpoint, verify_checkpoint_note

BUNDLE_HEADER = "c2sp.org/tlog-proof@v1"
SUFFIX = ".tlog-proof"


class NotABundle(UnreadableInput):
    """Not UTF-8, or the first line is not `c2sp.org/tlog-proof@v1` (nor a bundle's JSON form)."""


def build_bundle(entry: bytes, index: int, path: Sequence[bytes], note: str) -> str:
    """The bundle text of entry `entry` (its exact bytes) at `index`, with its inclusion path in the tree
    the checkpoint `note` signs."""
    lines = [BUNDLE_HEADER, f"extra {b64(entry)}", f"index {index}", *(b64(h) for h in path)]
    return "".join(line + "\n" for line in lines) + "\n" + note


def bundle_json(entry: bytes, index: int, path: Sequence[bytes], note: str) -> dict[str, Any]:
    """The `--json` form: {"origin", "tree_size", "leaf_index", "entry_b64", "inclusion", "checkpoint"}."""
    cp, _ = parse_checkpoint(note)
    return {"origin": cp.origin, "tree_size": cp.size, "leaf_index": index, "entry_b64": b64(entry),
            "inclusion": [b64(h) for h in path], "checkpoint": note}


@dataclass
class _Parsed:
    extra: bytes | None = None
    index: int | None = None
    path: list[bytes] | None = field(default_factory=list)
    note: str | None = None
    claimed: dict[str, Any] = field(default_factory=dict)  # origin and tree_size of the JSON form


def _parse_text(text: str, found: list[Finding]) -> _Parsed:
    out = _Parsed()
    lines = text[len(BUNDLE_HEADER) + 1:].split("\n")
    i = 0
    proof: list[str] = []
    while i < len(lines) and lines[i] != "":
        proof.append(lines[i])
        i += 1
    if i >= len(lines) - 1:
        found.append(Finding("bundle", "no blank line and checkpoint after the proof: the bundle is truncated"))
    else:
        out.note = "\n".join(lines[i + 1:])
    pos = 0
    if pos < len(proof) and proof[pos].startswith("extra "):
        try:
            out.extra = b64_strict(proof[pos][len("extra "):])
        except ValueError:
            found.append(Finding("bundle", "the extra line is not base64"))
        pos += 1
    else:
        found.append(Finding("bundle", "no extra line: a Mnemo bundle carries the entry's bytes"))
    if pos < len(proof) and proof[pos].startswith("index "):
        number = proof[pos][len("index "):]
        if DECIMAL.fullmatch(number) and int(number) < 1 << 63:
            out.index = int(number)
        else:
            found.append(Finding("bundle", f"the index {number!r} is not a decimal number without leading zeros"))
        pos += 1
    else:
        found.append(Finding("bundle", "no index line after the extra line"))
    out.path = _hashes(proof[pos:], pos + 2, found)
    return out


def _hashes(items: Sequence[object], first_line: int | None, found: list[Finding]) -> list[bytes] | None:
    path: list[bytes] | None = []
    for k, item in enumerate(items):
        where = f"line {first_line + k}" if first_line is not None else f"hash {k + 1}"
        try:
            if not isinstance(item, str):
                raise ValueError
            h = b64_strict(item)
        except ValueError:
            found.append(Finding("bundle", f"{where} of the inclusion path is not base64"))
            path = None
            continue
        if len(h) != HASH_SIZE:
            found.append(Finding("bundle", f"{where} of the inclusion path is {len(h)} bytes, not a 32-byte hash"))
            path = None
        elif path is not None:
            path.append(h)
    return path


def _parse_json(text: str, found: list[Finding]) -> _Parsed:
    try:
        obj: dict[str, Any] = json.loads(text)  # text that starts with "{" is an object if it is JSON
    except (ValueError, RecursionError):  # (RecursionError: nested deeper than the parser reaches)
        raise NotABundle("the bundle is neither c2sp.org/tlog-proof@v1 text nor JSON") from None
    out = _Parsed(claimed={k: obj[k] for k in ("origin", "tree_size") if k in obj})
    entry = obj.get("entry_b64")
    try:
        out.extra = b64_strict(entry) if isinstance(entry, str) else None
    except ValueError:
        out.extra = None
    if out.extra is None:
        found.append(Finding("bundle", '"entry_b64" is missing or not base64'))
    index = obj.get("leaf_index")
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 1 << 63:
        out.index = index
    else:
        found.append(Finding("bundle", '"leaf_index" is missing or not a non-negative integer'))
    inclusion = obj.get("inclusion")
    if isinstance(inclusion, list):
        out.path = _hashes(inclusion, None, found)
    else:
        out.path = None
        found.append(Finding("bundle", '"inclusion" is missing or not a list'))
    note = obj.get("checkpoint")
    if isinstance(note, str):
        out.note = note
    else:
        found.append(Finding("bundle", '"checkpoint" is missing or not text'))
    return out


@dataclass(frozen=True)
class BundleCheck:
    """What verify_bundle found. The entry fields are set whenever `extra` decoded."""

    ok: bool
    origin: str | None
    tree_size: int | None
    index: int | None
    seq: int | None
    op: str | None
    agent: str | None
    chain_hash: str | None
    problems: tuple[Finding, ...]

    def summary(self) -> str:
        """The one line `audit verify-proof` prints on success."""
        return (f"OK: seq {self.seq} ({self.op} by {self.agent}, hash {self.chain_hash}) is in the tree of "
                f"{self.tree_size} entries of {self.origin}")

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "origin": self.origin, "tree_size": self.tree_size, "leaf_index": self.index,
                "seq": self.seq, "op": self.op, "agent": self.agent, "hash": self.chain_hash,
                "problems": [p.to_json() for p in self.problems]}


def decode_bundle_text(data: str | bytes) -> str:
    if isinstance(data, (bytes, bytearray)):
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise NotABundle("the bundle is not UTF-8") from None
    return data


def verify_bundle(data: str | bytes, pubkey: KeyLike, origin: str | None = None) -> BundleCheck:
    """Check a bundle offline (its text, or its JSON form): the checkpoint verifies with the log's key
    (and names `origin`, if given), `extra` is a Mnemo entry whose seq is the index, the index is in
    the tree, and the path leads from the entry's leaf to the checkpoint's root. Reports every problem.

    Raises NotABundle (exit 2) for text that is not UTF-8 or not a bundle at all, and KeyFileError for
    an unusable key."""
    text = decode_bundle_text(data)
    found: list[Finding] = []
    if text.startswith(BUNDLE_HEADER + "\n"):
        parsed = _parse_text(text, found)
    elif text.lstrip().startswith("{"):
        parsed = _parse_json(text, found)
    else:
        raise NotABundle(f"the first line is not {BUNDLE_HEADER}")

    size = root = cp_origin = None
    if parsed.note is not None:
        check = verify_checkpoint_note(parsed.note, pubkey, origin)
        found.extend(Finding(p.kind, f"checkpoint: {p.message}") for p in check.problems)
        if check.checkpoint is not None:
            size, root, cp_origin = check.checkpoint.size, check.checkpoint.root, check.checkpoint.origin
    for key, value in parsed.claimed.items():
        if value != {"origin": cp_origin, "tree_size": size}[key]:
            found.append(Finding("bundle", f'"{key}" is {value!r}, but the checkpoint says otherwise'))

    seq = op = agent = chain_hash = None
    if parsed.extra is not None:
        try:
            entry = decode_entry(parsed.extra)
        except EntryDecodeError as exc:
            found.append(Finding("entry", f"extra is not a Mnemo entry: {exc}"))
        else:
            seq, op, agent, chain_hash = entry.seq, entry.op, entry.agent, entry.hash.hex()
            if parsed.index is not None and entry.seq != parsed.index:
                found.append(Finding("entry", f"extra is the entry of seq {entry.seq}, not of index {parsed.index}"))
    if parsed.index is not None and size is not None and parsed.index >= size:
        found.append(Finding("index", f"index {parsed.index} is not in the tree of {size} entries"))
    elif (parsed.extra is not None and parsed.index is not None and parsed.path is not None
          and size is not None and root is not None
          and not verify_inclusion(leaf_hash(parsed.extra), parsed.index, size, parsed.path, root)):
        found.append(Finding("path", f"the inclusion path ({len(parsed.path)} hashes) does not lead from the "
                             f"entry at index {parsed.index} to the root of the tree of {size} entries"))
    return BundleCheck(not found, cp_origin, size, parsed.index, seq, op, agent, chain_hash, tuple(found))


__all__ = [
    "BUNDLE_HEADER",
    "SUFFIX",
    "BundleCheck",
    "NotABundle",
    "build_bundle",
    "bundle_json",
    "decode_bundle_text",
    "verify_bundle",
]
