/* The write path of a put, in C: the bytes the pure-Python path makes (mnemo/chain/codec.py and
 * mnemo/storage/file/framing.py, its twins), made in one call each instead of a Packer call, a lock,
 * a concatenation and a hashlib object apiece.
 *
 * pack(value) -> bytes is msgpack.packb(value, use_bin_type=True), byte for byte, for the values a
 * record and an entry are made of: None, True, False, int (64-bit range), float, str, bytes, and
 * lists, tuples and dicts of them (in the dict's own order: callers pass canonical values). Exact types
 * only: anything else (a subclass, another type, a str that is not valid UTF-8, an int beyond 64 bits,
 * nesting deeper than 511 levels) raises TypeError or ValueError, and the caller packs that value
 * with its twin, which says what is wrong or packs it as msgpack does.
 *
 * seal_put(salt, content, tags, metadata) -> (digest, payload): a put's payload, the salt followed by
 * pack([content, tags, metadata]), and its SHA-256 (codec.seal_put_payload of pack_canonical_fields).
 *
 * entry(seq, ts_ns, prev, op, agent, body) -> (raw, hash): pack([1, seq, ts_ns, prev, op, agent, body])
 * and its SHA-256 (codec.make_entry with a body already canonical).
 *
 * staged(entry_cls, staged_cls, seq, ts_ns, prev, op, agent, body, payload, tags, text) -> a staged entry:
 * staged_cls (a subclass of tuple) of (entry_cls (a subclass of tuple) of (seq, ts_ns, prev, op, agent,
 * body, raw, hash) as entry() makes raw and hash, payload, tags, text), what storage/batch.py's
 * stage_twin makes. A transaction holds a thousand of these: each tuple is handed back untracked by the
 * cyclic garbage collector where it holds only values that can never be part of a cycle (exact ints,
 * bytes and str, None; a body dict the collector does not track, which a dict holding such values only
 * is not; an exact tuple of exact str), as the collector itself would untrack a tuple of such values
 * were it not for the dict. A body is not changed after its entry is made (its bytes are hashed).
 *
 * frame(entries, first_seq) -> (bytes, [(slot offset, slot length), ...]): framing.encode_frame_slots
 * of a list of (entry bytes, payload or None) tuples: the frame header, each entry's lengths and bytes,
 * the slots (each CRC-32 and payload), the CRC-32 of header and entries, the end magic.
 *
 * seal_checked(salt, content, tags, metadata, max_content, max_tag_chars, max_tags, max_metadata) is a
 * remember's input checks and seal_put in one call, for the common input only: (size, tags, metadata,
 * digest, payload) where codec.checked_put_twin gives (content, size, tags, None, metadata, (digest,
 * payload)), and None for anything else, which the caller then checks with that twin (which raises what
 * is wrong). Common: content an exact str that encodes in UTF-8, or exact bytes, within max_content
 * bytes; tags an exact list or tuple of exact str, each encoding in UTF-8, 1 to max_tag_chars characters,
 * without NUL, none `memorytool` or starting with `path:` (a memory-tool file's tags have rules of their
 * own), at most max_tags distinct; metadata None or an exact dict of exact str keys (encoding in UTF-8)
 * whose values are None, booleans, exact ints in [-2**63, 2**64), finite exact floats or exact str
 * encoding in UTF-8 (nothing nested), whose packed bytes fit in max_metadata bytes. The tags come back
 * distinct and sorted, the metadata a new dict in key order: UTF-8 bytes sort as their code points do,
 * so memcmp orders them as Python orders str. The tags' tuple, of exact str only, is untracked by the
 * cyclic garbage collector (which untracks such a tuple at its first pass anyway).
 *
 * stage_new(entry_cls, staged_cls, seq, ts_ns, prev, agent, id, scope, salt, content, tags, metadata,
 * max_content, max_tag_chars, max_tags, max_metadata) is seal_checked and staged in one call: for a
 * remember's common input (as seal_checked says), the put of version 1 of record `id` in `scope` (body
 * {digest, id, scope, size, ver: 1}), staged with its payload, the checked tags and the content as its text
 * when it is a str, and the checked metadata: (staged, metadata); None for any other input, nothing made
 * (storage/batch.py's stage_new_twin is its twin).
 *
 * leaf_hashes(entries) -> bytes: the Merkle tree's leaf hash of each entry, SHA-256(0x00 + entry), 32
 * bytes each, back to back (what mnemo/chain/tree.py's CompactRange.add_entries hashes, its twin).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/evp.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "_sha256.h"

#define HASH 32
#define SALT 16
#define PACK_DEPTH 511 /* deeper is left to the twin, which packs it or refuses it as msgpack does */
#define FRAME_HEADER 24
#define ENTRY_HEADER 8
#define TRAILER 8
#define MAX_FRAME ((int64_t)1 << 31)

