"""Fuzzing with hypothesis: the memory tool's handle() on arbitrary input, and opening and verifying
arbitrary and mutated db files. Shared by tests/reliability/test_fuzz.py (a few hundred inputs) and
tests/soak (many thousands).

Every example runs under a wall-clock alarm, so a hang fails the example instead of the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.audit import UnreadableDatabase, verify_db
from mnemo.chain.codec import packb
from mnemo.errors import MnemoError
from mnemo.record import VerifyReport
from mnemo.storage.file.framing import HEADER_SIZE, frame_length
from mnemo.storage.file.snapshot import decode_snapshot, encode_snapshot
from mnemo.tools.server import MnemoMemoryToolServer

OWNER = "owner"
COMMANDS = ["view", "create", "str_replace", "insert", "delete", "rename"]


class Hang(BaseException):
    """An example ran past its time limit (a BaseException, so no `except Exception` swallows it)."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def on_alarm(_signum: int, _frame: Any) -> None:
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def tree(root: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of everything under root except `skip`."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            dirnames[:] = []
            continue
        for name in filenames + dirnames:
            p = os.path.join(dirpath, name)
            if Path(p) == skip:
                continue
            st_ = os.lstat(p)
            out[os.path.relpath(p, root)] = (st_.st_size, st_.st_mtime_ns)
    return out


# -- strategies: the memory tool ------------------------------------------------------------------------

json_leaf = (
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40)
)


def _nest(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)


json_like = st.recursive(json_leaf, _nest, max_leaves=12)
# what msgpack can pack (integers within 64 bits), for forged sidecars
packable = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.floats()
    | st.text(max_size=40) | st.binary(max_size=40),
    _nest, max_leaves=12,
)
NASTY_SEGMENTS = ["..", ".", "", "...", "%2e%2e", "%2E%2e", "%2f", "%00", "\\..", "..\\..", "~", "*", "\x00",
                  "\n", "\u202e", "\ud800", "con", "a:b", "x" * 300, "é", "e\u0301", "\uff0e\uff0e", " ", "/"]
segment = st.sampled_from(NASTY_SEGMENTS) | st.text(max_size=12) | st.from_regex(r"[a-z]{1,6}(\.md)?", fullmatch=True)
memory_path = st.one_of(
    st.builds(lambda parts: "/memories/" + "/".join(parts), st.lists(segment, max_size=5)),
    st.builds(lambda p, parts: p + "/".join(parts), st.sampled_from(["/memories", "/memories//", "/", "",
              "memories/", "/memories/../", "/etc/", "~/", "../", "/memoriesX/", "\\memories\\"]),
              st.lists(segment, max_size=4)),
    st.sampled_from(["/memories", "/memories/", "/memories/notes.md", "/memories/dir", "/memories/dir/a.md",
                     "/memories/dir/sub/b.md", "/etc/passwd", "/memories/../../etc/passwd"]),
    st.text(max_size=60),
)
simple_path = st.builds(
    lambda parts: "/memories/" + "/".join(parts),
    st.lists(st.sampled_from(["notes.md", "dir", "a.md", "sub", "b.md", "new", "x.txt"])
             | st.from_regex(r"[a-z]{1,3}\.md", fullmatch=True), min_size=1, max_size=3),
)
some_path = st.one_of(simple_path, simple_path, simple_path, memory_path)
text_field = st.text(max_size=200) | st.sampled_from(["", "\n", "a\nb\n", "x" * 5000, "\ud800", "END", "one", "two\n"])
small_int = st.integers(min_value=-3, max_value=30)
typed_input = st.one_of(
    st.fixed_dictionaries({"command": st.just("view"), "path": some_path},
                          optional={"view_range": st.lists(small_int, min_size=2, max_size=2)}),
    st.fixed_dictionaries({"command": st.just("create"), "path": some_path, "file_text": text_field}),
    st.fixed_dictionaries({"command": st.just("str_replace"), "path": some_path, "old_str": text_field},
                          optional={"new_str": text_field}),
    st.fixed_dictionaries({"command": st.just("insert"), "path": some_path, "insert_line": small_int,
                           "insert_text": text_field}),
    st.fixed_dictionaries({"command": st.just("delete"), "path": some_path}),
    st.fixed_dictionaries({"command": st.just("rename"), "old_path": some_path, "new_path": some_path}),
)
loose_input = st.fixed_dictionaries(
    {"command": st.sampled_from(COMMANDS) | st.text(max_size=12) | json_like},
    optional={
        "path": memory_path | json_like, "old_path": memory_path | json_like, "new_path": memory_path | json_like,
        "file_text": text_field | json_like, "old_str": text_field | json_like, "new_str": text_field | json_like,
        "insert_text": text_field | json_like,
        "insert_line": small_int | st.integers() | json_like,
        "view_range": st.lists(small_int | st.integers(), max_size=3) | json_like,
    },
)  # fmt: skip
tool_input = typed_input | typed_input | loose_input
well_formed = st.fixed_dictionaries({"type": st.just("tool_use"), "id": st.just("t"), "name": st.just("memory"),
                                     "input": typed_input})
