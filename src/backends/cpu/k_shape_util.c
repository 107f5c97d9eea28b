/* CPU kernels, shape family: shared helpers (strided gather-copy, string ownership,
 * scalar stores and fills). */
#include <string.h>

#include "backends/cpu/k_shape.h"
#include "core/alloc.h"

/* ---- strided copy --------------------------------------------------------------------- */

typedef struct sc_job {
    size_t es;
    int rank; /* >= 1 after simplification */
    int64_t dims[TDM_MAX_RANK];
    int64_t ss[TDM_MAX_RANK]; /* source strides, elements */
    const char *src;
    char *dst;
    int64_t nrb; /* block mode: row blocks per batch */
} sc_job;

#define SC_BLOCK 32

/* dst[i] = src[i * s] for i < n, elements of es bytes. */
static void copy_row(char *dst, const char *src, int64_t n, int64_t s, size_t es) {
    if (s == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
#define ROW_(T)                                                                          \
    do {                                                                                 \
        T *d_ = (T *)(void *)dst;                                                        \
        const T *p_ = (const T *)(const void *)src;                                      \
        for (int64_t i_ = 0; i_ < n; i_++) d_[i_] = p_[i_ * s];                          \
    } while (0)
    switch (es) {
    case 1: ROW_(uint8_t); break;
    case 2: ROW_(uint16_t); break;
    case 4: ROW_(uint32_t); break;
    case 8: ROW_(uint64_t); break;
    default:
        for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * es, src + (i * s) * (int64_t)es, es);
    }
#undef ROW_
}

static void sc_rows(void *arg, int64_t b, int64_t e) {
    const sc_job *j = arg;
    int r = j->rank;
    int64_t L = j->dims[r - 1], s = j->ss[r - 1];
    int64_t idx[TDM_MAX_RANK] = {0};
    int64_t rem = b, off = 0;
    for (int k = r - 2; k >= 0; k--) {
        idx[k] = rem % j->dims[k];
        rem /= j->dims[k];
        off += idx[k] * j->ss[k];
    }
    size_t rowb = (size_t)L * j->es;
    char *dst = j->dst + (size_t)b * rowb;
    for (int64_t row = b; row < e; row++) {
        copy_row(dst, j->src + off * (int64_t)j->es, L, s, j->es);
        dst += rowb;
        for (int k = r - 2; k >= 0; k--) {
            off += j->ss[k];
            if (++idx[k] < j->dims[k]) break;
            off -= j->ss[k] * j->dims[k];
            idx[k] = 0;
        }
    }
}

/* Block mode: the last two dims form R x C tiles with source strides 1 (rows) and s
 * (columns): a batched 2-D transpose. Items are (batch, block of SC_BLOCK rows). */
static void sc_blocks(void *arg, int64_t b, int64_t e) {
    const sc_job *j = arg;
    int r = j->rank;
    int64_t R = j->dims[r - 2], C = j->dims[r - 1], s = j->ss[r - 1];
    size_t es = j->es;
    for (int64_t it = b; it < e; it++) {
        int64_t batch = it / j->nrb, rb = it % j->nrb;
        int64_t off = 0, rem = batch;
        for (int k = r - 3; k >= 0; k--) {
            off += (rem % j->dims[k]) * j->ss[k];
            rem /= j->dims[k];
        }
        int64_t r0 = rb * SC_BLOCK, r1 = r0 + SC_BLOCK < R ? r0 + SC_BLOCK : R;
        const char *src = j->src + off * (int64_t)es;
        char *dst = j->dst + (size_t)(batch * R * C) * es;
        for (int64_t c0 = 0; c0 < C; c0 += SC_BLOCK) {
            int64_t c1 = c0 + SC_BLOCK < C ? c0 + SC_BLOCK : C;
#define BLK_(T)                                                                          \
    do {                                                                                 \
        T *d_ = (T *)(void *)dst;                                                        \
        const T *p_ = (const T *)(const void *)src;                                      \
        for (int64_t i_ = r0; i_ < r1; i_++)                                             \
            for (int64_t c_ = c0; c_ < c1; c_++) d_[i_ * C + c_] = p_[i_ + c_ * s];      \
    } while (0)
            switch (es) {
            case 1: BLK_(uint8_t); break;
            case 2: BLK_(uint16_t); break;
            case 4: BLK_(uint32_t); break;
            case 8: BLK_(uint64_t); break;
            default:
                for (int64_t i = r0; i < r1; i++)
                    for (int64_t c = c0; c < c1; c++)
                        memcpy(dst + (size_t)(i * C + c) * es, src + (i + c * s) * (int64_t)es, es);
            }
#undef BLK_
        }
    }
}

