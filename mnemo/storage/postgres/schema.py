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

from .text_index import TERM_KEY, build_positions, build_text_index

SCHEMA_LOCK = "mnemo.schema"  # advisory lock key text: creators and migrators of one schema take turns

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
_V3 = """
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

# Version 4: a payload row is deleted only by the erasure of a forget. The UPDATE that version 2 refuses
# could be made as a DELETE and an INSERT, and a DELETE alone erased content with no forget in the
# chain. A DELETE of payload rows is now refused, for every role, unless each row is the payload of a
# put whose record a forget entry after it names, that forget being one the statement's transaction
# appends (past the head row, which a commit moves last): what mnemo_commit does. The entries are read
# as they are: the put's record id and the forget's ids come from the entry bytes (msgpack, as
# codec.make_entry writes them), never from a derived table, which the application role can write.
#
# And what a reader checks a record's tags by without its content (mnemo_payload_summary): the
# payload's SHA-256, length and tags, which the client checks against the put's entry (the tags of a
# mnemo_tags row alone are not to be trusted: the application role writes that table).
#
# msgpack is read by small SQL functions the planner inlines into their callers (where a number or a
# string ends, the bytes of a string, the items of an array or a map), and by mnemo_mp_skip, one loop
# over the values it skips, for the rest: a call of a PL/pgSQL function costs far more than the few
# steps of a value. A value read from a table is copied once into memory before it is read: used as
# it is, a stored (TOAST) value would be fetched again for every byte read.
_V4 = """
-- The bytes of the msgpack string at byte `p` (from 0) of `b`, or NULL if none is there, whole.
CREATE FUNCTION mnemo_mp_str(b bytea, p integer) RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p < 0 OR p >= length(b) THEN NULL
        WHEN get_byte(b, p) BETWEEN 160 AND 191 THEN
            CASE WHEN p + 1 + get_byte(b, p) - 160 <= length(b)
                THEN substring(b FROM p + 2 FOR get_byte(b, p) - 160) END
        WHEN get_byte(b, p) = 217 AND p + 1 < length(b) THEN
            CASE WHEN p + 2 + get_byte(b, p + 1) <= length(b) THEN substring(b FROM p + 3 FOR get_byte(b, p + 1)) END
        WHEN get_byte(b, p) = 218 AND p + 2 < length(b) THEN
            CASE WHEN p + 3 + get_byte(b, p + 1) * 256 + get_byte(b, p + 2) <= length(b)
                THEN substring(b FROM p + 4 FOR get_byte(b, p + 1) * 256 + get_byte(b, p + 2)) END
        WHEN get_byte(b, p) = 219 AND p + 4 < length(b) THEN
            CASE WHEN p + 5 + ((get_byte(b, p + 1)::bigint * 256 + get_byte(b, p + 2)) * 256 + get_byte(b, p + 3)) * 256
                      + get_byte(b, p + 4) <= length(b)
                THEN substring(b FROM p + 6 FOR ((get_byte(b, p + 1) * 256 + get_byte(b, p + 2)) * 256
                                                  + get_byte(b, p + 3)) * 256 + get_byte(b, p + 4)) END
    END
$$;

-- The number of items of the msgpack array (`map` false) or map (true: its pairs) at byte `p` of `b`,
-- or NULL if there is none; mnemo_mp_items_at is where its first item begins.
CREATE FUNCTION mnemo_mp_items(b bytea, p integer, map boolean) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p < 0 OR p >= length(b) THEN NULL
        WHEN get_byte(b, p) BETWEEN CASE WHEN map THEN 128 ELSE 144 END AND CASE WHEN map THEN 143 ELSE 159 END
            THEN get_byte(b, p) & 15
        WHEN get_byte(b, p) = CASE WHEN map THEN 222 ELSE 220 END AND p + 2 < length(b)
            THEN get_byte(b, p + 1) * 256 + get_byte(b, p + 2)
        WHEN get_byte(b, p) = CASE WHEN map THEN 223 ELSE 221 END AND p + 4 < length(b)
            THEN ((get_byte(b, p + 1)::bigint * 256 + get_byte(b, p + 2)) * 256 + get_byte(b, p + 3)) * 256
                 + get_byte(b, p + 4)
    END
$$;
CREATE FUNCTION mnemo_mp_items_at(b bytea, p integer) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p + CASE get_byte(b, p) WHEN 220 THEN 3 WHEN 222 THEN 3 WHEN 221 THEN 5 WHEN 223 THEN 5 ELSE 1 END
$$;

