"""Version 4 of the PostgreSQL schema (MIGRATIONS[3]): payload rows deleted only by the erasure of a
forget, checked by a trigger that reads the entries' msgpack in SQL."""

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
V4 = """
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
