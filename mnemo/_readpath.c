/* The read path of the file backend, in C: the payloads of the versions a get or a query serves, read
 * from the log and checked against the chain exactly as mnemo/storage/file/reads.py's _quick_packed
 * (its pure-Python twin) checks them, and the index's sorted ids searched.
 *
 * read_served(fd, items) takes a list of (Rec, Version) pairs (mnemo/storage/types.py: tuples) and
 * returns, for each, the packed record fields (its payload without the salt) as bytes, or None where
 * the twin gives None: a version staged in a transaction (negative offsets), a slot too short to hold a
 * salt and one byte, a short read, a slot whose CRC fails (an erased slot is zeros, which fail it), an
 * entry that does not hash to the version's chain hash, that is not the put of this record, version
 * and scope, or whose digest is not the SHA-256 of the payload. The caller then reads such a version
 * through its general path, which says what is wrong. For the entry this reads only the canonical
 * layout every put is written in (docs/FORMAT.md §1); any other layout is None here, and the general
 * path decides. So this never serves what the twin would refuse. The reads and the hashing run without
 * the GIL; an error of pread raises OSError, as os.pread does.
 *
 * read_latest(fd, recs, MemoryRecord) reads the latest version of each Rec with the same reads and
 * checks, and builds its record there as mnemo/storage/records.py's record_of builds it (its twin is
 * reads.latest_records): the packed fields decoded as msgpack decodes them, for the values a put holds
 * (anything else is None, and the general path decodes it or says what is wrong), the two datetimes
 * (as mnemo.record.ns_to_datetime makes them), the hash's hex, and the MemoryRecord made as
 * make_memory_record makes it (its __dict__ set in one step). None wherever read_served gives None.
 *
 * file_state(path, fd) is what refresh looks at (replay.log_file_state is its twin): the identity of
 * the file at `path` and the size of the one `fd` holds, in one call.
 *
 * find_sorted(blob, width, key) is the binary search of SortedIds.find (index_columns.py): the row of
 * `key` in a blob of fixed-width ids in sorted order, or -1.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/stat.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "_fields.h"

#define SC 4
#define SALT 16
#define HASH 32
#define MIN_SLOT (SC + SALT + 1)
#define MAX_READ ((int64_t)1 << 31) /* a frame is never larger (framing.MAX_FRAME) */

static EVP_MD *sha256_md = NULL;

typedef struct {
    /* what the pair asks for */
    int64_t e_off, e_len, s_off, s_len, ver;
    const char *id, *scope;
    Py_ssize_t id_len, scope_len;
    unsigned char hash[HASH];
    int skip; /* 1: None without reading */
    /* what was read */
    unsigned char *buf; /* entry bytes then slot bytes */
    int64_t got_e, got_s;
    int err; /* errno of a failed pread */
    Py_ssize_t agent_off, agent_len;
    int ok;
} item_t;

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* pread until `len` bytes or end of file; the bytes read, or -1 with errno set. One call, as os.pread
 * makes, except that an interrupted call is retried (as Python retries it). */
static int64_t pread_once(int fd, unsigned char *buf, int64_t len, int64_t off) {
    for (;;) {
        ssize_t r = pread(fd, buf, (size_t)len, (off_t)off);
        if (r >= 0) return (int64_t)r;
        if (errno != EINTR) return -1;
    }
}

/* A msgpack str (fixstr, str8/16/32) at p[*i]: its bytes at *start, *len; *i moves past it. */
static int str_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i, Py_ssize_t *start, Py_ssize_t *len) {
    if (*i >= n) return 0;
    unsigned char b = p[*i];
    Py_ssize_t s;
    uint64_t l;
    if (b >= 0xA0 && b <= 0xBF) {
        s = *i + 1;
        l = b - 0xA0;
    } else if (b == 0xD9 || b == 0xDA || b == 0xDB) {
        int w = b == 0xD9 ? 1 : b == 0xDA ? 2 : 4;
        if (w > n - *i - 1) return 0;
        l = 0;
        for (int k = 0; k < w; k++) l = (l << 8) | p[*i + 1 + k];
        s = *i + 1 + w;
    } else {
        return 0;
    }
    if (l > (uint64_t)(n - s)) return 0;
    *start = s;
    *len = (Py_ssize_t)l;
    *i = s + (Py_ssize_t)l;
    return 1;
}

