"""What the PostgreSQL backend does with rows changed behind its back (by a superuser, triggers off) when it
reads them, outside verify: a damaged ACL entry or chain entry is an IntegrityError naming its seq, the
tree head continues from a saved compact range and never uses one larger than the chain, missing entries
are named, a SQL error while reading the log is a StorageError, and counts inside a transaction read no
payloads. Also the log's payload states and the spacing of saved tree ranges, which damage shows."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.pg import Schema

from mnemo import MnemoClient, StorageError
from mnemo.audit import read_chain
from mnemo.chain.codec import make_entry
from mnemo.chain.tree import CompactRange
from mnemo.errors import IntegrityError
from mnemo.storage.postgres import chain as pg_chain
from mnemo.storage.postgres import store as pg_store

OWNER = "owner"


def _damage(pg: Schema, *statements: str, params: Any = None) -> None:
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")  # no append-only trigger stops this session
        for statement in statements:
            conn.execute(statement, params)


def _path(pg: Schema) -> str:
    return pg_store.display_name(pg.url)


# -- ACL entries ----------------------------------------------------------------------------------------


def _two_grants(pg: Schema) -> None:
    """seq 1 and seq 2: grants."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        c.grant("bob", "team:*", ["read"])
        c.grant("carol", "team:*", ["read"])


@pytest.mark.parametrize(("raw", "why"), [
    (b"\xc1", "entry is not valid msgpack: "),
    (make_entry(2, 1, b"\x00" * 32, "grant", OWNER, {"scope": "team:*"}).raw, "'principal'"),  # a grant of no one
], ids=["bytes", "body"])
def test_an_acl_entry_that_does_not_read_fails_the_open(pg: Schema, raw: bytes, why: str) -> None:
    _two_grants(pg)
    _damage(pg, "UPDATE mnemo_entries SET raw = %s WHERE seq = 2", params=[raw])
    with pytest.raises(IntegrityError) as exc:
        MnemoClient(pg.url, OWNER, readonly=True)
    assert str(exc.value) == f"{_path(pg)}: the ACL entry at seq 2 is unreadable: {why}"


def test_an_acl_row_holding_another_seqs_entry_fails_the_open(pg: Schema) -> None:
    _two_grants(pg)
    _damage(pg, "UPDATE mnemo_entries SET raw = (SELECT raw FROM mnemo_entries WHERE seq = 1) WHERE seq = 2")
    with pytest.raises(IntegrityError) as exc:
        MnemoClient(pg.url, OWNER, readonly=True)
    assert str(exc.value) == f"{_path(pg)}: the ACL entry at seq 2 is unreadable: its bytes say seq 1"


def test_a_damaged_acl_entry_committed_by_another_store_fails_the_refresh(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, durability="none") as reader:
        with MnemoClient(pg.url, OWNER, durability="none") as other:
            other.grant("bob", "team:*", ["read"])  # seq 1
        _damage(pg, "UPDATE mnemo_entries SET raw = '\\xc1'::bytea WHERE seq = 1")
        with pytest.raises(IntegrityError) as exc:
            reader.stats()  # refreshes: the head's acl_seq is now 1
        assert str(exc.value) == f"{_path(pg)}: the ACL entry at seq 1 is unreadable: entry is not valid msgpack: "


# -- the tree head ------------------------------------------------------------------------------------------


