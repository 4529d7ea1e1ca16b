"""Versions 5 to 8 of the PostgreSQL schema (MIGRATIONS[4] to [7]): recall's text index (documents,
terms, each scope's totals) written by both commit paths, semantic recall's vectors, their stamps, and
the terms' key in a covering index."""

from __future__ import annotations

from ..text_index import TERM_KEY
from .edits import edited
from .grants import grant_to_writers_of
from .v1_v3 import V3

# Version 5: recall's index (docs/POSTGRES.md, "Recall"), derived from the chain as the other tables are:
# mnemo_docs, a row for each live record whose latest content is text (that version's seq, which names the
# document, its scope and its length in terms); mnemo_terms, a row for each distinct term of each document
# (how often the document holds it, and the document's length and scope again, so that a term's postings
# are read from its rows alone: compact orders the table by term, and a common term's rows are then a few
# pages, with nothing to look up for each); and mnemo_text_scopes, each scope's number of documents and
# their total length, so that a recall's statistics are a sum over the scopes it may read, whatever the
# number of records. The terms are mnemo.recall.analysis's, computed by the client from the text it
# commits (text_index.py), so that both backends index exactly alike; the migration builds the index of
# the records already there from their payloads (text_build.build_text_index, after this SQL).
#
# A term is as long as a word of the text, and a B-tree entry holds at most about 2.7 kB: the index orders
# terms by their first TERM_KEY characters, and a lookup compares the whole term after it. Term values are
# never sampled into pg_statistic (the column, and the index's expression column), nor compressed (what
# erasure removes is the bytes written), as for tags and payloads.
#
# Both commit paths write the index in their transaction, through mnemo_index_text: mnemo_commit's callers
# call it beside mnemo_commit, and mnemo_put calls it with each put's document and terms. Roles that may
# write the tag index (grant_application_role's) may write this one too.
V5 = f"""
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

""" + grant_to_writers_of(
    "mnemo_tags", "SELECT, INSERT, DELETE ON mnemo_docs, mnemo_terms",
    "SELECT, INSERT, UPDATE, DELETE ON mnemo_text_scopes",
) + """
-- The text index's part of a commit, in the commit's transaction: the documents of the records `gone`
-- (updated or forgotten) leave, with the terms of every version `gone_seqs` of theirs; the documents
-- given come in, each with its terms (`w_doc`: the position of the term's document in the d_ arrays,
-- from 1); and each scope's totals follow.
CREATE FUNCTION mnemo_index_text(
    gone text[], gone_seqs bigint[], d_seq bigint[], d_id text[], d_scope text[], d_len integer[],
    w_term text[], w_doc integer[], w_tf integer[]
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    left_scope text[] := '{}';
    left_len integer[] := '{}';
    change record;
BEGIN
    IF cardinality(gone) > 0 THEN
        DELETE FROM mnemo_terms WHERE seq = ANY(gone_seqs);
        WITH d AS (DELETE FROM mnemo_docs WHERE id = ANY(gone) RETURNING scope, length)
            SELECT coalesce(array_agg(d.scope), '{}'), coalesce(array_agg(d.length), '{}')
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
""" + edited(V3[V3.index("CREATE PROCEDURE mnemo_put("):], [
    # version 3's mnemo_put, writing the text index of its puts (mnemo_index_text) before it moves the head
    ("t_tag text[], t_put integer[],\n",
     "t_tag text[], t_put integer[],\n"
     "    d_put integer[], d_len integer[], w_term text[], w_doc integer[], w_tf integer[],\n"),
    ("    UPDATE mnemo_head SET seq = last_seq, hash = prev, ts_ns = last_ts;\n",
     "    IF cardinality(d_put) > 0 THEN\n"
     "        PERFORM mnemo_index_text('{}', '{}',\n"
     "            ARRAY(SELECT e_seq[k] FROM unnest(d_put) WITH ORDINALITY u(k, o) ORDER BY o),\n"
     "            ARRAY(SELECT r_id[k] FROM unnest(d_put) WITH ORDINALITY u(k, o) ORDER BY o),\n"
     "            ARRAY(SELECT r_scope[k] FROM unnest(d_put) WITH ORDINALITY u(k, o) ORDER BY o),\n"
     "            d_len, w_term, w_doc, w_tf);\n"
     "    END IF;\n"
     "    UPDATE mnemo_head SET seq = last_seq, hash = prev, ts_ns = last_ts;\n"),
])

# Version 6: semantic recall's vectors (docs/POSTGRES.md, "Recall"; vectors.py): mnemo_vectors, a row per
# document of mnemo_docs that has been embedded (its seq, scope and unit vector, float32 little-endian),
# and mnemo_embedder, the one embedder whose vectors they are (its name and dimension; a client with
# another is refused until `mnemo reindex`). A document that leaves mnemo_docs takes its vector with it,
# by the trigger below, in the transaction of the update or forget that removed it. Vectors are never
# sampled into pg_statistic nor compressed, as terms and payloads are not. Nothing is built for the
# documents already there: semantic recall embeds them when it next runs.
V6 = """
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

""" + grant_to_writers_of("mnemo_docs", "SELECT, INSERT, DELETE ON mnemo_vectors, mnemo_embedder")

# Version 7: what lets a client keep the vectors it has read up to date by reading only what changed
# (meaning.py, vectors.py). Every row of mnemo_vectors gets a stamp, and every document that leaves
# mnemo_docs (an update or a forget, by the trigger that takes its vector) a row in mnemo_vectors_gone,
# stamped from the same sequence: a client that has read up to stamp S reads the vectors and departures
# stamped after S. Stamps are taken only under the head row (commits, and the catch-up's inserts lock it
# too), so they become visible in their order and a reader never sees a stamp before a smaller one.
# `compact` empties mnemo_vectors_gone (its rows hold seqs only) and records in mnemo_vector_state.pruned
# the last stamp it removed: a client that has read less reads everything again, as after a reindex,
# which records a stamp past all others.
V7 = """
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

""" + grant_to_writers_of(
    "mnemo_vectors", "SELECT, INSERT ON mnemo_vectors_gone",
    "SELECT, UPDATE ON mnemo_vector_state, mnemo_vector_stamps",
)

# Version 8: a term's postings read from an index alone (docs/POSTGRES.md, "Recall"). mnemo_terms gets a
# column `key`, its term's first TERM_KEY characters (the term itself when shorter: nearly every term),
# generated by the server from `term` so that no writer can make the two disagree, and the index the
# terms are looked up by becomes a B-tree on (key, scope) that also holds each posting's seq, tf and
# length: a recall reads a term's postings by an index-only scan, with no heap row per posting once the
# visibility map says the table's pages are all visible (VACUUM sets it: autovacuum, and `compact` after
# its rewrite). The index replaces version 5's on the expression left(term, TERM_KEY), under the same
# name, so `compact` still rewrites the table in term order by it. Like the term, the key is stored
# uncompressed and never sampled into pg_statistic.
V8 = f"""
DROP INDEX mnemo_terms_term;
ALTER TABLE mnemo_terms ADD COLUMN key text COLLATE "C" GENERATED ALWAYS AS (left(term, {TERM_KEY})) STORED;
ALTER TABLE mnemo_terms ALTER COLUMN key SET STORAGE EXTERNAL;
ALTER TABLE mnemo_terms ALTER COLUMN key SET STATISTICS 0;
CREATE INDEX mnemo_terms_term ON mnemo_terms (key, scope) INCLUDE (seq, tf, length);
"""
