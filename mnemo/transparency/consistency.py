"""Consistency proofs as JSON (docs/TRANSPARENCY.md §5), and checking one between two checkpoints.

    {"origin": "...", "old_size": 3, "new_size": 5, "old_root": "<base64>", "new_root": "<base64>",
     "consistency": ["<base64>", ...]}

`consistency` is PROOF(old_size, D[new_size]), empty when the sizes are equal. Readers ignore unknown
keys. Mnemo writes the object on one line with json's default separators, then a newline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..chain.tree import HASH_SIZE, verify_consistency
from .errors import Finding, UnreadableInput
from .keys import KeyLike, load_verifier_key
from .note import b64, b64_strict, verify_checkpoint_note


class NotJSON(UnreadableInput):
    """The proof file is not UTF-8 JSON at all (exit 2); JSON with wrong fields is a finding instead."""


@dataclass(frozen=True)
class ConsistencyProof:
    origin: str
    old_size: int
    new_size: int
    old_root: bytes
    new_root: bytes
    proof: tuple[bytes, ...]

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "old_size": self.old_size, "new_size": self.new_size,
                "old_root": b64(self.old_root), "new_root": b64(self.new_root),
                "consistency": [b64(h) for h in self.proof]}

    def to_text(self) -> str:
        return json.dumps(self.to_json()) + "\n"

    def verifies(self) -> bool:
        return verify_consistency(self.old_size, self.new_size, self.old_root, self.new_root, self.proof)


def _size(obj: dict[str, Any], key: str, found: list[Finding]) -> int | None:
    value = obj.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 1 << 63:
        return value
    found.append(Finding("proof", f'"{key}" is missing or not a positive integer'))
    return None


def _hash(value: Any, what: str, found: list[Finding]) -> bytes | None:
    try:
        if not isinstance(value, str):
            raise ValueError
        h = b64_strict(value)
    except ValueError:
        found.append(Finding("proof", f"{what} is missing or not base64"))
        return None
    if len(h) != HASH_SIZE:
        found.append(Finding("proof", f"{what} is {len(h)} bytes, not a 32-byte hash"))
        return None
    return h


def parse_consistency(data: str | bytes) -> tuple[ConsistencyProof | None, tuple[Finding, ...]]:
    """The proof in a consistency JSON, or None and what is wrong with it. Raises NotJSON if it is not
    UTF-8 JSON at all."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        obj = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):  # (RecursionError: nested deeper than it reaches)
        raise NotJSON("the consistency proof is not UTF-8 JSON") from None
    if not isinstance(obj, dict):
        return None, (Finding("proof", "the consistency proof is not a JSON object"),)
    found: list[Finding] = []
    origin = obj.get("origin")
    if not isinstance(origin, str) or not origin:
        found.append(Finding("proof", '"origin" is missing or not text'))
    old_size, new_size = _size(obj, "old_size", found), _size(obj, "new_size", found)
    old_root = _hash(obj.get("old_root"), '"old_root"', found)
    new_root = _hash(obj.get("new_root"), '"new_root"', found)
    hashes = obj.get("consistency")
    proof: list[bytes] = []
    if not isinstance(hashes, list):
        found.append(Finding("proof", '"consistency" is missing or not a list'))
    else:
        for k, item in enumerate(hashes, 1):
            h = _hash(item, f"hash {k} of the proof", found)
            if h is not None:
                proof.append(h)
    if found:
        return None, tuple(found)
    assert isinstance(origin, str) and old_size and new_size and old_root and new_root
    return ConsistencyProof(origin, old_size, new_size, old_root, new_root, tuple(proof)), ()


@dataclass(frozen=True)
class ConsistencyCheck:
    ok: bool
    origin: str | None
    old_size: int | None
    new_size: int | None
    problems: tuple[Finding, ...]

    def summary(self) -> str:
        return (f"OK: the tree of {self.new_size} entries of {self.origin} extends the tree of "
                f"{self.old_size} entries")

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "origin": self.origin, "tree_size": self.new_size, "old_size": self.old_size,
                "new_size": self.new_size, "problems": [p.to_json() for p in self.problems]}


def verify_consistency_proof(
    old_note: str | bytes,
    new_note: str | bytes,
    proof: str | bytes,
    pubkey: KeyLike,
    origin: str | None = None,
) -> ConsistencyCheck:
    """Both checkpoints verify with the log's key under one origin (`origin`, if given); the proof names
    that origin and the notes' sizes and roots; the old size is not above the new; the proof verifies.
    Reports every problem. Raises NotJSON (exit 2) if the proof is not JSON at all, KeyFileError for an
    unusable key."""
    key = load_verifier_key(pubkey)
    parsed, proof_problems = parse_consistency(proof)
    old = verify_checkpoint_note(old_note, key, origin)
    new = verify_checkpoint_note(new_note, key, origin)
    found = [Finding(p.kind, f"old checkpoint: {p.message}") for p in old.problems]
    found += [Finding(p.kind, f"new checkpoint: {p.message}") for p in new.problems]
    found += proof_problems
    a, b = old.checkpoint, new.checkpoint
    if a is not None and b is not None:
        if origin is None and a.origin != b.origin:
            found.append(Finding("origin", f"the old checkpoint is of {a.origin!r}, the new one of {b.origin!r}"))
        if a.size > b.size:
            found.append(Finding("size", f"the old checkpoint's size {a.size} is above the new one's {b.size}"))
    if parsed is not None:
        for side, cp, size, root in (("old", a, parsed.old_size, parsed.old_root),
                                     ("new", b, parsed.new_size, parsed.new_root)):
            if cp is None:
                continue
            if parsed.origin != cp.origin:
                found.append(Finding("proof", f"the proof is of {parsed.origin!r}, the {side} checkpoint of "
                                     f"{cp.origin!r}"))
            if size != cp.size:
                found.append(Finding("proof", f"the proof's {side}_size {size} is not the {side} checkpoint's "
                                     f"{cp.size}"))
            elif root != cp.root:
                found.append(Finding("proof", f"the proof's {side}_root is not the {side} checkpoint's root"))
        if not parsed.verifies():
            found.append(Finding("consistency", f"the proof from size {parsed.old_size} to {parsed.new_size} "
                                 "does not verify"))
    cp = b or a
    return ConsistencyCheck(
        not found,
        cp.origin if cp else (parsed.origin if parsed else None),
        a.size if a else (parsed.old_size if parsed else None),
        b.size if b else (parsed.new_size if parsed else None),
        tuple(_unique(found)),
    )


def _unique(found: list[Finding]) -> list[Finding]:
    seen: set[Finding] = set()
    out = []
    for f in found:
        if f not in seen:
            seen.add(f)
            out.append(f)
    return out


__all__ = ["ConsistencyCheck", "ConsistencyProof", "NotJSON", "parse_consistency", "verify_consistency_proof"]
