"""The body of an in-chain `checkpoint` entry, signed (docs/FORMAT.md §1), for whoever appends one;
mnemo.chain.rules.checkpoint_findings is what checks it."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInput
from ..keys import PrivateKeyLike, load_private_key, public_key_bytes
from .codec import checkpoint_message


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


__all__ = ["sign_checkpoint"]
