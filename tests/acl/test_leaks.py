"""Nothing about a scope an agent cannot read leaks through the side doors: counts, the audit trail,
other agents' grants, or the error for an id that exists elsewhere."""

from __future__ import annotations

import io

import pytest

from mnemo import MnemoClient, NotFound, PermissionDenied, RecordUnavailable


@pytest.fixture
def clients(db: str):  # type: ignore[no-untyped-def]
    owner = MnemoClient(db, "owner", durability="none")
    alice = MnemoClient(db, "alice", durability="none")
    bob = MnemoClient(db, "bob", durability="none")
    yield owner, alice, bob
    for c in (owner, alice, bob):
        c.close()


def test_counts_cover_only_readable_records(clients) -> None:  # type: ignore[no-untyped-def]
    owner, alice, bob = clients
    for i in range(5):
        alice.remember(f"alice {i}", tags=[f"secret-tag-{i}"])
    bob.remember("bob's", tags=["mine"])
    assert bob.stats()["records"] == 1 and bob.stats()["tags"] == 1
    assert alice.stats()["records"] == 5 and alice.stats()["tags"] == 5
    assert owner.stats()["records"] == 6
    owner.grant("bob", "agent:alice", ["read"])
    assert bob.stats()["records"] == 6


def test_unreadable_id_is_indistinguishable_from_a_missing_one(clients) -> None:  # type: ignore[no-untyped-def]
    _owner, alice, bob = clients
    rec = alice.remember("private")
    missing = "0" * 32
    for call in (bob.get, bob.history, bob.forget, lambda i: bob.update(i, content="x")):
        with pytest.raises(RecordUnavailable) as exists:
            call(rec.id)
        with pytest.raises(RecordUnavailable) as absent:
            call(missing)
        assert str(exists.value).replace(rec.id, "ID") == str(absent.value).replace(missing, "ID")
        assert isinstance(exists.value, NotFound) and isinstance(exists.value, PermissionDenied)


def test_audit_export_and_others_grants_need_admin_on_everything(clients) -> None:  # type: ignore[no-untyped-def]
    owner, alice, bob = clients
    alice.remember("in team:hr", scope="agent:alice")
    owner.grant("alice", "team:hr", ["write"])
    for include_content in (False, True):
        with pytest.raises(PermissionDenied, match="needs admin on"):
            bob.export_audit(io.StringIO(), include_content=include_content)
    with pytest.raises(PermissionDenied):
        bob.permissions("alice")
    assert "team:hr" in owner.permissions("alice")
    assert "team:hr" in alice.permissions()
    assert owner.export_audit(io.StringIO()) > 0
