"""Ed25519 keys in every form `load_private_key` and `load_public_key` take (key objects, PEM, a raw
32-byte seed or key, its hex, base64 for a public key, a file's path), both sides of every length, and
each refusal's exact text."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from mnemo.audit import (
    KeyFileError,
    generate_keypair,
    load_private_key,
    load_public_key,
    public_key_bytes,
    sign_checkpoint,
)
from mnemo.chain.codec import checkpoint_message
from mnemo.errors import InvalidInput

SEED = bytes(range(32))
KEY = Ed25519PrivateKey.from_private_bytes(SEED)
PUB = public_key_bytes(KEY)
NOT_PRIVATE = "not an Ed25519 private key (expected PKCS#8 PEM, a 32-byte seed or its hex)"
NOT_PUBLIC = "not an Ed25519 public key (expected 64 hex digits, base64, PEM or 32 raw bytes)"


def pub_of(key: Ed25519PrivateKey) -> bytes:
    return public_key_bytes(key)


@pytest.mark.parametrize("form", [
    SEED, SEED.hex().encode(), SEED.hex().encode() + b"\n", b"  " + SEED.hex().upper().encode() + b"\r\n",
    KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
])
def test_a_private_key_in_each_form(form: bytes, tmp_path: Path) -> None:
    assert pub_of(load_private_key(form)) == PUB
    path = tmp_path / "key"
    path.write_bytes(form)
    assert pub_of(load_private_key(path)) == PUB
    assert pub_of(load_private_key(str(path))) == PUB
    assert load_private_key(KEY) is KEY


@pytest.mark.parametrize("data", [
    SEED[:31], SEED + b"\x00", SEED.hex()[:-1].encode(), SEED.hex().encode() + b"0", SEED.hex()[:-2].encode(),
    SEED.hex().encode() + b"00", b"g" * 64, b"\xff" * 64, b"", b"   \n",
])
def test_a_private_key_of_another_length_or_not_hex_is_refused(data: bytes, tmp_path: Path) -> None:
    with pytest.raises(KeyFileError) as refused:
        load_private_key(data)
    assert str(refused.value) == NOT_PRIVATE
    path = tmp_path / "key"
    path.write_bytes(data)
    with pytest.raises(KeyFileError, match=r"^not an Ed25519 private key \(expected"):
        load_private_key(path)


def test_a_pem_private_key_that_is_not_ed25519_or_not_a_key_is_refused() -> None:
    x25519 = X25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    with pytest.raises(KeyFileError, match=r"^the PEM private key is not an Ed25519 key$"):
        load_private_key(x25519)
    with pytest.raises(KeyFileError, match=r"^not a usable PEM private key: "):
        load_private_key(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")


def test_a_key_file_is_read_up_to_64_kib(tmp_path: Path) -> None:
    """What lies past 64 KiB is never read: a key there is not found, one that ends exactly there is."""
    path = tmp_path / "key"
    hex_seed = SEED.hex().encode()
    path.write_bytes(b" " * (65536 - 64) + hex_seed)
    assert pub_of(load_private_key(path)) == PUB
    pub = tmp_path / "pub"
    pub.write_bytes(b" " * (65536 - 64) + PUB.hex().encode())
    assert load_public_key(pub) == PUB
    path.write_bytes(b" " * (65536 - 63) + hex_seed)
    with pytest.raises(KeyFileError) as refused:
        load_private_key(path)
    assert str(refused.value) == NOT_PRIVATE
    with pytest.raises(KeyFileError, match=r"^not an Ed25519 private key"):
        load_private_key("/dev/zero")  # and an endless file is no trouble


def test_a_key_file_that_cannot_be_read_is_named_with_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    for load in (load_private_key, load_public_key):
        with pytest.raises(KeyFileError) as refused:
            load(missing)
        assert str(refused.value) == f"cannot read key file {missing}: No such file or directory"
        with pytest.raises(KeyFileError) as refused:
            load(tmp_path)
        assert str(refused.value) == f"cannot read key file {tmp_path}: Is a directory"


@pytest.mark.parametrize("form", [
    PUB, PUB.hex().encode(), PUB.hex().upper().encode() + b"\n", base64.b64encode(PUB), base64.b64encode(PUB) + b"\n",
    KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
])
def test_a_public_key_in_each_form(form: bytes, tmp_path: Path) -> None:
    assert load_public_key(form) == PUB
    path = tmp_path / "pub"
    path.write_bytes(form)
    assert load_public_key(path) == PUB
    assert load_public_key(KEY.public_key()) == PUB


def test_a_hex_string_is_a_key_unless_a_file_has_that_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_public_key(PUB.hex()) == PUB
    assert load_public_key(f"  {PUB.hex()}\n") == PUB
    other = pub_of(Ed25519PrivateKey.from_private_bytes(b"\x01" * 32))
    monkeypatch.chdir(tmp_path)
    Path(PUB.hex()).write_bytes(other.hex().encode())
    assert load_public_key(PUB.hex()) == other  # the file of that name


@pytest.mark.parametrize("data", [
    PUB[:31], PUB + b"\x00", PUB.hex()[:-1].encode(), PUB.hex().encode() + b"0", b"z" * 64,
    base64.b64encode(PUB)[:-1], base64.b64encode(PUB + b"\x00"), base64.b64encode(PUB[:30]) + b"====",
    b"!" * 44, b"",
])
def test_a_public_key_of_another_length_or_encoding_is_refused(data: bytes) -> None:
    with pytest.raises(KeyFileError) as refused:
        load_public_key(data)
    assert str(refused.value) == NOT_PUBLIC


def test_a_pem_public_key_that_is_not_ed25519_is_refused() -> None:
    x25519 = X25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(KeyFileError, match=r"^the PEM public key is not an Ed25519 key$"):
        load_public_key(x25519)
    with pytest.raises(KeyFileError, match=r"^not a usable PEM public key: "):
        load_public_key(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")


def test_a_generated_key_pair_belongs_together() -> None:
    pem, pub = generate_keypair()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----\n") and len(pub) == 32
    assert pub_of(load_private_key(pem)) == pub == load_public_key(pem)
    assert generate_keypair()[1] != pub


def test_a_public_key_pem_followed_by_a_private_one_gives_the_first() -> None:
    """Which kind a PEM is, its first line says: a file of a public key and then another key's private
    key is the public key it starts with."""
    other = Ed25519PrivateKey.from_private_bytes(b"\x09" * 32)
    both = KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                                         ) + other.private_bytes(serialization.Encoding.PEM,
                                                                 serialization.PrivateFormat.PKCS8,
                                                                 serialization.NoEncryption())
    assert load_public_key(both) == PUB != pub_of(other)


@pytest.mark.parametrize(("db_id", "seq", "head", "message"), [
    (b"i" * 15, 0, b"h" * 32, "db_id must be 16 bytes"),
    (b"i" * 17, 0, b"h" * 32, "db_id must be 16 bytes"),
    ("i" * 16, 0, b"h" * 32, "db_id must be 16 bytes"),
    (b"i" * 16, 0, b"h" * 31, "head must be a 32-byte hash"),
    (b"i" * 16, 0, b"h" * 33, "head must be a 32-byte hash"),
    (b"i" * 16, 0, "h" * 32, "head must be a 32-byte hash"),
    (b"i" * 16, -1, b"h" * 32, "seq must be a non-negative 64-bit integer"),
    (b"i" * 16, 1 << 64, b"h" * 32, "seq must be a non-negative 64-bit integer"),
    (b"i" * 16, 1.0, b"h" * 32, "seq must be a non-negative 64-bit integer"),
])
def test_a_checkpoint_of_a_malformed_head_is_refused(db_id: Any, seq: Any, head: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        sign_checkpoint(SEED, db_id, seq, head)
    assert str(refused.value) == message


@pytest.mark.parametrize("seq", [0, (1 << 64) - 1])
def test_a_checkpoint_signs_seqs_at_both_ends_of_the_range(seq: int) -> None:
    body = sign_checkpoint(SEED, b"i" * 16, seq, b"h" * 32)
    assert body == {"db_id": b"i" * 16, "head": b"h" * 32, "key": PUB, "seq": seq, "sig": body["sig"]}
    KEY.public_key().verify(body["sig"], checkpoint_message(b"i" * 16, seq, b"h" * 32))