-- Where the msgpack value at byte `p` of `b` ends, if it is one of the kinds an entry's fields are
-- (an integer, nil, a boolean, a float, a string or a bin of less than 64 kB; maybe past the end of `b`);
-- NULL for any other, which mnemo_mp_skip reads.
CREATE FUNCTION mnemo_mp_end(b bytea, p integer) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p < 0 OR p >= length(b) THEN NULL
        WHEN get_byte(b, p) < 128 OR get_byte(b, p) >= 224 OR get_byte(b, p) IN (192, 194, 195) THEN p + 1
        WHEN get_byte(b, p) BETWEEN 160 AND 191 THEN p + 1 + get_byte(b, p) - 160
        WHEN get_byte(b, p) IN (196, 217) AND p + 1 < length(b) THEN p + 2 + get_byte(b, p + 1)
        WHEN get_byte(b, p) IN (197, 218) AND p + 2 < length(b)
            THEN p + 3 + get_byte(b, p + 1) * 256 + get_byte(b, p + 2)
        WHEN get_byte(b, p) IN (204, 208) THEN p + 2
        WHEN get_byte(b, p) IN (205, 209) THEN p + 3
        WHEN get_byte(b, p) IN (202, 206, 210) THEN p + 5
        WHEN get_byte(b, p) IN (203, 207, 211) THEN p + 9
    END
$$;

-- Where the `k` msgpack values from byte `p` of `b` end; NULL if they do not end within `b`.
CREATE FUNCTION mnemo_mp_skip(b bytea, p integer, k bigint) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    size integer := length(b);
    t integer;
    w integer;
    n bigint;
BEGIN
    WHILE k > 0 LOOP
        IF p < 0 OR p >= size OR k > size THEN  -- every value takes a byte at least
            RETURN NULL;
        END IF;
        t := get_byte(b, p);
        k := k - 1;
        IF t < 128 OR t >= 224 OR t = 192 OR t = 194 OR t = 195 THEN  -- fixint, nil, bool
            p := p + 1;
        ELSIF t < 144 THEN  -- fixmap
            k := k + 2 * (t - 128); p := p + 1;
        ELSIF t < 160 THEN  -- fixarray
            k := k + t - 144; p := p + 1;
        ELSIF t < 192 THEN  -- fixstr
            p := p + 1 + t - 160;
        ELSIF t = 193 THEN  -- never used
            RETURN NULL;
        ELSIF t BETWEEN 202 AND 216 THEN  -- float, uint, int, fixext (with its type byte)
            p := p + 1 + CASE WHEN t IN (208, 204) THEN 1 WHEN t IN (209, 205) THEN 2 WHEN t IN (202, 206, 210) THEN 4
                              WHEN t IN (203, 207, 211) THEN 8 ELSE 1 + (1 << (t - 212)) END;
        ELSE  -- a length of 1, 2 or 4 bytes: bin, ext, str, array 16/32, map 16/32
            w := CASE WHEN t IN (196, 199, 217) THEN 1 WHEN t IN (197, 200, 218, 220, 222) THEN 2 ELSE 4 END;
            IF p + w >= size THEN
                RETURN NULL;
            END IF;
            n := get_byte(b, p + 1);
            FOR i IN 2 .. w LOOP
                n := n * 256 + get_byte(b, p + i);
            END LOOP;
            p := p + 1 + w;
            IF t >= 220 THEN
                k := k + n * CASE WHEN t >= 222 THEN 2 ELSE 1 END;
            ELSE
                p := p + n + CASE WHEN t BETWEEN 199 AND 201 THEN 1 ELSE 0 END;
            END IF;
        END IF;
    END LOOP;
    IF p > size THEN
        RETURN NULL;
    END IF;
    RETURN p;
END;
$$;

