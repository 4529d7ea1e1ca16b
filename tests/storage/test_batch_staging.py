"""What a batch stages, and what its overlay shows before the commit: entries continue the chain from the
head they were staged on; a put must carry the version that follows the record's last one; a forget hides
records; grants change the batch's own copy of the ACL only; staged payloads read back without their salt;
and end to end, a transaction reads its own writes on both backends."""

from __future__ import annotations

import gc
import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient, NotFound
from mnemo._native import writepath
from mnemo.acl import Acl
from mnemo.chain.codec import SALT_SIZE, ZERO_HASH, Entry, make_entry
from mnemo.storage.batch import Batch, ChainError, Staged, apply_entry, stage_new_twin, stage_twin
from mnemo.storage.contract import Rec, Version
from mnemo.validation import Limits

AGENT = "agent-1"
SALT = b"s" * SALT_SIZE


def _body(rec_id: str, ver: int, size: int = 1) -> dict[str, Any]:
    return {"digest": b"d" * 32, "id": rec_id, "scope": "s", "size": size, "ver": ver}


class Committed:
    """A committed state: record r0 with `versions` versions, and an ACL."""

    def __init__(self, versions: int = 1) -> None:
        self.acl = Acl()
        vs = tuple(Version(v, v - 1, 10 * v, AGENT, v, bytes([v]) * 32, 100 * v, 20, 50 * v, 30)
                   for v in range(1, versions + 1))
        self.rec = Rec("r0", "s", ("t",), vs)

    def get_rec(self, rec_id: str) -> Rec | None:
        return self.rec if rec_id == "r0" else None


def _batch(base: Any = None, transactional: bool = True, head: tuple[int, bytes, int] = (4, b"h" * 32, 7)) -> Batch:
    return Batch(Committed() if base is None else base, head, transactional)


def test_staged_entries_continue_the_chain_from_the_head() -> None:
    b = _batch()
    first = b.stage("put", AGENT, _body("n1", 1), SALT + b"p", ("t",), new_record=True)
    assert (first.seq, first.prev) == (5, b"h" * 32)
    second = b.stage("forget", AGENT, {"ids": ["n1"]})
    assert (second.seq, second.prev) == (6, first.hash)
    assert second.hash == hashlib.sha256(second.raw).digest()
    assert (b.head_seq, b.head_hash) == (6, second.hash)
    assert [s.entry for s in b.staged] == [first, second]
    assert first.ts_ns >= 7 and second.ts_ns >= first.ts_ns


def test_a_staged_body_is_put_in_canonical_key_order_unless_it_is_trusted_to_be() -> None:
    b = _batch()
    grant = b.stage("grant", AGENT, {"scope": "team:a", "principal": "bob", "perms": ["read"]})
    assert list(grant.body) == ["perms", "principal", "scope"]
    assert grant.raw == make_entry(5, grant.ts_ns, b"h" * 32, "grant", AGENT,
                                   {"perms": ["read"], "principal": "bob", "scope": "team:a"}, trusted=True).raw
    trusted = b.stage("forget", AGENT, {"reason": None, "ids": []}, trusted=True)
    assert list(trusted.body) == ["reason", "ids"]  # as given


def test_an_entry_is_never_dated_before_the_head() -> None:
    future = 2**62
    b = _batch(head=(0, ZERO_HASH, future))
    assert b.stage("forget", AGENT, {"ids": []}).ts_ns == future
    assert b.head_ts == future


def test_a_put_must_carry_the_next_version() -> None:
    b = _batch(Committed(versions=2))
    with pytest.raises(ChainError) as exc:
        b.stage("put", AGENT, _body("r0", 2), SALT + b"p")
    assert str(exc.value) == "put of r0 version 2, expected 3"
    with pytest.raises(ChainError) as exc:
        b.stage("put", AGENT, _body("r0", 4), SALT + b"p")
    assert str(exc.value) == "put of r0 version 4, expected 3"
    with pytest.raises(ChainError) as exc:
        b.stage("put", AGENT, _body("n1", 2), SALT + b"p")
    assert str(exc.value) == "put of n1 version 2, expected 1"


