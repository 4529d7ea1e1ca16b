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
 *
 * made_record(MemoryRecord, id, ver, content, tags, metadata, scope, agent, created_ns, ts_ns, seq, hash) is
 * the record a write returns (mnemo.record.written_record_twin is its twin): the fields as given, the
 * times as ns_to_datetime makes them (version 1's creation time is its update's, the same object), the
 * hash's hex, built as make_memory_record builds it.
 *
 * find_row and recs_at are the look-ups of the index a get and a query make before they read (index_reads.py's
 * Index.row_of and Index.recs_at are their twins): the row of an id, and the Rec tuples of rows, made
 * from the index's columns.
 *
 * new_rows is the index's other side, a commit's: the run of a frame's staged puts of new records (no
 * live row holds their ids, found as find_row finds them), as the columns Index.put_new appends
 * (mnemo/storage/file/new_rows.py's new_rows_twin is its twin).
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
#include "_sha256.h"

#define SC 4
#define SALT 16
#define HASH 32
#define MIN_SLOT (SC + SALT + 1)
#define MAX_READ ((int64_t)1 << 31) /* a frame is never larger (framing.MAX_FRAME) */

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
    if (!put_of(raw, (Py_ssize_t)it->e_len, it->id, it->id_len, it->scope, it->scope_len, it->ver, &it->agent_off,
                &it->agent_len, &digest))
        return;
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
    return utf8_decodes(it->buf + it->agent_off, it->agent_len);
}

/* What the value of a served item is made as: its k-th of `from` (the list of what was asked for, or the
 * gathered rows), a new reference; NULL with no exception set where it is None, NULL with one set on
 * failure. */
typedef PyObject *(*serve_t)(PyObject *type, void *from, Py_ssize_t k, item_t *it);

/* Read and check the n items in one arena (read_items), and the list of what `serve` makes of each one
 * served (agent_decodes), None for the others. What read_served, read_latest and read_gathered share. */
static PyObject *read_and_serve(int fd, item_t *its, Py_ssize_t n, serve_t serve, PyObject *type, void *from) {
    unsigned char *arena = NULL;
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    if (!read_items(fd, its, n, &arena)) goto fail;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *value = NULL;
        int served = agent_decodes(&its[k]);
        if (served < 0) goto fail;
        if (served && !(value = serve(type, from, k, &its[k])) && PyErr_Occurred()) goto fail;
        PyList_SET_ITEM(out, k, value ? value : Py_NewRef(Py_None));
    }
    PyMem_Free(arena);
    return out;
fail:
    PyMem_Free(arena);
    Py_DECREF(out);
    return NULL;
}

/* read_and_serve of the items `take` fills from each of `list` (0 with an exception set: not such an
 * item). */
static PyObject *read_list(int fd, PyObject *list, int (*take)(PyObject *, item_t *), serve_t serve, PyObject *type) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    item_t *its = PyMem_Calloc(n ? (size_t)n : 1, sizeof(item_t));
    if (!its) return PyErr_NoMemory();
    Py_ssize_t k = 0;
    while (k < n && take(PyList_GET_ITEM(list, k), &its[k])) k++;
    PyObject *out = k == n ? read_and_serve(fd, its, n, serve, type, list) : NULL;
    PyMem_Free(its);
    return out;
}

static int take_pair(PyObject *pair, item_t *it) {
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, NOT_A_PAIR);
        return 0;
    }
    return take_item(PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1), it, NOT_A_PAIR);
}

/* The packed fields of a served version: its payload without the salt. */
static PyObject *packed_of(PyObject *type, void *from, Py_ssize_t k, item_t *it) {
    return PyBytes_FromStringAndSize((const char *)it->buf + it->e_len + SC + SALT, (Py_ssize_t)(it->s_len - SC - SALT));
}

static PyObject *read_served(PyObject *self, PyObject *args) {
    int fd;
    PyObject *items;
    if (!PyArg_ParseTuple(args, "iO!", &fd, &PyList_Type, &items)) return NULL;
    return read_list(fd, items, take_pair, packed_of, NULL);
}

/* What a served item's record holds besides the fields read from its payload (borrowed): its id and
 * scope, the version's number, agent, seq and time, and the first version's time (NULL: not known). */
typedef struct {
    PyObject *id, *scope, *ver, *agent, *seq, *ts, *first;
} meta_t;

/* The MemoryRecord of a served item, as mnemo.record.make_memory_record builds it: an instance of
 * `type` whose __dict__ holds the fields. NULL with no exception set where the fields are not
 * decoded here, NULL with one set on failure. */
