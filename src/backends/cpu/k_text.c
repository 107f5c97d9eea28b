/* CPU kernels: text family. StringNormalizer is here; TfIdfVectorizer is in k_text_tfidf.c.
 *
 * Case mapping works on UTF-8 code points and covers ASCII, Latin-1, Latin Extended-A,
 * Greek and Cyrillic (the locale attribute is not consulted). Bytes that are not valid
 * UTF-8 pass through unchanged. */
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"

tdm_status *tdm_text_run_tfidf(tdm_kernel_ctx *ctx);

/* Decodes one code point from s (n bytes left); returns its byte length (>= 1), with
 * *cp = -1 for a byte that does not start a valid sequence. */
static int utf8_decode(const unsigned char *s, size_t n, int32_t *cp) {
    unsigned char c = s[0];
    int len;
    int32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2;
        v = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3;
        v = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4;
        v = c & 0x07;
    } else {
        *cp = -1;
        return 1;
    }
    if ((size_t)len > n) {
        *cp = -1;
        return 1;
    }
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *cp = -1;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3f);
    }
    static const int32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_for_len[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
        *cp = -1;
        return 1;
    }
    *cp = v;
    return len;
}

static int utf8_encode(int32_t cp, unsigned char *out) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xc0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* In Latin Extended-A, the case pairs are (even upper, odd lower) in 0100-0137 and
 * 014A-0177, (odd upper, even lower) in 0139-0148 and 0179-017E. */
static bool latin_ext_pair(int32_t cp, bool *upper) {
    if ((cp >= 0x100 && cp <= 0x137 && cp != 0x130 && cp != 0x131) || (cp >= 0x14a && cp <= 0x177)) {
        *upper = (cp & 1) == 0;
        return true;
    }
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e)) {
        *upper = (cp & 1) == 1;
        return true;
    }
    return false;
}

static int32_t to_lower(int32_t cp) {
    bool up;
    if (cp >= 'A' && cp <= 'Z') return cp + 32;
    if (cp < 0x80) return cp;
    if (cp >= 0xc0 && cp <= 0xde && cp != 0xd7) return cp + 32;
    if (cp == 0x178) return 0xff;
    if (cp == 0x130) return 'i';
    if (latin_ext_pair(cp, &up)) return up ? cp + 1 : cp;
    if (cp >= 0x391 && cp <= 0x3a9 && cp != 0x3a2) return cp + 32;
    if (cp >= 0x410 && cp <= 0x42f) return cp + 32;
    if (cp >= 0x400 && cp <= 0x40f) return cp + 80;
    return cp;
}

static int32_t to_upper(int32_t cp) {
    bool up;
    if (cp >= 'a' && cp <= 'z') return cp - 32;
    if (cp < 0x80) return cp;
    if (cp >= 0xe0 && cp <= 0xfe && cp != 0xf7) return cp - 32;
    if (cp == 0xff) return 0x178;
    if (cp == 0x131) return 'I';
    if (latin_ext_pair(cp, &up)) return up ? cp : cp - 1;
    if (cp == 0x3c2) return 0x3a3; /* final sigma */
    if (cp >= 0x3b1 && cp <= 0x3c9) return cp - 32;
    if (cp >= 0x430 && cp <= 0x44f) return cp - 32;
    if (cp >= 0x450 && cp <= 0x45f) return cp - 80;
    return cp;
}

enum { CASE_NONE, CASE_LOWER, CASE_UPPER };

/* Case-maps s into a new string from `a` (NULL when out of memory). Mapped code points
 * never need more bytes than the originals, so the result fits in strlen(s) + 1. */
