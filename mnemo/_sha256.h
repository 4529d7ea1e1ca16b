/* The SHA-256 the C extensions hash with: OpenSSL's, fetched once when the module is imported, so that
 * no digest looks it up again (with EVP_sha256(), OpenSSL 3 fetches it anew at every EVP_DigestInit_ex).
 *
 * Include it once, after Python.h; call sha256_init() in the module's init, before anything hashes.
 */
#ifndef MNEMO_SHA256_H
#define MNEMO_SHA256_H

#include <openssl/evp.h>

static EVP_MD *sha256_md = NULL;

/* 0, or -1 with ImportError set: without SHA-256 the module cannot check a hash, and its pure-Python twin
 * serves instead. A second init (the module imported again) keeps the digest already fetched. */
static int sha256_init(void) {
    if (sha256_md) return 0;
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (sha256_md) return 0;
    PyErr_SetString(PyExc_ImportError, "OpenSSL has no SHA-256");
    return -1;
}

#endif
