"""Ed25519 keys: loaded from key objects, files, PEM, raw bytes or hex, and made. The keys layer: below
the chain, whose checkpoints they sign (mnemo.chain.checkpoints), and the audit and transparency
commands that take them."""

from __future__ import annotations

import base64
import binascii
import os
from typing import Union

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .errors import MnemoError

PrivateKeyLike = Union[Ed25519PrivateKey, bytes, str, "os.PathLike[str]"]
PublicKeyLike = Union[Ed25519PublicKey, bytes, str, "os.PathLike[str]"]


class KeyFileError(MnemoError, ValueError):
    """A key file or key string is missing, unreadable or not an Ed25519 key."""


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


def _read_key_file(path: str | os.PathLike[str]) -> bytes:
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


__all__ = [
    "KeyFileError",
    "PrivateKeyLike",
    "PublicKeyLike",
    "generate_keypair",
    "load_private_key",
    "load_public_key",
    "public_key_bytes",
]
