"""The PostgreSQL schema of a Mnemo database: its tables, the triggers that keep the chain append-only,
its version, and the migrations that bring an older schema up to date (docs/POSTGRES.md).

Every table is named `mnemo_*` in the first schema of the connection's search_path, so one PostgreSQL
database can hold several Mnemo databases in several schemas. The chain lives in `mnemo_entries` (the
exact entry bytes, as in the log file) and `mnemo_payloads` (what a forget erases); `mnemo_head` is the
single row every writer locks `FOR UPDATE`, which is what keeps one order; the other tables are derived
from the chain in the same transaction as each commit, and `verify` checks them against it.

The SQL of each version is in the module of its group of versions (v1_v3, v4, v5_v8, v9_v11, v12), with why
that version is as it is; a routine a later version writes again is the earlier text edited (edits.py),
and the privileges a version gives on the tables it adds are given to the roles that write the earlier
ones (grants.py). The tables and the application role's privileges on them are in privileges.py. This
module numbers the versions and runs the migrations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..text_build import build_positions, build_text_index
from .privileges import APPLICATION_PRIVILEGES, TABLES
from .v1_v3 import V1, V2, V3
from .v4 import V4
from .v5_v8 import V5, V6, V7, V8
from .v9_v11 import V9, V10, V11
from .v12 import V12

SCHEMA_LOCK = "mnemo.schema"  # advisory lock key text: creators and migrators of one schema take turns

# MIGRATIONS[n] brings a schema of version n to version n + 1; BUILDS[n], when there is one, then fills
# what that version adds from the rows already there (on the migrating transaction's connection).
MIGRATIONS: dict[int, str] = {
    0: V1, 1: V2, 2: V3, 3: V4, 4: V5, 5: V6, 6: V7, 7: V8, 8: V9, 9: V10, 10: V11, 11: V12,
}
BUILDS: dict[int, Callable[[Any], None]] = {4: build_text_index, 8: build_positions, 10: build_positions}
SCHEMA_VERSION = max(MIGRATIONS) + 1  # the one place a new version is numbered: its key above


def migrate(conn: Any, from_version: int, to_version: int = SCHEMA_VERSION) -> None:
    """Run the migrations from `from_version` up to `to_version`, in the transaction the caller holds on
    the psycopg connection `conn`. A new schema (from version 0) has no rows to build from."""
    for version in range(from_version, to_version):
        conn.execute(MIGRATIONS[version])
        build = BUILDS.get(version)
        if build is not None and from_version > 0:
            build(conn)
    if from_version > 0:  # a new schema's meta row is written by its creator, with the version in it
        conn.execute(f"UPDATE mnemo_meta SET schema_version = {int(to_version)}")


__all__ = ["APPLICATION_PRIVILEGES", "BUILDS", "MIGRATIONS", "SCHEMA_LOCK", "SCHEMA_VERSION", "TABLES", "migrate"]