tool_use = st.one_of(
    well_formed, well_formed, well_formed,
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": st.just("t"), "name": st.just("memory"),
                           "input": tool_input}),
    st.fixed_dictionaries({
        "type": st.just("tool_use"), "id": st.text(max_size=20) | json_like,
        "name": st.just("memory") | st.text(max_size=10), "input": tool_input | json_like,
    }),
    json_like,
)  # fmt: skip


@dataclass
class FuzzCount:
    tried: int = 0
    errors: int = 0  # error results (refusals), a sign the inputs reach the checks
    writes: int = 0  # successful create/str_replace/insert/delete/rename
    notes: list[str] = field(default_factory=list)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def fuzz_handle(
    base: Path, examples: int, derandomize: bool, timeout: float = 10.0, db: str | None = None
) -> FuzzCount:
    """Run handle() on `examples` generated tool_use blocks against one db (`db`, else a file in
    base/db); check every result, and that nothing is written under `base` outside base/db."""
    dbdir = base / "db"
    dbdir.mkdir()
    db = db or str(dbdir / "m.mnemo.db")
    cwd = base / "cwd"
    cwd.mkdir()
    memories_existed = os.path.exists("/memories")
    count = FuzzCount()
    capture = _Capture()
    logging.getLogger("mnemo").addHandler(capture)
    old_cwd = os.getcwd()
    os.chdir(cwd)
    client = MnemoClient(db, OWNER, durability="none")
    server = MnemoMemoryToolServer(client)
    for path, text in (("/memories/notes.md", "one\ntwo\nthree\n"), ("/memories/dir/a.md", "END\n"),
                       ("/memories/dir/sub/b.md", "b\n")):
        server.handle({"type": "tool_use", "id": "s", "name": "memory",
                       "input": {"command": "create", "path": path, "file_text": text}})
    before = tree(base, dbdir)

    def one(block: Any) -> None:
        count.tried += 1
        with time_limit(timeout):
            result = server.handle(block)
        assert isinstance(result, dict) and result.get("type") == "tool_result", result
        assert set(result) <= {"type", "tool_use_id", "content", "is_error"}, result
        assert isinstance(result["content"], str) and isinstance(result["tool_use_id"], str)
        assert result.get("is_error", True) is True
        assert not result["content"].startswith("Error: Internal error"), (block, result)
        assert not capture.records, [r.getMessage() for r in capture.records]
        tool_input = block.get("input") if isinstance(block, dict) else None
        command = tool_input.get("command") if isinstance(tool_input, dict) else None
        if result.get("is_error"):
            count.errors += 1
        elif command in COMMANDS[1:]:
            count.writes += 1

    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=list(HealthCheck))
    @given(blocks=st.lists(well_formed, min_size=1, max_size=8), junk=st.lists(tool_use, max_size=4))
    def run(blocks: list[Any], junk: list[Any]) -> None:
        for block in blocks + junk:
            one(block)
        assert tree(base, dbdir) == before, "something was written outside the db directory"
        assert os.path.exists("/memories") == memories_existed
        for info in client.list_records(tags=["memorytool"]):
            paths = [t[5:] for t in info.tags if t.startswith("path:")]
            assert len(paths) == 1 and paths[0].startswith("/memories/"), info.tags
            assert ".." not in paths[0].split("/") and "//" not in paths[0], paths

    try:
        run()
        report = client.verify()
        assert report.ok, report.problems
        client.close()
        with MnemoClient(db, OWNER) as again:
            assert again.verify().ok
    finally:
        client.close()
        os.chdir(old_cwd)
        logging.getLogger("mnemo").removeHandler(capture)
    return count