/* -- a growable buffer ---------------------------------------------------------------------------- */

typedef struct {
    unsigned char *p;
    Py_ssize_t len, cap;
    unsigned char small[1024];
} buf_t;

static void buf_init(buf_t *b) {
    b->p = b->small;
    b->len = 0;
    b->cap = (Py_ssize_t)sizeof b->small;
}

static void buf_free(buf_t *b) {
    if (b->p != b->small) PyMem_Free(b->p);
}

static int buf_reserve(buf_t *b, Py_ssize_t more) {
    if (more > PY_SSIZE_T_MAX / 2 - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = b->len + more;
    if (need <= b->cap) return 0;
    Py_ssize_t cap = b->cap * 2;
    if (cap < need) cap = need;
    unsigned char *p;
    if (b->p == b->small) {
        p = PyMem_Malloc((size_t)cap);
        if (p) memcpy(p, b->small, (size_t)b->len);
    } else {
        p = PyMem_Realloc(b->p, (size_t)cap);
    }
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int put(buf_t *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static int put_byte(buf_t *b, unsigned char c) { return put(b, &c, 1); }

static int put_be(buf_t *b, unsigned char lead, uint64_t v, int width) {
    unsigned char tmp[9];
    tmp[0] = lead;
    for (int i = 0; i < width; i++) tmp[1 + i] = (unsigned char)(v >> (8 * (width - 1 - i)));
    return put(b, tmp, 1 + width);
}

static void be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* -- msgpack, as msgpack-python's Packer(use_bin_type=True) writes it ------------------------------ */

static int pack_uint(buf_t *b, uint64_t v) {
    if (v < 128) return put_byte(b, (unsigned char)v);
    if (v < 256) return put_be(b, 0xcc, v, 1);
    if (v < 65536) return put_be(b, 0xcd, v, 2);
    if (v <= 0xffffffffULL) return put_be(b, 0xce, v, 4);
    return put_be(b, 0xcf, v, 8);
}

static int pack_int(buf_t *b, int64_t v) {
    if (v >= 0) return pack_uint(b, (uint64_t)v);
    if (v >= -32) return put_byte(b, (unsigned char)(int8_t)v);
    if (v >= -128) return put_be(b, 0xd0, (uint64_t)v, 1);
    if (v >= -32768) return put_be(b, 0xd1, (uint64_t)v, 2);
    if (v >= -2147483648LL) return put_be(b, 0xd2, (uint64_t)v, 4);
    return put_be(b, 0xd3, (uint64_t)v, 8);
}

static int pack_len(buf_t *b, Py_ssize_t n, unsigned char fix, int fix_max, unsigned char c8, unsigned char c16,
                    unsigned char c32) {
    if (n > (Py_ssize_t)0xffffffffLL) {
        PyErr_SetString(PyExc_ValueError, "pack: an object too large for msgpack");
        return -1;
    }
    if (n < fix_max) return put_byte(b, (unsigned char)(fix | n));
    if (c8 && n < 256) return put_be(b, c8, (uint64_t)n, 1);
    if (n < 65536) return put_be(b, c16, (uint64_t)n, 2);
    return put_be(b, c32, (uint64_t)n, 4);
}

static int pack_str(buf_t *b, PyObject *o) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s) return -1;
    if (pack_len(b, n, 0xa0, 32, 0xd9, 0xda, 0xdb) < 0) return -1;
    return put(b, s, n);
}

static int pack_bin(buf_t *b, const char *s, Py_ssize_t n) {
    if (n > (Py_ssize_t)0xffffffffLL) {
        PyErr_SetString(PyExc_ValueError, "pack: an object too large for msgpack");
        return -1;
    }
    int rc = n < 256 ? put_be(b, 0xc4, (uint64_t)n, 1)
                     : n < 65536 ? put_be(b, 0xc5, (uint64_t)n, 2) : put_be(b, 0xc6, (uint64_t)n, 4);
    return rc < 0 ? -1 : put(b, s, n);
}

static int pack_obj(buf_t *b, PyObject *o, int depth) {
    if (depth > PACK_DEPTH) {
        PyErr_SetString(PyExc_ValueError, "pack: nested deeper than 511 levels");
        return -1;
    }
    PyTypeObject *t = Py_TYPE(o);
    if (o == Py_None) return put_byte(b, 0xc0);
    if (o == Py_True) return put_byte(b, 0xc3);
    if (o == Py_False) return put_byte(b, 0xc2);
    if (t == &PyUnicode_Type) return pack_str(b, o);
    if (t == &PyLong_Type) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(o);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) return -1;
            return put_be(b, 0xcf, (uint64_t)u, 8);
        }
        if (overflow < 0) {
            PyErr_SetString(PyExc_OverflowError, "pack: an int below the 64-bit range");
            return -1;
        }
        return pack_int(b, (int64_t)v);
    }
    if (t == &PyBytes_Type) return pack_bin(b, PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o));
    if (t == &PyFloat_Type) {
        double d = PyFloat_AS_DOUBLE(o);
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        return put_be(b, 0xcb, bits, 8);
    }
    if (t == &PyList_Type || t == &PyTuple_Type) {
        Py_ssize_t n = t == &PyList_Type ? PyList_GET_SIZE(o) : PyTuple_GET_SIZE(o);
        if (pack_len(b, n, 0x90, 16, 0, 0xdc, 0xdd) < 0) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            /* a list may change size while an item is packed? Not here: packing calls no Python code */
            PyObject *item = t == &PyList_Type ? PyList_GET_ITEM(o, i) : PyTuple_GET_ITEM(o, i);
            if (pack_obj(b, item, depth + 1) < 0) return -1;
        }
        return 0;
    }
    if (t == &PyDict_Type) {
        Py_ssize_t n = PyDict_GET_SIZE(o), pos = 0;
        PyObject *k, *v;
        if (pack_len(b, n, 0x80, 16, 0, 0xde, 0xdf) < 0) return -1;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (pack_obj(b, k, depth + 1) < 0 || pack_obj(b, v, depth + 1) < 0) return -1;
        }
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "pack: a %.100s is left to the pure-Python packer", t->tp_name);
    return -1;
}

