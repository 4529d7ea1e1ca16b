"""The whole database file checked, as `mnemo verify` checks one: its log (verify.py), then the index
snapshot beside it, read as a read-only client reads it, against what the log says the index must hold."""

from __future__ import annotations

import dataclasses
import os

from ...chain.rules import ExpectedIndex, verify_arguments
from ...errors import MnemoError
from ...record import Problem, VerifyReport
from ..types import PathArg, Progress
from .store import FileStore as Store
from .verify import verify_log


def check_file(
    path: PathArg, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None
) -> VerifyReport:
    """The log at `path` checked completely (verify.verify_log), and, when it is sound and an index
    snapshot lies beside it, that snapshot (check_snapshot_file): what audit.verify_db reports."""
    verify_arguments(pubkey, expect_head)  # refused before the file is looked at, as verify_log does
    name = os.fspath(path)
    index = ExpectedIndex.empty() if os.path.exists(name + ".snap") else None
    report = verify_log(name, pubkey, expect_head, progress, index)
    if index is None or not report.ok:
        return report
    problems, notes = check_snapshot_file(name, index)
    if problems or notes:
        report = dataclasses.replace(
            report, ok=not problems, problems=report.problems + tuple(problems), notes=report.notes + tuple(notes)
        )
    return report


def check_snapshot_file(path: str, expected: ExpectedIndex) -> tuple[list[Problem], list[str]]:
    """Whether the index snapshot beside a sound log holds exactly what the log says (problems), or is
    stale and would be ignored (notes). Opens the database as a read-only client would, from the
    snapshot, so that what is compared is what a client would serve."""
    label = f"the index snapshot {os.path.basename(path)}.snap"
    try:
        store = Store(path, "", readonly=True)
    except MnemoError as exc:
        return [Problem("snapshot", f"{label}: the database does not open from it: {exc}")], []
    try:
        if store.snapshot_refused is not None:
            return [Problem("snapshot", f"{label} ends at this log's head but was refused "
                            f"({store.snapshot_refused}): it was altered; clients replay the log instead")], []
        if not store.snapshot_used:
            return [], [f"{label} is stale (clients ignore it; the next writer rewrites it)"]
        problems = [Problem("snapshot", f"{d}: {label} was altered") for d in store.index_differences(expected)]
        if expected.tree is not None and store.tree_head() != expected.tree:
            problems.append(Problem("snapshot", f"the Merkle tree state in {label} is not the tree over the log's "
                                    "entries: it was altered"))
        return problems, []
    finally:
        store.close()


__all__ = ["check_file", "check_snapshot_file"]