void tdm_kshape_strided_copy(tdm_threadpool *pool, size_t es, int rank, const int64_t *dims,
                             const void *src, const int64_t *sstrides, void *dst) {
    sc_job j = {.es = es, .src = src, .dst = dst};
    int r = 0;
    int64_t total = 1;
    for (int k = 0; k < rank; k++) {
        total *= dims[k];
        if (dims[k] == 1) continue;
        if (r > 0 && j.ss[r - 1] == sstrides[k] * dims[k]) {
            j.dims[r - 1] *= dims[k];
            j.ss[r - 1] = sstrides[k];
        } else {
            j.dims[r] = dims[k];
            j.ss[r] = sstrides[k];
            r++;
        }
    }
    if (total == 0) return;
    if (r == 0) {
        memcpy(dst, src, es);
        return;
    }
    j.rank = r;
    int64_t L = j.dims[r - 1];
    if (r >= 2 && j.ss[r - 1] != 1 && j.ss[r - 1] != 0 && j.ss[r - 2] == 1 && L >= 4 &&
        j.dims[r - 2] >= 4) {
        int64_t R = j.dims[r - 2];
        j.nrb = (R + SC_BLOCK - 1) / SC_BLOCK;
        int64_t items = total / (R * L) * j.nrb;
        int64_t per = SC_BLOCK * L;
        tdm_parallel_for(pool, items, per >= 32768 ? 1 : 32768 / per, sc_blocks, &j);
        return;
    }
    int64_t rows = total / L;
    tdm_parallel_for(pool, rows, L >= 32768 ? 1 : 32768 / L, sc_rows, &j);
}

/* ---- strings, scalars, fills ---------------------------------------------------------- */

tdm_status *tdm_kshape_own_strings(tdm_tensor *out) {
    if (!out || out->dtype != TDM_STRING) return NULL;
    char **p = out->data;
    for (int64_t i = 0; i < out->count; i++) {
        char *d = tdm_strdup(out->alloc, p[i] ? p[i] : "");
        if (!d) {
            for (int64_t k = i; k < out->count; k++) p[k] = NULL;
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory copying strings");
        }
        p[i] = d;
    }
    return NULL;
}

void tdm_kshape_store(tdm_dtype dt, void *dst, double v) {
    switch (dt) {
    case TDM_FLOAT: *(float *)dst = (float)v; break;
    case TDM_DOUBLE: *(double *)dst = v; break;
    case TDM_FLOAT16: *(uint16_t *)dst = tdm_f32_to_f16((float)v); break;
    case TDM_BFLOAT16: *(uint16_t *)dst = tdm_f32_to_bf16((float)v); break;
    case TDM_INT8: *(int8_t *)dst = (int8_t)v; break;
    case TDM_UINT8: *(uint8_t *)dst = (uint8_t)v; break;
    case TDM_INT16: *(int16_t *)dst = (int16_t)v; break;
    case TDM_UINT16: *(uint16_t *)dst = (uint16_t)v; break;
    case TDM_INT32: *(int32_t *)dst = (int32_t)v; break;
    case TDM_UINT32: *(uint32_t *)dst = (uint32_t)v; break;
    case TDM_INT64: *(int64_t *)dst = (int64_t)v; break;
    case TDM_UINT64: *(uint64_t *)dst = (uint64_t)v; break;
    case TDM_BOOL: *(uint8_t *)dst = v != 0; break;
    case TDM_COMPLEX64: ((float *)dst)[0] = (float)v; ((float *)dst)[1] = 0; break;
    case TDM_COMPLEX128: ((double *)dst)[0] = v; ((double *)dst)[1] = 0; break;
    default: break;
    }
}

void tdm_kshape_fill(void *dst, int64_t n, const void *val, size_t es) {
#define FILL_(T)                                                                         \
    do {                                                                                 \
        T v_;                                                                            \
        memcpy(&v_, val, sizeof v_);                                                     \
        T *d_ = dst;                                                                     \
        for (int64_t i_ = 0; i_ < n; i_++) d_[i_] = v_;                                  \
    } while (0)
    switch (es) {
    case 1: memset(dst, *(const uint8_t *)val, (size_t)n); break;
    case 2: FILL_(uint16_t); break;
    case 4: FILL_(uint32_t); break;
    case 8: FILL_(uint64_t); break;
    default:
        for (int64_t i = 0; i < n; i++) memcpy((char *)dst + (size_t)i * es, val, es);
    }
#undef FILL_
}

void tdm_kshape_copy_data(tdm_tensor *dst, const tdm_tensor *src) {
    size_t n = src->nbytes < dst->nbytes ? src->nbytes : dst->nbytes;
    if (n && dst->data != src->data) memcpy(dst->data, src->data, n); /* (in place: nothing) */
}

tdm_status *tdm_kshape_norm_index(const tdm_node *node, int64_t v, int64_t n, int64_t *out) {
    int64_t w = v < 0 ? v + n : v;
    if (w < 0 || w >= n)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "index %lld is out of range for an axis of size %lld", (long long)v,
                              (long long)n);
    *out = w;
    return NULL;
}
