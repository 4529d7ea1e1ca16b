"""Versions 1 to 3 of the PostgreSQL schema (MIGRATIONS[0] to [2]): the chain's tables and the derived
ones, the triggers that keep the chain append-only, and the routines a commit and a put of new records run
in one call each."""

V1 = """
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
V2 = """
-- Stored as they are (no compression), so that what erasure removes is exactly the bytes written, and
-- never sampled into pg_statistic, whose catalog would otherwise keep tags and payload bytes that a
-- forget has erased (ANALYZE copies most-common values and histograms of a column there).
ALTER TABLE mnemo_payloads ALTER COLUMN payload SET STORAGE EXTERNAL;
ALTER TABLE mnemo_payloads ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE mnemo_tags ALTER COLUMN tag SET STATISTICS 0;

-- Saved compact ranges of the Merkle tree over the entries (docs/TRANSPARENCY.md §7), so that a client
-- continues the tree from the latest one instead of reading every entry. A cache: verify checks each.
CREATE TABLE mnemo_tree (
    size bigint PRIMARY KEY,
    range bytea NOT NULL
);

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

-- One commit in one call (one round trip while the head row is locked): the entries and payloads as
-- they are, and what they change of the derived tables, computed by the client from the chain. It runs
-- with its caller's privileges (SECURITY INVOKER), so it can do nothing the caller could not.
CREATE FUNCTION mnemo_commit(
    e_seq bigint[], e_op text[], e_raw bytea[], e_hash bytea[],
    p_seq bigint[], p_payload bytea[],
    stale text[], forgotten text[],
    new_id text[], new_scope text[], new_ver integer[],
    up_id text[], up_scope text[], up_ver integer[],
    v_id text[], v_ver integer[], v_seq bigint[], v_ts bigint[], v_agent text[], v_size bigint[],
    v_hash bytea[], v_elen integer[], v_plen integer[],
    retag text[], t_tag text[], t_id text[],
    head_seq bigint, head_hash bytea, head_ts bigint, head_acl bigint
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO mnemo_entries (seq, op, raw, hash) SELECT * FROM unnest(e_seq, e_op, e_raw, e_hash);
    INSERT INTO mnemo_payloads (seq, payload) SELECT * FROM unnest(p_seq, p_payload);
    IF cardinality(stale) > 0 THEN
        -- the erasure: in the transaction that commits the forget entry naming them
        DELETE FROM mnemo_payloads WHERE seq IN (SELECT seq FROM mnemo_versions WHERE id = ANY(stale));
        DELETE FROM mnemo_tags WHERE id = ANY(stale);
        DELETE FROM mnemo_versions WHERE id = ANY(stale);
        DELETE FROM mnemo_records WHERE id = ANY(stale);
    END IF;
    INSERT INTO mnemo_forgotten (id) SELECT DISTINCT unnest(forgotten) ON CONFLICT DO NOTHING;
    INSERT INTO mnemo_records (id, scope, ver) SELECT * FROM unnest(new_id, new_scope, new_ver);
    INSERT INTO mnemo_records (id, scope, ver) SELECT * FROM unnest(up_id, up_scope, up_ver)
        ON CONFLICT (id) DO UPDATE SET scope = EXCLUDED.scope, ver = EXCLUDED.ver;
    INSERT INTO mnemo_versions (id, ver, seq, ts_ns, agent, size, hash, entry_len, payload_len)
        SELECT * FROM unnest(v_id, v_ver, v_seq, v_ts, v_agent, v_size, v_hash, v_elen, v_plen);
    IF cardinality(retag) > 0 THEN
        DELETE FROM mnemo_tags WHERE id = ANY(retag);
    END IF;
    INSERT INTO mnemo_tags (tag, id) SELECT * FROM unnest(t_tag, t_id);
    UPDATE mnemo_head SET seq = head_seq, hash = head_hash, ts_ns = head_ts,
        acl_seq = greatest(acl_seq, head_acl);
END;
$$;

-- An append made without holding the head row while it was built (new records' puts, which depend on
-- nothing but the ACL): applied only if the head, and the last ACL entry, are still the ones it was built
-- on; otherwise nothing is written and the head found is returned, for the caller to build again on.
-- The head row is locked only for the length of this call.
CREATE FUNCTION mnemo_append(
    want_seq bigint, want_hash bytea, want_acl bigint,
    e_seq bigint[], e_op text[], e_raw bytea[], e_hash bytea[],
    p_seq bigint[], p_payload bytea[],
    new_id text[], new_scope text[], new_ver integer[],
    v_id text[], v_ver integer[], v_seq bigint[], v_ts bigint[], v_agent text[], v_size bigint[],
    v_hash bytea[], v_elen integer[], v_plen integer[],
    t_tag text[], t_id text[],
    head_seq bigint, head_hash bytea, head_ts bigint
) RETURNS TABLE (o_applied boolean, o_seq bigint, o_hash bytea, o_ts bigint, o_acl bigint)
LANGUAGE plpgsql AS $$
DECLARE
    h mnemo_head%ROWTYPE;
BEGIN
    SELECT * INTO h FROM mnemo_head FOR UPDATE;
    IF h.seq <> want_seq OR h.hash <> want_hash OR h.acl_seq <> want_acl THEN
        RETURN QUERY SELECT false, h.seq, h.hash, h.ts_ns, h.acl_seq;
        RETURN;
    END IF;
    PERFORM mnemo_commit(e_seq, e_op, e_raw, e_hash, p_seq, p_payload, '{}', '{}',
        new_id, new_scope, new_ver, '{}', '{}', '{}',
        v_id, v_ver, v_seq, v_ts, v_agent, v_size, v_hash, v_elen, v_plen,
        '{}', t_tag, t_id, head_seq, head_hash, head_ts, -1);
    RETURN QUERY SELECT true, head_seq, head_hash, head_ts, h.acl_seq;
END;
$$;
"""

# Version 3: scopes compared byte for byte (collation "C", as tags are), so that a scope prefix is an
# index range of mnemo_records_scope whatever the database's collation: `team:*` reads the records of
# those scopes by key instead of filtering every record. The column's index is rebuilt with it.
#
# And new records' puts committed in one call that builds their entries itself (mnemo_put): the seq,
# time and prev are the server's, taken under the head row, so a put never waits for, nor races, the
# client; with the flush of its commit in the same call. The entry bytes are those of the log file's
# encoder (codec.make_entry: msgpack of [1, seq, ts_ns, prev, op, agent, body]), which the client
# rebuilds from what the call returns and checks against the hashes it returns. Version 2's
# mnemo_append, which took entries built by the client on the head it had last seen, goes: nothing
# calls it, and a function that writes the chain should not stay behind unused.
V3 = """
DROP FUNCTION IF EXISTS mnemo_append;
ALTER TABLE mnemo_records ALTER COLUMN scope TYPE text COLLATE "C";

-- msgpack's encoding of a non-negative integer, in the fewest bytes (as msgpack-python packs it)
CREATE FUNCTION mnemo_uint(v bigint) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN v < 128 THEN substring(int8send(v) FROM 8 FOR 1)
        WHEN v < 256 THEN '\\xcc'::bytea || substring(int8send(v) FROM 8 FOR 1)
        WHEN v < 65536 THEN '\\xcd'::bytea || substring(int8send(v) FROM 7 FOR 2)
        WHEN v < 4294967296 THEN '\\xce'::bytea || substring(int8send(v) FROM 5 FOR 4)
        ELSE '\\xcf'::bytea || int8send(v)
    END
$$;

-- Puts of new records (which depend on nothing but the ACL), one entry each, in one call: under the
-- head row, each entry gets the next seq, a time no earlier than the last entry's, and the hash before
-- it; `tail` is the entry's packed op, agent and body. Applied only if the last ACL entry is still the
-- one the caller checked its writes against (else nothing is written, and the head found is returned).
-- With `sync`, the head row is released by a commit that does not wait for the flush, and the call then
-- waits for it by committing, with synchronous_commit on, a transaction that writes only its commit
-- record: so writers share flushes while the lock is held only for the work. Called outside a
-- transaction block (CALL), as its commits need.
CREATE PROCEDURE mnemo_put(
    want_acl bigint, sync boolean, p_ts bigint[], p_tail bytea[], p_payload bytea[],
    r_id text[], r_scope text[], v_agent text[], v_size bigint[], t_tag text[], t_put integer[],
    INOUT o_applied boolean DEFAULT NULL, INOUT o_seq bigint DEFAULT NULL, INOUT o_hash bytea DEFAULT NULL,
    INOUT o_ts bigint DEFAULT NULL, INOUT o_acl bigint DEFAULT NULL, INOUT o_times bigint[] DEFAULT NULL,
    INOUT o_hashes bytea[] DEFAULT NULL
) LANGUAGE plpgsql AS $$
DECLARE
    h mnemo_head%ROWTYPE;
    e_seq bigint[] := '{}';
    e_raw bytea[] := '{}';
    last_seq bigint;
    last_ts bigint;
    prev bytea;
    raw bytea;
BEGIN
    SELECT * INTO h FROM mnemo_head FOR UPDATE;
    o_seq := h.seq; o_hash := h.hash; o_ts := h.ts_ns; o_acl := h.acl_seq;
    o_applied := h.acl_seq = want_acl;
    IF NOT o_applied THEN
        RETURN;
    END IF;
    last_seq := h.seq; last_ts := h.ts_ns; prev := h.hash;
    o_times := '{}'; o_hashes := '{}';
    FOR i IN 1 .. cardinality(p_tail) LOOP
        last_seq := last_seq + 1;
        last_ts := greatest(p_ts[i], last_ts);
        raw := '\\x9701'::bytea || mnemo_uint(last_seq) || mnemo_uint(last_ts) || '\\xc420'::bytea || prev
            || p_tail[i];
        prev := sha256(raw);
        e_seq := e_seq || last_seq; e_raw := e_raw || raw; o_times := o_times || last_ts; o_hashes := o_hashes || prev;
    END LOOP;
    INSERT INTO mnemo_entries (seq, op, raw, hash) SELECT s, 'put', r, x FROM unnest(e_seq, e_raw, o_hashes) u(s, r, x);
    INSERT INTO mnemo_payloads (seq, payload) SELECT s, p FROM unnest(e_seq, p_payload) u(s, p);
    INSERT INTO mnemo_records (id, scope, ver) SELECT i, s, 1 FROM unnest(r_id, r_scope) u(i, s);
    INSERT INTO mnemo_versions (id, ver, seq, ts_ns, agent, size, hash, entry_len, payload_len)
        SELECT i, 1, s, t, a, z, x, length(r), length(p)
        FROM unnest(r_id, e_seq, o_times, v_agent, v_size, o_hashes, e_raw, p_payload) u(i, s, t, a, z, x, r, p);
    INSERT INTO mnemo_tags (tag, id) SELECT g, r_id[k] FROM unnest(t_tag, t_put) u(g, k);
    UPDATE mnemo_head SET seq = last_seq, hash = prev, ts_ns = last_ts;
    IF sync THEN
        COMMIT;
        PERFORM set_config('synchronous_commit', 'on', true);
        PERFORM pg_current_xact_id();
    END IF;
END;
$$;
"""
