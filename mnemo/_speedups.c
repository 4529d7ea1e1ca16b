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
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "_fields.h"
#include "_sha256.h"

#define FH 24
#define EH 8
#define SC 4
#define SALT 16
#define HASH 32
#define MIN_PUT_SLOT (SC + SALT + 1)
#define FLAG_DIGEST 1
#define FLAG_LEAVES 2

typedef struct {
    Py_ssize_t off, len;
} span;

typedef struct {
    /* per entry */
    span id, scope, agent, tags; /* tags: the bytes of the tag strings (after the array header) */
    uint32_t ntags, ver, slot_len, entry_len;
    int64_t seq, ts, size, slot_off, entry_off;
    uint32_t code[3]; /* of its scope, agent and tag set (take_values) */
    uint64_t set_hash; /* its tag set's fnv1a (take_values) */
    unsigned char hash[HASH], leaf[HASH];
} row;

/* -- the values of the rows, numbered ----------------------------------------------------------------------
 * Distinct byte strings of the buffer (spans), numbered in first-seen order, so that a span already seen
 * costs no Python object. Phase 1 numbers the scopes, agents, tag sets and tags of a frame's rows once
 * the frame is taken (while its bytes are in the cache), with no Python object: phase 2 makes one for
 * each distinct value only. At a million records a 64 MiB window holds some 70,000 distinct tag sets, and
 * looking each entry's up is a cache miss: the table is kept small for that. Its slots are 8 bytes (the
 * upper half of the key's hash, and its code + 1; 0 is empty), and each key is kept once, in the order
 * of the codes, with its bytes inline when short: a lookup reads one slot and, when the hash matches,
 * the key it names, not the place in the window where the value was first seen (megabytes back). */
#define KEY_INLINE 16
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif
typedef struct {
    uint64_t hash;
    Py_ssize_t len;
    union {
        unsigned char bytes[KEY_INLINE]; /* len <= KEY_INLINE */
        Py_ssize_t off;                  /* otherwise: where the key lies in the buffer */
    } key;
} tkey_t;

typedef struct {
    uint64_t *slots;
    tkey_t *keys; /* by code */
    size_t cap, n, kcap;
    span last; /* the key looked up last, and its code (-1: none yet): a run of rows of one value */
    Py_ssize_t last_code;
} table_t;

#define TABLE_MAX 0xFFFFFFF0u /* codes are u32 (and a slot holds code + 1) */

static void table_free(table_t *t) {
    free(t->slots);
    free(t->keys);
}

static uint64_t fnv1a(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* Whether n bytes at a and b are equal; short keys by a loop the compiler keeps inline (a call to memcmp
 * costs more than comparing the few bytes of a scope, an agent or a tag). */
static inline int same_bytes(const unsigned char *a, const unsigned char *b, Py_ssize_t n) {
    if (n > KEY_INLINE) return memcmp(a, b, (size_t)n) == 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* Room for one more key: the slots kept at most 3/4 full (linear probing), the keys' array grown. */
static int table_room(table_t *t) {
    if (t->n >= TABLE_MAX) return 0;
    if (t->n == t->kcap) {
        size_t kcap = t->kcap ? t->kcap * 2 : 64;
        tkey_t *keys = realloc(t->keys, kcap * sizeof(tkey_t));
        if (!keys) return 0;
        t->keys = keys;
        t->kcap = kcap;
    }
    if (4 * (t->n + 1) <= 3 * t->cap) return 1;
    size_t cap = t->cap ? t->cap * 2 : 128;
    uint64_t *slots = calloc(cap, sizeof(uint64_t));
    if (!slots) return 0;
    for (size_t c = 0; c < t->n; c++) {
        size_t j = (size_t)t->keys[c].hash & (cap - 1);
        while (slots[j]) j = (j + 1) & (cap - 1);
        slots[j] = (t->keys[c].hash & 0xFFFFFFFF00000000ULL) | (uint64_t)(c + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 1;
}

/* Whether the key buf[sp] is the one looked up last. */
static inline int is_last(const table_t *t, const unsigned char *buf, span sp) {
    return t->last_code >= 0 && t->last.len == sp.len && same_bytes(buf + t->last.off, buf + sp.off, sp.len);
}

/* The code of the key buf[sp], whose fnv1a is h: the one it was given when first seen, else the next
 * (phase 1: no Python object, no GIL). -1 when out of memory (or past TABLE_MAX keys). */
static Py_ssize_t lookup(table_t *t, const unsigned char *buf, span sp, uint64_t h) {
    const unsigned char *key = buf + sp.off;
    if (!table_room(t)) return -1;
    uint64_t htag = h & 0xFFFFFFFF00000000ULL;
    size_t j = (size_t)h & (t->cap - 1);
    for (uint64_t s; (s = t->slots[j]) != 0; j = (j + 1) & (t->cap - 1)) {
        if ((s & 0xFFFFFFFF00000000ULL) != htag) continue;
        Py_ssize_t c = (Py_ssize_t)(s & 0xFFFFFFFFu) - 1;
        const tkey_t *k = &t->keys[c];
        if (k->hash == h && k->len == sp.len &&
            same_bytes(sp.len <= KEY_INLINE ? k->key.bytes : buf + k->key.off, key, sp.len)) {
            t->last = sp;
            t->last_code = c;
            return c;
        }
    }
    Py_ssize_t n = (Py_ssize_t)t->n;
    tkey_t *k = &t->keys[n];
    k->hash = h;
    k->len = sp.len;
    if (sp.len <= KEY_INLINE)
        memcpy(k->key.bytes, key, (size_t)sp.len);
    else
        k->key.off = sp.off;
    t->slots[j] = htag | (uint64_t)(n + 1);
    t->n++;
    t->last = sp;
    t->last_code = n;
    return n;
}

/* lookup's code, the key's hash made only when it is not the one looked up last (a run of rows of one
 * value). */
static Py_ssize_t code_of(table_t *t, const unsigned char *buf, span sp) {
    return is_last(t, buf, sp) ? t->last_code : lookup(t, buf, sp, fnv1a(buf + sp.off, sp.len));
}

/* The bytes of key `code`. */
static const unsigned char *key_bytes(const table_t *t, const unsigned char *buf, size_t code) {
    const tkey_t *k = &t->keys[code];
    return k->len <= KEY_INLINE ? k->key.bytes : buf + k->key.off;
}

typedef struct {
    row *rows;
    Py_ssize_t n, cap;
    int64_t *frames; /* offset, end pairs (absolute) */
    uint32_t *counts;
    Py_ssize_t nframes, fcap;
    /* the values of the rows taken (take_values) */
    unsigned char *ids; /* the ids, back to back */
    Py_ssize_t id_total, id_cap, total_tags; /* (total_tags: the tags of every row, summed) */
    table_t tabs[3], tags; /* scopes, agents, tag sets (the bytes of their tags); tags */
    Py_ssize_t *set_first;  /* each tag set's first tag in set_tags, and its tags' count */
    uint32_t *set_len, *set_tags; /* the tag sets' tags, as tag codes */
    Py_ssize_t nsets, set_cap, nset_tags, set_tags_cap;
    int oom, changed; /* changed: a tag set's bytes no longer parse (the buffer changed under the scan) */
} out_t;

/* -- CRC-32 (zlib's, as the format's checksums are) ------------------------------------------------------
 * zlib's table-driven crc32 takes about 0.4 ns a byte, a sixth of the scan. On x86-64 with carry-less
 * multiply (PCLMULQDQ, and SSE4.1 for the final extract), 64 bytes at a time are folded in four lanes and
 * reduced to 32 bits (Intel, "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", with the
 * bit-reflected constants of the CRC-32 polynomial 0x04C11DB7); what is left after the last whole 16
 * bytes, and every input shorter than 64 bytes, goes to zlib. The CPU is asked at import; without the
 * instructions (or another architecture or compiler) zlib does all of it. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_CLMUL_CRC 1
#include <immintrin.h>

static int use_clmul_crc = 0, has_clmul_crc = 0;

/* The running CRC (not inverted) over buf[0..len), len >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_fold(const unsigned char *buf, size_t len,
                                                                  uint32_t crc) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1, x2, x3, x4, x5, x6, x7, x8;

    x1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)buf), _mm_cvtsi32_si128((int)crc));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 16));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 32));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 48));
    buf += 64;
    len -= 64;
    /* four lanes, each folded 64 bytes on */
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)buf));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 16)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 32)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 48)));
        buf += 64;
        len -= 64;
    }
    /* the four lanes into one */
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x4), x5);
    /* the remaining 16-byte blocks */
    while (len >= 16) {
        x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)buf));
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64 */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5k0, 0x00), x2);
    /* Barrett reduction to 32 bits */
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, x2), 1);
}
#endif

/* zlib's crc32(crc, buf, len), faster where the CPU allows. */
static uint32_t crc32_of(uint32_t crc, const unsigned char *buf, size_t len) {
#ifdef HAVE_CLMUL_CRC
    if (use_clmul_crc && len >= 64) {
        size_t whole = len & ~(size_t)15;
        crc = ~crc_fold(buf, whole, ~crc);
        buf += whole;
        len -= whole;
    }
#endif
    while (len) { /* (zlib takes an unsigned int of length) */
        uInt n = len > 0x40000000u ? 0x40000000u : (uInt)len;
        crc = (uint32_t)crc32(crc, buf, n);
        buf += n;
        len -= n;
    }
    return crc;
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t be64(const unsigned char *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* Strict UTF-8 as Python decodes it: no overlongs, no surrogates, nothing above U+10FFFF. */
static int utf8_ok(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        /* ASCII eight bytes at a time (what nearly all text is) */
        while (n - i >= 8) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
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
static int short_str_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t i, Py_ssize_t *start, Py_ssize_t *len) {
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

/* Any msgpack str (fixstr, str8/16/32) with valid UTF-8, for the payload (decoded by msgpack). */
static int any_str(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i, Py_ssize_t *start, Py_ssize_t *len) {
    Py_ssize_t at = *i, s, l;
    if (!str_at(p, n, &at, &s, &l) || !utf8_ok(p + s, l)) return 0;
    *start = s;
    *len = l;
    *i = at;
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

/* -- SHA-256 of the scan's entries ------------------------------------------------------------------------
 * Each put costs the scan up to three SHA-256s: its payload digest, its entry hash and its Merkle leaf hash
 * (of 0x00 + the entry), of a few blocks each. OpenSSL's are one stream at a time, and a SHA-NI round
 * waits on the one before it, so one stream leaves the unit idle half the time; with the SHA extensions
 * (x86-64) two messages are compressed side by side, a block of each per step, from the CPU's IV to the
 * digest. Without them (or on another architecture or compiler) each message goes through OpenSSL, as
 * before. The bytes hashed are the same either way: the scan's fuzz target checks it against hashlib. */
typedef struct {
    const unsigned char *data; /* hashed after `prefix` when has_prefix */
    size_t len, total, nblocks, next;
    int has_prefix;
    unsigned char prefix;
    unsigned char *out;
    uint32_t st[8]; /* the SHA-NI state: lanes F E B A, then H G D C */
} sha_msg;

static void sha_msg_init(sha_msg *m, unsigned char prefix, int has_prefix, const unsigned char *data, size_t len,
                         unsigned char *out) {
    static const uint32_t iv[8] = {0x9b05688c, 0x510e527f, 0xbb67ae85, 0x6a09e667,
                                   0x5be0cd19, 0x1f83d9ab, 0xa54ff53a, 0x3c6ef372};
    m->data = data;
    m->len = len;
    m->has_prefix = has_prefix;
    m->prefix = prefix;
    m->total = len + (has_prefix ? 1 : 0);
    m->nblocks = (m->total + 9 + 63) / 64; /* the message, 0x80, the 64-bit bit length */
    m->next = 0;
    m->out = out;
    memcpy(m->st, iv, sizeof iv);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SHA_NI 1
#include <cpuid.h>

static int use_sha_ni = 0, has_sha_ni = 0;

/* Block i of the padded message: in place when it lies inside the data, else built in tmp. */
static const unsigned char *sha_block(const sha_msg *m, size_t i, unsigned char *tmp) {
    size_t lo = 64 * i, hi = lo + 64, pre = m->has_prefix ? 1 : 0;
    if (!pre && hi <= m->total) return m->data + lo;
    memset(tmp, 0, 64);
    if (pre && lo == 0) tmp[0] = m->prefix;
    size_t a = lo > pre ? lo : pre, b = hi < m->total ? hi : m->total;
    if (a < b) memcpy(tmp + (a - lo), m->data + (a - pre), b - a);
    if (m->total >= lo && m->total < hi) tmp[m->total - lo] = 0x80;
    if (i + 1 == m->nblocks) {
        uint64_t bits = (uint64_t)m->total * 8;
        for (int k = 0; k < 8; k++) tmp[56 + k] = (unsigned char)(bits >> (56 - 8 * k));
    }
    return tmp;
}

static void sha_msg_digest(const sha_msg *m) {
    /* a b c d e f g h from the lanes F E B A, H G D C */
    static const int order[8] = {3, 2, 7, 6, 1, 0, 5, 4};
    for (int k = 0; k < 8; k++) {
        uint32_t w = m->st[order[k]];
        m->out[4 * k] = (unsigned char)(w >> 24);
        m->out[4 * k + 1] = (unsigned char)(w >> 16);
        m->out[4 * k + 2] = (unsigned char)(w >> 8);
        m->out[4 * k + 3] = (unsigned char)w;
    }
}


static const uint32_t sha_k[64] __attribute__((aligned(16))) = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* Four rounds of one stream: state (s0 = ABEF, s1 = CDGH), message words w plus the constants k. */
#define SHA_ROUNDS4(s0, s1, w, k)                                                                               \
    do {                                                                                                      \
        __m128i m_ = _mm_add_epi32((w), (k));                                                                 \
        s1 = _mm_sha256rnds2_epu32(s1, s0, m_);                                                               \
        s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m_, 0x0E));                                      \
    } while (0)

/* The next four words of the schedule from the last sixteen (w0 oldest). */
#define SHA_NEXT(w0, w1, w2, w3) \
    _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(w0, w1), _mm_alignr_epi8(w3, w2, 4)), w3)

/* One 64-byte block of each of two streams, side by side. */
__attribute__((target("sha,sse4.1,ssse3"))) static void sha_ni_2(uint32_t *sa, const unsigned char *pa,
                                                                uint32_t *sb, const unsigned char *pb) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i a0 = _mm_loadu_si128((const __m128i *)sa), a1 = _mm_loadu_si128((const __m128i *)(sa + 4));
    __m128i b0 = _mm_loadu_si128((const __m128i *)sb), b1 = _mm_loadu_si128((const __m128i *)(sb + 4));
    const __m128i a0s = a0, a1s = a1, b0s = b0, b1s = b1;
    __m128i aw0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)pa), bswap);
    __m128i aw1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pa + 16)), bswap);
    __m128i aw2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pa + 32)), bswap);
    __m128i aw3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pa + 48)), bswap);
    __m128i bw0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)pb), bswap);
    __m128i bw1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pb + 16)), bswap);
    __m128i bw2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pb + 32)), bswap);
    __m128i bw3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pb + 48)), bswap);
    __m128i k = _mm_load_si128((const __m128i *)sha_k);
    SHA_ROUNDS4(a0, a1, aw0, k);
    SHA_ROUNDS4(b0, b1, bw0, k);
    k = _mm_load_si128((const __m128i *)(sha_k + 4));
    SHA_ROUNDS4(a0, a1, aw1, k);
    SHA_ROUNDS4(b0, b1, bw1, k);
    k = _mm_load_si128((const __m128i *)(sha_k + 8));
    SHA_ROUNDS4(a0, a1, aw2, k);
    SHA_ROUNDS4(b0, b1, bw2, k);
    k = _mm_load_si128((const __m128i *)(sha_k + 12));
    SHA_ROUNDS4(a0, a1, aw3, k);
    SHA_ROUNDS4(b0, b1, bw3, k);
    for (int g = 4; g < 16; g++) {
        __m128i an = SHA_NEXT(aw0, aw1, aw2, aw3), bn = SHA_NEXT(bw0, bw1, bw2, bw3);
        aw0 = aw1, aw1 = aw2, aw2 = aw3, aw3 = an;
        bw0 = bw1, bw1 = bw2, bw2 = bw3, bw3 = bn;
        k = _mm_load_si128((const __m128i *)(sha_k + 4 * g));
        SHA_ROUNDS4(a0, a1, aw3, k);
        SHA_ROUNDS4(b0, b1, bw3, k);
    }
    _mm_storeu_si128((__m128i *)sa, _mm_add_epi32(a0, a0s));
    _mm_storeu_si128((__m128i *)(sa + 4), _mm_add_epi32(a1, a1s));
    _mm_storeu_si128((__m128i *)sb, _mm_add_epi32(b0, b0s));
    _mm_storeu_si128((__m128i *)(sb + 4), _mm_add_epi32(b1, b1s));
}

/* One 64-byte block of one stream. */
__attribute__((target("sha,sse4.1,ssse3"))) static void sha_ni_1(uint32_t *sa, const unsigned char *pa) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i a0 = _mm_loadu_si128((const __m128i *)sa), a1 = _mm_loadu_si128((const __m128i *)(sa + 4));
    const __m128i a0s = a0, a1s = a1;
    __m128i aw0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)pa), bswap);
    __m128i aw1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pa + 16)), bswap);
    __m128i aw2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pa + 32)), bswap);
    __m128i aw3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pa + 48)), bswap);
    SHA_ROUNDS4(a0, a1, aw0, _mm_load_si128((const __m128i *)sha_k));
    SHA_ROUNDS4(a0, a1, aw1, _mm_load_si128((const __m128i *)(sha_k + 4)));
    SHA_ROUNDS4(a0, a1, aw2, _mm_load_si128((const __m128i *)(sha_k + 8)));
    SHA_ROUNDS4(a0, a1, aw3, _mm_load_si128((const __m128i *)(sha_k + 12)));
    for (int g = 4; g < 16; g++) {
        __m128i an = SHA_NEXT(aw0, aw1, aw2, aw3);
        aw0 = aw1, aw1 = aw2, aw2 = aw3, aw3 = an;
        SHA_ROUNDS4(a0, a1, aw3, _mm_load_si128((const __m128i *)(sha_k + 4 * g)));
    }
    _mm_storeu_si128((__m128i *)sa, _mm_add_epi32(a0, a0s));
    _mm_storeu_si128((__m128i *)(sa + 4), _mm_add_epi32(a1, a1s));
}

/* Whether the CPU has what the two fast paths need (CPUID leaves 1 and 7). */
static void detect_cpu(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int sse41 = (c >> 19) & 1, ssse3 = (c >> 9) & 1, pclmul = (c >> 1) & 1;
    has_clmul_crc = use_clmul_crc = pclmul && sse41;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        has_sha_ni = use_sha_ni = ((b >> 29) & 1) && sse41 && ssse3;
    }
}
#endif

/* The SHA-256 of each of m[0..n) (n <= 3) into its out: with SHA-NI, the two with the most blocks left
 * take a step together while two have any; else through OpenSSL. 1, or 0 when OpenSSL fails. */