/* A msgpack unsigned int (positive fixint, uint 8/16/32/64) at p[*i]; *i moves past it. */
static int uint_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i, uint64_t *v) {
    if (*i >= n) return 0;
    unsigned char b = p[*i];
    int w;
    if (b < 0x80) {
        *v = b;
        *i += 1;
        return 1;
    }
    if (b == 0xCC) w = 1;
    else if (b == 0xCD) w = 2;
    else if (b == 0xCE) w = 4;
    else if (b == 0xCF) w = 8;
    else return 0;
    if (w > n - *i - 1) return 0;
    uint64_t x = 0;
    for (int k = 0; k < w; k++) x = (x << 8) | p[*i + 1 + k];
    *v = x;
    *i += 1 + w;
    return 1;
}

static int has(const unsigned char *p, Py_ssize_t n, Py_ssize_t i, const char *k, Py_ssize_t kn) {
    return i >= 0 && i <= n && kn <= n - i && memcmp(p + i, k, (size_t)kn) == 0;
}

/* The entry raw[0..n) in the canonical layout of a put, [1, seq, ts, prev, "put", agent, {digest, id,
 * scope, size, ver}], of record `it->id`, version `it->ver` in scope `it->scope`; its digest at *digest,
 * the agent's bytes (to be checked as UTF-8 with the GIL) in the item. */
static int put_of(const unsigned char *raw, Py_ssize_t n, item_t *it, const unsigned char **digest) {
    Py_ssize_t i = 0, s, l;
    uint64_t x;
    if (!has(raw, n, 0, "\x97\x01", 2)) return 0;
    i = 2;
    if (!uint_at(raw, n, &i, &x)) return 0; /* seq */
    if (!has(raw, n, i, "\xcf", 1) || n - i < 9) return 0; /* the timestamp: uint 64 */
    i += 9;
    if (!has(raw, n, i, "\xc4\x20", 2) || n - i < 2 + HASH) return 0; /* prev */
    i += 2 + HASH;
    if (!has(raw, n, i, "\xa3put", 4)) return 0;
    i += 4;
    if (!str_at(raw, n, &i, &s, &l)) return 0;
    it->agent_off = s;
    it->agent_len = l;
    if (!has(raw, n, i, "\x85\xa6" "digest\xc4\x20", 10) || n - i < 10 + HASH) return 0;
    *digest = raw + i + 10;
    i += 10 + HASH;
    if (!has(raw, n, i, "\xa2id", 3)) return 0;
    i += 3;
    if (!str_at(raw, n, &i, &s, &l) || l != it->id_len || memcmp(raw + s, it->id, (size_t)l) != 0) return 0;
    if (!has(raw, n, i, "\xa5scope", 6)) return 0;
    i += 6;
    if (!str_at(raw, n, &i, &s, &l) || l != it->scope_len || memcmp(raw + s, it->scope, (size_t)l) != 0) return 0;
    if (!has(raw, n, i, "\xa4size", 5)) return 0;
    i += 5;
    if (!uint_at(raw, n, &i, &x)) return 0;
    if (!has(raw, n, i, "\xa3ver", 4)) return 0;
    i += 4;
    if (!uint_at(raw, n, &i, &x) || x != (uint64_t)it->ver) return 0;
    return i == n;
}

static int sha256(EVP_MD_CTX *ctx, const unsigned char *p, size_t n, unsigned char *out) {
    unsigned int len = 0;
    return EVP_DigestInit_ex(ctx, sha256_md, NULL) && EVP_DigestUpdate(ctx, p, n) &&
           EVP_DigestFinal_ex(ctx, out, &len) && len == HASH;
}

