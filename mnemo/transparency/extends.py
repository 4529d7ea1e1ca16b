"""Does the log extend a checkpoint kept elsewhere? (`mnemo verify DB --checkpoint FILE`)

A signed checkpoint that someone other than the log's holder kept — an auditor, a witness — pins the
tree at its size. The current log extends it exactly when its root at that size is the checkpoint's
root: a log cut back below that size, or rewritten anywhere below it, cannot pass, even to a verifier
with the log's public key, unlike a check of the in-chain checkpoints alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..audit import PathArg
from .consistency import ConsistencyProof
from .errors import DamagedLog, Finding
from .keys import KeyLike
from .log import read_tree
from .note import b64, verify_checkpoint_note


@dataclass(frozen=True)
class ExtendsReport:
    """`ok` when the checkpoint verifies and the log extends it; `consistency` then proves it."""

    ok: bool
    origin: str | None
    checkpoint_size: int | None
    log_size: int | None
    log_root: bytes | None
    consistency: ConsistencyProof | None
    problems: tuple[Finding, ...]

    def summary(self) -> str:
        if self.ok:
            return (f"OK: the log ({self.log_size} entries) extends the checkpoint of {self.checkpoint_size} "
                    f"entries of {self.origin}")
        return f"FAILED: {len(self.problems)} problems"

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "origin": self.origin, "tree_size": self.log_size,
                "root": b64(self.log_root) if self.log_root else None, "checkpoint_size": self.checkpoint_size,
                "consistency": self.consistency.to_json() if self.consistency else None,
                "problems": [p.to_json() for p in self.problems]}


def log_extends(db_path: PathArg, note: str | bytes, pubkey: KeyLike, origin: str | None = None) -> ExtendsReport:
    """Check that the log at `db_path` extends the checkpoint `note`: the note verifies with `pubkey`
    under `origin` (default: the database's, mnemo.local/<db_id>), and the log's root at the note's
    size is the note's root. Returns every finding; raises only for a file or key that cannot be read
    at all (UnreadableInput, KeyFileError)."""
    found: list[Finding] = []
    try:
        tree = read_tree(db_path)
    except DamagedLog as exc:
        tree = None
        found.append(Finding("log", f"the log is damaged: {exc}"))
    expected = origin if origin is not None else (tree.default_origin if tree is not None else None)
    check = verify_checkpoint_note(note, pubkey, expected)
    found.extend(check.problems)
    cp = check.checkpoint
    proof = None
    if tree is not None and cp is not None:
        if cp.size < 1:
            found.append(Finding("size", "the checkpoint is of an empty tree; a Mnemo log never is"))
        elif cp.size > tree.size:
            found.append(Finding("truncated", f"the checkpoint covers {cp.size} entries, the log holds only "
                                 f"{tree.size}: it was cut back (or the checkpoint is of another database)"))
        elif tree.root(cp.size) != cp.root:
            found.append(Finding("rewritten", f"the log's root at size {cp.size} is {b64(tree.root(cp.size))}, "
                                 f"not the checkpoint's {b64(cp.root)}: entries below seq {cp.size} were changed"))
        else:
            proof = ConsistencyProof(cp.origin, cp.size, tree.size, cp.root, tree.root(),
                                     tuple(tree.leaves.consistency_proof(cp.size, tree.size)))
    return ExtendsReport(
        not found,
        cp.origin if cp else expected,
        cp.size if cp else None,
        tree.size if tree else None,
        tree.root() if tree else None,
        proof,
        tuple(found),
    )


__all__ = ["ExtendsReport", "log_extends"]
