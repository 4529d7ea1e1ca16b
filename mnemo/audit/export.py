"""The audit export: the chain as JSON Lines that anyone can check offline (docs/FORMAT.md §5.2)."""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from ..chain.codec import (
    Entry,
    decode_put_payload,
    decode_record_fields,
    unpackb,
)
from ..errors import IntegrityError, InvalidInput
from ..storage.chain_copy import copy_mode
from ..storage.contract import LogItem, PathArg, Progress, Storage, is_dsn
from ..storage.file.atomic import write_text_atomic
from ..storage.file.reader import Window, open_db, strict_items
from .common import format_ts, json_default, jsonable
from .sources import open_readonly


def _forgotten_by(items: Iterable[LogItem]) -> tuple[dict[int, tuple[int, str, int]], int]:
    """put seq -> (seq, agent, ts_ns) of the forget that erased that version; and the last seq read."""
    pending: dict[str, list[int]] = {}
    out: dict[int, tuple[int, str, int]] = {}
    last = -1
    for item in items:
        e = item.entry
        last = e.seq
        if e.op == "put" and isinstance(e.body.get("id"), str):
            pending.setdefault(e.body["id"], []).append(e.seq)
        elif e.op == "forget" and isinstance(e.body.get("ids"), list):
            for rid in e.body["ids"]:
                for seq in pending.pop(rid, ()) if isinstance(rid, str) else ():
                    out[seq] = (e.seq, e.agent, e.ts_ns)
    return out, last


def _payload_json(item: LogItem, path: str) -> dict[str, Any] | None:
    e = item.entry
    if item.payload is None:
        if e.op == "put":
            raise IntegrityError(f"{path}: the payload of seq {e.seq} is {item.state} "
                                 "though its record was not forgotten", item.where)
        return None
    try:
        if e.op == "forget":
            obj = unpackb(item.payload)
            return {"reason": obj.get("reason") if isinstance(obj, dict) else None}
        if e.op != "put":
            return None
        salt, packed = decode_put_payload(item.payload)
        content, tags, metadata = decode_record_fields(packed)
    except Exception as exc:
        raise IntegrityError(f"{path}: unreadable payload of seq {e.seq}: {exc}", item.where) from None
    out: dict[str, Any] = {"salt": salt.hex(), "packed": base64.b64encode(packed).decode("ascii")}
    if isinstance(content, str):
        out["content"] = content
    else:
        out["content_b64"] = base64.b64encode(content).decode("ascii")
    out["tags"] = list(tags)
    out["metadata"] = jsonable(metadata)
    return out


def export_line(entry: Entry) -> dict[str, Any]:
    """The fields of an export line that come from the entry alone."""
    return {
        "seq": entry.seq,
        "ts": format_ts(entry.ts_ns),
        "op": entry.op,
        "agent": entry.agent,
        "prev": entry.prev.hex(),
        "hash": entry.hash.hex(),
        "entry": base64.b64encode(entry.raw).decode("ascii"),
        "body": jsonable(entry.body),
    }


def _file_items(win: Window, payloads: bool) -> Iterator[LogItem]:
    for item in strict_items(win, payloads):
        yield LogItem(item.entry, item.slot.state, item.payload, item.offset)


def export_audit(
    source: PathArg | Storage,
    dest: PathArg | IO[str],
    *,
    since: int = 0,
    include_content: bool = False,
    progress: Progress | None = None,
) -> int:
    """Write the chain from seq `since` on as JSON Lines (docs/FORMAT.md §5.2); returns the number of lines.

    `source` is a log file's path (read as an auditor: in chunks, without opening it as a client) or an
    open storage backend. Versions of forgotten records are marked `"erased": true` with `"forgotten_by":
    {seq, agent, ts}` and never carry a payload. A path `dest` is written to a temporary file and renamed
    into place. Raises IntegrityError if the chain is damaged (verify gives the full report)."""
    if not (isinstance(since, int) and since >= 0):
        raise InvalidInput("since must be a non-negative integer")
    if isinstance(source, str) and is_dsn(source):
        with open_readonly(source) as store:
            return export_audit(store, dest, since=since, include_content=include_content, progress=progress)
    if isinstance(source, (str, os.PathLike)):
        fd, size, name = open_db(source)
        try:
            win = Window(fd, size, name, None)
            forgotten, last = _forgotten_by(_file_items(win, payloads=False))
            end = win.size
            win = Window(fd, end, name, progress, growable=False)  # exactly what the first pass read
            n = _write_to(dest, lambda out: _write_export(
                _file_items(win, include_content), out, name, since, last, include_content, forgotten
            ), stat.S_IMODE(os.fstat(fd).st_mode))
            if progress is not None:
                progress(end, end)
            return n
        finally:
            os.close(fd)
    store = source
    forgotten, last = _forgotten_by(store.log())
    return _write_to(dest, lambda out: _write_export(
        store.log(since, include_content), out, store.path, since, last, include_content, forgotten
    ), copy_mode(store))


def _write_to(dest: PathArg | IO[str], write: Callable[[IO[str]], int], mode: int) -> int:
    """Write the export to `dest`; a file is made with the source database's permission bits `mode`
    (less the umask): the chain's ids, scopes and tags, and with --include-content every memory, are
    never readable by more than the database."""
    if not isinstance(dest, (str, os.PathLike)):
        return write(dest)
    # a name of this process's own: exports take no lock, and two may write the same file at once
    return write_text_atomic(dest, write, tmp=f"{os.fspath(dest)}.tmp{os.getpid()}", new_mode=mode)


def _write_export(
    items: Iterable[LogItem], out: IO[str], path: str, since: int, last: int, include_content: bool,
    forgotten: dict[int, tuple[int, str, int]],
) -> int:
    """Lines for the entries `since`..`last` (what the first pass read: forgets after it are unknown)."""
    n = 0
    for item in items:
        e = item.entry
        if e.seq > last:
            break
        if e.seq < since:
            continue
        line = export_line(e)
        by = forgotten.get(e.seq) if e.op == "put" else None
        if by is not None:
            line["erased"] = True
            line["forgotten_by"] = {"seq": by[0], "agent": by[1], "ts": format_ts(by[2])}
        elif include_content and e.op in ("put", "forget"):
            payload = _payload_json(item, path)
            if payload is not None:
                line["payload"] = payload
        out.write(json.dumps(line, ensure_ascii=True, separators=(",", ":"), default=json_default))
        out.write("\n")
        n += 1
    return n
