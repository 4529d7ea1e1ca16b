"""Versions 9 to 11 of the PostgreSQL schema (MIGRATIONS[8] to [10]): each term's positions in the
terms' index, then packed smaller, and a record's latest version and a payload's entry bytes kept on one
row each."""

from __future__ import annotations

from .edits import edited
from .v1_v3 import V2
from .v5_v8 import V5


def _with_positions(routine: str, replacements: list[tuple[str, str]]) -> str:
    """Version 5's text of a routine, with each term's positions passed beside its tf."""
    return edited(routine, replacements)


# Version 9's mnemo_put (version 5's, with positions): the text version 10 takes up
_PUT_V9 = _with_positions(V5[V5.index("CREATE PROCEDURE mnemo_put("):], [
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
# indexed again, with their positions (text_build.build_positions, after this SQL).
V9 = """
ALTER TABLE mnemo_terms ADD COLUMN positions bytea;
ALTER TABLE mnemo_terms ALTER COLUMN positions SET STORAGE EXTERNAL;
ALTER TABLE mnemo_terms ALTER COLUMN positions SET STATISTICS 0;
DROP INDEX mnemo_terms_term;
CREATE INDEX mnemo_terms_term ON mnemo_terms (key, scope) INCLUDE (seq, tf, length, positions);

DROP PROCEDURE mnemo_put;
DROP FUNCTION mnemo_index_text;
""" + _with_positions(V5[V5.index("CREATE FUNCTION mnemo_index_text("):V5.index("-- Version 3's mnemo_put")], [
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
    return edited(routine, replacements)


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
V10 = """
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
""" + _with_copies(V2[V2.index("CREATE FUNCTION mnemo_commit("):V2.index("-- An append made")], [
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
# writes the terms of every document again (text_build.build_positions, after this SQL).
V11 = """
COMMENT ON COLUMN mnemo_terms.positions IS
    'the term''s places among its document''s atoms: varints, their number plus one, then each one''s gap';
"""
