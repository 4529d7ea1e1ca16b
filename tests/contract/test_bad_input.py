"""Bad input: every refusal is a clear MnemoError, and the database is exactly as it was, on both
backends; what only a file can be given (a path that is no log, a folder) on the file backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import is_empty, is_pg, snapshot, state

from mnemo import MemoryRecord, MnemoClient
from mnemo.errors import Closed, Conflict, IntegrityError, InvalidInput, MnemoError, NotFound, ReadOnly

AGENT = "agent-1"
MIB = 1 << 20

Call = Callable[[Any, MemoryRecord], Any]  # the client is Any: these calls break its signatures on purpose


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"d": value}
    return value


BAD_CALLS: list[tuple[str, Call, type[MnemoError]]] = [
    # remember: content
    ("content-int", lambda c, r: c.remember(123), InvalidInput),
    ("content-none", lambda c, r: c.remember(None), InvalidInput),
    ("content-float", lambda c, r: c.remember(1.5), InvalidInput),
    ("content-list", lambda c, r: c.remember(["a"]), InvalidInput),
    ("content-dict", lambda c, r: c.remember({"a": 1}), InvalidInput),
    ("content-str-over-1MiB", lambda c, r: c.remember("x" * (MIB + 1)), InvalidInput),
    ("content-bytes-over-1MiB", lambda c, r: c.remember(b"x" * (MIB + 1)), InvalidInput),
    ("content-utf8-over-1MiB", lambda c, r: c.remember("é" * (MIB // 2 + 1)), InvalidInput),
    ("content-lone-surrogate", lambda c, r: c.remember("a\ud800b"), InvalidInput),
    # remember: tags
    ("tags-str", lambda c, r: c.remember("x", tags="abc"), InvalidInput),
    ("tags-bytes", lambda c, r: c.remember("x", tags=b"abc"), InvalidInput),
    ("tags-int", lambda c, r: c.remember("x", tags=5), InvalidInput),
    ("tag-int", lambda c, r: c.remember("x", tags=["a", 1]), InvalidInput),
    ("tag-none", lambda c, r: c.remember("x", tags=[None]), InvalidInput),
    ("tag-empty", lambda c, r: c.remember("x", tags=[""]), InvalidInput),
    ("tag-bytes", lambda c, r: c.remember("x", tags=["a", b"b"]), InvalidInput),
    ("tag-list", lambda c, r: c.remember("x", tags=[["nested"]]), InvalidInput),
    ("tag-over-2048", lambda c, r: c.remember("x", tags=["t" * 2049]), InvalidInput),
    ("tag-lone-surrogate", lambda c, r: c.remember("x", tags=["\udfff"]), InvalidInput),
    ("tag-nul", lambda c, r: c.remember("x", tags=["a\x00"]), InvalidInput),
    ("tag-path-not-canonical", lambda c, r: c.remember("x", tags=["memorytool", "path:/memories/a//"]), InvalidInput),
    ("tag-path-taken", lambda c, r: c.remember("x", tags=["memorytool", "path:/memories/taken.md"]), InvalidInput),
    ("tag-memorytool-alone", lambda c, r: c.remember("x", tags=["memorytool"]), InvalidInput),
    # remember: metadata
    ("metadata-str", lambda c, r: c.remember("x", metadata="k=v"), InvalidInput),
    ("metadata-list", lambda c, r: c.remember("x", metadata=[1, 2]), InvalidInput),
    ("metadata-int", lambda c, r: c.remember("x", metadata=5), InvalidInput),
    ("metadata-set-value", lambda c, r: c.remember("x", metadata={"a": {1, 2}}), InvalidInput),
    ("metadata-int-key", lambda c, r: c.remember("x", metadata={1: "x"}), InvalidInput),
    ("metadata-tuple-key", lambda c, r: c.remember("x", metadata={(1, 2): "x"}), InvalidInput),
    ("metadata-nested-int-key", lambda c, r: c.remember("x", metadata={"a": {"b": {3: 1}}}), InvalidInput),
    ("metadata-object", lambda c, r: c.remember("x", metadata={"a": object()}), InvalidInput),
    ("metadata-bytes", lambda c, r: c.remember("x", metadata={"a": b"raw"}), InvalidInput),
    ("metadata-nan", lambda c, r: c.remember("x", metadata={"a": float("nan")}), InvalidInput),
    ("metadata-inf", lambda c, r: c.remember("x", metadata={"a": float("-inf")}), InvalidInput),
    ("metadata-huge-int", lambda c, r: c.remember("x", metadata={"a": 2**64}), InvalidInput),
    ("metadata-huge-negative", lambda c, r: c.remember("x", metadata={"a": -(2**63) - 1}), InvalidInput),
    ("metadata-too-deep", lambda c, r: c.remember("x", metadata=deep(5000)), InvalidInput),
    ("metadata-over-64KiB", lambda c, r: c.remember("x", metadata={"k": "v" * (64 << 10)}), InvalidInput),
    ("metadata-surrogate-key", lambda c, r: c.remember("x", metadata={"\ud800": 1}), InvalidInput),
    ("metadata-surrogate-value", lambda c, r: c.remember("x", metadata={"k": ["\ud800"]}), InvalidInput),
    # remember: scope
    ("scope-int", lambda c, r: c.remember("x", scope=5), InvalidInput),
    ("scope-empty", lambda c, r: c.remember("x", scope=""), InvalidInput),
    ("scope-pattern", lambda c, r: c.remember("x", scope="team:*"), InvalidInput),
    # update
    ("update-unknown-id", lambda c, r: c.update("no-such-id", content="x"), NotFound),
    ("update-id-int", lambda c, r: c.update(123, content="x"), InvalidInput),
    ("update-id-none", lambda c, r: c.update(None, content="x"), InvalidInput),
    ("update-content-int", lambda c, r: c.update(r.id, content=5), InvalidInput),
    ("update-content-over-1MiB", lambda c, r: c.update(r.id, content=b"x" * (MIB + 1)), InvalidInput),
    ("update-tags-str", lambda c, r: c.update(r.id, tags="ab"), InvalidInput),
    ("update-tag-empty", lambda c, r: c.update(r.id, tags=["ok", ""]), InvalidInput),
    ("update-tag-nul", lambda c, r: c.update(r.id, tags=["ok", "\x00"]), InvalidInput),
    ("update-tag-path-taken", lambda c, r: c.update(r.id, tags=["memorytool", "path:/memories/taken.md/a"]),
     InvalidInput),
    ("update-metadata-set", lambda c, r: c.update(r.id, metadata={"a": set()}), InvalidInput),
    ("update-metadata-over-64KiB", lambda c, r: c.update(r.id, metadata={"k": "v" * (64 << 10)}), InvalidInput),
    ("update-expected-wrong", lambda c, r: c.update(r.id, content="x", expected_version=2), Conflict),
    ("update-expected-str", lambda c, r: c.update(r.id, content="x", expected_version="1"), InvalidInput),
    ("update-expected-float", lambda c, r: c.update(r.id, content="x", expected_version=1.0), InvalidInput),
    # reads of unknown ids
    ("get-unknown", lambda c, r: c.get("no-such-id"), NotFound),
    ("get-empty", lambda c, r: c.get(""), NotFound),
    ("get-int", lambda c, r: c.get(123), InvalidInput),
    ("history-unknown", lambda c, r: c.history("no-such-id"), NotFound),
    ("history-int", lambda c, r: c.history(None), InvalidInput),
    # ids no record can have (PostgreSQL's text holds neither): missing, as any unknown id
    ("get-nul", lambda c, r: c.get("no\x00such"), NotFound),
    ("get-lone-surrogate", lambda c, r: c.get("no\ud800such"), NotFound),
    ("history-nul", lambda c, r: c.history("\x00"), NotFound),
    ("history-lone-surrogate", lambda c, r: c.history("\udfff"), NotFound),
    ("update-nul", lambda c, r: c.update("a\x00", content="x"), NotFound),
    ("update-lone-surrogate", lambda c, r: c.update("a\ud800", content="x"), NotFound),
    ("forget-nul", lambda c, r: c.forget([r.id, "a\x00"]), NotFound),
    ("forget-lone-surrogate", lambda c, r: c.forget([r.id, "a\ud800"]), NotFound),
    # forget
    ("forget-unknown", lambda c, r: c.forget("no-such-id"), NotFound),
    ("forget-one-unknown", lambda c, r: c.forget([r.id, "no-such-id"]), NotFound),
    ("forget-int", lambda c, r: c.forget(123), InvalidInput),
    ("forget-none-in-list", lambda c, r: c.forget([r.id, None]), InvalidInput),
    ("forget-bytes", lambda c, r: c.forget(r.id.encode()), InvalidInput),
    ("forget-reason-int", lambda c, r: c.forget(r.id, reason=5), InvalidInput),
    ("forget-reason-surrogate", lambda c, r: c.forget(r.id, reason="user asked \ud800"), InvalidInput),
    ("forget_where-tags-str", lambda c, r: c.forget_where(tags="t"), InvalidInput),
    ("forget_where-prefix-int", lambda c, r: c.forget_where(tag_prefix=5), InvalidInput),
    ("forget_where-reason-int", lambda c, r: c.forget_where(tags=["t"], reason=b"x"), InvalidInput),
    ("forget_where-reason-surrogate", lambda c, r: c.forget_where(tags=["t"], reason="\udc00"), InvalidInput),
    ("forget_where-scope-int", lambda c, r: c.forget_where(tags=["t"], scope=5), InvalidInput),
    # query
    ("query-tag-int", lambda c, r: c.query(tags=[1]), InvalidInput),
    ("query-any-tags-int", lambda c, r: c.query(any_tags=5), InvalidInput),
    ("query-prefix-int", lambda c, r: c.query(tag_prefix=5), InvalidInput),
    ("query-prefix-nul", lambda c, r: c.query(tag_prefix="\x00"), InvalidInput),
    ("query-tag-nul", lambda c, r: c.query(tags=["t\x00"]), InvalidInput),
    ("query-limit-negative", lambda c, r: c.query(limit=-1), InvalidInput),
    ("query-limit-str", lambda c, r: c.query(limit="3"), InvalidInput),
    ("list_records-limit-float", lambda c, r: c.list_records(limit=2.5), InvalidInput),
]


@pytest.fixture
def setup(db: str) -> Iterator[tuple[MnemoClient, MemoryRecord]]:
    c = MnemoClient(db, AGENT, durability="fsync", lock_timeout=2.0)
    c.remember("a file", tags=["memorytool", "path:/memories/taken.md"])
    rec = c.remember("existing", tags=["t"], metadata={"k": 1})
    try:
        yield c, rec
    finally:
        c.close()


@pytest.mark.parametrize(("call", "error"), [pytest.param(f, e, id=name) for name, f, e in BAD_CALLS])
def test_bad_input_is_refused_and_changes_nothing(
    setup: tuple[MnemoClient, MemoryRecord], db: str, call: Call, error: type[MnemoError]
) -> None:
    c, rec = setup
    before = state(db)
    head = c.head
    with pytest.raises(MnemoError) as exc:
        call(c, rec)
    assert isinstance(exc.value, error), f"raised {type(exc.value).__name__}: {exc.value}"
    assert str(exc.value).strip(), "the error has no message"
    if isinstance(exc.value, InvalidInput):
        assert isinstance(exc.value, ValueError)
    assert state(db) == before, "a refused call changed the database"
    assert c.head == head
    # the client, and the writer lock, are still usable
    assert c.get(rec.id) == rec
    with MnemoClient(db, AGENT, durability="none", lock_timeout=1.0) as other:
        assert other.remember("next").seq == head[0] + 1
    assert c.remember("and again").seq == head[0] + 2


def test_a_reason_with_a_lone_surrogate_says_so(setup: tuple[MnemoClient, MemoryRecord]) -> None:
    c, rec = setup
    for forget in (lambda: c.forget(rec.id, reason="\ud800"), lambda: c.forget_where(tags=["t"], reason="é\ud800")):
        with pytest.raises(InvalidInput, match=r"^reason contains lone surrogates and cannot be stored as UTF-8$"):
            forget()
    assert c.forget(rec.id, reason="é, asked") == 1  # any text that encodes


@pytest.mark.parametrize("rec_id", ["x\x00y", "x\ud800y"])
def test_an_id_no_record_can_have_is_missing_in_a_transaction_too(
    setup: tuple[MnemoClient, MemoryRecord], db: str, rec_id: str
) -> None:
    c, rec = setup
    before = state(db)
    for read in (lambda: c.get(rec_id), lambda: c.history(rec_id)):
        with pytest.raises(NotFound) as exc:
            read()
        assert str(exc.value) == f"no record {rec_id!r} that you may read"
    with c.transaction(), pytest.raises(NotFound, match=r"^no record 'x.+y' that you may read$"):
        c.get(rec_id)
    assert state(db) == before


def test_bad_input_inside_a_transaction_aborts_it(setup: tuple[MnemoClient, MemoryRecord], db: str) -> None:
    c, rec = setup
    before = state(db)
    with pytest.raises(InvalidInput), c.transaction():
        c.remember("fine")
        c.remember(b"x" * (MIB + 1))
    assert state(db) == before
    assert c.query()[1:] == [rec] and [r.content for r in c.query()] == ["a file", "existing"]


@pytest.mark.parametrize(
    "content",
    ["x" * MIB, b"\x00" * MIB, "é" * (MIB // 2)],
    ids=["str", "bytes", "utf8"],
)
def test_content_of_exactly_1MiB_is_accepted(setup: tuple[MnemoClient, MemoryRecord], content: str | bytes) -> None:
    c, _rec = setup
    r = c.remember(content)
    assert c.get(r.id).content == content


def test_limits_at_their_edge_are_accepted(setup: tuple[MnemoClient, MemoryRecord]) -> None:
    c, _rec = setup
    tag = "t" * 2048
    r = c.remember("x", tags=[tag], metadata={"k": "v" * (60 << 10), "n": [2**64 - 1, -(2**63)]})
    assert c.get(r.id).tags == (tag,)
    assert c.query(tags=[tag]) == [r]
    assert c.get(r.id).metadata["n"] == [2**64 - 1, -(2**63)]


# -- constructor ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"agent_id": ""},
        {"agent_id": None},
        {"agent_id": 7},
        {"agent_id": b"agent"},
        {"durability": "sometimes"},
        {"durability": None},
        {"durability": "FSYNC"},
        {"lock_timeout": -1},
        {"lock_timeout": "soon"},
        {"checkpoint_every": 0},
        {"checkpoint_every": "10"},
        {"signing_key": b"too short"},
        {"signing_key": 42},
    ],
    ids=lambda kw: "-".join(f"{k}={v!r}" for k, v in kw.items()),
)
def test_bad_constructor_arguments(db: str, kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"agent_id": AGENT, **kwargs}
    with pytest.raises(InvalidInput) as exc:
        MnemoClient(db, **args)
    assert str(exc.value)
    assert is_empty(db), "a refused open created the database"
    if not is_pg(db):
        assert list(Path(db).parent.iterdir()) == [], "a refused open created files"


def test_readonly_open_of_a_missing_db_creates_nothing(db: str) -> None:
    with pytest.raises(MnemoError):
        MnemoClient(db, AGENT, readonly=True)
    assert is_empty(db)
    if not is_pg(db):
        assert list(Path(db).parent.iterdir()) == []


@pytest.mark.parametrize("readonly", [False, True])
@pytest.mark.parametrize(
    "data",
    [b"hello, this is not a database\n", b"MNEMOLOG" + b"\x00" * 40, b"\x00" * 4096, b"SQLite format 3\x00" * 10],
    ids=["text", "bad-header", "zeros", "sqlite"],
)
def test_a_file_that_is_not_a_mnemo_log_is_refused_and_kept(tmp_path: Path, readonly: bool, data: bytes) -> None:
    db = tmp_path / "other.db"
    db.write_bytes(data)
    with pytest.raises(IntegrityError) as exc:
        MnemoClient(db, AGENT, readonly=readonly)
    assert exc.value.offset == 0
    assert db.read_bytes() == data


def test_a_directory_as_db_path_is_a_mnemo_error(tmp_path: Path) -> None:
    with pytest.raises(MnemoError):
        MnemoClient(tmp_path, AGENT)


def test_a_db_path_in_a_missing_folder_is_a_mnemo_error(tmp_path: Path) -> None:
    with pytest.raises(MnemoError):
        MnemoClient(tmp_path / "no" / "such" / "dir.db", AGENT)
    assert list(tmp_path.iterdir()) == []


# -- closed and read-only clients ----------------------------------------------------------------------

WRITES: list[tuple[str, Call]] = [
    ("remember", lambda c, r: c.remember("x")),
    ("update", lambda c, r: c.update(r.id, content="x")),
    ("forget", lambda c, r: c.forget(r.id)),
    ("forget_where", lambda c, r: c.forget_where(tags=["t"])),
    ("transaction", lambda c, r: c.transaction().__enter__()),
]
READS: list[tuple[str, Call]] = [
    ("get", lambda c, r: c.get(r.id)),
    ("history", lambda c, r: c.history(r.id)),
    ("query", lambda c, r: c.query()),
    ("list_records", lambda c, r: c.list_records()),
    ("verify", lambda c, r: c.verify()),
    ("stats", lambda c, r: c.stats()),
]


@pytest.mark.parametrize(("call"), [pytest.param(f, id=n) for n, f in WRITES + READS])
def test_a_closed_client_refuses_everything(db: str, call: Call) -> None:
    c = MnemoClient(db, AGENT)
    rec = c.remember("x", tags=["t"])
    c.close()
    before = state(db)
    with pytest.raises(Closed) as exc:
        call(c, rec)
    assert str(exc.value)
    assert state(db) == before


@pytest.mark.parametrize(("call"), [pytest.param(f, id=n) for n, f in WRITES])
def test_a_readonly_client_refuses_writes(db: str, call: Call) -> None:
    with MnemoClient(db, AGENT) as w:
        rec = w.remember("x", tags=["t"])
    before = state(db)
    snap = None if is_pg(db) else Path(db + ".snap").read_bytes()
    with MnemoClient(db, AGENT, readonly=True) as r:
        with pytest.raises(ReadOnly) as exc:
            call(r, rec)
        assert str(exc.value)
        assert r.get(rec.id) == rec
    assert state(db) == before
    if snap is not None:
        assert Path(db + ".snap").read_bytes() == snap


def test_a_transaction_on_a_readonly_client_is_refused_at_the_start(db: str) -> None:
    MnemoClient(db, AGENT).close()
    entered = False
    with MnemoClient(db, AGENT, readonly=True) as r, pytest.raises(ReadOnly), r.transaction():
        entered = True
    assert not entered


def test_compact_inside_a_transaction_is_refused_and_the_transaction_goes_on(db: str) -> None:
    with MnemoClient(db, AGENT, durability="none") as c:
        kept = c.remember("kept")
        c.forget(c.remember("gone").id)
        with c.transaction():
            staged = c.remember("in the transaction")
            with pytest.raises(MnemoError) as info:
                c.compact()
            assert type(info.value) is MnemoError and str(info.value) == "compact() cannot run inside a transaction"
        assert [r.content for r in c.query()] == ["kept", "in the transaction"]
        assert c.compact()["bytes_after"] >= 0
        assert c.get(kept.id).content == "kept" and c.get(staged.id).content == "in the transaction"
        assert c.verify().ok


def test_forget_where_without_a_filter_is_refused(db: str) -> None:
    with MnemoClient(db, "a", durability="none") as c:
        c.remember("keep me", tags=["t"])
        before = snapshot(db)
        with pytest.raises(InvalidInput, match="needs tags"):
            c.forget_where()
        with pytest.raises(InvalidInput):
            c.forget_where(tags=[])
        assert snapshot(db) == before
        assert c.forget_where(scope=c.home_scope) == 1
