/* The PostgreSQL backend's read path in C: the rows a query reads (mnemo/storage/postgres/reads.py),
 * each version's entry and payload checked against the chain in one call, exactly as
 * mnemo/storage/postgres/sql.py's served_rows (its pure-Python twin) checks them.
 *
 * served_rows(rows, cols) takes the rows of a read (a list of tuples) and the indexes of six of their
 * columns, cols = (id, scope, ver, hash, raw, payload): the record's id and scope (str), the version
 * number (int), its chain hash (32 bytes), the put's entry bytes and the payload's (bytes, or None
 * where the row carries none). It returns, for each row, the packed record fields (the payload
 * without its 16-byte salt) as bytes, or None where the twin gives None: a row without an entry or a
 * payload, a payload too short to hold a salt and one byte, an entry that does not hash to the chain
 * hash, that is not the put of this record, version and scope, or whose digest is not the SHA-256 of
 * the payload. The caller then checks such a row through its general path, which says what is wrong.
 * For the entry this reads only the canonical layout every put is written in (docs/FORMAT.md §1); any
 * other layout is None here, and the general path decides. So this never serves what the twin would
 * refuse. The hashing runs without the GIL.
 *
 * latest_records(rows, cols, MemoryRecord) takes the rows of a read of records' latest versions, one
 * row a record (sql.py's records_sql), and the indexes of ten of their columns, cols = (id, scope, ver,
 * hash, raw, payload, seq, ts, agent, first_ts): the six served_rows checks, the version's seq and time
 * (int), its agent (str), and the time of the record's first version (int, or None for a record whose
 * first version is this one). It checks each row as served_rows does, and builds its record as
 * mnemo/storage/records.py's record_of builds it (mnemo/_fields.h: the fields decoded as msgpack
 * decodes them, for the values a put holds); its twin is sql.latest_records. None wherever served_rows
 * gives None, or the fields or a time are not made here: the caller's general path reads that record
 * again, and builds it or says what is wrong. So this never builds a record the twin does not build
 * alike.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <string.h>

#include "_fields.h"
#include "_sha256.h"

#define SALT 16
#define HASH 32

typedef struct {
    const unsigned char *raw, *payload, *hash;
    Py_ssize_t raw_len, payload_len;
    const char *id, *scope;
    Py_ssize_t id_len, scope_len;
    int64_t ver;
    Py_ssize_t agent_off, agent_len;
    int skip; /* 1: None without checking */
    int ok;
} row_t;

static int digest_of(EVP_MD_CTX *ctx, const unsigned char *p, size_t n, unsigned char *out) {
    unsigned int len = 0;
    return EVP_DigestInit_ex(ctx, sha256_md, NULL) && EVP_DigestUpdate(ctx, p, n) &&
           EVP_DigestFinal_ex(ctx, out, &len) && len == HASH;
}

/* Check one row (without the GIL). */
static void check_row(EVP_MD_CTX *ctx, row_t *r) {
    unsigned char h[HASH];
    const unsigned char *digest = NULL;
    if (!digest_of(ctx, r->raw, (size_t)r->raw_len, h) || memcmp(h, r->hash, HASH) != 0) return;
    if (!put_of(r->raw, r->raw_len, r->id, r->id_len, r->scope, r->scope_len, r->ver, &r->agent_off, &r->agent_len,
                &digest))
        return;
    if (!digest_of(ctx, r->payload, (size_t)r->payload_len, h) || memcmp(h, digest, HASH) != 0) return;
    r->ok = 1;
}

/* Fill a row's fields from its tuple (the first six of `ncols` columns are those it checks); 0 with an
 * exception set if it is not a tuple of the columns. */