static int sha256_many(EVP_MD_CTX *ctx, sha_msg *m, int n) {
#ifdef HAVE_SHA_NI
    if (use_sha_ni) {
        unsigned char ta[64], tb[64];
        for (;;) {
            int x = -1, y = -1; /* the two with the most blocks left */
            for (int i = 0; i < n; i++) {
                size_t left = m[i].nblocks - m[i].next;
                if (!left) continue;
                if (x < 0 || left > m[x].nblocks - m[x].next) {
                    y = x;
                    x = i;
                } else if (y < 0 || left > m[y].nblocks - m[y].next) {
                    y = i;
                }
            }
            if (x < 0) break;
            if (y < 0) {
                sha_ni_1(m[x].st, sha_block(&m[x], m[x].next, ta));
                m[x].next++;
            } else {
                sha_ni_2(m[x].st, sha_block(&m[x], m[x].next, ta), m[y].st, sha_block(&m[y], m[y].next, tb));
                m[x].next++;
                m[y].next++;
            }
        }
        for (int i = 0; i < n; i++) sha_msg_digest(&m[i]);
        return 1;
    }
#endif
    for (int i = 0; i < n; i++) {
        unsigned int len = 0;
        if (!EVP_DigestInit_ex(ctx, sha256_md, NULL)) return 0;
        if (m[i].has_prefix && !EVP_DigestUpdate(ctx, &m[i].prefix, 1)) return 0;
        if (m[i].len && !EVP_DigestUpdate(ctx, m[i].data, m[i].len)) return 0;
        if (!EVP_DigestFinal_ex(ctx, m[i].out, &len) || len != HASH) return 0;
    }
    return 1;
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
    if (!short_str_at(raw, n, q + 4, &st, &ln) || !utf8_ok(raw + st, ln)) return 0;
    r->agent.off = base + st;
    r->agent.len = ln;
    Py_ssize_t d = st + ln;
    if (!starts(raw, n, d, K_DIGEST, 10)) return 0;
    d += 10;
    Py_ssize_t i = d + HASH;
    if (!starts(raw, n, i, K_ID, 3)) return 0;
    if (!short_str_at(raw, n, i + 3, &st, &ln) || !utf8_ok(raw + st, ln)) return 0;
    r->id.off = base + st;
    r->id.len = ln;
    i = st + ln;
    if (!starts(raw, n, i, K_SCOPE, 6)) return 0;
    if (!short_str_at(raw, n, i + 6, &st, &ln) || !utf8_ok(raw + st, ln)) return 0;
    r->scope.off = base + st;
    r->scope.len = ln;
    i = st + ln;
    uint64_t size, ver;
    if (!starts(raw, n, i, K_SIZE, 5)) return 0;
    i += 5;
    if (!uint_at(raw, n, &i, &size) || !starts(raw, n, i, K_VER, 4)) return 0;
    i += 4;
    if (!uint_at(raw, n, &i, &ver)) return 0;
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

/* The values of the rows from n0 on (a frame just taken, its bytes still in the cache): each id after the
 * ids before it, the codes of each row's scope, agent and tag set, and each new tag set's tags as tag
 * codes. 0 when out of memory (out->oom) or when a tag set no longer parses (out->changed). */
static int take_values(out_t *out, const unsigned char *buf, Py_ssize_t n0) {
    /* The tag set is the value that changes from row to row: its hash first, for every row of the frame,
     * and the slot it leads to asked for, so that the lookups below do not each wait on memory. */
    const table_t *sets = &out->tabs[2];
    for (Py_ssize_t i = n0; i < out->n; i++) {
        row *r = &out->rows[i];
        r->set_hash = fnv1a(buf + r->tags.off, r->tags.len);
        if (sets->cap) PREFETCH(&sets->slots[r->set_hash & (sets->cap - 1)]);
    }
    for (Py_ssize_t i = n0; i < out->n; i++) {
        row *r = &out->rows[i];
        if (r->id.len > out->id_cap - out->id_total) {
            Py_ssize_t cap = out->id_cap ? 2 * out->id_cap : 4096;
            if (cap < out->id_total + r->id.len) cap = out->id_total + r->id.len;
            unsigned char *ids = realloc(out->ids, (size_t)cap);
            if (!ids) goto oom;
            out->ids = ids;
            out->id_cap = cap;
        }
        memcpy(out->ids + out->id_total, buf + r->id.off, (size_t)r->id.len);
        out->id_total += r->id.len;
        out->total_tags += r->ntags;
        span sps[3] = {r->scope, r->agent, r->tags};
        for (int t = 0; t < 3; t++) {
            table_t *tab = &out->tabs[t];
            Py_ssize_t c = t < 2                        ? code_of(tab, buf, sps[t])
                           : is_last(tab, buf, sps[t]) ? tab->last_code
                                                       : lookup(tab, buf, sps[t], r->set_hash);
            if (c < 0) goto oom;
            r->code[t] = (uint32_t)c;
        }
        Py_ssize_t set = (Py_ssize_t)r->code[2];
        if (set != out->nsets) continue; /* a tag set seen before (codes are given in order) */
        if (set == out->set_cap) {
            Py_ssize_t cap = out->set_cap ? 2 * out->set_cap : 256;
            Py_ssize_t *first = realloc(out->set_first, (size_t)cap * sizeof(Py_ssize_t));
            if (!first) goto oom;
            out->set_first = first;
            uint32_t *len = realloc(out->set_len, (size_t)cap * sizeof(uint32_t));
            if (!len) goto oom;
            out->set_len = len;
            out->set_cap = cap;
        }
        if ((Py_ssize_t)r->ntags > out->set_tags_cap - out->nset_tags) {
            Py_ssize_t cap = out->set_tags_cap ? 2 * out->set_tags_cap : 1024;
            if (cap < out->nset_tags + (Py_ssize_t)r->ntags) cap = out->nset_tags + (Py_ssize_t)r->ntags;
            uint32_t *tags = realloc(out->set_tags, (size_t)cap * sizeof(uint32_t));
            if (!tags) goto oom;
            out->set_tags = tags;
            out->set_tags_cap = cap;
        }
        out->set_first[set] = out->nset_tags;
        out->set_len[set] = r->ntags;
        out->nsets++;
        Py_ssize_t ti = r->tags.off, tend = r->tags.off + r->tags.len, ts_, tl_;
        for (uint32_t k = 0; k < r->ntags; k++) {
            if (!any_str(buf, tend, &ti, &ts_, &tl_)) {
                out->changed = 1;
                return 0;
            }
            span tsp = {ts_, tl_};
            Py_ssize_t c = code_of(&out->tags, buf, tsp);
            if (c < 0) goto oom;
            out->set_tags[out->nset_tags++] = (uint32_t)c;
        }
    }
    return 1;
oom:
    out->oom = 1;
    return 0;
}

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
            be32(buf + slot_end) != crc32_of(0, buf + pos, (size_t)(crc_end - pos)))
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
            if (be32(slot) != crc32_of(0, payload, pl)) {
                ok = 0;
                break;
            }
            if (!packed_ok(payload + SALT, (Py_ssize_t)pl - SALT, (uint64_t)r->size, r, sp + SC + SALT)) {
                ok = 0;
                break;
            }
            /* the entry hash, its leaf hash (of 0x00 + the entry) and the payload digest, at once */
            unsigned char dg[HASH];
            sha_msg msgs[3];
            int nm = 0;
            sha_msg_init(&msgs[nm++], 0, 0, raw, rlen, r->hash);
            if (st->flags & FLAG_LEAVES) sha_msg_init(&msgs[nm++], 0, 1, raw, rlen, r->leaf);
            if (st->flags & FLAG_DIGEST) sha_msg_init(&msgs[nm++], 0, 0, payload, pl, dg);
            if (!sha256_many(ctx, msgs, nm) || ((st->flags & FLAG_DIGEST) && memcmp(dg, raw + d, HASH) != 0)) {
                ok = 0;
                break;
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
        if (!take_values(out, buf, n0)) break;
        st->seq = s;
        memcpy(st->last, prev, HASH);
        pos += (Py_ssize_t)total;
    }
    st->pos = pos;
    EVP_MD_CTX_free(ctx);
}

/* -- phase 2: Python objects ---------------------------------------------------------------------------- */

/* The distinct values of a text table, as str, in the order of their codes; NULL with an exception set. */
static PyObject *text_values(const table_t *t, const unsigned char *buf) {
    PyObject *list = PyList_New((Py_ssize_t)t->n);
    if (!list) return NULL;
    for (size_t c = 0; c < t->n; c++) {
        PyObject *v = PyUnicode_DecodeUTF8((const char *)key_bytes(t, buf, c), t->keys[c].len, "strict");
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)c, v);
    }
    return list;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long base, pos, seq, stop_seq, max_frame, row0;
    Py_buffer last;
    int flags;
    if (!PyArg_ParseTuple(args, "y*LLLy*LLiL", &view, &base, &pos, &seq, &last, &stop_seq, &max_frame, &flags,
                          &row0))
        return NULL;
    PyObject *result = NULL, *ids = NULL, *id_ends = NULL, *cols = NULL, *hashes = NULL, *leaves = NULL, *frames = NULL,
             *counts = NULL, *tag_lens = NULL, *tag_rows = NULL, *tag_list = NULL;
    uint32_t *pair_code = NULL, *pair_row = NULL, *tcount = NULL;
    Py_ssize_t npairs = 0;
    PyObject *lists[3] = {NULL, NULL, NULL}, *codes[3] = {NULL, NULL, NULL};
    out_t out = {0};
    for (int t = 0; t < 3; t++) out.tabs[t].last_code = -1;
    out.tags.last_code = -1;
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
    if (out.changed) {
        PyErr_SetString(PyExc_SystemError, "tag set changed under the scan");
        goto fail;
    }
    if (out.n && row0 + out.n - 1 > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "scan: rows past 2**32");
        goto fail;
    }
    const unsigned char *buf = view.buf;
    /* a Python object for each distinct value: scopes, agents, tags, and tag sets as tuples of those tags */
    for (int t = 0; t < 2; t++)
        if (!(lists[t] = text_values(&out.tabs[t], buf))) goto fail;
    if (!(tag_list = text_values(&out.tags, buf))) goto fail;
    Py_ssize_t nsets = (Py_ssize_t)out.tabs[2].n;
    if (!(lists[2] = PyList_New(nsets))) goto fail;
    for (Py_ssize_t k = 0; k < nsets; k++) {
        PyObject *value = PyTuple_New(out.set_len[k]);
        if (!value) goto fail;
        for (uint32_t j = 0; j < out.set_len[k]; j++) {
            PyObject *tag = PyList_GET_ITEM(tag_list, out.set_tags[out.set_first[k] + j]);
            Py_INCREF(tag);
            PyTuple_SET_ITEM(value, j, tag);
        }
        /* A tuple of str can be in no reference cycle: untracked, as the collector itself would leave it
         * on its first pass, it costs no collection anything (a replay keeps some 70,000 of them, and a
         * verify's runs as many, which the first collection after the bulk work would otherwise walk). */
        if (PyObject_GC_IsTracked(value)) PyObject_GC_UnTrack(value);
        PyList_SET_ITEM(lists[2], k, value);
    }
    /* Then everything else a row gives, in one pass over the rows (phase 1 read the buffer): the end of
     * each id in the ids, and how many ids lead in strictly ascending order, all ASCII of the first one's
     * width (what a SortedIds blob holds), and that width (0 when none does); the codes of its scope, agent
     * and tag set; its tags' (tag code, row) pairs; its hashes; its columns. */
    Py_ssize_t id_total = out.id_total, total_tags = out.total_tags;
    Py_ssize_t id_width = out.n ? out.rows[0].id.len : 0, id_run = 0;
    ids = PyBytes_FromStringAndSize(out.ids ? (const char *)out.ids : "", id_total);
    id_ends = PyBytes_FromStringAndSize(NULL, out.n * (Py_ssize_t)sizeof(int64_t));
    cols = PyDict_New();
    hashes = PyBytes_FromStringAndSize(NULL, out.n * HASH);
    leaves = PyBytes_FromStringAndSize(NULL, (flags & FLAG_LEAVES) ? out.n * HASH : 0);
    frames = PyBytes_FromStringAndSize((const char *)out.frames, out.nframes * 2 * (Py_ssize_t)sizeof(int64_t));
    counts = PyBytes_FromStringAndSize((const char *)out.counts, out.nframes * (Py_ssize_t)sizeof(uint32_t));
    if (!ids || !id_ends || !cols || !hashes || !leaves || !frames || !counts) goto fail;
    static const char *const col_names[8] = {"ver", "slot_len", "entry_len", "seq", "ts", "size", "slot_off",
                                             "entry_off"};
    char *colp[8];
    for (int c = 0; c < 8; c++) { /* u32 for the first three, i64 for the rest; the dict holds each */
        PyObject *b_ = PyBytes_FromStringAndSize(NULL, out.n * (Py_ssize_t)(c < 3 ? 4 : 8));
        if (!b_ || PyDict_SetItemString(cols, col_names[c], b_) < 0) {
            Py_XDECREF(b_);
            goto fail;
        }
        colp[c] = PyBytes_AS_STRING(b_);
        Py_DECREF(b_);
    }
    uint32_t *codep[3];
    for (int t = 0; t < 3; t++) {
        codes[t] = PyBytes_FromStringAndSize(NULL, out.n * (Py_ssize_t)sizeof(uint32_t));
        if (!codes[t]) goto fail;
        codep[t] = (uint32_t *)PyBytes_AS_STRING(codes[t]);
    }
    pair_code = malloc((size_t)(total_tags ? total_tags : 1) * sizeof(uint32_t));
    pair_row = malloc((size_t)(total_tags ? total_tags : 1) * sizeof(uint32_t));
    if (!pair_code || !pair_row) {
        PyErr_NoMemory();
        goto fail;
    }
    {
        const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(ids);
        int64_t *ends = (int64_t *)PyBytes_AS_STRING(id_ends);
        uint32_t *c_ver = (uint32_t *)colp[0], *c_slen = (uint32_t *)colp[1], *c_elen = (uint32_t *)colp[2];
        int64_t *c_seq = (int64_t *)colp[3], *c_ts = (int64_t *)colp[4], *c_size = (int64_t *)colp[5];
        int64_t *c_soff = (int64_t *)colp[6], *c_eoff = (int64_t *)colp[7];
        Py_ssize_t at = 0;
        int in_run = id_width > 0;
        for (Py_ssize_t i = 0; i < out.n; i++) {
            const row *r = &out.rows[i];
            if (in_run) {
                in_run = r->id.len == id_width && (!i || memcmp(d + at - id_width, d + at, (size_t)id_width) < 0);
                for (Py_ssize_t k = 0; in_run && k < r->id.len; k++) in_run = d[at + k] < 0x80;
                id_run += in_run;
            }
            at += r->id.len;
            ends[i] = (int64_t)at;
            for (int t = 0; t < 3; t++) codep[t][i] = r->code[t];
            /* each tag, for the postings: (tag code, row) pairs */
            uint32_t set = r->code[2];
            for (uint32_t k = 0; k < out.set_len[set]; k++) {
                pair_code[npairs] = out.set_tags[out.set_first[set] + k];
                pair_row[npairs++] = (uint32_t)(row0 + i);
            }
            memcpy(PyBytes_AS_STRING(hashes) + i * HASH, r->hash, HASH);
            if (flags & FLAG_LEAVES) memcpy(PyBytes_AS_STRING(leaves) + i * HASH, r->leaf, HASH);
            c_ver[i] = r->ver;
            c_slen[i] = r->slot_len;
            c_elen[i] = r->entry_len;
            c_seq[i] = r->seq;
            c_ts[i] = r->ts;
            c_size[i] = r->size;
            c_soff[i] = r->slot_off;
            c_eoff[i] = r->entry_off;
        }
        if (!id_run) id_width = 0;
    }
    {
        /* the rows of each tag, tag by tag in first-seen order, rows in order (a stable counting sort) */
        Py_ssize_t ntag = PyList_GET_SIZE(tag_list);
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
    result = Py_BuildValue("(nLy#NNNNNnnNNNNNNNNNNNN)", st.pos, (long long)st.seq, (const char *)st.last,
                           (Py_ssize_t)HASH, st.need > 0 ? PyLong_FromSsize_t(st.need) : PyLong_FromLong(0),
                           frames, counts, ids, id_ends, id_width, id_run, lists[0], codes[0], lists[1], codes[1], lists[2],
                           codes[2], tag_list, tag_lens, tag_rows, cols, hashes, leaves);
    frames = counts = ids = id_ends = cols = hashes = leaves = tag_lens = tag_rows = tag_list = NULL;
    for (int t = 0; t < 3; t++) lists[t] = codes[t] = NULL;
fail:
    Py_XDECREF(tag_list);
    Py_XDECREF(tag_lens);
    Py_XDECREF(tag_rows);
    free(pair_code);
    free(pair_row);
    free(tcount);
    Py_XDECREF(ids);
    Py_XDECREF(id_ends);
    Py_XDECREF(cols);
    Py_XDECREF(hashes);
    Py_XDECREF(leaves);
    Py_XDECREF(frames);
    Py_XDECREF(counts);
    for (int t = 0; t < 3; t++) {
        table_free(&out.tabs[t]);
        Py_XDECREF(lists[t]);
        Py_XDECREF(codes[t]);
    }
    table_free(&out.tags);
    free(out.ids);
    free(out.set_first);
    free(out.set_len);
    free(out.set_tags);
    free(out.rows);
    free(out.frames);
    free(out.counts);
    PyBuffer_Release(&view);
    PyBuffer_Release(&last);
    return result;
}

/* crc32(data, value=0) -> int: zlib.crc32(data, value), which is its twin (the scan's checksums, for the
 * fuzzer and the tests to hold against zlib's). */
