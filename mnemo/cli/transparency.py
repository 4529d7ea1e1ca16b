"""The transparency commands (docs/TRANSPARENCY.md §6): `checkpoint`, `prove`, `audit verify-proof`,
`audit verify-consistency`, `cosign`, and `verify --checkpoint`. Each is a thin shell over one function
of mnemo.transparency.commands; this module only parses, prints, and maps the library's errors to the
exit codes (1: a defect inside a readable input; 2: a usage error, or a file or key that cannot be read
at all)."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import click

from .. import audit
from ..record import VerifyReport
from ..storage.contract import shown_name
from ..transparency import commands as tc
from ..transparency.bundle import BundleCheck
from ..transparency.consistency import ConsistencyCheck
from ..transparency.errors import Finding, Rejected, TransparencyError
from ..transparency.extends import ExtendsReport
from ..transparency.note import b64, parse_checkpoint
from .errors import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Failure, UsageError
from .options import CONTEXT_SETTINGS, check_input_file, check_output_file, db_argument, subgroup
from .output import echo, emit_json, examples, json_option, output
from .terminal import inline
from .verify import write_report


@contextlib.contextmanager
def _library_errors() -> Iterator[None]:
    """The transparency library's errors as the command line's: their exit code, and every finding."""
    try:
        yield
    except TransparencyError as exc:
        message = str(exc)
        if isinstance(exc, Rejected) and exc.problems and len(exc.problems) > 1:
            message += "".join(f"\n  problem [{p.kind}]: {p.message}" for p in exc.problems)
        kind = type(exc).__name__
        raise (UsageError(message, kind) if exc.exit_code == EXIT_USAGE else Failure(message, kind)) from None


def _file(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else check_input_file(value)


def _out_file(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    return None if value is None or value == "-" else check_output_file(value)


def _key(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A public key: a file (which must be a regular one: a FIFO would block), 64 hex digits, base64 or
    a vkey."""
    if value is None:
        return None
    try:
        st = os.stat(value)
    except (OSError, ValueError):
        return value  # not a file: the key itself
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{param.opts[0]}: cannot read {value}: not a regular file", "KeyFileError")
    return value


def _write(text: str, dest: str | None, what: str) -> None:
    """The output: on standard output, or in FILE through FILE.tmp and a rename."""
    if dest is None or dest == "-":
        output().write(text)
        return
    with _library_errors():
        tc.write_file_atomic(dest, text)
    sys.stderr.write(f"{what} written to {inline(dest)}\n")


def _problems(problems: tuple[Finding, ...], what: str) -> None:
    n = len(problems)
    echo(f"FAILED: {what}: {n} problem{'s' if n != 1 else ''}")
    for p in problems:
        echo(f"  problem [{p.kind}]: {p.message}")


def _finish(check: BundleCheck | ConsistencyCheck, what: str, as_json: bool) -> int:
    """Print an offline check of `what` (its JSON, its summary, or its problems) and return its exit code."""
    if as_json:
        emit_json(check.to_json())
    elif check.ok:
        echo(check.summary())
    else:
        _problems(check.problems, what)
    return EXIT_OK if check.ok else EXIT_PROBLEMS


# -- mnemo checkpoint -----------------------------------------------------------------------------------


@click.command(
    "checkpoint", context_settings=CONTEXT_SETTINGS,
    short_help="sign a checkpoint of the current tree (a C2SP signed note)",
    epilog=examples(
        "mnemo checkpoint memory.mnemo.db --key mnemo-key > checkpoint.note",
        "mnemo checkpoint memory.mnemo.db --key mnemo-key -o checkpoint.note",
        "mnemo checkpoint memory.mnemo.db --key mnemo-key --vkey     # the key in C2SP's vkey form",
    ),
)
@db_argument()
@click.option("--key", "key", metavar="KEYFILE", required=True, callback=_file,
              help="the log's Ed25519 private key (what MnemoClient(signing_key=...) takes)")
@click.option("--origin", metavar="ORIGIN", help="the log's name (default: mnemo.local/<db_id>)")
@click.option("-o", "--output", "dest", metavar="FILE", callback=_out_file,
              help="write the note here (through FILE.tmp and a rename) instead of standard output")