static int sha256(const unsigned char *p, size_t n, unsigned char *out) {
    unsigned int len = 0;
    if (!EVP_Digest(p, n, out, &len, sha256_md, NULL) || len != HASH) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL's SHA-256 failed");
        return -1;
    }
    return 0;
}

/* (bytes of buf[from:], its SHA-256 over buf[hashed_from:]) as a tuple, and the buffer freed */
static PyObject *bytes_and_hash(buf_t *b, Py_ssize_t hashed_from, int hash_first) {
    unsigned char h[HASH];
    PyObject *out = NULL;
    if (sha256(b->p + hashed_from, (size_t)(b->len - hashed_from), h) == 0) {
        PyObject *data = PyBytes_FromStringAndSize((const char *)b->p, b->len);
        PyObject *digest = data ? PyBytes_FromStringAndSize((const char *)h, HASH) : NULL;
        if (digest) out = hash_first ? PyTuple_Pack(2, digest, data) : PyTuple_Pack(2, data, digest);
        Py_XDECREF(data);
        Py_XDECREF(digest);
    }
    buf_free(b);
    return out;
}

static PyObject *pack(PyObject *self, PyObject *value) {
    buf_t b;
    buf_init(&b);
    if (pack_obj(&b, value, 0) < 0) {
        buf_free(&b);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)b.p, b.len);
    buf_free(&b);
    return out;
}

static PyObject *seal_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "seal_put(salt, content, tags, metadata)");
        return NULL;
    }
    if (!PyBytes_CheckExact(args[0]) || PyBytes_GET_SIZE(args[0]) != SALT) {
        PyErr_SetString(PyExc_ValueError, "seal_put: the salt must be 16 bytes");
        return NULL;
    }
    buf_t b;
    buf_init(&b);
    if (put(&b, PyBytes_AS_STRING(args[0]), SALT) < 0 || put_byte(&b, 0x93) < 0 || pack_obj(&b, args[1], 1) < 0 ||
        pack_obj(&b, args[2], 1) < 0 || pack_obj(&b, args[3], 1) < 0) {
        buf_free(&b);
        return NULL;
    }
    return bytes_and_hash(&b, 0, 1);
}