def _chain(pg: Schema, n: int) -> list[bytes]:
    """A chain of the genesis and n puts; its entries' bytes."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        for i in range(n):
            c.remember(f"r{i}")
    return [item.entry.raw for item in read_chain(pg.url)]


def _range(raws: list[bytes]) -> bytes:
    compact = CompactRange()
    compact.add_entries(raws)
    return compact.to_bytes()


@pytest.mark.parametrize("saved", [5, 7])  # part of the chain, or all of it (as a store saves it on close)
def test_the_tree_head_continues_from_the_saved_range_and_reads_only_the_entries_after_it(pg: Schema, saved: int
                                                                                          ) -> None:
    raws = _chain(pg, 6)  # seqs 0..6
    with MnemoClient(pg.url, OWNER, readonly=True) as c:
        expected = c.tree_head()
    assert expected[0] == 7
    pg.sql("INSERT INTO mnemo_tree (size, range) VALUES (%s, %s)", [saved, _range(raws[:saved])])
    # The entries the saved range covers (but the genesis) are gone: only the ones after it are read.
    _damage(pg, "DELETE FROM mnemo_entries WHERE seq BETWEEN 1 AND %s", params=[saved - 1])
    with MnemoClient(pg.url, OWNER, readonly=True) as c:
        assert c.tree_head() == expected


def test_a_saved_range_larger_than_the_chain_is_not_used(pg: Schema) -> None:
    raws = _chain(pg, 4)  # seqs 0..4
    with MnemoClient(pg.url, OWNER, readonly=True) as c:
        expected = c.tree_head()
    # A well-formed range of one entry more than the chain holds (so its own size check passes)
    pg.sql("INSERT INTO mnemo_tree (size, range) VALUES (6, %s)", [_range([*raws, b"\x00" * 40])])
    with MnemoClient(pg.url, OWNER, readonly=True) as c:
        assert c.tree_head() == expected == (5, expected[1])


def test_entries_missing_from_the_chain_fail_the_tree_head(pg: Schema) -> None:
    _chain(pg, 4)
    _damage(pg, "DELETE FROM mnemo_entries WHERE seq = 2")
    with MnemoClient(pg.url, OWNER, readonly=True) as c:
        for _ in range(2):  # and the first failure leaves no short tree behind for the next call
            with pytest.raises(IntegrityError) as exc:
                c.tree_head()
            assert str(exc.value) == f"{_path(pg)}: the entries up to seq 4 are not all there"


def test_a_store_saves_its_tree_range_again_only_a_full_interval_after_its_last(pg: Schema,
                                                                                 monkeypatch: pytest.MonkeyPatch
                                                                                 ) -> None:
    monkeypatch.setattr(pg_chain, "TREE_SAVE_EVERY", 4)

    def saved() -> list[int]:
        return [size for (size,) in pg.sql("SELECT size FROM mnemo_tree ORDER BY size")]

    with MnemoClient(pg.url, OWNER, durability="none") as c:
        for i in range(4):
            c.remember(f"r{i}")
        assert c.tree_head()[0] == 5
        c.checkpoint()  # no signing key: only saves the tree range
        assert saved() == [5]
        for i in range(3):
            c.remember(f"s{i}")
            c.tree_head()
            c.checkpoint()
            assert saved() == [5]  # 6, 7, 8: less than 4 entries past the one saved
        c.remember("t")
        assert c.tree_head()[0] == 9
        c.checkpoint()
        assert saved() == [5, 9]


# -- the log --------------------------------------------------------------------------------------------------


def test_the_logs_payload_states(db: str) -> None:
    """From the genesis on: a live put's payload is there, a forgotten put's is erased, and an entry that
    never had one (the genesis, a grant) has none."""
    with MnemoClient(db, OWNER, durability="none") as c:
        c.remember("kept")
        gone = c.remember("gone")
        c.forget(gone.id, reason="asked")
        c.grant("bob", "team:*", ["read"])
    assert [(item.entry.seq, item.entry.op, item.state) for item in read_chain(db)] == [
        (0, "genesis", "none"), (1, "put", "ok"), (2, "put", "erased"), (3, "forget", "ok"), (4, "grant", "none"),
    ]


@pytest.mark.parametrize(("raw", "why"), [
    ("'\\xc1'::bytea", "the entry at seq 2 does not decode: entry is not valid msgpack: "),
    ("(SELECT raw FROM mnemo_entries WHERE seq = 3)", "the row of seq 2 holds the entry of seq 3"),
], ids=["not msgpack", "another seq's"])
def test_a_log_entry_that_does_not_read_is_named(pg: Schema, raw: str, why: str) -> None:
    _chain(pg, 3)
    _damage(pg, f"UPDATE mnemo_entries SET raw = {raw} WHERE seq = 2")
    with pytest.raises(IntegrityError) as exc:
        list(read_chain(pg.url))
    assert str(exc.value) == f"{_path(pg)}: {why}"


def test_a_sql_error_while_reading_the_log_is_a_storage_error(pg: Schema) -> None:
    _chain(pg, 2)
    pg.sql("ALTER TABLE mnemo_payloads RENAME TO mnemo_payloads_gone")  # the open does not read it; the log does
    with pytest.raises(StorageError) as exc:
        list(read_chain(pg.url))
    assert str(exc.value) == f'PostgreSQL at {_path(pg)} failed: relation "mnemo_payloads" does not exist'


# -- counts ---------------------------------------------------------------------------------------------------


def test_counts_inside_a_transaction_read_no_payloads(pg: Schema) -> None:
    """As outside a transaction: counting needs no payload, so a committed record whose payload row is gone
    is still counted (reading it is what fails)."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        rec = c.remember("committed", tags=["t"])
    _damage(pg, "DELETE FROM mnemo_payloads WHERE seq = 1",  # and its record's copy (schema version 12)
            "UPDATE mnemo_records SET raw = NULL, payload = NULL WHERE seq = 1")
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        assert (c.stats()["records"], c.stats()["versions"], c.stats()["tags"]) == (1, 1, 1)
        with c.transaction():
            c.remember("staged", tags=["u"])
            stats = c.stats()
            assert (stats["records"], stats["versions"], stats["tags"]) == (2, 2, 2)
        with pytest.raises(IntegrityError):
            c.get(rec.id)


# -- selects that send no content ---------------------------------------------------------------------------


def test_a_listing_checks_the_payload_it_does_not_send(pg: Schema) -> None:
    """list_records and forget_where take a record's tags from its put, checked by the digest and length the
    server computes of the payload: a changed payload, or a missing one, fails them as it fails a query,
    and nothing is forgotten."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        rec = c.remember("listed", tags=["t"])
    for damages, why in [  # a latest payload in both places it is kept: its row and its record's copy
        (["UPDATE mnemo_payloads SET payload = payload || '\\x00'::bytea WHERE seq = 1",
          "UPDATE mnemo_records SET payload = payload || '\\x00'::bytea WHERE seq = 1"],
         "the payload of seq 1 is not served: it does not match the digest its chain entry commits to"),
        (["UPDATE mnemo_records SET scope = 'agent:other'"],
         "the payload of seq 1 is not served: its entry is not the put of record {id} version 1 in scope agent:other"),
        (["DELETE FROM mnemo_payloads WHERE seq = 1", "UPDATE mnemo_records SET raw = NULL, payload = NULL"],
         "the payload of record {id} version 1 (seq 1) is missing, though the record is live"),
    ]:
        _damage(pg, *damages)
        with MnemoClient(pg.url, OWNER, durability="none") as c:
            for read in (lambda: c.list_records(tags=["t"]), lambda: c.list_records(),
                         lambda: c.forget_where(tags=["t"]), lambda: c.query(tags=["t"])):
                with pytest.raises(IntegrityError) as exc:
                    read()
                assert str(exc.value) == f"{_path(pg)}: {why.format(id=rec.id)}"
    assert pg.sql("SELECT op FROM mnemo_entries ORDER BY seq") == [("genesis",), ("put",)]