static PyObject *record_of(PyTypeObject *type, item_t *it, const meta_t *m) {
    const unsigned char *packed = it->buf + it->e_len + SC + SALT;
    PyObject *f[NF] = {NULL};
    PyObject *obj = NULL;
    int got = dec_fields(packed, (Py_ssize_t)(it->s_len - SC - SALT), &f[F_CONTENT], &f[F_TAGS], &f[F_METADATA]);
    if (got <= 0) return NULL;
    PyObject *ts = m->ts, *first = m->first;
    if (!first || !PyLong_Check(ts) || !PyLong_Check(first)) goto not_here;
    f[F_UPDATED] = ns_to_datetime(ts);
    if (!f[F_UPDATED]) goto not_here_if_value;
    int same = PyObject_RichCompareBool(first, ts, Py_EQ);
    if (same < 0) goto error;
    f[F_CREATED] = same ? Py_NewRef(f[F_UPDATED]) : ns_to_datetime(first);
    if (!f[F_CREATED]) goto not_here_if_value;
    f[F_HASH] = hex_of((const char *)it->hash, HASH);
    if (!f[F_HASH]) goto error;
    f[F_ID] = Py_NewRef(m->id);
    f[F_SCOPE] = Py_NewRef(m->scope);
    f[F_VERSION] = Py_NewRef(m->ver);
    f[F_AGENT] = Py_NewRef(m->agent);
    f[F_SEQ] = Py_NewRef(m->seq);
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

/* A Rec's latest version (0 with an exception set if it is not a Rec with one). */
static int take_latest(PyObject *rec, item_t *it) {
    PyObject *versions;
    if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) < 4 || !PyTuple_Check(versions = PyTuple_GET_ITEM(rec, 3)) ||
        PyTuple_GET_SIZE(versions) < 1) {
        PyErr_SetString(PyExc_TypeError, NOT_A_REC);
        return 0;
    }
    return take_item(rec, PyTuple_GET_ITEM(versions, PyTuple_GET_SIZE(versions) - 1), it, NOT_A_REC);
}

/* The record of the k-th Rec of the list `from`, served (take_latest has checked its shape). */
static PyObject *latest_of(PyObject *type, void *from, Py_ssize_t k, item_t *it) {
    PyObject *rec = PyList_GET_ITEM((PyObject *)from, k), *versions = PyTuple_GET_ITEM(rec, 3);
    PyObject *v = PyTuple_GET_ITEM(versions, PyTuple_GET_SIZE(versions) - 1), *v0 = PyTuple_GET_ITEM(versions, 0);
    meta_t m = {PyTuple_GET_ITEM(rec, 0), PyTuple_GET_ITEM(rec, 1), PyTuple_GET_ITEM(v, 0),
                PyTuple_GET_ITEM(v, 3), PyTuple_GET_ITEM(v, 1), PyTuple_GET_ITEM(v, 2),
                PyTuple_Check(v0) && PyTuple_GET_SIZE(v0) >= 3 ? PyTuple_GET_ITEM(v0, 2) : NULL};
    return record_of((PyTypeObject *)type, it, &m);
}

static PyObject *read_latest(PyObject *self, PyObject *args) {
    int fd;
    PyObject *recs, *type;
    if (!PyArg_ParseTuple(args, "iO!O!", &fd, &PyList_Type, &recs, &PyType_Type, &type)) return NULL;
    return read_list(fd, recs, take_latest, latest_of, type);
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

/* The live row of `id` (an exact str) as find_row looks it up: a new reference to the row (an int) or
 * None, NULL with an exception set on failure. */
static PyObject *row_in(PyObject *rows, const Py_buffer *blob, Py_ssize_t width, PyObject *dead, PyObject *id) {
    PyObject *row = PyDict_GetItemWithError(rows, id);
    if (row || PyErr_Occurred()) return Py_XNewRef(row);
    Py_ssize_t size = blob->len;
    if (width <= 0 || !size || size % width || !PyUnicode_IS_ASCII(id) || PyUnicode_GET_LENGTH(id) != width)
        Py_RETURN_NONE;
    const char *b = blob->buf, *k = (const char *)PyUnicode_1BYTE_DATA(id);
    /* An id after every id of the blob is no row of it: a live record of such an id is a row of `rows`,
     * found above without a search. So a missing one returns here too, taking the steps an existing one
     * takes (a search for it would make a missing id the slower of the two, and tell them apart). */
    if (memcmp(k, b + size - width, (size_t)width) > 0) Py_RETURN_NONE;
    Py_ssize_t lo = 0, hi = size / width;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (memcmp(b + mid * width, k, (size_t)width) < 0) lo = mid + 1;
        else hi = mid;
    }
    int match = lo < size / width && memcmp(b + lo * width, k, (size_t)width) == 0;
    /* An id not there takes the steps of one found (its row made an int, the forgotten rows asked about
     * it), so that timing a get does not tell a missing id from one the caller may not read. */
    PyObject *found = PyLong_FromSsize_t(lo);
    int gone = !found ? -1 : PySet_GET_SIZE(dead) ? PySet_Contains(dead, found) : 0;
    if (gone || !match) {
        Py_XDECREF(found);
        if (gone < 0) return NULL;
        Py_RETURN_NONE;
    }
    return found;
}

/* find_row(rows, blob, width, dead, rec_id) -> int | None: Index.row_of (its twin, index_reads.py) in one
 * call: the row of `rec_id` in `rows` (the rows after the snapshot's, by id), else by binary search
 * among the `width`-byte ASCII ids of `blob` (find_sorted) unless its row is in `dead` (forgotten);
 * None if no live row holds it. */