/* Read one item's entry and slot and check them (without the GIL). */
static void check_item(int fd, EVP_MD_CTX *ctx, item_t *it) {
    unsigned char *raw = it->buf, *slot = it->buf + it->e_len;
    if (it->e_off + it->e_len == it->s_off) { /* one entry in its frame: entry and slot are adjacent */
        int64_t got = pread_once(fd, raw, it->e_len + it->s_len, it->e_off);
        if (got < 0) {
            it->err = errno;
            return;
        }
        it->got_e = got < it->e_len ? got : it->e_len;
        it->got_s = got - it->got_e;
    } else {
        int64_t got = pread_once(fd, slot, it->s_len, it->s_off);
        if (got < 0) {
            it->err = errno;
            return;
        }
        it->got_s = got;
        got = pread_once(fd, raw, it->e_len, it->e_off);
        if (got < 0) {
            it->err = errno;
            return;
        }
        it->got_e = got;
    }
    if (it->got_s != it->s_len || it->got_e != it->e_len) return;
    const unsigned char *payload = slot + SC, *digest = NULL;
    size_t plen = (size_t)(it->s_len - SC);
    if (be32(slot) != (uint32_t)crc32(crc32(0L, Z_NULL, 0), payload, (uInt)plen)) return;
    unsigned char h[HASH];
    if (!sha256(ctx, raw, (size_t)it->e_len, h) || memcmp(h, it->hash, HASH) != 0) return;
    if (!put_of(raw, (Py_ssize_t)it->e_len, it, &digest)) return;
    if (!sha256(ctx, payload, plen, h) || memcmp(h, digest, HASH) != 0) return;
    it->ok = 1;
}

static int as_i64(PyObject *o, int64_t *out) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return 0;
    *out = (int64_t)v;
    return 1;
}

static const char NOT_A_PAIR[] = "read_served: each item must be a (Rec, Version) pair";

/* Fill an item from a record and one of its versions (mnemo/storage/types.py: tuples); 0 with an
 * exception set if they are not such tuples. */
static int take_item(PyObject *rec, PyObject *v, item_t *it, const char *what) {
    if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) < 4 || !PyTuple_Check(v) || PyTuple_GET_SIZE(v) < 10) {
        PyErr_SetString(PyExc_TypeError, what);
        return 0;
    }
    PyObject *id = PyTuple_GET_ITEM(rec, 0), *scope = PyTuple_GET_ITEM(rec, 1), *hash = PyTuple_GET_ITEM(v, 5);
    if (!PyUnicode_Check(id) || !PyUnicode_Check(scope)) {
        PyErr_SetString(PyExc_TypeError, "read_served: a record's id and scope must be str");
        return 0;
    }
    if (!as_i64(PyTuple_GET_ITEM(v, 0), &it->ver) || !as_i64(PyTuple_GET_ITEM(v, 6), &it->s_off) ||
        !as_i64(PyTuple_GET_ITEM(v, 7), &it->s_len) || !as_i64(PyTuple_GET_ITEM(v, 8), &it->e_off) ||
        !as_i64(PyTuple_GET_ITEM(v, 9), &it->e_len))
        return 0;
    if (it->s_off < 0 || it->e_off < 0 || it->s_len < MIN_SLOT || it->e_len < 0 || it->s_len > MAX_READ ||
        it->e_len > MAX_READ || it->ver < 0 || !PyBytes_Check(hash) || PyBytes_GET_SIZE(hash) != HASH) {
        it->skip = 1; /* staged, too short, or what no log holds: the general path reads it */
        return 1;
    }
    memcpy(it->hash, PyBytes_AS_STRING(hash), HASH);
    it->id = PyUnicode_AsUTF8AndSize(id, &it->id_len);
    it->scope = it->id ? PyUnicode_AsUTF8AndSize(scope, &it->scope_len) : NULL;
    if (!it->id || !it->scope) { /* a str that is not UTF-8 (lone surrogates): no entry names it */
        PyErr_Clear();
        it->skip = 1;
    }
    return 1;
}

