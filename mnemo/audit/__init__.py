"""Verification of a database and of audit exports; the audit export; checkpoint keys and signatures.

`verify_db` reads a log file itself, in chunks, never as a client and never writing: it checks the
header, the framing, every hash and link, sequence numbers, genesis, payload digests and slot checksums,
erasures and checkpoint signatures, and reports every problem it finds with its seq and byte offset.
`export_audit` writes the chain as JSON Lines and `verify_export` checks such a file with nothing but
SHA-256, msgpack and Ed25519. docs/FORMAT.md (§5) spells out both algorithms.

Each backend owns the check of what it stores, on the chain rules of mnemo.chain.rules: the log file's
reader and verifier are mnemo.storage.file.reader, .verify and .check; PostgreSQL's is its store's
`verify`. This package picks the backend by name and re-exports their names, with the keys'
(mnemo.keys) and the checkpoint signing (mnemo.chain.checkpoints).
"""

from ..chain.checkpoints import sign_checkpoint
from ..chain.rules import ExpectedIndex
from ..errors import UnreadableDatabase
from ..keys import (
    KeyFileError,
    PrivateKeyLike,
    PublicKeyLike,
    generate_keypair,
    load_private_key,
    load_public_key,
    public_key_bytes,
)
from ..storage.contract import PathArg, Progress
from ..storage.file.check import check_snapshot_file
from ..storage.file.reader import LogItem, read_log
from ..storage.file.verify import verify_db_and_index
from .common import UnreadableExport, entry_summary, format_ts, jsonable
from .export import export_audit, export_line
from .sources import read_chain
from .verify import verify_db
from .verify_export import verify_export

__all__ = [
    "ExpectedIndex",
    "KeyFileError",
    "LogItem",
    "PathArg",
    "PrivateKeyLike",
    "Progress",
    "PublicKeyLike",
    "UnreadableDatabase",
    "UnreadableExport",
    "check_snapshot_file",
    "entry_summary",
    "export_audit",
    "export_line",
    "format_ts",
    "generate_keypair",
    "jsonable",
    "load_private_key",
    "load_public_key",
    "public_key_bytes",
    "read_chain",
    "read_log",
    "sign_checkpoint",
    "verify_db",
    "verify_db_and_index",
    "verify_export",
]
