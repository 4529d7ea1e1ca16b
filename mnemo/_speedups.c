/* The scan loop that replay and verify share, in C (docs/FORMAT.md §3, §5.1).
 *
 * scan() walks frames of canonical puts in a buffer for as long as each frame is whole, its CRC holds,
 * every entry is a canonical put that links to the one before it, and every payload slot holds a
 * well-formed [content, sorted tags, metadata]; it returns the entries as columns and stops at the
 * first frame it does not take, which the caller's general path then reads. It never raises for what
 * the buffer holds: an attacker may have written it. mnemo/storage/file/scan.py is its pure-Python
 * twin, and the two must return the same thing for every input.
 *
 * The loop runs without the GIL: phase 1 parses and records spans into the buffer; phase 2, with the
 * GIL, makes the Python objects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define FH 24
#define EH 8
#define SC 4
#define SALT 16
#define HASH 32
#define MIN_PUT_SLOT (SC + SALT + 1)
#define MAX_DEPTH 32
#define FLAG_DIGEST 1
#define FLAG_LEAVES 2

static EVP_MD *sha256_md = NULL;

typedef struct {
    Py_ssize_t off, len;
} span;

typedef struct {
    /* per entry */
    span id, scope, agent, tags; /* tags: the bytes of the tag strings (after the array header) */
    uint32_t ntags, ver, slot_len, entry_len;
    int64_t seq, ts, size, slot_off, entry_off;
    unsigned char hash[HASH], leaf[HASH];
} row;

typedef struct {
    row *rows;
    Py_ssize_t n, cap;
    int64_t *frames; /* offset, end pairs (absolute) */
    uint32_t *counts;
    Py_ssize_t nframes, fcap;
    int oom;
} out_t;

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t be64(const unsigned char *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* Strict UTF-8 as Python decodes it: no overlongs, no surrogates, nothing above U+10FFFF. */
static int utf8_ok(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            unsigned char c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && c1 < 0xA0) return 0;
            if (c == 0xED && c1 >= 0xA0) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            unsigned char c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80) return 0;
            if (c == 0xF0 && c1 < 0x90) return 0;
            if (c == 0xF4 && c1 >= 0x90) return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* A msgpack str header at p[0..n): fixstr, str8, str16 only (as the Python fast path reads them).
 * Sets *start, *len; returns 0 if it is not one or overruns. */
static int str_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t i, Py_ssize_t *start, Py_ssize_t *len) {
    if (i >= n) return 0;
    unsigned char b = p[i];
    Py_ssize_t s, l;
    if (b >= 0xA0 && b <= 0xBF) {
        s = i + 1;
        l = b - 0xA0;
    } else if (b == 0xD9) {
        if (i + 2 > n) return 0;
        s = i + 2;
        l = p[i + 1];
    } else if (b == 0xDA) {
        if (i + 3 > n) return 0;
        s = i + 3;
        l = ((Py_ssize_t)p[i + 1] << 8) | p[i + 2];
    } else {
        return 0;
    }
    if (l > n - s) return 0;
    *start = s;
    *len = l;
    return 1;
}

/* A msgpack unsigned int at p[i]: positive fixint or uint 8/16/32/64. */
static int uint_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t i, uint64_t *v, Py_ssize_t *end) {
    if (i >= n) return 0;
    unsigned char b = p[i];
    int w;
    if (b < 0x80) {
        *v = b;
        *end = i + 1;
        return 1;
    }
    if (b == 0xCC) w = 1;
    else if (b == 0xCD) w = 2;
    else if (b == 0xCE) w = 4;
    else if (b == 0xCF) w = 8;
    else return 0;
    if (w > n - i - 1) return 0;
    uint64_t x = 0;
    for (int k = 0; k < w; k++) x = (x << 8) | p[i + 1 + k];
    *v = x;
    *end = i + 1 + w;
    return 1;
}

/* Any msgpack str (fixstr, str8/16/32) with valid UTF-8, for the payload (decoded by msgpack). */
static int any_str(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i, Py_ssize_t *start, Py_ssize_t *len) {
    if (*i >= n) return 0;
    unsigned char b = p[*i];
    Py_ssize_t s, l;
    if (b >= 0xA0 && b <= 0xBF) {
        s = *i + 1;
        l = b - 0xA0;
    } else if (b == 0xD9 || b == 0xDA || b == 0xDB) {
        int w = b == 0xD9 ? 1 : b == 0xDA ? 2 : 4;
        if (w > n - *i - 1) return 0;
        uint64_t x = 0;
        for (int k = 0; k < w; k++) x = (x << 8) | p[*i + 1 + k];
        s = *i + 1 + w;
        if (x > (uint64_t)(n - s)) return 0;
        l = (Py_ssize_t)x;
    } else {
        return 0;
    }
    if (l > n - s || !utf8_ok(p + s, l)) return 0;
    *start = s;
    *len = l;
    *i = s + l;
    return 1;
}

/* Skip one msgpack object that Python's msgpack decodes (raw=False, strict_map_key=True) to a plain
 * value: nil, bools, ints, floats, UTF-8 str, bin, arrays, maps with str keys. Ext types, 0xc1 and
 * nesting deeper than MAX_DEPTH are refused (the general path judges those). */
