"""`mnemo verify DB`: check a whole database file, as an auditor holding it would."""

from __future__ import annotations

import click

from .. import audit
from ..audit.verify import report_lines
from ..record import VerifyReport
from ..storage.contract import shown_name
from .errors import EXIT_OK, EXIT_PROBLEMS
from .options import CONTEXT_SETTINGS, db_argument, load_pubkey
from .output import echo, emit_json, examples, json_option, progress


def _expect_head(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, str] | None:
    """SEQ:HASH, a head saved earlier: a seq and 64 hex digits."""
    if value is None:
        return None
    seq_s, sep, hexhash = value.partition(":")
    hexhash = hexhash.strip().lower()
    try:
        seq = int(seq_s)
        ok = sep == ":" and seq >= 0 and len(hexhash) == 64 and bytes.fromhex(hexhash) is not None
    except ValueError:
        ok = False
    if not ok:
        raise click.BadParameter(f"expected SEQ:HASH (a seq and 64 hex digits), got {value!r}")
    return seq, hexhash


def write_report(report: VerifyReport, what: str) -> None:
    for line in report_lines(report, what):
        echo(line)


def finish_report(report: VerifyReport, what: str, as_json: bool) -> int:
    """Print a report (as text or one JSON document) and return its exit code."""
    if as_json:
        emit_json({"file": what, **report.to_json()})
    else:
        write_report(report, what)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


@click.command(
    "verify", context_settings=CONTEXT_SETTINGS,
    short_help="check a whole database file: framing, hashes, links, signatures",
    epilog=examples(
        "mnemo verify memory.mnemo.db",
        "mnemo verify memory.mnemo.db --pubkey mnemo-key.pub",
        'mnemo verify memory.mnemo.db --expect-head "$(cat saved-head)"   # SEQ:HASH, as `head:` printed it',
        "mnemo verify memory.mnemo.db --json",
    ),
)
@db_argument(mnemo=False)
@click.option("--pubkey", metavar="KEY",
              help="public key file or 64 hex digits; every checkpoint must be signed by it, "
                   "and one must cover the head")
@click.option("--expect-head", metavar="SEQ:HASH", callback=_expect_head,
              help="a head saved earlier; the log must still hold that entry with that hash")
@json_option
def verify(db: str, pubkey: str | None, expect_head: tuple[int, str] | None, as_json: bool) -> int:
    """Check a whole database file: its header, framing, every hash and link, payload digests, erasures
    and checkpoint signatures.

    Reads the log file itself (never as a client, never writing) and reports every problem with its seq
    and byte offset. Any damage, a bad header included, is a problem found (exit 1)."""
    key = load_pubkey(pubkey)
    with progress("verifying") as bar:
        report = audit.verify_db(db, pubkey=key, expect_head=expect_head, progress=bar)
    code = finish_report(report, shown_name(db), as_json)
    if not as_json and any(p.kind == "unsigned" and p.seq is None for p in report.problems):
        echo(NO_SIGNED_CHECKPOINT_HINT)
    return code


# After `mnemo keygen` and `mnemo checkpoint -o NOTE`, the log itself still holds no checkpoint of the key.
NO_SIGNED_CHECKPOINT_HINT = (
    "hint: the log holds checkpoints of a key only when its writers are given that key "
    "(MnemoClient(..., signing_key=KEYFILE)); a note written by `mnemo checkpoint -o NOTE` is checked with "
    "--checkpoint NOTE"
)


def register(root: click.Group) -> None:
    root.add_command(verify)
