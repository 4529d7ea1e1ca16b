"""Transparency-log proofs over the chain (docs/TRANSPARENCY.md): an RFC 6962 Merkle tree whose leaves
are the entries' exact bytes, C2SP signed-note checkpoints, inclusion bundles (c2sp.org/tlog-proof),
consistency proofs, and witness cosignatures (c2sp.org/tlog-cosignature).

- the tree itself (leaf and node hashes, roots, inclusion paths, consistency proofs and their
  verification, and `CompactRange`, the O(log n) running root a storage backend keeps beside its index)
  is mnemo.chain.tree, below the backends that keep it; its names are re-exported here;
- `LeafCache`, the `DB.leaves` sidecar of leaf hashes, and `CacheProver`, proofs from it checked against
  the tree head computed from the log before they are handed out, live with the file backend that keeps
  them (mnemo.storage.file.leaves, .prover, and .tree_state, which keeps the cache and the running root
  in step); their names are re-exported here;
- keys, note: key IDs, vkeys, checkpoint notes; cosign: witnesses; bundle, consistency: the proof
  formats; log: the tree read from a database file as an auditor; extends: does the log extend a
  checkpoint kept elsewhere; commands: one function per command-line command.
"""

from ..chain.tree import (
    EMPTY_ROOT,
    CompactRange,
    HashList,
    LeafSource,
    TreeHead,
    consistency_proof,
    inclusion_path,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)
from ..storage.file.leaves import CacheCheck, LeafCache, cache_path
from ..storage.file.prover import CacheProver
from .bundle import BundleCheck, build_bundle, verify_bundle
from .consistency import ConsistencyCheck, ConsistencyProof, verify_consistency_proof
from .cosign import cosign, verify_cosigned_checkpoint
from .errors import DamagedLog, Finding, Rejected, StaleCache, TransparencyError, UnreadableInput, UsageError
from .extends import ExtendsReport, log_extends
from .keys import VerifierKey, key_id, load_verifier_key, parse_vkey, vkey
from .log import LogTree, read_tree
from .note import (
    Checkpoint,
    MalformedNote,
    NoteCheck,
    default_origin,
    parse_checkpoint,
    sign_checkpoint_note,
    verify_checkpoint_note,
)

sign_checkpoint = sign_checkpoint_note  # the names docs/TRANSPARENCY.md §7 uses
verify_checkpoint = verify_checkpoint_note

__all__ = [
    "EMPTY_ROOT",
    "BundleCheck",
    "CacheCheck",
    "CacheProver",
    "Checkpoint",
    "CompactRange",
    "ConsistencyCheck",
    "ConsistencyProof",
    "DamagedLog",
    "ExtendsReport",
    "Finding",
    "HashList",
    "LeafCache",
    "LeafSource",
    "LogTree",
    "MalformedNote",
    "NoteCheck",
    "Rejected",
    "StaleCache",
    "TransparencyError",
    "TreeHead",
    "UnreadableInput",
    "UsageError",
    "VerifierKey",
    "build_bundle",
    "cache_path",
    "consistency_proof",
    "cosign",
    "default_origin",
    "inclusion_path",
    "key_id",
    "leaf_hash",
    "load_verifier_key",
    "log_extends",
    "node_hash",
    "parse_checkpoint",
    "parse_vkey",
    "read_tree",
    "root",
    "sign_checkpoint",
    "sign_checkpoint_note",
    "verify_bundle",
    "verify_checkpoint",
    "verify_checkpoint_note",
    "verify_consistency",
    "verify_consistency_proof",
    "verify_cosigned_checkpoint",
    "verify_inclusion",
    "vkey",
]