static int skip_obj(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i, int depth) {
    if (*i >= n || depth > MAX_DEPTH) return 0;
    unsigned char b = p[*i];
    Py_ssize_t s, l;
    uint64_t count;
    int w;
    if (b <= 0x7F || b >= 0xE0 || b == 0xC0 || b == 0xC2 || b == 0xC3) {
        *i += 1;
        return 1;
    }
    if ((b >= 0xA0 && b <= 0xBF) || b == 0xD9 || b == 0xDA || b == 0xDB) return any_str(p, n, i, &s, &l);
    if (b >= 0x90 && b <= 0x9F) {
        count = b - 0x90;
        *i += 1;
        goto array;
    }
    if (b >= 0x80 && b <= 0x8F) {
        count = b - 0x80;
        *i += 1;
        goto map;
    }
    switch (b) {
    case 0xCC: case 0xD0: w = 1; break;
    case 0xCD: case 0xD1: w = 2; break;
    case 0xCE: case 0xD2: case 0xCA: w = 4; break;
    case 0xCF: case 0xD3: case 0xCB: w = 8; break;
    case 0xC4: case 0xC5: case 0xC6: {
        int lw = b == 0xC4 ? 1 : b == 0xC5 ? 2 : 4;
        if (lw > n - *i - 1) return 0;
        uint64_t x = 0;
        for (int k = 0; k < lw; k++) x = (x << 8) | p[*i + 1 + k];
        Py_ssize_t at = *i + 1 + lw;
        if (x > (uint64_t)(n - at)) return 0;
        *i = at + (Py_ssize_t)x;
        return 1;
    }
    case 0xDC: case 0xDD: case 0xDE: case 0xDF: {
        int lw = (b == 0xDC || b == 0xDE) ? 2 : 4;
        if (lw > n - *i - 1) return 0;
        uint64_t x = 0;
        for (int k = 0; k < lw; k++) x = (x << 8) | p[*i + 1 + k];
        *i += 1 + lw;
        count = x;
        if (b == 0xDC || b == 0xDD) goto array;
        goto map;
    }
    default:
        return 0; /* 0xc1, ext types */
    }
    if (w > n - *i - 1) return 0;
    *i += 1 + w;
    return 1;
array:
    if (count > (uint64_t)(n - *i)) return 0; /* each item takes at least a byte */
    for (uint64_t k = 0; k < count; k++)
        if (!skip_obj(p, n, i, depth + 1)) return 0;
    return 1;
map:
    if (count > (uint64_t)(n - *i) / 2) return 0;
    for (uint64_t k = 0; k < count; k++) {
        if (!any_str(p, n, i, &s, &l)) return 0;
        if (!skip_obj(p, n, i, depth + 1)) return 0;
    }
    return 1;
}

/* An array header (fixarray, array16, array32) at p[*i]; the count in *count. */
static int array_head(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i, uint64_t *count) {
    if (*i >= n) return 0;
    unsigned char b = p[*i];
    if (b >= 0x90 && b <= 0x9F) {
        *count = b - 0x90;
        *i += 1;
        return 1;
    }
    int w = b == 0xDC ? 2 : b == 0xDD ? 4 : 0;
    if (!w || w > n - *i - 1) return 0;
    uint64_t x = 0;
    for (int k = 0; k < w; k++) x = (x << 8) | p[*i + 1 + k];
    *count = x;
    *i += 1 + w;
    return 1;
}

static int is_map_head(const unsigned char *p, Py_ssize_t n, Py_ssize_t i) {
    return i < n && ((p[i] >= 0x80 && p[i] <= 0x8F) || p[i] == 0xDE || p[i] == 0xDF);
}

/* The packed fields of a put: exactly [content, tags, metadata], content a str or bin whose length in
 * bytes is `size`, tags a list of str in sorted order, metadata a map. */
static int packed_ok(const unsigned char *p, Py_ssize_t n, uint64_t size, row *r, Py_ssize_t base) {
    Py_ssize_t i = 0, s, l;
    uint64_t count;
    if (!array_head(p, n, &i, &count) || count != 3) return 0;
    if (i >= n) return 0;
    unsigned char b = p[i];
    if (b == 0xC4 || b == 0xC5 || b == 0xC6) {
        Py_ssize_t at = i;
        if (!skip_obj(p, n, &at, 0)) return 0;
        int lw = b == 0xC4 ? 1 : b == 0xC5 ? 2 : 4;
        l = at - i - 1 - lw;
        i = at;
    } else if (!any_str(p, n, &i, &s, &l)) {
        return 0;
    }
    if ((uint64_t)l != size) return 0;
    if (!array_head(p, n, &i, &count)) return 0;
    if (count > (uint64_t)(n - i)) return 0;
    r->tags.off = base + i;
    r->ntags = (uint32_t)count;
    Py_ssize_t ps = 0, pl = -1;
    for (uint64_t k = 0; k < count; k++) {
        if (!any_str(p, n, &i, &s, &l)) return 0;
        if (pl >= 0) { /* sorted: code point order is UTF-8 byte order */
            Py_ssize_t m = pl < l ? pl : l;
            int c = memcmp(p + ps, p + s, (size_t)m);
            if (c > 0 || (c == 0 && pl > l)) return 0;
        }
        ps = s;
        pl = l;
    }
    r->tags.len = base + i - r->tags.off;
    if (!is_map_head(p, n, i) || !skip_obj(p, n, &i, 0)) return 0;
    return i == n;
}

