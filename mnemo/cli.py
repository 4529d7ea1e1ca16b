"""The `mnemo` command: a thin shell over the library (DESIGN.md §8).

Exit codes: 0 fine; 1 problems found (damage, a failed check, a record that is missing or not readable);
2 a usage error, or a file that cannot be opened or read at all.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from . import audit
from .errors import IntegrityError, MnemoError, NotFound, PermissionDenied
from .record import VerifyReport

if TYPE_CHECKING:
    from .client import MnemoClient
    from .record import MemoryRecord, RecordInfo

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2

PROG = "mnemo"


class UsageError(Exception):
    """A bad argument or a file that cannot be opened: exit 2."""


class Failure(Exception):
    """Problems found or an operation refused: exit 1."""


# -- output helpers ---------------------------------------------------------------------------------------


def _print_json(obj: Any, out: TextIO) -> None:
    out.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str))
    out.write("\n")


class _Progress:
    """`done/total` on one stderr line, only on a terminal, only once the work has lasted a moment."""

    def __init__(self, label: str, stream: TextIO | None = None, delay: float = 0.5) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _isatty(self.stream)
        self.start = time.monotonic()
        self.delay = delay
        self.last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < self.delay or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        pct = 100.0 * done / total if total else 100.0
        self.stream.write(f"\r{self.label}: {pct:5.1f}% ({_size(done)} of {_size(total)})")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * 72 + "\r")
            self.stream.flush()
            self.shown = False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _iso(dt: Any) -> str:
    return str(dt.isoformat().replace("+00:00", "Z")) if hasattr(dt, "isoformat") else str(dt)


# -- argument types ---------------------------------------------------------------------------------------


def _expect_head(text: str) -> tuple[int, str]:
    seq_s, sep, hexhash = text.partition(":")
    hexhash = hexhash.strip().lower()
    try:
        seq = int(seq_s)
        ok = sep == ":" and seq >= 0 and len(hexhash) == 64 and bytes.fromhex(hexhash) is not None
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"expected SEQ:HASH (a seq and 64 hex digits), got {text!r}")
    return seq, hexhash


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return n


def _load_pubkey(key: str | None) -> bytes | None:
    if key is None:
        return None
    try:
        return audit.load_public_key(key)
    except audit.KeyFileError as exc:
        raise UsageError(f"--pubkey: {exc}") from None


# -- verify, audit, keygen --------------------------------------------------------------------------------


def _report_text(report: VerifyReport, what: str, out: TextIO) -> None:
    if report.ok:
        out.write(f"OK: {what}: {report.entries} entries, chain intact\n")
    else:
        n = len(report.problems)
        out.write(f"FAILED: {what}: {n} problem{'s' if n != 1 else ''} in {report.entries} entries read\n")
    if report.head_seq >= 0:
        out.write(f"head: {report.head_seq}:{report.head_hash}\n")
    out.write(f"erased versions: {report.erased}; checkpoints verified: {report.checkpoints}\n")
    for p in report.problems:
        where = []
        if p.seq is not None:
            where.append(f"seq {p.seq}")
        if p.offset is not None:
            where.append(f"offset {p.offset}")
        out.write(f"  problem [{p.kind}] {', '.join(where) or '-'}: {p.message}\n")
    for note in report.notes:
        out.write(f"  note: {note}\n")


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    pubkey = _load_pubkey(args.pubkey)
    progress = _Progress("verifying")
    try:
        report = audit.verify_db(args.db, pubkey=pubkey, expect_head=args.expect_head, progress=progress)
    except audit.UnreadableDatabase as exc:
        raise UsageError(str(exc)) from None
    finally:
        progress.clear()
    if args.json:
        _print_json({"file": args.db, **report.to_json()}, out)
    else:
        _report_text(report, args.db, out)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def cmd_audit_export(args: argparse.Namespace, out: TextIO) -> int:
    progress = _Progress("exporting")
    try:
        if args.output in (None, "-"):
            n = audit.export_audit(args.db, out, since=args.since, include_content=args.include_content)
        else:
            n = audit.export_audit(args.db, args.output, since=args.since,
                                   include_content=args.include_content, progress=progress)
    except audit.UnreadableDatabase as exc:
        raise UsageError(str(exc)) from None
    except IntegrityError as exc:
        raise Failure(f"cannot export {args.db}: {exc}") from None
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    finally:
        progress.clear()
    if args.output not in (None, "-"):
        sys.stderr.write(f"exported {n} entries to {args.output}\n")
    return EXIT_OK


def cmd_audit_verify(args: argparse.Namespace, out: TextIO) -> int:
    pubkey = _load_pubkey(args.pubkey)
    progress = _Progress("verifying")
    try:
        source: Any = sys.stdin if args.file == "-" else args.file
        report = audit.verify_export(source, pubkey=pubkey, progress=progress)
    except audit.UnreadableExport as exc:
        raise UsageError(str(exc)) from None
    finally:
        progress.clear()
    if args.json:
        _print_json({"file": args.file, **report.to_json()}, out)
    else:
        _report_text(report, args.file, out)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def cmd_keygen(args: argparse.Namespace, out: TextIO) -> int:
    private_path = args.output
    public_path = private_path + ".pub"
    if not args.force:
        for path in (private_path, public_path):
            if os.path.exists(path):
                raise UsageError(f"{path} exists; pass --force to overwrite it")
    pem, pub = audit.generate_keypair()
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        fd = os.open(private_path, flags, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        with open(public_path, "w", encoding="ascii") as f:
            f.write(pub.hex() + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write the key files: {exc.strerror or exc}") from None
    if args.json:
        _print_json({"private_key_file": private_path, "public_key_file": public_path,
                     "public_key": pub.hex()}, out)
    else:
        out.write(f"private key: {private_path} (keep it secret; give it to MnemoClient(signing_key=...))\n")
        out.write(f"public key:  {public_path} (give it to `mnemo verify --pubkey`)\n")
        out.write(f"{pub.hex()}\n")
    return EXIT_OK


# -- log: the chain, read straight from the file -------------------------------------------------------


def _summary(op: str, body: dict[str, Any]) -> str:
    try:
        if op == "genesis":
            return f"db_id {body['db_id'].hex()} format {body['format']}"
        if op == "put":
            return f"{body['id']} v{body['ver']} scope {body['scope']} {body['size']} bytes"
        if op == "forget":
            return "forget " + ", ".join(str(i) for i in body["ids"])
        if op in ("grant", "revoke"):
            return f"{body['principal']} {','.join(body['perms']) or '-'} on {body['scope']}"
        if op == "checkpoint":
            return f"signs seq {body['seq']} {body['head'].hex()[:12]} key {body['key'].hex()[:12]}"
    except (KeyError, AttributeError, TypeError):
        pass
    return json.dumps(audit.jsonable(body), default=str)


def cmd_log(args: argparse.Namespace, out: TextIO) -> int:
    shown = 0
    try:
        for item in audit.read_log(args.db):
            e = item.entry
            if e.seq < args.since or (args.agent and e.agent != args.agent) or (args.op and e.op != args.op):
                continue
            if args.limit is not None and shown >= args.limit:
                break
            shown += 1
            if args.json:
                line = audit.export_line(e)
                del line["entry"]
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
            else:
                ts = audit.format_ts(e.ts_ns)
                out.write(f"{e.seq:>7}  {ts}  {e.op:<10}  {e.agent:<16}  {e.hash.hex()[:12]}  "
                          f"{_summary(e.op, e.body)}\n")
    except audit.UnreadableDatabase as exc:
        raise UsageError(str(exc)) from None
    except IntegrityError as exc:
        out.flush()
        raise Failure(str(exc)) from None
    return EXIT_OK


# -- commands over MnemoClient -----------------------------------------------------------------------------


def _default_agent(db: str) -> str:
    """$MNEMO_AGENT, else the database's owner (the genesis agent, which holds admin on `*`)."""
    env = os.environ.get("MNEMO_AGENT")
    if env:
        return env
    try:
        for item in audit.read_log(db):
            return item.entry.agent
    except audit.UnreadableDatabase as exc:
        raise UsageError(str(exc)) from None
    except IntegrityError as exc:
        raise Failure(f"{exc}") from None
    raise Failure(f"{db} holds no genesis entry; pass --agent")


