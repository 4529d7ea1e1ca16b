/* What the C read paths (mnemo/_readpath.c, mnemo/_pgread.c) share: a record's packed fields decoded,
 * and the MemoryRecord built from them, exactly as mnemo/storage/records.py's record_of builds it; and
 * the check that an entry is the put of the record, version and scope read (put_of).
 *
 * The packed record fields, msgpack [content, tags, metadata], are decoded as mnemo.chain.codec.unpackb
 * decodes them (raw=False, strict_map_key=False) for the values a put holds: nil, booleans, integers,
 * floats, str, bin, arrays and maps whose keys are str. Anything else (an ext type, a map key that is
 * not a str, nesting deeper than MAX_DEPTH, an array of 3 not written as a fixarray, a str that is not
 * UTF-8, bytes after the array) is "not decoded here": the caller's general path decodes it, or says
 * what is wrong with it. The times are made as mnemo.record.ns_to_datetime makes them, the hash's hex
 * as bytes.hex, and the record as make_memory_record makes it (its __dict__ set in one step).
 *
 * Include it once, after Python.h; call fields_init() in the module's init. mnemo/_speedups.c (the scan
 * core) includes it for the msgpack readers alone (uint_at, MAX_DEPTH), and builds no record: what it
 * leaves unused is marked FIELDS_OPTIONAL, so that no warning is given for it.
 */
#ifndef MNEMO_FIELDS_H
#define MNEMO_FIELDS_H

#if defined(__GNUC__) || defined(__clang__)
#define FIELDS_OPTIONAL __attribute__((unused))
#else
#define FIELDS_OPTIONAL
#endif

#include <datetime.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 32

typedef struct {
    const unsigned char *p;
    Py_ssize_t n, i;
} rd_t;

/* 1: the value at *out; 0: not decoded here (no exception set); -1: an exception set (memory). */
static int dec_value(rd_t *r, PyObject **out, int depth);

static int dec_len(rd_t *r, int width, uint64_t *len) {
    if (r->n - r->i < width) return 0;
    uint64_t l = 0;
    for (int k = 0; k < width; k++) l = (l << 8) | r->p[r->i + k];
    r->i += width;
    *len = l;
    return 1;
}

/* The outcome of making an object: an exception from a str that is not UTF-8 is "not decoded here". */
static int made(PyObject *o, PyObject **out) {
    if (o) {
        *out = o;
        return 1;
    }
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
}

static int dec_str(rd_t *r, uint64_t len, PyObject **out) {
    if (len > (uint64_t)(r->n - r->i)) return 0;
    const char *s = (const char *)r->p + r->i;
    r->i += (Py_ssize_t)len;
    return made(PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, NULL), out);
}

static int dec_bin(rd_t *r, uint64_t len, PyObject **out) {
    if (len > (uint64_t)(r->n - r->i)) return 0;
    const char *s = (const char *)r->p + r->i;
    r->i += (Py_ssize_t)len;
    return made(PyBytes_FromStringAndSize(s, (Py_ssize_t)len), out);
}

/* An array's items, into a list (or, at the top level's tags, a tuple). */
static int dec_array(rd_t *r, uint64_t len, PyObject **out, int depth, int tuple) {
    if (len > (uint64_t)(r->n - r->i)) return 0; /* every item takes a byte at least */
    PyObject *seq = tuple ? PyTuple_New((Py_ssize_t)len) : PyList_New((Py_ssize_t)len);
    if (!seq) return -1;
    for (uint64_t k = 0; k < len; k++) {
        PyObject *item = NULL;
        int got = dec_value(r, &item, depth + 1);
        if (got <= 0) {
            Py_DECREF(seq);
            return got;
        }
        if (tuple) PyTuple_SET_ITEM(seq, (Py_ssize_t)k, item);
        else PyList_SET_ITEM(seq, (Py_ssize_t)k, item);
    }
    *out = seq;
    return 1;
}

static int dec_map(rd_t *r, uint64_t len, PyObject **out, int depth) {
    if (len > (uint64_t)(r->n - r->i) / 2) return 0; /* every pair takes two bytes at least */
    PyObject *map = PyDict_New();
    if (!map) return -1;
    for (uint64_t k = 0; k < len; k++) {
        PyObject *key = NULL, *value = NULL;
        if (r->i >= r->n) goto not_here;
        unsigned char b = r->p[r->i];
        if (!((b >= 0xA0 && b <= 0xBF) || b == 0xD9 || b == 0xDA || b == 0xDB)) goto not_here; /* a str key */
        int got = dec_value(r, &key, depth + 1);
        if (got > 0) {
            got = dec_value(r, &value, depth + 1);
            if (got <= 0) Py_DECREF(key);
        }
        if (got == 0) goto not_here;
        if (got < 0) goto error;
        int set = PyDict_SetItem(map, key, value); /* a key given twice: the last value, as msgpack */
        Py_DECREF(key);
        Py_DECREF(value);
        if (set < 0) goto error;
    }
    *out = map;
    return 1;
not_here:
    Py_DECREF(map);
    return 0;
error:
    Py_DECREF(map);
    return -1;
}