-- Where the value of `key` begins in the body of an entry of `op`, read from its bytes as the entry is
-- read ([1, seq, ts_ns, prev, op, agent, body], nothing after it; of a key given twice, the last); NULL
-- if the entry is of another op, holds no such key, or is not one entry of msgpack.
CREATE FUNCTION mnemo_entry_value(raw bytea, op text, key text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    b bytea := raw || ''::bytea;  -- read from its table once: a stored value is read again at every use
    want bytea := convert_to(key, 'UTF8');
    pos integer;
    body integer;
    found integer;
    n bigint;
    key bytea;
BEGIN
    IF mnemo_mp_items(b, 0, false) IS DISTINCT FROM 7 THEN
        RETURN NULL;
    END IF;
    pos := mnemo_mp_items_at(b, 0);
    FOR i IN 1 .. 4 LOOP  -- past the format, seq, time and prev
        pos := coalesce(mnemo_mp_end(b, pos), mnemo_mp_skip(b, pos, 1));
    END LOOP;
    IF mnemo_mp_str(b, pos) IS DISTINCT FROM convert_to(op, 'UTF8') THEN
        RETURN NULL;
    END IF;
    pos := mnemo_mp_end(b, pos);  -- past the op (a string)
    body := coalesce(mnemo_mp_end(b, pos), mnemo_mp_skip(b, pos, 1));  -- past the agent
    n := mnemo_mp_items(b, body, true);
    IF n IS NULL THEN
        RETURN NULL;
    END IF;
    pos := mnemo_mp_items_at(b, body);
    FOR i IN 1 .. least(n, length(b)) LOOP
        key := mnemo_mp_str(b, pos);
        pos := coalesce(mnemo_mp_end(b, pos), mnemo_mp_skip(b, pos, 1));
        IF key = want THEN
            found := pos;
        END IF;
        pos := coalesce(mnemo_mp_end(b, pos), mnemo_mp_skip(b, pos, 1));
        EXIT WHEN pos IS NULL;
    END LOOP;
    IF pos IS DISTINCT FROM length(b) THEN  -- the body's n pairs end where the entry does
        RETURN NULL;
    END IF;
    RETURN found;
END;
$$;

-- The string the body of an entry of `op` gives `key` (a put's `id`), as UTF-8; NULL if none.
CREATE FUNCTION mnemo_entry_str(raw bytea, op text, key text) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    b bytea := raw || ''::bytea;
    pos integer := mnemo_entry_value(b, op, key);
BEGIN
    RETURN mnemo_mp_str(b, pos);
END;
$$;

-- The record ids a forget entry names (its body's `ids`), as UTF-8; none if `raw` is not a forget's.
CREATE FUNCTION mnemo_forget_ids(raw bytea) RETURNS SETOF bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    b bytea := raw || ''::bytea;
    pos integer := mnemo_entry_value(b, 'forget', 'ids');
    n bigint := mnemo_mp_items(b, pos, false);  -- a value of the entry, which ends where the entry does:
    id bytea;                                   -- its items are all there
BEGIN
    pos := mnemo_mp_items_at(b, pos);
    FOR i IN 1 .. coalesce(n, 0) LOOP
        id := mnemo_mp_str(b, pos);
        IF id IS NOT NULL THEN
            RETURN NEXT id;
        END IF;
        pos := coalesce(mnemo_mp_end(b, pos), mnemo_mp_skip(b, pos, 1));
    END LOOP;
END;
$$;

-- What a reader checks a put's payload by when it does not read its content (a listing, a forget by
-- tags): its SHA-256 and length, and its tags, as the msgpack bytes of their array (a payload is 16
-- bytes of salt, then msgpack [content, tags, metadata]; NULL if it is not laid out so).
CREATE FUNCTION mnemo_payload_summary(payload bytea) RETURNS bytea[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    b bytea := payload || ''::bytea;  -- read from its table once: a stored value is read again at every use
    tags integer;
BEGIN
    IF mnemo_mp_items(b, 16, false) = 3 THEN
        tags := mnemo_mp_items_at(b, 16);
        tags := coalesce(mnemo_mp_end(b, tags), mnemo_mp_skip(b, tags, 1));  -- past the content
    END IF;
    RETURN ARRAY[sha256(b), int4send(length(b)), substring(b FROM tags + 1 FOR mnemo_mp_skip(b, tags, 1) - tags)];
END;
$$;

-- After each DELETE of payload rows: every row deleted must be the payload of a put whose record a
-- forget entry names, that forget lying past the head row (appended by this transaction, which moves
-- the head last: the puts of the payloads it erases are before it, at or below the head). Every row is
-- found by its key and the ids named are looked up in a hash table, in plans made once per session
-- (and never compiled: their cost, guessed on rows of no statistics, can pass jit_above_cost). Names
-- resolve in the table's own schema only: a search_path set by the caller cannot put other tables or
-- functions in their place.
CREATE FUNCTION mnemo_check_erasure() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
    head bigint;
    erased_seqs bigint[];
    named bytea[];
    refused bigint;
BEGIN
    PERFORM set_config('search_path', format('%I, pg_catalog, pg_temp', TG_TABLE_SCHEMA), true);
    SELECT h.seq INTO head FROM mnemo_head h;
    SELECT array_agg(seq) INTO erased_seqs FROM erased;  -- the transition table, read once
    SELECT array_agg(i.id) INTO named
    FROM generate_series(head + 1, (SELECT max(e.seq) FROM mnemo_entries e)) s(seq)
    CROSS JOIN LATERAL (SELECT f.raw FROM mnemo_entries f WHERE f.seq = s.seq AND f.op = 'forget' OFFSET 0) f
    CROSS JOIN LATERAL mnemo_forget_ids(f.raw) i(id);
    SELECT d.seq INTO refused FROM unnest(erased_seqs) d(seq)
    WHERE d.seq > head OR NOT coalesce(
        (SELECT mnemo_entry_str(e.raw, 'put', 'id') FROM mnemo_entries e WHERE e.seq = d.seq) IN (SELECT unnest(named)),
        false)
    ORDER BY d.seq LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'mnemo: DELETE of the payload of seq % on mnemo_payloads is refused: a payload is erased '
            'only by the transaction that appends a forget entry naming its record (client.forget)', refused
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER mnemo_payloads_erased_by_forget AFTER DELETE ON mnemo_payloads
    REFERENCING OLD TABLE AS erased FOR EACH STATEMENT EXECUTE FUNCTION mnemo_check_erasure();
"""


# Version 5: recall's index (docs/POSTGRES.md, "Recall"), derived from the chain as the other tables are:
# mnemo_docs, a row for each live record whose latest content is text (that version's seq, which names the
# document, its scope and its length in terms); mnemo_terms, a row for each distinct term of each document
# (how often the document holds it, and the document's length and scope again, so that a term's postings
# are read from its rows alone: compact orders the table by term, and a common term's rows are then a few
# pages, with nothing to look up for each); and mnemo_text_scopes, each scope's number of documents and
# their total length, so that a recall's statistics are a sum over the scopes it may read, whatever the
# number of records. The terms are mnemo.recall.analysis's, computed by the client from the text it
# commits (text_index.py), so that both backends index exactly alike; the migration builds the index of
# the records already there from their payloads (text_index.build_text_index, after this SQL).
#
# A term is as long as a word of the text, and a B-tree entry holds at most about 2.7 kB: the index orders
# terms by their first TERM_KEY characters, and a lookup compares the whole term after it. Term values are
# never sampled into pg_statistic (the column, and the index's expression column), nor compressed (what
# erasure removes is the bytes written), as for tags and payloads.
#
# Both commit paths write the index in their transaction, through mnemo_index_text: mnemo_commit's callers
# call it beside mnemo_commit, and mnemo_put calls it with each put's document and terms. Roles that may
# write the tag index (grant_application_role's) may write this one too.
_V5 = f"""
CREATE TABLE mnemo_docs (
    seq bigint PRIMARY KEY,
    id text NOT NULL UNIQUE,
    scope text COLLATE "C" NOT NULL,
    length integer NOT NULL CHECK (length >= 0)
);
CREATE TABLE mnemo_terms (
    term text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    tf integer NOT NULL CHECK (tf > 0),
    length integer NOT NULL,
    scope text COLLATE "C" NOT NULL
);
CREATE INDEX mnemo_terms_term ON mnemo_terms (left(term, {TERM_KEY}));
CREATE INDEX mnemo_terms_seq ON mnemo_terms (seq);
ALTER TABLE mnemo_terms ALTER COLUMN term SET STORAGE EXTERNAL;
ALTER TABLE mnemo_terms ALTER COLUMN term SET STATISTICS 0;
ALTER INDEX mnemo_terms_term ALTER COLUMN 1 SET STATISTICS 0;
-- (no CHECK of its counts: a row changed by hand must not make commits fail, a forget's above all;
-- verify names it, and a recall over a count it cannot be refuses to rank)
CREATE TABLE mnemo_text_scopes (
    scope text COLLATE "C" PRIMARY KEY,
    docs bigint NOT NULL,
    length bigint NOT NULL
);

DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END  -- quoted as needed
        FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
        WHERE c.oid = 'mnemo_tags'::regclass AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner
    LOOP
        EXECUTE 'GRANT SELECT, INSERT, DELETE ON mnemo_docs, mnemo_terms TO ' || grantee;
        EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON mnemo_text_scopes TO ' || grantee;
    END LOOP;
END;
$$;

-- The text index's part of a commit, in the commit's transaction: the documents of the records `gone`
-- (updated or forgotten) leave, with the terms of every version `gone_seqs` of theirs; the documents
-- given come in, each with its terms (`w_doc`: the position of the term's document in the d_ arrays,
-- from 1); and each scope's totals follow.
CREATE FUNCTION mnemo_index_text(
    gone text[], gone_seqs bigint[], d_seq bigint[], d_id text[], d_scope text[], d_len integer[],
    w_term text[], w_doc integer[], w_tf integer[]
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    left_scope text[] := '{{}}';
    left_len integer[] := '{{}}';
    change record;
BEGIN
    IF cardinality(gone) > 0 THEN
        DELETE FROM mnemo_terms WHERE seq = ANY(gone_seqs);
        WITH d AS (DELETE FROM mnemo_docs WHERE id = ANY(gone) RETURNING scope, length)
            SELECT coalesce(array_agg(d.scope), '{{}}'), coalesce(array_agg(d.length), '{{}}')
            INTO left_scope, left_len FROM d;
    END IF;
    INSERT INTO mnemo_docs (seq, id, scope, length) SELECT * FROM unnest(d_seq, d_id, d_scope, d_len);
    INSERT INTO mnemo_terms (term, seq, tf, length, scope)
        SELECT w, d_seq[k], f, d_len[k], d_scope[k] FROM unnest(w_term, w_doc, w_tf) u(w, k, f);
    -- each scope's change (the caller holds the head row: no other writer changes them meanwhile)
    FOR change IN
        SELECT c.scope, sum(c.docs) AS docs, sum(c.length) AS length FROM (
            SELECT u.scope, -1, -u.length FROM unnest(left_scope, left_len) u(scope, length)
            UNION ALL SELECT u.scope, 1, u.length FROM unnest(d_scope, d_len) u(scope, length)
        ) c(scope, docs, length) GROUP BY c.scope HAVING sum(c.docs) <> 0 OR sum(c.length) <> 0
    LOOP
        UPDATE mnemo_text_scopes SET docs = docs + change.docs, length = length + change.length
            WHERE scope = change.scope;
        IF NOT FOUND THEN
            INSERT INTO mnemo_text_scopes (scope, docs, length) VALUES (change.scope, change.docs, change.length);
        END IF;
    END LOOP;
    IF cardinality(left_scope) > 0 THEN
        DELETE FROM mnemo_text_scopes WHERE scope = ANY(left_scope) AND docs <= 0;
    END IF;
END;
$$;

-- Version 3's mnemo_put, and the text index of the puts whose content is text: `d_put` (the put, from
-- 1) and `d_len` (its length in terms) for each document, `w_term`, `w_doc` (the position of its
-- document in d_put) and `w_tf` for each of their terms.
DROP PROCEDURE mnemo_put;
CREATE PROCEDURE mnemo_put(
    want_acl bigint, sync boolean, p_ts bigint[], p_tail bytea[], p_payload bytea[],
    r_id text[], r_scope text[], v_agent text[], v_size bigint[], t_tag text[], t_put integer[],
    d_put integer[], d_len integer[], w_term text[], w_doc integer[], w_tf integer[],
    INOUT o_applied boolean DEFAULT NULL, INOUT o_seq bigint DEFAULT NULL, INOUT o_hash bytea DEFAULT NULL,
    INOUT o_ts bigint DEFAULT NULL, INOUT o_acl bigint DEFAULT NULL, INOUT o_times bigint[] DEFAULT NULL,
    INOUT o_hashes bytea[] DEFAULT NULL
) LANGUAGE plpgsql AS $$
DECLARE
    h mnemo_head%ROWTYPE;
    e_seq bigint[] := '{{}}';
    e_raw bytea[] := '{{}}';
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
    o_times := '{{}}'; o_hashes := '{{}}';
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
    IF cardinality(d_put) > 0 THEN
        PERFORM mnemo_index_text('{{}}', '{{}}',
            ARRAY(SELECT e_seq[k] FROM unnest(d_put) WITH ORDINALITY u(k, o) ORDER BY o),
            ARRAY(SELECT r_id[k] FROM unnest(d_put) WITH ORDINALITY u(k, o) ORDER BY o),
            ARRAY(SELECT r_scope[k] FROM unnest(d_put) WITH ORDINALITY u(k, o) ORDER BY o),
            d_len, w_term, w_doc, w_tf);
    END IF;
    UPDATE mnemo_head SET seq = last_seq, hash = prev, ts_ns = last_ts;
    IF sync THEN
        COMMIT;
        PERFORM set_config('synchronous_commit', 'on', true);
        PERFORM pg_current_xact_id();
    END IF;
END;
$$;
"""

# Version 6: semantic recall's vectors (docs/POSTGRES.md, "Recall"; vectors.py): mnemo_vectors, a row per
# document of mnemo_docs that has been embedded (its seq, scope and unit vector, float32 little-endian),
# and mnemo_embedder, the one embedder whose vectors they are (its name and dimension; a client with
# another is refused until `mnemo reindex`). A document that leaves mnemo_docs takes its vector with it,
# by the trigger below, in the transaction of the update or forget that removed it. Vectors are never
# sampled into pg_statistic nor compressed, as terms and payloads are not. Nothing is built for the
# documents already there: semantic recall embeds them when it next runs.
_V6 = """
CREATE TABLE mnemo_vectors (
    seq bigint PRIMARY KEY,
    scope text COLLATE "C" NOT NULL,
    vector bytea NOT NULL
);
ALTER TABLE mnemo_vectors ALTER COLUMN vector SET STORAGE EXTERNAL;
ALTER TABLE mnemo_vectors ALTER COLUMN vector SET STATISTICS 0;
CREATE TABLE mnemo_embedder (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    name text NOT NULL,
    dimension integer NOT NULL CHECK (dimension > 0)
);

CREATE FUNCTION mnemo_drop_vectors() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM mnemo_vectors v USING gone g WHERE v.seq = g.seq;
    RETURN NULL;
END;
$$;
CREATE TRIGGER mnemo_docs_take_their_vectors AFTER DELETE ON mnemo_docs
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION mnemo_drop_vectors();

DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END  -- quoted as needed
        FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
        WHERE c.oid = 'mnemo_docs'::regclass AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner
    LOOP
        EXECUTE 'GRANT SELECT, INSERT, DELETE ON mnemo_vectors, mnemo_embedder TO ' || grantee;
    END LOOP;
END;
$$;
"""

# Version 7: what lets a client keep the vectors it has read up to date by reading only what changed
# (meaning.py, vectors.py). Every row of mnemo_vectors gets a stamp, and every document that leaves
# mnemo_docs (an update or a forget, by the trigger that takes its vector) a row in mnemo_vectors_gone,
# stamped from the same sequence: a client that has read up to stamp S reads the vectors and departures
# stamped after S. Stamps are taken only under the head row (commits, and the catch-up's inserts lock it
# too), so they become visible in their order and a reader never sees a stamp before a smaller one.
# `compact` empties mnemo_vectors_gone (its rows hold seqs only) and records in mnemo_vector_state.pruned
# the last stamp it removed: a client that has read less reads everything again, as after a reindex,
# which records a stamp past all others.
_V7 = """
CREATE SEQUENCE mnemo_vector_stamps;
ALTER TABLE mnemo_vectors ADD COLUMN stamp bigint NOT NULL DEFAULT nextval('mnemo_vector_stamps');
CREATE INDEX mnemo_vectors_stamp ON mnemo_vectors (stamp);
CREATE TABLE mnemo_vectors_gone (
    stamp bigint PRIMARY KEY DEFAULT nextval('mnemo_vector_stamps'),
    seq bigint NOT NULL
);
CREATE TABLE mnemo_vector_state (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    pruned bigint NOT NULL
);
INSERT INTO mnemo_vector_state (pruned) VALUES (0);

CREATE OR REPLACE FUNCTION mnemo_drop_vectors() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM mnemo_vectors v USING gone g WHERE v.seq = g.seq;
    INSERT INTO mnemo_vectors_gone (seq) SELECT g.seq FROM gone g ORDER BY g.seq;
    RETURN NULL;
END;
$$;

DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END  -- quoted as needed
        FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
        WHERE c.oid = 'mnemo_vectors'::regclass AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner
    LOOP
        EXECUTE 'GRANT SELECT, INSERT ON mnemo_vectors_gone TO ' || grantee;
        EXECUTE 'GRANT SELECT, UPDATE ON mnemo_vector_state, mnemo_vector_stamps TO ' || grantee;
    END LOOP;
END;
$$;
"""

# Version 8: a term's postings read from an index alone (docs/POSTGRES.md, "Recall"). mnemo_terms gets a
# column `key`, its term's first TERM_KEY characters (the term itself when shorter: nearly every term),
# generated by the server from `term` so that no writer can make the two disagree, and the index the
# terms are looked up by becomes a B-tree on (key, scope) that also holds each posting's seq, tf and
# length: a recall reads a term's postings by an index-only scan, with no heap row per posting once the
# visibility map says the table's pages are all visible (VACUUM sets it: autovacuum, and `compact` after
# its rewrite). The index replaces version 5's on the expression left(term, TERM_KEY), under the same
# name, so `compact` still rewrites the table in term order by it. Like the term, the key is stored
# uncompressed and never sampled into pg_statistic.
_V8 = f"""
DROP INDEX mnemo_terms_term;
ALTER TABLE mnemo_terms ADD COLUMN key text COLLATE "C" GENERATED ALWAYS AS (left(term, {TERM_KEY})) STORED;
ALTER TABLE mnemo_terms ALTER COLUMN key SET STORAGE EXTERNAL;
ALTER TABLE mnemo_terms ALTER COLUMN key SET STATISTICS 0;
CREATE INDEX mnemo_terms_term ON mnemo_terms (key, scope) INCLUDE (seq, tf, length);
"""

def _with_positions(sql: str, replacements: list[tuple[str, str]]) -> str:
    """Version 5's text of a routine, with each term's positions passed beside its tf."""
    for old, new in replacements:
        if old not in sql:
            raise AssertionError(f"version 5's routine has no {old!r}")  # (a mistake in this module)
        sql = sql.replace(old, new)
    return sql


# Version 9's mnemo_put (version 5's, with positions): the text version 10 takes up
_PUT_V9 = _with_positions(_V5[_V5.index("CREATE PROCEDURE mnemo_put("):], [
    ("w_term text[], w_doc integer[], w_tf integer[],\n",
     "w_term text[], w_doc integer[], w_tf integer[], w_pos bytea[],\n"),
    ("d_len, w_term, w_doc, w_tf);", "d_len, w_term, w_doc, w_tf, w_pos);"),
])

# Version 9: phrases decided from the index (docs/POSTGRES.md, "Recall"). mnemo_terms gets a column
# `positions`: where the term stands in its document's atoms (analysis.atoms: the sequence a phrase is
# matched against), each position 4 bytes, big-endian, in increasing order; empty when the term is no atom
# of the document (an identifier's whole), NULL when it stands at more than text_index.POSITIONS_MAX
# places (a phrase is then checked in that document's text). The terms' index holds it too, so a phrase's
# words are read with their positions by an index-only scan; POSITIONS_MAX keeps its entries far below a
# B-tree entry's limit (and below the size at which an index entry is compressed). Like the term, the
# positions are stored uncompressed and never sampled into pg_statistic. mnemo_index_text and mnemo_put take
# each term's positions beside its tf (w_pos); the migration writes the terms of the documents already
# indexed again, with their positions (text_index.build_positions, after this SQL).
_V9 = """
ALTER TABLE mnemo_terms ADD COLUMN positions bytea;
ALTER TABLE mnemo_terms ALTER COLUMN positions SET STORAGE EXTERNAL;
ALTER TABLE mnemo_terms ALTER COLUMN positions SET STATISTICS 0;
DROP INDEX mnemo_terms_term;
CREATE INDEX mnemo_terms_term ON mnemo_terms (key, scope) INCLUDE (seq, tf, length, positions);

DROP PROCEDURE mnemo_put;
DROP FUNCTION mnemo_index_text;
""" + _with_positions(_V5[_V5.index("CREATE FUNCTION mnemo_index_text("):_V5.index("-- Version 3's mnemo_put")], [
    ("w_term text[], w_doc integer[], w_tf integer[]\n",
     "w_term text[], w_doc integer[], w_tf integer[], w_pos bytea[]\n"),
    ("INSERT INTO mnemo_terms (term, seq, tf, length, scope)\n        SELECT w, d_seq[k], f, d_len[k], d_scope[k] "
     "FROM unnest(w_term, w_doc, w_tf) u(w, k, f);",
     "INSERT INTO mnemo_terms (term, seq, tf, length, scope, positions)\n        SELECT w, d_seq[k], f, d_len[k], "
     "d_scope[k], q FROM unnest(w_term, w_doc, w_tf, w_pos) u(w, k, f, q);"),
]) + _PUT_V9


def _with_copies(routine: str, replacements: list[tuple[str, str]]) -> str:
    """The text of a routine as the latest version before 10 made it, writing version 10's copies (so that
    a version before it that changes the routine again is taken up by giving its text here)."""
    for old, new in replacements:
        if old not in routine:
            raise AssertionError(f"the routine has no {old!r}")  # (a mistake in this module)
        routine = routine.replace(old, new)
    return routine


_RECORD = "id, scope, ver, seq, ts_ns, agent, size, hash, entry_len, payload_len"
# the records of the arrays {0}_id, {0}_scope, {0}_ver, each with its version of the v_ arrays
_LATEST = (
    "\n        SELECT n.i, n.s, n.v, w.seq, w.ts, w.agent, w.size, w.hash, w.elen, w.plen\n"
    "        FROM unnest({0}_id, {0}_scope, {0}_ver) n(i, s, v)\n"
    "        LEFT JOIN unnest(v_id, v_ver, v_seq, v_ts, v_agent, v_size, v_hash, v_elen, v_plen)\n"
    "            w(id, ver, seq, ts, agent, size, hash, elen, plen) ON w.id = n.i AND w.ver = n.v"
)

# Version 10: a query's hit read by two index descents, its record's and its payload's, where version 9
# made four (the record, its versions, the entry, the payload). mnemo_records holds its latest version's
# columns beside the record (as mnemo_versions holds them, which keeps every version), and each payload
# row holds the bytes of its entry beside the payload (as mnemo_entries holds them, which stays the
# chain): a read of a record's latest version finds its seq, hash and time on the record's row and its
# entry and payload on one row of mnemo_payloads, and checks them exactly as before (the entry's hash,
# that it is the put of this record, version and scope, the payload's digest); mnemo_versions is read
# only for the earlier versions of records that have them. The copies are written by mnemo_commit and
# mnemo_put, from the rows they insert in the same call, and verify compares them with the chain. A
# payload row is still never updated (the trigger is set aside only while this migration fills the
# rows already there) and is deleted whole by a forget's erasure, its entry's copy with it; like the
# payload, the copy is stored uncompressed and never sampled into pg_statistic.
_LATEST_BESIDE = """
ALTER TABLE mnemo_records ADD COLUMN seq bigint, ADD COLUMN ts_ns bigint, ADD COLUMN agent text,
    ADD COLUMN size bigint, ADD COLUMN hash bytea, ADD COLUMN entry_len integer, ADD COLUMN payload_len integer;
UPDATE mnemo_records r SET seq = v.seq, ts_ns = v.ts_ns, agent = v.agent, size = v.size, hash = v.hash,
    entry_len = v.entry_len, payload_len = v.payload_len
    FROM mnemo_versions v WHERE v.id = r.id AND v.ver = r.ver;
ALTER TABLE mnemo_records ALTER COLUMN seq SET NOT NULL, ALTER COLUMN ts_ns SET NOT NULL,
    ALTER COLUMN agent SET NOT NULL, ALTER COLUMN size SET NOT NULL, ALTER COLUMN hash SET NOT NULL,
    ALTER COLUMN entry_len SET NOT NULL, ALTER COLUMN payload_len SET NOT NULL;

ALTER TABLE mnemo_payloads ADD COLUMN raw bytea;
ALTER TABLE mnemo_payloads ALTER COLUMN raw SET STORAGE EXTERNAL;
ALTER TABLE mnemo_payloads ALTER COLUMN raw SET STATISTICS 0;
ALTER TABLE mnemo_payloads DISABLE TRIGGER mnemo_payloads_no_update;
UPDATE mnemo_payloads p SET raw = e.raw FROM mnemo_entries e WHERE e.seq = p.seq;
ALTER TABLE mnemo_payloads ENABLE TRIGGER mnemo_payloads_no_update;
ALTER TABLE mnemo_payloads ALTER COLUMN raw SET NOT NULL;

-- Version 2's mnemo_commit and version 9's mnemo_put, writing the copies (_with_copies).
DROP FUNCTION mnemo_commit;
DROP PROCEDURE mnemo_put;
""" + _with_copies(_V2[_V2.index("CREATE FUNCTION mnemo_commit("):_V2.index("-- An append made")], [
    # each payload's entry bytes from the entries it inserts (a payload's entry is always among them)
    ("INSERT INTO mnemo_payloads (seq, payload) SELECT * FROM unnest(p_seq, p_payload);",
     "INSERT INTO mnemo_payloads (seq, raw, payload)\n"
     "        SELECT p.s, e.r, p.p FROM unnest(p_seq, p_payload) p(s, p) LEFT JOIN unnest(e_seq, e_raw) e(s, r) "
     "ON e.s = p.s;"),
    # each record's latest version from the versions it inserts (a commit that makes a record's version
    # inserts that version: a row without it is refused, NOT NULL)
    ("INSERT INTO mnemo_records (id, scope, ver) SELECT * FROM unnest(new_id, new_scope, new_ver);",
     f"INSERT INTO mnemo_records ({_RECORD}){_LATEST.format('new')};"),
    ("INSERT INTO mnemo_records (id, scope, ver) SELECT * FROM unnest(up_id, up_scope, up_ver)\n"
     "        ON CONFLICT (id) DO UPDATE SET scope = EXCLUDED.scope, ver = EXCLUDED.ver;",
     f"INSERT INTO mnemo_records ({_RECORD}){_LATEST.format('up')}\n"
     "        ON CONFLICT (id) DO UPDATE SET scope = EXCLUDED.scope, ver = EXCLUDED.ver, seq = EXCLUDED.seq,\n"
     "            ts_ns = EXCLUDED.ts_ns, agent = EXCLUDED.agent, size = EXCLUDED.size, hash = EXCLUDED.hash,\n"
     "            entry_len = EXCLUDED.entry_len, payload_len = EXCLUDED.payload_len;"),
]) + _with_copies(_PUT_V9, [
    ("INSERT INTO mnemo_payloads (seq, payload) SELECT s, p FROM unnest(e_seq, p_payload) u(s, p);",
     "INSERT INTO mnemo_payloads (seq, raw, payload) SELECT s, r, p FROM unnest(e_seq, e_raw, p_payload) u(s, r, p);"),
    ("INSERT INTO mnemo_records (id, scope, ver) SELECT i, s, 1 FROM unnest(r_id, r_scope) u(i, s);",
     f"INSERT INTO mnemo_records ({_RECORD})\n"
     "        SELECT i, c, 1, s, t, a, z, x, length(r), length(p)\n"
     "        FROM unnest(r_id, r_scope, e_seq, o_times, v_agent, v_size, o_hashes, e_raw, p_payload)\n"
     "            u(i, c, s, t, a, z, x, r, p);"),
])

# Version 11: the positions packed smaller (docs/POSTGRES.md, "Recall"). mnemo_terms.positions holds a
# term's places in its document as varints (text_index.pack_places: their number plus one, then each
# one's gap from the one before), one or two bytes a place where version 9 took four, so that the
# covering index's entries are smaller and a phrase's words are read in fewer pages; and each value says
# where it ends, so that recall's statement reads the positions of many postings one after the other
# without a column of their sizes. The column, its storage and its index are version 9's; the migration
# writes the terms of every document again (text_index.build_positions, after this SQL).
_V11 = """
COMMENT ON COLUMN mnemo_terms.positions IS
    'the term''s places among its document''s atoms: varints, their number plus one, then each one''s gap';
"""

# MIGRATIONS[n] brings a schema of version n to version n + 1; BUILDS[n], when there is one, then fills
# what that version adds from the rows already there (on the migrating transaction's connection).
MIGRATIONS: dict[int, str] = {
    0: _V1, 1: _V2, 2: _V3, 3: _V4, 4: _V5, 5: _V6, 6: _V7, 7: _V8, 8: _V9, 9: _LATEST_BESIDE, 10: _V11,
}
BUILDS: dict[int, Callable[[Any], None]] = {4: build_text_index, 8: build_positions, 10: build_positions}
SCHEMA_VERSION = max(MIGRATIONS) + 1  # the one place a new version is numbered: its key above

TABLES = (
    "mnemo_meta", "mnemo_head", "mnemo_entries", "mnemo_payloads", "mnemo_records", "mnemo_versions",
    "mnemo_tags", "mnemo_forgotten", "mnemo_tree", "mnemo_docs", "mnemo_terms", "mnemo_text_scopes",
    "mnemo_vectors", "mnemo_embedder", "mnemo_vectors_gone", "mnemo_vector_state",
)

# What the application role of a database may do (grant_application_role): append to the chain and
# erase payloads (by a forget: version 4's trigger refuses any other DELETE of them), keep the derived
# tables, and nothing else. It cannot update or delete an entry (no privilege, besides the trigger),
# disable a trigger or alter a table (it owns none).
APPLICATION_PRIVILEGES = {
    "mnemo_meta": "SELECT",
    "mnemo_head": "SELECT, UPDATE",
    "mnemo_entries": "SELECT, INSERT",
    "mnemo_payloads": "SELECT, INSERT, DELETE",
    "mnemo_records": "SELECT, INSERT, UPDATE, DELETE",
    "mnemo_versions": "SELECT, INSERT, DELETE",
    "mnemo_tags": "SELECT, INSERT, DELETE",
    "mnemo_forgotten": "SELECT, INSERT",
    "mnemo_tree": "SELECT, INSERT",
    "mnemo_docs": "SELECT, INSERT, DELETE",
    "mnemo_terms": "SELECT, INSERT, DELETE",
    "mnemo_text_scopes": "SELECT, INSERT, UPDATE, DELETE",
    "mnemo_vectors": "SELECT, INSERT, DELETE",
    "mnemo_embedder": "SELECT, INSERT, DELETE",
    "mnemo_vectors_gone": "SELECT, INSERT",
    "mnemo_vector_state": "SELECT, UPDATE",
    "mnemo_vector_stamps": "SELECT, UPDATE",
}


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