def _open_client(args: argparse.Namespace, readonly: bool = True) -> MnemoClient:
    db = args.db
    if not os.path.isfile(db):
        what = "no such file" if not os.path.exists(db) else "not a regular file"
        raise UsageError(f"cannot open {db}: {what}")
    if not os.access(db, os.R_OK):
        raise UsageError(f"cannot open {db}: permission denied")
    agent = args.agent or _default_agent(db)
    from .client import MnemoClient

    try:
        return MnemoClient(db, agent, readonly=readonly)
    except IntegrityError as exc:
        raise Failure(f"{exc} (run `mnemo verify {db}` for the full report)") from None
    except NotFound as exc:
        raise UsageError(f"cannot open {db}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"cannot open {db}: {exc.strerror or exc}") from None


def _with_client(
    fn: Callable[[MnemoClient, argparse.Namespace, TextIO], int], readonly: bool = True
) -> Callable[[argparse.Namespace, TextIO], int]:
    def run(args: argparse.Namespace, out: TextIO) -> int:
        client = _open_client(args, readonly=readonly)
        try:
            return fn(client, args, out)
        except (NotFound, PermissionDenied) as exc:
            raise Failure(str(exc)) from None
        finally:
            client.close()

    return run


def _record_json(rec: MemoryRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"id": rec.id, "version": rec.version}
    if isinstance(rec.content, bytes):
        out["content_b64"] = base64.b64encode(rec.content).decode("ascii")
    else:
        out["content"] = rec.content
    out.update({
        "tags": list(rec.tags), "metadata": audit.jsonable(rec.metadata), "scope": rec.scope,
        "agent_id": rec.agent_id, "created_at": _iso(rec.created_at), "updated_at": _iso(rec.updated_at),
        "seq": rec.seq, "hash": rec.hash,
    })
    return out


def _info_json(info: RecordInfo) -> dict[str, Any]:
    return {
        "id": info.id, "version": info.version, "scope": info.scope, "tags": list(info.tags),
        "size": info.size, "agent_id": info.agent_id, "created_at": _iso(info.created_at),
        "updated_at": _iso(info.updated_at), "seq": info.seq,
    }


def _ls(client: MnemoClient, args: argparse.Namespace, out: TextIO) -> int:
    infos = client.list_records(tags=args.tag, any_tags=args.any_tag, tag_prefix=args.prefix,
                                scope=args.scope, limit=args.limit)
    if args.json:
        _print_json([_info_json(i) for i in infos], out)
        return EXIT_OK
    for i in infos:
        out.write(f"{i.id}  v{i.version:<3} {i.scope:<20} {i.size:>8}  {_iso(i.updated_at)}  "
                  f"{' '.join(i.tags)}\n")
    return EXIT_OK


def _cat(client: MnemoClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.version is None:
        rec = client.get(args.id)
    else:
        versions = [r for r in client.history(args.id) if r.version == args.version]
        if not versions:
            raise Failure(f"record {args.id!r} has no version {args.version}")
        rec = versions[0]
    if args.json:
        _print_json(_record_json(rec), out)
    elif isinstance(rec.content, bytes):
        out.flush()
        buffer = getattr(out, "buffer", None)
        if buffer is None:
            out.write(base64.b64encode(rec.content).decode("ascii") + "\n")
        else:
            buffer.write(rec.content)
            buffer.flush()
    else:
        out.write(rec.content)
        if rec.content and not rec.content.endswith("\n"):
            out.write("\n")
    return EXIT_OK


def _history(client: MnemoClient, args: argparse.Namespace, out: TextIO) -> int:
    versions = client.history(args.id)
    if args.json:
        _print_json([_record_json(r) for r in versions], out)
        return EXIT_OK
    for r in versions:
        if isinstance(r.content, bytes):
            preview = f"<{len(r.content)} bytes>"
        else:
            preview = r.content.replace("\n", " ")
            preview = preview if len(preview) <= 60 else preview[:57] + "..."
        out.write(f"v{r.version:<3} seq {r.seq:<6} {_iso(r.updated_at)}  {r.agent_id:<14} "
                  f"[{' '.join(r.tags)}]  {preview}\n")
    return EXIT_OK


def _stats(client: MnemoClient, args: argparse.Namespace, out: TextIO) -> int:
    stats = client.stats()
    if args.json:
        _print_json(stats, out)
    else:
        width = max((len(k) for k in stats), default=0)
        for key, value in stats.items():
            out.write(f"{key:<{width}}  {value}\n")
    return EXIT_OK


def _compact(client: MnemoClient, args: argparse.Namespace, out: TextIO) -> int:
    result = client.compact()
    if args.json:
        _print_json(result, out)
    else:
        out.write("compacted " + ", ".join(f"{k} {v}" for k, v in result.items()) + "\n")
    return EXIT_OK


# -- demo, chat ---------------------------------------------------------------------------------------------


def _demo_module() -> Any:
    try:
        return importlib.import_module(".demo", __package__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.demo":
            raise
        raise Failure("the demo is not part of this installation") from None


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    result = _demo_module().run_demo(out)
    return result if isinstance(result, int) else EXIT_OK


def cmd_chat(args: argparse.Namespace, out: TextIO) -> int:
    result = _demo_module().run_chat()
    return result if isinstance(result, int) else EXIT_OK


# -- the parser ---------------------------------------------------------------------------------------------


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("mnemo-db")
    except Exception:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Mnemo: an embedded, append-only, hash-chained memory store for AI agents.",
        epilog="Exit codes: 0 fine; 1 problems found; 2 usage error or a file that cannot be read at all.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def json_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="machine-readable output")

    def agent_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--agent", help="act as this agent (default: $MNEMO_AGENT, else the database's owner)")

    p = sub.add_parser("verify", help="check a whole database file: framing, hashes, links, signatures",
                       description="Read the log file itself (never as a client, never writing) and report "
                                   "every problem with its seq and byte offset.")
    p.add_argument("db", metavar="DB")
    p.add_argument("--pubkey", metavar="KEY",
                   help="public key file or 64 hex digits; every checkpoint must be signed by it, "
                        "and one must cover the head")
    p.add_argument("--expect-head", metavar="SEQ:HASH", type=_expect_head,
                   help="a head saved earlier; the log must still hold that entry with that hash")
    json_flag(p)
    p.set_defaults(run=cmd_verify)

    p = sub.add_parser("audit", help="export the chain as JSON Lines, or verify such an export offline")
    audit_sub = p.add_subparsers(dest="audit_command", metavar="ACTION", required=True)
    e = audit_sub.add_parser("export", help="write the chain as JSON Lines (DESIGN.md §7)")
    e.add_argument("db", metavar="DB")
    e.add_argument("-o", "--output", metavar="FILE", help="write here (default: standard output)")
    e.add_argument("--since", metavar="SEQ", type=_non_negative, default=0, help="first seq to export")
    e.add_argument("--include-content", action="store_true",
                   help="add each live version's payload (salt, packed bytes, content, tags, metadata)")
    e.set_defaults(run=cmd_audit_export)
    v = audit_sub.add_parser("verify", help="check an export with SHA-256, msgpack and Ed25519 only")
    v.add_argument("file", metavar="FILE", help="the export (`-` for standard input)")
    v.add_argument("--pubkey", metavar="KEY", help="public key file or 64 hex digits that signs checkpoints")
    json_flag(v)
    v.set_defaults(run=cmd_audit_verify)

    p = sub.add_parser("keygen", help="make an Ed25519 key pair for signed checkpoints")
    p.add_argument("-o", "--output", metavar="PREFIX", default="mnemo-key",
                   help="write the private key to PREFIX, the public key to PREFIX.pub (default mnemo-key)")
    p.add_argument("--force", action="store_true", help="overwrite existing key files")
    json_flag(p)
    p.set_defaults(run=cmd_keygen)

    p = sub.add_parser("ls", help="list the records the agent may read")
    p.add_argument("db", metavar="DB")
    agent_flag(p)
    p.add_argument("--tag", action="append", default=[], help="only records with this tag (repeatable)")
    p.add_argument("--any-tag", action="append", default=[], help="records with any of these (repeatable)")
    p.add_argument("--prefix", metavar="TAG_PREFIX", help="only records with a tag starting with this")
    p.add_argument("--scope", help="only records in this scope (or `prefix*` pattern)")
    p.add_argument("--limit", type=_non_negative)
    json_flag(p)
    p.set_defaults(run=_with_client(_ls))

    p = sub.add_parser("cat", help="print a record's content")
    p.add_argument("db", metavar="DB")
    p.add_argument("id", metavar="ID")
    p.add_argument("--version", type=_non_negative, help="this version instead of the latest")
    agent_flag(p)
    json_flag(p)
    p.set_defaults(run=_with_client(_cat))

    p = sub.add_parser("history", help="every version of a record, oldest first")
    p.add_argument("db", metavar="DB")
    p.add_argument("id", metavar="ID")
    agent_flag(p)
    json_flag(p)
    p.set_defaults(run=_with_client(_history))

    p = sub.add_parser("log", help="the chain itself, read from the file: seq, time, op, agent, hash",
                       description="Read the chain straight from the log file. Entries hold no content, "
                                   "only ids, scopes and digests.")
    p.add_argument("db", metavar="DB")
    p.add_argument("--since", metavar="SEQ", type=_non_negative, default=0)
    p.add_argument("--limit", type=_non_negative)
    p.add_argument("--agent", help="only entries written by this agent")
    p.add_argument("--op", choices=["genesis", "put", "forget", "grant", "revoke", "checkpoint"])
    json_flag(p)
    p.set_defaults(run=cmd_log)

    p = sub.add_parser("stats", help="counts and sizes")
    p.add_argument("db", metavar="DB")
    agent_flag(p)
    json_flag(p)
    p.set_defaults(run=_with_client(_stats))

    p = sub.add_parser("compact", help="rewrite the log without the bytes of erased payloads")
    p.add_argument("db", metavar="DB")
    agent_flag(p)
    json_flag(p)
    p.set_defaults(run=_with_client(_compact, readonly=False))

    p = sub.add_parser("demo", help="a scripted, offline memory-tool conversation on a fresh local db")
    p.set_defaults(run=cmd_demo)

    p = sub.add_parser("chat", help="a real conversation with Claude through the memory tool "
                                    "(needs ANTHROPIC_API_KEY)")
    p.set_defaults(run=cmd_chat)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    out = sys.stdout
    try:
        code: int = args.run(args, out)
        out.flush()
        return code
    except UsageError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return EXIT_USAGE
    except Failure as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return EXIT_PROBLEMS
    except MnemoError as exc:
        sys.stderr.write(f"{PROG}: {type(exc).__name__}: {exc}\n")
        return EXIT_PROBLEMS
    except BrokenPipeError:
        # the reader went away (`mnemo log DB | head`): not an error
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
