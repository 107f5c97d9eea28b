/* tandem serve: errors, byte buffers, clocks, data-type names. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/sv.h"

/* ---- errors ---------------------------------------------------------------------------- */

/* Returned when even the error cannot be allocated; never freed, never written. */
static sv_error oom_error = {500, (char *)"out of memory"};

static sv_error *err_v(int http, const char *fmt, va_list ap) {
    char tmp[1024];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    size_t n = strlen(tmp);
    sv_error *e = malloc(sizeof *e + n + 1);
    if (!e) return &oom_error;
    e->http = http;
    e->msg = (char *)(e + 1);
    memcpy(e->msg, tmp, n + 1);
    return e;
}

sv_error *sv_err(int http, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sv_error *e = err_v(http, fmt, ap);
    va_end(ap);
    return e;
}

sv_error *sv_err_status(int http, tdm_status *st, const char *context) {
    sv_error *e = sv_err(http, "%s%s%s", context ? context : "", context ? ": " : "",
                         tdm_status_message(st));
    tdm_status_free(st);
    return e;
}

void sv_error_free(sv_error *e) {
    if (e != &oom_error) free(e);
}

/* ---- buffer ---------------------------------------------------------------------------- */

bool sv_buf_reserve(sv_buf *b, size_t extra) {
    if (b->oom) return false;
    if (extra > SIZE_MAX - b->len - 1) {
        b->oom = true;
        return false;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void sv_buf_add(sv_buf *b, const void *data, size_t n) {
    if (!sv_buf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sv_buf_str(sv_buf *b, const char *s) { sv_buf_add(b, s, strlen(s)); }

void sv_buf_printf(sv_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sv_buf_add(b, tmp, (size_t)n);
        return;
    }
    if (!sv_buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static size_t utf8_seq(const unsigned char *s, size_t n);

void sv_buf_json_str(sv_buf *b, const char *s, size_t n) {
    if (!sv_buf_reserve(b, n + 2)) return;
    b->p[b->len++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sv_buf_add(b, esc, 2);
        } else if (c < 0x20) {
            char esc[8];
            switch (c) {
            case '\n': memcpy(esc, "\\n", 3); break;
            case '\r': memcpy(esc, "\\r", 3); break;
            case '\t': memcpy(esc, "\\t", 3); break;
            default: snprintf(esc, sizeof esc, "\\u%04x", c); break;
            }
            sv_buf_str(b, esc);
        } else if (c < 0x80) {
            sv_buf_add(b, &s[i], 1);
        } else {
            /* valid UTF-8 as it is; any other byte becomes U+FFFD, so that the answer is
             * always valid JSON (names and messages can carry bytes from files and URLs) */
            size_t len = utf8_seq((const unsigned char *)s + i, n - i);
            if (len) {
                sv_buf_add(b, &s[i], len);
                i += len - 1;
            } else {
                sv_buf_str(b, "\\ufffd");
            }
        }
    }
    sv_buf_add(b, "\"", 1);
}

char *sv_buf_take(sv_buf *b, size_t *len) {
    if (b->oom || !sv_buf_reserve(b, 0)) {
        sv_buf_free(b);
        return NULL;
    }
    char *p = b->p;
    if (len) *len = b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}

void sv_buf_free(sv_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}

/* ---- clocks ---------------------------------------------------------------------------- */

uint64_t sv_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t sv_wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

/* ---- data types (one table for both naming schemes) --------------------------------------- */

#define SV_DTYPES(X)                                                                      \
    X(TDM_BOOL, "BOOL", "TYPE_BOOL", 1)                                                   \
    X(TDM_UINT8, "UINT8", "TYPE_UINT8", 1)                                                \
    X(TDM_UINT16, "UINT16", "TYPE_UINT16", 2)                                             \
    X(TDM_UINT32, "UINT32", "TYPE_UINT32", 4)                                             \
    X(TDM_UINT64, "UINT64", "TYPE_UINT64", 8)                                             \
    X(TDM_INT8, "INT8", "TYPE_INT8", 1)                                                   \
    X(TDM_INT16, "INT16", "TYPE_INT16", 2)                                                \
    X(TDM_INT32, "INT32", "TYPE_INT32", 4)                                                \
    X(TDM_INT64, "INT64", "TYPE_INT64", 8)                                                \
    X(TDM_FLOAT16, "FP16", "TYPE_FP16", 2)                                                \
    X(TDM_FLOAT, "FP32", "TYPE_FP32", 4)                                                  \
    X(TDM_DOUBLE, "FP64", "TYPE_FP64", 8)                                                 \
    X(TDM_STRING, "BYTES", "TYPE_STRING", 0)                                              \
    X(TDM_BFLOAT16, "BF16", "TYPE_BF16", 2)

typedef struct dtype_row {
    tdm_dtype dtype;
    const char *v2, *cfg;
    size_t size;
} dtype_row;

static const dtype_row dtype_rows[] = {
#define SV_X_(d, v2, cfg, size) {d, v2, cfg, size},
    SV_DTYPES(SV_X_)
#undef SV_X_
};
#define N_DTYPE_ROWS (sizeof dtype_rows / sizeof dtype_rows[0])

tdm_dtype sv_dtype_from_v2(const char *name) {
    for (size_t i = 0; name && i < N_DTYPE_ROWS; i++)
        if (!strcmp(dtype_rows[i].v2, name)) return dtype_rows[i].dtype;
    return TDM_UNDEFINED;
}

const char *sv_dtype_v2_name(tdm_dtype d) {
    for (size_t i = 0; i < N_DTYPE_ROWS; i++)
        if (dtype_rows[i].dtype == d) return dtype_rows[i].v2;
    return "";
}

tdm_dtype sv_dtype_from_config(const char *name) {
    for (size_t i = 0; name && i < N_DTYPE_ROWS; i++)
        if (!strcmp(dtype_rows[i].cfg, name)) return dtype_rows[i].dtype;
    return TDM_UNDEFINED;
}

const char *sv_dtype_config_name(tdm_dtype d) {
    for (size_t i = 0; i < N_DTYPE_ROWS; i++)
        if (dtype_rows[i].dtype == d) return dtype_rows[i].cfg;
    return "TYPE_INVALID";
}

size_t sv_dtype_wire_size(tdm_dtype d) {
    for (size_t i = 0; i < N_DTYPE_ROWS; i++)
        if (dtype_rows[i].dtype == d) return dtype_rows[i].size;
    return 0;
}

/* IEEE half precision, round to nearest even. */
uint16_t sv_float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0u));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        int shift = 14 - e;
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++; /* may carry into exp: ok */
    return (uint16_t)(sign | half);
}

float sv_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (!man) {
            x = sign;
        } else {
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7f800000u | (man << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t sv_float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float sv_bf16_to_float(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* ---- misc -------------------------------------------------------------------------------- */

char *sv_strndup(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *sv_strdup(const char *s) { return s ? sv_strndup(s, strlen(s)) : NULL; }

bool sv_parse_i64(const char *s, int64_t *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool sv_shape_count(int rank, const int64_t *dims, int64_t *count) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return false;
        if (__builtin_mul_overflow(n, dims[i], &n)) return false;
    }
    *count = n;
    return true;
}

/* Length of the valid UTF-8 sequence at s (n > 0 bytes available), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) {
        len = 2;
        cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3;
        cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

bool sv_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(s + i, n - i);
        if (!len) return false;
        i += len;
    }
    return true;
}

int sv_json_depth(const char *s, size_t n, int limit) {
    int depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max && (max = depth) > limit) return max;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return max;
}