static PyObject *crc32_py(PyObject *self, PyObject *args) {
    Py_buffer data;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &data, &value)) return NULL;
    uint32_t crc;
    if (data.len < (1 << 16)) {
        crc = crc32_of(value, data.buf, (size_t)data.len);
    } else {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32_of(value, data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

/* entry_hashes(entry, payload) -> (SHA-256 of the entry, of 0x00 + the entry, of the payload): the three
 * hashes the scan takes of a put, as it takes them (hashlib's are the twin). */
static PyObject *entry_hashes(PyObject *self, PyObject *args) {
    Py_buffer entry, payload;
    if (!PyArg_ParseTuple(args, "y*y*", &entry, &payload)) return NULL;
    unsigned char out[3][HASH];
    sha_msg msgs[3];
    sha_msg_init(&msgs[0], 0, 0, entry.buf, (size_t)entry.len, out[0]);
    sha_msg_init(&msgs[1], 0, 1, entry.buf, (size_t)entry.len, out[1]);
    sha_msg_init(&msgs[2], 0, 0, payload.buf, (size_t)payload.len, out[2]);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && sha256_many(ctx, msgs, 3);
    EVP_MD_CTX_free(ctx);
    PyBuffer_Release(&entry);
    PyBuffer_Release(&payload);
    if (!ok) return PyErr_NoMemory();
    return Py_BuildValue("y#y#y#", (const char *)out[0], (Py_ssize_t)HASH, (const char *)out[1], (Py_ssize_t)HASH,
                         (const char *)out[2], (Py_ssize_t)HASH);
}

/* cpu_paths(enable=None) -> (carry-less multiply CRC, SHA-NI): the fast paths in use; with a bool, first
 * turned on (where the CPU has them) or off, so that the tests run the portable paths too. */
static PyObject *cpu_paths(PyObject *self, PyObject *args) {
    PyObject *enable = Py_None;
    if (!PyArg_ParseTuple(args, "|O", &enable)) return NULL;
#ifdef HAVE_SHA_NI
    if (enable != Py_None) {
        int on = PyObject_IsTrue(enable);
        if (on < 0) return NULL;
        use_clmul_crc = on && has_clmul_crc;
        use_sha_ni = on && has_sha_ni;
    }
    return Py_BuildValue("(OO)", use_clmul_crc ? Py_True : Py_False, use_sha_ni ? Py_True : Py_False);
#else
    return Py_BuildValue("(OO)", Py_False, Py_False);
#endif
}

/* posting_rows(tagset, rows, codes) -> int: how many distinct rows a tag's posting lists, or -1 when one
 * of them is past the tag-set column or its tag set's code is not among `codes` (the codes of the tag
 * sets holding the tag, increasing). All three are buffers of native unsigned 32-bit integers. The
 * pure-Python twin is mnemo/storage/file/index_check.py's posting_rows. */
static int find_u32(const uint32_t *a, Py_ssize_t n, uint32_t x) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && a[lo] == x;
}

static PyObject *posting_rows(PyObject *self, PyObject *args) {
    Py_buffer col, rows, codes;
    if (!PyArg_ParseTuple(args, "y*y*y*", &col, &rows, &codes)) return NULL;
    PyObject *ret = NULL;
    if (col.len % 4 || rows.len % 4 || codes.len % 4) {
        PyErr_SetString(PyExc_ValueError, "columns of 32-bit integers");
        goto done;
    }
    const uint32_t *tagset = col.buf, *r = rows.buf, *c = codes.buf;
    Py_ssize_t n = col.len / 4, nr = rows.len / 4, nc = codes.len / 4;
    int increasing = 1;
    for (Py_ssize_t i = 0; i < nr; i++) {
        if (r[i] >= (uint64_t)n || !find_u32(c, nc, tagset[r[i]])) {
            ret = PyLong_FromLong(-1);
            goto done;
        }
        if (i && r[i] <= r[i - 1]) increasing = 0;
    }
    if (increasing) {
        ret = PyLong_FromSsize_t(nr);
        goto done;
    }
    /* repeats or disorder: count the distinct rows in a bitmap of the column */
    uint8_t *seen = calloc((size_t)n / 8 + 1, 1);
    if (!seen) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < nr; i++) {
        uint8_t bit = (uint8_t)(1u << (r[i] & 7));
        if (!(seen[r[i] >> 3] & bit)) {
            seen[r[i] >> 3] |= bit;
            distinct++;
        }
    }
    free(seen);
    ret = PyLong_FromSsize_t(distinct);
done:
    PyBuffer_Release(&col);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&codes);
    return ret;
}

/* A replay's merge of a scan's codes (the numbers of its distinct tag sets, scopes or agents) into the
 * index's own, per window of the log. The index's table is given as `table`: for each of the scan's codes,
 * the index's code (an int) or None where the index does not hold that value yet. */

/* The scan's first n codes, each checked to be below nt (the table's length). */
static const uint32_t *codes_of(Py_buffer *view, Py_ssize_t n, Py_ssize_t nt) {
    if (n < 0 || view->len / 4 < n) {
        PyErr_SetString(PyExc_ValueError, "fewer codes than n");
        return NULL;
    }
    const uint32_t *codes = view->buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (codes[i] >= (uint64_t)nt) {
            PyErr_SetString(PyExc_ValueError, "a code past the table");
            return NULL;
        }
    return codes;
}

/* code_uses(codes, n, table, refs) -> [(code, uses)]: how many of the first n codes are each code; for a
 * code the index holds (table[code] an int), those uses are added to refs[table[code]], and the codes it
 * does not hold yet (None) are returned with their uses, in order. Everything is checked before refs
 * changes: a code past the table, an index code that is no index of refs or a table entry that is neither
 * raise ValueError and change nothing. The twin is mnemo/storage/file/index_columns.py's code_uses. */
static PyObject *code_uses(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t n;
    PyObject *table, *refs;
    if (!PyArg_ParseTuple(args, "y*nO!O!", &view, &n, &PyList_Type, &table, &PyList_Type, &refs)) return NULL;
    PyObject *ret = NULL;
    Py_ssize_t nt = PyList_GET_SIZE(table), nr = PyList_GET_SIZE(refs);
    Py_ssize_t *uses = calloc((size_t)(nt ? nt : 1), sizeof(Py_ssize_t));
    Py_ssize_t *to = malloc((size_t)(nt ? nt : 1) * sizeof(Py_ssize_t));
    if (!uses || !to) {
        PyErr_NoMemory();
        goto done;
    }
    const uint32_t *codes = codes_of(&view, n, nt);
    if (!codes) goto done;
    for (Py_ssize_t i = 0; i < n; i++) uses[codes[i]]++;
    for (Py_ssize_t k = 0; k < nt; k++) {
        to[k] = -1;
        if (!uses[k]) continue;
        PyObject *t = PyList_GET_ITEM(table, k);
        if (t == Py_None) continue;
        Py_ssize_t v = PyLong_CheckExact(t) ? PyLong_AsSsize_t(t) : -1;
        if (v == -1 && PyErr_Occurred()) PyErr_Clear();
        if (v < 0 || v >= nr) {
            PyErr_SetString(PyExc_ValueError, "a table entry that is no index of refs");
            goto done;
        }
        to[k] = v;
    }
    PyObject *missing = PyList_New(0);
    if (!missing) goto done;
    for (Py_ssize_t k = 0; k < nt; k++) {
        if (!uses[k]) continue;
        if (to[k] < 0) {
            PyObject *pair = Py_BuildValue("(nn)", k, uses[k]);
            if (!pair || PyList_Append(missing, pair) < 0) {
                Py_XDECREF(pair);
                Py_DECREF(missing);
                goto done;
            }
            Py_DECREF(pair);
            continue;
        }
        PyObject *add = PyLong_FromSsize_t(uses[k]);
        PyObject *sum = add ? PyNumber_Add(PyList_GET_ITEM(refs, to[k]), add) : NULL;
        Py_XDECREF(add);
        if (!sum) {
            Py_DECREF(missing);
            goto done;
        }
        PyList_SetItem(refs, to[k], sum); /* (steals sum; refs' length was checked above) */
    }
    ret = missing;
done:
    free(uses);
    free(to);
    PyBuffer_Release(&view);
    return ret;
}

/* remap_codes(codes, n, table) -> bytes: the first n codes each through the table (u32, machine order).
 * A code past the table, or one whose entry is not an int below 2**32, raises ValueError. The twin is
 * mnemo/storage/file/index_columns.py's remap_codes. */
static PyObject *remap_codes(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t n;
    PyObject *table;
    if (!PyArg_ParseTuple(args, "y*nO!", &view, &n, &PyList_Type, &table)) return NULL;
    PyObject *ret = NULL;
    Py_ssize_t nt = PyList_GET_SIZE(table);
    int64_t *to = malloc((size_t)(nt ? nt : 1) * sizeof(int64_t));
    if (!to) {
        PyErr_NoMemory();
        goto done;
    }
    const uint32_t *codes = codes_of(&view, n, nt);
    if (!codes) goto done;
    for (Py_ssize_t k = 0; k < nt; k++) {
        PyObject *t = PyList_GET_ITEM(table, k);
        long long v = PyLong_Check(t) ? PyLong_AsLongLong(t) : -1;
        if (v == -1 && PyErr_Occurred()) PyErr_Clear();
        to[k] = v >= 0 && v <= 0xFFFFFFFFLL ? v : -1;
    }
    ret = PyBytes_FromStringAndSize(NULL, n * 4);
    if (!ret) goto done;
    uint32_t *out = (uint32_t *)PyBytes_AS_STRING(ret);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t v = to[codes[i]];
        if (v < 0) {
            Py_CLEAR(ret);
            PyErr_SetString(PyExc_ValueError, "a code whose table entry is no u32");
            goto done;
        }
        out[i] = (uint32_t)v;
    }
done:
    free(to);
    PyBuffer_Release(&view);
    return ret;
}

/* The root of a perfect subtree of 2**k leaf hashes, level by level in `level` (room for 2**(k-1) hashes),
 * its nodes hashed two at a time: SHA-256(0x01 || left || right), the two side by side as in the scan (a
 * node's hash does not wait on its sibling's, where pushing leaves one by one hashes each node after the
 * one below it). */
static int subtree_root(EVP_MD_CTX *ctx, const unsigned char *leaves, int k, unsigned char *level,
                        unsigned char *root) {
    if (!k) {
        memcpy(root, leaves, HASH);
        return 1;
    }
    const unsigned char *from = leaves;
    for (size_t n = (size_t)1 << (k - 1); n; n >>= 1) {
        /* node j of this level from nodes 2j and 2j + 1 of the one below; in place from the second level
         * on, which is safe: node j is written after nodes 2j and 2j + 1 are read, and later nodes read
         * from 2j + 2 on */
        unsigned char *to = n == 1 ? root : level;
        for (size_t j = 0; j < n; j += 2) {
            sha_msg msgs[2];
            int nm = n - j >= 2 ? 2 : 1;
            for (int t = 0; t < nm; t++)
                sha_msg_init(&msgs[t], 1, 1, from + 2 * (j + t) * HASH, 2 * HASH, to + (j + t) * HASH);
            if (!sha256_many(ctx, msgs, nm)) return 0;
        }
        from = level;
    }
    return 1;
}

#define SUBTREE_MAX 10 /* leaves are added in perfect subtrees of up to 2**10 */

/* merkle_push(stack, size, leaves) -> size: the compact range's _push for each 32-byte leaf hash. Leaves
 * go in as the roots of perfect subtrees, as many as the size allows (size a multiple of the subtree's
 * leaves), which leaves the stack exactly as pushing them one by one would. */