static int sha256(EVP_MD_CTX *ctx, const unsigned char *a, size_t na, const unsigned char *b, size_t nb,
                  unsigned char *out) {
    unsigned int len = 0;
    if (!EVP_DigestInit_ex(ctx, sha256_md, NULL)) return 0;
    if (na && !EVP_DigestUpdate(ctx, a, na)) return 0;
    if (nb && !EVP_DigestUpdate(ctx, b, nb)) return 0;
    return EVP_DigestFinal_ex(ctx, out, &len) && len == HASH;
}

static const unsigned char K_PUT[] = "\xa3put";
static const unsigned char K_DIGEST[] = "\x85\xa6" "digest\xc4\x20";
static const unsigned char K_ID[] = "\xa2id";
static const unsigned char K_SCOPE[] = "\xa5scope";
static const unsigned char K_SIZE[] = "\xa4size";
static const unsigned char K_VER[] = "\xa3ver";

static int starts(const unsigned char *p, Py_ssize_t n, Py_ssize_t i, const unsigned char *k, Py_ssize_t kn) {
    return i >= 0 && i <= n && kn <= n - i && memcmp(p + i, k, (size_t)kn) == 0;
}

/* The canonical put at raw[0..n) of `seq` after `prev`; fills r. (The Python twin is _put_entry.) */
static int put_entry(const unsigned char *raw, Py_ssize_t n, int64_t seq, const unsigned char *prev, row *r,
                     Py_ssize_t base) {
    unsigned char head[12];
    Py_ssize_t o;
    uint64_t s = (uint64_t)seq;
    head[0] = 0x97;
    head[1] = 0x01;
    if (s < 0x80) {
        head[2] = (unsigned char)s;
        o = 3;
    } else if (s < 0x100) {
        head[2] = 0xCC;
        head[3] = (unsigned char)s;
        o = 4;
    } else if (s < 0x10000) {
        head[2] = 0xCD;
        head[3] = (unsigned char)(s >> 8);
        head[4] = (unsigned char)s;
        o = 5;
    } else if (s < 0x100000000ULL) {
        head[2] = 0xCE;
        for (int k = 0; k < 4; k++) head[3 + k] = (unsigned char)(s >> (24 - 8 * k));
        o = 7;
    } else {
        head[2] = 0xCF;
        for (int k = 0; k < 8; k++) head[3 + k] = (unsigned char)(s >> (56 - 8 * k));
        o = 11;
    }
    head[o++] = 0xCF;
    /* seq, the timestamp's marker, the timestamp, prev */
    if (!starts(raw, n, 0, head, o) || n - o < 8 + 2 + HASH) return 0;
    if (be64(raw + o) > (uint64_t)INT64_MAX) return 0;
    r->ts = (int64_t)be64(raw + o);
    if (raw[o + 8] != 0xC4 || raw[o + 9] != 0x20 || memcmp(raw + o + 10, prev, HASH) != 0) return 0;
    Py_ssize_t q = o + 42, st, ln;
    if (!starts(raw, n, q, K_PUT, 4)) return 0;
    if (!str_at(raw, n, q + 4, &st, &ln) || !utf8_ok(raw + st, ln)) return 0;
    r->agent.off = base + st;
    r->agent.len = ln;
    Py_ssize_t d = st + ln;
    if (!starts(raw, n, d, K_DIGEST, 10)) return 0;
    d += 10;
    Py_ssize_t i = d + HASH;
    if (!starts(raw, n, i, K_ID, 3)) return 0;
    if (!str_at(raw, n, i + 3, &st, &ln) || !utf8_ok(raw + st, ln)) return 0;
    r->id.off = base + st;
    r->id.len = ln;
    i = st + ln;
    if (!starts(raw, n, i, K_SCOPE, 6)) return 0;
    if (!str_at(raw, n, i + 6, &st, &ln) || !utf8_ok(raw + st, ln)) return 0;
    r->scope.off = base + st;
    r->scope.len = ln;
    i = st + ln;
    uint64_t size, ver;
    if (!starts(raw, n, i, K_SIZE, 5) || !uint_at(raw, n, i + 5, &size, &i)) return 0;
    if (!starts(raw, n, i, K_VER, 4) || !uint_at(raw, n, i + 4, &ver, &i)) return 0;
    if (i != n || ver < 1 || ver > 0xFFFFFFFFULL || size > (uint64_t)INT64_MAX) return 0;
    r->size = (int64_t)size;
    r->ver = (uint32_t)ver;
    r->slot_off = d; /* the digest's position in raw, for the caller to check; replaced below */
    return 1;
}

static row *next_row(out_t *out) {
    if (out->n == out->cap) {
        Py_ssize_t cap = out->cap ? out->cap * 2 : 256;
        row *rows = realloc(out->rows, (size_t)cap * sizeof(row));
        if (!rows) {
            out->oom = 1;
            return NULL;
        }
        out->rows = rows;
        out->cap = cap;
    }
    return &out->rows[out->n];
}