static int dec_value(rd_t *r, PyObject **out, int depth) {
    if (depth > MAX_DEPTH || r->i >= r->n) return 0;
    unsigned char b = r->p[r->i++];
    uint64_t len;
    if (b <= 0x7F) return made(PyLong_FromLong(b), out);
    if (b >= 0xE0) return made(PyLong_FromLong((long)(signed char)b), out);
    if (b >= 0xA0 && b <= 0xBF) return dec_str(r, b - 0xA0, out);
    if (b >= 0x90 && b <= 0x9F) return dec_array(r, b - 0x90, out, depth, 0);
    if (b >= 0x80 && b <= 0x8F) return dec_map(r, b - 0x80, out, depth);
    switch (b) {
    case 0xC0: *out = Py_NewRef(Py_None); return 1;
    case 0xC2: *out = Py_NewRef(Py_False); return 1;
    case 0xC3: *out = Py_NewRef(Py_True); return 1;
    case 0xC4: case 0xC5: case 0xC6:
        return dec_len(r, b == 0xC4 ? 1 : b == 0xC5 ? 2 : 4, &len) ? dec_bin(r, len, out) : 0;
    case 0xD9: case 0xDA: case 0xDB:
        return dec_len(r, b == 0xD9 ? 1 : b == 0xDA ? 2 : 4, &len) ? dec_str(r, len, out) : 0;
    case 0xDC: case 0xDD:
        return dec_len(r, b == 0xDC ? 2 : 4, &len) ? dec_array(r, len, out, depth, 0) : 0;
    case 0xDE: case 0xDF:
        return dec_len(r, b == 0xDE ? 2 : 4, &len) ? dec_map(r, len, out, depth) : 0;
    case 0xCA: case 0xCB: {
        int w = b == 0xCA ? 4 : 8;
        if (r->n - r->i < w) return 0;
        const char *f = (const char *)r->p + r->i;
        r->i += w;
        double d = w == 4 ? PyFloat_Unpack4(f, 0) : PyFloat_Unpack8(f, 0);
        if (d == -1.0 && PyErr_Occurred()) return -1;
        return made(PyFloat_FromDouble(d), out);
    }
    case 0xCC: case 0xCD: case 0xCE: case 0xCF: {
        if (!dec_len(r, 1 << (b - 0xCC), &len)) return 0;
        return made(PyLong_FromUnsignedLongLong(len), out);
    }
    case 0xD0: case 0xD1: case 0xD2: case 0xD3: {
        int w = 1 << (b - 0xD0);
        if (!dec_len(r, w, &len)) return 0;
        int64_t v = w == 8 ? (int64_t)len : (int64_t)(len ^ ((uint64_t)1 << (8 * w - 1))) - ((int64_t)1 << (8 * w - 1));
        return made(PyLong_FromLongLong(v), out);
    }
    default:
        return 0; /* an ext type, or 0xC1 (never used) */
    }
}

/* The three fields of packed[0..n): 1 with new references at *content (str or bytes), *tags (a tuple)
 * and *metadata (a dict); 0 not decoded here; -1 an exception set. */
FIELDS_OPTIONAL static int dec_fields(const unsigned char *p, Py_ssize_t n, PyObject **content, PyObject **tags, PyObject **metadata) {
    rd_t r = {p, n, 0};
    uint64_t len;
    *content = *tags = *metadata = NULL;
    if (n < 1 || p[0] != 0x93) return 0;
    r.i = 1;
    if (r.i >= n) return 0;
    unsigned char b = p[r.i];
    if (!((b >= 0xA0 && b <= 0xBF) || (b >= 0xC4 && b <= 0xC6) || (b >= 0xD9 && b <= 0xDB))) return 0;
    int got = dec_value(&r, content, 1);
    if (got <= 0) return got;
    if (r.i >= n) goto not_here;
    b = p[r.i++];
    if (b >= 0x90 && b <= 0x9F) len = b - 0x90;
    else if (b == 0xDC || b == 0xDD) {
        if (!dec_len(&r, b == 0xDC ? 2 : 4, &len)) goto not_here;
    } else goto not_here;
    got = dec_array(&r, len, tags, 1, 1);
    if (got <= 0) goto done;
    if (r.i >= n) goto not_here;
    b = p[r.i];
    if (!((b >= 0x80 && b <= 0x8F) || b == 0xDE || b == 0xDF)) goto not_here;
    got = dec_value(&r, metadata, 1);
    if (got <= 0) goto done;
    if (r.i != n) goto not_here; /* bytes after the array: msgpack refuses them (ExtraData) */
    return 1;
not_here:
    got = 0;
done:
    Py_CLEAR(*content);
    Py_CLEAR(*tags);
    Py_CLEAR(*metadata);
    return got;
}

/* Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's civil_from_days). */
static void civil_from_days(int64_t z, int *y, int *m, int *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

/* mnemo.record.ns_to_datetime(ts): datetime.fromtimestamp(ts // 1000 / 1_000_000, timezone.utc).
 * Within 2**31 seconds of 1970 the float that expression makes is within 0.12 µs of the exact time,
 * so fromtimestamp's rounding gives back the exact microsecond, and the date is computed here from it;
 * beyond, fromtimestamp itself is called on the same float. NULL with an exception set (a value out of
 * range raises as fromtimestamp raises). */
FIELDS_OPTIONAL static PyObject *ns_to_datetime(PyObject *ts) {
    long long ns = PyLong_AsLongLong(ts);
    if (ns == -1 && PyErr_Occurred()) return NULL;
    long long us = ns / 1000 - (ns % 1000 < 0); /* floor division, as Python's // */
    const long long span = (long long)1 << 31;
    if (us > -span * 1000000 && us < span * 1000000) {
        long long days = us / 86400000000LL - (us % 86400000000LL < 0);
        long long rest = us - days * 86400000000LL;
        int y, m, d;
        civil_from_days(days, &y, &m, &d);
        long long secs = rest / 1000000;
        return PyDateTimeAPI->DateTime_FromDateAndTime(y, m, d, (int)(secs / 3600), (int)(secs / 60 % 60),
                                                       (int)(secs % 60), (int)(rest % 1000000),
                                                       PyDateTime_TimeZone_UTC, PyDateTimeAPI->DateTimeType);
    }
    if (us >= ((long long)1 << 53) || us <= -((long long)1 << 53)) {
        PyErr_SetString(PyExc_OverflowError, "timestamp out of range");
        return NULL; /* (the caller's general path converts it, and raises what Python raises) */
    }
    PyObject *args = Py_BuildValue("(dO)", (double)us / 1e6, PyDateTime_TimeZone_UTC);
    if (!args) return NULL;
    PyObject *dt = PyDateTimeAPI->DateTime_FromTimestamp((PyObject *)PyDateTimeAPI->DateTimeType, args, NULL);
    Py_DECREF(args);
    return dt;
}

FIELDS_OPTIONAL static PyObject *hex_of(const char *h, Py_ssize_t n) {
    static const char digits[] = "0123456789abcdef";
    PyObject *s = PyUnicode_New(2 * n, 127);
    if (!s) return NULL;
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t k = 0; k < n; k++) {
        d[2 * k] = (Py_UCS1)digits[(unsigned char)h[k] >> 4];
        d[2 * k + 1] = (Py_UCS1)digits[(unsigned char)h[k] & 15];
    }
    return s;
}

/* The keys of MemoryRecord's fields (mnemo/record.py), in its order; interned at import. */
enum { F_ID, F_VERSION, F_CONTENT, F_TAGS, F_METADATA, F_SCOPE, F_AGENT, F_CREATED, F_UPDATED, F_SEQ, F_HASH, NF };
static const char *field_names[NF] = {"id", "version", "content", "tags", "metadata", "scope", "agent_id",
                                      "created_at", "updated_at", "seq", "hash"};
static PyObject *field_keys[NF];
static PyObject *dict_key, *empty_args;
/* A dict of the NF keys, each None: a record's __dict__ is a copy of it with the values replaced, which
 * makes its table once at its size, where inserting the keys into a new dict grows it twice. */
static PyObject *fields_template;

/* The record of the fields f[] (borrowed): an instance of `type` whose __dict__ holds them, as
 * make_memory_record makes it; NULL with an exception set on failure. */
FIELDS_OPTIONAL static PyObject *new_record(PyTypeObject *type, PyObject *const f[NF]) {
    PyObject *d = PyDict_Copy(fields_template), *obj = NULL;
    if (!d) return NULL;
    for (int k = 0; k < NF; k++)
        if (PyDict_SetItem(d, field_keys[k], f[k]) < 0) goto error;
    obj = PyBaseObject_Type.tp_new(type, empty_args, NULL);
    if (!obj || PyObject_GenericSetAttr(obj, dict_key, d) < 0) goto error;
    Py_DECREF(d);
    return obj;
error:
    Py_XDECREF(obj);
    Py_DECREF(d);
    return NULL;
}