def test_a_refused_put_does_not_change_what_the_next_put_is_checked_against() -> None:
    b = _batch(Committed(versions=2))
    with pytest.raises(ChainError):
        b.stage("put", AGENT, _body("r0", 1), SALT + b"p")
    b.stage("put", AGENT, _body("n1", 1), SALT + b"q")  # a new record: version 1, whatever r0 has
    assert [v.ver for v in b.recs["n1"].versions] == [1]  # type: ignore[union-attr]
    with pytest.raises(ChainError):
        b.stage("put", AGENT, _body("n2", 3), SALT + b"p")
    b.stage("put", AGENT, _body("r0", 3), SALT + b"r")
    assert [v.ver for v in b.recs["r0"].versions] == [1, 2, 3]  # type: ignore[union-attr]


def test_the_overlay_holds_each_version_a_put_adds() -> None:
    b = _batch(Committed(versions=2))
    e3 = b.stage("put", AGENT, _body("r0", 3, size=7), SALT + b"three", ("u",))
    e4 = b.stage("put", AGENT, _body("r0", 4, size=9), SALT + b"four", ("v", "w"))
    rec = b.get_rec("r0")
    assert rec is not None and rec.tags == ("v", "w") and rec.scope == "s"
    assert [v.ver for v in rec.versions] == [1, 2, 3, 4]
    assert rec.versions[:2] == Committed(versions=2).rec.versions
    latest = rec.latest
    assert (latest.seq, latest.ts_ns, latest.agent, latest.size, latest.hash) == (e4.seq, e4.ts_ns, AGENT, 9, e4.hash)
    assert (latest.slot_off, latest.entry_off, latest.entry_len) == (-1, -1, len(e4.raw))
    assert rec.versions[2].hash == e3.hash
    assert b.next_ver("r0") == 5
    assert b.next_ver("n9") == 1


def test_a_staged_new_record_reads_back_as_its_first_version() -> None:
    b = _batch()
    e = b.stage("put", AGENT, _body("n1", 1, size=3), SALT + b"new", ("t",), new_record=True)
    rec = b.get_rec("n1")
    assert rec is not None
    assert [(v.ver, v.seq, v.hash, v.slot_off) for v in rec.versions] == [(1, e.seq, e.hash, -1)]
    assert b.staged_packed(rec.latest) == b"new"
    assert b.next_ver("n1") == 2
    b.stage("put", AGENT, _body("n1", 2), SALT + b"again")
    assert [v.ver for v in b.recs["n1"].versions] == [1, 2]  # type: ignore[union-attr]


def test_a_new_record_put_takes_version_one_without_a_look_up() -> None:
    """`new_record` says the id was just made: the overlay does not look it up (the commit refuses an
    id that exists)."""
    b = _batch(Committed(versions=2))
    b.stage("put", AGENT, _body("r0", 1), SALT + b"p", new_record=True)
    assert [v.ver for v in b.recs["r0"].versions] == [1]  # type: ignore[union-attr]


def test_a_forget_hides_records_in_the_overlay_and_returns_what_it_dropped() -> None:
    b = _batch()
    b.stage("put", AGENT, _body("n1", 1), SALT + b"p", new_record=True)
    b.stage("forget", AGENT, {"ids": ["r0", "n1", "nobody"]})
    assert b.get_rec("r0") is None and b.get_rec("n1") is None and b.get_rec("nobody") is None
    assert b.recs == {"r0": None, "n1": None, "nobody": None}
    assert b.next_ver("r0") == 1
    view = _batch()
    entry = make_entry(5, 1, ZERO_HASH, "forget", AGENT, {"ids": ["r0", "nobody"]})
    assert apply_entry(view, entry, -1, 0, ()) == [Committed().rec]


def test_a_read_outside_what_the_batch_changed_goes_to_the_committed_state() -> None:
    base = Committed()
    b = _batch(base)
    assert b.get_rec("r0") is base.rec
    assert b.get_rec("zz") is None
    assert b.recs == {}


def test_grants_change_the_batchs_copy_of_the_acl_only() -> None:
    base = Committed()
    b = _batch(base)
    assert b.acl is base.acl
    b.stage("grant", AGENT, {"perms": ["read"], "principal": "bob", "scope": "team:a"})
    assert b.acl is not base.acl
    assert b.acl.effective("bob") == {"agent:bob": b.acl.effective("bob")["agent:bob"], "team:a": ("read",)}
    assert "team:a" not in base.acl.effective("bob")
    b.stage("revoke", AGENT, {"perms": ["read"], "principal": "bob", "scope": "team:a"})
    assert "team:a" not in b.acl.effective("bob")
    assert b.acl_for_write() is b.acl