static int add_frame(out_t *out, int64_t off, int64_t end, uint32_t count) {
    if (out->nframes == out->fcap) {
        Py_ssize_t cap = out->fcap ? out->fcap * 2 : 64;
        int64_t *f = realloc(out->frames, (size_t)cap * 2 * sizeof(int64_t));
        if (!f) return 0;
        out->frames = f;
        uint32_t *c = realloc(out->counts, (size_t)cap * sizeof(uint32_t));
        if (!c) return 0;
        out->counts = c;
        out->fcap = cap;
    }
    out->frames[2 * out->nframes] = off;
    out->frames[2 * out->nframes + 1] = end;
    out->counts[out->nframes++] = count;
    return 1;
}

typedef struct {
    const unsigned char *buf;
    Py_ssize_t len, pos;
    int64_t base, seq, stop_seq, max_frame;
    unsigned char last[HASH];
    int flags;
    Py_ssize_t need;
} scan_t;

/* Phase 1 (no GIL): take frames from st->pos on. */
static void scan_loop(scan_t *st, out_t *out) {
    const unsigned char *buf = st->buf;
    Py_ssize_t len = st->len, pos = st->pos;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) {
        out->oom = 1;
        return;
    }
    while (len - pos >= FH) {
        const unsigned char *h = buf + pos;
        uint32_t count = be32(h + 4), elen = be32(h + 16), plen = be32(h + 20);
        int64_t first = (int64_t)be64(h + 8);
        int64_t total = FH + 8 + (int64_t)elen + (int64_t)plen;
        if (memcmp(h, "MNFR", 4) != 0 || first != st->seq || count == 0 || (int64_t)count * EH > (int64_t)elen ||
            total > st->max_frame)
            break;
        if (st->stop_seq >= first && st->stop_seq < first + (int64_t)count) break;
        if (total > len - pos) {
            st->need = (Py_ssize_t)total;
            break;
        }
        Py_ssize_t crc_end = pos + FH + elen, slot_end = crc_end + plen;
        if (memcmp(buf + slot_end + 4, "MNFE", 4) != 0 ||
            be32(buf + slot_end) != (uint32_t)crc32(0L, buf + pos, (uInt)(crc_end - pos)))
            break;
        Py_ssize_t p = pos + FH, sp = crc_end, n0 = out->n;
        int64_t s = st->seq;
        unsigned char prev[HASH];
        memcpy(prev, st->last, HASH);
        int ok = 1;
        for (uint32_t k = 0; k < count && ok; k++) {
            row *r = next_row(out);
            if (!r) {
                ok = 0;
                break;
            }
            if (crc_end - p < EH) {
                ok = 0;
                break;
            }
            uint32_t rlen = be32(buf + p), slen = be32(buf + p + 4);
            p += EH;
            if ((Py_ssize_t)rlen > crc_end - p || (Py_ssize_t)slen > slot_end - sp || slen < MIN_PUT_SLOT) {
                ok = 0;
                break;
            }
            const unsigned char *raw = buf + p, *slot = buf + sp;
            if (!put_entry(raw, rlen, s, prev, r, p)) {
                ok = 0;
                break;
            }
            Py_ssize_t d = (Py_ssize_t)r->slot_off;
            const unsigned char *payload = slot + SC;
            size_t pl = slen - SC;
            if (be32(slot) != (uint32_t)crc32(0L, payload, (uInt)pl)) {
                ok = 0;
                break;
            }
            if (st->flags & FLAG_DIGEST) {
                unsigned char dg[HASH];
                if (!sha256(ctx, payload, pl, NULL, 0, dg) || memcmp(dg, raw + d, HASH) != 0) {
                    ok = 0;
                    break;
                }
            }
            if (!packed_ok(payload + SALT, (Py_ssize_t)pl - SALT, (uint64_t)r->size, r, sp + SC + SALT)) {
                ok = 0;
                break;
            }
            if (!sha256(ctx, raw, rlen, NULL, 0, r->hash)) {
                ok = 0;
                break;
            }
            if (st->flags & FLAG_LEAVES) {
                static const unsigned char zero = 0;
                if (!sha256(ctx, &zero, 1, raw, rlen, r->leaf)) {
                    ok = 0;
                    break;
                }
            }
            r->seq = s;
            r->entry_len = rlen;
            r->slot_len = slen;
            r->entry_off = st->base + p;
            r->slot_off = st->base + sp;
            memcpy(prev, r->hash, HASH);
            out->n++;
            p += rlen;
            sp += slen;
            s++;
        }
        if (!ok || p != crc_end || sp != slot_end) {
            out->n = n0;
            break;
        }
        if (!add_frame(out, st->base + pos, st->base + pos + total, count)) {
            out->n = n0;
            out->oom = 1;
            break;
        }
        st->seq = s;
        memcpy(st->last, prev, HASH);
        pos += (Py_ssize_t)total;
    }
    st->pos = pos;
    EVP_MD_CTX_free(ctx);
}

/* -- phase 2: Python objects ---------------------------------------------------------------------------- */

typedef struct {
    PyObject *list;  /* distinct values */
    PyObject *codes; /* dict: bytes of the span -> code */
} table_t;