# -- strategies: db files --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seeds:
    log: bytes
    snap: bytes
    other_log: bytes  # a db with another db_id, for splicing foreign frames in

    def __repr__(self) -> str:  # keeps hypothesis' reports of a failing example readable
        return f"Seeds(log={len(self.log)} bytes, snap={len(self.snap)} bytes, other={len(self.other_log)} bytes)"


def build_seed_db(directory: Path, name: str = "seed", extra: bool = True) -> tuple[bytes, bytes]:
    """A small db holding every op, transactions, erased and compacted slots; returns (log, snapshot)."""
    path = directory / f"{name}.mnemo.db"
    key = bytes(range(32))
    with MnemoClient(path, OWNER, durability="none", signing_key=key) as c:
        a = c.remember("alpha", tags=["a", "x"], metadata={"k": [1, 2]})
        c.update(a.id, content="alpha 2", expected_version=1)
        b = c.remember(b"\x00\x01binary", tags=["b"])
        c.grant("bob", "team:*", ["read", "write"])
        with c.transaction():
            for i in range(3):
                c.remember(f"tx {i}", tags=["tx"], scope="team:a")
        c.forget([b.id], reason="gone")
        if extra:
            c.checkpoint()
            c.compact()
            tool = MnemoMemoryToolServer(c)
            for p in ("/memories/d/one.md", "/memories/d/two.md"):
                tool.handle({"type": "tool_use", "id": "s", "name": "memory",
                             "input": {"command": "create", "path": p, "file_text": "hello\n"}})
            tool.handle({"type": "tool_use", "id": "s", "name": "memory",
                         "input": {"command": "rename", "old_path": "/memories/d", "new_path": "/memories/e"}})
            c.revoke("bob", "team:*")
            gone = c.remember("to forget", tags=["z"])
            c.forget([gone.id])
            c.remember("last", tags=["a"])
    snap = Path(str(path) + ".snap")
    return path.read_bytes(), snap.read_bytes() if snap.exists() else b""


def make_seeds(directory: Path) -> Seeds:
    log, snap = build_seed_db(directory)
    other, _ = build_seed_db(directory, "other", extra=False)
    return Seeds(log, snap, other)


def spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of the frames that can still be found from the front of `data`."""
    out: list[tuple[int, int]] = []
    pos = HEADER_SIZE
    while pos < len(data):
        try:
            n = frame_length(data, pos, pos)
        except ValueError:
            break
        if pos + n > len(data):
            break
        out.append((pos, pos + n))
        pos += n
    return out


@st.composite
def mutated_log(draw: st.DrawFn, seeds: Seeds) -> tuple[str, bytes]:
    """A db log: random bytes, or the seed log with 1-3 mutations. Returns (description, bytes)."""
    kind = draw(st.sampled_from(["random", "header+random", "mutate", "mutate", "mutate", "mutate"]))
    if kind == "random":
        return "random", draw(st.binary(max_size=2048))
    if kind == "header+random":
        return "header+random", seeds.log[:HEADER_SIZE] + draw(st.binary(max_size=2048))
    data = bytearray(seeds.log)
    done = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        op = draw(st.sampled_from(["truncate", "flip", "flip", "overwrite", "zero", "drop-frame", "dup-frame",
                                   "swap-frames", "foreign-frame", "append", "insert-bytes", "delete-bytes"]))
        n = len(data)
        frames = spans(bytes(data)) if op.endswith("frame") or op.endswith("frames") else []
        if op == "truncate" and n:
            data = data[: draw(st.integers(min_value=0, max_value=n - 1))]
        elif op == "flip" and n:
            for _ in range(draw(st.integers(min_value=1, max_value=8))):
                i = draw(st.integers(min_value=0, max_value=n - 1))
                data[i] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif op in ("overwrite", "zero") and n:
            i = draw(st.integers(min_value=0, max_value=n - 1))
            k = draw(st.integers(min_value=1, max_value=64))
            chunk = bytes(k) if op == "zero" else draw(st.binary(min_size=k, max_size=k))
            data[i : i + k] = chunk[: n - i]
        elif op == "append":
            data += draw(st.binary(max_size=200) | st.just(b"MNFR") | st.sampled_from([bytes(seeds.log[32:60])]))
        elif op == "insert-bytes" and n:
            i = draw(st.integers(min_value=0, max_value=n))
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete-bytes" and n:
            i = draw(st.integers(min_value=0, max_value=n - 1))
            del data[i : i + draw(st.integers(min_value=1, max_value=16))]
        elif frames and op in ("drop-frame", "dup-frame", "swap-frames", "foreign-frame"):
            pieces = [bytes(data[a:b]) for a, b in frames]
            tail = bytes(data[frames[-1][1]:])
            i = draw(st.integers(min_value=0, max_value=len(pieces) - 1))
            if op == "drop-frame":
                del pieces[i]
            elif op == "dup-frame":
                pieces.insert(draw(st.integers(min_value=0, max_value=len(pieces))), pieces[i])
            elif op == "swap-frames":
                j = draw(st.integers(min_value=0, max_value=len(pieces) - 1))
                pieces[i], pieces[j] = pieces[j], pieces[i]
            else:
                foreign = [seeds.other_log[a:b] for a, b in spans(seeds.other_log)]
                pieces.insert(i, draw(st.sampled_from(foreign)))
            data = data[:HEADER_SIZE] + bytearray(b"".join(pieces)) + tail
        else:
            continue
        done.append(op)
    return "+".join(done) or "unchanged", bytes(data)


def _reseal(magic: bytes, inner: bytes) -> bytes:
    data = magic + inner
    return data + hashlib.sha256(data).digest()


@st.composite
def mutated_snapshot(draw: st.DrawFn, seeds: Seeds, forged: bool = False) -> tuple[str, bytes | None]:
    """The seed's index snapshot: absent, intact, damaged, or (`forged`) with its body changed and
    resealed (test_forged_snapshot_is_discarded covers that; it is not a MnemoError today)."""
    kinds = ["none", "intact", "flip", "truncate", "random"] + (["resealed"] if forged else [])
    kind = draw(st.sampled_from(kinds))
    snap = seeds.snap
    if kind == "none":
        return kind, None
    if kind == "intact":
        return kind, snap
    if kind == "flip":
        data = bytearray(snap)
        i = draw(st.integers(min_value=0, max_value=len(data) - 1))
        data[i] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        return kind, bytes(data)
    if kind == "truncate":
        return kind, snap[: draw(st.integers(min_value=0, max_value=len(snap) - 1))]
    if kind == "random":
        return kind, draw(st.binary(max_size=512))
    body = decode_snapshot(snap)
    assert body is not None
    index_keys = ["id_blob", "rows", "columns", "hashes", "posting_rows", "tagset_tags", "tagset_lens",
                  "tagset_refs", "older", "head_seq", "acl", "forgotten"]
    target = draw(st.sampled_from(["offset", "frame_offset", "head_ts", "index", "db_id",
                                   *(f"index.{k}" for k in index_keys)]))
    junk = draw(packable)
    if target.startswith("index."):
        body["index"][target[6:]] = junk
    else:
        body[target] = junk
    return f"resealed:{target}", encode_snapshot(body)


@st.composite
def erase_journal(draw: st.DrawFn, seeds: Seeds) -> tuple[str, bytes | None]:
    kind = draw(st.sampled_from(["none", "none", "random", "sealed-junk", "sealed-regions"]))
    if kind == "none":
        return kind, None
    if kind == "random":
        return kind, draw(st.binary(max_size=200))
    if kind == "sealed-junk":
        return kind, _reseal(b"MNEMOERS", packb(draw(packable)))
    # Well-formed regions that are not payload slots of forgotten records (a stale or foreign journal);
    # bounded so that the fuzzer itself never writes much.
    size = len(seeds.log)
    region = st.tuples(st.integers(min_value=0, max_value=2 * size), st.integers(min_value=0, max_value=4096))
    regions = draw(st.lists(region, min_size=1, max_size=3))
    db_id = draw(st.sampled_from([seeds.log[12:28], bytes(16)]))
    return kind, _reseal(b"MNEMOERS", packb({"db_id": db_id, "regions": [list(r) for r in regions]}))


@dataclass
class FileFuzzCount:
    tried: int = 0
    verified_ok: int = 0
    opened_reader: int = 0
    opened_writer: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # MnemoError class -> count


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def check_db_file(work: Path, log: bytes, snap: bytes | None, journal: bytes | None, count: FileFuzzCount,
                  timeout: float) -> None:
    """verify_db, then a read-only open, then a writer open, on one mutated db."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    path = work / "f.mnemo.db"
    path.write_bytes(log)
    if snap is not None:
        Path(str(path) + ".snap").write_bytes(snap)
    if journal is not None:
        Path(str(path) + ".erase").write_bytes(journal)
    count.tried += 1
    original = _files(work)
    report: VerifyReport | None = None
    with time_limit(timeout), contextlib.suppress(UnreadableDatabase):
        report = verify_db(path)
    assert _files(work) == original, "verify_db changed a file"
    assert report is not None, "a regular file must be readable"
    count.verified_ok += report.ok

    def refused(exc: MnemoError) -> None:
        name = type(exc).__name__
        count.refused[name] = count.refused.get(name, 0) + 1

    reader_ok = False
    with time_limit(timeout):
        try:
            with MnemoClient(path, "fuzz", readonly=True) as r:
                reader_ok = True
                with contextlib.suppress(MnemoError):
                    for rec in r.list_records():
                        with contextlib.suppress(MnemoError):
                            r.history(rec.id)
        except MnemoError as exc:
            refused(exc)
    count.opened_reader += reader_ok
    assert _files(work) == original, "a read-only open created or changed a file"

    # A torn genesis frame is no torn tail: creation is atomic, so it is damage and opening refuses it.
    torn_genesis = any(p.kind == "torn-tail" and p.offset == 32 for p in report.problems)
    torn_only = {p.kind for p in report.problems} <= {"torn-tail"} and not torn_genesis
    writer_ok = False
    with time_limit(timeout):
        try:
            with MnemoClient(path, OWNER, durability="none") as w:
                writer_ok = True
                with contextlib.suppress(MnemoError):
                    w.query()
                after = w.verify()
                # A log cut back to its header is refused (test_torn_genesis_frame_is_not_cut).
                no_genesis = w.stats()["entries"] == 0
                if (torn_only or snap is None) and journal is None and not no_genesis:
                    assert after.ok, ("a writer opened a db that does not verify", after.problems)
                w.remember("written after the open")
                if journal is None:  # a forged journal: test_foreign_erase_journal_is_not_applied
                    assert w.verify().ok == after.ok
        except MnemoError as exc:
            refused(exc)
    count.opened_writer += writer_ok
    if torn_only and snap is None and journal is None:
        assert writer_ok, "a db whose only problem is a torn tail must open for writing"
    if report.ok and snap is None and journal is None:
        assert reader_ok and writer_ok, "a db that verifies must open"


def fuzz_files(base: Path, examples: int, derandomize: bool, sidecars: bool, timeout: float = 10.0
               ) -> FileFuzzCount:
    seeds = make_seeds(base)
    count = FileFuzzCount()
    work = base / "work"

    none: st.SearchStrategy[tuple[str, bytes | None]] = st.just(("none", None))

    logs: st.SearchStrategy[tuple[str, bytes]] = mutated_log(seeds)
    if sidecars:  # mostly a sound log, so that what the sidecars do is what decides
        cut = st.integers(min_value=HEADER_SIZE + 1, max_value=len(seeds.log) - 1)
        logs = st.just(("intact", seeds.log)) | cut.map(lambda n: ("truncated", seeds.log[:n])) | logs

    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=list(HealthCheck))
    @given(log=logs, snap=mutated_snapshot(seeds) if sidecars else none,
           journal=erase_journal(seeds) if sidecars else none)
    def run(log: tuple[str, bytes], snap: tuple[str, bytes | None], journal: tuple[str, bytes | None]) -> None:
        check_db_file(work, log[1], snap[1], journal[1], count, timeout)

    run()
    return count