static PyObject *find_row(PyObject *self, PyObject *args) {
    PyObject *rows, *dead, *id;
    Py_buffer blob;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "O!y*nOU", &PyDict_Type, &rows, &blob, &width, &dead, &id)) return NULL;
    PyObject *out = NULL;
    if (!PyAnySet_Check(dead))
        PyErr_SetString(PyExc_TypeError, "find_row: the forgotten rows must be a set");
    else
        out = row_in(rows, &blob, width, dead, id);
    PyBuffer_Release(&blob);
    return out;
}

/* -- the index's rows as Rec tuples -----------------------------------------------------------------
 * recs_at(cols, hashes, scopes, agents, tagsets, older, hits, Rec, Version) -> [Rec | None]: the record of
 * each (id, row) of `hits` as Index.recs_at (its twin, index_reads.py) makes it from the index's tables: the
 * columns `cols` (array.array, by name), the rows' entry hashes `hashes` (32 bytes a row), the interned
 * `scopes` and `agents`, the tag sets `tagsets` and `older` (row -> the earlier versions); `Rec` and
 * `Version` the named tuples (mnemo/storage/types.py). None for a row the tables do not hold whole (a
 * row or a code out of range, a freed tag set: what the twin calls inconsistent). */
enum { C_VER, C_SEQ, C_TS, C_AGENT, C_SIZE, C_SLOT_OFF, C_SLOT_LEN, C_ENTRY_OFF, C_ENTRY_LEN, C_SCOPE, C_TAGSET, NC };
static const char *col_names[NC] = {"ver", "seq", "ts", "agent", "size", "slot_off", "slot_len", "entry_off",
                                    "entry_len", "scope", "tagset"};
static const char col_codes[NC] = {'I', 'q', 'q', 'I', 'q', 'q', 'I', 'q', 'I', 'I', 'I'};
static PyObject *col_keys[NC];

static uint32_t u32_at(const Py_buffer *v, Py_ssize_t row) {
    uint32_t x;
    memcpy(&x, (const char *)v->buf + row * 4, 4);
    return x;
}

static int64_t i64_at(const Py_buffer *v, Py_ssize_t row) {
    int64_t x;
    memcpy(&x, (const char *)v->buf + row * 8, 8);
    return x;
}

/* An interned value by code (borrowed), or NULL (no exception) if the code is out of range. */
static PyObject *value_at(PyObject *list, uint32_t code) {
    return (Py_ssize_t)code < PyList_GET_SIZE(list) ? PyList_GET_ITEM(list, (Py_ssize_t)code) : NULL;
}

/* A named tuple of `type` holding `items` (a tuple, stolen): as type._make(items) makes it. */
static PyObject *named(PyTypeObject *type, PyObject *items) {
    if (!items) return NULL;
    PyObject *args = PyTuple_Pack(1, items);
    Py_DECREF(items);
    if (!args) return NULL;
    PyObject *out = PyTuple_Type.tp_new(type, args, NULL);
    Py_DECREF(args);
    return out;
}

/* The Rec of one row: a new reference, Py_None for a row the tables do not hold whole, NULL with an
 * exception set on failure. */
static PyObject *rec_of_row(Py_buffer *views, Py_ssize_t rows, const Py_buffer *hashes, PyObject *scopes,
                            PyObject *agents, PyObject *tagsets, PyObject *older, PyObject *id, Py_ssize_t row,
                            PyTypeObject *rec_type, PyTypeObject *version_type) {
    if (row < 0 || row >= rows || row >= hashes->len / HASH) Py_RETURN_NONE;
    PyObject *scope = value_at(scopes, u32_at(&views[C_SCOPE], row));
    PyObject *agent = value_at(agents, u32_at(&views[C_AGENT], row));
    PyObject *tags = value_at(tagsets, u32_at(&views[C_TAGSET], row));
    if (!scope || !agent || !tags || tags == Py_None) Py_RETURN_NONE;
    PyObject *before = NULL;
    if (PyDict_GET_SIZE(older)) {
        PyObject *key = PyLong_FromSsize_t(row);
        if (!key) return NULL;
        before = PyDict_GetItemWithError(older, key);
        Py_DECREF(key);
        if (!before && PyErr_Occurred()) return NULL;
        if (before && !PyTuple_Check(before)) {
            PyErr_SetString(PyExc_TypeError, "recs_at: a row's earlier versions must be a tuple");
            return NULL;
        }
    }
    PyObject *latest = named(version_type, Py_BuildValue(
        "(kLLOLy#LkLk)", (unsigned long)u32_at(&views[C_VER], row), (long long)i64_at(&views[C_SEQ], row),
        (long long)i64_at(&views[C_TS], row), agent, (long long)i64_at(&views[C_SIZE], row),
        (const char *)hashes->buf + row * HASH, (Py_ssize_t)HASH, (long long)i64_at(&views[C_SLOT_OFF], row),
        (unsigned long)u32_at(&views[C_SLOT_LEN], row), (long long)i64_at(&views[C_ENTRY_OFF], row),
        (unsigned long)u32_at(&views[C_ENTRY_LEN], row)));
    if (!latest) return NULL;
    Py_ssize_t k = before ? PyTuple_GET_SIZE(before) : 0;
    PyObject *versions = PyTuple_New(k + 1);
    if (!versions) {
        Py_DECREF(latest);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < k; i++) PyTuple_SET_ITEM(versions, i, Py_NewRef(PyTuple_GET_ITEM(before, i)));
    PyTuple_SET_ITEM(versions, k, latest);
    PyObject *items = PyTuple_New(4);
    if (!items) {
        Py_DECREF(versions);
        return NULL;
    }
    PyTuple_SET_ITEM(items, 0, Py_NewRef(id));
    PyTuple_SET_ITEM(items, 1, Py_NewRef(scope));
    PyTuple_SET_ITEM(items, 2, Py_NewRef(tags));
    PyTuple_SET_ITEM(items, 3, versions);
    return named(rec_type, items);
}