@click.option("--vkey", "show_vkey", is_flag=True, help="print the verifier key (vkey) instead of the note")
@json_option
def checkpoint(db: str, key: str, origin: str | None, dest: str | None, show_vkey: bool, as_json: bool) -> int:
    """Sign the checkpoint note of the current tree: the origin, the tree size (entries) and the RFC 6962
    root, signed by KEYFILE. The log is read as an auditor (no lock, no write); a damaged one is refused
    and nothing is signed. With --json: {"origin", "tree_size", "root", "note"}."""
    with _library_errors():
        if show_vkey:
            text = tc.vkey_of(db, key, origin)
            if as_json:
                emit_json({"vkey": text})
            else:
                _write(text + "\n", dest, "the vkey")
            return EXIT_OK
        result = tc.checkpoint(db, key, origin)
    if dest is not None and dest != "-":
        _write(result.note, dest, f"the checkpoint of {result.tree_size} entries")
    if as_json:
        emit_json(result.to_json())
    elif dest is None or dest == "-":
        output().write(result.note)
    return EXIT_OK


# -- mnemo prove ----------------------------------------------------------------------------------------


@click.command(
    "prove", context_settings=CONTEXT_SETTINGS,
    short_help="prove an entry in the tree, or two tree sizes consistent",
    epilog=examples(
        "mnemo prove memory.mnemo.db --seq 12 --key mnemo-key -o entry-12.tlog-proof",
        "mnemo prove memory.mnemo.db --seq 12 --checkpoint cosigned.note    # embed a note signed earlier",
        "mnemo prove memory.mnemo.db --from 100 --to 250 -o proof.json",
    ),
)
@db_argument()
@click.option("--seq", type=int, metavar="N", help="the entry to prove (an inclusion bundle)")
@click.option("--size", type=int, metavar="SIZE", help="in the tree of SIZE entries (default: the current)")
@click.option("--key", metavar="KEYFILE", callback=_file, help="sign a fresh checkpoint of SIZE with this key")
@click.option("--checkpoint", "note", metavar="NOTE", callback=_file,
              help="embed this checkpoint note, already signed (SIZE is its size)")
@click.option("--from", "old_size", type=int, metavar="OLD_SIZE", help="a consistency proof from this size")
@click.option("--to", "new_size", type=int, metavar="NEW_SIZE", help="to this size (default: the current)")
@click.option("--origin", metavar="ORIGIN", help="the log's name (default: mnemo.local/<db_id>)")
@click.option("-o", "--output", "dest", metavar="FILE", callback=_out_file,
              help="write here (through FILE.tmp and a rename) instead of standard output")
@json_option
def prove(db: str, seq: int | None, size: int | None, key: str | None, note: str | None, old_size: int | None,
          new_size: int | None, origin: str | None, dest: str | None, as_json: bool) -> int:
    """With --seq: the c2sp.org/tlog-proof@v1 bundle of entry N (the entry's bytes, its inclusion path,
    and the checkpoint note) in the tree of SIZE entries; --json gives its JSON form. With --from: the
    consistency proof (JSON) from OLD_SIZE to NEW_SIZE entries; no key is needed, the checkpoints carry
    the signatures. The log is read as an auditor; a damaged one is refused."""
    if (seq is None) == (old_size is None):
        raise UsageError("give one of --seq (an inclusion bundle) and --from (a consistency proof)")
    if seq is None:
        stray = [o for o, v in (("--size", size), ("--key", key), ("--checkpoint", note)) if v is not None]
        if stray:
            raise UsageError(f"{', '.join(stray)} go with --seq, not --from")
        assert old_size is not None
        with _library_errors():
            proof = tc.prove_range(db, old_size, new_size, origin)
        _write(proof.to_text(), dest, f"the consistency proof from {proof.old_size} to {proof.new_size}")
        return EXIT_OK
    if new_size is not None:
        raise UsageError("--to goes with --from, not --seq")
    with _library_errors():
        signed = tc.read_text_file(note, "checkpoint") if note is not None else None
        result = tc.prove_seq(db, seq, size=size, key=key, checkpoint=signed, origin=origin)
    _write(result.to_text(as_json), dest, f"the bundle of seq {seq}")
    return EXIT_OK


# -- mnemo audit verify-proof / verify-consistency -----------------------------------------------------


@click.command(
    "verify-proof", context_settings=CONTEXT_SETTINGS,
    short_help="check an inclusion bundle offline",
    epilog=examples(
        "mnemo audit verify-proof entry-12.tlog-proof --pubkey mnemo-key.pub",
        "mnemo audit verify-proof entry-12.tlog-proof --pubkey mnemo-key.pub --origin example.com/log --json",
    ),
)
@click.argument("bundle", metavar="BUNDLE", callback=_file)
@click.option("--pubkey", metavar="PUB", required=True, callback=_key,
              help="the log's public key: a key file, 64 hex digits, base64, or a vkey")
