/* NumPy .npy files: version 1.0/2.0/3.0 headers, C order, little-endian. */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *descr;
    tdm_dtype dt;
} npy_types[] = {
    {"<f4", TDM_FLOAT}, {"<f8", TDM_DOUBLE}, {"<f2", TDM_FLOAT16}, {"|i1", TDM_INT8},
    {"|u1", TDM_UINT8}, {"<i2", TDM_INT16}, {"<u2", TDM_UINT16}, {"<i4", TDM_INT32},
    {"<u4", TDM_UINT32}, {"<i8", TDM_INT64}, {"<u8", TDM_UINT64}, {"|b1", TDM_BOOL},
    {"<c8", TDM_COMPLEX64}, {"<c16", TDM_COMPLEX128},
};

/* ---- string arrays: numpy's 'U' (UTF-32LE, N code points an element, NUL-padded) and 'S'
 * (N bytes an element) ---- */

/* Decodes one UTF-8 sequence at s (n bytes left): its code point and length, or -1. */
static int32_t utf8_next(const unsigned char *s, size_t n, int *len) {
    if (s[0] < 0x80) return *len = 1, s[0];
    int k = s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    if (!k || (size_t)k > n || s[0] >= 0xf8) return -1;
    int32_t c = s[0] & (0x7f >> k);
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return -1;
        c = c << 6 | (s[i] & 0x3f);
    }
    static const int32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[k] || c > 0x10ffff || (c >= 0xd800 && c < 0xe000)) return -1;
    *len = k;
    return c;
}

/* Code points of a UTF-8 string, or -1 when it is not UTF-8. */
static int64_t utf8_count(const char *s) {
    int64_t n = 0;
    size_t left = strlen(s);
    const unsigned char *p = (const unsigned char *)s;
    while (left) {
        int len = 0;
        if (utf8_next(p, left, &len) < 0) return -1;
        p += len, left -= (size_t)len, n++;
    }
    return n;
}

static size_t utf8_put(int32_t c, char *out) {
    if (c < 0x80) return out[0] = (char)c, 1;
    if (c < 0x800) return out[0] = (char)(0xc0 | c >> 6), out[1] = (char)(0x80 | (c & 63)), 2;
    if (c < 0x10000)
        return out[0] = (char)(0xe0 | c >> 12), out[1] = (char)(0x80 | (c >> 6 & 63)),
               out[2] = (char)(0x80 | (c & 63)), 3;
    out[0] = (char)(0xf0 | c >> 18), out[1] = (char)(0x80 | (c >> 12 & 63));
    out[2] = (char)(0x80 | (c >> 6 & 63)), out[3] = (char)(0x80 | (c & 63));
    return 4;
}

/* Reads count elements of width w ('U': code points, 'S': bytes) into the string tensor t. */
static int read_strings(FILE *f, tdm_tensor *t, char kind, int64_t w, char *why, size_t why_size,
                        const char *path) {
    size_t esize = (size_t)w * (kind == 'U' ? 4 : 1);
    unsigned char *buf = malloc(esize + 1);
    char *text = malloc((size_t)w * 4 + 1);
    int rc = 0;
    for (int64_t i = 0; buf && text && i < tdm_tensor_element_count(t) && !rc; i++) {
        if (esize && fread(buf, 1, esize, f) != esize) {
            snprintf(why, why_size, "%s: data shorter than the shape says", path);
            rc = -1;
            break;
        }
        size_t len = 0;
        for (int64_t k = 0; k < w; k++) {
            if (kind == 'S') {
                text[len++] = (char)buf[k];
                continue;
            }
            uint32_t c = buf[4 * k] | (uint32_t)buf[4 * k + 1] << 8 | (uint32_t)buf[4 * k + 2] << 16 |
                         (uint32_t)buf[4 * k + 3] << 24;
            if (c > 0x10ffff || (c >= 0xd800 && c < 0xe000)) {
                snprintf(why, why_size, "%s: element %lld holds U+%X, not a character", path,
                         (long long)i, (unsigned)c);
                rc = -1;
                break;
            }
            len += utf8_put((int32_t)c, text + len);
        }
        while (len && !text[len - 1]) len--; /* numpy pads with NULs */
        tdm_status *st = rc ? NULL : tdm_tensor_set_string(t, i, text, len);
        if (st) {
            snprintf(why, why_size, "%s: %s", path, tdm_status_message(st));
            tdm_status_free(st);
            rc = -1;
        }
    }
    if (!buf || !text) {
        snprintf(why, why_size, "%s: out of memory", path);
        rc = -1;
    }
    free(buf);
    free(text);
    return rc;
}