/* The buffers of the index's columns (views[NC]) and of its hashes, and the rows they all hold (*rows);
 * 0 with an exception set (and nothing held) on failure. release_views lets go of them. */
static int take_views(const char *fn, PyObject *cols, PyObject *hashes_obj, Py_buffer *views, Py_buffer *hashes,
                      Py_ssize_t *rows) {
    int k = 0;
    *rows = PY_SSIZE_T_MAX;
    for (; k < NC; k++) {
        PyObject *col = PyDict_GetItemWithError(cols, col_keys[k]);
        if (!col) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s: no column %s", fn, col_names[k]);
            goto fail;
        }
        Py_buffer *v = &views[k];
        if (PyObject_GetBuffer(col, v, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) goto fail;
        if (v->itemsize != (col_codes[k] == 'I' ? 4 : 8) || !v->format || v->format[0] != col_codes[k] || v->format[1]) {
            PyBuffer_Release(v);
            PyErr_Format(PyExc_TypeError, "%s: column %s is not an array of type %c", fn, col_names[k], col_codes[k]);
            goto fail;
        }
        if (v->len / v->itemsize < *rows) *rows = v->len / v->itemsize;
    }
    if (PyObject_GetBuffer(hashes_obj, hashes, PyBUF_SIMPLE) < 0) goto fail;
    if (hashes->len / HASH < *rows) *rows = hashes->len / HASH;
    return 1;
fail:
    for (; k > 0; k--) PyBuffer_Release(&views[k - 1]);
    return 0;
}

static void release_views(Py_buffer *views, Py_buffer *hashes) {
    for (int k = 0; k < NC; k++) PyBuffer_Release(&views[k]);
    PyBuffer_Release(hashes);
}

/* The row of a hit (an (id, row) pair); -1 for a row no index holds, -2 with an exception set. */
static Py_ssize_t hit_row(PyObject *hit, const char *what) {
    if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(hit, 0)) ||
        !PyLong_Check(PyTuple_GET_ITEM(hit, 1))) {
        PyErr_SetString(PyExc_TypeError, what);
        return -2;
    }
    Py_ssize_t row = PyLong_AsSsize_t(PyTuple_GET_ITEM(hit, 1));
    if (row == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -2;
        PyErr_Clear();
    }
    return row < 0 ? -1 : row;
}

static const char NOT_A_HIT[] = "recs_at: each hit must be an (id, row) pair of a str and an int";

static PyObject *recs_at(PyObject *self, PyObject *args) {
    PyObject *cols, *hashes_obj, *scopes, *agents, *tagsets, *older, *hits;
    PyTypeObject *rec_type, *version_type;
    if (!PyArg_ParseTuple(args, "O!OO!O!O!O!O!O!O!", &PyDict_Type, &cols, &hashes_obj, &PyList_Type, &scopes,
                          &PyList_Type, &agents, &PyList_Type, &tagsets, &PyDict_Type, &older, &PyList_Type, &hits,
                          &PyType_Type, &rec_type, &PyType_Type, &version_type))
        return NULL;
    if (!PyType_IsSubtype(rec_type, &PyTuple_Type) || !PyType_IsSubtype(version_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "recs_at: Rec and Version must be tuple types");
        return NULL;
    }
    Py_buffer views[NC], hashes;
    Py_ssize_t rows, n = PyList_GET_SIZE(hits);
    if (!take_views("recs_at", cols, hashes_obj, views, &hashes, &rows)) return NULL;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t k = 0; out && k < n; k++) {
        PyObject *hit = PyList_GET_ITEM(hits, k), *rec = NULL;
        Py_ssize_t row = hit_row(hit, NOT_A_HIT);
        if (row > -2)
            rec = rec_of_row(views, rows, &hashes, scopes, agents, tagsets, older, PyTuple_GET_ITEM(hit, 0), row,
                             rec_type, version_type);
        if (!rec) Py_CLEAR(out);
        else PyList_SET_ITEM(out, k, rec);
    }
    release_views(views, &hashes);
    return out;
}

/* -- a query's or a get's records, read straight from the index's rows --------------------------------
 * gather_rows(cols, hashes, scopes, agents, tagsets, older, hits) takes from the index's tables (as
 * recs_at does) what read_latest would take from each hit's Rec, for its latest version, in the hold of
 * the index lock; read_gathered(fd, gathered, MemoryRecord) then reads, checks and builds each record as
 * read_latest does, with the lock let go of (the log's handle held instead: reads.py). So no Rec or
 * Version tuple is made for a row served. Their twin is reads.gather_rows and reads.read_gathered (the
 * rows' Recs, then latest_records). A row the tables do not hold whole (what recs_at gives None for) is
 * None, as any version read_latest gives None for. */