static PyObject *entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "entry(seq, ts_ns, prev, op, agent, body)");
        return NULL;
    }
    buf_t b;
    buf_init(&b);
    if (put_byte(&b, 0x97) < 0 || put_byte(&b, 0x01) < 0) goto fail;
    for (Py_ssize_t i = 0; i < 6; i++)
        if (pack_obj(&b, args[i], 1) < 0) goto fail;
    return bytes_and_hash(&b, 0, 0);
fail:
    buf_free(&b);
    return NULL;
}

/* Whether `o` is a value no reference cycle can pass through: None, an exact int, bytes or str. */
static int atomic(PyObject *o) {
    return o == Py_None || PyLong_CheckExact(o) || PyBytes_CheckExact(o) || PyUnicode_CheckExact(o);
}

/* A new instance of `cls` (a subclass of tuple) holding the n items (new references taken) */
static PyObject *tuple_of(PyObject *cls, PyObject **items, Py_ssize_t n) {
    PyTypeObject *t = (PyTypeObject *)cls;
    PyObject *out = t->tp_alloc(t, n);
    if (!out) {
        for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(items[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(out, i, items[i]);
    return out;
}

static PyObject *staged(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError,
                        "staged(entry_cls, staged_cls, seq, ts_ns, prev, op, agent, body, payload, tags, text)");
        return NULL;
    }
    for (int k = 0; k < 2; k++) {
        PyObject *cls = args[k];
        /* a plain subclass of tuple: instances made by tp_alloc, with no __dict__ or slots of their own */
        if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) ||
            (PyTypeObject *)cls == &PyTuple_Type || ((PyTypeObject *)cls)->tp_basicsize != PyTuple_Type.tp_basicsize ||
            ((PyTypeObject *)cls)->tp_dictoffset != 0) {
            PyErr_SetString(PyExc_TypeError, "staged: entry_cls and staged_cls must be plain subclasses of tuple");
            return NULL;
        }
    }
    PyObject *const *f = args + 2; /* seq, ts_ns, prev, op, agent, body */
    PyObject *payload = args[8], *tags = args[9], *text = args[10];
    buf_t b;
    buf_init(&b);
    if (put_byte(&b, 0x97) < 0 || put_byte(&b, 0x01) < 0) {
        buf_free(&b);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 6; i++) {
        if (pack_obj(&b, f[i], 1) < 0) {
            buf_free(&b);
            return NULL;
        }
    }
    PyObject *made = bytes_and_hash(&b, 0, 0); /* frees the buffer */
    if (!made) return NULL;
    PyObject *items[8];
    for (int i = 0; i < 6; i++) items[i] = Py_NewRef(f[i]);
    items[6] = Py_NewRef(PyTuple_GET_ITEM(made, 0));
    items[7] = Py_NewRef(PyTuple_GET_ITEM(made, 1));
    Py_DECREF(made);
    PyObject *entry_obj = tuple_of(args[0], items, 8);
    if (!entry_obj) return NULL;
    PyObject *body = f[5];
    int plain_entry = PyDict_CheckExact(body) && !PyObject_GC_IsTracked(body);
    for (int i = 0; i < 5 && plain_entry; i++) plain_entry = atomic(f[i]);
    if (plain_entry) PyObject_GC_UnTrack(entry_obj);
    int plain_tags = PyTuple_CheckExact(tags);
    for (Py_ssize_t i = 0; plain_tags && i < PyTuple_GET_SIZE(tags); i++)
        plain_tags = PyUnicode_CheckExact(PyTuple_GET_ITEM(tags, i));
    if (plain_tags && PyObject_GC_IsTracked(tags)) PyObject_GC_UnTrack(tags);
    PyObject *sitems[4] = {entry_obj, Py_NewRef(payload), Py_NewRef(tags), Py_NewRef(text)};
    PyObject *out = tuple_of(args[1], sitems, 4);
    if (out && plain_entry && plain_tags && (payload == Py_None || PyBytes_CheckExact(payload)) &&
        (text == Py_None || PyUnicode_CheckExact(text)))
        PyObject_GC_UnTrack(out);
    return out;
}