static PyObject *merkle_push(PyObject *self, PyObject *args) {
    PyObject *stack;
    unsigned long long size;
    Py_buffer leaves;
    if (!PyArg_ParseTuple(args, "O!Ky*", &PyList_Type, &stack, &size, &leaves)) return NULL;
    PyObject *ret = NULL;
    EVP_MD_CTX *ctx = NULL;
    unsigned char *level = NULL;
    if (leaves.len % HASH) {
        PyErr_SetString(PyExc_ValueError, "leaf hashes are 32 bytes each");
        goto done;
    }
    ctx = EVP_MD_CTX_new();
    level = malloc(((size_t)1 << (SUBTREE_MAX - 1)) * HASH);
    if (!ctx || !level) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t nleaves = leaves.len / HASH;
    for (Py_ssize_t i = 0; i < nleaves;) {
        int k = 0;
        while (k < SUBTREE_MAX && !((size >> k) & 1) && ((Py_ssize_t)2 << k) <= nleaves - i) k++;
        unsigned char h[HASH], node[1 + 2 * HASH];
        if (!subtree_root(ctx, (const unsigned char *)leaves.buf + i * HASH, k, level, h)) {
            PyErr_SetString(PyExc_RuntimeError, "SHA-256 failed");
            goto done;
        }
        unsigned long long m = size >> k;
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
            sha_msg msg;
            sha_msg_init(&msg, 0, 0, node, sizeof node, h);
            if (!sha256_many(ctx, &msg, 1)) {
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
        size += 1ULL << k;
        i += (Py_ssize_t)1 << k;
    }
    ret = PyLong_FromUnsignedLongLong(size);
done:
    if (ctx) EVP_MD_CTX_free(ctx);
    free(level);
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

/* Where the terms of a text go, one call per term (s[0:n], in the text's case): 0, or -1 with an
 * exception set. count_terms counts them in a dict; Postings.add_text in a table of its own. */
typedef int (*term_fn)(void *sink, const unsigned char *s, Py_ssize_t n);

typedef struct {
    PyObject *counts;
    Py_ssize_t length;
} term_sink;

/* Counts one term: s[0:n] lower-cased. 0, or -1 with an exception set. */
static int count_term(void *to, const unsigned char *s, Py_ssize_t n) {
    term_sink *sink = to;
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

/* How an identifier w[0:n] splits: *found, the parts of all its pieces; *after, the terms that follow
 * its whole (each piece unless it is the whole word, and the parts of a piece of more than one). */
static void word_shape(const unsigned char *w, Py_ssize_t n, Py_ssize_t *found, Py_ssize_t *after) {
    Py_ssize_t parts;
    *found = *after = 0;
    for (Py_ssize_t i = 0; i < n;) {
        if (w[i] == '_' || w[i] == '.') {
            i++;
            continue;
        }
        Py_ssize_t end = piece_end(w, n, i, &parts);
        *found += parts;
        *after += (end - i != n) + (parts > 1 ? parts : 0);
        i = end;
    }
}

/* The next word of s[0:n] at or after *at: a maximal run of word characters, a '.' between two of them
 * joining; 1 with it as s[*start:*at], 0 when there is none. */
static int next_word(const unsigned char *s, Py_ssize_t n, Py_ssize_t *at, Py_ssize_t *start) {
    Py_ssize_t i = *at;
    while (i < n && !IS_WORD(s[i])) i++;
    if (i == n) return 0;
    *start = i;
    while (i < n && IS_WORD(s[i])) i++;
    while (i + 1 < n && s[i] == '.' && IS_WORD(s[i + 1])) {
        i++;
        while (i < n && IS_WORD(s[i])) i++;
    }
    *at = i;
    return 1;
}

/* The terms of one word w[0:n] (n > 0), as analysis._word gives them. */
static int count_word(term_fn term, void *sink, const unsigned char *w, Py_ssize_t n) {
    if (simple_word(w, n)) return term(sink, w, n);
    Py_ssize_t found, after, parts;
    word_shape(w, n, &found, &after);
    if (found == 0) return 0; /* only separators: no term */
    if (after == 0 && found == 1) return term(sink, w, n);
    if (term(sink, w, n) < 0) return -1;
    for (Py_ssize_t i = 0; i < n;) {
        if (w[i] == '_' || w[i] == '.') {
            i++;
            continue;
        }
        Py_ssize_t end = piece_end(w, n, i, &parts), len = end - i;
        if (len != n && term(sink, w + i, len) < 0) return -1;
        if (parts > 1) {
            Py_ssize_t from = 0;
            for (Py_ssize_t j = 1; j <= len; j++) {
                if (j == len || case_change(w + i, len, j)) {
                    if (term(sink, w + i + from, j - from) < 0) return -1;
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
    for (Py_ssize_t i = 0, start; next_word(s, n, &i, &start);) {
        if (count_word(count_term, &sink, s + start, i - start) < 0) {
            Py_DECREF(sink.counts);
            return NULL;
        }
    }
    PyObject *ret = Py_BuildValue("(nN)", sink.length, sink.counts);
    return ret;
}

/* count_phrase(text, atoms) -> int | None: how many positions of the atoms of an ASCII text (what
 * mnemo/recall/analysis.atoms gives: simple words, identifier parts, lower-cased) start the sequence
 * `atoms` (a tuple of str), as recall.query.occurrences counts them over that list; None when the text
 * is not ASCII (the twin counts it). */

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} atom_t;

typedef struct {
    atom_t *v;
    Py_ssize_t n, cap;
} atoms_t;

static int push_atom(atoms_t *a, const unsigned char *p, Py_ssize_t n) {
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 64;
        atom_t *grown = realloc(a->v, (size_t)cap * sizeof(atom_t));
        if (!grown) return -1;
        a->v = grown;
        a->cap = cap;
    }
    a->v[a->n++] = (atom_t){p, n};
    return 0;
}

/* The atoms of one word w[0:n], as analysis._word gives them: a simple word is itself; an identifier
 * is the parts of its pieces (only separators: nothing; a single part and nothing after: itself). */
static int word_atoms(atoms_t *a, const unsigned char *w, Py_ssize_t n) {
    if (simple_word(w, n)) return push_atom(a, w, n);
    Py_ssize_t found, after, parts;
    word_shape(w, n, &found, &after);
    if (found == 0) return 0;
    if (after == 0 && found == 1) return push_atom(a, w, n);
    for (Py_ssize_t i = 0; i < n;) {
        if (w[i] == '_' || w[i] == '.') {
            i++;
            continue;
        }
        Py_ssize_t end = piece_end(w, n, i, &parts), len = end - i, from = 0;
        for (Py_ssize_t j = 1; j <= len; j++) {
            if (j == len || case_change(w + i, len, j)) {
                if (push_atom(a, w + i + from, j - from) < 0) return -1;
                from = j;
            }
        }
        i = end;
    }
    return 0;
}

static int atom_is(const atom_t *atom, PyObject *want) {
    if (!PyUnicode_IS_ASCII(want) || PyUnicode_GET_LENGTH(want) != atom->n) return 0;
    const unsigned char *w = PyUnicode_1BYTE_DATA(want);
    for (Py_ssize_t i = 0; i < atom->n; i++) {
        unsigned char c = atom->p[i];
        if ((IS_UP(c) ? c + 32 : c) != w[i]) return 0;
    }
    return 1;
}

static PyObject *count_phrase(PyObject *self, PyObject *args) {
    PyObject *text, *want;
    if (!PyArg_ParseTuple(args, "UO!", &text, &PyTuple_Type, &want)) return NULL;
    if (PyUnicode_READY(text) < 0) return NULL;
    if (!PyUnicode_IS_ASCII(text)) Py_RETURN_NONE;
    Py_ssize_t width = PyTuple_GET_SIZE(want);
    for (Py_ssize_t k = 0; k < width; k++) {
        PyObject *item = PyTuple_GET_ITEM(want, k);
        if (!PyUnicode_Check(item) || PyUnicode_READY(item) < 0) {
            PyErr_SetString(PyExc_TypeError, "count_phrase takes a tuple of str");
            return NULL;
        }
    }
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), count = 0;
    atoms_t a = {0};
    for (Py_ssize_t i = 0, start; next_word(s, n, &i, &start);) {
        if (word_atoms(&a, s + start, i - start) < 0) {
            free(a.v);
            return PyErr_NoMemory();
        }
    }
    for (Py_ssize_t i = 0; width && i + width <= a.n; i++) {
        Py_ssize_t k = 0;
        while (k < width && atom_is(&a.v[i + k], PyTuple_GET_ITEM(want, k))) k++;
        count += k == width;
    }
    free(a.v);
    return PyLong_FromSsize_t(count);
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

/* Postings: the text index's postings and each document's term ids, compressed (the pure-Python twin,
 * and the contract both keep, are in mnemo/storage/file/postings.py). A posting is a run of varints:
 * per document, its gap from the one before (the first: the document itself) and its frequency; a
 * document's term ids are varint gaps of the sorted ids. A buffer that grows is copied into a new one
 * and the old one zeroed before it is freed, and a document that leaves has its bytes zeroed, so that
 * no freed or unused memory keeps anything of it. Every input is checked: a snapshot's columns may
 * have been written by anyone. */

/* A posting's bytes: up to INLINE_BYTES in the slot itself (most terms are held by a document or two),
 * more in a buffer of their own. */
#define INLINE_BYTES 8
typedef struct {
    union {
        uint8_t *heap;
        uint8_t inl[INLINE_BYTES];
    } u;
    uint32_t len, cap; /* bytes used, bytes allocated (cap <= INLINE_BYTES: in u.inl) */
    uint32_t count;    /* documents */
    uint32_t last;     /* the last document encoded, when count > 0 */
} vlist;

static uint8_t *vbuf(vlist *v) { return v->cap <= INLINE_BYTES ? v->u.inl : v->u.heap; }

static const uint8_t *cvbuf(const vlist *v) { return v->cap <= INLINE_BYTES ? v->u.inl : v->u.heap; }

/* A posting is a vlist whose entries are (gap, frequency), each document its gap from the one before
 * (the first: from 0), with a mark every MARK_EVERY entries, so that finding a document (to take it
 * out) decodes one block instead of the whole posting. */
#define MARK_EVERY 64
typedef struct {
    uint32_t prev, off; /* an entry starts at off, its gap counting from the document prev */
} mark;

typedef struct {
    vlist v;
    mark *marks;
    uint32_t nmarks, cap_marks;
} plist;

/* An arena: runs of bytes back to back, each named by a reference (an offset and a length, the first
 * two members of the struct that holds it) that its owner keeps. A run that leaves has its bytes
 * zeroed (a hole); when holes are most of the arena it is rewritten without them. A buffer outgrown or
 * rewritten is zeroed before it is freed. */
typedef struct {
    uint8_t *bytes;
    uint64_t len, cap, dead; /* bytes used (holes included), allocated, in holes */
} arena_t;

#define NO_RUN UINT32_MAX /* a reference's length when it names no run */

/* The offset and length members of reference i of an owner's array of them (`stride` bytes each). */
static uint64_t *ref_off(char *refs, size_t stride, Py_ssize_t i) { return (uint64_t *)(refs + stride * (size_t)i); }

static uint32_t *ref_len(char *refs, size_t stride, Py_ssize_t i) {
    return (uint32_t *)(refs + stride * (size_t)i + sizeof(uint64_t));
}

/* The arena moved into `cap` bytes: its bytes as they are (refs NULL), or the runs of the `n` references
 * back to back, each reference updated. 0, or -1 (no memory; nothing changed). */
static int arena_move(arena_t *a, uint64_t cap, char *refs, size_t stride, Py_ssize_t n) {
    uint8_t *moved = malloc(cap ? (size_t)cap : 1);
    if (!moved) return -1;
    uint64_t at = 0;
    if (refs) {
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t len = *ref_len(refs, stride, i);
            uint64_t *off = ref_off(refs, stride, i);
            if (len == NO_RUN) continue;
            if (len) memcpy(moved + at, a->bytes + *off, len);
            *off = at;
            at += len;
        }
        a->dead = 0;
    } else if (a->len) {
        memcpy(moved, a->bytes, (size_t)a->len);
        at = a->len;
    }
    memset(moved + at, 0, (size_t)(cap - at));
    if (a->bytes) {
        memset(a->bytes, 0, (size_t)a->cap);
        free(a->bytes);
    }
    a->bytes = moved;
    a->cap = cap;
    a->len = at;
    return 0;
}

/* Room for `extra` more bytes (and an allocation, even for none). 0, or -1 (no memory). */
static int arena_room(arena_t *a, uint64_t extra) {
    if (a->bytes && a->len + extra <= a->cap) return 0;
    uint64_t cap = a->cap + a->cap / 2;
    if (cap < a->len + extra) cap = a->len + extra;
    if (cap < 4096) cap = 4096;
    return arena_move(a, cap, NULL, 0, 0);
}

/* A run leaves: its bytes zeroed; then, when holes are most of the arena, it is rewritten without them
 * (without memory for that, the holes stay). */
static void arena_release(arena_t *a, uint64_t off, uint32_t len, char *refs, size_t stride, Py_ssize_t n) {
    if (len && len != NO_RUN) {
        memset(a->bytes + off, 0, len);
        a->dead += len;
    }
    if (a->dead > 65536 && a->dead * 2 > a->len) arena_move(a, a->len - a->dead, refs, stride, n);
}

static void arena_free(arena_t *a) {
    if (a->bytes) {
        memset(a->bytes, 0, (size_t)a->cap);
        free(a->bytes);
    }
    memset(a, 0, sizeof *a);
}

/* The documents' term ids live back to back in one arena. */
typedef struct {
    uint64_t off;
    uint32_t len, count; /* bytes, term ids */
} docref;

typedef struct {
    PyObject_HEAD
    plist *terms;
    Py_ssize_t nterms, cap_terms;
    docref *docs;
    Py_ssize_t ndocs, cap_docs;
    arena_t arena;
} Postings;

static PyTypeObject PostingsType;

static void vlist_clear(vlist *v) {
    if (v->cap > INLINE_BYTES) {
        memset(v->u.heap, 0, v->cap);
        free(v->u.heap);
    }
    memset(v, 0, sizeof *v);
}

static void plist_clear(plist *p) {
    vlist_clear(&p->v);
    if (p->marks) {
        memset(p->marks, 0, sizeof(mark) * p->cap_marks);
        free(p->marks);
    }
    memset(p, 0, sizeof *p);
}

/* Room for `extra` more bytes. 0, or -1 (no memory; nothing changed). */
static int vlist_reserve(vlist *v, uint32_t extra) {
    uint64_t want = (uint64_t)v->len + extra;
    if (want <= v->cap) return 0;
    if (want <= INLINE_BYTES) { /* (only an empty slot has a cap below INLINE_BYTES: 0) */
        v->cap = INLINE_BYTES;
        return 0;
    }
    uint64_t cap = (uint64_t)v->cap + v->cap / 2;
    if (cap < want) cap = want;
    if (cap < 2 * INLINE_BYTES) cap = 2 * INLINE_BYTES;
    if (cap > UINT32_MAX) return -1;
    uint8_t *grown = malloc((size_t)cap);
    if (!grown) return -1;
    uint8_t *old = vbuf(v);
    if (v->len) memcpy(grown, old, v->len);
    memset(grown + v->len, 0, (size_t)(cap - v->len));
    memset(old, 0, v->cap);
    if (v->cap > INLINE_BYTES) free(v->u.heap);
    v->u.heap = grown;
    v->cap = (uint32_t)cap;
    return 0;
}

static uint32_t put_varint(uint8_t *out, uint32_t value) {
    uint32_t n = 0;
    while (value >= 0x80) {
        out[n++] = (uint8_t)(value | 0x80);
        value >>= 7;
    }
    out[n++] = (uint8_t)value;
    return n;
}

/* The varint at buf[*at] (below end), advancing *at; 0 on a varint that runs past end or 32 bits. */
static int get_varint(const uint8_t *buf, uint32_t end, uint32_t *at, uint32_t *value) {
    uint32_t v = 0;
    for (int shift = 0; shift < 35 && *at < end; shift += 7) {
        uint8_t b = buf[(*at)++];
        if (shift == 28 && (b & 0x70)) return 0;
        v |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *value = v;
            return 1;
        }
    }
    return 0;
}

/* Room for `want` slots of `size` bytes (new ones zeroed). 0, or -1 (no memory; nothing changed). */
static int grow_slots(void **slots, Py_ssize_t *cap, Py_ssize_t want, size_t size) {
    if (want <= *cap) return 0;
    Py_ssize_t n = *cap + *cap / 2; /* (a load asks for its exact size once: no more is taken) */
    if (n < want) n = want;
    char *grown = realloc(*slots, (size_t)n * size); /* (slots hold pointers and sizes only) */
    if (!grown) return -1;
    memset(grown + (size_t)*cap * size, 0, (size_t)(n - *cap) * size);
    *slots = grown;
    *cap = n;
    return 0;
}

static uint32_t varint_len(uint32_t value) {
    uint32_t n = 1;
    while (value >= 0x80) {
        value >>= 7;
        n++;
    }
    return n;
}

/* Room to append (doc, tf) to a posting, its mark included. 0, or -1 (no memory; nothing changed). */
static int posting_reserve(plist *p, uint32_t doc, uint32_t tf) {
    if (p->v.count && p->v.count % MARK_EVERY == 0 && p->nmarks == p->cap_marks) {
        uint32_t cap = p->cap_marks ? p->cap_marks * 2 : 4;
        mark *grown = malloc(sizeof(mark) * cap);
        if (!grown) return -1;
        if (p->nmarks) memcpy(grown, p->marks, sizeof(mark) * p->nmarks);
        if (p->marks) {
            memset(p->marks, 0, sizeof(mark) * p->cap_marks);
            free(p->marks);
        }
        p->marks = grown;
        p->cap_marks = cap;
    }
    return vlist_reserve(&p->v, varint_len(doc - (p->v.count ? p->v.last : 0)) + varint_len(tf));
}

/* Appends (doc, tf) to a posting; room reserved by posting_reserve. Precondition: doc > its last. */
static void posting_append(plist *p, uint32_t doc, uint32_t tf) {
    vlist *v = &p->v;
    uint8_t *buf = vbuf(v);
    uint32_t prev = v->count ? v->last : 0;
    if (v->count && v->count % MARK_EVERY == 0) p->marks[p->nmarks++] = (mark){prev, v->len};
    v->len += put_varint(buf + v->len, doc - prev);
    v->len += put_varint(buf + v->len, tf);
    v->count++;
    v->last = doc;
}

/* `value` as a varint of exactly `width` bytes (1 to 5, at least varint_len(value)): continuation bytes
 * carrying zero bits after the value's own, which get_varint reads as the same value. */
static void put_varint_wide(uint8_t *out, uint32_t value, uint32_t width) {
    for (uint32_t i = 0; i + 1 < width; i++) {
        out[i] = (uint8_t)((value & 0x7f) | 0x80);
        value >>= 7;
    }
    out[width - 1] = (uint8_t)value;
}

#define REPACK_MAX 16

/* Takes the departing entry at `start` out of a posting that goes on after the next entry (whose bytes
 * end at `from`): the merged entry (gap, tf) takes both their places, and the entries after it are
 * rewritten in exactly the bytes they held, each gap and frequency widened as need be (at most 5 bytes
 * each: varints get_varint reads as the same values), so that nothing after them moves: a run of
 * documents taken out one after another near the start of a posting of a million would otherwise move
 * all of it up, once per document. When the REPACK_MAX entries after the merged one (or those up to the
 * posting's end) cannot take the departing entry's bytes up, being wide already, they are written back
 * at their narrowest instead, and the rest of the posting moves up by what that saves (once in many
 * such removals: the bytes saved are those that widened entries took up before), the bytes it no longer
 * uses zeroed. The marks at the entries rewritten follow them (the one at the next entry now marks
 * `start`, from `prev`; one at the departing entry marks the merged one, the same document before it),
 * those after them move up by as much as the rest did. */
static void posting_repack(plist *p, uint32_t start, uint32_t end, uint32_t from, uint32_t prev, uint32_t gap,
                           uint32_t tf) {
    vlist *v = &p->v;
    uint8_t *buf = vbuf(v);
    uint32_t gaps[REPACK_MAX + 1], tfs[REPACK_MAX + 1], old_off[REPACK_MAX + 1], new_off[REPACK_MAX + 1];
    uint32_t n = 1, at = from, region = from - start;
    uint32_t least = varint_len(gap) + varint_len(tf);
    gaps[0] = gap;
    tfs[0] = tf;
    old_off[0] = end;
    while (region > 10 * n && n < REPACK_MAX + 1 && at < v->len) { /* more bytes than the entries can fill */
        uint32_t entry = at;
        if (!get_varint(buf, v->len, &at, &gaps[n]) || !get_varint(buf, v->len, &at, &tfs[n])) break;
        old_off[n] = entry;
        region += at - entry;
        least += varint_len(gaps[n]) + varint_len(tfs[n]);
        n++;
    }
    /* (a posting's entries decode, as the ones before did: a break above leaves the entries read so far) */
    uint32_t fits = region <= 10 * n, extra = fits ? region - least : 0, pos = start;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t gap_w = varint_len(gaps[i]), tf_w = varint_len(tfs[i]);
        uint32_t more = 5 - gap_w < extra ? 5 - gap_w : extra;
        gap_w += more;
        extra -= more;
        more = 5 - tf_w < extra ? 5 - tf_w : extra;
        tf_w += more;
        extra -= more;
        new_off[i] = pos;
        put_varint_wide(buf + pos, gaps[i], gap_w);
        put_varint_wide(buf + pos + gap_w, tfs[i], tf_w);
        pos += gap_w + tf_w;
    }
    uint32_t shift = start + region - pos; /* 0 when they fit */
    if (shift) {
        uint32_t tail = v->len - (start + region);
        memmove(buf + pos, buf + start + region, tail);
        memset(buf + pos + tail, 0, shift);
        v->len -= shift;
    }
    uint32_t lo = 0, hi = p->nmarks;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p->marks[mid].off < start) lo = mid + 1;
        else hi = mid;
    }
    uint32_t k = lo, kept = lo;
    for (; k < p->nmarks; k++) {
        mark m = p->marks[k];
        if (m.off >= start + region) {
            if (!shift) break; /* (the rest stay where they are) */
            m.off -= shift;
        } else {
            for (uint32_t i = 0; i < n; i++) {
                if (m.off == old_off[i]) {
                    m = (mark){i ? m.prev : prev, new_off[i]};
                    break;
                }
            }
        }
        if (kept && p->marks[kept - 1].off == m.off) continue;
        p->marks[kept++] = m;
    }
    if (kept < k) {
        memmove(p->marks + kept, p->marks + k, sizeof(mark) * (p->nmarks - k));
        memset(p->marks + p->nmarks - (k - kept), 0, sizeof(mark) * (k - kept));
        p->nmarks -= k - kept;
    }
    v->count--;
}

/* Takes `doc` out of a posting, if there; 1 when it was. The entry after it takes its place, its gap
 * grown by the departing one's. Where the two entries' bytes can hold the merged one (its gap and
 * frequency each widened to at most 5 bytes: most postings, whose gaps and frequencies take a byte or
 * two), it is written over them and nothing after it moves, so that taking a document out of a posting
 * of a million costs what it costs in one of ten; otherwise the entries after it take the bytes up
 * (posting_repack), or, where they cannot, the rest of the posting moves up and the bytes it no longer
 * uses are zeroed. Either way nothing of the departing entry is left. */
static int posting_remove(plist *p, uint32_t doc) {
    vlist *v = &p->v;
    uint8_t *buf = vbuf(v);
    /* the last mark before the document: decoding starts there */
    uint32_t lo = 0, hi = p->nmarks, at = 0, prev = 0;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p->marks[mid].prev < doc) lo = mid + 1;
        else hi = mid;
    }
    if (lo) {
        at = p->marks[lo - 1].off;
        prev = p->marks[lo - 1].prev;
    }
    uint32_t gap, tf;
    while (at < v->len) {
        uint32_t start = at;
        if (!get_varint(buf, v->len, &at, &gap) || !get_varint(buf, v->len, &at, &tf)) return 0;
        uint32_t doc_i = prev + gap;
        if (doc_i > doc) return 0;
        if (doc_i < doc) {
            prev = doc_i;
            continue;
        }
        uint32_t end = at;
        if (end < v->len) { /* the next entry moves to `start`, counting its gap from prev */
            uint32_t n_at = end, next_gap = 0, next_tf = 0;
            if (!get_varint(buf, v->len, &n_at, &next_gap) || !get_varint(buf, v->len, &n_at, &next_tf))
                return 0;
            uint32_t span = n_at - start, gap_w = varint_len(gap + next_gap), tf_w = varint_len(next_tf);
            if (span <= 10 && gap_w + tf_w <= span) { /* written over the two, in place */
                uint32_t extra = span - gap_w - tf_w, widen = 5 - gap_w < extra ? 5 - gap_w : extra;
                put_varint_wide(buf + start, gap + next_gap, gap_w + widen);
                put_varint_wide(buf + start + gap_w + widen, next_tf, tf_w + extra - widen);
                v->count--;
                /* nothing else moved: a mark at the next entry (found by a search, marks being in
                 * order) now marks `start`, from prev, unless one marks it already */
                uint32_t m_lo = 0, m_hi = p->nmarks;
                while (m_lo < m_hi) {
                    uint32_t mid = m_lo + (m_hi - m_lo) / 2;
                    if (p->marks[mid].off < end) m_lo = mid + 1;
                    else m_hi = mid;
                }
                if (m_lo < p->nmarks && p->marks[m_lo].off == end) {
                    if (m_lo && p->marks[m_lo - 1].off == start) {
                        memmove(p->marks + m_lo, p->marks + m_lo + 1, sizeof(mark) * (p->nmarks - m_lo - 1));
                        memset(p->marks + --p->nmarks, 0, sizeof(mark));
                    } else {
                        p->marks[m_lo] = (mark){prev, start};
                    }
                }
                return 1;
            }
            posting_repack(p, start, end, n_at, prev, gap + next_gap, next_tf);
            return 1;
        }
        /* the last entry (the newest document's): its bytes zeroed; the marks at or after it go (a search
         * finds the first: those before it stay as they are) */
        memset(buf + start, 0, v->len - start);
        v->len = start;
        v->count--;
        v->last = v->count ? prev : 0;
        uint32_t first = 0, f_hi = p->nmarks;
        while (first < f_hi) {
            uint32_t mid = first + (f_hi - first) / 2;
            if (p->marks[mid].off < start) first = mid + 1;
            else f_hi = mid;
        }
        if (first < p->nmarks) memset(p->marks + first, 0, sizeof(mark) * (p->nmarks - first));
        p->nmarks = first;
        return 1;
    }
    return 0;
}

static uint32_t column_at(const Py_buffer *view, Py_ssize_t i) {
    return view->itemsize == 1 ? ((const uint8_t *)view->buf)[i] : ((const uint32_t *)view->buf)[i];
}

/* A posting from a snapshot's columns: documents docs[0:n], frequencies freqs[at:at + n], each
 * checked, in buffers of exactly the size they take. 0, or -1 with an exception set. */
