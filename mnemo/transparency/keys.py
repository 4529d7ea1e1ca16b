"""Note keys (C2SP signed-note): key IDs, verifier keys (vkeys), and loading a public key from whatever
`mnemo verify --pubkey` takes, or a vkey."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass
from typing import Union

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import InvalidInput
from ..keys import KeyFileError, PublicKeyLike, load_private_key, load_public_key, public_key_bytes

SIG_ED25519 = 0x01  # plain Ed25519 note signatures: the log's key
SIG_COSIGNATURE = 0x04  # timestamped Ed25519 cosignatures (c2sp.org/tlog-cosignature): witnesses

KeyLike = Union["VerifierKey", PublicKeyLike, Ed25519PrivateKey]


def valid_key_name(name: object) -> bool:
    """Non-empty, no Unicode space, no '+', no control character (signed-note key names)."""
    return (isinstance(name, str) and name != "" and "+" not in name
            and not any(c.isspace() or ord(c) < 0x20 or c == "\x7f" for c in name))


def key_id(name: str, public_key: bytes, sig_type: int = SIG_ED25519) -> bytes:
    """SHA-256(name || 0x0A || signature type || public key)[:4]."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([sig_type]) + public_key).digest()[:4]


def vkey(name: str, public_key: bytes, sig_type: int = SIG_ED25519) -> str:
    """`<name>+<key ID as 8 hex>+<base64(signature type || public key)>`."""
    if not valid_key_name(name):
        raise InvalidInput(f"{name!r} is not a valid key name (non-empty, no spaces, no '+')")
    if not (isinstance(public_key, bytes) and len(public_key) == 32):
        raise InvalidInput("an Ed25519 public key is 32 bytes")
    blob = base64.b64encode(bytes([sig_type]) + public_key).decode("ascii")
    return f"{name}+{key_id(name, public_key, sig_type).hex()}+{blob}"


@dataclass(frozen=True)
class VerifierKey:
    """An Ed25519 public key for checking note signatures of `sig_type`. From a vkey it also carries the
    key name and key ID the signature lines must show; otherwise the name is the note's origin (for a
    log key) or given by the caller (for a witness), and the ID is computed from it."""

    public_key: bytes
    sig_type: int = SIG_ED25519
    name: str | None = None
    key_id: bytes | None = None

    def name_for(self, default: str) -> str:
        return self.name if self.name is not None else default

    def id_for(self, name: str) -> bytes:
        return self.key_id if self.key_id is not None else key_id(name, self.public_key, self.sig_type)

    def verifier(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.public_key)

    def vkey(self, name: str | None = None) -> str:
        return vkey(self.name_for(name or ""), self.public_key, self.sig_type)


def parse_vkey(text: str, sig_type: int | None = None) -> VerifierKey:
    """A vkey; raises KeyFileError if `text` is not one (or not of `sig_type`, when given)."""
    parts = text.strip().split("+", 2)
    if len(parts) != 3:
        raise KeyFileError("not a vkey (<name>+<key ID>+<base64 key>)")
    name, kid, blob = parts
    try:
        if len(kid) != 8:
            raise ValueError
        kid_bytes = bytes.fromhex(kid)
        raw = base64.b64decode(blob, validate=True)
    except (ValueError, binascii.Error):
        raise KeyFileError("not a vkey: the key ID is not 8 hex digits or the key is not base64") from None
    if not valid_key_name(name):
        raise KeyFileError(f"not a vkey: {name!r} is not a valid key name")
    if len(raw) != 33 or raw[0] not in (SIG_ED25519, SIG_COSIGNATURE):
        raise KeyFileError("the vkey is not an Ed25519 note key (type 0x01) or cosigner key (type 0x04)")
    if sig_type is not None and raw[0] != sig_type:
        raise KeyFileError(f"the vkey is of signature type 0x{raw[0]:02x}, not 0x{sig_type:02x}")
    return VerifierKey(raw[1:], raw[0], name, kid_bytes)


def _vkey_or_none(text: str) -> VerifierKey | None:
    if text.count("+") < 2:
        return None
    try:
        return parse_vkey(text, None)
    except KeyFileError:
        return None


def load_verifier_key(key: KeyLike, sig_type: int = SIG_ED25519) -> VerifierKey:
    """A verifier key from a VerifierKey, a vkey (string or file), or anything `mnemo verify --pubkey`
    takes (the `.pub` file of `mnemo keygen`, 64 hex digits, PEM, raw bytes, a key object) or base64.
    Raises KeyFileError if it is none of these, or a vkey of another signature type."""
    if isinstance(key, (Ed25519PrivateKey, Ed25519PublicKey)):
        return VerifierKey(public_key_bytes(key), sig_type)
    found: VerifierKey | None
    if isinstance(key, VerifierKey):
        found = key
    else:
        data: bytes | str | os.PathLike[str] = key
        if isinstance(key, os.PathLike) or (isinstance(key, str) and os.path.exists(key)):
            try:
                with open(key, "rb") as f:
                    data = f.read(1 << 16)
            except OSError as exc:
                raise KeyFileError(f"cannot read key file {os.fspath(key)}: {exc.strerror or exc}") from None
        if isinstance(data, (bytes, bytearray)):
            found = _vkey_or_none(bytes(data).decode("ascii", "replace"))
        else:
            found = _vkey_or_none(os.fspath(data))
        if found is None:
            if isinstance(data, str) and len(data.strip()) == 44:
                data = data.strip().encode("ascii", "replace")  # base64, given as the key itself
            return VerifierKey(load_public_key(data), sig_type)
    assert found is not None
    if found.sig_type != sig_type:
        raise KeyFileError(f"the vkey is of signature type 0x{found.sig_type:02x}, not 0x{sig_type:02x}")
    return found


def load_signing_key(key: object) -> Ed25519PrivateKey:
    """What `MnemoClient(signing_key=...)` takes: a key object, PKCS#8 PEM, a 32-byte seed or its hex,
    or a key file's path. Raises KeyFileError."""
    if isinstance(key, bytearray):
        key = bytes(key)
    if not isinstance(key, (Ed25519PrivateKey, bytes, str, os.PathLike)):
        raise KeyFileError("not an Ed25519 private key")
    return load_private_key(key)


__all__ = [
    "SIG_COSIGNATURE",
    "SIG_ED25519",
    "KeyLike",
    "VerifierKey",
    "key_id",
    "load_signing_key",
    "load_verifier_key",
    "parse_vkey",
    "valid_key_name",
    "vkey",
]