static PyObject *frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "frame([(entry, payload or None), ...], first_seq)");
        return NULL;
    }
    PyObject *entries = args[0];
    Py_ssize_t count = PyList_GET_SIZE(entries);
    unsigned long long first = PyLong_AsUnsignedLongLong(args[1]);
    if (first == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (count == 0 || count > 0xffffffffLL) {
        PyErr_SetString(PyExc_ValueError, "a frame holds at least one entry");
        return NULL;
    }
    int64_t elen = 0, plen = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *it = PyList_GET_ITEM(entries, i);
        if (!PyTuple_CheckExact(it) || PyTuple_GET_SIZE(it) != 2 || !PyBytes_CheckExact(PyTuple_GET_ITEM(it, 0)) ||
            (PyTuple_GET_ITEM(it, 1) != Py_None && !PyBytes_CheckExact(PyTuple_GET_ITEM(it, 1)))) {
            PyErr_SetString(PyExc_TypeError, "frame: each item must be (bytes, bytes or None)");
            return NULL;
        }
        PyObject *payload = PyTuple_GET_ITEM(it, 1);
        elen += ENTRY_HEADER + PyBytes_GET_SIZE(PyTuple_GET_ITEM(it, 0));
        if (payload != Py_None) plen += 4 + PyBytes_GET_SIZE(payload);
        if (elen + plen > MAX_FRAME) {
            PyErr_SetString(PyExc_ValueError, "frame: over the size of a frame");
            return NULL;
        }
    }
    Py_ssize_t total = (Py_ssize_t)(FRAME_HEADER + elen + plen + TRAILER);
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    PyObject *positions = out ? PyList_New(count) : NULL;
    if (!positions) {
        Py_XDECREF(out);
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    memcpy(p, "MNFR", 4);
    be32(p + 4, (uint32_t)count);
    be32(p + 8, (uint32_t)(first >> 32));
    be32(p + 12, (uint32_t)first);
    be32(p + 16, (uint32_t)elen);
    be32(p + 20, (uint32_t)plen);
    unsigned char *e = p + FRAME_HEADER, *s = p + FRAME_HEADER + elen;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *it = PyList_GET_ITEM(entries, i), *raw = PyTuple_GET_ITEM(it, 0), *payload = PyTuple_GET_ITEM(it, 1);
        Py_ssize_t rlen = PyBytes_GET_SIZE(raw), slen = payload == Py_None ? 0 : 4 + PyBytes_GET_SIZE(payload);
        be32(e, (uint32_t)rlen);
        be32(e + 4, (uint32_t)slen);
        memcpy(e + ENTRY_HEADER, PyBytes_AS_STRING(raw), (size_t)rlen);
        e += ENTRY_HEADER + rlen;
        if (slen) {
            const unsigned char *pl = (const unsigned char *)PyBytes_AS_STRING(payload);
            uLong crc = crc32(0L, Z_NULL, 0);
            Py_ssize_t left = slen - 4, done = 0;
            while (left > 0) { /* zlib takes a uInt length */
                uInt chunk = left > (Py_ssize_t)0x40000000 ? 0x40000000u : (uInt)left;
                crc = crc32(crc, pl + done, chunk);
                done += chunk;
                left -= chunk;
            }
            be32(s, (uint32_t)crc);
            memcpy(s + 4, pl, (size_t)(slen - 4));
        }
        PyObject *pos = Py_BuildValue("(nn)", (Py_ssize_t)(s - p), slen);
        if (!pos) {
            Py_DECREF(out);
            Py_DECREF(positions);
            return NULL;
        }
        PyList_SET_ITEM(positions, i, pos);
        s += slen;
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, p, (uInt)(FRAME_HEADER + elen));
    be32(s, (uint32_t)crc);
    memcpy(s + 4, "MNFE", 4);
    PyObject *res = PyTuple_Pack(2, out, positions);
    Py_DECREF(out);
    Py_DECREF(positions);
    return res;
}

static PyObject *leaf_hashes(PyObject *self, PyObject *entries) {
    if (!PyList_CheckExact(entries)) {
        PyErr_SetString(PyExc_TypeError, "leaf_hashes([entry bytes, ...])");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(entries);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_CheckExact(PyList_GET_ITEM(entries, i))) {
            PyErr_SetString(PyExc_TypeError, "leaf_hashes: each entry must be bytes");
            return NULL;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * HASH);
    if (!out) return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    static const unsigned char leaf = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(entries, i);
        unsigned int len = 0;
        if (!EVP_DigestInit_ex(ctx, sha256_md, NULL) || !EVP_DigestUpdate(ctx, &leaf, 1) ||
            !EVP_DigestUpdate(ctx, PyBytes_AS_STRING(e), (size_t)PyBytes_GET_SIZE(e)) ||
            !EVP_DigestFinal_ex(ctx, o + i * HASH, &len) || len != HASH) {
            EVP_MD_CTX_free(ctx);
            Py_DECREF(out);
            PyErr_SetString(PyExc_RuntimeError, "OpenSSL's SHA-256 failed");
            return NULL;
        }
    }
    EVP_MD_CTX_free(ctx);
    return out;
}