def test_a_second_genesis_is_refused() -> None:
    b = _batch()
    with pytest.raises(ChainError) as exc:
        b.stage("genesis", AGENT, {"db_id": b"i" * 16, "owner": AGENT})
    assert str(exc.value) == "genesis entry after seq 0"


def test_staged_payloads_read_back_without_their_salt_and_only_for_staged_versions() -> None:
    b = _batch()
    e = b.stage("put", AGENT, _body("r0", 2), SALT + b"packed", ("t",))
    rec = b.recs["r0"]
    assert rec is not None
    assert b.staged_packed(rec.latest) == b"packed"
    assert b.staged_packed(rec.versions[0]) is None  # committed: in the log, not in the batch
    assert b.staged_packed(rec.latest._replace(seq=e.seq + 1)) is None
    assert b.staged_packed(rec.latest._replace(slot_off=0)) is None
    assert b.payloads == {e.seq: SALT + b"packed"}
    b.stage("forget", AGENT, {"ids": ["r0"]})
    assert b.payloads == {e.seq: SALT + b"packed"}  # a forget has no payload


def test_outside_a_transaction_nothing_is_kept_for_reads() -> None:
    b = _batch(transactional=False)
    b.stage("put", AGENT, _body("r0", 5), SALT + b"p")  # checked at the commit, not here
    assert b.recs == {} and b.payloads == {}
    assert len(b.staged) == 1 and b.staged[0].payload == SALT + b"p"


# -- end to end, on both backends ----------------------------------------------------------------------

def test_a_transaction_reads_its_own_writes(db: str) -> None:
    with MnemoClient(db, "owner", durability="none") as c:
        kept = c.remember("kept", tags=["k"])
        gone = c.remember("gone", tags=["g"])
        with c.transaction():
            new = c.remember("new", tags=["n"])
            assert c.get(new.id).content == "new"
            upd = c.update(kept.id, content="kept v2", tags=["k", "k2"])
            assert upd.version == 2
            assert c.get(kept.id).content == "kept v2"
            assert [r.content for r in c.history(kept.id)] == ["kept", "kept v2"]
            assert c.forget(gone.id) == 1
            with pytest.raises(NotFound):
                c.get(gone.id)
            assert [r.content for r in c.query()] == ["kept v2", "new"]
            again = c.update(new.id, content="new v2")
            assert again.version == 2 and c.get(new.id).content == "new v2"
            c.grant("bob", "team:a", ["read"])
            assert c.permissions("bob")["team:a"] == ("read",)
        assert [r.content for r in c.query()] == ["kept v2", "new v2"]
        assert c.get(new.id).version == 2
        assert c.verify().ok
    with MnemoClient(db, "bob", durability="none") as bob:
        assert bob.permissions()["team:a"] == ("read",)


def test_a_transaction_that_raises_commits_nothing(db: str) -> None:
    with MnemoClient(db, "owner", durability="none") as c:
        kept = c.remember("kept")
        head = c.head
        with pytest.raises(RuntimeError), c.transaction():
            c.remember("new")
            c.update(kept.id, content="v2")
            raise RuntimeError("abandon")
        assert c.head == head
        assert [r.content for r in c.query()] == ["kept"]


# -- a staged entry made in one call of the extension (mnemo/_writepath.c's staged) against its twin --------

staged_native = pytest.mark.skipif(writepath is None, reason="the C extension is not loaded")

STAGED_CASES: list[tuple[str, dict[str, Any], Any, Any, Any]] = [
    ("put", _body("n1", 1, 400), SALT + b"p", ("a", "b"), "the text"),
    ("put", _body("n1", 2), SALT + b"p", (), None),
    ("forget", {"ids": ["n1", "n2"]}, None, (), None),
    ("grant", {"perms": ["read"], "principal": "bob", "scope": "team:a"}, None, (), None),
]


@staged_native
@pytest.mark.parametrize(("op", "body", "payload", "tags", "text"), STAGED_CASES)
def test_staged_gives_the_twin_s_entry_and_staged_tuple(op: str, body: dict[str, Any], payload: Any, tags: Any,
                                                        text: Any) -> None:
    args = (7, 1_700_000_000_000_000_001, b"h" * 32, op, AGENT, body, payload, tags, text)
    made = writepath.staged(Entry, Staged, *args)
    twin = stage_twin(*args)
    assert type(made) is Staged and type(made.entry) is Entry
    assert made == twin and made.entry == make_entry(*args[:6], trusted=True)
    assert made.entry.hash == hashlib.sha256(made.entry.raw).digest()