@click.option("--origin", metavar="ORIGIN", help="the checkpoint must be of this log")
@json_option
def verify_proof(bundle: str, pubkey: str, origin: str | None, as_json: bool) -> int:
    """Check a bundle (c2sp.org/tlog-proof@v1, or its JSON form) with nothing but the log's public key:
    the checkpoint's signature, the entry in `extra` at its index, and the inclusion path to the signed
    root. On success, one line names the seq, op, agent, chain hash, tree size and origin."""
    with _library_errors():
        check = tc.audit_verify_proof(bundle, pubkey, origin)
    return _finish(check, bundle, as_json)


@click.command(
    "verify-consistency", context_settings=CONTEXT_SETTINGS,
    short_help="check a consistency proof between two checkpoints offline",
    epilog=examples(
        "mnemo audit verify-consistency old.note new.note proof.json --pubkey mnemo-key.pub",
    ),
)
@click.argument("old", metavar="OLD_CHECKPOINT", callback=_file)
@click.argument("new", metavar="NEW_CHECKPOINT", callback=_file)
@click.argument("proof", metavar="PROOF", callback=_file)
@click.option("--pubkey", metavar="PUB", required=True, callback=_key,
              help="the log's public key: a key file, 64 hex digits, base64, or a vkey")
@click.option("--origin", metavar="ORIGIN", help="both checkpoints must be of this log")
@json_option
def verify_consistency(old: str, new: str, proof: str, pubkey: str, origin: str | None, as_json: bool) -> int:
    """Check that NEW_CHECKPOINT's tree extends OLD_CHECKPOINT's: both notes verify with the log's key
    under one origin, PROOF (the JSON of `mnemo prove --from`) names their sizes and roots, and the
    proof verifies."""
    with _library_errors():
        check = tc.audit_verify_consistency(old, new, proof, pubkey, origin)
    return _finish(check, proof, as_json)


# -- mnemo cosign ---------------------------------------------------------------------------------------


@click.command(
    "cosign", context_settings=CONTEXT_SETTINGS,
    short_help="cosign a checkpoint as a witness",
    epilog=examples(
        "mnemo cosign new.note --key witness-key --name witness.example/w1 --log-pubkey mnemo-key.pub",
        "mnemo cosign new.note --key witness-key --name witness.example/w1 --log-pubkey mnemo-key.pub "
        "--old last.note --proof proof.json -o cosigned.note",
    ),
)
@click.argument("note", metavar="CHECKPOINT", callback=_file)
@click.option("--key", metavar="KEYFILE", required=True, callback=_file, help="the witness's Ed25519 private key")
@click.option("--name", metavar="NAME", required=True, help="the witness's name (a schema-less URL)")
@click.option("--log-pubkey", "log_pubkey", metavar="PUB", required=True, callback=_key,
              help="the log's public key: a key file, 64 hex digits, base64, or a vkey")
@click.option("--old", metavar="OLD_CHECKPOINT", callback=_file,
              help="the last checkpoint this witness cosigned (none: the first time)")
@click.option("--proof", metavar="PROOF", callback=_file,
              help="the consistency proof (mnemo prove --from) from --old to CHECKPOINT")
@click.option("--origin", metavar="ORIGIN", help="the checkpoints must be of this log")
@click.option("-o", "--output", "dest", metavar="FILE", callback=_out_file,
              help="write the cosigned note here (through FILE.tmp and a rename)")
@json_option
def cosign(note: str, key: str, name: str, log_pubkey: str, old: str | None, proof: str | None,
           origin: str | None, dest: str | None, as_json: bool) -> int:
    """Act as a witness (c2sp.org/tlog-cosignature): check CHECKPOINT with the log's key and, given the
    last checkpoint this witness cosigned, the consistency proof from it; then add this witness's
    timestamped Ed25519 cosignature line. A checkpoint that fails any check is refused (exit 1) and
    nothing is signed. With --json: {"origin", "tree_size", "root", "note"}."""
    with _library_errors():
        cosigned = tc.cosign_checkpoint(note, key=key, name=name, log_pubkey=log_pubkey, old=old, proof=proof,
                                        origin=origin)
    cp, _ = parse_checkpoint(cosigned)
    if dest is not None and dest != "-":
        _write(cosigned, dest, "the cosigned checkpoint")
    if as_json:
        emit_json({"origin": cp.origin, "tree_size": cp.size, "root": b64(cp.root), "note": cosigned})
    elif dest is None or dest == "-":
        output().write(cosigned)
    return EXIT_OK


