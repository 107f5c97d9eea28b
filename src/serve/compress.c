/* tandem serve: gzip/deflate bodies (zlib), with a bound on the inflated size. */
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "serve/server.h"

sv_error *sv_inflate(const char *in, size_t len, bool gzip, size_t limit, char **out, size_t *out_len) {
    z_stream z;
    memset(&z, 0, sizeof z);
    /* 15 + 32: zlib or gzip header, detected; -15: raw deflate */
    if (inflateInit2(&z, gzip ? 15 + 32 : 15) != Z_OK) return sv_err(500, "zlib initialisation failed");
    sv_buf b = {0};
    z.next_in = (Bytef *)in;
    size_t left = len;
    int rc = Z_OK;
    bool retried_raw = false;
    while (rc != Z_STREAM_END) {
        if (!z.avail_in && left) {
            z.avail_in = left > (1u << 30) ? (1u << 30) : (uInt)left;
            left -= z.avail_in;
        }
        if (!sv_buf_reserve(&b, 65536)) {
            inflateEnd(&z);
            sv_buf_free(&b);
            return sv_err(500, "out of memory inflating the body");
        }
        z.next_out = (Bytef *)b.p + b.len;
        z.avail_out = (uInt)(b.cap - b.len - 1);
        size_t before = z.avail_out;
        rc = inflate(&z, Z_NO_FLUSH);
        b.len += before - z.avail_out;
        if (rc == Z_DATA_ERROR && !gzip && !retried_raw && z.total_out == 0) {
            /* "deflate" is meant to be zlib-wrapped, but some clients send raw deflate */
            inflateEnd(&z);
            memset(&z, 0, sizeof z);
            if (inflateInit2(&z, -15) != Z_OK) break;
            z.next_in = (Bytef *)in;
            left = len;
            b.len = 0;
            retried_raw = true;
            rc = Z_OK;
            continue;
        }
        if (b.len > limit) {
            inflateEnd(&z);
            sv_buf_free(&b);
            return sv_err(413, "the inflated request body is larger than the %zu-byte limit", limit);
        }
        if (rc == Z_STREAM_END) break;
        if (rc != Z_OK && !(rc == Z_BUF_ERROR && z.avail_out == 0)) {
            inflateEnd(&z);
            sv_buf_free(&b);
            return sv_err(400, "the %s request body is corrupt", gzip ? "gzip" : "deflate");
        }
        if (rc == Z_OK && !z.avail_in && !left && z.avail_out) {
            inflateEnd(&z);
            sv_buf_free(&b);
            return sv_err(400, "the %s request body is truncated", gzip ? "gzip" : "deflate");
        }
    }
    inflateEnd(&z);
    if (rc != Z_STREAM_END) {
        sv_buf_free(&b);
        return sv_err(400, "the %s request body is corrupt", gzip ? "gzip" : "deflate");
    }
    *out = sv_buf_take(&b, out_len);
    return *out ? NULL : sv_err(500, "out of memory");
}

sv_error *sv_deflate(const char *in, size_t len, bool gzip, char **out, size_t *out_len) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return sv_err(500, "zlib initialisation failed");
    uLong bound = deflateBound(&z, (uLong)len);
    char *buf = malloc(bound + 1);
    if (!buf) {
        deflateEnd(&z);
        return sv_err(500, "out of memory");
    }
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)len;
    z.next_out = (Bytef *)buf;
    z.avail_out = (uInt)bound;
    int rc = deflate(&z, Z_FINISH);
    size_t n = bound - z.avail_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        free(buf);
        return sv_err(500, "compressing the answer failed");
    }
    *out = buf;
    *out_len = n;
    return NULL;
}