static Py_ssize_t intern(table_t *t, const unsigned char *buf, span sp, uint32_t ntags, int is_tags,
                         span *last, Py_ssize_t *last_code) {
    if (*last_code >= 0 && last->len == sp.len && memcmp(buf + last->off, buf + sp.off, (size_t)sp.len) == 0)
        return *last_code;
    PyObject *key = PyBytes_FromStringAndSize((const char *)buf + sp.off, sp.len);
    if (!key) return -1;
    PyObject *code = PyDict_GetItemWithError(t->codes, key);
    if (code) {
        Py_DECREF(key);
        *last = sp;
        *last_code = PyLong_AsSsize_t(code);
        return *last_code;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    PyObject *value;
    if (is_tags) {
        value = PyTuple_New(ntags);
        Py_ssize_t i = sp.off, end = sp.off + sp.len, s, l;
        for (uint32_t k = 0; value && k < ntags; k++) {
            if (!any_str(buf, end, &i, &s, &l)) {
                PyErr_SetString(PyExc_SystemError, "tag set changed under the scan");
                Py_CLEAR(value);
                break;
            }
            PyObject *tag = PyUnicode_DecodeUTF8((const char *)buf + s, l, "strict");
            if (!tag) {
                Py_CLEAR(value);
                break;
            }
            PyTuple_SET_ITEM(value, k, tag);
        }
    } else {
        value = PyUnicode_DecodeUTF8((const char *)buf + sp.off, sp.len, "strict");
    }
    Py_ssize_t n = PyList_GET_SIZE(t->list);
    PyObject *num = value ? PyLong_FromSsize_t(n) : NULL;
    int bad = !num || PyList_Append(t->list, value) < 0 || PyDict_SetItem(t->codes, key, num) < 0;
    Py_XDECREF(value);
    Py_XDECREF(num);
    Py_DECREF(key);
    if (bad) return -1;
    *last = sp;
    *last_code = n;
    return n;
}

#define COLUMN(name, type, field)                                                                 \
    do {                                                                                          \
        PyObject *b_ = PyBytes_FromStringAndSize(NULL, out.n * (Py_ssize_t)sizeof(type));         \
        if (!b_) goto fail;                                                                       \
        type *d_ = (type *)PyBytes_AS_STRING(b_);                                                 \
        for (Py_ssize_t i_ = 0; i_ < out.n; i_++) d_[i_] = (type)out.rows[i_].field;              \
        if (PyDict_SetItemString(cols, name, b_) < 0) {                                           \
            Py_DECREF(b_);                                                                        \
            goto fail;                                                                            \
        }                                                                                         \
        Py_DECREF(b_);                                                                            \
    } while (0)

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long base, pos, seq, stop_seq, max_frame, row0;
    Py_buffer last;
    int flags;
    if (!PyArg_ParseTuple(args, "y*LLLy*LLiL", &view, &base, &pos, &seq, &last, &stop_seq, &max_frame, &flags,
                          &row0))
        return NULL;
    PyObject *result = NULL, *ids = NULL, *cols = NULL, *hashes = NULL, *leaves = NULL, *frames = NULL,
             *counts = NULL, *tag_lens = NULL, *tag_rows = NULL;
    table_t tagtab = {NULL, NULL};
    uint32_t *pair_code = NULL, *pair_row = NULL, *tcount = NULL;
    Py_ssize_t npairs = 0;
    table_t tabs[3] = {{NULL, NULL}, {NULL, NULL}, {NULL, NULL}};
    PyObject *codes[3] = {NULL, NULL, NULL};
    out_t out = {0};
    scan_t st;
    memset(&st, 0, sizeof st);
    if (last.len != HASH || pos < 0 || seq < 1 || base < 0 || row0 < 0 || row0 > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError,
                        "scan: a 32-byte hash, pos >= 0, seq >= 1, base >= 0 and 0 <= row0 < 2**32 are required");
        goto fail;
    }
    st.buf = view.buf;
    st.len = view.len;
    st.pos = pos > view.len ? view.len : (Py_ssize_t)pos;
    st.base = base;
    st.seq = seq;
    st.stop_seq = stop_seq;
    st.max_frame = max_frame;
    st.flags = flags;
    memcpy(st.last, last.buf, HASH);
    Py_BEGIN_ALLOW_THREADS
    scan_loop(&st, &out);
    Py_END_ALLOW_THREADS
    if (out.oom) {
        PyErr_NoMemory();
        goto fail;
    }
    if (out.n && row0 + out.n - 1 > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "scan: rows past 2**32");
        goto fail;
    }
    const unsigned char *buf = view.buf;
    ids = PyList_New(out.n);
    cols = PyDict_New();
    hashes = PyBytes_FromStringAndSize(NULL, out.n * HASH);
    leaves = PyBytes_FromStringAndSize(NULL, (flags & FLAG_LEAVES) ? out.n * HASH : 0);
    frames = PyBytes_FromStringAndSize((const char *)out.frames, out.nframes * 2 * (Py_ssize_t)sizeof(int64_t));
    counts = PyBytes_FromStringAndSize((const char *)out.counts, out.nframes * (Py_ssize_t)sizeof(uint32_t));
    if (!ids || !cols || !hashes || !leaves || !frames || !counts) goto fail;
    for (int t = 0; t < 3; t++) {
        tabs[t].list = PyList_New(0);
        tabs[t].codes = PyDict_New();
        codes[t] = PyBytes_FromStringAndSize(NULL, out.n * (Py_ssize_t)sizeof(uint32_t));
        if (!tabs[t].list || !tabs[t].codes || !codes[t]) goto fail;
    }
    tagtab.list = PyList_New(0);
    tagtab.codes = PyDict_New();
    if (!tagtab.list || !tagtab.codes) goto fail;
    Py_ssize_t total_tags = 0;
    for (Py_ssize_t i = 0; i < out.n; i++) total_tags += out.rows[i].ntags;
    pair_code = malloc((size_t)(total_tags ? total_tags : 1) * sizeof(uint32_t));
    pair_row = malloc((size_t)(total_tags ? total_tags : 1) * sizeof(uint32_t));
    if (!pair_code || !pair_row) {
        PyErr_NoMemory();
        goto fail;
    }
    span lastsp[3], lasttag = {0, 0};
    Py_ssize_t lastcode[3] = {-1, -1, -1}, lasttagcode = -1;
    for (Py_ssize_t i = 0; i < out.n; i++) {
        row *r = &out.rows[i];
        /* each tag, for the postings: (tag code, row) pairs */
        Py_ssize_t ti = r->tags.off, tend = r->tags.off + r->tags.len, ts_, tl_;
        for (uint32_t k = 0; k < r->ntags; k++) {
            if (!any_str(buf, tend, &ti, &ts_, &tl_)) {
                PyErr_SetString(PyExc_SystemError, "tag set changed under the scan");
                goto fail;
            }
            span tsp = {ts_, tl_};
            Py_ssize_t c = intern(&tagtab, buf, tsp, 0, 0, &lasttag, &lasttagcode);
            if (c < 0) goto fail;
            pair_code[npairs] = (uint32_t)c;
            pair_row[npairs++] = (uint32_t)(row0 + i);
        }
        PyObject *id = PyUnicode_DecodeUTF8((const char *)buf + r->id.off, r->id.len, "strict");
        if (!id) goto fail;
        PyList_SET_ITEM(ids, i, id);
        span sps[3] = {r->scope, r->agent, r->tags};
        for (int t = 0; t < 3; t++) {
            Py_ssize_t c = intern(&tabs[t], buf, sps[t], r->ntags, t == 2, &lastsp[t], &lastcode[t]);
            if (c < 0) goto fail;
            ((uint32_t *)PyBytes_AS_STRING(codes[t]))[i] = (uint32_t)c;
        }
        memcpy(PyBytes_AS_STRING(hashes) + i * HASH, r->hash, HASH);
        if (flags & FLAG_LEAVES) memcpy(PyBytes_AS_STRING(leaves) + i * HASH, r->leaf, HASH);
    }
    {
        /* the rows of each tag, tag by tag in first-seen order, rows in order (a stable counting sort) */
        Py_ssize_t ntag = PyList_GET_SIZE(tagtab.list);
        tcount = calloc((size_t)(ntag ? ntag : 1), sizeof(uint32_t));
        tag_lens = PyBytes_FromStringAndSize(NULL, ntag * (Py_ssize_t)sizeof(uint32_t));
        tag_rows = PyBytes_FromStringAndSize(NULL, npairs * (Py_ssize_t)sizeof(uint32_t));
        if (!tcount || !tag_lens || !tag_rows) {
            if (!tcount) PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t k = 0; k < npairs; k++) tcount[pair_code[k]]++;
        uint32_t *lens = (uint32_t *)PyBytes_AS_STRING(tag_lens), *rows = (uint32_t *)PyBytes_AS_STRING(tag_rows);
        uint32_t at = 0;
        for (Py_ssize_t t = 0; t < ntag; t++) {
            lens[t] = tcount[t];
            uint32_t c = tcount[t];
            tcount[t] = at;
            at += c;
        }
        for (Py_ssize_t k = 0; k < npairs; k++) rows[tcount[pair_code[k]]++] = pair_row[k];
    }
    COLUMN("ver", uint32_t, ver);
    COLUMN("slot_len", uint32_t, slot_len);
    COLUMN("entry_len", uint32_t, entry_len);
    COLUMN("seq", int64_t, seq);
    COLUMN("ts", int64_t, ts);
    COLUMN("size", int64_t, size);
    COLUMN("slot_off", int64_t, slot_off);
    COLUMN("entry_off", int64_t, entry_off);
    result = Py_BuildValue("(nLy#NNNNNNNNNNNNNNNN)", st.pos, (long long)st.seq, (const char *)st.last,
                           (Py_ssize_t)HASH, st.need > 0 ? PyLong_FromSsize_t(st.need) : PyLong_FromLong(0),
                           frames, counts, ids, tabs[0].list, codes[0], tabs[1].list, codes[1], tabs[2].list,
                           codes[2], tagtab.list, tag_lens, tag_rows, cols, hashes, leaves);
    frames = counts = ids = cols = hashes = leaves = tag_lens = tag_rows = tagtab.list = NULL;
    for (int t = 0; t < 3; t++) tabs[t].list = codes[t] = NULL;