/* -- a remember's input checked and sealed, for the common input ----------------------------------- */

typedef struct {
    PyObject *obj, *value; /* borrowed */
    const char *s;
    Py_ssize_t n;
} keyed_t;

static int by_utf8(const void *a, const void *b) {
    const keyed_t *x = a, *y = b;
    Py_ssize_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, (size_t)n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* The UTF-8 bytes of an exact str: 1; 0 (no exception set) where it is not an exact str or does not
 * encode (a lone surrogate); -1 with an exception set (memory). */
static int utf8_of(PyObject *o, const char **s, Py_ssize_t *n) {
    if (!PyUnicode_CheckExact(o)) return 0;
    *s = PyUnicode_AsUTF8AndSize(o, n);
    if (*s) return 1;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
    PyErr_Clear();
    return 0;
}

/* A flat metadata value that _canonical_json (mnemo/validation.py) returns as it is: 1; else 0; -1
 * with an exception set (memory). */
static int plain_value(PyObject *v) {
    if (v == Py_None || v == Py_True || v == Py_False) return 1;
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type) {
        const char *s;
        Py_ssize_t n;
        return utf8_of(v, &s, &n);
    }
    if (t == &PyFloat_Type) return isfinite(PyFloat_AS_DOUBLE(v)) != 0;
    if (t == &PyLong_Type) {
        int overflow = 0;
        (void)PyLong_AsLongLongAndOverflow(v, &overflow); /* an exact int: it raises nothing */
        if (overflow < 0) return 0; /* below -2**63 */
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear(); /* beyond 2**64 - 1: OverflowError */
                return 0;
            }
        }
        return 1;
    }
    return 0;
}

static const char MEMORY_TAG[] = "memorytool", PATH_PREFIX[] = "path:";

/* A remember's input checked and sealed (args: salt, content, tags, metadata and the four limits): 1 with
 * *out set to (size, tags, metadata, digest, payload); 0 where it is not the common input (nothing set);
 * -1 with an exception set. */