static int posting_load(plist *p, const uint32_t *docs, const Py_buffer *freqs, Py_ssize_t at, uint32_t n,
                        Py_ssize_t ndocs) {
    uint64_t size = 0;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t doc = docs[j], tf = column_at(freqs, at + j);
        if (doc >= (uint64_t)ndocs || tf == 0 || (j && doc <= docs[j - 1])) {
            PyErr_SetString(PyExc_ValueError, "a posting is out of range, out of order or holds a frequency of 0");
            return -1;
        }
        size += varint_len(j ? doc - docs[j - 1] : doc) + varint_len(tf);
    }
    if (!n) return 0;
    uint32_t nmarks = (n - 1) / MARK_EVERY;
    if (size > UINT32_MAX || vlist_reserve(&p->v, (uint32_t)size) < 0 ||
        (nmarks && !(p->marks = calloc(nmarks, sizeof(mark))))) {
        PyErr_NoMemory();
        return -1;
    }
    p->cap_marks = nmarks;
    for (uint32_t j = 0; j < n; j++) posting_append(p, docs[j], column_at(freqs, at + j));
    return 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Sorts a[0:n]: a document's term ids, a few dozen as a rule, for which an insertion sort is quickest;
 * a run already in order (a snapshot's) costs one pass. */
static void sort_u32(uint32_t *a, Py_ssize_t n) {
    if (n > 64) {
        qsort(a, (size_t)n, sizeof(uint32_t), cmp_u32);
        return;
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        uint32_t x = a[i];
        Py_ssize_t j = i;
        while (j > 0 && a[j - 1] > x) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* A document's term ids (`n` of them, sorted here) as its arena bytes, in *out. 0, or -1 on a repeated
 * one (ValueError) or on no memory. */
static int doclist_set(Postings *self, docref *out, uint32_t *tids, Py_ssize_t n) {
    sort_u32(tids, n);
    for (Py_ssize_t i = 1; i < n; i++)
        if (tids[i] == tids[i - 1]) {
            PyErr_SetString(PyExc_ValueError, "a document's term ids repeat one");
            return -1;
        }
    uint64_t size = 0;
    for (Py_ssize_t i = 0; i < n; i++) size += varint_len(i ? tids[i] - tids[i - 1] : tids[i]);
    if (size > UINT32_MAX) {
        PyErr_NoMemory();
        return -1;
    }
    if (arena_room(&self->arena, size) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    arena_t *a = &self->arena;
    *out = (docref){a->len, (uint32_t)size, (uint32_t)n};
    for (Py_ssize_t i = 0; i < n; i++) a->len += put_varint(a->bytes + a->len, i ? tids[i] - tids[i - 1] : tids[i]);
    return 0;
}

/* A document's term ids into out (room for r->count); the number decoded. */
static uint32_t doclist_get(const Postings *self, const docref *r, uint32_t *out) {
    const uint8_t *at_doc = self->arena.bytes + r->off;
    uint32_t at = 0, prev = 0, gap, n = 0;
    while (n < r->count && get_varint(at_doc, r->len, &at, &gap)) {
        prev = n ? prev + gap : gap;
        out[n++] = prev;
    }
    return n;
}

/* A document leaves the arena: its bytes zeroed, and the arena compacted when holes are most of it. */
static void doclist_clear(Postings *self, docref *r) {
    uint64_t off = r->off;
    uint32_t len = r->len;
    *r = (docref){0, 0, 0};
    arena_release(&self->arena, off, len, (char *)self->docs, sizeof(docref), self->ndocs);
}

static int as_u32(PyObject *o, uint32_t *out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (v > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a value past 32 bits");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static PyObject *Postings_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "Postings() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0); /* (zeroed) */
}

static void Postings_dealloc(Postings *self) {
    for (Py_ssize_t i = 0; i < self->nterms; i++) plist_clear(&self->terms[i]);
    arena_free(&self->arena);
    free(self->terms);
    free(self->docs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Postings_add(Postings *self, PyObject *args) {
    Py_ssize_t doc;
    PyObject *tids_in, *tfs_in;
    if (!PyArg_ParseTuple(args, "nOO", &doc, &tids_in, &tfs_in)) return NULL;
    if (doc != self->ndocs || doc >= UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "the next document is %zd, not %zd", self->ndocs, doc);
        return NULL;
    }
    PyObject *tids_seq = PySequence_Fast(tids_in, "tids must be a sequence");
    if (!tids_seq) return NULL;
    PyObject *tfs_seq = PySequence_Fast(tfs_in, "tfs must be a sequence");
    if (!tfs_seq) {
        Py_DECREF(tids_seq);
        return NULL;
    }
    PyObject *ret = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(tids_seq);
    uint32_t *tids = NULL, *tfs = NULL, *sorted = NULL;
    if (n != PySequence_Fast_GET_SIZE(tfs_seq)) {
        PyErr_SetString(PyExc_ValueError, "tids and tfs differ in length");
        goto done;
    }
    tids = malloc(sizeof(uint32_t) * (size_t)(n + 1));
    tfs = malloc(sizeof(uint32_t) * (size_t)(n + 1));
    sorted = malloc(sizeof(uint32_t) * (size_t)(n + 1));
    if (!tids || !tfs || !sorted) {
        PyErr_NoMemory();
        goto done;
    }
    uint32_t top = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (as_u32(PySequence_Fast_GET_ITEM(tids_seq, i), &tids[i]) < 0 ||
            as_u32(PySequence_Fast_GET_ITEM(tfs_seq, i), &tfs[i]) < 0)
            goto done;
        if (tids[i] == UINT32_MAX || tfs[i] == 0) {
            PyErr_SetString(PyExc_ValueError, "a term id of 2**32 - 1 or a frequency of 0");
            goto done;
        }
        if (tids[i] >= top) top = tids[i] + 1;
        sorted[i] = tids[i];
    }
    /* everything that can fail is done before anything changes */
    if (grow_slots((void **)&self->terms, &self->cap_terms, top, sizeof(plist)) < 0 ||
        grow_slots((void **)&self->docs, &self->cap_docs, doc + 1, sizeof(docref)) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (posting_reserve(&self->terms[tids[i]], (uint32_t)doc, tfs[i]) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    docref fresh;
    if (doclist_set(self, &fresh, sorted, n) < 0) goto done; /* (the last step that may fail) */
    if (top > self->nterms) self->nterms = top;
    for (Py_ssize_t i = 0; i < n; i++) posting_append(&self->terms[tids[i]], (uint32_t)doc, tfs[i]);
    self->docs[doc] = fresh;
    self->ndocs = doc + 1;
    ret = Py_NewRef(Py_None);
done:
    free(tids);
    free(tfs);
    free(sorted);
    Py_DECREF(tids_seq);
    Py_DECREF(tfs_seq);
    return ret;
}

static PyObject *Postings_remove(Postings *self, PyObject *arg) {
    Py_ssize_t doc = PyLong_AsSsize_t(arg);
    if (doc == -1 && PyErr_Occurred()) return NULL;
    PyObject *emptied = PyList_New(0);
    if (!emptied || doc < 0 || doc >= self->ndocs || !self->docs[doc].count) return emptied;
    docref *list = &self->docs[doc];
    uint32_t *tids = malloc(sizeof(uint32_t) * list->count);
    if (!tids) {
        Py_DECREF(emptied);
        return PyErr_NoMemory();
    }
    uint32_t n = doclist_get(self, list, tids);
    /* the list of what is emptied is made first: once the postings change, nothing may fail */
    for (uint32_t i = 0; i < n; i++) {
        plist *p = tids[i] < self->nterms ? &self->terms[tids[i]] : NULL;
        if (p && p->v.count == 1 && p->v.last == (uint32_t)doc) {
            PyObject *tid = PyLong_FromUnsignedLong(tids[i]);
            if (!tid || PyList_Append(emptied, tid) < 0) {
                Py_XDECREF(tid);
                Py_DECREF(emptied);
                free(tids);
                return NULL;
            }
            Py_DECREF(tid);
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        if (tids[i] >= self->nterms) continue;
        plist *p = &self->terms[tids[i]];
        posting_remove(p, (uint32_t)doc);
        if (!p->v.count) plist_clear(p);
    }
    memset(tids, 0, sizeof(uint32_t) * n);
    free(tids);
    doclist_clear(self, list);
    return emptied;
}

static PyObject *Postings_count(Postings *self, PyObject *arg) {
    Py_ssize_t tid = PyLong_AsSsize_t(arg);
    if (tid == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromUnsignedLong(tid >= 0 && tid < self->nterms ? self->terms[tid].v.count : 0);
}

static PyObject *Postings_get(Postings *self, PyObject *args) {
    Py_ssize_t tid;
    PyObject *mask;
    if (!PyArg_ParseTuple(args, "nO", &tid, &mask)) return NULL;
    Py_buffer scope_of = {0}, allowed = {0};
    int masked = mask != Py_None;
    if (masked) {
        PyObject *a, *b;
        if (!PyArg_ParseTuple(mask, "OO", &a, &b)) return NULL;
        if (PyObject_GetBuffer(a, &scope_of, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return NULL;
        if (scope_of.itemsize != 4 || !scope_of.format || strcmp(scope_of.format, "I") != 0) {
            PyBuffer_Release(&scope_of);
            PyErr_SetString(PyExc_TypeError, "a mask's scope codes are an array('I')");
            return NULL;
        }
        if (PyObject_GetBuffer(b, &allowed, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&scope_of);
            return NULL;
        }
    }
    PyObject *out = PyDict_New();
    if (out && tid >= 0 && tid < self->nterms) {
        const vlist *v = &self->terms[tid].v;
        const uint32_t *codes = masked ? (const uint32_t *)scope_of.buf : NULL;
        Py_ssize_t ncodes = masked ? scope_of.len / 4 : 0;
        const uint8_t *keep = masked ? (const uint8_t *)allowed.buf : NULL;
        uint32_t at = 0, doc = 0, gap, tf;
        const uint8_t *buf = cvbuf(v);
        for (uint32_t i = 0; i < v->count; i++) {
            if (!get_varint(buf, v->len, &at, &gap) || !get_varint(buf, v->len, &at, &tf)) break;
            doc = i ? doc + gap : gap;
            if (masked && (doc >= ncodes || codes[doc] >= (uint64_t)allowed.len || !keep[codes[doc]])) continue;
            PyObject *k = PyLong_FromUnsignedLong(doc), *val = PyLong_FromUnsignedLong(tf);
            int rc = (k && val) ? PyDict_SetItem(out, k, val) : -1;
            Py_XDECREF(k);
            Py_XDECREF(val);
            if (rc < 0) {
                Py_CLEAR(out);
                break;
            }
        }
    }
    if (masked) {
        PyBuffer_Release(&scope_of);
        PyBuffer_Release(&allowed);
    }
    return out;
}

static PyObject *Postings_tids(Postings *self, PyObject *arg) {
    Py_ssize_t doc = PyLong_AsSsize_t(arg);
    if (doc == -1 && PyErr_Occurred()) return NULL;
    if (doc < 0 || doc >= self->ndocs || !self->docs[doc].count) return PyList_New(0);
    const docref *v = &self->docs[doc];
    uint32_t *tids = malloc(sizeof(uint32_t) * v->count);
    if (!tids) return PyErr_NoMemory();
    uint32_t n = doclist_get(self, v, tids);
    PyObject *out = PyList_New(n);
    for (uint32_t i = 0; out && i < n; i++) {
        PyObject *t = PyLong_FromUnsignedLong(tids[i]);
        if (!t) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, t);
    }
    free(tids);
    return out;
}

/* A growable column of u32 for export. */
typedef struct {
    uint32_t *v;
    size_t n, cap;
} u32col;

static int col_push(u32col *c, uint32_t x) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 1024;
        uint32_t *grown = realloc(c->v, cap * sizeof(uint32_t));
        if (!grown) return -1;
        c->v = grown;
        c->cap = cap;
    }
    c->v[c->n++] = x;
    return 0;
}

static int get_i64_buffer(PyObject *o, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(o, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->itemsize != 8 || !view->format || strcmp(view->format, "q") != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be an array('q')", what);
        return -1;
    }
    return 0;
}

static PyObject *Postings_export(Postings *self, PyObject *args) {
    PyObject *order_in, *dense_in, *live_in, *new_tid_in;
    if (!PyArg_ParseTuple(args, "OOOO", &order_in, &dense_in, &live_in, &new_tid_in)) return NULL;
    PyObject *order = PySequence_Fast(order_in, "order must be a sequence");
    PyObject *live = order ? PySequence_Fast(live_in, "live must be a sequence") : NULL;
    Py_buffer dense = {0}, new_tid = {0};
    int have_dense = 0, have_new = 0;
    u32col lens = {0}, docs = {0}, freqs = {0}, dlens = {0}, ids = {0};
    uint32_t *tmp = NULL;
    PyObject *ret = NULL;
    if (!live) goto done;
    if (get_i64_buffer(dense_in, &dense, "dense") < 0) goto done;
    have_dense = 1;
    if (get_i64_buffer(new_tid_in, &new_tid, "new_tid") < 0) goto done;
    have_new = 1;
    const int64_t *dmap = dense.buf, *tmap = new_tid.buf;
    Py_ssize_t ndense = dense.len / 8, ntmap = new_tid.len / 8;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(order); i++) {
        Py_ssize_t tid = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(order, i));
        if (tid == -1 && PyErr_Occurred()) goto done;
        const vlist *v = tid >= 0 && tid < self->nterms ? &self->terms[tid].v : NULL;
        uint32_t count = v ? v->count : 0, at = 0, doc = 0, gap, tf;
        if (col_push(&lens, count) < 0) goto nomem;
        const uint8_t *buf = v ? cvbuf(v) : NULL;
        for (uint32_t j = 0; j < count; j++) {
            if (!get_varint(buf, v->len, &at, &gap) || !get_varint(buf, v->len, &at, &tf)) {
                PyErr_SetString(PyExc_ValueError, "a posting does not decode");
                goto done;
            }
            doc = j ? doc + gap : gap;
            if (doc >= ndense || dmap[doc] < 0 || dmap[doc] >= UINT32_MAX) {
                PyErr_Format(PyExc_ValueError, "document %u of a posting has no new number", doc);
                goto done;
            }
            if (col_push(&docs, (uint32_t)dmap[doc]) < 0 || col_push(&freqs, tf) < 0) goto nomem;
        }
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(live); i++) {
        Py_ssize_t doc = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(live, i));
        if (doc == -1 && PyErr_Occurred()) goto done;
        const docref *v = doc >= 0 && doc < self->ndocs ? &self->docs[doc] : NULL;
        uint32_t n = 0;
        if (v && v->count) {
            free(tmp);
            tmp = malloc(sizeof(uint32_t) * v->count);
            if (!tmp) goto nomem;
            n = doclist_get(self, v, tmp);
            for (uint32_t j = 0; j < n; j++) {
                if (tmp[j] >= ntmap || tmap[tmp[j]] < 0 || tmap[tmp[j]] >= UINT32_MAX) {
                    PyErr_Format(PyExc_ValueError, "term id %u of a document has no new number", tmp[j]);
                    goto done;
                }
                tmp[j] = (uint32_t)tmap[tmp[j]];
            }
            sort_u32(tmp, n);
        }
        if (col_push(&dlens, n) < 0) goto nomem;
        for (uint32_t j = 0; j < n; j++)
            if (col_push(&ids, tmp[j]) < 0) goto nomem;
    }
#define EXPORTED(c) ((c).v ? (const char *)(c).v : ""), (Py_ssize_t)((c).n * 4) /* (y# makes None of NULL) */
    ret = Py_BuildValue("(y#y#y#y#y#)", EXPORTED(lens), EXPORTED(docs), EXPORTED(freqs), EXPORTED(dlens), EXPORTED(ids));
#undef EXPORTED
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(tmp);
    free(lens.v);
    free(docs.v);
    free(freqs.v);
    free(dlens.v);
    free(ids.v);
    if (have_dense) PyBuffer_Release(&dense);
    if (have_new) PyBuffer_Release(&new_tid);
    Py_XDECREF(order);
    Py_XDECREF(live);
    return ret;
}

static int get_column(PyObject *o, Py_buffer *view, int bytes_ok) {
    if (PyObject_GetBuffer(o, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    int ok = view->format && ((view->itemsize == 4 && strcmp(view->format, "I") == 0) ||
                              (bytes_ok && view->itemsize == 1 && strcmp(view->format, "B") == 0));
    if (!ok) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "a snapshot column must be an array('I') (or 'B' for frequencies)");
        return -1;
    }
    return 0;
}


static PyObject *Postings_load(PyObject *cls, PyObject *args) {
    PyObject *in[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &in[0], &in[1], &in[2], &in[3], &in[4])) return NULL;
    Py_buffer col[5];
    int got = 0;
    Postings *self = NULL;
    uint32_t *tmp = NULL;
    for (; got < 5; got++)
        if (get_column(in[got], &col[got], got == 2) < 0) goto fail;
    Py_ssize_t nterms = col[0].len / 4, nposts = col[1].len / 4, ndocs = col[3].len / 4, nids = col[4].len / 4;
    if (col[2].len / col[2].itemsize != nposts) {
        PyErr_SetString(PyExc_ValueError, "postings and frequencies differ in length");
        goto fail;
    }
    self = (Postings *)PyObject_CallNoArgs(cls);
    if (!self) goto fail;
    if (grow_slots((void **)&self->terms, &self->cap_terms, nterms, sizeof(plist)) < 0 ||
        grow_slots((void **)&self->docs, &self->cap_docs, ndocs, sizeof(docref)) < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    self->nterms = nterms;
    self->ndocs = ndocs;
    const uint32_t *lens = col[0].buf, *docs = col[1].buf, *dlens = col[3].buf, *ids = col[4].buf;
    Py_ssize_t at = 0;
    for (Py_ssize_t t = 0; t < nterms; t++) {
        if (lens[t] > nposts - at) {
            PyErr_SetString(PyExc_ValueError, "postings run past their column");
            goto fail;
        }
        if (posting_load(&self->terms[t], docs + at, &col[2], at, lens[t], ndocs) < 0) goto fail;
        at += lens[t];
    }
    if (at != nposts) {
        PyErr_SetString(PyExc_ValueError, "postings do not fill their column");
        goto fail;
    }
    at = 0;
    uint32_t longest = 0;
    for (Py_ssize_t d = 0; d < ndocs; d++)
        if (dlens[d] > longest) longest = dlens[d];
    if (longest > nids) {
        PyErr_SetString(PyExc_ValueError, "term ids run past their column");
        goto fail;
    }
    if (!(tmp = malloc(sizeof(uint32_t) * ((size_t)longest + 1)))) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t d = 0; d < ndocs; d++) {
        if (dlens[d] > nids - at) {
            PyErr_SetString(PyExc_ValueError, "term ids run past their column");
            goto fail;
        }
        for (uint32_t j = 0; j < dlens[d]; j++, at++) {
            if (ids[at] >= (uint64_t)nterms) {
                PyErr_SetString(PyExc_ValueError, "a document names a term id out of range");
                goto fail;
            }
            tmp[j] = ids[at];
        }
        if (doclist_set(self, &self->docs[d], tmp, dlens[d]) < 0) goto fail;
    }
    if (at != nids) {
        PyErr_SetString(PyExc_ValueError, "term ids do not fill their column");
        goto fail;
    }
    free(tmp);
    for (int i = 0; i < 5; i++) PyBuffer_Release(&col[i]);
    return (PyObject *)self;
fail:
    free(tmp);
    Py_XDECREF(self);
    for (int i = 0; i < got; i++) PyBuffer_Release(&col[i]);
    return NULL;
}

static PyObject *Postings_nbytes(Postings *self, PyObject *unused) {
    size_t total = sizeof(Postings) + (size_t)self->cap_terms * sizeof(plist) + (size_t)self->cap_docs * sizeof(docref)
                   + (size_t)self->arena.cap;
    for (Py_ssize_t i = 0; i < self->nterms; i++) {
        const plist *p = &self->terms[i];
        total += (p->v.cap > INLINE_BYTES ? p->v.cap : 0) + sizeof(mark) * p->cap_marks;
    }
    return PyLong_FromSize_t(total);
}

static PyObject *raw_buffer(const vlist *v) {
    return v ? PyBytes_FromStringAndSize((const char *)cvbuf(v), v->cap) : PyBytes_FromStringAndSize("", 0);
}

static PyObject *Postings_buffer(Postings *self, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    return raw_buffer(i >= 0 && i < self->nterms ? &self->terms[i].v : NULL);
}

static PyObject *Postings_doc_buffer(Postings *self, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i < 0 || i >= self->ndocs) return PyBytes_FromStringAndSize("", 0);
    if (!self->docs[i].len) return PyBytes_FromStringAndSize("", 0);
    return PyBytes_FromStringAndSize((const char *)self->arena.bytes + self->docs[i].off, self->docs[i].len);
}

/* Slots of `size` bytes cut down to the `n` used (they hold sizes and offsets, not text). */
static void trim_slots(void **slots, Py_ssize_t *cap, Py_ssize_t n, size_t size) {
    if (*cap <= n) return;
    void *cut = realloc(*slots, (size_t)(n ? n : 1) * size);
    if (cut) {
        *slots = cut;
        *cap = n;
    }
}

/* Every buffer cut down to what it holds (after a catch-up of many documents, growth by half leaves a
 * quarter unused on average); what cannot be allocated stays as it is. */
static PyObject *Postings_trim(Postings *self, PyObject *unused) {
    for (Py_ssize_t i = 0; i < self->nterms; i++) {
        plist *p = &self->terms[i];
        vlist *v = &p->v;
        if (v->cap > INLINE_BYTES && v->cap > v->len) {
            uint8_t *old = v->u.heap, *cut = v->len > INLINE_BYTES ? malloc(v->len) : v->u.inl;
            if (!cut) continue;
            uint32_t cap = v->len > INLINE_BYTES ? v->len : INLINE_BYTES;
            if (cut == v->u.inl) {
                uint8_t tmp[INLINE_BYTES] = {0};
                memcpy(tmp, old, v->len);
                memset(old, 0, v->cap);
                free(old);
                memcpy(v->u.inl, tmp, INLINE_BYTES);
            } else {
                memcpy(cut, old, v->len);
                memset(old, 0, v->cap);
                free(old);
                v->u.heap = cut;
            }
            v->cap = cap;
        }
        if (p->cap_marks > p->nmarks) {
            mark *cut = p->nmarks ? malloc(sizeof(mark) * p->nmarks) : NULL;
            if (p->nmarks && !cut) continue;
            if (cut) memcpy(cut, p->marks, sizeof(mark) * p->nmarks);
            memset(p->marks, 0, sizeof(mark) * p->cap_marks);
            free(p->marks);
            p->marks = cut;
            p->cap_marks = p->nmarks;
        }
    }
    if (self->arena.bytes) arena_move(&self->arena, self->arena.len - self->arena.dead, (char *)self->docs,
                                      sizeof(docref), self->ndocs);
    trim_slots((void **)&self->terms, &self->cap_terms, self->nterms, sizeof(plist));
    trim_slots((void **)&self->docs, &self->cap_docs, self->ndocs, sizeof(docref));
#ifdef __GLIBC__
    malloc_trim(0); /* the pages the outgrown buffers freed go back to the system */
#endif
    Py_RETURN_NONE;
}

static PyObject *arena_bytes(const arena_t *a) {
    return PyBytes_FromStringAndSize(a->bytes ? (const char *)a->bytes : "", a->bytes ? (Py_ssize_t)a->cap : 0);
}

static PyObject *Postings_arena(Postings *self, PyObject *unused) { return arena_bytes(&self->arena); }

/* (below: they need the Vocabulary) */
static PyObject *Postings_add_text(Postings *self, PyObject *const *args, Py_ssize_t nargs);
static PyObject *Postings_add_texts(Postings *self, PyObject *const *args, Py_ssize_t nargs);

static PyMethodDef Postings_methods[] = {
    {"add_text", (PyCFunction)(void (*)(void))Postings_add_text, METH_FASTCALL,
     "add_text(doc, vocab, text, seen=None) -> the document's length, or None for a text that is not ASCII"},
    {"add_texts", (PyCFunction)(void (*)(void))Postings_add_texts, METH_FASTCALL,
     "add_texts(doc, vocab, texts) -> [length, ...]: add_text of each text as documents doc, doc + 1, ..., up to "
     "the first that is not ASCII (left out, and every text after it)"},
    {"add", (PyCFunction)Postings_add, METH_VARARGS, "add(doc, tids, tfs)"},
    {"remove", (PyCFunction)Postings_remove, METH_O, "remove(doc) -> the term ids whose postings it emptied"},
    {"count", (PyCFunction)Postings_count, METH_O, "count(tid) -> documents holding it"},
    {"get", (PyCFunction)Postings_get, METH_VARARGS, "get(tid, mask) -> {doc: tf}"},
    {"tids", (PyCFunction)Postings_tids, METH_O, "tids(doc) -> its term ids, increasing"},
    {"export", (PyCFunction)Postings_export, METH_VARARGS, "export(order, dense, live, new_tid) -> 5 columns"},
    {"load", (PyCFunction)Postings_load, METH_VARARGS | METH_CLASS, "load(post_lens, post_docs, post_freqs, doc_term_lens, doc_terms)"},
    {"nbytes", (PyCFunction)Postings_nbytes, METH_NOARGS, "nbytes() -> memory held"},
    {"trim", (PyCFunction)Postings_trim, METH_NOARGS, "trim(): every buffer cut down to what it holds"},
    {"_buffer", (PyCFunction)Postings_buffer, METH_O, "_buffer(tid) -> the bytes allocated for its posting"},
    {"_doc_buffer", (PyCFunction)Postings_doc_buffer, METH_O, "_doc_buffer(doc) -> the bytes of its term ids"},
    {"_arena", (PyCFunction)Postings_arena, METH_NOARGS, "_arena() -> every byte of the documents' arena"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PostingsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mnemo._speedups.Postings",
    .tp_basicsize = sizeof(Postings),
    .tp_dealloc = (destructor)Postings_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The text index's postings, compressed (see mnemo/storage/file/postings.py).",
    .tp_methods = Postings_methods,
    .tp_new = Postings_new,
};

/* Vocabulary: the text index's terms and their ids (the pure-Python twin, and the contract both keep,
 * are in mnemo/storage/file/vocabulary.py). Each term's UTF-8 lies in one arena, an id names where; an
 * open-addressing table of ids, hashed by the bytes, finds a term's id. The ids in the order of their
 * terms are rebuilt when asked for after a change (a merge of what was added into what stayed). A term
 * that leaves has its bytes zeroed; the arena is compacted when holes are most of it. */

#define FREE_TERM NO_RUN
#define SLOT_EMPTY UINT32_MAX
#define SLOT_GONE (UINT32_MAX - 1)

typedef struct {
    uint64_t off;
    uint32_t len; /* FREE_TERM: the id is free */
} tref;

typedef struct {
    PyObject_HEAD
    arena_t arena;
    tref *refs;
    Py_ssize_t nids, cap_ids;
    uint32_t *free_ids;
    Py_ssize_t nfree, cap_free;
    uint32_t *table; /* ids, or SLOT_EMPTY / SLOT_GONE */
    uint64_t table_cap, table_used, table_gone;
    uint32_t *order; /* ids in term order, as of the last rebuild */
    Py_ssize_t norder, cap_order;
    uint32_t *changed; /* ids added or dropped since (either: the rebuild looks at what each is now) */
    Py_ssize_t nchanged, cap_changed;
} Vocab;

static PyTypeObject VocabType;

static uint64_t hash_bytes(const uint8_t *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static const uint8_t *vocab_bytes(const Vocab *self, uint32_t id) { return self->arena.bytes + self->refs[id].off; }

static int vocab_same(const Vocab *self, uint32_t id, const uint8_t *p, Py_ssize_t n) {
    const tref *r = &self->refs[id];
    return r->len == (uint64_t)n && (n == 0 || memcmp(self->arena.bytes + r->off, p, (size_t)n) == 0);
}

/* The table slot holding the id of term p[0:n] (whose hash_bytes is `hash`), or (not there) the slot it
 * would take; -1 when the table is empty. */
static int64_t vocab_find_hashed(const Vocab *self, const uint8_t *p, Py_ssize_t n, uint64_t hash, int *found) {
    *found = 0;
    if (!self->table_cap) return -1;
    uint64_t mask = self->table_cap - 1, i = hash & mask;
    int64_t first_gone = -1;
    for (;; i = (i + 1) & mask) {
        uint32_t id = self->table[i];
        if (id == SLOT_EMPTY) return first_gone >= 0 ? first_gone : (int64_t)i;
        if (id == SLOT_GONE) {
            if (first_gone < 0) first_gone = (int64_t)i;
        } else if (vocab_same(self, id, p, n)) {
            *found = 1;
            return (int64_t)i;
        }
    }
}

/* The same, its hash (hash_bytes of p[0:n]) computed here. */
static int64_t vocab_find(const Vocab *self, const uint8_t *p, Py_ssize_t n, int *found) {
    return vocab_find_hashed(self, p, n, hash_bytes(p, n), found);
}

/* A table of `cap` slots (a power of two) holding every id. 0, or -1 (no memory; nothing changed). */
static int vocab_rehash(Vocab *self, uint64_t cap) {
    uint32_t *table = malloc(sizeof(uint32_t) * cap);
    if (!table) return -1;
    memset(table, 0xff, sizeof(uint32_t) * cap);
    for (Py_ssize_t id = 0; id < self->nids; id++) {
        if (self->refs[id].len == FREE_TERM) continue;
        uint64_t i = hash_bytes(vocab_bytes(self, (uint32_t)id), self->refs[id].len) & (cap - 1);
        while (table[i] != SLOT_EMPTY) i = (i + 1) & (cap - 1);
        table[i] = (uint32_t)id;
    }
    free(self->table);
    self->table = table;
    self->table_cap = cap;
    self->table_gone = 0;
    return 0;
}

static int vocab_order(Vocab *self);

/* The ids changed since the order was rebuilt are kept for its next rebuild: when they are many more
 * than the terms (a process that writes, and never expands a prefix), it is rebuilt now. */
static void vocab_note(Vocab *self, uint32_t id) {
    self->changed[self->nchanged++] = id;
    if (self->nchanged > 4096 && self->nchanged > 2 * self->nids) vocab_order(self); /* (no memory: later) */
}

/* Adds term p[0:n] (not held), giving it a free id or the next one; the id, or -1 with an exception. */
static int64_t vocab_add(Vocab *self, const uint8_t *p, Py_ssize_t n) {
    /* every allocation first: once the term is written, nothing may fail */
    if ((self->table_used + self->table_gone + 1) * 10 > self->table_cap * 7) {
        uint64_t cap = self->table_cap ? self->table_cap : 64;
        while ((self->table_used + 1) * 10 > cap * 5) cap *= 2;
        if (vocab_rehash(self, cap) < 0) goto nomem;
    }
    if (arena_room(&self->arena, (uint64_t)n) < 0) goto nomem;
    if (!self->nfree && grow_slots((void **)&self->refs, &self->cap_ids, self->nids + 1, sizeof(tref)) < 0) goto nomem;
    if (self->nchanged == self->cap_changed &&
        grow_slots((void **)&self->changed, &self->cap_changed, self->nchanged + 1, sizeof(uint32_t)) < 0)
        goto nomem;
    if (self->nids >= (Py_ssize_t)SLOT_GONE) goto nomem;
    int found;
    int64_t slot = vocab_find(self, p, n, &found);
    if (found) {
        PyErr_SetString(PyExc_ValueError, "the term is held already");
        return -1;
    }
    uint32_t id = self->nfree ? self->free_ids[--self->nfree] : (uint32_t)self->nids++;
    if (n) memcpy(self->arena.bytes + self->arena.len, p, (size_t)n);
    self->refs[id] = (tref){self->arena.len, (uint32_t)n};
    self->arena.len += (uint64_t)n;
    if (self->table[slot] == SLOT_GONE) self->table_gone--;
    self->table[slot] = id;
    self->table_used++;
    vocab_note(self, id);
    return id;
nomem:
    PyErr_NoMemory();
    return -1;
}

static const uint8_t *utf8_of(PyObject *term, Py_ssize_t *n) {
    if (!PyUnicode_Check(term)) {
        PyErr_SetString(PyExc_TypeError, "a term is a str");
        return NULL;
    }
    return (const uint8_t *)PyUnicode_AsUTF8AndSize(term, n);
}

static PyObject *Vocab_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "Vocabulary() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0);
}

static void Vocab_dealloc(Vocab *self) {
    arena_free(&self->arena);
    free(self->refs);
    free(self->free_ids);
    free(self->table);
    free(self->order);
    free(self->changed);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The id of a str term as a Python int, or None (a str UTF-8 cannot hold is no term). */
static PyObject *vocab_lookup(Vocab *self, PyObject *term) {
    Py_ssize_t n;
    const uint8_t *p = utf8_of(term, &n);
    if (!p) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int found;
    int64_t slot = vocab_find(self, p, n, &found);
    if (!found) Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(self->table[slot]);
}

static PyObject *Vocab_get(Vocab *self, PyObject *term) { return vocab_lookup(self, term); }

static int Vocab_contains(Vocab *self, PyObject *term) {
    if (!PyUnicode_Check(term)) return 0;
    PyObject *id = vocab_lookup(self, term);
    if (!id) return -1;
    int found = id != Py_None;
    Py_DECREF(id);
    return found;
}

static PyObject *Vocab_ids(Vocab *self, PyObject *terms) {
    PyObject *seq = PySequence_Fast(terms, "ids takes an iterable of str");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *id = vocab_lookup(self, PySequence_Fast_GET_ITEM(seq, i));
        if (!id) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, id);
    }
    Py_DECREF(seq);
    return out;
}

static PyObject *Vocab_add(Vocab *self, PyObject *term) {
    Py_ssize_t n;
    const uint8_t *p = utf8_of(term, &n);
    if (!p) return NULL;
    if (n >= (Py_ssize_t)FREE_TERM) return PyErr_NoMemory();
    int64_t id = vocab_add(self, p, n);
    return id < 0 ? NULL : PyLong_FromLongLong(id);
}

static PyObject *Vocab_drop(Vocab *self, PyObject *arg) {
    Py_ssize_t id = PyLong_AsSsize_t(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (id < 0 || id >= self->nids || self->refs[id].len == FREE_TERM) {
        PyErr_Format(PyExc_ValueError, "no term has the id %zd", id);
        return NULL;
    }
    if ((self->nfree == self->cap_free &&
         grow_slots((void **)&self->free_ids, &self->cap_free, self->nfree + 1, sizeof(uint32_t)) < 0) ||
        (self->nchanged == self->cap_changed &&
         grow_slots((void **)&self->changed, &self->cap_changed, self->nchanged + 1, sizeof(uint32_t)) < 0))
        return PyErr_NoMemory();
    tref *r = &self->refs[id];
    int found;
    int64_t slot = vocab_find(self, self->arena.bytes + r->off, r->len, &found);
    if (found) {
        self->table[slot] = SLOT_GONE;
        self->table_used--;
        self->table_gone++;
    }
    uint64_t off = r->off;
    uint32_t len = r->len;
    *r = (tref){0, FREE_TERM};
    self->free_ids[self->nfree++] = (uint32_t)id;
    vocab_note(self, (uint32_t)id);
    arena_release(&self->arena, off, len, (char *)self->refs, sizeof(tref), self->nids);
    Py_RETURN_NONE;
}

static PyObject *Vocab_term(Vocab *self, PyObject *arg) {
    Py_ssize_t id = PyLong_AsSsize_t(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (id < 0 || id >= self->nids || self->refs[id].len == FREE_TERM) Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8((const char *)vocab_bytes(self, (uint32_t)id), self->refs[id].len, "strict");
}

static PyObject *Vocab_id_space(Vocab *self, PyObject *unused) { return PyLong_FromSsize_t(self->nids); }

static const Vocab *sorting; /* (qsort takes no context: the vocabulary whose ids are being sorted) */

static int cmp_terms(const void *a, const void *b) {
    const tref *x = &sorting->refs[*(const uint32_t *)a], *y = &sorting->refs[*(const uint32_t *)b];
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(sorting->arena.bytes + x->off, sorting->arena.bytes + y->off, n) : 0;
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The order brought up to date: the ids changed since its last rebuild leave it, those of them held now
 * are sorted and merged in. UTF-8 in byte order is str in code point order. 0, or -1 (no memory). */
static int vocab_order(Vocab *self) {
    if (!self->nchanged) return 0;
    uint8_t *touched = calloc((size_t)self->nids + 1, 1);
    uint32_t *fresh = malloc(sizeof(uint32_t) * ((size_t)self->nchanged + 1));
    uint32_t *merged = malloc(sizeof(uint32_t) * ((size_t)self->norder + (size_t)self->nchanged + 1));
    if (!touched || !fresh || !merged) {
        free(touched);
        free(fresh);
        free(merged);
        return -1;
    }
    Py_ssize_t nfresh = 0, nmerged = 0, i = 0, j = 0;
    for (Py_ssize_t k = 0; k < self->nchanged; k++) {
        uint32_t id = self->changed[k];
        if (touched[id]) continue;
        touched[id] = 1;
        if (self->refs[id].len != FREE_TERM) fresh[nfresh++] = id;
    }
    sorting = self;
    qsort(fresh, (size_t)nfresh, sizeof(uint32_t), cmp_terms);
    while (i < self->norder || j < nfresh) {
        if (i < self->norder && touched[self->order[i]]) {
            i++;
            continue;
        }
        if (j >= nfresh || (i < self->norder && cmp_terms(&self->order[i], &fresh[j]) < 0))
            merged[nmerged++] = self->order[i++];
        else
            merged[nmerged++] = fresh[j++];
    }
    free(touched);
    free(fresh);
    free(self->order);
    self->order = merged;
    self->norder = self->cap_order = nmerged;
    self->nchanged = 0;
    return 0;
}

static PyObject *Vocab_ordered(Vocab *self, PyObject *unused) {
    if (vocab_order(self) < 0) return PyErr_NoMemory();
    PyObject *out = PyList_New(self->norder);
    for (Py_ssize_t i = 0; out && i < self->norder; i++) {
        PyObject *id = PyLong_FromUnsignedLong(self->order[i]);
        if (!id) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, id);
    }
    return out;
}

static PyObject *Vocab_expand(Vocab *self, PyObject *prefix) {
    Py_ssize_t n;
    const uint8_t *p = utf8_of(prefix, &n);
    if (!p) return NULL;
    if (vocab_order(self) < 0) return PyErr_NoMemory();
    Py_ssize_t lo = 0, hi = self->norder;
    while (lo < hi) { /* the first term not below the prefix */
        Py_ssize_t mid = lo + (hi - lo) / 2;
        const tref *r = &self->refs[self->order[mid]];
        size_t m = r->len < (uint64_t)n ? r->len : (size_t)n;
        int c = m ? memcmp(self->arena.bytes + r->off, p, m) : 0;
        if (c < 0 || (c == 0 && r->len < (uint64_t)n)) lo = mid + 1;
        else hi = mid;
    }
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = lo; out && i < self->norder; i++) {
        const tref *r = &self->refs[self->order[i]];
        if (r->len < (uint64_t)n || (n && memcmp(self->arena.bytes + r->off, p, (size_t)n) != 0)) break;
        PyObject *term = PyUnicode_DecodeUTF8((const char *)self->arena.bytes + r->off, r->len, "strict");
        if (!term || PyList_Append(out, term) < 0) Py_CLEAR(out);
        Py_XDECREF(term);
    }
    return out;
}

static PyObject *Vocab_load(PyObject *cls, PyObject *terms) {
    PyObject *seq = PySequence_Fast(terms, "load takes a list of str");
    if (!seq) return NULL;
    Vocab *self = (Vocab *)PyObject_CallNoArgs(cls);
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    const uint8_t *prev = NULL;
    Py_ssize_t prev_n = 0;
    if (!self) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t n;
        const uint8_t *p = utf8_of(PySequence_Fast_GET_ITEM(seq, i), &n);
        if (!p) goto fail;
        if (prev) {
            size_t m = prev_n < n ? (size_t)prev_n : (size_t)n;
            int c = m ? memcmp(prev, p, m) : 0;
            if (c > 0 || (c == 0 && prev_n >= n)) {
                PyErr_SetString(PyExc_ValueError, "the vocabulary's terms are not in increasing order");
                goto fail;
            }
        }
        if (vocab_add(self, p, n) < 0) goto fail;
        prev = p;
        prev_n = n;
    }
    /* loaded in order: the order is the ids, nothing changed since */
    free(self->order);
    self->order = malloc(sizeof(uint32_t) * ((size_t)self->nids + 1));
    if (!self->order) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t id = 0; id < self->nids; id++) self->order[id] = (uint32_t)id;
    self->norder = self->cap_order = self->nids;
    self->nchanged = 0;
    Py_DECREF(seq);
    return (PyObject *)self;
fail:
    Py_XDECREF(self);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *Vocab_nbytes(Vocab *self, PyObject *unused) {
    size_t total = sizeof(Vocab) + (size_t)self->arena.cap + (size_t)self->cap_ids * sizeof(tref) +
                   sizeof(uint32_t) * ((size_t)self->table_cap + (size_t)self->cap_free + (size_t)self->cap_order +
                                       (size_t)self->cap_changed);
    return PyLong_FromSize_t(total);
}

static PyObject *Vocab_arena(Vocab *self, PyObject *unused) { return arena_bytes(&self->arena); }

/* Postings.add_text(doc, vocab, text, seen=None) -> int | None: an ASCII text indexed as document
 * `doc` in one call: its terms counted as count_terms counts them, each one's id found in `vocab` (a Vocabulary;
 * the terms it lacks added to it in the order they first occur, as Vocabulary.add would give them
 * ids), and the document added as add(doc, ids, counts) adds it; the document's length (its number of
 * terms). None for a text that is not ASCII, which changes nothing (the caller analyses it). Its twin is
 * PyPostings.add_text (mnemo/storage/file/postings.py). Everything that can fail (no memory, a wrong
 * `doc`) fails before the vocabulary or the postings change. */

typedef struct {
    uint32_t off, n; /* the term: lower[off:off + n] */
    uint64_t hash;
    uint32_t count;
    uint32_t id; /* its id in the vocabulary, found or to be given */
    int fresh;   /* not in the vocabulary: added with that id */
} text_term;

typedef struct {
    const unsigned char *text;  /* the text as given (words are found in it, case and all) */
    const unsigned char *lower; /* the same lower-cased (terms are counted in it) */
    text_term *terms;           /* the distinct terms, in the order they first occur */
    Py_ssize_t n, cap;
    int32_t *slots; /* open addressing over terms (-1: empty); a power of two, at most half full */
    Py_ssize_t cap_slots;
    Py_ssize_t length;
} term_table;

static int term_slots(term_table *t, Py_ssize_t cap) {
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)cap);
    if (!slots) return -1;
    memset(slots, 0xff, sizeof(int32_t) * (size_t)cap);
    for (Py_ssize_t k = 0; k < t->n; k++) {
        Py_ssize_t i = (Py_ssize_t)(t->terms[k].hash & (uint64_t)(cap - 1));
        while (slots[i] >= 0) i = (i + 1) & (cap - 1);
        slots[i] = (int32_t)k;
    }
    free(t->slots);
    t->slots = slots;
    t->cap_slots = cap;
    return 0;
}