fail:
    Py_XDECREF(tagtab.list);
    Py_XDECREF(tagtab.codes);
    Py_XDECREF(tag_lens);
    Py_XDECREF(tag_rows);
    free(pair_code);
    free(pair_row);
    free(tcount);
    Py_XDECREF(ids);
    Py_XDECREF(cols);
    Py_XDECREF(hashes);
    Py_XDECREF(leaves);
    Py_XDECREF(frames);
    Py_XDECREF(counts);
    for (int t = 0; t < 3; t++) {
        Py_XDECREF(tabs[t].list);
        Py_XDECREF(tabs[t].codes);
        Py_XDECREF(codes[t]);
    }
    free(out.rows);
    free(out.frames);
    free(out.counts);
    PyBuffer_Release(&view);
    PyBuffer_Release(&last);
    return result;
}

/* merkle_push(stack, size, leaves) -> size: the compact range's _push for each 32-byte leaf hash. */
static PyObject *merkle_push(PyObject *self, PyObject *args) {
    PyObject *stack;
    unsigned long long size;
    Py_buffer leaves;
    if (!PyArg_ParseTuple(args, "O!Ky*", &PyList_Type, &stack, &size, &leaves)) return NULL;
    PyObject *ret = NULL;
    EVP_MD_CTX *ctx = NULL;
    if (leaves.len % HASH) {
        PyErr_SetString(PyExc_ValueError, "leaf hashes are 32 bytes each");
        goto done;
    }
    ctx = EVP_MD_CTX_new();
    if (!ctx) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < leaves.len; i += HASH) {
        unsigned char h[HASH], node[1 + 2 * HASH];
        memcpy(h, (const unsigned char *)leaves.buf + i, HASH);
        unsigned long long m = size;
        while (m & 1) {
            Py_ssize_t top = PyList_GET_SIZE(stack);
            PyObject *left = top ? PyList_GET_ITEM(stack, top - 1) : NULL;
            if (!left || !PyBytes_Check(left) || PyBytes_GET_SIZE(left) != HASH) {
                PyErr_SetString(PyExc_ValueError, "the compact range does not match its size");
                goto done;
            }
            node[0] = 1;
            memcpy(node + 1, PyBytes_AS_STRING(left), HASH);
            memcpy(node + 1 + HASH, h, HASH);
            if (PyList_SetSlice(stack, top - 1, top, NULL) < 0) goto done;
            if (!sha256(ctx, node, sizeof node, NULL, 0, h)) {
                PyErr_SetString(PyExc_RuntimeError, "SHA-256 failed");
                goto done;
            }
            m >>= 1;
        }
        PyObject *b = PyBytes_FromStringAndSize((const char *)h, HASH);
        if (!b || PyList_Append(stack, b) < 0) {
            Py_XDECREF(b);
            goto done;
        }
        Py_DECREF(b);
        size++;
    }
    ret = PyLong_FromUnsignedLongLong(size);
