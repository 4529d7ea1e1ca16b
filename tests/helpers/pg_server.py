"""What the PostgreSQL tests check on the server itself: the routines of the current schema version (and
a database taken back to an older version), and whether the server's data files hold some bytes."""

from __future__ import annotations

import glob
from array import array
from pathlib import Path

from mnemo.storage.postgres import schema as pg_schema
from mnemo.storage.postgres.text_index import unpack_places

from .pg import Schema

ROUTINES = [
    ("mnemo_check_copies", "f"), ("mnemo_check_erasure", "f"), ("mnemo_commit", "f"), ("mnemo_drop_vectors", "f"),
    ("mnemo_entry_str", "f"),
    ("mnemo_entry_value", "f"), ("mnemo_forget_ids", "f"), ("mnemo_index_text", "f"), ("mnemo_mp_end", "f"),
    ("mnemo_mp_items", "f"), ("mnemo_mp_items_at", "f"), ("mnemo_mp_skip", "f"), ("mnemo_mp_str", "f"),
    ("mnemo_payload_summary", "f"),
    ("mnemo_put", "p"), ("mnemo_refuse_change", "f"), ("mnemo_uint", "f"),
]


def undo_version_12(pg: Schema) -> None:
    """A database of the latest schema taken back to exactly version 11: the copies of the latest entries
    and payloads gone from mnemo_records with their trigger, version 10's mnemo_commit and mnemo_put in
    place (as that version makes them)."""
    pg.sql("DROP TRIGGER mnemo_records_copies ON mnemo_records")
    pg.sql("DROP TRIGGER mnemo_records_copies_updated ON mnemo_records")
    pg.sql("DROP FUNCTION mnemo_check_copies")
    pg.sql("ALTER TABLE mnemo_records DROP COLUMN raw, DROP COLUMN payload")
    v10 = pg_schema.MIGRATIONS[9]
    pg.sql("DROP FUNCTION mnemo_commit")
    pg.sql("DROP PROCEDURE mnemo_put")
    pg.sql(v10[v10.index("CREATE FUNCTION mnemo_commit(") :])  # (and version 10's mnemo_put after it)
    pg.sql("UPDATE mnemo_meta SET schema_version = 11")


def undo_version_11(pg: Schema) -> None:
    """A database of the latest schema taken back to exactly version 10: each term's positions packed as
    version 9 packs them (4 bytes each, big-endian), the column without its comment."""
    undo_version_12(pg)
    with pg.connect() as conn:
        rows = conn.execute("SELECT term, seq, positions FROM mnemo_terms WHERE positions IS NOT NULL").fetchall()
        for term, seq, places in rows:
            found = unpack_places(bytes(places), 1)
            assert found is not None
            old = b"".join(place.to_bytes(4, "big") for place in array("i", found[1]))
            conn.execute("UPDATE mnemo_terms SET positions = %s WHERE term = %s AND seq = %s", [old, term, seq])
        conn.execute("COMMENT ON COLUMN mnemo_terms.positions IS NULL")
        conn.execute("UPDATE mnemo_meta SET schema_version = 10")


def undo_version_10(pg: Schema) -> None:
    """A database of the latest schema taken back to exactly version 9: the latest version's columns gone
    from mnemo_records and the entry bytes from mnemo_payloads, version 2's mnemo_commit and version 9's
    mnemo_put in place (as those versions make them)."""
    undo_version_11(pg)
    pg.sql("ALTER TABLE mnemo_records DROP COLUMN seq, DROP COLUMN ts_ns, DROP COLUMN agent, DROP COLUMN size, "
           "DROP COLUMN hash, DROP COLUMN entry_len, DROP COLUMN payload_len")
    pg.sql("ALTER TABLE mnemo_payloads DROP COLUMN raw")
    v2, v9 = pg_schema.MIGRATIONS[1], pg_schema.MIGRATIONS[8]
    pg.sql("CREATE OR REPLACE " + v2[v2.index("FUNCTION mnemo_commit(") : v2.index("-- An append made")])
    pg.sql("CREATE OR REPLACE " + v9[v9.index("CREATE PROCEDURE mnemo_put(") + len("CREATE ") :])
    pg.sql("UPDATE mnemo_meta SET schema_version = 9")


def undo_version_9(pg: Schema) -> None:
    """A database of the latest schema taken back to exactly version 8: the terms' positions gone, their
    index as version 8 makes it, and version 5's mnemo_index_text and mnemo_put in place."""
    undo_version_10(pg)
    pg.sql("DROP INDEX mnemo_terms_term")
    pg.sql("ALTER TABLE mnemo_terms DROP COLUMN positions")
    v8 = pg_schema.MIGRATIONS[7]
    pg.sql(v8[v8.index("CREATE INDEX mnemo_terms_term"):])
    pg.sql("DROP FUNCTION mnemo_index_text")
    v5 = pg_schema.MIGRATIONS[4]
    pg.sql(v5[v5.index("CREATE FUNCTION mnemo_index_text("):])  # (and DROP PROCEDURE mnemo_put, then version 5's)
    pg.sql("UPDATE mnemo_meta SET schema_version = 8")