/* Read and check every item not skipped, in one arena (*arena, freed by the caller), without the GIL.
 * 0 with an exception set on failure (OSError as os.pread raises it). */
static int read_items(int fd, item_t *its, Py_ssize_t n, unsigned char **arena) {
    int64_t total = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (!its[k].skip) total += its[k].e_len + its[k].s_len;
    if (total > PY_SSIZE_T_MAX / 2) {
        PyErr_NoMemory();
        return 0;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    *arena = PyMem_Malloc(total ? (size_t)total : 1);
    if (!*arena || !ctx) {
        EVP_MD_CTX_free(ctx);
        PyErr_NoMemory();
        return 0;
    }
    int64_t at = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (!its[k].skip) {
            its[k].buf = *arena + at;
            at += its[k].e_len + its[k].s_len;
        }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++)
        if (!its[k].skip) {
            check_item(fd, ctx, &its[k]);
            if (its[k].err) break;
        }
    Py_END_ALLOW_THREADS
    EVP_MD_CTX_free(ctx);
    for (Py_ssize_t k = 0; k < n; k++)
        if (its[k].err) {
            errno = its[k].err;
            PyErr_SetFromErrno(PyExc_OSError);
            return 0;
        }
    return 1;
}

/* Whether an item that passed the checks is served: msgpack decodes the agent as strict UTF-8, so an
 * entry whose agent is not does not decode (1 served, 0 not, -1 an exception set). */
static int agent_decodes(item_t *it) {
    if (!it->ok) return 0;
    PyObject *agent = PyUnicode_DecodeUTF8((const char *)it->buf + it->agent_off, it->agent_len, NULL);
    if (agent) {
        Py_DECREF(agent);
        return 1;
    }
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
    PyErr_Clear();
    return 0;
}

static PyObject *read_served(PyObject *self, PyObject *args) {
    int fd;
    PyObject *items;
    if (!PyArg_ParseTuple(args, "iO!", &fd, &PyList_Type, &items)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyList_New(n);
    item_t *its = n ? PyMem_Calloc((size_t)n, sizeof(item_t)) : NULL;
    unsigned char *arena = NULL;
    if (!out || (n && !its)) {
        if (out) PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *pair = PyList_GET_ITEM(items, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, NOT_A_PAIR);
            goto fail;
        }
        if (!take_item(PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1), &its[k], NOT_A_PAIR)) goto fail;
    }
    if (!read_items(fd, its, n, &arena)) goto fail;
    for (Py_ssize_t k = 0; k < n; k++) {
        item_t *it = &its[k];
        PyObject *value = NULL;
        int served = agent_decodes(it);
        if (served < 0) goto fail;
        if (served) {
            value = PyBytes_FromStringAndSize((const char *)it->buf + it->e_len + SC + SALT,
                                              (Py_ssize_t)(it->s_len - SC - SALT));
            if (!value) goto fail;
        }
        if (!value) value = Py_NewRef(Py_None);
        PyList_SET_ITEM(out, k, value);
    }
    PyMem_Free(arena);
    PyMem_Free(its);
    return out;
fail:
    PyMem_Free(arena);
    PyMem_Free(its);
    Py_XDECREF(out);
    return NULL;
}

/* The MemoryRecord of a served item, as mnemo.record.make_memory_record builds it: an instance of
 * `type` whose __dict__ holds the fields. NULL with no exception set where the fields are not
 * decoded here, NULL with one set on failure. */