static char *map_case(const tdm_allocator *a, const char *s, int action) {
    size_t n = strlen(s);
    unsigned char *out = tdm_alloc(a, n + 1);
    if (!out) return NULL;
    if (action == CASE_NONE) {
        memcpy(out, s, n + 1);
        return (char *)out;
    }
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        int32_t cp;
        int len = utf8_decode(p + i, n - i, &cp);
        int32_t m = cp < 0 ? cp : action == CASE_LOWER ? to_lower(cp) : to_upper(cp);
        unsigned char buf[4];
        int olen = m < 0 ? 0 : utf8_encode(m, buf);
        if (m < 0 || olen > len) { /* invalid byte, or (not expected) a longer mapping */
            memcpy(out + o, p + i, (size_t)len);
            o += (size_t)len;
        } else {
            memcpy(out + o, buf, (size_t)olen);
            o += (size_t)olen;
        }
        i += (size_t)len;
    }
    out[o] = 0;
    return (char *)out;
}

/* Case-insensitive equality through the lower-case mapping. */
static bool equal_nocase(const char *x, const char *y) {
    const unsigned char *p = (const unsigned char *)x, *q = (const unsigned char *)y;
    size_t n = strlen(x), m = strlen(y), i = 0, j = 0;
    while (i < n && j < m) {
        int32_t a, b;
        int la = utf8_decode(p + i, n - i, &a), lb = utf8_decode(q + j, m - j, &b);
        if (a < 0 || b < 0) {
            if (a != b || p[i] != q[j]) return false;
        } else if (to_lower(a) != to_lower(b)) {
            return false;
        }
        i += (size_t)la;
        j += (size_t)lb;
    }
    return i == n && j == m;
}

static tdm_status *run_string_normalizer(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *x = ctx->in[0];
    if (x->dtype != TDM_STRING || (x->rank != 1 && x->rank != 2) ||
        (x->rank == 2 && x->dims[0] != 1))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "input must be a string tensor of shape [C] or [1, C]");
    const char *act = tdm_attr_string(node, "case_change_action", "NONE");
    int action = !strcmp(act, "LOWER") ? CASE_LOWER : !strcmp(act, "UPPER") ? CASE_UPPER : CASE_NONE;
    bool sensitive = tdm_attr_int(node, "is_case_sensitive", 0) != 0;
    const tdm_attr *sw = tdm_node_attr(node, "stopwords");
    size_t n_sw = sw && sw->type == TDM_ATTR_STRINGS ? sw->n : 0;
    char *const *in = x->data;

    bool *keep = tdm_kscratch(ctx, (size_t)(x->count > 0 ? x->count : 1));
    if (!keep) return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    int64_t kept = 0;
    for (int64_t i = 0; i < x->count; i++) {
        const char *s = in[i] ? in[i] : "";
        bool stop = false;
        for (size_t k = 0; k < n_sw && !stop; k++)
            stop = sensitive ? !strcmp(s, sw->strings[k]) : equal_nocase(s, sw->strings[k]);
        keep[i] = !stop;
        kept += !stop;
    }
    int64_t dims[2] = {1, kept > 0 ? kept : 1};
    tdm_status *st = x->rank == 2 ? ctx->alloc_output(ctx, 0, TDM_STRING, 2, dims)
                                  : ctx->alloc_output(ctx, 0, TDM_STRING, 1, dims + 1);
    if (!st) {
        tdm_tensor *y = ctx->out[0];
        char **out = y->data;
        int64_t o = 0;
        for (int64_t i = 0; i < x->count && !st; i++) {
            if (!keep[i]) continue;
            out[o] = map_case(y->alloc, in[i] ? in[i] : "", action);
            if (!out[o++]) st = tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
        }
        if (!st && kept == 0) {
            out[0] = tdm_strdup(y->alloc, "");
            if (!out[0]) st = tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    tdm_free(ctx->alloc, keep);
    return st;
}

const tdm_kernel_def tdm_cpu_kernels_text[] = {
    {"", "StringNormalizer", 10, 0, 0, TDM_T(TDM_STRING), run_string_normalizer, NULL, NULL},
    {"", "TfIdfVectorizer", 9, 0, 0, TDM_T(TDM_STRING) | TDM_T(TDM_INT32) | TDM_T(TDM_INT64),
     tdm_text_run_tfidf, NULL, NULL},
};
const int tdm_cpu_kernels_text_count = (int)(sizeof tdm_cpu_kernels_text / sizeof tdm_cpu_kernels_text[0]);