typedef struct {
    PyObject *id, *scope, *agent, *first; /* new references; first: NULL without an earlier version */
    int64_t seq, ts;
    uint32_t ver;
} row_t;

typedef struct {
    Py_ssize_t n;
    item_t *its;
    row_t *rs;
} gathered_t;

static const char GATHERED[] = "mnemo._readpath.gathered";

static void gathered_free(PyObject *capsule) {
    gathered_t *g = PyCapsule_GetPointer(capsule, GATHERED);
    if (!g) return;
    for (Py_ssize_t k = 0; k < g->n; k++) {
        Py_XDECREF(g->rs[k].id);
        Py_XDECREF(g->rs[k].scope);
        Py_XDECREF(g->rs[k].agent);
        Py_XDECREF(g->rs[k].first);
    }
    PyMem_Free(g->its);
    PyMem_Free(g->rs);
    PyMem_Free(g);
}

/* One hit's item and row from the index's tables (the item skipped where they do not hold it whole);
 * 0 with an exception set on failure. */
static int gather_row(Py_buffer *views, Py_ssize_t rows, const Py_buffer *hashes, PyObject *scopes, PyObject *agents,
                      PyObject *tagsets, PyObject *older, Py_ssize_t row, item_t *it, row_t *r) {
    it->skip = 1;
    if (row < 0 || row >= rows) return 1;
    PyObject *scope = value_at(scopes, u32_at(&views[C_SCOPE], row));
    PyObject *agent = value_at(agents, u32_at(&views[C_AGENT], row));
    PyObject *tags = value_at(tagsets, u32_at(&views[C_TAGSET], row));
    if (!scope || !agent || !tags || tags == Py_None || !PyUnicode_Check(scope)) return 1;
    if (PyDict_GET_SIZE(older)) {
        PyObject *key = PyLong_FromSsize_t(row);
        if (!key) return 0;
        PyObject *before = PyDict_GetItemWithError(older, key);
        Py_DECREF(key);
        if (!before && PyErr_Occurred()) return 0;
        if (before) {
            PyObject *v0;
            if (!PyTuple_Check(before) || PyTuple_GET_SIZE(before) < 1 || !PyTuple_Check(v0 = PyTuple_GET_ITEM(before, 0)) ||
                PyTuple_GET_SIZE(v0) < 3)
                return 1;
            r->first = Py_NewRef(PyTuple_GET_ITEM(v0, 2));
        }
    }
    r->scope = Py_NewRef(scope);
    r->agent = Py_NewRef(agent);
    r->ver = u32_at(&views[C_VER], row);
    r->seq = i64_at(&views[C_SEQ], row);
    r->ts = i64_at(&views[C_TS], row);
    it->ver = r->ver;
    it->s_off = i64_at(&views[C_SLOT_OFF], row);
    it->s_len = u32_at(&views[C_SLOT_LEN], row);
    it->e_off = i64_at(&views[C_ENTRY_OFF], row);
    it->e_len = u32_at(&views[C_ENTRY_LEN], row);
    if (it->s_off < 0 || it->e_off < 0 || it->s_len < MIN_SLOT || it->s_len > MAX_READ || it->e_len > MAX_READ)
        return 1; /* what no log holds: the general path reads it */
    memcpy(it->hash, (const char *)hashes->buf + row * HASH, HASH);
    it->id = PyUnicode_AsUTF8AndSize(r->id, &it->id_len);
    it->scope = it->id ? PyUnicode_AsUTF8AndSize(scope, &it->scope_len) : NULL;
    if (!it->id || !it->scope) { /* a str that is not UTF-8 (lone surrogates): no entry names it */
        PyErr_Clear();
        return 1;
    }
    it->skip = 0;
    return 1;
}

static const char NOT_A_GATHERED_HIT[] = "gather_rows: each hit must be an (id, row) pair of a str and an int";

static PyObject *gather_rows(PyObject *self, PyObject *args) {
    PyObject *cols, *hashes_obj, *scopes, *agents, *tagsets, *older, *hits;
    if (!PyArg_ParseTuple(args, "O!OO!O!O!O!O!", &PyDict_Type, &cols, &hashes_obj, &PyList_Type, &scopes,
                          &PyList_Type, &agents, &PyList_Type, &tagsets, &PyDict_Type, &older, &PyList_Type, &hits))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(hits), rows;
    gathered_t *g = PyMem_Calloc(1, sizeof(gathered_t));
    if (!g) return PyErr_NoMemory();
    g->its = PyMem_Calloc(n ? (size_t)n : 1, sizeof(item_t));
    g->rs = PyMem_Calloc(n ? (size_t)n : 1, sizeof(row_t));
    PyObject *capsule = g->its && g->rs ? PyCapsule_New(g, GATHERED, gathered_free) : NULL;
    if (!capsule) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        PyMem_Free(g->its);
        PyMem_Free(g->rs);
        PyMem_Free(g);
        return NULL;
    }
    Py_buffer views[NC], hashes;
    if (!take_views("gather_rows", cols, hashes_obj, views, &hashes, &rows)) {
        Py_DECREF(capsule);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *hit = PyList_GET_ITEM(hits, k);
        Py_ssize_t row = hit_row(hit, NOT_A_GATHERED_HIT);
        if (row == -2) goto fail;
        g->rs[k].id = Py_NewRef(PyTuple_GET_ITEM(hit, 0));
        g->n = k + 1;
        if (!gather_row(views, rows, &hashes, scopes, agents, tagsets, older, row, &g->its[k], &g->rs[k])) goto fail;
    }
    release_views(views, &hashes);
    return capsule;
