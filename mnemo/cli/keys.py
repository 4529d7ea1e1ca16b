"""`mnemo keygen`: an Ed25519 key pair for signed checkpoints."""

from __future__ import annotations

import errno
import os

import click

from .. import audit
from .errors import EXIT_OK, UsageError
from .options import CONTEXT_SETTINGS, check_output_file
from .output import echo, emit_json, examples, json_option


@click.command(
    "keygen", context_settings=CONTEXT_SETTINGS,
    short_help="make an Ed25519 key pair for signed checkpoints",
    epilog=examples(
        "mnemo keygen -o signer      # signer (private, mode 0600) and signer.pub",
        "mnemo keygen -o signer --force --json",
    ),
)
@click.option("-o", "--output", "prefix", metavar="PREFIX", default="mnemo-key", show_default=True,
              help="write the private key to PREFIX, the public key to PREFIX.pub")
@click.option("--force", is_flag=True, help="overwrite existing key files")
@json_option
def keygen(prefix: str, force: bool, as_json: bool) -> int:
    """Make an Ed25519 key pair: give the private key to MnemoClient(signing_key=...), which then writes
    signed checkpoints, and the public key to `mnemo verify --pubkey`."""
    private_path, public_path = prefix, prefix + ".pub"
    for path in (private_path, public_path):
        check_output_file(path)
    if not force:
        for path in (private_path, public_path):
            if os.path.lexists(path):
                raise UsageError(f"{path} exists; pass --force to overwrite it")
    pem, pub = audit.generate_keypair()
    try:
        with os.fdopen(_open_key_file(private_path, 0o600), "wb") as f:
            os.fchmod(f.fileno(), 0o600)  # an existing file keeps its mode through O_CREAT: narrow it
            f.write(pem)
        with os.fdopen(_open_key_file(public_path, 0o644), "w", encoding="ascii") as f:
            f.write(pub.hex() + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write the key files: {exc.strerror or exc}") from None
    if as_json:
        emit_json({"private_key_file": private_path, "public_key_file": public_path, "public_key": pub.hex()})
    else:
        echo(f"private key: {private_path} (keep it secret; give it to MnemoClient(signing_key=...))")
        echo(f"public key:  {public_path} (give it to `mnemo verify --pubkey`)")
        echo(pub.hex())
    return EXIT_OK


def register(root: click.Group) -> None:
    root.add_command(keygen)


def _open_key_file(path: str, mode: int) -> int:
    """The key file at `path`, created or (with --force) emptied in place, never through a link: a link
    there would have the key written wherever it points."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UsageError(f"{path} is a symbolic link, which key files are never written through: remove it, "
                         "or choose another -o PREFIX") from None
