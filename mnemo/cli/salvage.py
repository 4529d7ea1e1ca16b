"""`mnemo salvage DAMAGED NEW`: copy what still verifies out of a damaged database (mnemo.salvage)."""

from __future__ import annotations

import os
import shlex

import click

from ..salvage import PROVENANCE_SCOPE, SalvageReport, salvage
from .errors import EXIT_OK, UsageError
from .options import CONTEXT_SETTINGS, check_input_file, check_output_file, valid_agent
from .output import echo, emit_json, examples, json_option, progress


def _damaged(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    return check_input_file(value)  # any readable file: a damaged header is salvage's to judge


def _new(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    check_output_file(value)
    if os.path.lexists(value):
        raise UsageError(f"{value} exists: salvage writes a new database and never overwrites a file")
    directory = os.path.dirname(os.path.abspath(value))
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {value}: no directory {directory}", "UnreadableFile")
    return value


def _owner(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else valid_agent(value, "--owner")


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _seqs(first: int, last: int | None) -> str:
    if last is None:
        return f"seq {first} onwards (the rest of the file)"
    return f"seq {first}" if first == last else f"seq {first}..{last}"


def write_report(r: SalvageReport) -> None:
    """What a salvage did, for people: what was read, what was copied, and every loss."""
    echo(f"salvaged {r.source} into {r.new}: a new chain, db_id {r.new_db_id}, head {r.new_head[0]}:{r.new_head[1]}")
    echo(f"read {_plural(r.entries_read, 'entry', 'entries')}, {r.entries_verified} verified")
    if r.last_good_head is not None:
        echo(f"last good head before the damage: {r.last_good_head[0]}:{r.last_good_head[1]}")
    else:
        echo("last good head before the damage: none (the damage starts at genesis)")
    if r.head_read is not None:
        echo(f"last entry read: {r.head_read[0]}:{r.head_read[1]}")
    echo(f"copied {_plural(r.records_copied, 'record')} ({_plural(r.versions_copied, 'version')}); provenance record "
         f"{r.provenance_id} in scope {PROVENANCE_SCOPE} (where they came from, and old id -> new id)")
    found: list[str] = [f"the file header: {r.header_problem}"] if r.header_problem else []
    for d in r.damage:
        what = "an incomplete last write" if d["torn"] else "a damaged stretch"
        found.append(f"{what} at offset {d['offset']}, {d['bytes']} bytes, skipped: {d['message']}")
    found += [f"the frame at offset {offset}: its checksum does not match (its entries were checked one by one)"
              for offset in r.checksum_frames]
    if r.damaged_slots:
        found.append(f"{_plural(r.damaged_slots, 'payload slot')} whose checksum does not match")
    if found:
        echo("damage found:")
        for line in found:
            echo(f"  {line}")
    lines = [f"entries {_seqs(first, last)}" for first, last in r.lost_seq_ranges]
    lines += [f"record {rid}: every version" for rid in r.lost_records]
    for v in r.lost_versions:
        at = f" (seq {v.seq})" if v.seq is not None else ""
        lines.append(f"record {v.id} v{v.version}{at}: {v.reason}")
    lines += [f"record {rid}: forgotten (its payloads are erased; the forget entry is lost), not copied"
              for rid in r.forgotten_unrecorded]
    lines += [f"the reason given by the forget at seq {seq} (its payload is damaged; the forget holds)"
              for seq in r.lost_reasons]
    echo("lost:" if lines else "lost: nothing")
    for line in lines:
        echo(f"  {line}")
    if r.grants:
        echo("not copied: the grants (a revoke lost to the damage would come back as a permission). "
             "Those read, to grant again as needed:")
        for g in r.grants:
            args = [r.new, g["principal"], g["scope"], *g["perms"]]
            echo("  mnemo grant " + " ".join(shlex.quote(a) for a in args))


@click.command(
    "salvage", context_settings=CONTEXT_SETTINGS,
    short_help="copy every record version that still verifies out of a damaged database into a new one",
    epilog=examples(
        "mnemo salvage memory.mnemo.db rescued.mnemo.db",
        "mnemo salvage memory.mnemo.db rescued.mnemo.db --json > salvage-report.json",
    ),
)
@click.argument("damaged", metavar="DAMAGED", callback=_damaged)
@click.argument("new", metavar="NEW", callback=_new)
@click.option("--owner", metavar="AGENT", callback=_owner,
              help="the new database's owner (default: the damaged one's, from its genesis entry)")
@json_option
def salvage_command(damaged: str, new: str, owner: str | None, as_json: bool) -> int:
    """When `mnemo verify` finds damage in the middle of a database, copy every record version that still
    verifies (its chain entry, payload digest and checksums) into NEW, a new database with a fresh chain,
    and print what was lost. Reads DAMAGED as verify does, skipping past damage; never writes to it.
    Records keep their scope, tags, metadata and content, versions in order; they get new ids. Forgotten
    records stay forgotten. NEW's first entry is a provenance record (scope mnemo:salvage) naming the
    source, its heads, what was lost and, in its second version, the old id of every record."""
    with progress("reading") as bar:
        report = salvage(damaged, new, owner=owner, progress=bar)
    if as_json:
        emit_json(report.to_json())
    else:
        write_report(report)
    return EXIT_OK


def register(root: click.Group) -> None:
    root.add_command(salvage_command)