@staged_native
def test_staged_tuples_are_untracked_only_where_no_cycle_can_pass_through_them() -> None:
    args: tuple[Any, ...] = (7, 9, b"h" * 32, "put", AGENT, _body("n1", 1), SALT + b"p", ("a", "b"), "text")
    made = writepath.staged(Entry, Staged, *args)
    assert not gc.is_tracked(made) and not gc.is_tracked(made.entry) and not gc.is_tracked(made.tags)
    # a body holding a list (a forget's ids) is tracked: so is the entry, and the staged tuple
    forget = writepath.staged(Entry, Staged, 7, 9, b"h" * 32, "forget", AGENT, {"ids": ["n1"]}, None, (), None)
    assert gc.is_tracked(forget.entry) and gc.is_tracked(forget)
    # tags that are not an exact tuple of exact str, or a text that is not an exact str, keep it tracked
    class Tag(str):
        pass

    for tags, text in ((["a"], None), ((Tag("a"),), None), (("a",), [1])):
        odd = writepath.staged(Entry, Staged, *args[:6], SALT + b"p", tags, text)
        assert not gc.is_tracked(odd.entry) and gc.is_tracked(odd)
    # a cycle through a tracked payload-like value is still found: nothing untracked holds it
    holder: list[Any] = []
    cyclic = writepath.staged(Entry, Staged, *args[:6], SALT + b"p", ("a",), holder)
    holder.append(cyclic)
    assert gc.is_tracked(cyclic)
    del holder, cyclic
    gc.collect()


@staged_native
def test_staged_refuses_classes_that_are_not_plain_tuples_and_leaves_odd_values_to_the_twin() -> None:
    args: tuple[Any, ...] = (7, 9, b"h" * 32, "put", AGENT, _body("n1", 1), SALT + b"p", ("a",), None)
    class WithDict(tuple):  # instances would carry a __dict__
        pass

    for bad in (tuple, list, WithDict, "Entry"):
        with pytest.raises(TypeError, match="plain subclasses of tuple"):
            writepath.staged(bad, Staged, *args)
    with pytest.raises(TypeError):
        writepath.staged(Entry, Staged, *args[:5], {"id": object()}, *args[6:])
    b = _batch()
    odd = b.stage("put", AGENT, {"digest": b"d" * 32, "id": "n9", "scope": "s", "size": 1.5, "ver": 1},
                  SALT + b"p", ("t",), True, True)
    assert odd.raw == make_entry(5, odd.ts_ns, b"h" * 32, "put", AGENT, odd.body, trusted=True).raw


def test_a_transaction_s_staged_puts_leave_the_cyclic_collector_nothing_to_go_through(tmp_path: Any) -> None:
    client = MnemoClient(str(tmp_path / "db"), AGENT, durability="none")
    try:
        with client.transaction():
            gc.collect()
            for i in range(50):
                client.remember(f"memory {i}", tags=["k", f"t{i}"], metadata={"i": i})
            young = [o for o in gc.get_objects(0) if type(o) in (Staged, Entry, tuple)]
            staged_young = [o for o in young if type(o) is Staged]
            if writepath is not None:
                assert staged_young == [] and young == []
            else:
                assert len(staged_young) == 50  # the twin's tuples are the collector's to untrack
        assert len(client.list_records()) == 50
    finally:
        client.close()


# -- a remember in a transaction staged in one step (Batch.stage_new), and what it leaves to the general path --

common_text = st.text(max_size=200)
common_tags = st.lists(st.text(min_size=1, max_size=20).filter(
    lambda t: "\x00" not in t and t != "memorytool" and not t.startswith("path:")), max_size=6)
flat_values = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
               | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10))
flat_meta = st.none() | st.dictionaries(st.text(max_size=10), flat_values, max_size=6)
LIMITS = Limits()


def _new_args(content: Any, tags: Any, meta: Any) -> tuple[Any, ...]:
    return (5, 1_700_000_000_000_000_000, b"h" * 32, AGENT, "a" * 32, "agent:x", SALT, content, tags, meta)