static PyObject *record_of(PyTypeObject *type, item_t *it, PyObject *rec, PyObject *v) {
    const unsigned char *packed = it->buf + it->e_len + SC + SALT;
    PyObject *f[NF] = {NULL};
    PyObject *obj = NULL;
    int got = dec_fields(packed, (Py_ssize_t)(it->s_len - SC - SALT), &f[F_CONTENT], &f[F_TAGS], &f[F_METADATA]);
    if (got <= 0) return NULL;
    PyObject *versions = PyTuple_GET_ITEM(rec, 3);
    if (!PyTuple_Check(versions) || PyTuple_GET_SIZE(versions) < 1 || !PyTuple_Check(PyTuple_GET_ITEM(versions, 0)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(versions, 0)) < 3)
        goto not_here;
    PyObject *ts = PyTuple_GET_ITEM(v, 2), *first = PyTuple_GET_ITEM(PyTuple_GET_ITEM(versions, 0), 2);
    if (!PyLong_Check(ts) || !PyLong_Check(first)) goto not_here;
    f[F_UPDATED] = ns_to_datetime(ts);
    if (!f[F_UPDATED]) goto not_here_if_value;
    int same = PyObject_RichCompareBool(first, ts, Py_EQ);
    if (same < 0) goto error;
    f[F_CREATED] = same ? Py_NewRef(f[F_UPDATED]) : ns_to_datetime(first);
    if (!f[F_CREATED]) goto not_here_if_value;
    f[F_HASH] = hex_of((const char *)it->hash, HASH);
    if (!f[F_HASH]) goto error;
    f[F_ID] = Py_NewRef(PyTuple_GET_ITEM(rec, 0));
    f[F_SCOPE] = Py_NewRef(PyTuple_GET_ITEM(rec, 1));
    f[F_VERSION] = Py_NewRef(PyTuple_GET_ITEM(v, 0));
    f[F_AGENT] = Py_NewRef(PyTuple_GET_ITEM(v, 3));
    f[F_SEQ] = Py_NewRef(PyTuple_GET_ITEM(v, 1));
    obj = new_record(type, f);
    if (!obj) goto error;
    for (int k = 0; k < NF; k++) Py_XDECREF(f[k]);
    return obj;
not_here_if_value:
    /* a time the general path converts (and raises about, if it must) */
    if (!PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_OverflowError)) goto error;
    PyErr_Clear();
not_here:
    for (int k = 0; k < NF; k++) Py_XDECREF(f[k]);
    return NULL;
error:
    for (int k = 0; k < NF; k++) Py_XDECREF(f[k]);
    return NULL;
}

static const char NOT_A_REC[] = "read_latest: each item must be a Rec";

static PyObject *read_latest(PyObject *self, PyObject *args) {
    int fd;
    PyObject *recs, *type;
    if (!PyArg_ParseTuple(args, "iO!O!", &fd, &PyList_Type, &recs, &PyType_Type, &type)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(recs);
    PyObject *out = PyList_New(n);
    item_t *its = n ? PyMem_Calloc((size_t)n, sizeof(item_t)) : NULL;
    unsigned char *arena = NULL;
    if (!out || (n && !its)) {
        if (out) PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *rec = PyList_GET_ITEM(recs, k), *versions;
        if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) < 4 || !PyTuple_Check(versions = PyTuple_GET_ITEM(rec, 3)) ||
            PyTuple_GET_SIZE(versions) < 1) {
            PyErr_SetString(PyExc_TypeError, NOT_A_REC);
            goto fail;
        }
        if (!take_item(rec, PyTuple_GET_ITEM(versions, PyTuple_GET_SIZE(versions) - 1), &its[k], NOT_A_REC))
            goto fail;
    }
    if (!read_items(fd, its, n, &arena)) goto fail;
    for (Py_ssize_t k = 0; k < n; k++) {
        item_t *it = &its[k];
        PyObject *rec = PyList_GET_ITEM(recs, k), *value = NULL;
        PyObject *versions = PyTuple_GET_ITEM(rec, 3);
        int served = agent_decodes(it);
        if (served < 0) goto fail;
        if (served) {
            value = record_of((PyTypeObject *)type, it, rec, PyTuple_GET_ITEM(versions, PyTuple_GET_SIZE(versions) - 1));
            if (!value && PyErr_Occurred()) goto fail;
        }
        if (!value) value = Py_NewRef(Py_None);
        PyList_SET_ITEM(out, k, value);
    }
    PyMem_Free(arena);
    PyMem_Free(its);
    return out;
