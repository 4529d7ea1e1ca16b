"""The PostgreSQL schema of a Mnemo database: its tables, the triggers that keep the chain append-only,
its version, and the migrations that bring an older schema up to date (docs/POSTGRES.md).

Every table is named `mnemo_*` in the first schema of the connection's search_path, so one PostgreSQL
database can hold several Mnemo databases in several schemas. The chain lives in `mnemo_entries` (the
exact entry bytes, as in the log file) and `mnemo_payloads` (what a forget erases); `mnemo_head` is the
single row every writer locks `FOR UPDATE`, which is what keeps one order; the other tables are derived
from the chain in the same transaction as each commit, and `verify` checks them against it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SCHEMA_VERSION = 2

_V1 = """
CREATE TABLE mnemo_meta (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    schema_version integer NOT NULL,
    db_id bytea NOT NULL CHECK (length(db_id) = 16)
);
CREATE TABLE mnemo_head (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    seq bigint NOT NULL,
    hash bytea NOT NULL,
    ts_ns bigint NOT NULL,
    acl_seq bigint NOT NULL
);
CREATE TABLE mnemo_entries (
    seq bigint PRIMARY KEY CHECK (seq >= 0),
    op text NOT NULL,
    raw bytea NOT NULL,
    hash bytea NOT NULL
);
CREATE INDEX mnemo_entries_acl ON mnemo_entries (seq) WHERE op IN ('genesis', 'grant', 'revoke');
CREATE TABLE mnemo_payloads (
    seq bigint PRIMARY KEY,
    payload bytea NOT NULL
);
CREATE TABLE mnemo_records (
    id text PRIMARY KEY,
    scope text NOT NULL,
    ver integer NOT NULL
);
CREATE INDEX mnemo_records_scope ON mnemo_records (scope, id);
CREATE TABLE mnemo_versions (
    id text NOT NULL,
    ver integer NOT NULL,
    seq bigint NOT NULL UNIQUE,
    ts_ns bigint NOT NULL,
    agent text NOT NULL,
    size bigint NOT NULL,
    hash bytea NOT NULL,
    entry_len integer NOT NULL,
    payload_len integer NOT NULL,
    PRIMARY KEY (id, ver)
);
CREATE TABLE mnemo_tags (
    tag text COLLATE "C" NOT NULL,
    id text NOT NULL,
    PRIMARY KEY (tag, id)
);
CREATE INDEX mnemo_tags_id ON mnemo_tags (id);
CREATE TABLE mnemo_forgotten (
    id text PRIMARY KEY
);
"""

# Version 2: what keeps erased bytes out of the database's files, and the chain append-only.
_V2 = """
-- Stored as they are (no compression), so that what erasure removes is exactly the bytes written, and
-- never sampled into pg_statistic, whose catalog would otherwise keep tags and payload bytes that a
-- forget has erased (ANALYZE copies most-common values and histograms of a column there).
ALTER TABLE mnemo_payloads ALTER COLUMN payload SET STORAGE EXTERNAL;
ALTER TABLE mnemo_payloads ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE mnemo_tags ALTER COLUMN tag SET STATISTICS 0;
ALTER TABLE mnemo_tags ALTER COLUMN id SET STATISTICS 0;

CREATE FUNCTION mnemo_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'mnemo: % on % is refused: the chain is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER mnemo_entries_append_only BEFORE UPDATE OR DELETE ON mnemo_entries
    FOR EACH ROW EXECUTE FUNCTION mnemo_refuse_change();
CREATE TRIGGER mnemo_entries_no_truncate BEFORE TRUNCATE ON mnemo_entries
    FOR EACH STATEMENT EXECUTE FUNCTION mnemo_refuse_change();
-- A payload is written once and only ever deleted, by the erasure that a forget entry commits with.
CREATE TRIGGER mnemo_payloads_no_update BEFORE UPDATE ON mnemo_payloads
    FOR EACH ROW EXECUTE FUNCTION mnemo_refuse_change();
CREATE TRIGGER mnemo_payloads_no_truncate BEFORE TRUNCATE ON mnemo_payloads
    FOR EACH STATEMENT EXECUTE FUNCTION mnemo_refuse_change();
"""

# MIGRATIONS[n] brings a schema of version n to version n + 1.
MIGRATIONS: dict[int, str] = {0: _V1, 1: _V2}

TABLES = (
    "mnemo_meta", "mnemo_head", "mnemo_entries", "mnemo_payloads", "mnemo_records", "mnemo_versions",
    "mnemo_tags", "mnemo_forgotten",
)

# What the application role of a database may do (grant_application_role): append to the chain and
# erase payloads, keep the derived tables, and nothing else. It cannot update or delete an entry (no
# privilege, besides the trigger), disable a trigger or alter a table (it owns none).
APPLICATION_PRIVILEGES = {
    "mnemo_meta": "SELECT",
    "mnemo_head": "SELECT, UPDATE",
    "mnemo_entries": "SELECT, INSERT",
    "mnemo_payloads": "SELECT, INSERT, DELETE",
    "mnemo_records": "SELECT, INSERT, UPDATE, DELETE",
    "mnemo_versions": "SELECT, INSERT, DELETE",
    "mnemo_tags": "SELECT, INSERT, DELETE",
    "mnemo_forgotten": "SELECT, INSERT",
}


def migrate(execute: Callable[[str], Any], from_version: int, to_version: int = SCHEMA_VERSION) -> None:
    """Run the migrations from `from_version` up to `to_version`, in the caller's transaction."""
    for version in range(from_version, to_version):
        execute(MIGRATIONS[version])
    if from_version > 0:  # a new schema's meta row is written by its creator, with the version in it
        execute(f"UPDATE mnemo_meta SET schema_version = {int(to_version)}")


__all__ = ["APPLICATION_PRIVILEGES", "MIGRATIONS", "SCHEMA_VERSION", "TABLES", "migrate"]