#define FAIL(msg)                                                                        \
    do {                                                                                 \
        snprintf(why, why_size, "%s: %s", path, (msg));                                 \
        rc = -1;                                                                         \
        goto done;                                                                       \
    } while (0)

static int npy_read_tensor(tdm_env *env, const char *path, tdm_tensor **out, char *why,
                           size_t why_size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_size, "%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    unsigned char magic[10];
    tdm_status *st = NULL;
    char *header = NULL;
    unsigned char b[4];
    tdm_tensor *t = NULL;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "\x93NUMPY", 6)) FAIL("not a .npy file");
    uint32_t hlen;
    if (magic[6] == 1) {
        if (fread(b, 1, 2, f) != 2) FAIL("truncated header");
        hlen = b[0] | (uint32_t)b[1] << 8;
    } else {
        if (fread(b, 1, 4, f) != 4) FAIL("truncated header");
        hlen = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    }
    if (hlen > 1 << 20) FAIL("header too large");
    header = calloc(1, hlen + 1);
    if (!header || fread(header, 1, hlen, f) != hlen) FAIL("truncated header");
    char *descr = strstr(header, "'descr'");
    char *fo = strstr(header, "'fortran_order'");
    char *shape = strstr(header, "'shape'");
    if (!descr || !fo || !shape) FAIL("malformed header");
    char *q1 = strchr(descr + 7, '\'');
    char *q2 = q1 ? strchr(q1 + 1, '\'') : NULL;
    if (!q2) FAIL("malformed descr");
    *q2 = 0;
    const char *ds = q1 + 1;
    if (!strcmp(ds, "<i1") || !strcmp(ds, "i1")) ds = "|i1";
    if (!strcmp(ds, "<u1") || !strcmp(ds, "u1")) ds = "|u1";
    if (!strcmp(ds, "<b1") || !strcmp(ds, "?") || !strcmp(ds, "|?")) ds = "|b1";
    tdm_dtype dt = TDM_UNDEFINED;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (!strcmp(npy_types[i].descr, ds)) dt = npy_types[i].dt;
    char str_kind = 0; /* 'U' / 'S': a string array of str_width characters / bytes */
    int64_t str_width = 0;
    if ((ds[0] == '<' || ds[0] == '|') && (ds[1] == 'U' || ds[1] == 'S')) {
        char *end;
        str_width = strtoll(ds + 2, &end, 10);
        if (end == ds + 2 || *end || str_width < 0 || str_width > (1 << 24))
            FAIL("malformed string dtype");
        if (ds[1] == 'U' && ds[0] != '<') FAIL("unsupported dtype (big-endian)");
        str_kind = ds[1];
        dt = TDM_STRING;
    }
    if (dt == TDM_UNDEFINED) FAIL("unsupported dtype (big-endian or object arrays are not read)");
    if (strstr(fo, "True") && strstr(fo, "True") < shape + 1000 && strstr(fo, "True") - fo < 24) FAIL("Fortran-order arrays are not supported");
    char *p = strchr(shape, '(');
    if (!p) FAIL("malformed shape");
    p++;
    int64_t dims[TDM_MAX_RANK];
    int rank = 0;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || rank == TDM_MAX_RANK) FAIL("malformed or too many dims");
        dims[rank++] = v;
        p = end;
    }
    if ((st = tdm_tensor_create(env, dt, rank, dims, &t))) {
        snprintf(why, why_size, "%s: %s", path, tdm_status_message(st));
        tdm_status_free(st);
        FAIL("cannot create the tensor");
    }
    if (str_kind) {
        if (read_strings(f, t, str_kind, str_width, why, why_size, path)) {
            tdm_tensor_free(t);
            t = NULL;
            rc = -1;
            goto done;
        }
        *out = t;
        goto done;
    }
    size_t n = tdm_tensor_byte_size(t);
    if (n && fread(tdm_tensor_data(t), 1, n, f) != n) {
        tdm_tensor_free(t);
        t = NULL;
        FAIL("data shorter than the shape says");
    }
    *out = t;
done:
    free(header);
    fclose(f);
    return rc;
}

/* Writes a string tensor's elements: 'U' (UTF-32LE, w code points each) or 'S' (w bytes). */
static void write_strings(FILE *f, const tdm_tensor *t, char kind, int64_t w) {
    char *const *s = tdm_tensor_data_const(t);
    for (int64_t i = 0; i < tdm_tensor_element_count(t); i++) {
        const char *e = s[i] ? s[i] : "";
        size_t left = strlen(e);
        const unsigned char *p = (const unsigned char *)e;
        int64_t k = 0;
        for (; left && k < w; k++) {
            int len = 1;
            uint32_t c = kind == 'U' ? (uint32_t)utf8_next(p, left, &len) : p[0];
            if (kind == 'U') {
                unsigned char b[4] = {(unsigned char)c, (unsigned char)(c >> 8),
                                      (unsigned char)(c >> 16), (unsigned char)(c >> 24)};
                fwrite(b, 1, 4, f);
            } else {
                fputc((int)c, f);
            }
            p += len, left -= (size_t)len;
        }
        for (; k < w; k++)
            for (int z = 0; z < (kind == 'U' ? 4 : 1); z++) fputc(0, f);
    }
}