/* One more of the term lower[off:off + n], whose hash_bytes is `h`. 0, or -1 with an exception set. */
static int tally_hashed(term_table *t, Py_ssize_t off, Py_ssize_t n, uint64_t h) {
    if (n >= (Py_ssize_t)FREE_TERM || t->n >= INT32_MAX - 1) {
        PyErr_NoMemory();
        return -1;
    }
    const unsigned char *p = t->lower + off;
    Py_ssize_t mask = t->cap_slots - 1, i = (Py_ssize_t)(h & (uint64_t)mask);
    for (; t->slots[i] >= 0; i = (i + 1) & mask) {
        text_term *known = &t->terms[t->slots[i]];
        if (known->hash == h && known->n == (uint32_t)n && memcmp(t->lower + known->off, p, (size_t)n) == 0) {
            if (known->count == UINT32_MAX) {
                PyErr_SetString(PyExc_OverflowError, "a term occurs 2**32 times or more");
                return -1;
            }
            known->count++;
            t->length++;
            return 0;
        }
    }
    if (t->n == t->cap) {
        Py_ssize_t cap = t->cap ? t->cap * 2 : 64;
        text_term *grown = realloc(t->terms, sizeof(text_term) * (size_t)cap);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        t->terms = grown;
        t->cap = cap;
    }
    t->terms[t->n] = (text_term){(uint32_t)off, (uint32_t)n, h, 1, 0, 0};
    t->slots[i] = (int32_t)t->n++;
    t->length++;
    if (t->n * 2 > t->cap_slots && term_slots(t, t->cap_slots * 2) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* A term_fn: one more of s[0:n] (a part of t->text, whose lower-cased copy is made), lower-cased. */
static int tally_term(void *to, const unsigned char *s, Py_ssize_t n) {
    term_table *t = to;
    Py_ssize_t off = s - t->text;
    return tally_hashed(t, off, n, hash_bytes(t->lower + off, n));
}

/* What the scan of add_text asks of an ASCII character: its class (0: not a word character). */
#define CL_LOW 1
#define CL_UP 2
#define CL_DIGIT 4
#define CL_UNDER 8
static const uint8_t char_class[256] = {
    ['0'] = CL_DIGIT, ['1'] = CL_DIGIT, ['2'] = CL_DIGIT, ['3'] = CL_DIGIT, ['4'] = CL_DIGIT,
    ['5'] = CL_DIGIT, ['6'] = CL_DIGIT, ['7'] = CL_DIGIT, ['8'] = CL_DIGIT, ['9'] = CL_DIGIT,
    ['A'] = CL_UP, ['B'] = CL_UP, ['C'] = CL_UP, ['D'] = CL_UP, ['E'] = CL_UP, ['F'] = CL_UP, ['G'] = CL_UP,
    ['H'] = CL_UP, ['I'] = CL_UP, ['J'] = CL_UP, ['K'] = CL_UP, ['L'] = CL_UP, ['M'] = CL_UP, ['N'] = CL_UP,
    ['O'] = CL_UP, ['P'] = CL_UP, ['Q'] = CL_UP, ['R'] = CL_UP, ['S'] = CL_UP, ['T'] = CL_UP, ['U'] = CL_UP,
    ['V'] = CL_UP, ['W'] = CL_UP, ['X'] = CL_UP, ['Y'] = CL_UP, ['Z'] = CL_UP, ['_'] = CL_UNDER,
    ['a'] = CL_LOW, ['b'] = CL_LOW, ['c'] = CL_LOW, ['d'] = CL_LOW, ['e'] = CL_LOW, ['f'] = CL_LOW, ['g'] = CL_LOW,
    ['h'] = CL_LOW, ['i'] = CL_LOW, ['j'] = CL_LOW, ['k'] = CL_LOW, ['l'] = CL_LOW, ['m'] = CL_LOW, ['n'] = CL_LOW,
    ['o'] = CL_LOW, ['p'] = CL_LOW, ['q'] = CL_LOW, ['r'] = CL_LOW, ['s'] = CL_LOW, ['t'] = CL_LOW, ['u'] = CL_LOW,
    ['v'] = CL_LOW, ['w'] = CL_LOW, ['x'] = CL_LOW, ['y'] = CL_LOW, ['z'] = CL_LOW,
};

/* Every term of the ASCII text t->text[0:n] tallied, its lower-cased copy written as it goes: the words
 * of next_word in one pass, each one's classes gathered and its hash computed as it is read, so that a
 * simple word (simple_word's test, from the classes) is tallied at once and only an identifier is
 * split by count_word. 0, or -1 with an exception set. */
static int tally_text(term_table *t, Py_ssize_t n) {
    const unsigned char *s = t->text;
    unsigned char *lower = (unsigned char *)t->lower;
    Py_ssize_t i = 0;
    while (i < n) {
        if (!char_class[s[i]]) {
            lower[i] = s[i];
            i++;
            continue;
        }
        Py_ssize_t start = i;
        uint8_t first = char_class[s[i]], rest = 0;
        int dot = 0;
        uint64_t h = 1469598103934665603ULL; /* (hash_bytes, as the bytes are read) */
        for (;;) {
            uint8_t cl;
            while (i < n && (cl = char_class[s[i]])) {
                unsigned char c = cl == CL_UP ? (unsigned char)(s[i] + 32) : s[i];
                lower[i] = c;
                h = (h ^ c) * 1099511628211ULL;
                if (i > start) rest |= cl;
                i++;
            }
            if (!(i + 1 < n && s[i] == '.' && char_class[s[i + 1]])) break;
            lower[i] = '.';
            h = (h ^ '.') * 1099511628211ULL;
            dot = 1;
            i++;
        }
        uint8_t all = first | rest;
        int simple = !dot && !(all & CL_UNDER) &&
                     (((all & CL_LOW) && !(all & CL_UP)) || ((rest & CL_LOW) && !(rest & CL_UP)) ||
                      ((all & CL_UP) && !(all & CL_LOW) && !(all & CL_DIGIT)));
        if (simple ? tally_hashed(t, start, i - start, h ^ (h >> 29)) < 0
                   : count_word(tally_term, t, s + start, i - start) < 0)
            return -1;
    }
    return 0;
}

/* Memory that held something of a text, zeroed before it is freed (so that no freed memory keeps it). */
static void wipe_free(void *p, size_t bytes) {
    if (p) memset(p, 0, bytes);
    free(p);
}

/* t (zeroed by the caller) made for the ASCII text s[0:n], every term of it tallied (tally_text). 0, or -1
 * with an exception set; either way term_table_free frees what it holds. */
static int term_table_scan(term_table *t, const unsigned char *s, Py_ssize_t n) {
    t->text = s;
    unsigned char *lower = malloc((size_t)n + 1);
    t->lower = lower;
    if (!lower || term_slots(t, 128) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return tally_text(t, n);
}

/* What term_table_scan made of a text of n characters, zeroed and freed (the text itself is the
 * caller's). */
static void term_table_free(term_table *t, Py_ssize_t n) {
    wipe_free((void *)t->lower, t->lower ? (size_t)n : 0);
    wipe_free(t->terms, sizeof(text_term) * (size_t)t->cap);
    wipe_free(t->slots, sizeof(int32_t) * (size_t)t->cap_slots);
}

/* Room in the vocabulary for `count` more terms of `bytes` bytes in all, so that vocab_add, `count`
 * times, allocates nothing and cannot fail. 0, or -1 (no memory; nothing it holds changed). */
static int vocab_reserve(Vocab *self, Py_ssize_t count, uint64_t bytes) {
    if (self->nids + count >= (Py_ssize_t)SLOT_GONE) return -1;
    if ((self->table_used + self->table_gone + (uint64_t)count) * 10 > self->table_cap * 7) {
        uint64_t cap = self->table_cap ? self->table_cap : 64;
        while ((self->table_used + (uint64_t)count) * 10 > cap * 5) cap *= 2;
        if (vocab_rehash(self, cap) < 0) return -1;
    }
    if (arena_room(&self->arena, bytes) < 0) return -1;
    if (grow_slots((void **)&self->refs, &self->cap_ids, self->nids + count, sizeof(tref)) < 0) return -1;
    return grow_slots((void **)&self->changed, &self->cap_changed, self->nchanged + count, sizeof(uint32_t));
}

static PyObject *Postings_add_text(Postings *self, PyObject *const *args, Py_ssize_t nargs) {
    /* add_text(doc, vocab, text, seen=None), its arguments taken as PyArg_ParseTuple's "nO!U|O" takes them
     * (seen: the twin's cache of analysed words, which this analysis needs none of), without its parsing */
    if (nargs < 3 || nargs > 4) {
        PyErr_Format(PyExc_TypeError, "add_text() takes from 3 to 4 positional arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t doc = PyNumber_AsSsize_t(args[0], PyExc_OverflowError);
    if (doc == -1 && PyErr_Occurred()) return NULL;
    if (!PyObject_TypeCheck(args[1], &VocabType)) {
        PyErr_Format(PyExc_TypeError, "add_text() argument 2 must be mnemo._speedups.Vocabulary, not %.50s",
                     Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    Vocab *vocab = (Vocab *)args[1];
    PyObject *text = args[2];
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "add_text() argument 3 must be str, not %.50s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    if (doc != self->ndocs || doc >= UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "the next document is %zd, not %zd", self->ndocs, doc);
        return NULL;
    }
    if (PyUnicode_READY(text) < 0) return NULL;
    if (!PyUnicode_IS_ASCII(text)) Py_RETURN_NONE;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (n >= (Py_ssize_t)UINT32_MAX) return PyErr_NoMemory();
    PyObject *ret = NULL;
    term_table t = {0};
    uint32_t *tids = NULL;
    if (term_table_scan(&t, s, n) < 0) goto done;
    const unsigned char *lower = t.lower;
    /* each term's id: the vocabulary's, or the one vocab_add will give it (free ids last freed first,
     * then new ones), in the order the terms first occur */
    Py_ssize_t fresh = 0, nfree = vocab->nfree, next = vocab->nids;
    uint64_t bytes = 0;
    uint32_t top = 0;
    for (Py_ssize_t k = 0; k < t.n; k++) {
        text_term *term = &t.terms[k];
        int found;
        int64_t slot = vocab_find_hashed(vocab, lower + term->off, term->n, term->hash, &found);
        if (found) {
            term->id = vocab->table[slot];
        } else {
            term->fresh = 1;
            term->id = nfree ? vocab->free_ids[--nfree] : (uint32_t)next++;
            fresh++;
            bytes += term->n;
        }
        if (term->id == UINT32_MAX) {
            PyErr_NoMemory();
            goto done;
        }
        if (term->id >= top) top = term->id + 1;
    }
    tids = malloc(sizeof(uint32_t) * ((size_t)t.n + 1));
    if (!tids) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < t.n; k++) tids[k] = t.terms[k].id;
    /* everything that can fail, before anything changes (as add does) */
    if (vocab_reserve(vocab, fresh, bytes) < 0 ||
        grow_slots((void **)&self->terms, &self->cap_terms, top, sizeof(plist)) < 0 ||
        grow_slots((void **)&self->docs, &self->cap_docs, doc + 1, sizeof(docref)) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < t.n; k++)
        if (posting_reserve(&self->terms[t.terms[k].id], (uint32_t)doc, t.terms[k].count) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    docref listed;
    if (doclist_set(self, &listed, tids, t.n) < 0) goto done; /* (sorts tids; the last step that may fail) */
    for (Py_ssize_t k = 0; k < t.n; k++) {
        text_term *term = &t.terms[k];
        if (term->fresh) {
            int64_t id = vocab_add(vocab, lower + term->off, term->n); /* (room reserved: cannot fail) */
            assert(id == (int64_t)term->id);
            (void)id;
        }
    }
    if (top > self->nterms) self->nterms = top;
    for (Py_ssize_t k = 0; k < t.n; k++)
        posting_append(&self->terms[t.terms[k].id], (uint32_t)doc, t.terms[k].count);
    self->docs[doc] = listed;
    self->ndocs = doc + 1;
    ret = PyLong_FromSsize_t(t.length);
done:
    term_table_free(&t, n);
    wipe_free(tids, tids ? sizeof(uint32_t) * (size_t)t.n : 0);
    return ret;
}

/* add_text of each of `texts` (a list) as the documents doc, doc + 1, ...: their lengths, up to the first
 * text that is not ASCII (that one and the rest are left to the caller). An error after some texts were
 * added returns their lengths (the caller adds the failing text alone, which raises it again). */
static PyObject *Postings_add_texts(Postings *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "add_texts(doc, vocab, texts): texts must be a list");
        return NULL;
    }
    Py_ssize_t doc = PyNumber_AsSsize_t(args[0], PyExc_OverflowError);
    if (doc == -1 && PyErr_Occurred()) return NULL;
    PyObject *texts = args[2], *out = PyList_New(0);
    if (!out) return NULL;
    /* add_text runs no Python code: the list cannot change while it is read */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(texts); i++) {
        PyObject *at = PyLong_FromSsize_t(doc + i);
        if (!at) break;
        PyObject *one[3] = {at, args[1], PyList_GET_ITEM(texts, i)};
        PyObject *length = Postings_add_text(self, one, 3);
        Py_DECREF(at);
        if (length == Py_None) {
            Py_DECREF(length);
            return out;
        }
        if (!length) break;
        int failed = PyList_Append(out, length);
        Py_DECREF(length);
        if (failed) break;
    }
    if (!PyErr_Occurred()) return out;
    if (PyList_GET_SIZE(out)) {
        PyErr_Clear();
        return out;
    }
    Py_DECREF(out);
    return NULL;
}

/* term_positions(text, limit) -> (length, {term: count}, {term: bytes | None}) | None: what the
 * PostgreSQL text index writes of an ASCII text (mnemo/storage/postgres/text_index.py; its twin is
 * text_index.analysed without this): the length and the terms as count_terms counts them (in the order
 * they first occur), and where each term stands among the text's atoms (count_phrase's atoms: simple
 * words and identifier parts, numbered from 0), packed as mnemo_terms.positions holds them
 * (text_index.pack_places: varints, their number plus one, then each one's gap from the one before);
 * b"\x01" for a term that is no atom (an identifier's whole), None for one at more than `limit` places. None when the text is not ASCII (the twin analyses
 * it). The terms are found by add_text's scan (tally_text), the atoms by count_phrase's (word_atoms),
 * each atom then found among the terms by its hash, with no Python object made but the answer's. */

/* The index in t->terms of the term lower[off:off + n] (whose hash_bytes is h), or -1. */
static Py_ssize_t term_index(const term_table *t, Py_ssize_t off, Py_ssize_t n, uint64_t h) {
    Py_ssize_t mask = t->cap_slots - 1, i = (Py_ssize_t)(h & (uint64_t)mask);
    for (; t->slots[i] >= 0; i = (i + 1) & mask) {
        const text_term *known = &t->terms[t->slots[i]];
        if (known->hash == h && known->n == (uint32_t)n &&
            memcmp(t->lower + known->off, t->lower + off, (size_t)n) == 0)
            return t->slots[i];
    }
    return -1;
}

static PyObject *term_positions(PyObject *self, PyObject *args) {
    PyObject *text;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "Un", &text, &limit)) return NULL;
    if (PyUnicode_READY(text) < 0) return NULL;
    if (!PyUnicode_IS_ASCII(text)) Py_RETURN_NONE;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    /* (an atom is at least one character: fewer than 2**31 of them, as the 4-byte positions need) */
    if (n >= (Py_ssize_t)INT32_MAX) return PyErr_NoMemory();
    PyObject *ret = NULL, *counts = NULL, *places = NULL;
    term_table t = {0};
    atoms_t a = {0};
    int32_t *of = NULL;          /* each atom's term (its index in t.terms), or -1 */
    Py_ssize_t *first = NULL;    /* where each term's places start in `at`; first[t.n]: their number */
    uint32_t *at = NULL;         /* every term's places, one term after the other */
    if (term_table_scan(&t, s, n) < 0) goto done;
    const unsigned char *lower = t.lower;
    for (Py_ssize_t i = 0, start; next_word(s, n, &i, &start);) {
        if (word_atoms(&a, s + start, i - start) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    of = malloc(sizeof(int32_t) * ((size_t)a.n + 1));
    first = calloc((size_t)t.n + 1, sizeof(Py_ssize_t));
    at = malloc(sizeof(uint32_t) * ((size_t)a.n + 1));
    if (!of || !first || !at) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < a.n; j++) {
        Py_ssize_t off = a.v[j].p - s, k = term_index(&t, off, a.v[j].n, hash_bytes(lower + off, a.v[j].n));
        of[j] = (int32_t)k;
        if (k >= 0) first[k + 1]++;
    }
    for (Py_ssize_t k = 0; k < t.n; k++) first[k + 1] += first[k];
    /* (filled in atom order: each term's places come out increasing; first[k] moves to its end) */
    for (Py_ssize_t j = 0; j < a.n; j++)
        if (of[j] >= 0) at[first[of[j]]++] = (uint32_t)j;
    counts = PyDict_New();
    places = PyDict_New();
    if (!counts || !places) goto done;
    for (Py_ssize_t k = 0, from = 0; k < t.n; from = first[k++]) {
        const text_term *term = &t.terms[k];
        Py_ssize_t many = first[k] - from;
        PyObject *key = PyUnicode_New(term->n, 127);
        PyObject *count = PyLong_FromUnsignedLong(term->count);
        PyObject *packed = Py_None;
        if (many <= limit) {
            /* (a varint of a value below 2**31 is at most 5 bytes; written into a buffer, then copied) */
            uint8_t small[5 * 65], *out = many < 64 ? small : malloc(5 * ((size_t)many + 1));
            if (out) {
                Py_ssize_t size = put_varint(out, (uint32_t)many + 1);
                for (Py_ssize_t i = 0; i < many; i++)
                    size += put_varint(out + size, at[from + i] - (i ? at[from + i - 1] : 0));
                packed = PyBytes_FromStringAndSize((const char *)out, size);
                memset(out, 0, (size_t)size);
                if (out != small) free(out);
            } else {
                packed = PyErr_NoMemory();
            }
        } else {
            Py_INCREF(packed);
        }
        int rc = -1;
        if (key && count && packed) {
            memcpy(PyUnicode_1BYTE_DATA(key), lower + term->off, term->n);
            rc = PyDict_SetItem(counts, key, count) < 0 ? -1 : PyDict_SetItem(places, key, packed);
        }
        Py_XDECREF(key);
        Py_XDECREF(count);
        Py_XDECREF(packed);
        if (rc < 0) goto done;
    }
    ret = Py_BuildValue("(nOO)", t.length, counts, places);
done:
    Py_XDECREF(counts);
    Py_XDECREF(places);
    term_table_free(&t, n);
    wipe_free(a.v, sizeof(atom_t) * (size_t)a.cap);
    wipe_free(of, of ? sizeof(int32_t) * (size_t)a.n : 0);
    wipe_free(at, at ? sizeof(uint32_t) * (size_t)a.n : 0);
    free(first);
    return ret;
}

/* unpack_places(data, postings) -> (counts, places) | None: the positions of `postings` postings, one
 * after the other as text_index.pack_places packs them (b"\x00": not kept), decoded: how many each has
 * (-1: not kept) and all of them, as two bytes objects of native 32-bit integers. None when `data` is not
 * that: a varint of more than 5 bytes or above 2**32 - 1, one cut short, a count of places beyond the
 * bytes left, a place above 2**31 - 1, or another number of postings (rows written by hand: the texts
 * decide the phrase). Its twin is text_index.unpack_places without this. */

static PyObject *unpack_places(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t postings;
    if (!PyArg_ParseTuple(args, "y*n", &view, &postings)) return NULL;
    const uint8_t *p = view.buf;
    if (view.len >= (Py_ssize_t)INT32_MAX) { /* (a bytea is 1 GB at most) */
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    uint32_t end = (uint32_t)view.len, at = 0;
    Py_ssize_t n = 0, m = 0;
    PyObject *ret = NULL;
    /* (each posting takes a byte at least, and each place: neither column outgrows the bytes) */
    int32_t *counts = malloc(sizeof(int32_t) * ((size_t)end + 1)), *places = malloc(sizeof(int32_t) * ((size_t)end + 1));
    if (!counts || !places) {
        PyErr_NoMemory();
        goto done;
    }
    while (at < end) {
        uint32_t code, gap;
        if (!get_varint(p, end, &at, &code) || code > end - at + 1) goto refused;
        counts[n++] = (int32_t)((int64_t)code - 1);
        uint64_t place = 0;
        for (uint32_t k = 0; k + 1 < code; k++) {
            if (!get_varint(p, end, &at, &gap)) goto refused;
            place = k ? place + gap : gap;
            if (place > INT32_MAX) goto refused;
            places[m++] = (int32_t)place;
        }
    }
    if (n != postings) goto refused;
    ret = Py_BuildValue("(y#y#)", (const char *)counts, n * (Py_ssize_t)sizeof(int32_t), (const char *)places,
                        m * (Py_ssize_t)sizeof(int32_t));
    goto done;
refused:
    ret = Py_NewRef(Py_None);
done:
    free(counts);
    free(places);
    PyBuffer_Release(&view);
    return ret;
}

/* phrase_starts(columns) -> (found, unknown, lengths) | None: where a phrase starts in the documents that
 * hold every one of its atoms, from the atoms' postings and positions as TableSource._places gives them
 * (mnemo/storage/postgres/text_source.py): `columns` holds, for each atom of the phrase in its order (an
 * atom twice in it, twice), (seqs, counts, places, lengths): the postings' seqs (8 bytes each, big-endian),
 * how many places each has (native 32-bit, -1: none kept), all those places one posting after the other
 * (native 32-bit, increasing within a posting), and the documents' lengths (4 bytes each, big-endian).
 * found: {seq: how many distinct places of the first atom start the phrase} for each document where it
 * starts; unknown: [seq] the documents holding every atom with one not kept (their texts decide); lengths:
 * {seq: length} of those two, as the first atom's postings give them. None for a document twice in an atom's postings (rows written by hand: the
 * twin, _phrase_python, decides), ValueError for columns of inconsistent sizes. Its twin is
 * text_phrases._phrase_python (mnemo/storage/postgres/text_phrases.py), which gives the same found and
 * unknown (and the lengths of every posting). */

typedef struct {
    const uint8_t *seqs, *lengths;
    const int32_t *counts, *places;
    Py_ssize_t n, nplaces;
    Py_ssize_t *start;   /* where each posting's places start in `places` */
    int64_t *slots_seq;  /* open addressing: seq -> posting (slots_at), a power of two, at most half full */
    Py_ssize_t *slots_at;
    Py_ssize_t cap;
    int64_t low;         /* dense seqs (direct): slots_at[seq - low] is seq's posting, cap slots; no slots_seq */
    int direct;
    Py_buffer views[4];
    int held;            /* views taken */
} phrase_column;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    return x ^ (x >> 33);
}

/* The posting of `seq` in c, or -1. */
static Py_ssize_t column_find(const phrase_column *c, int64_t seq) {
    if (c->direct) {
        uint64_t i = (uint64_t)seq - (uint64_t)c->low; /* (a seq below low wraps past cap) */
        return i < (uint64_t)c->cap ? c->slots_at[i] : -1;
    }
    Py_ssize_t mask = c->cap - 1, i = (Py_ssize_t)(mix64((uint64_t)seq) & (uint64_t)mask);
    for (; c->slots_at[i] >= 0; i = (i + 1) & mask)
        if (c->slots_seq[i] == seq) return c->slots_at[i];
    return -1;
}

/* c's views, places' starts and table from the tuple `item`. 0; 1 for a seq twice; -1 with an exception set. */
static int column_load(phrase_column *c, PyObject *item) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
        PyErr_SetString(PyExc_TypeError, "phrase_starts takes a tuple of (seqs, counts, places, lengths)");
        return -1;
    }
    for (int k = 0; k < 4; k++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, k), &c->views[k], PyBUF_SIMPLE) < 0) return -1;
        c->held = k + 1;
    }
    c->n = c->views[0].len / 8;
    c->nplaces = c->views[2].len / 4;
    if (c->views[0].len % 8 || c->views[1].len != 4 * c->n || c->views[2].len % 4 || c->views[3].len != 4 * c->n) {
        PyErr_SetString(PyExc_ValueError, "phrase_starts: columns of inconsistent sizes");
        return -1;
    }
    c->seqs = c->views[0].buf;
    c->counts = c->views[1].buf;
    c->places = c->views[2].buf;
    c->lengths = c->views[3].buf;
    /* Seqs close together (a corpus's documents are most of the seqs up to its last) are looked up in a
     * table indexed by seq, as engine.distinct does; others in a hash table. */
    int64_t low = INT64_MAX, high = INT64_MIN;
    for (Py_ssize_t j = 0; j < c->n; j++) {
        int64_t seq = (int64_t)be64(c->seqs + 8 * j);
        if (seq < low) low = seq;
        if (seq > high) high = seq;
    }
    c->direct = c->n > 0 && (uint64_t)high - (uint64_t)low < 8 * (uint64_t)c->n + 4096;
    if (c->direct) {
        c->low = low;
        c->cap = (Py_ssize_t)((uint64_t)high - (uint64_t)low + 1);
    } else {
        c->cap = 16;
        while (c->cap < 2 * c->n + 2) c->cap *= 2;
    }
    c->start = malloc(sizeof(Py_ssize_t) * ((size_t)c->n + 1));
    c->slots_seq = c->direct ? NULL : malloc(sizeof(int64_t) * (size_t)c->cap);
    c->slots_at = malloc(sizeof(Py_ssize_t) * (size_t)c->cap);
    if (!c->start || (!c->direct && !c->slots_seq) || !c->slots_at) {
        PyErr_NoMemory();
        return -1;
    }
    memset(c->slots_at, 0xff, sizeof(Py_ssize_t) * (size_t)c->cap);
    Py_ssize_t at = 0;
    for (Py_ssize_t j = 0; j < c->n; j++) {
        c->start[j] = at;
        if (c->counts[j] > 0) at += c->counts[j];
        if (at > c->nplaces) {
            PyErr_SetString(PyExc_ValueError, "phrase_starts: fewer places than the counts say");
            return -1;
        }
    }
    c->start[c->n] = at;
    if (at != c->nplaces) {
        PyErr_SetString(PyExc_ValueError, "phrase_starts: more places than the counts say");
        return -1;
    }
    if (c->direct) {
        for (Py_ssize_t j = 0; j < c->n; j++) {
            Py_ssize_t *slot = &c->slots_at[(uint64_t)be64(c->seqs + 8 * j) - (uint64_t)low];
            if (*slot >= 0) return 1;
            *slot = j;
        }
        return 0;
    }
    Py_ssize_t mask = c->cap - 1;
    for (Py_ssize_t j = 0; j < c->n; j++) {
        int64_t seq = (int64_t)be64(c->seqs + 8 * j);
        Py_ssize_t i = (Py_ssize_t)(mix64((uint64_t)seq) & (uint64_t)mask);
        for (; c->slots_at[i] >= 0; i = (i + 1) & mask)
            if (c->slots_seq[i] == seq) return 1;
        c->slots_seq[i] = seq;
        c->slots_at[i] = j;
    }
    return 0;
}

