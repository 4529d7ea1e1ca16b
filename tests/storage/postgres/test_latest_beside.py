"""Schema version 10 on PostgreSQL: a record's latest version beside it in mnemo_records, and each payload
row's entry bytes beside the payload, so that a hit of a record of one version was read by two look-ups
by key (the record, its payload row; one since version 12, which keeps the latest payload on the
record's row: test_payload_beside.py); the migration from version 9 fills both for the rows already
there, and every record reads back as it was written."""

from __future__ import annotations

import pytest
from helpers.pg import AppRole, Schema
from helpers.pg_reads import migrated_alike, read_loops, taken_back, written_after_a_migration
from helpers.pg_server import ROUTINES, undo_version_10

from mnemo import MnemoClient
from mnemo.record import MemoryRecord

OWNER = "owner"
SAME_AS_VERSIONS = (
    "SELECT count(*) FROM mnemo_records r JOIN mnemo_versions v ON v.id = r.id AND v.ver = r.ver "
    "WHERE (r.seq, r.ts_ns, r.agent, r.size, r.hash, r.entry_len, r.payload_len) "
    "= (v.seq, v.ts_ns, v.agent, v.size, v.hash, v.entry_len, v.payload_len)"
)
SAME_AS_ENTRIES = "SELECT count(*) FROM mnemo_payloads p JOIN mnemo_entries e ON e.seq = p.seq AND e.raw = p.raw"


def test_a_version_9_database_migrates_and_reads_every_record_back(pg: Schema, app_role: AppRole) -> None:
    made, taken = taken_back(pg, undo_version_10)
    columns = pg.sql("SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = "
                     "current_schema() AND table_name IN ('mnemo_records', 'mnemo_payloads') "
                     "ORDER BY 1, ordinal_position")
    assert columns == [("mnemo_payloads", "seq"), ("mnemo_payloads", "payload"), ("mnemo_records", "id"),
                       ("mnemo_records", "scope"), ("mnemo_records", "ver")]
    migrated_alike(pg, 9, taken)
    assert pg.sql("SELECT count(*) FROM mnemo_records") == pg.sql(SAME_AS_VERSIONS) == [(3,)]
    # the payloads of the 5 live versions and the forget's reason, each beside its entry
    assert pg.sql("SELECT count(*) FROM mnemo_payloads") == pg.sql(SAME_AS_ENTRIES) == [(6,)]
    assert pg.sql("SELECT attstattarget, attstorage, attnotnull FROM pg_attribute "
                  "WHERE attrelid = 'mnemo_payloads'::regclass AND attname = 'raw'") == [(0, "e", True)]
    assert pg.routines() == ROUTINES  # what the migration leaves is what a new database has
    with MnemoClient(app_role.url, OWNER) as c:  # the application role writes the new columns too
        written_after_a_migration(c, made)
    assert pg.sql("SELECT count(*) FROM mnemo_records") == pg.sql(SAME_AS_VERSIONS) == [(4,)]
    assert pg.sql("SELECT count(*) FROM mnemo_payloads") == pg.sql(SAME_AS_ENTRIES)


def test_a_hit_of_one_version_is_one_look_up(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """A query's hits are found by the tag index; each one's record, which holds its latest entry and
    payload (schema version 12: no payload row is looked up); the versions table is read only for the
    record of several versions, and the entries table not at all. A get reads the record alone (its tags
    are its payload's: mnemo_tags is not read)."""
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        ones = [c.remember(f"r{i}", tags=["hit"]).id for i in range(5)]
        several = c.remember("v1", tags=["hit"])
        c.update(several.id, content="v2")
        c.update(several.id, content="v3")
        c.remember("not a hit", tags=["miss"])
        loops = read_loops(c, monkeypatch, lambda: c.query(tags=["hit"]))
        assert loops == {"mnemo_tags_pkey": 1, "mnemo_records_pkey": 6, "mnemo_versions_pkey": 1}
        found: list[MemoryRecord] = c.query(tags=["hit"])
        assert [(r.id, r.content, r.version) for r in found] == sorted(
            [(i, f"r{k}", 1) for k, i in enumerate(ones)] + [(several.id, "v3", 3)])
        assert c.get(several.id).created_at == several.created_at
        loops = read_loops(c, monkeypatch, lambda: c.get(ones[0]))
        assert loops == {"mnemo_records_pkey": 1, "mnemo_versions_pkey": 0}
