"""Version 12 of the PostgreSQL schema (MIGRATIONS[11]): a record's latest payload, and its entry's bytes,
kept on the record's row, so that a query's hit is one look-up by key and its row."""

from __future__ import annotations

from .edits import edited
from .v9_v11 import V10

_COPY = "raw, payload"
_RECORD_V10 = "INSERT INTO mnemo_records (id, scope, ver, seq, ts_ns, agent, size, hash, entry_len, payload_len)"
# the payload and entry bytes of each version a commit writes, by its seq (a version's put is among them)
_COMMITTED = (
    "\n        LEFT JOIN (SELECT p.s, e.r, p.p FROM unnest(p_seq, p_payload) p(s, p) JOIN unnest(e_seq, e_raw) e(s, r) "
    "ON e.s = p.s) c(s, r, p) ON c.s = w.seq"
)

# Version 10's mnemo_commit and mnemo_put, each writing the latest version's copies on the record's row too
_COMMIT_V12 = edited(V10[V10.index("CREATE FUNCTION mnemo_commit("):V10.index("CREATE PROCEDURE mnemo_put(")], [
    (_RECORD_V10, _RECORD_V10[:-1] + f", {_COPY})"),
    ("        SELECT n.i, n.s, n.v, w.seq, w.ts, w.agent, w.size, w.hash, w.elen, w.plen\n",
     "        SELECT n.i, n.s, n.v, w.seq, w.ts, w.agent, w.size, w.hash, w.elen, w.plen, c.r, c.p\n"),
    ("            w(id, ver, seq, ts, agent, size, hash, elen, plen) ON w.id = n.i AND w.ver = n.v",
     "            w(id, ver, seq, ts, agent, size, hash, elen, plen) ON w.id = n.i AND w.ver = n.v" + _COMMITTED),
    ("entry_len = EXCLUDED.entry_len, payload_len = EXCLUDED.payload_len;",
     "entry_len = EXCLUDED.entry_len, payload_len = EXCLUDED.payload_len,\n"
     "            raw = EXCLUDED.raw, payload = EXCLUDED.payload;"),
])
_PUT_V12 = edited(V10[V10.index("CREATE PROCEDURE mnemo_put("):], [
    (_RECORD_V10 + "\n        SELECT i, c, 1, s, t, a, z, x, length(r), length(p)\n",
     _RECORD_V10[:-1] + f", {_COPY})\n        SELECT i, c, 1, s, t, a, z, x, length(r), length(p), r, p\n"),
])

# Version 12: a query's hit read by one index descent and its row, where version 10 made two (the record,
# then its payload row by seq). mnemo_records holds, beside its latest version's columns, that version's
# entry bytes and payload (`raw`, `payload`: the copy of its row of mnemo_payloads, which stays the chain's
# and keeps every version), so a read of a record's latest version finds all it checks on the record's row,
# and checks it exactly as before (the entry's hash, that it is the put of this record, version and scope,
# the payload's digest). The copy is written by mnemo_commit and mnemo_put with the row, from the payloads
# they insert in the same call; the trigger mnemo_records_copies refuses, after any INSERT or UPDATE of
# record rows by any role, a row whose copy is not exactly the payload row of its seq. A NULL copy (both
# columns) means that no payload row of its seq exists: the payload is gone (erased by a forget, which
# deletes the record's row in the same transaction, or lost before the migration, which leaves such a
# record without a copy); a NULL copy beside a payload row of its seq is refused, so that no role hides a
# stored payload behind a missing copy. So the application role, which keeps mnemo_records, can point a
# record at another stored payload row, as it could point its seq, but cannot put content on it that no
# payload row holds, nor take the copy of one that is there.
#
# Erasure: a forget deletes the record's row with its payloads (mnemo_commit, unchanged), and an update
# replaces the row, leaving its former copy in a dead row until compact, which now rewrites mnemo_records
# too (VACUUM FULL). Like the payload table's, both columns are stored uncompressed and never sampled into
# pg_statistic. The migration fills the copies from the payload rows (a record whose payload row is gone
# keeps NULLs, and verify names it).
V12 = """
ALTER TABLE mnemo_records ADD COLUMN raw bytea, ADD COLUMN payload bytea;
ALTER TABLE mnemo_records ALTER COLUMN raw SET STORAGE EXTERNAL, ALTER COLUMN payload SET STORAGE EXTERNAL;
ALTER TABLE mnemo_records ALTER COLUMN raw SET STATISTICS 0, ALTER COLUMN payload SET STATISTICS 0;
UPDATE mnemo_records r SET raw = p.raw, payload = p.payload FROM mnemo_payloads p WHERE p.seq = r.seq;

-- After each INSERT or UPDATE of record rows: each row's copy is the payload row of its seq, byte for byte,
-- or NULL (both columns) when no payload row of its seq exists. Names resolve in the table's own schema
-- only (as in mnemo_check_erasure).
CREATE FUNCTION mnemo_check_copies() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
    refused text;
BEGIN
    PERFORM set_config('search_path', format('%I, pg_catalog, pg_temp', TG_TABLE_SCHEMA), true);
    SELECT c.id INTO refused FROM copies c
    WHERE NOT EXISTS (
        SELECT 1 FROM mnemo_payloads p WHERE p.seq = c.seq AND p.raw = c.raw AND p.payload = c.payload)
    AND (c.raw IS NOT NULL OR c.payload IS NOT NULL OR EXISTS (SELECT 1 FROM mnemo_payloads p WHERE p.seq = c.seq))
    ORDER BY c.id LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'mnemo: % of record % on mnemo_records is refused: its raw and payload must be those of '
            'the payload row of its seq (mnemo_payloads)', TG_OP, refused
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER mnemo_records_copies AFTER INSERT ON mnemo_records
    REFERENCING NEW TABLE AS copies FOR EACH STATEMENT EXECUTE FUNCTION mnemo_check_copies();
CREATE TRIGGER mnemo_records_copies_updated AFTER UPDATE ON mnemo_records
    REFERENCING NEW TABLE AS copies FOR EACH STATEMENT EXECUTE FUNCTION mnemo_check_copies();

DROP FUNCTION mnemo_commit;
DROP PROCEDURE mnemo_put;
""" + _COMMIT_V12 + _PUT_V12