fail:
    release_views(views, &hashes);
    Py_DECREF(capsule);
    return NULL;
}

/* The record of the k-th gathered row (gathered_t *from), served. */
static PyObject *gathered_of(PyObject *type, void *from, Py_ssize_t k, item_t *it) {
    row_t *r = &((gathered_t *)from)->rs[k];
    PyObject *value = NULL, *ver = PyLong_FromUnsignedLong(r->ver), *seq = PyLong_FromLongLong(r->seq),
             *ts = PyLong_FromLongLong(r->ts);
    if (ver && seq && ts) {
        meta_t m = {r->id, r->scope, ver, r->agent, seq, ts, r->first ? r->first : ts};
        value = record_of((PyTypeObject *)type, it, &m);
    }
    Py_XDECREF(ver);
    Py_XDECREF(seq);
    Py_XDECREF(ts);
    return value;
}

static PyObject *read_gathered(PyObject *self, PyObject *args) {
    int fd;
    PyObject *capsule, *type;
    if (!PyArg_ParseTuple(args, "iOO!", &fd, &capsule, &PyType_Type, &type)) return NULL;
    gathered_t *g = PyCapsule_GetPointer(capsule, GATHERED);
    if (!g) return NULL;
    for (Py_ssize_t k = 0; k < g->n; k++) { /* (read again if called again; a skipped item stays not ok) */
        item_t *it = &g->its[k];
        it->buf = NULL;
        it->got_e = it->got_s = 0;
        it->err = it->ok = 0;
    }
    return read_and_serve(fd, g->its, g->n, gathered_of, type, g);
}

/* -- a transaction's new records as the index's columns ----------------------------------------------
 * new_rows(NewRows, staged, slots, start, offset, entry_pos, rows, blob, width, dead) -> NewRows: what
 * mnemo/storage/file/new_rows.py's new_rows_twin makes (its docstring says what is taken and what each
 * field holds). The run of staged entries from `start` on that put version 1 of a record no live row
 * holds (find_row's look-up) and no earlier one of the run puts, each of the exact types a staged put
 * has; it stops at the first that is not, which the caller applies through its general path. */
#define ENTRY_HEADER 8 /* framing.ENTRY_HEADER: an entry's lengths before its bytes */
static PyObject *k_op_put, *k_ver, *k_id, *k_scope, *k_size;

/* 1: an exact int within [lo, hi], at *v; 0: not (no exception set). */
static int int_in(PyObject *o, int64_t lo, int64_t hi, int64_t *v) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (x < lo || x > hi) return 0;
    *v = (int64_t)x;
    return 1;
}

enum { N_SEQ, N_TS, N_SIZE, N_SLOT_OFF, N_ENTRY_OFF, N_WIDE, N_SLOT_LEN = N_WIDE, N_ENTRY_LEN, N_INTS };