done:
    if (ctx) EVP_MD_CTX_free(ctx);
    PyBuffer_Release(&leaves);
    return ret;
}

/* count_terms(text) -> (length, {term: count}) | None: the terms of an ASCII text as
 * mnemo/recall/analysis.py analyses it (its pure-Python twin: analysis.counted without this), counted in
 * the order they first occur; None when the text is not ASCII (the twin analyses it). For ASCII the
 * analysis is: words are maximal runs of [A-Za-z0-9_], a '.' between two such characters joining them;
 * a word is simple (one term, lower-cased) unless it holds '_' or '.' or a case change; otherwise it
 * yields its whole, then per piece between runs of '_' and '.', the piece (unless it is the whole word)
 * and, when it splits into several, its parts, split before an upper-case letter that follows a
 * lower-case letter or a digit, or that starts a capitalised word after capitals. */

#define IS_LOW(c) ((c) >= 'a' && (c) <= 'z')
#define IS_UP(c) ((c) >= 'A' && (c) <= 'Z')
#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')
#define IS_WORD(c) (IS_LOW(c) || IS_UP(c) || IS_DIGIT(c) || (c) == '_')

typedef struct {
    PyObject *counts;
    Py_ssize_t length;
} term_sink;

/* Counts one term: s[0:n] lower-cased. 0, or -1 with an exception set. */
static int count_term(term_sink *sink, const unsigned char *s, Py_ssize_t n) {
    PyObject *term = PyUnicode_New(n, 127);
    if (!term) return -1;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(term);
    for (Py_ssize_t i = 0; i < n; i++) out[i] = IS_UP(s[i]) ? (Py_UCS1)(s[i] + 32) : s[i];
    PyObject *was = PyDict_GetItemWithError(sink->counts, term);
    PyObject *now = NULL;
    if (was) {
        Py_ssize_t count = PyLong_AsSsize_t(was);
        if (count >= 0) now = PyLong_FromSsize_t(count + 1);
    } else if (!PyErr_Occurred()) {
        now = PyLong_FromLong(1);
    }
    int rc = now ? PyDict_SetItem(sink->counts, term, now) : -1;
    Py_XDECREF(now);
    Py_DECREF(term);
    if (rc == 0) sink->length++;
    return rc;
}

/* Whether w[0:n] splits before position j (0 < j < n), as analysis._CASE_CHANGE does. */
static int case_change(const unsigned char *w, Py_ssize_t n, Py_ssize_t j) {
    unsigned char before = w[j - 1], at = w[j];
    if ((IS_LOW(before) || IS_DIGIT(before)) && IS_UP(at)) return 1;
    return IS_UP(before) && IS_UP(at) && j + 1 < n && IS_LOW(w[j + 1]);
}