static int checked_seal(PyObject *const *args, PyObject **out) {
    if (!PyBytes_CheckExact(args[0]) || PyBytes_GET_SIZE(args[0]) != SALT) {
        PyErr_SetString(PyExc_ValueError, "seal_checked: the salt must be 16 bytes");
        return -1;
    }
    PyObject *content = args[1], *tags = args[2], *metadata = args[3];
    Py_ssize_t limits[4];
    for (int k = 0; k < 4; k++) {
        limits[k] = PyLong_AsSsize_t(args[4 + k]);
        if (limits[k] == -1 && PyErr_Occurred()) return -1;
    }
    Py_ssize_t max_content = limits[0], max_tag_chars = limits[1], max_tags = limits[2], max_meta = limits[3];
    int rc = -1;
    PyObject *tag_tuple = NULL, *meta = NULL;
    keyed_t *keyed = NULL;
    buf_t b;
    buf_init(&b);
    /* the content */
    Py_ssize_t size;
    const char *s;
    if (PyBytes_CheckExact(content)) {
        size = PyBytes_GET_SIZE(content);
    } else {
        int got = utf8_of(content, &s, &size);
        if (got <= 0) goto got_not;
    }
    if (size > max_content) goto not_here;
    /* the tags: checked, sorted by their UTF-8 bytes, the repeats dropped */
    int is_list = PyList_CheckExact(tags);
    if (!is_list && !PyTuple_CheckExact(tags)) goto not_here;
    Py_ssize_t ntags = is_list ? PyList_GET_SIZE(tags) : PyTuple_GET_SIZE(tags);
    Py_ssize_t nmeta = 0;
    if (metadata != Py_None) {
        if (!PyDict_CheckExact(metadata)) goto not_here;
        nmeta = PyDict_GET_SIZE(metadata);
    }
    keyed = PyMem_Malloc(sizeof(keyed_t) * (size_t)(ntags + nmeta + 1));
    if (!keyed) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < ntags; i++) {
        /* the list's items are read with no Python code run in between: its size cannot change */
        PyObject *tag = is_list ? PyList_GET_ITEM(tags, i) : PyTuple_GET_ITEM(tags, i);
        keyed_t *k = &keyed[i];
        int got = utf8_of(tag, &k->s, &k->n);
        if (got <= 0) goto got_not;
        Py_ssize_t chars = PyUnicode_GET_LENGTH(tag);
        if (chars == 0 || chars > max_tag_chars || memchr(k->s, 0, (size_t)k->n)) goto not_here;
        if ((k->n == (Py_ssize_t)sizeof MEMORY_TAG - 1 && !memcmp(k->s, MEMORY_TAG, sizeof MEMORY_TAG - 1)) ||
            (k->n >= (Py_ssize_t)sizeof PATH_PREFIX - 1 && !memcmp(k->s, PATH_PREFIX, sizeof PATH_PREFIX - 1)))
            goto not_here;
        k->obj = tag;
        k->value = NULL;
    }
    if (ntags > 1) qsort(keyed, (size_t)ntags, sizeof(keyed_t), by_utf8);
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < ntags; i++)
        if (!distinct || by_utf8(&keyed[distinct - 1], &keyed[i])) keyed[distinct++] = keyed[i];
    if (distinct > max_tags) goto not_here;
    tag_tuple = PyTuple_New(distinct);
    if (!tag_tuple) goto error;
    for (Py_ssize_t i = 0; i < distinct; i++) PyTuple_SET_ITEM(tag_tuple, i, Py_NewRef(keyed[i].obj));
    PyObject_GC_UnTrack(tag_tuple); /* exact str only: never part of a cycle */
    /* the metadata: flat, its keys sorted */
    keyed_t *items = keyed + ntags;
    if (nmeta) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *k, *v;
        while (PyDict_Next(metadata, &pos, &k, &v)) {
            int got = utf8_of(k, &items[i].s, &items[i].n);
            if (got > 0) got = plain_value(v);
            if (got <= 0) goto got_not;
            items[i].obj = k;
            items[i].value = v;
            i++;
        }
        if (nmeta > 1) qsort(items, (size_t)nmeta, sizeof(keyed_t), by_utf8); /* distinct keys */
    }
    meta = PyDict_New();
    if (!meta) goto error;
    for (Py_ssize_t i = 0; i < nmeta; i++)
        if (PyDict_SetItem(meta, items[i].obj, items[i].value) < 0) goto error;
    /* sealed: the salt, then [content, tags, metadata] packed */
    if (put(&b, PyBytes_AS_STRING(args[0]), SALT) < 0 || put_byte(&b, 0x93) < 0 || pack_obj(&b, content, 1) < 0 ||
        pack_obj(&b, tag_tuple, 1) < 0)
        goto error;
    Py_ssize_t meta_from = b.len;
    if (pack_obj(&b, meta, 1) < 0) goto error;
    /* the packed metadata over its limit (check_metadata_size): left to the twin, which says so */
    if (b.len - SALT > max_meta && b.len - meta_from > max_meta) goto not_here;
    PyObject *sealed = bytes_and_hash(&b, 0, 1); /* frees the buffer */
    if (!sealed) goto error_freed;
    PyObject *n = PyLong_FromSsize_t(size);
    if (n) {
        *out = PyTuple_Pack(5, n, tag_tuple, meta, PyTuple_GET_ITEM(sealed, 0), PyTuple_GET_ITEM(sealed, 1));
        if (*out) rc = 1;
    }
    Py_XDECREF(n);
    Py_DECREF(sealed);
    goto error_freed;
got_not: /* what utf8_of or plain_value said: 0, not here; -1, an error */
    if (PyErr_Occurred()) goto error;
not_here:
    rc = 0;
error:
    buf_free(&b);
error_freed:
    PyMem_Free(keyed);
    Py_XDECREF(tag_tuple);
    Py_XDECREF(meta);
    return rc;
}

static PyObject *seal_checked(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "seal_checked(salt, content, tags, metadata, max_content, max_tag_chars, max_tags, max_metadata)");
        return NULL;
    }
    PyObject *out = NULL;
    int rc = checked_seal(args, &out);
    return rc < 0 ? NULL : rc == 0 ? Py_NewRef(Py_None) : out;
}

static PyObject *key_digest, *key_id, *key_scope, *key_size, *key_ver, *op_put, *one;