/* Whether `place` is among the places of posting j of c (increasing: a binary search). */
static int column_holds(const phrase_column *c, Py_ssize_t j, int64_t place) {
    Py_ssize_t lo = c->start[j], hi = c->start[j + 1];
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (c->places[mid] < place) lo = mid + 1;
        else hi = mid;
    }
    return lo < c->start[j + 1] && c->places[lo] == place;
}

static PyObject *phrase_starts(PyObject *self, PyObject *arg) {
    if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) == 0) {
        PyErr_SetString(PyExc_TypeError, "phrase_starts takes a non-empty tuple of columns");
        return NULL;
    }
    Py_ssize_t width = PyTuple_GET_SIZE(arg);
    PyObject *ret = NULL, *found = PyDict_New(), *unknown = PyList_New(0), *lengths = PyDict_New();
    phrase_column *cols = calloc((size_t)width, sizeof(phrase_column));
    Py_ssize_t *at = malloc(sizeof(Py_ssize_t) * (size_t)width);
    if (!found || !unknown || !lengths || !cols || !at) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t driver = 0; /* the atom of fewest postings: its documents are looked up in the others */
    for (Py_ssize_t k = 0; k < width; k++) {
        int loaded = column_load(&cols[k], PyTuple_GET_ITEM(arg, k));
        if (loaded < 0) goto done;
        if (loaded > 0) {
            ret = Py_NewRef(Py_None);
            goto done;
        }
        if (cols[k].n < cols[driver].n) driver = k;
    }
    for (Py_ssize_t j = 0; j < cols[driver].n; j++) {
        int64_t seq = (int64_t)be64(cols[driver].seqs + 8 * j);
        int all = 1, kept = 1;
        for (Py_ssize_t k = 0; k < width && all; k++) {
            at[k] = k == driver ? j : column_find(&cols[k], seq);
            all = at[k] >= 0;
            if (all && cols[k].counts[at[k]] < 0) kept = 0;
        }
        if (!all) continue;
        Py_ssize_t starts = 0;
        if (kept) {
            const phrase_column *first = &cols[0];
            for (Py_ssize_t i = first->start[at[0]]; i < first->start[at[0] + 1]; i++) {
                int64_t place = first->places[i];
                if (i > first->start[at[0]] && place == first->places[i - 1]) continue; /* (distinct starts) */
                Py_ssize_t k = 1;
                while (k < width && column_holds(&cols[k], at[k], place + k)) k++;
                starts += k == width;
            }
            if (!starts) continue;
        }
        PyObject *key = PyLong_FromLongLong(seq);
        PyObject *length = PyLong_FromLong((int32_t)be32(cols[0].lengths + 4 * at[0])); /* (the first atom's) */
        PyObject *count = kept ? PyLong_FromSsize_t(starts) : NULL;
        int rc = -1;
        if (key && length && (count || !kept))
            rc = (kept ? PyDict_SetItem(found, key, count) : PyList_Append(unknown, key)) < 0
                     ? -1 : PyDict_SetItem(lengths, key, length);
        Py_XDECREF(key);
        Py_XDECREF(length);
        Py_XDECREF(count);
        if (rc < 0) goto done;
    }
    ret = PyTuple_Pack(3, found, unknown, lengths);
