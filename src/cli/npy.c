/* NumPy .npy files: version 1.0/2.0/3.0 headers, C order, little-endian. */
#include <errno.h>
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

#define FAIL(msg)                                                                        \
    do {                                                                                 \
        snprintf(why, why_size, "%s: %s", path, (msg));                                 \
        rc = -1;                                                                         \
        goto done;                                                                       \
    } while (0)

int npy_read(tdm_env *env, const char *path, tdm_tensor **out, char *why, size_t why_size) {
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
    if (dt == TDM_UNDEFINED) FAIL("unsupported dtype (big-endian, object or string arrays are not read)");
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

int npy_write(const char *path, const tdm_tensor *t, char *why, size_t why_size) {
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (npy_types[i].dt == tdm_tensor_dtype(t)) descr = npy_types[i].descr;
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
    fwrite(tdm_tensor_data_const(t), 1, tdm_tensor_byte_size(t), f);
    if (fclose(f) != 0) {
        snprintf(why, why_size, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
