"""How an index differs from what the log says it must hold, from the one pass over the log that verify
makes (audit.verify_db_and_index): compared in bulk, column by column, and record by record only where
the bulk comparison fails."""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any, cast

from ..._native import speedups
from ...chain.tree import HASH_SIZE
from ...errors import IntegrityError
from ..types import Rec
from .index import Index
from .index_columns import COLUMNS, remap_codes
from .verify import ScannedIndex

if TYPE_CHECKING:
    from ...chain.rules import ExpectedIndex


def differences(index: Index, expected: ExpectedIndex) -> list[str]:
    """How `index` differs from what the log says it must hold (FileStore.index_differences)."""
    if isinstance(expected, ScannedIndex) and expected.runs and _same_runs(index, expected):
        same = True
    else:
        if isinstance(expected, ScannedIndex):
            expected.materialize()
        same = _same_records(index, expected)
    out = [] if same else _record_differences(index, expected)
    if index.acl.to_state() != expected.acl.to_state():
        out.append("the grants in the index differ from those in the log")
    if index.forgotten != expected.forgotten:
        out.append("the forgotten records in the index differ from those the log's forgets name")
    if index.entries != expected.entries:
        out.append(f"the index counts {index.entries} entries, the log holds {expected.entries}")
    return out


def _same_runs(index: Index, expected: ScannedIndex) -> bool:
    """Whether the index holds exactly the records of the scan's runs and no other (the log named each
    once, with version 1), compared as columns: the ids as one blob, each int column and the hashes as
    bytes, the codes of scopes, agents and tag sets through the index's own tables. False when that
    cannot be told this way (the log or the index has anything else): the caller compares in full."""
    runs, cols = expected.runs, index.cols
    if expected.live or expected.older or index.older or index.base_dead or index.stale_tags:
        return False
    if None in index.extra:
        return False
    extra = cast("list[str]", index.extra)
    w = runs[0].id_width
    if index.base.width not in (0, w) or any(len(rec_id) != w for rec_id in extra):
        return False
    n = sum(res.entries for res in runs)
    if len(cols["ver"]) != n or index.base.n + len(extra) != n:
        return False
    tail = "".join(extra).encode()
    if index.base.blob + tail != b"".join(res.id_bytes for res in runs) or len(tail) != w * len(extra):
        return False
    if any(cols[name].tobytes() != b"".join(res.columns[name] for res in runs) for name in runs[0].columns):
        return False
    if bytes(index.hashes) != b"".join(res.hashes for res in runs):
        return False
    tables: tuple[tuple[str, dict[Any, int], str, str], ...] = (
        ("scope", index.scopes.codes, "scopes", "scope_codes"),
        ("agent", index.agents.codes, "agents", "agent_codes"),
        ("tagset", index.tagsets.codes, "tagsets", "tagset_codes"),
    )
    remap = remap_codes if speedups is None else speedups.remap_codes
    for name, table, values, codes in tables:
        parts = []
        for res in runs:
            mapped = list(map(table.get, getattr(res, values)))
            local = getattr(res, codes)
            if mapped == list(range(len(mapped))):
                parts.append(local)
            elif None in mapped:
                return False
            else:
                parts.append(remap(local, res.entries, mapped))
        if cols[name].tobytes() != b"".join(parts):
            return False
    return True


def _same_records(index: Index, expected: ExpectedIndex) -> bool:
    """Whether the index holds exactly the records the log says, compared in bulk, column by column,
    straight from the index's columns. False when they differ, or when the index does not hang
    together: _record_differences then looks record by record."""
    live = expected.live
    try:
        rows = list(index.live_rows())
        cols = index.cols
        dense = len(rows) == len(cols["ver"])  # no forgotten rows: the columns are the live rows
        ids = [index.id_at(row) for row in rows]
        if len(ids) != len(live) or len(set(ids)) != len(ids):
            return False
        # the log's latest put of each record, in the index's row order (a KeyError if the index has a
        # record the log has not), then as one list per field
        by_field = list(zip(*map(live.__getitem__, ids), strict=True)) or [()] * 13  # type: ignore[arg-type]

        def column(name: str) -> array[int]:
            col = cols[name]
            return col if dense else array(col.typecode, map(col.__getitem__, rows))

        def logged(k: int) -> list[Any]:
            return list(by_field[k])

        scopes, agents, tagsets = index.scopes.values, index.agents.values, index.tagsets.values
        h = HASH_SIZE
        hashes = bytes(index.hashes) if dense else b"".join(index.hashes[r * h : r * h + h] for r in rows)
        return bool(
            [scopes[c] for c in column("scope")] == logged(1)
            and [agents[c] for c in column("agent")] == logged(6)
            and [tagsets[c] for c in column("tagset")] == [tuple(t) for t in logged(2)]
            and all(
                column(name) == array(COLUMNS[name], logged(k))
                for name, k in (
                    ("ver", 3), ("seq", 4), ("ts", 5), ("size", 7), ("slot_off", 9), ("slot_len", 10),
                    ("entry_off", 11), ("entry_len", 12),
                )
            )
            and hashes == b"".join(by_field[8])
            and {index.id_at(row): [tuple(v) for v in versions] for row, versions in index.older.items()}
            == {rec_id: [put[3:] for put in older] for rec_id, older in expected.older.items()}
        )
    except (KeyError, IndexError, TypeError, ValueError, OverflowError, IntegrityError):
        return False


def _record_differences(index: Index, expected: ExpectedIndex) -> list[str]:
    """Record by record, how the index's records differ from what the log says."""
    served: dict[str, Rec | None] = {}
    try:
        for row in index.live_rows():
            rec_id = index.id_at(row)
            if rec_id is None:
                continue
            try:
                served[rec_id] = index.rec_at(row)
            except IntegrityError:  # a record that does not hang together differs from anything
                served[rec_id] = None
    except IntegrityError as exc:
        return [f"the index does not hang together: {exc}"]
    live, older = expected.live, expected.older
    out = [
        f"record {rec_id} is only in {'the log' if rec_id in live else 'the index'}"
        for rec_id in sorted(served.keys() ^ live.keys())
    ]

    def from_log(rec_id: str) -> tuple[Any, ...]:  # compares equal to the Rec it must be
        latest = live[rec_id]
        versions = tuple(put[3:] for put in older.get(rec_id, ())) + (latest[3:],)
        return (rec_id, latest[1], tuple(latest[2]), versions)

    differ = [rec_id for rec_id in served.keys() & live.keys() if served[rec_id] != from_log(rec_id)]
    return out + [f"record {rec_id} differs between the index and the log" for rec_id in sorted(differ)]