# -- mnemo verify --checkpoint --------------------------------------------------------------------------


def _extends_lines(report: ExtendsReport, note: str) -> None:
    if report.ok:
        echo(f"checkpoint {note}: {report.summary()}")
    else:
        _problems(report.problems, f"checkpoint {note}")


NO_CHECKPOINT_OF_KEY = (
    "no checkpoint in the log is signed by the given key (it was written without that signing key): the "
    "key checked the checkpoint note, the log's own checkpoints were checked against the keys they name, "
    "and no signature of the key covers the entries after the note's size"
)


def _whole_file(db: str, key: bytes, expect_head: tuple[int, str] | None) -> VerifyReport:
    """`mnemo verify`'s check beside a checkpoint note. A log that holds checkpoints signed by the note's
    key is checked as `--pubkey` alone checks it (every checkpoint signed by the key, one covering the
    head); a log that holds none (written without a signing key, or with another) is checked as without a
    key, saying so: the note, kept elsewhere, is then what the key vouches for."""
    report = audit.verify_db(db, pubkey=key, expect_head=expect_head)
    # the one finding with no seq of its kind: no checkpoint of the key verified anywhere in the log
    if not any(p.kind == "unsigned" and p.seq is None for p in report.problems):
        return report
    plain = audit.verify_db(db, expect_head=expect_head)
    return replace(plain, notes=(*plain.notes, NO_CHECKPOINT_OF_KEY))


def _with_checkpoint(original: Callable[..., Any]) -> Callable[..., Any]:
    """`mnemo verify`'s callback, taking --checkpoint and --origin as well."""

    def callback(checkpoint: str | None = None, origin: str | None = None, **kw: Any) -> Any:
        if checkpoint is None:
            if origin is not None:
                raise UsageError("--origin goes with --checkpoint")
            return original(**kw)
        db, pubkey, as_json = kw["db"], kw["pubkey"], kw["as_json"]
        if pubkey is None:
            raise UsageError("--checkpoint needs --pubkey: the key that signed the checkpoint")
        with _library_errors():
            key = tc.public_key(pubkey)
        report = _whole_file(db, key, kw["expect_head"])
        with _library_errors():
            extends = tc.verify_checkpoint(db, checkpoint, key, origin)
        if as_json:
            emit_json({"file": shown_name(db), **report.to_json(), "ok": report.ok and extends.ok,
                       "checkpoint": {"file": checkpoint, **extends.to_json()}})
        else:
            write_report(report, shown_name(db))
            _extends_lines(extends, checkpoint)
        return EXIT_OK if report.ok and extends.ok else EXIT_PROBLEMS

    return callback


def _extend_verify(root: click.Group) -> None:
    """Give `mnemo verify` (registered by .verify) the --checkpoint and --origin options."""
    verify = root.commands["verify"]
    assert verify.callback is not None
    at = next(i for i, p in enumerate(verify.params) if p.name == "as_json")
    verify.params[at:at] = [
        click.Option(["--checkpoint"], metavar="NOTE", callback=_file,
                     help="a checkpoint note kept elsewhere (signed by --pubkey): the log must extend it, "
                          "so a log cut back or rewritten below its size fails; any database, signed or not"),
        click.Option(["--origin"], metavar="ORIGIN",
                     help="with --checkpoint: the log's name (default: mnemo.local/<db_id>)"),
    ]
    verify.callback = _with_checkpoint(verify.callback)
    verify.epilog = (verify.epilog or "") + (
        "\n  mnemo verify memory.mnemo.db --pubkey mnemo-key.pub --checkpoint kept.note   # a note kept elsewhere")


def register(root: click.Group) -> None:
    root.add_command(checkpoint)
    root.add_command(prove)
    root.add_command(cosign)
    audit_group = subgroup(root, "audit")
    audit_group.add_command(verify_proof)
    audit_group.add_command(verify_consistency)
    audit_group.help = (audit_group.help or "") + (
        " verify-proof and verify-consistency check transparency proofs (bundles, consistency proofs) offline.")
    _extend_verify(root)