/* The simple words that analysis._split passes over: no separator, and lower case (str.islower), or
 * lower case after the first character, or capitals only (str.isupper and str.isalpha). */
static int simple_word(const unsigned char *w, Py_ssize_t n) {
    int low = 0, up = 0, low_after = 0, up_after = 0, alpha = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = w[i];
        if (c == '_' || c == '.') return 0;
        if (IS_LOW(c)) {
            low = 1;
            if (i) low_after = 1;
        } else if (IS_UP(c)) {
            up = 1;
            if (i) up_after = 1;
        } else {
            alpha = 0;
        }
    }
    return (low && !up) || (low_after && !up_after) || (up && !low && alpha);
}

/* The end of the piece of w[0:n] that starts at `start` (a piece runs to the next '_' or '.'), and in
 * *parts how many parts it splits into. */
static Py_ssize_t piece_end(const unsigned char *w, Py_ssize_t n, Py_ssize_t start, Py_ssize_t *parts) {
    Py_ssize_t end = start;
    while (end < n && w[end] != '_' && w[end] != '.') end++;
    *parts = 1;
    for (Py_ssize_t j = 1; j < end - start; j++) *parts += case_change(w + start, end - start, j);
    return end;
}

/* The terms of one word w[0:n] (n > 0), as analysis._word gives them. */
static int count_word(term_sink *sink, const unsigned char *w, Py_ssize_t n) {
    if (simple_word(w, n)) return count_term(sink, w, n);
    /* a first pass counts the pieces' parts (found) and the terms after the whole (after) */
    Py_ssize_t found = 0, after = 0, parts;
    for (Py_ssize_t i = 0; i < n;) {
        if (w[i] == '_' || w[i] == '.') {
            i++;
            continue;
        }
        Py_ssize_t end = piece_end(w, n, i, &parts);
        found += parts;
        after += (end - i != n) + (parts > 1 ? parts : 0); /* the piece, unless it is the whole word */
        i = end;
    }
    if (found == 0) return 0; /* only separators: no term */
    if (after == 0 && found == 1) return count_term(sink, w, n);
    if (count_term(sink, w, n) < 0) return -1;
    for (Py_ssize_t i = 0; i < n;) {
        if (w[i] == '_' || w[i] == '.') {
            i++;
            continue;
        }
        Py_ssize_t end = piece_end(w, n, i, &parts), len = end - i;
        if (len != n && count_term(sink, w + i, len) < 0) return -1;
        if (parts > 1) {
            Py_ssize_t from = 0;
            for (Py_ssize_t j = 1; j <= len; j++) {
                if (j == len || case_change(w + i, len, j)) {
                    if (count_term(sink, w + i + from, j - from) < 0) return -1;
                    from = j;
                }
            }
        }
        i = end;
    }
    return 0;
}

static PyObject *count_terms(PyObject *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "count_terms takes a str");
        return NULL;
    }
    if (PyUnicode_READY(arg) < 0) return NULL;
    if (!PyUnicode_IS_ASCII(arg)) Py_RETURN_NONE;
    const unsigned char *s = PyUnicode_1BYTE_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    term_sink sink = {PyDict_New(), 0};
    if (!sink.counts) return NULL;
    for (Py_ssize_t i = 0; i < n;) {
        if (!IS_WORD(s[i])) {
            i++;
            continue;
        }
        Py_ssize_t start = i;
        while (i < n && IS_WORD(s[i])) i++;
        while (i + 1 < n && s[i] == '.' && IS_WORD(s[i + 1])) {
            i++;
            while (i < n && IS_WORD(s[i])) i++;
        }
        if (count_word(&sink, s + start, i - start) < 0) {
            Py_DECREF(sink.counts);
            return NULL;
        }
    }
    PyObject *ret = Py_BuildValue("(nN)", sink.length, sink.counts);
    return ret;
}

/* max_u32(column) -> int: the largest value of a buffer of native unsigned 32-bit integers (an
 * array('I')), 0 when it is empty. Its twin is max(column, default=0); this one boxes no int. */
static PyObject *max_u32(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (view.itemsize != 4 || !view.format || strcmp(view.format, "I") != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "max_u32 takes a buffer of unsigned 32-bit integers (format 'I')");
        return NULL;
    }
    const uint32_t *values = (const uint32_t *)view.buf;
    Py_ssize_t n = view.len / 4;
    uint32_t top = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (values[i] > top) top = values[i];
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(top);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buf, base, pos, seq, last_hash, stop_seq, max_frame, flags, row0) -> tuple (see mnemo/storage/file/scan.py)"},
    {"merkle_push", merkle_push, METH_VARARGS, "merkle_push(stack, size, leaves) -> size"},
    {"max_u32", max_u32, METH_O, "max_u32(column) -> int (the largest of an array('I'), 0 when empty)"},
    {"count_terms", count_terms, METH_O,
     "count_terms(text) -> (length, {term: count}) | None (see mnemo/recall/analysis.py, counted)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
    if (!sha256_md) {
        sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
        if (!sha256_md) {
            PyErr_SetString(PyExc_ImportError, "OpenSSL has no SHA-256");
            return NULL;
        }
    }
    return PyModule_Create(&module);
}