static PyObject *new_rows(PyObject *self, PyObject *args) {
    PyObject *type, *staged, *slots, *rows, *dead;
    Py_ssize_t start, width;
    long long offset, entry_pos;
    Py_buffer blob;
    if (!PyArg_ParseTuple(args, "OO!O!nLLO!y*nO", &type, &PyList_Type, &staged, &PyList_Type, &slots, &start,
                          &offset, &entry_pos, &PyDict_Type, &rows, &blob, &width, &dead))
        return NULL;
    PyObject *out = NULL, *seen = NULL, *lists[5] = {NULL};
    int64_t *wide = NULL;
    uint32_t *narrow = NULL;
    unsigned char *hashes = NULL;
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type) || !PyAnySet_Check(dead)) {
        PyErr_SetString(PyExc_TypeError, "new_rows(NewRows, staged, slots, start, offset, entry_pos, rows, blob, "
                                         "width, dead): NewRows a tuple type, the forgotten rows a set");
        goto done;
    }
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "new_rows: start must be 0 or more");
        goto done;
    }
    Py_ssize_t end = PyList_GET_SIZE(staged) < PyList_GET_SIZE(slots) ? PyList_GET_SIZE(staged)
                                                                       : PyList_GET_SIZE(slots);
    Py_ssize_t cap = end > start ? end - start : 0, n = 0, i = start;
    wide = PyMem_Malloc(sizeof(int64_t) * (size_t)(cap ? cap : 1) * N_WIDE);
    narrow = PyMem_Malloc(sizeof(uint32_t) * (size_t)(cap ? cap : 1) * 2);
    hashes = PyMem_Malloc((size_t)(cap ? cap : 1) * HASH);
    seen = PySet_New(NULL);
    if (!wide || !narrow || !hashes || !seen) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    for (int k = 0; k < 5; k++)
        if (!(lists[k] = PyList_New(cap))) goto done;
    int64_t pos = (int64_t)entry_pos;
    for (; i < end; i++) {
        PyObject *s = PyList_GET_ITEM(staged, i), *slot = PyList_GET_ITEM(slots, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != 4 || !PyTuple_Check(slot) || PyTuple_GET_SIZE(slot) != 2)
            break;
        PyObject *entry = PyTuple_GET_ITEM(s, 0), *tags = PyTuple_GET_ITEM(s, 2), *text = PyTuple_GET_ITEM(s, 3);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 8 || !PyTuple_CheckExact(tags) ||
            (text != Py_None && !PyUnicode_CheckExact(text)))
            break;
        PyObject *op = PyTuple_GET_ITEM(entry, 3), *agent = PyTuple_GET_ITEM(entry, 4),
                 *body = PyTuple_GET_ITEM(entry, 5), *raw = PyTuple_GET_ITEM(entry, 6),
                 *hash = PyTuple_GET_ITEM(entry, 7);
        if (!PyUnicode_CheckExact(op) || PyUnicode_Compare(op, k_op_put) != 0 || !PyUnicode_CheckExact(agent) ||
            !PyDict_CheckExact(body) || !PyBytes_CheckExact(raw) || !PyBytes_CheckExact(hash) ||
            PyBytes_GET_SIZE(hash) != HASH)
            break;
        Py_ssize_t t = 0, nt = PyTuple_GET_SIZE(tags);
        while (t < nt && PyUnicode_CheckExact(PyTuple_GET_ITEM(tags, t))) t++;
        if (t < nt) break;
        PyObject *ver = PyDict_GetItemWithError(body, k_ver), *id = NULL, *scope = NULL, *size = NULL;
        if (ver) id = PyDict_GetItemWithError(body, k_id);
        if (id) scope = PyDict_GetItemWithError(body, k_scope);
        if (scope) size = PyDict_GetItemWithError(body, k_size);
        if (!size) {
            if (PyErr_Occurred()) goto done;
            break;
        }
        int64_t one, slot_pos, next, f[N_INTS];
        Py_ssize_t raw_len = PyBytes_GET_SIZE(raw);
        if (!int_in(ver, 1, 1, &one) || !PyUnicode_CheckExact(id) || !PyUnicode_CheckExact(scope) ||
            !int_in(size, INT64_MIN, INT64_MAX, &f[N_SIZE]) ||
            !int_in(PyTuple_GET_ITEM(entry, 0), INT64_MIN, INT64_MAX, &f[N_SEQ]) ||
            !int_in(PyTuple_GET_ITEM(entry, 1), INT64_MIN, INT64_MAX, &f[N_TS]) ||
            !int_in(PyTuple_GET_ITEM(slot, 0), INT64_MIN, INT64_MAX, &slot_pos) ||
            __builtin_add_overflow(slot_pos, (int64_t)offset, &f[N_SLOT_OFF]) ||
            !int_in(PyTuple_GET_ITEM(slot, 1), 0, UINT32_MAX, &f[N_SLOT_LEN]) || (uint64_t)raw_len > UINT32_MAX ||
            __builtin_add_overflow(pos, (int64_t)raw_len + ENTRY_HEADER, &next))
            break;
        f[N_ENTRY_OFF] = pos;
        f[N_ENTRY_LEN] = raw_len;
        int dup = PySet_Contains(seen, id);
        if (dup < 0) goto done;
        if (dup) break;
        PyObject *row = row_in(rows, &blob, width, dead, id);
        if (!row) goto done;
        Py_DECREF(row);
        if (row != Py_None) break;
        if (PySet_Add(seen, id) < 0) goto done;
        PyObject *items[5] = {id, scope, tags, agent, text};
        for (int k = 0; k < 5; k++) PyList_SET_ITEM(lists[k], n, Py_NewRef(items[k]));
        for (int k = 0; k < N_WIDE; k++) wide[k * cap + n] = f[k];
        narrow[n] = (uint32_t)f[N_SLOT_LEN];
        narrow[cap + n] = (uint32_t)f[N_ENTRY_LEN];
        memcpy(hashes + n * HASH, PyBytes_AS_STRING(hash), HASH);
        pos = next;
        n++;
    }
    for (int k = 0; k < 5; k++)
        if (PyList_SetSlice(lists[k], n, cap, NULL) < 0) goto done;
    PyObject *items = PyTuple_New(15);
    if (!items) goto done;
    PyTuple_SET_ITEM(items, 0, PyLong_FromSsize_t(i));
    PyTuple_SET_ITEM(items, 1, PyLong_FromLongLong(pos));
    for (int k = 0; k < 5; k++) PyTuple_SET_ITEM(items, 2 + k, Py_NewRef(lists[k]));
    for (int k = 0; k < N_WIDE; k++)
        PyTuple_SET_ITEM(items, 7 + k, PyBytes_FromStringAndSize((const char *)(wide + k * cap), n * 8));
    for (int k = 0; k < 2; k++)
        PyTuple_SET_ITEM(items, 12 + k, PyBytes_FromStringAndSize((const char *)(narrow + k * cap), n * 4));
    PyTuple_SET_ITEM(items, 14, PyBytes_FromStringAndSize((const char *)hashes, n * HASH));
    for (int k = 0; k < 15; k++)
        if (!PyTuple_GET_ITEM(items, k)) {
            Py_DECREF(items);
            goto done;
        }
    out = named((PyTypeObject *)type, items);