static PyObject *stage_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 16) {
        PyErr_SetString(PyExc_TypeError,
                        "stage_new(entry_cls, staged_cls, seq, ts_ns, prev, agent, id, scope, salt, content, tags, "
                        "metadata, max_content, max_tag_chars, max_tags, max_metadata)");
        return NULL;
    }
    PyObject *sealed = NULL, *body = NULL, *out = NULL;
    int rc = checked_seal(args + 8, &sealed);
    if (rc <= 0) return rc < 0 ? NULL : Py_NewRef(Py_None);
    /* sealed: (size, tags, metadata, digest, payload); the body's keys in sorted order */
    body = PyDict_New();
    if (!body || PyDict_SetItem(body, key_digest, PyTuple_GET_ITEM(sealed, 3)) < 0 ||
        PyDict_SetItem(body, key_id, args[6]) < 0 || PyDict_SetItem(body, key_scope, args[7]) < 0 ||
        PyDict_SetItem(body, key_size, PyTuple_GET_ITEM(sealed, 0)) < 0 || PyDict_SetItem(body, key_ver, one) < 0)
        goto done;
    PyObject *content = args[9];
    PyObject *sargs[11] = {args[0], args[1], args[2], args[3], args[4], op_put, args[5], body,
                           PyTuple_GET_ITEM(sealed, 4), PyTuple_GET_ITEM(sealed, 1),
                           PyUnicode_CheckExact(content) ? content : Py_None};
    PyObject *made = staged(self, sargs, 11);
    if (made) {
        out = PyTuple_Pack(2, made, PyTuple_GET_ITEM(sealed, 2));
        Py_DECREF(made);
    }
done:
    Py_XDECREF(body);
    Py_DECREF(sealed);
    return out;
}

static PyMethodDef methods[] = {
    {"leaf_hashes", leaf_hashes, METH_O,
     "leaf_hashes([entry, ...]) -> bytes: each entry's RFC 6962 leaf hash, SHA-256(0x00 + entry), back to back"},
    {"pack", pack, METH_O, "pack(value) -> bytes: msgpack.packb(value, use_bin_type=True) of a plain value"},
    {"seal_put", (PyCFunction)(void (*)(void))seal_put, METH_FASTCALL,
     "seal_put(salt, content, tags, metadata) -> (digest, payload): a put's payload and its SHA-256"},
    {"entry", (PyCFunction)(void (*)(void))entry, METH_FASTCALL,
     "entry(seq, ts_ns, prev, op, agent, body) -> (raw, hash): an entry's bytes and its SHA-256"},
    {"staged", (PyCFunction)(void (*)(void))staged, METH_FASTCALL,
     "staged(entry_cls, staged_cls, seq, ts_ns, prev, op, agent, body, payload, tags, text) -> a staged entry, "
     "its tuples untracked by the cyclic collector where they hold no container it tracks"},
    {"seal_checked", (PyCFunction)(void (*)(void))seal_checked, METH_FASTCALL,
     "seal_checked(salt, content, tags, metadata, max_content, max_tag_chars, max_tags, max_metadata) -> "
     "(size, tags, metadata, digest, payload) | None: a remember's common input checked and sealed"},
    {"stage_new", (PyCFunction)(void (*)(void))stage_new, METH_FASTCALL,
     "stage_new(entry_cls, staged_cls, seq, ts_ns, prev, agent, id, scope, salt, content, tags, metadata, max_content, "
     "max_tag_chars, max_tags, max_metadata) -> (staged, metadata) | None: a new record's put from a remember's "
     "common input"},
    {"frame", (PyCFunction)(void (*)(void))frame, METH_FASTCALL,
     "frame([(entry, payload or None), ...], first_seq) -> (bytes, [(slot offset, slot length), ...])"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_writepath",
                                    "The write path of a put in C (see mnemo/_writepath.c).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__writepath(void) {
    if (sha256_init() < 0) return NULL;
    if (!key_digest) {
        key_digest = PyUnicode_InternFromString("digest");
        key_id = PyUnicode_InternFromString("id");
        key_scope = PyUnicode_InternFromString("scope");
        key_size = PyUnicode_InternFromString("size");
        key_ver = PyUnicode_InternFromString("ver");
        op_put = PyUnicode_InternFromString("put");
        one = PyLong_FromLong(1);
        if (!key_digest || !key_id || !key_scope || !key_size || !key_ver || !op_put || !one) return NULL;
    }
    return PyModule_Create(&module);
}