def undo_version_8(pg: Schema) -> None:
    """A database of the latest schema taken back to exactly version 7: the terms' key column and its
    covering index gone, version 5's index on left(term, TERM_KEY) in place (as version 5 makes it)."""
    undo_version_9(pg)
    pg.sql("DROP INDEX mnemo_terms_term")
    pg.sql("ALTER TABLE mnemo_terms DROP COLUMN key")
    v5 = pg_schema.MIGRATIONS[4]
    start = v5.index("CREATE INDEX mnemo_terms_term")
    pg.sql(v5[start:v5.index("\n", start)])
    start = v5.index("ALTER INDEX mnemo_terms_term")
    pg.sql(v5[start:v5.index("\n", start)])
    pg.sql("UPDATE mnemo_meta SET schema_version = 7")


def undo_version_7(pg: Schema) -> None:
    """A database of the latest schema taken back to exactly version 6: the vectors' stamps, the departures
    and the pruned stamp gone, and version 6's trigger function in place."""
    undo_version_8(pg)
    pg.sql("DROP TABLE mnemo_vectors_gone, mnemo_vector_state")
    pg.sql("ALTER TABLE mnemo_vectors DROP COLUMN stamp")
    pg.sql("DROP SEQUENCE mnemo_vector_stamps")
    v6 = pg_schema.MIGRATIONS[5]
    pg.sql("CREATE OR REPLACE " + v6[v6.index("FUNCTION mnemo_drop_vectors()"):v6.index("CREATE TRIGGER")])
    pg.sql("UPDATE mnemo_meta SET schema_version = 6")


def undo_version_6(pg: Schema) -> None:
    """A database of the latest schema taken back to exactly version 5: the vectors' tables and trigger gone."""
    undo_version_7(pg)
    pg.sql("DROP TABLE mnemo_vectors, mnemo_embedder")
    pg.sql("DROP FUNCTION mnemo_drop_vectors CASCADE")
    pg.sql("UPDATE mnemo_meta SET schema_version = 5")


def undo_version_5(pg: Schema) -> None:
    """A database of the latest schema taken back to exactly version 4: recall's tables and mnemo_index_text
    gone, and version 3's mnemo_put in place of version 5's."""
    undo_version_6(pg)
    pg.sql("DROP TABLE mnemo_docs, mnemo_terms, mnemo_text_scopes")
    pg.sql("DROP FUNCTION mnemo_index_text")
    pg.sql("DROP PROCEDURE mnemo_put")
    v3 = pg_schema.MIGRATIONS[2]
    pg.sql(v3[v3.index("CREATE PROCEDURE mnemo_put(") :])
    pg.sql("UPDATE mnemo_meta SET schema_version = 4")


def undo_version_4(pg: Schema) -> None:
    """A database of the latest schema taken back to exactly version 3: what versions 4 to 6 add, undone."""
    undo_version_5(pg)
    pg.sql("DROP TRIGGER mnemo_payloads_erased_by_forget ON mnemo_payloads")
    pg.sql("DROP FUNCTION mnemo_check_erasure, mnemo_forget_ids, mnemo_entry_str, mnemo_entry_value, "
           "mnemo_payload_summary, mnemo_mp_skip, mnemo_mp_end, mnemo_mp_items, mnemo_mp_items_at, mnemo_mp_str")
    pg.sql("UPDATE mnemo_meta SET schema_version = 3")


def data_directory(pg: Schema) -> Path | None:
    (row,) = pg.sql("SELECT current_setting('data_directory')")
    path = Path(row[0]) / "base"
    try:
        return path if any(path.iterdir()) else None
    except OSError:
        return None


def database_directory(pg: Schema) -> Path | None:
    """The folder of the files of `pg`'s database (base/OID in the server's data directory), which hold every
    relation of its schemas: what a test of the bytes a database leaves on disk reads, whatever else the
    server holds. None when this user cannot read it."""
    base = data_directory(pg)
    if base is None:
        return None
    ((oid,),) = pg.sql("SELECT oid FROM pg_database WHERE datname = current_database()")
    return base / str(oid)


def files_holding(base: Path, needle: bytes) -> list[str]:
    found = []
    for name in glob.glob(str(base / "**" / "*"), recursive=True):
        try:
            with open(name, "rb") as f:
                if needle in f.read():
                    found.append(name)
        except OSError:
            continue
    return found