done:
    PyBuffer_Release(&blob);
    PyMem_Free(wide);
    PyMem_Free(narrow);
    PyMem_Free(hashes);
    Py_XDECREF(seen);
    for (int k = 0; k < 5; k++) Py_XDECREF(lists[k]);
    return out;
}

static PyObject *made_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 12 || !PyType_Check(args[0]) || !PyBytes_CheckExact(args[11])) {
        PyErr_SetString(PyExc_TypeError, "made_record(MemoryRecord, id, ver, content, tags, metadata, scope, agent, "
                                         "created_ns, ts_ns, seq, hash)");
        return NULL;
    }
    PyObject *f[NF] = {NULL}, *obj = NULL;
    f[F_UPDATED] = ns_to_datetime(args[9]);
    if (!f[F_UPDATED]) goto done;
    long ver = PyLong_AsLong(args[2]);
    if (ver == -1 && PyErr_Occurred()) goto done;
    f[F_CREATED] = ver == 1 ? Py_NewRef(f[F_UPDATED]) : ns_to_datetime(args[8]);
    if (!f[F_CREATED]) goto done;
    f[F_HASH] = hex_of(PyBytes_AS_STRING(args[11]), PyBytes_GET_SIZE(args[11]));
    if (!f[F_HASH]) goto done;
    f[F_ID] = Py_NewRef(args[1]);
    f[F_VERSION] = Py_NewRef(args[2]);
    f[F_CONTENT] = Py_NewRef(args[3]);
    f[F_TAGS] = Py_NewRef(args[4]);
    f[F_METADATA] = Py_NewRef(args[5]);
    f[F_SCOPE] = Py_NewRef(args[6]);
    f[F_AGENT] = Py_NewRef(args[7]);
    f[F_SEQ] = Py_NewRef(args[10]);
    obj = new_record((PyTypeObject *)args[0], f);
done:
    for (int k = 0; k < NF; k++) Py_XDECREF(f[k]);
    return obj;
}

static PyMethodDef methods[] = {
    {"read_served", read_served, METH_VARARGS,
     "read_served(fd, [(Rec, Version), ...]) -> [bytes | None]: each version's packed fields, read and checked"},
    {"find_sorted", find_sorted, METH_VARARGS,
     "find_sorted(blob, width, key) -> int: the row of key among sorted fixed-width ids, or -1"},
    {"read_latest", read_latest, METH_VARARGS,
     "read_latest(fd, [Rec, ...], MemoryRecord) -> [MemoryRecord | None]: each record's latest version, read, "
     "checked and built"},
    {"find_row", find_row, METH_VARARGS,
     "find_row(rows, blob, width, dead, rec_id) -> int | None: the live row of rec_id in the index, if any"},
    {"gather_rows", gather_rows, METH_VARARGS,
     "gather_rows(cols, hashes, scopes, agents, tagsets, older, [(id, row), ...]) -> what read_gathered reads"},
    {"read_gathered", read_gathered, METH_VARARGS,
     "read_gathered(fd, gathered, MemoryRecord) -> [MemoryRecord | None]: each gathered row's latest version, "
     "read, checked and built"},
    {"recs_at", recs_at, METH_VARARGS,
     "recs_at(cols, hashes, scopes, agents, tagsets, older, [(id, row), ...], Rec, Version) -> [Rec | None]: "
     "the index's rows as records"},
    {"made_record", (PyCFunction)(void (*)(void))made_record, METH_FASTCALL,
     "made_record(MemoryRecord, id, ver, content, tags, metadata, scope, agent, created_ns, ts_ns, seq, hash) -> "
     "MemoryRecord: the record a write returns"},
    {"new_rows", new_rows, METH_VARARGS,
     "new_rows(NewRows, staged, slots, start, offset, entry_pos, rows, blob, width, dead) -> NewRows: a run of "
     "staged puts of new records as the index's columns"},
    {"file_state", file_state, METH_VARARGS,
     "file_state(path, fd) -> (st_ino, st_dev, size): the file at path ((-1, -1) if none) and fd's size"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_readpath",
                                    "The file backend's read path in C (see mnemo/_readpath.c).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__readpath(void) {
    if (sha256_init() < 0) return NULL;
    if (fields_init() < 0) return NULL;
    for (int k = 0; k < NC; k++)
        if (!col_keys[k] && !(col_keys[k] = PyUnicode_InternFromString(col_names[k]))) return NULL;
    const char *keys[5] = {"put", "ver", "id", "scope", "size"};
    PyObject **interned[5] = {&k_op_put, &k_ver, &k_id, &k_scope, &k_size};
    for (int k = 0; k < 5; k++)
        if (!*interned[k] && !(*interned[k] = PyUnicode_InternFromString(keys[k]))) return NULL;
    return PyModule_Create(&module);
}