done:
    if (cols) {
        for (Py_ssize_t k = 0; k < width; k++) {
            for (int v = 0; v < cols[k].held; v++) PyBuffer_Release(&cols[k].views[v]);
            free(cols[k].start);
            free(cols[k].slots_seq);
            free(cols[k].slots_at);
        }
    }
    free(cols);
    free(at);
    Py_XDECREF(found);
    Py_XDECREF(unknown);
    Py_XDECREF(lengths);
    return ret;
}

static PyMethodDef Vocab_methods[] = {
    {"ids", (PyCFunction)Vocab_ids, METH_O, "ids(terms) -> [id or None]"},
    {"get", (PyCFunction)Vocab_get, METH_O, "get(term) -> id or None"},
    {"add", (PyCFunction)Vocab_add, METH_O, "add(term) -> id"},
    {"drop", (PyCFunction)Vocab_drop, METH_O, "drop(id)"},
    {"term", (PyCFunction)Vocab_term, METH_O, "term(id) -> str or None"},
    {"id_space", (PyCFunction)Vocab_id_space, METH_NOARGS, "id_space() -> a bound on the ids"},
    {"ordered", (PyCFunction)Vocab_ordered, METH_NOARGS, "ordered() -> the ids in term order"},
    {"expand", (PyCFunction)Vocab_expand, METH_O, "expand(prefix) -> the terms starting with it, in order"},
    {"load", (PyCFunction)Vocab_load, METH_O | METH_CLASS, "load(terms) -> a vocabulary of them, ids their positions"},
    {"nbytes", (PyCFunction)Vocab_nbytes, METH_NOARGS, "nbytes() -> memory held"},
    {"_arena", (PyCFunction)Vocab_arena, METH_NOARGS, "_arena() -> every byte of the terms' arena"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Vocab_as_sequence = {.sq_contains = (objobjproc)Vocab_contains};

static PyTypeObject VocabType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mnemo._speedups.Vocabulary",
    .tp_basicsize = sizeof(Vocab),
    .tp_dealloc = (destructor)Vocab_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The text index's terms and their ids (see mnemo/storage/file/vocabulary.py).",
    .tp_methods = Vocab_methods,
    .tp_as_sequence = &Vocab_as_sequence,
    .tp_new = Vocab_new,
};

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buf, base, pos, seq, last_hash, stop_seq, max_frame, flags, row0) -> tuple (see mnemo/storage/file/scan.py)"},
    {"merkle_push", merkle_push, METH_VARARGS, "merkle_push(stack, size, leaves) -> size"},
    {"crc32", crc32_py, METH_VARARGS, "crc32(data, value=0) -> int (what zlib.crc32 gives)"},
    {"entry_hashes", entry_hashes, METH_VARARGS,
     "entry_hashes(entry, payload) -> (sha256(entry), sha256(b'\\0' + entry), sha256(payload)) as the scan takes them"},
    {"cpu_paths", cpu_paths, METH_VARARGS, "cpu_paths(enable=None) -> (CLMUL CRC-32 in use, SHA-NI in use)"},
    {"code_uses", code_uses, METH_VARARGS,
     "code_uses(codes, n, table, refs) -> [(code, uses)] (see mnemo/storage/file/index_columns.py)"},
    {"remap_codes", remap_codes, METH_VARARGS,
     "remap_codes(codes, n, table) -> bytes (see mnemo/storage/file/index_columns.py)"},
    {"posting_rows", posting_rows, METH_VARARGS,
     "posting_rows(tagset, rows, codes) -> distinct rows, or -1 (see mnemo/storage/file/index_check.py)"},
    {"max_u32", max_u32, METH_O, "max_u32(column) -> int (the largest of an array('I'), 0 when empty)"},
    {"count_phrase", count_phrase, METH_VARARGS,
     "count_phrase(text, atoms) -> int | None (see mnemo/recall/analysis.py, phrase_count)"},
    {"term_positions", term_positions, METH_VARARGS,
     "term_positions(text, limit) -> (length, {term: count}, {term: positions}) | None (see "
     "mnemo/storage/postgres/text_index.py, analysed)"},
    {"unpack_places", unpack_places, METH_VARARGS,
     "unpack_places(data, postings) -> (counts, places) | None (see mnemo/storage/postgres/text_index.py)"},
    {"phrase_starts", phrase_starts, METH_O,
     "phrase_starts(columns) -> (found, unknown, lengths) | None (see mnemo/storage/postgres/text_phrases.py)"},
    {"count_terms", count_terms, METH_O,
     "count_terms(text) -> (length, {term: count}) | None (see mnemo/recall/analysis.py, counted)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
#ifdef HAVE_SHA_NI
    detect_cpu();
#endif
    if (sha256_init() < 0) return NULL;
    if (PyType_Ready(&PostingsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyType_Ready(&VocabType) < 0 || PyModule_AddObjectRef(m, "Postings", (PyObject *)&PostingsType) < 0 ||
        PyModule_AddObjectRef(m, "Vocabulary", (PyObject *)&VocabType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