fail:
    PyMem_Free(arena);
    PyMem_Free(its);
    Py_XDECREF(out);
    return NULL;
}

/* file_state(path, fd) -> (st_ino, st_dev, size): the identity of the file at `path` ((-1, -1) if there
 * is none) and the size of the file `fd` has open, as os.stat and os.fstat give them (OSError as they
 * raise it), in one call. */
static PyObject *file_state(PyObject *self, PyObject *args) {
    PyObject *given, *path = NULL;
    int fd;
    if (!PyArg_ParseTuple(args, "Oi", &given, &fd) || !PyUnicode_FSConverter(given, &path)) return NULL;
    struct stat st, fst;
    int r, fr, err = 0, ferr = 0;
    Py_BEGIN_ALLOW_THREADS
    r = stat(PyBytes_AS_STRING(path), &st);
    if (r < 0) err = errno;
    fr = fstat(fd, &fst);
    if (fr < 0) ferr = errno;
    Py_END_ALLOW_THREADS
    if (r < 0 && err != ENOENT) {
        errno = err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, given);
        Py_DECREF(path);
        return NULL;
    }
    Py_DECREF(path);
    if (fr < 0) {
        errno = ferr;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (r < 0) return Py_BuildValue("(iiL)", -1, -1, (long long)fst.st_size);
    return Py_BuildValue("(KKL)", (unsigned long long)st.st_ino, (unsigned long long)st.st_dev, (long long)fst.st_size);
}

static PyObject *find_sorted(PyObject *self, PyObject *args) {
    Py_buffer blob, key;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*ny*", &blob, &width, &key)) return NULL;
    Py_ssize_t found = -1;
    if (width <= 0 || blob.len % width) {
        PyBuffer_Release(&blob);
        PyBuffer_Release(&key);
        PyErr_SetString(PyExc_ValueError, "find_sorted: the blob must hold whole ids of a positive width");
        return NULL;
    }
    if (key.len == width) {
        const char *b = blob.buf, *k = key.buf;
        Py_ssize_t lo = 0, hi = blob.len / width;
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (memcmp(b + mid * width, k, (size_t)width) < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo < blob.len / width && memcmp(b + lo * width, k, (size_t)width) == 0) found = lo;
    }
    PyBuffer_Release(&blob);
    PyBuffer_Release(&key);
    return PyLong_FromSsize_t(found);
}

static PyMethodDef methods[] = {
    {"read_served", read_served, METH_VARARGS,
     "read_served(fd, [(Rec, Version), ...]) -> [bytes | None]: each version's packed fields, read and checked"},
    {"find_sorted", find_sorted, METH_VARARGS,
     "find_sorted(blob, width, key) -> int: the row of key among sorted fixed-width ids, or -1"},
    {"read_latest", read_latest, METH_VARARGS,
     "read_latest(fd, [Rec, ...], MemoryRecord) -> [MemoryRecord | None]: each record's latest version, read, "
     "checked and built"},
    {"file_state", file_state, METH_VARARGS,
     "file_state(path, fd) -> (st_ino, st_dev, size): the file at path ((-1, -1) if none) and fd's size"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_readpath",
                                    "The file backend's read path in C (see mnemo/_readpath.c).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__readpath(void) {
    if (!sha256_md) {
        sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
        if (!sha256_md) {
            PyErr_SetString(PyExc_ImportError, "OpenSSL has no SHA-256");
            return NULL;
        }
    }
    if (fields_init() < 0) return NULL;
    return PyModule_Create(&module);
}