static int npy_write_tensor(const char *path, const tdm_tensor *t, char *why, size_t why_size) {
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (npy_types[i].dt == tdm_tensor_dtype(t)) descr = npy_types[i].descr;
    char str_descr[32], str_kind = 0;
    int64_t str_width = 1; /* numpy's narrowest string dtype is one wide */
    if (tdm_tensor_dtype(t) == TDM_STRING) { /* 'U' when every element is UTF-8, else 'S' bytes */
        char *const *s = tdm_tensor_data_const(t);
        str_kind = 'U';
        for (int64_t i = 0; i < tdm_tensor_element_count(t); i++) {
            int64_t n = utf8_count(s[i] ? s[i] : "");
            if (n < 0) str_kind = 'S';
            if (n > str_width) str_width = n;
        }
        if (str_kind == 'S') {
            str_width = 1;
            for (int64_t i = 0; i < tdm_tensor_element_count(t); i++) {
                int64_t n = s[i] ? (int64_t)strlen(s[i]) : 0;
                if (n > str_width) str_width = n;
            }
        }
        snprintf(str_descr, sizeof str_descr, "%c%c%lld", str_kind == 'U' ? '<' : '|', str_kind,
                 (long long)str_width);
        descr = str_descr;
    }
    if (!descr) {
        snprintf(why, why_size, "%s: %s tensors cannot be written as .npy", path,
                 tdm_dtype_name(tdm_tensor_dtype(t)));
        return -1;
    }
    char shape[512];
    size_t pos = 0;
    int r = tdm_tensor_rank(t);
    pos += (size_t)snprintf(shape + pos, sizeof shape - pos, "(");
    for (int i = 0; i < r; i++)
        pos += (size_t)snprintf(shape + pos, sizeof shape - pos, "%lld,%s",
                                (long long)tdm_tensor_dims(t)[i], i + 1 < r ? " " : "");
    if (r > 1) pos--; /* numpy writes (2, 3) but (2,) */
    snprintf(shape + pos, sizeof shape - pos, ")");
    char header[700];
    int hl = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      descr, shape);
    int total = 10 + hl + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(why, why_size, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    uint16_t len = (uint16_t)(hl + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned char lb[2] = {(unsigned char)(len & 255), (unsigned char)(len >> 8)};
    fwrite(lb, 1, 2, f);
    fwrite(header, 1, (size_t)hl, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    if (str_kind) write_strings(f, t, str_kind, str_width);
    else fwrite(tdm_tensor_data_const(t), 1, tdm_tensor_byte_size(t), f);
    if (fclose(f) != 0) {
        snprintf(why, why_size, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- sequences, maps, optionals as folders ----
 * A sequence is a folder of its items named by index: 0.npy, 1.npy, ... (items that are
 * containers: folders 0/, 1/, ...). A map is a folder with keys.npy (int64 keys) or keys.txt
 * (string keys, one a line) and values.npy. An optional is its element, or nothing when
 * empty. */

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool file_there(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int status_why(tdm_status *st, char *why, size_t why_size) {
    snprintf(why, why_size, "%s", tdm_status_message(st));
    tdm_status_free(st);
    return -1;
}

static int read_string_keys(tdm_env *env, const char *path, tdm_tensor **out, char *why,
                            size_t why_size) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, why_size, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[4096];
    int64_t n = 0;
    while (fgets(line, sizeof line, f)) n++;
    rewind(f);
    tdm_status *st = tdm_tensor_create(env, TDM_STRING, 1, &n, out);
    for (int64_t i = 0; !st && i < n && fgets(line, sizeof line, f); i++) {
        size_t len = strcspn(line, "\n");
        st = tdm_tensor_set_string(*out, i, line, len);
    }
    fclose(f);
    if (st) {
        tdm_tensor_free(*out);
        *out = NULL;
        return status_why(st, why, why_size);
    }
    return 0;
}

static int read_container(tdm_env *env, const char *dir, tdm_tensor **out, char *why,
                          size_t why_size, int depth) {
    char p[4096];
    if (depth > 8) {
        snprintf(why, why_size, "%s: folders nested too deeply", dir);
        return -1;
    }
    snprintf(p, sizeof p, "%.4000s/values.npy", dir);
    if (file_there(p)) { /* a map */
        tdm_tensor *keys = NULL, *vals = NULL;
        if (npy_read_tensor(env, p, &vals, why, why_size)) return -1;
        snprintf(p, sizeof p, "%.4000s/keys.npy", dir);
        int rc = file_there(p) ? npy_read_tensor(env, p, &keys, why, why_size)
                               : (snprintf(p, sizeof p, "%.4000s/keys.txt", dir),
                                  read_string_keys(env, p, &keys, why, why_size));
        tdm_status *st = rc ? NULL : tdm_map_create(env, keys, vals, out);
        if (rc || st) {
            tdm_tensor_free(keys);
            tdm_tensor_free(vals);
            return rc ? rc : status_why(st, why, why_size);
        }
        return 0;
    }
    size_t n = 0;
    for (;; n++) { /* items 0.npy / 0/, 1.npy / 1/, ... up to the first missing index */
        snprintf(p, sizeof p, "%.4000s/%zu.npy", dir, n);
        if (file_there(p)) continue;
        snprintf(p, sizeof p, "%.4000s/%zu", dir, n);
        if (!is_dir(p)) break;
    }
    tdm_tensor **items = calloc(n ? n : 1, sizeof *items);
    if (!items) {
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        snprintf(p, sizeof p, "%.4000s/%zu.npy", dir, i);
        if (file_there(p)) {
            rc = npy_read_tensor(env, p, &items[i], why, why_size);
        } else {
            snprintf(p, sizeof p, "%.4000s/%zu", dir, i);
            rc = read_container(env, p, &items[i], why, why_size, depth + 1);
        }
    }
    tdm_status *st = rc ? NULL : tdm_sequence_create(env, n, items, out);
    if (st) rc = status_why(st, why, why_size);
    if (rc)
        for (size_t i = 0; i < n; i++) tdm_tensor_free(items[i]);
    free(items);
    return rc;
}

int npy_read(tdm_env *env, const char *path, tdm_tensor **out, char *why, size_t why_size) {
    if (is_dir(path)) return read_container(env, path, out, why, why_size, 0);
    return npy_read_tensor(env, path, out, why, why_size);
}

static int write_value(const char *base, const tdm_tensor *t, char *why, size_t why_size) {
    char p[4096];
    tdm_dtype dt = tdm_tensor_dtype(t);
    if (dt == TDM_OPTIONAL) {
        const tdm_tensor *e = tdm_value_item(t, 0);
        return e ? write_value(base, e, why, why_size) : 0;
    }
    if (dt != TDM_SEQUENCE && dt != TDM_MAP) {
        snprintf(p, sizeof p, "%.4000s.npy", base);
        return npy_write_tensor(p, t, why, why_size);
    }
    if (mkdir(base, 0777) != 0 && errno != EEXIST) {
        snprintf(why, why_size, "cannot create '%s': %s", base, strerror(errno));
        return -1;
    }
    if (dt == TDM_MAP) {
        const tdm_tensor *keys = tdm_value_item(t, 0), *vals = tdm_value_item(t, 1);
        snprintf(p, sizeof p, "%.4000s/values", base);
        if (write_value(p, vals, why, why_size)) return -1;
        if (tdm_tensor_dtype(keys) != TDM_STRING) {
            snprintf(p, sizeof p, "%.4000s/keys", base);
            return write_value(p, keys, why, why_size);
        }
        snprintf(p, sizeof p, "%.4000s/keys.txt", base);
        FILE *f = fopen(p, "w");
        if (!f) {
            snprintf(why, why_size, "cannot write '%s': %s", p, strerror(errno));
            return -1;
        }
        char *const *s = tdm_tensor_data_const(keys);
        for (int64_t i = 0; i < tdm_tensor_element_count(keys); i++)
            fprintf(f, "%s\n", s[i] ? s[i] : "");
        return fclose(f) == 0 ? 0 : -1;
    }
    for (size_t i = 0; i < tdm_value_item_count(t); i++) {
        snprintf(p, sizeof p, "%.4000s/%zu", base, i);
        if (write_value(p, tdm_value_item(t, i), why, why_size)) return -1;
    }
    return 0;
}

int npy_write(const char *path, const tdm_tensor *t, char *why, size_t why_size) {
    tdm_dtype dt = tdm_tensor_dtype(t);
    if (dt != TDM_SEQUENCE && dt != TDM_MAP && dt != TDM_OPTIONAL)
        return npy_write_tensor(path, t, why, why_size);
    /* PATH.npy names the folder PATH */
    char base[4096];
    snprintf(base, sizeof base, "%s", path);
    size_t len = strlen(base);
    if (len > 4 && !strcmp(base + len - 4, ".npy")) base[len - 4] = 0;
    return write_value(base, t, why, why_size);
}
