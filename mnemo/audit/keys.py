"""Ed25519 keys (files, PEM, raw, hex) and the signatures of in-chain checkpoint entries."""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..chain.codec import (
    checkpoint_message,
)
from ..errors import InvalidInput
from ..storage.contract import PathArg
from .common import KeyFileError, PrivateKeyLike, PublicKeyLike, _short

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