/* The datetime C API and the interned keys: 0, or -1 with an exception set. */
FIELDS_OPTIONAL static int fields_init(void) {
    PyDateTime_IMPORT;
    if (!PyDateTimeAPI) return -1;
    for (int k = 0; k < NF; k++)
        if (!field_keys[k] && !(field_keys[k] = PyUnicode_InternFromString(field_names[k]))) return -1;
    if (!fields_template) {
        PyObject *d = PyDict_New();
        if (!d) return -1;
        for (int k = 0; k < NF; k++)
            if (PyDict_SetItem(d, field_keys[k], Py_None) < 0) {
                Py_DECREF(d);
                return -1;
            }
        fields_template = d;
    }
    if (!dict_key && !(dict_key = PyUnicode_InternFromString("__dict__"))) return -1;
    if (!empty_args && !(empty_args = PyTuple_New(0))) return -1;
    return 0;
}

/* -- the put an entry must be ---------------------------------------------------------------------------
 * Both read paths serve a version only if its entry is the put of what they read (put_of), and read
 * only the canonical layout every put is written in: one parser, so that the two never differ. */

#define PUT_HASH 32

/* Whether a served entry's agent decodes as msgpack decodes it, strict UTF-8 (1 yes, 0 no, -1 an exception
 * set): an entry whose agent does not decode is not served by either read path. */
FIELDS_OPTIONAL static int utf8_decodes(const unsigned char *p, Py_ssize_t n) {
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (s) {
        Py_DECREF(s);
        return 1;
    }
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
    PyErr_Clear();
    return 0;
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

/* Whether p[i..n) starts with the kn bytes k. */
static int has(const unsigned char *p, Py_ssize_t n, Py_ssize_t i, const char *k, Py_ssize_t kn) {
    return i >= 0 && i <= n && kn <= n - i && memcmp(p + i, k, (size_t)kn) == 0;
}

/* Whether the entry raw[0..n) is, in the canonical layout of a put (docs/FORMAT.md §1), [1, seq, ts,
 * prev, "put", agent, {digest, id, scope, size, ver}], the put of record `id` (id_len bytes of UTF-8),
 * version `ver` in scope `scope`: its digest at *digest (32 bytes), its agent's bytes at raw[*agent_off..)
 * (*agent_len of them, not yet checked as UTF-8: the caller does that with the GIL). Any other layout
 * is 0: the callers' general paths decide. Runs without the GIL. */
FIELDS_OPTIONAL static int put_of(const unsigned char *raw, Py_ssize_t n, const char *id, Py_ssize_t id_len, const char *scope,
                  Py_ssize_t scope_len, int64_t ver, Py_ssize_t *agent_off, Py_ssize_t *agent_len,
                  const unsigned char **digest) {
    Py_ssize_t i = 0, s, l;
    uint64_t x;
    if (!has(raw, n, 0, "\x97\x01", 2)) return 0;
    i = 2;
    if (!uint_at(raw, n, &i, &x)) return 0; /* seq */
    if (!has(raw, n, i, "\xcf", 1) || n - i < 9) return 0; /* the timestamp: uint 64 */
    i += 9;
    if (!has(raw, n, i, "\xc4\x20", 2) || n - i < 2 + PUT_HASH) return 0; /* prev */
    i += 2 + PUT_HASH;
    if (!has(raw, n, i, "\xa3put", 4)) return 0;
    i += 4;
    if (!str_at(raw, n, &i, &s, &l)) return 0;
    *agent_off = s;
    *agent_len = l;
    if (!has(raw, n, i, "\x85\xa6" "digest\xc4\x20", 10) || n - i < 10 + PUT_HASH) return 0;
    *digest = raw + i + 10;
    i += 10 + PUT_HASH;
    if (!has(raw, n, i, "\xa2id", 3)) return 0;
    i += 3;
    if (!str_at(raw, n, &i, &s, &l) || l != id_len || memcmp(raw + s, id, (size_t)l) != 0) return 0;
    if (!has(raw, n, i, "\xa5scope", 6)) return 0;
    i += 6;
    if (!str_at(raw, n, &i, &s, &l) || l != scope_len || memcmp(raw + s, scope, (size_t)l) != 0) return 0;
    if (!has(raw, n, i, "\xa4size", 5)) return 0;
    i += 5;
    if (!uint_at(raw, n, &i, &x)) return 0;
    if (!has(raw, n, i, "\xa3ver", 4)) return 0;
    i += 4;
    if (!uint_at(raw, n, &i, &x) || x != (uint64_t)ver) return 0;
    return i == n;
}

#endif
