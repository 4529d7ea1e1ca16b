"""`verify_db`: a database, named by a path or a postgresql:// URI, checked completely by its backend (the
file backend's storage/file/check.py, PostgreSQL's verify through a read-only store); `report_lines`, its
report in words for people (`mnemo verify` prints them, and so does the demo)."""

from __future__ import annotations

from ..record import VerifyReport
from ..storage.contract import is_dsn
from ..storage.file.check import check_file
from ..storage.types import PathArg, Progress
from .sources import open_readonly


def verify_db(
    path: PathArg,
    *,
    pubkey: bytes | None = None,
    expect_head: tuple[int, str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check a database log file completely and report every problem found (docs/FORMAT.md §5.1).

    Reads the file in chunks, without opening it as a client, without locks and without writing.
    `pubkey`: raw 32-byte Ed25519 key every checkpoint must be signed by (and that must sign the head).
    `expect_head`: (seq, hex hash) saved earlier; the log must still hold that entry with that hash.
    `progress(done_bytes, total_bytes)` is called as the file is read.
    Raises UnreadableDatabase only if the file cannot be opened or read at all.

    `path` may also be a postgresql:// URI: the database is then checked through its backend (the same
    checks on its rows, and its derived tables against the chain)."""
    if isinstance(path, str) and is_dsn(path):
        with open_readonly(path) as store:
            return store.verify(pubkey, expect_head, progress)
    return check_file(path, pubkey, expect_head, progress)


def report_lines(report: VerifyReport, what: str) -> list[str]:
    """A verification report for people: the verdict, the head, then every problem with where it is."""
    if report.ok:
        lines = [f"OK: {what}: {report.entries} entries, chain intact"]
    else:
        n = len(report.problems)
        lines = [f"FAILED: {what}: {n} problem{'s' if n != 1 else ''} in {report.entries} entries read"]
    if report.head_seq >= 0:
        lines.append(f"head: {report.head_seq}:{report.head_hash}")
    lines.append(f"erased versions: {report.erased}; checkpoints verified: {report.checkpoints}")
    for p in report.problems:
        where = []
        if p.seq is not None:
            where.append(f"seq {p.seq}")
        if p.offset is not None:
            where.append(f"offset {p.offset}")
        lines.append(f"  problem [{p.kind}] {', '.join(where) or '-'}: {p.message}")
    lines += [f"  note: {note}" for note in report.notes]
    return lines


__all__ = ["report_lines", "verify_db"]