static int take_row(PyObject *row, const Py_ssize_t *cols, int ncols, row_t *r, const char *fn) {
    if (!PyTuple_Check(row)) {
        PyErr_Format(PyExc_TypeError, "%s: each row must be a tuple", fn);
        return 0;
    }
    for (int k = 0; k < ncols; k++)
        if (cols[k] >= PyTuple_GET_SIZE(row)) {
            PyErr_Format(PyExc_IndexError, "%s: a column index is past the end of a row", fn);
            return 0;
        }
    PyObject *id = PyTuple_GET_ITEM(row, cols[0]), *scope = PyTuple_GET_ITEM(row, cols[1]),
             *ver = PyTuple_GET_ITEM(row, cols[2]), *hash = PyTuple_GET_ITEM(row, cols[3]),
             *raw = PyTuple_GET_ITEM(row, cols[4]), *payload = PyTuple_GET_ITEM(row, cols[5]);
    if (!PyUnicode_Check(id) || !PyUnicode_Check(scope) || !PyLong_Check(ver) || !PyBytes_Check(hash) ||
        PyBytes_GET_SIZE(hash) != HASH || !PyBytes_Check(raw) || !PyBytes_Check(payload) ||
        PyBytes_GET_SIZE(payload) < SALT + 1) {
        r->skip = 1; /* no entry or payload, or what no put holds: the general path checks it */
        return 1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(ver, &overflow);
    if (v == -1 && PyErr_Occurred()) return 0;
    if (overflow || v < 0) {
        r->skip = 1;
        return 1;
    }
    r->ver = (int64_t)v;
    r->hash = (const unsigned char *)PyBytes_AS_STRING(hash);
    r->raw = (const unsigned char *)PyBytes_AS_STRING(raw);
    r->raw_len = PyBytes_GET_SIZE(raw);
    r->payload = (const unsigned char *)PyBytes_AS_STRING(payload);
    r->payload_len = PyBytes_GET_SIZE(payload);
    r->id = PyUnicode_AsUTF8AndSize(id, &r->id_len);
    r->scope = r->id ? PyUnicode_AsUTF8AndSize(scope, &r->scope_len) : NULL;
    if (!r->id || !r->scope) { /* a str that is not UTF-8 (lone surrogates): no entry names it */
        PyErr_Clear();
        r->skip = 1;
    }
    return 1;
}

/* Whether a row that passed the checks is served: msgpack decodes the agent as strict UTF-8, so an
 * entry whose agent is not does not decode (1 served, 0 not, -1 an exception set). */
static int agent_decodes(row_t *r) {
    if (!r->ok) return 0;
    return utf8_decodes(r->raw + r->agent_off, r->agent_len);
}

/* What served_rows and latest_records start with: the column indexes (`ncols` of them, the first six
 * those the checks read) none negative, each row of `rows` taken and checked (the hashing without the
 * GIL). 1 with *out the rows' states (n of them, PyMem: the caller frees them; NULL when there are no
 * rows), 0 with an exception set and nothing to free. */
static int checked_rows(PyObject *rows, const Py_ssize_t *cols, int ncols, const char *fn, row_t **out) {
    *out = NULL;
    for (int k = 0; k < ncols; k++)
        if (cols[k] < 0) {
            PyErr_Format(PyExc_IndexError, "%s: a column index is negative", fn);
            return 0;
        }
    Py_ssize_t n = PyList_GET_SIZE(rows);
    row_t *rs = n ? PyMem_Calloc((size_t)n, sizeof(row_t)) : NULL;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if ((n && !rs) || !ctx) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        if (!take_row(PyList_GET_ITEM(rows, k), cols, ncols, &rs[k], fn)) goto fail;
    /* The rows' bytes objects are held by `rows`, which the caller holds: they outlive the GIL's release. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++)
        if (!rs[k].skip) check_row(ctx, &rs[k]);
    Py_END_ALLOW_THREADS
    EVP_MD_CTX_free(ctx);
    *out = rs;
    return 1;
fail:
    PyMem_Free(rs);
    if (ctx) EVP_MD_CTX_free(ctx);
    return 0;
}

/* What a served row of served_rows becomes: its packed fields, the payload after its salt. */
static PyObject *payload_of(PyObject *type, row_t *r, PyObject *row, const Py_ssize_t *cols) {
    (void)type, (void)row, (void)cols;
    return PyBytes_FromStringAndSize((const char *)r->payload + SALT, r->payload_len - SALT);
}

typedef PyObject *(*serve_t)(PyObject *type, row_t *r, PyObject *row, const Py_ssize_t *cols);

/* checked_rows of `rows`, then each row's value in a new list: what `serve` makes of it (given `type`,
 * the row and `cols`) where the row passed its checks and its agent decodes, None elsewhere, and None
 * too where `serve` returns NULL with no exception set. NULL with an exception set on failure. */
static PyObject *serve_rows(PyObject *rows, const Py_ssize_t *cols, int ncols, const char *fn, serve_t serve,
                            PyObject *type) {
    row_t *rs;
    if (!checked_rows(rows, cols, ncols, fn, &rs)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    PyObject *out = PyList_New(n);
    if (!out) goto fail;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *value = NULL;
        int served = agent_decodes(&rs[k]);
        if (served < 0) goto fail;
        if (served) {
            value = serve(type, &rs[k], PyList_GET_ITEM(rows, k), cols);
            if (!value && PyErr_Occurred()) goto fail;
        }
        if (!value) value = Py_NewRef(Py_None);
        PyList_SET_ITEM(out, k, value);
    }
    PyMem_Free(rs);
    return out;
fail:
    PyMem_Free(rs);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *served_rows(PyObject *self, PyObject *args) {
    PyObject *rows;
    Py_ssize_t cols[6];
    if (!PyArg_ParseTuple(args, "O!(nnnnnn)", &PyList_Type, &rows, &cols[0], &cols[1], &cols[2], &cols[3],
                          &cols[4], &cols[5]))
        return NULL;
    return serve_rows(rows, cols, 6, "served_rows", payload_of, NULL);
}

enum { C_ID, C_SCOPE, C_VER, C_HASH, C_RAW, C_PAYLOAD, C_SEQ, C_TS, C_AGENT, C_FIRST, NC };

/* The record of a served row, as record_of builds it: NULL with no exception set where it is not made
 * here, NULL with one set on failure. */
static PyObject *row_record(PyObject *type, row_t *r, PyObject *row, const Py_ssize_t *cols) {
    PyObject *f[NF] = {NULL};
    PyObject *obj = NULL;
    PyObject *ts = PyTuple_GET_ITEM(row, cols[C_TS]), *first = PyTuple_GET_ITEM(row, cols[C_FIRST]);
    PyObject *agent = PyTuple_GET_ITEM(row, cols[C_AGENT]), *seq = PyTuple_GET_ITEM(row, cols[C_SEQ]);
    if (first == Py_None) first = ts;
    if (!PyLong_CheckExact(ts) || !PyLong_CheckExact(first) || !PyLong_CheckExact(seq) || !PyUnicode_CheckExact(agent))
        return NULL;
    int got = dec_fields(r->payload + SALT, r->payload_len - SALT, &f[F_CONTENT], &f[F_TAGS], &f[F_METADATA]);
    if (got <= 0) return NULL;
    f[F_UPDATED] = ns_to_datetime(ts);
    if (!f[F_UPDATED]) goto not_here_if_value;
    int same = PyObject_RichCompareBool(first, ts, Py_EQ);
    if (same < 0) goto error;
    f[F_CREATED] = same ? Py_NewRef(f[F_UPDATED]) : ns_to_datetime(first);
    if (!f[F_CREATED]) goto not_here_if_value;
    f[F_HASH] = hex_of((const char *)r->hash, HASH);
    if (!f[F_HASH]) goto error;
    f[F_ID] = Py_NewRef(PyTuple_GET_ITEM(row, cols[C_ID]));
    f[F_SCOPE] = Py_NewRef(PyTuple_GET_ITEM(row, cols[C_SCOPE]));
    f[F_VERSION] = Py_NewRef(PyTuple_GET_ITEM(row, cols[C_VER]));
    f[F_AGENT] = Py_NewRef(agent);
    f[F_SEQ] = Py_NewRef(seq);
    obj = new_record((PyTypeObject *)type, f);
    if (!obj) goto error;
    for (int k = 0; k < NF; k++) Py_XDECREF(f[k]);
    return obj;
not_here_if_value:
    /* a time the general path converts (and raises about, if it must) */
    if (!PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_OverflowError)) goto error;
    PyErr_Clear();
    for (int k = 0; k < NF; k++) Py_XDECREF(f[k]);
    return NULL;
error:
    for (int k = 0; k < NF; k++) Py_XDECREF(f[k]);
    return NULL;
}

static PyObject *latest_records(PyObject *self, PyObject *args) {
    PyObject *rows, *type;
    Py_ssize_t cols[NC];
    if (!PyArg_ParseTuple(args, "O!(nnnnnnnnnn)O!", &PyList_Type, &rows, &cols[0], &cols[1], &cols[2], &cols[3],
                          &cols[4], &cols[5], &cols[6], &cols[7], &cols[8], &cols[9], &PyType_Type, &type))
        return NULL;
    return serve_rows(rows, cols, NC, "latest_records", row_record, type);
}

static PyMethodDef methods[] = {
    {"served_rows", served_rows, METH_VARARGS,
     "served_rows(rows, (id, scope, ver, hash, raw, payload)) -> [bytes | None]: each row's packed fields, checked"},
    {"latest_records", latest_records, METH_VARARGS,
     "latest_records(rows, (id, scope, ver, hash, raw, payload, seq, ts, agent, first_ts), MemoryRecord) -> "
     "[MemoryRecord | None]: each row's record, checked and built"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pgread",
                                    "The PostgreSQL backend's read path in C (see mnemo/_pgread.c).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__pgread(void) {
    if (sha256_init() < 0) return NULL;
    if (fields_init() < 0) return NULL;
    return PyModule_Create(&module);
}