def _fast_new(content: Any, tags: Any, meta: Any, limits: Limits = LIMITS) -> Any:
    return writepath.stage_new(Entry, Staged, *_new_args(content, tags, meta), limits.max_content_bytes,
                               limits.max_tag_chars, limits.max_tags, limits.max_metadata_bytes)


@staged_native
@settings(max_examples=200, deadline=None)
@given(common_text | st.binary(max_size=200), common_tags, flat_meta)
def test_stage_new_gives_the_twin_s_put_for_the_common_input(content: Any, tags: list[str], meta: Any) -> None:
    made = _fast_new(content, tags, meta)
    twin = stage_new_twin(*_new_args(content, tags, meta), LIMITS)
    assert made is not None and twin is not None
    (staged, checked_meta), (twin_staged, twin_meta) = made, twin
    assert staged == twin_staged and list(checked_meta.items()) == list(twin_meta.items())
    assert staged.entry.body == {"digest": staged.entry.body["digest"], "id": "a" * 32, "scope": "agent:x",
                                 "size": len(content if isinstance(content, bytes) else content.encode()), "ver": 1}
    assert staged.text == (content if isinstance(content, str) else None)
    assert not gc.is_tracked(staged) and not gc.is_tracked(staged.entry)


@pytest.mark.parametrize(("content", "tags", "meta"), [
    ("c", ["memorytool", "path:/memories/a.md"], None),  # a memory-tool file: its path is checked elsewhere
    (123, [], None), ("c", [""], None), ("c", "tag", None), ("c", [], {"k": object()}), ("x" * 20, [], None),
])
def test_stage_new_stages_nothing_for_input_the_general_path_checks(content: Any, tags: Any, meta: Any) -> None:
    small = Limits(max_content_bytes=10)
    b = _batch()
    assert b.stage_new(AGENT, "n1", "s", SALT, content, tags, meta, small) is None
    assert b.staged == [] and b.head_seq == 4
    assert stage_new_twin(*_new_args(content, tags, meta), small) is None
    if writepath is not None:
        assert _fast_new(content, tags, meta, small) is None


def _outcome(fn: Any) -> Any:
    try:
        fn()
    except Exception as exc:  # what a refused write raises, compared as type and message
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize(("content", "tags", "scope"), [
    ("text", ["t"], "team:x"),  # may not write there
    (123, ["t"], "team:x"),  # bad content and may not write: the content is named first
    ("text", [""], "team:x"),
    ("text", ["t"], ""),  # a bad scope
    (b"\xff", ["t"], "bad scope*"),
    ("text", ["memorytool", "path:/memories/a.md"], "team:x"),
])
def test_a_refused_remember_in_a_transaction_says_what_it_says_outside_one(
    tmp_path: Any, content: Any, tags: Any, scope: str
) -> None:
    path = str(tmp_path / "db")
    MnemoClient(path, "owner").close()
    client = MnemoClient(path, "bob", durability="none")
    try:
        alone = _outcome(lambda: client.remember(content, tags=tags, scope=scope))
        assert alone is not None
        with client.transaction():
            inside = _outcome(lambda: client.remember(content, tags=tags, scope=scope))
            kept = client.remember("kept", tags=["k"])
        assert inside == alone
        assert [info.id for info in client.list_records()] == [kept.id]  # the refused write staged nothing
    finally:
        client.close()


def test_a_transaction_s_remembers_return_what_get_reads_back(tmp_path: Any) -> None:
    path = str(tmp_path / "db")
    MnemoClient(path, "owner").close()
    client = MnemoClient(path, "bob", durability="none")
    try:
        with client.transaction():
            made = [client.remember("ü text", tags=["b", "a", "b"], metadata={"z": 1, "a": None}),
                    client.remember(b"\x00bytes", tags=(), metadata=None),
                    client.remember("scoped", tags=["t"], scope="agent:bob")]
            assert [client.get(r.id) for r in made] == made
        assert [client.get(r.id) for r in made] == made
        assert made[0].tags == ("a", "b") and list(made[0].metadata) == ["a", "z"]
        assert [r.seq for r in made] == sorted(r.seq for r in made) and made[0].version == 1
    finally:
        client.close()
    owner = MnemoClient(path, "owner")
    try:
        assert owner.verify().ok
    finally:
        owner.close()
