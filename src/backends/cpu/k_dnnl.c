/* CPU kernels: dnnl family — oneDNN fast paths for float32 Conv, FusedConv, MatMul, Gemm,
 * FusedMatMul, MaxPool and AveragePool, ConvNwc1d (k_dnnl_nwc.c), int8 QLinearConv / QConv, QConvTranspose and
 * QLinearMatMul / QMatMul, MatMulInteger and ConvInteger (k_dnnl_qconv.c, k_dnnl_qdeconv.c,
 * k_dnnl_qmatmul.c), and the
 * channel-blocked layout ops (BlockedConv, BlockedPool, ToBlocked, FromBlocked;
 * k_dnnl_layout.c). This table is searched before the
 * generic families, so its entries win; whatever a kernel cannot do goes to the generic
 * kernel (dn_fallback).
 * This file holds the table and what the op files share (k_dnnl.h): states, the per-shape
 * cache, single-threaded execution, reorders and the split of work over the thread pool. */
#include <omp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backends/backend.h"
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_dnnl.h"
#include "core/alloc.h"
#include "ops/fused.h"

#define F32 TDM_T(TDM_FLOAT)
#define Q8 (TDM_T(TDM_UINT8) | TDM_T(TDM_INT8))

/* Promises (flags): the conv, matmul and layout kernels write all of their outputs (their
 * generic fallback, dn_fallback, zeroes outputs first); FusedConv / BlockedConv may write Y
 * over Z (input 3: a sum post-op in place). Pooling promises nothing. */
#define WA TDM_KF_WRITES_ALL
#define WA_Z (TDM_KF_WRITES_ALL | TDM_KF_INPLACE(3))

const tdm_kernel_def tdm_cpu_kernels_dnnl[] = {
    {"", "Conv", 1, 0, 0, F32, dn_conv_run, dn_conv_prepare, dn_release, WA},
    {TDM_FUSED_DOMAIN, "FusedConv", 1, 0, 0, F32, dn_conv_run, dn_conv_prepare, dn_release, WA_Z},
    {"", "MatMul", 1, 0, 0, F32, dn_matmul_run, dn_matmul_prepare, dn_matmul_release, WA},
    {"", "Gemm", 1, 0, 0, F32, dn_matmul_run, dn_matmul_prepare, dn_matmul_release, WA},
    {TDM_FUSED_DOMAIN, "FusedMatMul", 1, 0, 0, F32, dn_matmul_run, dn_matmul_prepare,
     dn_matmul_release, WA},
    {"", "MaxPool", 1, 0, 0, F32, dn_pool_run, dn_pool_prepare, dn_release},
    {"", "AveragePool", 1, 0, 0, F32, dn_pool_run, dn_pool_prepare, dn_release},
    {TDM_FUSED_DOMAIN, "BlockedConv", 1, 0, 0, F32, dn_conv_run, dn_conv_prepare, dn_release, WA_Z},
    {TDM_FUSED_DOMAIN, "BlockedPool", 1, 0, 0, F32, dn_pool_run, dn_pool_prepare, dn_release},
    {TDM_FUSED_DOMAIN, "ToBlocked", 1, 0, 0, F32, dn_to_blocked_run, NULL, NULL, WA},
    {TDM_FUSED_DOMAIN, "FromBlocked", 1, 0, 0, F32, dn_from_blocked_run, NULL, NULL, WA},
    {TDM_FUSED_DOMAIN, "BlockedConcat", 1, 0, 0, F32, dn_blocked_concat_run, NULL, NULL, WA},
    {TDM_FUSED_DOMAIN, "ConvNwc1d", 1, 0, 0, F32, dn_nwc_run, dn_nwc_prepare, dn_nwc_release, WA},
    {"", "QLinearConv", 10, 0, 0, Q8, dn_qconv_run, dn_qconv_prepare, dn_qconv_release, WA},
    {TDM_FUSED_DOMAIN, "QConv", 1, 0, 0, Q8, dn_qconv_run, dn_qconv_prepare, dn_qconv_release, WA},
    {TDM_FUSED_DOMAIN, "QConvTranspose", 1, 0, 0, Q8, dn_qdeconv_run, dn_qdeconv_prepare,
     dn_qdeconv_release, WA},
    {"", "QLinearMatMul", 10, 0, 0, Q8, dn_qmatmul_run, dn_qmatmul_prepare, dn_qmatmul_release, WA},
    {TDM_FUSED_DOMAIN, "QMatMul", 1, 0, 0, Q8, dn_qmatmul_run, dn_qmatmul_prepare,
     dn_qmatmul_release, WA},
    {"", "MatMulInteger", 10, 0, 0, Q8, dn_qmatmul_run, dn_qmatmul_prepare, dn_qmatmul_release,
     WA},
    {"", "ConvInteger", 10, 0, 0, Q8, dn_qconv_run, dn_qconv_prepare, dn_qconv_release, WA},
};
const int tdm_cpu_kernels_dnnl_count =
    (int)(sizeof tdm_cpu_kernels_dnnl / sizeof tdm_cpu_kernels_dnnl[0]);

/* ---- states and the cache ---- */

tdm_status *dn_state_new(const tdm_allocator *a, size_t size, size_t entry_size,
                         dn_clear_fn clear, dn_state **out) {
    *out = NULL;
    dn_state *s = tdm_calloc(a, 1, size);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory preparing a oneDNN kernel");
    s->alloc = a;
    s->entry_size = entry_size;
    s->clear = clear;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        tdm_free(a, s);
        return TDM_ERR(TDM_ERR_INTERNAL, "cannot create a lock");
    }
    s->mu_init = true;
    atomic_flag_clear(&s->arena_busy);
    if (dnnl_engine_create(&s->eng, dnnl_cpu, 0) != dnnl_success) {
        s->eng = NULL;
        s->generic = true;
    }
    *out = s;
    return NULL;
}

static void entry_free(dn_state *s, dn_entry *e) {
    if (!e) return;
    if (s->clear) s->clear(s, e);
    tdm_free(s->alloc, e);
}

void dn_release(void *state, const tdm_allocator *a) {
    (void)a;
    dn_state *s = state;
    if (!s) return;
    for (int i = 0; i < s->n_entries; i++) entry_free(s, s->entries[i]);
    if (s->eng) dnnl_engine_destroy(s->eng);
    tdm_free(s->alloc, s->arena);
    if (s->mu_init) pthread_mutex_destroy(&s->mu);
    tdm_free(s->alloc, s);
}

tdm_status *dn_cache_get(dn_state *s, tdm_kernel_ctx *ctx, const int64_t *key, int nkey,
                         dn_build_fn build, dn_entry **e) {
    *e = NULL;
    if (nkey > DN_KEY) return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "shape key too long");
    tdm_status *st = NULL;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_entries; i++) {
        dn_entry *c = s->entries[i];
        if (c->nkey == nkey && memcmp(c->key, key, (size_t)nkey * sizeof *key) == 0) {
            *e = c;
            goto done;
        }
    }
    dn_entry *c = tdm_calloc(s->alloc, 1, s->entry_size);
    if (!c) {
        st = dn_oom(ctx);
        goto done;
    }
    c->nkey = nkey;
    memcpy(c->key, key, (size_t)nkey * sizeof *key);
    c->generic = true;
    c->temp = s->n_entries >= DN_CACHE;
    s->refused[0] = 0;
    if ((st = build(s, ctx, c))) {
        entry_free(s, c);
        goto done;
    }
    if (c->generic && s->refused[0]) {
        dn_note_impl(s, "tandem (oneDNN offers only %s)", s->refused);
        dn_log(ctx, TDM_LOG_INFO, "oneDNN offers only its reference implementation (%s): the "
               "generic kernel runs it", s->refused);
    } else if (c->generic) {
        dn_note_impl(s, "tandem");
    }
    if (!c->temp) s->entries[s->n_entries++] = c;
    *e = c;
done:
    pthread_mutex_unlock(&s->mu);
    return st;
}

void dn_entry_done(dn_state *s, dn_entry *e) {
    if (e && e->temp) entry_free(s, e);
}

/* ---- the generic path ---- */

/* The generic kernels get what they got before the dnnl kernels promised to write all of
 * their outputs (TDM_KF_WRITES_ALL in the table above): zeroed outputs, and inputs apart from them (an input
 * that shares output 0's memory is copied first). */
tdm_status *dn_fallback(tdm_kernel_ctx *ctx) {
    const tdm_kernel_def *tables[] = {tdm_cpu_kernels_nn, tdm_cpu_kernels_fused};
    int counts[] = {tdm_cpu_kernels_nn_count, tdm_cpu_kernels_fused_count};
    tdm_dtype types[64];
    int n = ctx->n_in < 64 ? ctx->n_in : 64;
    for (int i = 0; i < n; i++) types[i] = ctx->in[i] ? ctx->in[i]->dtype : TDM_UNDEFINED;
    const tdm_kernel_def *k = tdm_kernel_find(tables, counts, 2, ctx->node, types, n);
    if (!k)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                              "no generic kernel for %s with these inputs", ctx->node->op_type);
    const tdm_tensor *ins[64];
    tdm_tensor *copy = NULL;
    const void *y0 = ctx->n_out > 0 && ctx->out[0] ? ctx->out[0]->data : NULL;
    for (int i = 0; i < n; i++) {
        ins[i] = ctx->in[i];
        if (!y0 || copy || !ins[i] || ins[i]->data != y0 || !ins[i]->nbytes) continue;
        TDM_TRY(tdm_tensor_new(ctx->alloc, ins[i]->dtype, ins[i]->rank, ins[i]->dims, &copy));
        memcpy(copy->data, ins[i]->data, ins[i]->nbytes);
        ins[i] = copy;
    }
    for (int i = 0; i < ctx->n_out; i++)
        if (ctx->out[i] && ctx->out[i]->data && ctx->out[i]->nbytes)
            memset(ctx->out[i]->data, 0, ctx->out[i]->nbytes);
    tdm_kernel_ctx sub = *ctx;
    sub.state = NULL;
    sub.n_in = n;
    sub.in = ins;
    tdm_status *st = NULL;
    if (k->prepare) /* a generic kernel with its own preparation: for this run only */
        st = k->prepare(ctx->node, ctx->opset, n, ins, ctx->alloc, &sub.state);
    if (!st) st = k->run(&sub);
    if (sub.state && k->release) k->release(sub.state, ctx->alloc);
    tdm_tensor_destroy(copy);
    return st;
}

bool tdm_cpu_dnnl_impl(const tdm_kernel_def *k, void *state, char *buf, size_t size) {
    if (k->release != dn_release && k->release != dn_matmul_release &&
        k->release != dn_qconv_release && k->release != dn_qmatmul_release &&
        k->release != dn_qdeconv_release) {
        if (k->run != dn_to_blocked_run && k->run != dn_from_blocked_run) return false;
        snprintf(buf, size, "tandem"); /* own layout copies */
        return true;
    }
    dn_state *s = state;
    if (!s || s->generic) { /* (with the reason a prepare noted, if any) */
        snprintf(buf, size, "%s", s && s->generic && s->impl[0] ? s->impl : "tandem");
        return true;
    }
    pthread_mutex_lock(&s->mu);
    snprintf(buf, size, "%s", s->impl);
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* ---- implementations ---- */

const char *dn_pd_impl(const_dnnl_primitive_desc_t pd) {
    const char *name = NULL;
    if (!pd || dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, (void *)&name) !=
                   dnnl_success || !name)
        return "?";
    return name;
}

const char *dn_prim_impl(const dn_prim *p) {
    const_dnnl_primitive_desc_t pd;
    if (!p->p) return "";
    if (dnnl_primitive_get_primitive_desc(p->p, &pd) != dnnl_success) return "?";
    return dn_pd_impl(pd);
}

bool dn_pd_is_ref(const_dnnl_primitive_desc_t pd) { return strncmp(dn_pd_impl(pd), "ref", 3) == 0; }

bool dn_refuse_ref(dn_state *s, dnnl_primitive_desc_t pd) {
    if (!pd || !dn_pd_is_ref(pd)) return false;
    snprintf(s->refused, sizeof s->refused, "%s", dn_pd_impl(pd));
    dnnl_primitive_desc_destroy(pd);
    return true;
}

void dn_note_impl(dn_state *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->impl, sizeof s->impl, fmt, ap);
    va_end(ap);
}

void dn_log(tdm_kernel_ctx *ctx, tdm_log_level level, const char *fmt, ...) {
    const tdm_cpu_dev *c = tdm_cpu_dev_of(ctx->device);
    if (!c || !c->log.fn || level > c->log.level) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tdm_log(&c->log, level, "node %s (%s): %s", ctx->node->name ? ctx->node->name : "?",
            ctx->node->op_type, msg);
}

const char *dn_md_layout(const dnnl_memory_desc_t *md, char *buf, size_t size) {
    snprintf(buf, size, "?");
    if (md->format_kind != dnnl_blocked || md->ndims < 1 || md->ndims > 6) return buf;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    /* dims from the largest stride down (outer order), then the inner blocks */
    int order[6], nd = md->ndims;
    for (int i = 0; i < nd; i++) order[i] = i;
    for (int i = 0; i < nd; i++)
        for (int j = i + 1; j < nd; j++)
            if (b->strides[order[j]] > b->strides[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    size_t n = 0;
    for (int i = 0; i < nd && n + 1 < size; i++) {
        bool blocked = false;
        for (int k = 0; k < b->inner_nblks; k++) blocked |= b->inner_idxs[k] == order[i];
        buf[n++] = (char)((blocked ? 'A' : 'a') + order[i]);
    }
    buf[n] = 0;
    for (int k = 0; k < b->inner_nblks && n + 1 < size; k++) {
        int w = snprintf(buf + n, size - n, "%lld%c", (long long)b->inner_blks[k],
                         'a' + (int)b->inner_idxs[k]);
        if (w < 0) break;
        n += (size_t)w;
        if (n >= size) break;
    }
    return buf;
}

/* ---- threads ---- */

int dn_threads(tdm_kernel_ctx *ctx) {
    int n = tdm_threadpool_size(ctx->pool);
    return n < 1 ? 1 : n;
}

int dn_omp_begin(void) {
    int prev = omp_get_max_threads();
    if (prev != 1) omp_set_num_threads(1);
    return prev;
}

void dn_omp_end(int prev) {
    if (prev != 1) omp_set_num_threads(prev);
}

typedef struct par_job {
    dn_item_fn fn;
    void *arg;
    tdm_kernel_ctx *ctx;
    _Atomic(tdm_status *) first;
    atomic_bool failed;
} par_job;

static void par_range(void *vp, int64_t b, int64_t e) {
    par_job *j = vp;
    if (omp_get_max_threads() != 1) omp_set_num_threads(1); /* tandem workers stay serial */
    for (int64_t i = b; i < e && !atomic_load(&j->failed); i++) {
        tdm_status *st = j->fn(j->arg, j->ctx, i);
        if (!st) continue;
        atomic_store(&j->failed, true);
        tdm_status *none = NULL;
        if (!atomic_compare_exchange_strong(&j->first, &none, st)) tdm_status_free(st);
    }
}

tdm_status *dn_parallel(tdm_kernel_ctx *ctx, int64_t n, dn_item_fn fn, void *arg) {
    if (n <= 0) return NULL;
    if (n == 1 || dn_threads(ctx) == 1) {
        for (int64_t i = 0; i < n; i++) TDM_TRY(fn(arg, ctx, i));
        return NULL;
    }
    par_job j = {.fn = fn, .arg = arg, .ctx = ctx};
    atomic_init(&j.first, NULL);
    atomic_init(&j.failed, false);
    tdm_parallel_for(ctx->pool, n, 1, par_range, &j);
    return atomic_load(&j.first);
}

/* Items per image: as few as keep every thread equally busy (images x pieces a multiple of
 * the threads). Each item's primitive reads the image's whole input or runs a smaller kernel,
 * so more, smaller items cost more than they balance (batch 1 on 2 threads, 2 items a thread
 * against 1: MobileNetV2 7.1 -> 6.4 ms, ResNet-50 59 -> 55 ms); a thread that starts late has
 * its item run by the others (the pool's claimed chunks). */
int64_t dn_chunk(int64_t units, int64_t align, int64_t images, int threads) {
    if (align < 1) align = 1;
    if (threads <= 1 || images >= 2 * (int64_t)threads || units <= align) return units;
    int64_t a = images < 1 ? 1 : images, b = threads;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    int64_t pieces = threads / a; /* a = gcd(images, threads) */
    if (pieces <= 1) return units;
    int64_t c = (units + pieces - 1) / pieces;
    c = (c + align - 1) / align * align;
    return c < units ? c : units;
}

/* ---- descriptors, primitives ---- */

int64_t dn_block(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core
               ? 16
               : 8;
}

bool dn_q8_scalar(const tdm_tensor *t, int32_t *v) {
    *v = 0;
    if (!t) return true;
    if (t->count != 1) return false;
    if (t->dtype == TDM_UINT8) *v = ((const uint8_t *)t->data)[0];
    else if (t->dtype == TDM_INT8) *v = ((const int8_t *)t->data)[0];
    else return false;
    return true;
}

bool dn_q8_zeros(const tdm_tensor *t) {
    if (!t) return true;
    if (t->dtype != TDM_INT8 && t->dtype != TDM_UINT8) return false;
    for (int64_t i = 0; i < t->count; i++)
        if (((const uint8_t *)t->data)[i]) return false;
    return true;
}

bool dn_f32_scalar(const tdm_tensor *t, float *v) {
    if (!t || t->dtype != TDM_FLOAT || t->count != 1) return false;
    *v = ((const float *)t->data)[0];
    return true;
}

bool dn_bf16(const tdm_kernel_ctx *ctx) {
    tdm_cpu_dev *c = tdm_cpu_dev_of(ctx->device);
    return c && atomic_load(&c->bf16);
}

bool dn_amx(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_amx) ==
           (unsigned)dnnl_cpu_isa_avx512_core_amx;
}

bool dn_attr_clip(dnnl_primitive_attr_t attr, float lo, float hi) {
    dnnl_post_ops_t po = NULL;
    bool ok = dnnl_post_ops_create(&po) == dnnl_success &&
              dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip, lo, hi) == dnnl_success &&
              dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    return ok;
}

bool dn_attr_q8_out(dnnl_primitive_attr_t attr, bool clip, float lo, float hi, int32_t yzp) {
    if (!clip && !yzp) return true;
    dnnl_post_ops_t po = NULL;
    bool ok = dnnl_post_ops_create(&po) == dnnl_success;
    if (ok && clip)
        ok = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip, lo, hi) == dnnl_success;
    if (ok && yzp)
        ok = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, 1.0f, (float)yzp) ==
             dnnl_success;
    ok = ok && dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    return ok;
}

bool dn_q8_clip(const tdm_node *node, tdm_dtype yt, int32_t yzp, float *lo, float *hi) {
    int64_t tlo = yt == TDM_INT8 ? -128 : 0, thi = yt == TDM_INT8 ? 127 : 255;
    int64_t qlo = tdm_attr_int(node, "qmin", tlo), qhi = tdm_attr_int(node, "qmax", thi);
    if (qlo <= tlo && qhi >= thi) return false;
    *lo = (float)((qlo > tlo ? qlo : tlo) - yzp);
    *hi = (float)((qhi < thi ? qhi : thi) - yzp);
    return true;
}

bool dn_q8_requant(const tdm_allocator *a, float xs, const tdm_tensor *ws, float ys, int64_t n,
                   const tdm_tensor *b, int64_t nb, float **oscale, int32_t **bias) {
    *oscale = tdm_alloc(a, (size_t)n * sizeof(float) + 1);
    if (!*oscale) return false;
    for (int64_t i = 0; i < n; i++)
        (*oscale)[i] = xs * ((const float *)ws->data)[ws->count == 1 ? 0 : i] / ys;
    if (!b) return true;
    *bias = tdm_alloc(a, (size_t)nb * sizeof(int32_t) + 1);
    if (!*bias) return false;
    memcpy(*bias, b->data, (size_t)nb * sizeof(int32_t));
    return true;
}

bool dn_has_vnni(void) {
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & (unsigned)dnnl_cpu_isa_avx512_core_vnni) == (unsigned)dnnl_cpu_isa_avx512_core_vnni ||
           (isa & (unsigned)dnnl_cpu_isa_avx2_vnni) == (unsigned)dnnl_cpu_isa_avx2_vnni;
}

int dn_q8_lim(const int8_t *w, int64_t M, int64_t per, int64_t mstride, int64_t kstride) {
    int lim = 255;
    for (int64_t m = 0; m < M; m++) {
        int pos[2] = {0, 0}, neg[2] = {0, 0}; /* the two largest magnitudes of each sign */
        for (int64_t k = 0; k < per; k++) {
            int v = w[m * mstride + k * kstride];
            int *t = v > 0 ? pos : neg, u = v > 0 ? v : -v;
            if (u > t[0]) {
                t[1] = t[0];
                t[0] = u;
            } else if (u > t[1]) {
                t[1] = u;
            }
        }
        if (pos[0] + pos[1] > 0 && 32767 / (pos[0] + pos[1]) < lim) lim = 32767 / (pos[0] + pos[1]);
        if (neg[0] + neg[1] > 0 && 32768 / (neg[0] + neg[1]) < lim) lim = 32768 / (neg[0] + neg[1]);
    }
    return lim;
}

void dn_q8_halves(const int8_t *w, int8_t *a, int8_t *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        a[i] = (int8_t)(w[i] / 2); /* C division truncates */
        b[i] = (int8_t)(w[i] - a[i]);
    }
}

bool dn_q8_halves_use(int lim, const tdm_kernel_ctx *ctx, const tdm_tensor *x, int32_t xzp) {
    if (lim >= 255 || x->dtype != TDM_UINT8) return false;
    if (xzp > lim) return true;
    return tdm_cpu_simd_of(ctx)->max_u8(x->data, x->count) > lim;
}

bool dn_q8_flip(const tdm_tensor *zp) {
    return zp && zp->dtype == TDM_INT8 && !dn_has_vnni();
}

typedef struct flip_job {
    const int8_t *src;
    uint8_t *dst;
    int64_t n;
} flip_job;

#define FLIP_BLOCK ((int64_t)1 << 16)

static tdm_status *flip_item(void *arg, tdm_kernel_ctx *ctx, int64_t i) {
    (void)ctx;
    const flip_job *j = arg;
    int64_t b = i * FLIP_BLOCK, e = b + FLIP_BLOCK < j->n ? b + FLIP_BLOCK : j->n, k = b;
#if defined(__SSE2__)
    const __m128i m = _mm_set1_epi8((char)0x80);
    for (; k + 16 <= e; k += 16)
        _mm_storeu_si128((__m128i *)(j->dst + k),
                         _mm_xor_si128(_mm_loadu_si128((const __m128i *)(j->src + k)), m));
#endif
    for (; k < e; k++) j->dst[k] = (uint8_t)((uint8_t)j->src[k] ^ 0x80u);
    return NULL;
}

tdm_status *dn_q8_flip_x(tdm_kernel_ctx *ctx, const tdm_tensor *x, uint8_t *dst, tdm_tensor *view) {
    flip_job j = {x->data, dst, x->count}; /* (before the view: x may be view) */
    *view = *x;
    view->dtype = TDM_UINT8;
    view->data = dst;
    view->owns_data = false;
    view->release = NULL;
    return dn_parallel(ctx, (j.n + FLIP_BLOCK - 1) / FLIP_BLOCK, flip_item, &j);
}

void dn_md_strided(dnnl_memory_desc_t *md, int nd, const int64_t *dims, const int64_t *strides) {
    dnnl_dims_t d, s;
    for (int i = 0; i < nd; i++) {
        d[i] = dims[i];
        s[i] = strides[i];
    }
    if (dnnl_memory_desc_init_by_strides(md, nd, d, dnnl_f32, s) != dnnl_success)
        memset(md, 0, sizeof *md);
}

void dn_md_plain(dnnl_memory_desc_t *md, int nd, const int64_t *dims) {
    int64_t strides[DNNL_MAX_NDIMS];
    int64_t st = 1;
    for (int i = nd - 1; i >= 0; i--) {
        strides[i] = st;
        st *= dims[i] > 0 ? dims[i] : 1;
    }
    dn_md_strided(md, nd, dims, strides);
}

bool dn_md_tag(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_format_tag_t tag) {
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++) d[i] = dims[i];
    return dnnl_memory_desc_init_by_tag(md, nd, d, dnnl_f32, tag) == dnnl_success;
}

dnnl_format_tag_t dn_tag_blocked(int nd, int64_t block) {
    if (block == TDM_BLOCK_CHANNELS_LAST) return nd == 3 ? dnnl_acb : nd == 4 ? dnnl_acdb : nd == 5 ? dnnl_acdeb : 0;
    if (block == 8) return nd == 3 ? dnnl_aBc8b : nd == 4 ? dnnl_aBcd8b : nd == 5 ? dnnl_aBcde8b : 0;
    if (block == 16)
        return nd == 3 ? dnnl_aBc16b : nd == 4 ? dnnl_aBcd16b : nd == 5 ? dnnl_aBcde16b : 0;
    return 0;
}

int64_t dn_channel_layout(const dnnl_memory_desc_t *md) {
    int nd = md->ndims;
    int64_t dims[DNNL_MAX_NDIMS];
    for (int i = 0; i < nd; i++) dims[i] = md->dims[i];
    dnnl_memory_desc_t c;
    dn_md_plain(&c, nd, dims);
    c.data_type = md->data_type; /* (f32 or bf16: the layout is what counts) */
    if (dnnl_memory_desc_equal(md, &c)) return 1;
    static const int64_t blocks[] = {8, 16, TDM_BLOCK_CHANNELS_LAST};
    for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) {
        int64_t b = blocks[k];
        dnnl_format_tag_t t = dn_tag_blocked(nd, b);
        if (!t || !dn_md_tag(&c, nd, dims, t)) continue;
        c.data_type = md->data_type;
        if (dnnl_memory_desc_equal(md, &c)) return b;
    }
    return 0;
}

size_t dn_md_bytes(const dnnl_memory_desc_t *md) { return dnnl_memory_desc_get_size(md); }

void dn_query_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what, dnnl_memory_desc_t *out) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
    if (md) *out = *md;
    else memset(out, 0, sizeof *out);
}

tdm_status *dn_attr_new(dnnl_primitive_attr_t *attr) {
    if (dnnl_primitive_attr_create(attr) != dnnl_success)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "cannot create oneDNN attributes");
    dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    return NULL;
}

tdm_status *dn_prim_from_pd(dnnl_primitive_desc_t pd, dn_prim *out) {
    out->p = NULL;
    out->scratch = 0;
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp) out->scratch = dnnl_memory_desc_get_size(sp);
    dnnl_status_t r = dnnl_primitive_create(&out->p, pd);
    dnnl_primitive_desc_destroy(pd);
    if (r != dnnl_success) {
        out->p = NULL;
        return TDM_ERR(r == dnnl_out_of_memory ? TDM_ERR_OUT_OF_MEMORY : TDM_ERR_INTERNAL,
                       "cannot create a oneDNN primitive (status %d)", (int)r);
    }
    return NULL;
}

tdm_status *dn_reorder_new(dnnl_engine_t eng, const dnnl_memory_desc_t *from,
                           const dnnl_memory_desc_t *to, dn_prim *out) {
    out->p = NULL;
    out->scratch = 0;
    if (dnnl_memory_desc_equal(from, to)) return NULL;
    dnnl_primitive_attr_t attr;
    TDM_TRY(dn_attr_new(&attr));
    dnnl_primitive_desc_t pd;
    dnnl_status_t r = dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, attr);
    dnnl_primitive_attr_destroy(attr);
    if (r != dnnl_success)
        return TDM_ERR(TDM_ERR_INTERNAL, "oneDNN has no reorder between two layouts (status %d)",
                       (int)r);
    return dn_prim_from_pd(pd, out);
}

void dn_prim_clear(dn_prim *p) {
    if (p->p) dnnl_primitive_destroy(p->p);
    p->p = NULL;
    p->scratch = 0;
}

/* ---- execution ---- */

tdm_status *dn_error(tdm_kernel_ctx *ctx, dnnl_status_t st, const char *what) {
    return tdm_node_error(ctx->node,
                          st == dnnl_out_of_memory ? TDM_ERR_OUT_OF_MEMORY : TDM_ERR_INTERNAL,
                          "oneDNN %s failed (status %d)", what, (int)st);
}

tdm_status *dn_oom(tdm_kernel_ctx *ctx) {
    return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
}

void *dn_scratch_get(dn_state *s, tdm_kernel_ctx *ctx, size_t bytes, bool *own) {
    *own = false;
    if (!bytes) return NULL;
    if (!atomic_flag_test_and_set(&s->arena_busy)) {
        if (s->arena_size >= bytes) return s->arena;
        tdm_free(s->alloc, s->arena);
        s->arena_size = 0;
        if ((s->arena = tdm_alloc(s->alloc, bytes))) {
            s->arena_size = bytes;
            return s->arena;
        }
        atomic_flag_clear(&s->arena_busy);
    }
    *own = true;
    return tdm_kscratch(ctx, bytes);
}

void dn_scratch_put(dn_state *s, tdm_kernel_ctx *ctx, void *p, bool own) {
    if (own) tdm_free(ctx->alloc, p);
    else if (p) atomic_flag_clear(&s->arena_busy);
}

tdm_status *dn_exec(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p, int n,
                    const dn_arg *args) {
    return dn_exec_in(ctx, eng, p, n, args, NULL);
}

tdm_status *dn_exec_in(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p, int n,
                       const dn_arg *args, void *given) {
    dnnl_exec_arg_t ea[DN_MAX_ARGS + 1];
    dnnl_memory_t mem[DN_MAX_ARGS + 1] = {0};
    dnnl_stream_t stream = NULL;
    void *scratch = NULL;
    int m = 0;
    tdm_status *st = NULL;
    dnnl_status_t r;
    if (n > DN_MAX_ARGS) return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "too many arguments");
    for (int i = 0; i < n; i++, m++) {
        r = dnnl_memory_create(&mem[m], args[i].md, eng, (void *)args[i].ptr);
        if (r != dnnl_success) {
            mem[m] = NULL;
            st = dn_error(ctx, r, "memory creation");
            goto done;
        }
        ea[m].arg = args[i].arg;
        ea[m].memory = mem[m];
    }
    if (p->scratch) {
        const_dnnl_primitive_desc_t pd;
        if ((r = dnnl_primitive_get_primitive_desc(p->p, &pd)) != dnnl_success) {
            st = dn_error(ctx, r, "query");
            goto done;
        }
        if (!(scratch = given ? given : tdm_kscratch(ctx, p->scratch))) {
            st = dn_oom(ctx);
            goto done;
        }
        r = dnnl_memory_create(&mem[m], dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0),
                               eng, scratch);
        if (r != dnnl_success) {
            mem[m] = NULL;
            st = dn_error(ctx, r, "memory creation");
            goto done;
        }
        ea[m].arg = DNNL_ARG_SCRATCHPAD;
        ea[m].memory = mem[m];
        m++;
    }
    if ((r = dnnl_stream_create(&stream, eng, dnnl_stream_default_flags)) != dnnl_success) {
        stream = NULL;
        st = dn_error(ctx, r, "stream creation");
        goto done;
    }
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
    if ((r = dnnl_primitive_execute(p->p, stream, m, ea)) != dnnl_success) {
        st = dn_error(ctx, r, "execution");
        goto done;
    }
    dnnl_stream_wait(stream);
done:
    if (stream) dnnl_stream_destroy(stream);
    for (int i = 0; i <= DN_MAX_ARGS; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    if (scratch != given) tdm_free(ctx->alloc, scratch);
    return st;
}

void dn_held_clear(dn_held *h) {
    if (!h) return;
    if (h->stream) dnnl_stream_destroy(h->stream);
    for (int i = 0; i <= DN_MAX_ARGS; i++)
        if (h->mem[i]) dnnl_memory_destroy(h->mem[i]);
    memset(h->mem, 0, sizeof h->mem);
    if (h->scratch) tdm_free(h->alloc, h->scratch);
    h->scratch = NULL;
    h->stream = NULL;
    h->built = false;
}

dn_held *dn_held_array(const tdm_allocator *a, size_t n) {
    dn_held *h = n ? tdm_calloc(a, n, sizeof *h) : NULL;
    for (size_t i = 0; h && i < n; i++) atomic_flag_clear(&h[i].busy);
    return h;
}

void dn_held_array_free(const tdm_allocator *a, dn_held *h, size_t n) {
    if (!h) return;
    for (size_t i = 0; i < n; i++) dn_held_clear(&h[i]);
    tdm_free(a, h);
}

/* Creates h's objects for these arguments (pointing at no data yet); false on failure. */
static bool held_build(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p, int n,
                       const dn_arg *args, const void *given, dn_held *h) {
    for (int i = 0; i < n; i++) {
        if (dnnl_memory_create(&h->mem[i], args[i].md, eng, DNNL_MEMORY_NONE) != dnnl_success) {
            h->mem[i] = NULL;
            return false;
        }
        h->arg[i] = args[i].arg;
        h->md[i] = args[i].md;
    }
    if (p->scratch) {
        /* the scratchpad lives as long as the objects: a run allocates nothing (AVX-512
         * matmuls need one where AVX2's gemm did not); a caller that gives its own (a part
         * of its run's buffer) gets only the memory object */
        const_dnnl_primitive_desc_t pd;
        if (dnnl_primitive_get_primitive_desc(p->p, &pd) != dnnl_success) return false;
        if (!given && !(h->scratch = tdm_alloc(ctx->alloc, p->scratch))) return false;
        h->alloc = ctx->alloc;
        if (dnnl_memory_create(&h->mem[n], dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0),
                               eng, h->scratch ? h->scratch : DNNL_MEMORY_NONE) != dnnl_success) {
            h->mem[n] = NULL;
            return false;
        }
    }
    if (dnnl_stream_create(&h->stream, eng, dnnl_stream_default_flags) != dnnl_success) {
        h->stream = NULL;
        return false;
    }
    h->n = n;
    h->built = true;
    return true;
}

static bool held_fits(const dn_held *h, int n, const dn_arg *args) {
    if (h->n != n) return false;
    for (int i = 0; i < n; i++)
        if (h->arg[i] != args[i].arg || h->md[i] != args[i].md) return false;
    return true;
}

tdm_status *dn_exec_held(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p, int n,
                         const dn_arg *args, void *given, dn_held *h) {
    if (!h || n > DN_MAX_ARGS || atomic_flag_test_and_set(&h->busy))
        return dn_exec_in(ctx, eng, p, n, args, given);
    if (!h->built && !held_build(ctx, eng, p, n, args, given, h)) dn_held_clear(h);
    if (!h->built || !held_fits(h, n, args) || (p->scratch && !given && !h->scratch)) {
        atomic_flag_clear(&h->busy);
        return dn_exec_in(ctx, eng, p, n, args, given);
    }
    dnnl_exec_arg_t ea[DN_MAX_ARGS + 1];
    void *scratch = NULL;
    tdm_status *st = NULL;
    dnnl_status_t r = dnnl_success;
    int m = 0;
    for (; m < n && r == dnnl_success; m++) {
        r = dnnl_memory_set_data_handle(h->mem[m], (void *)args[m].ptr);
        ea[m].arg = args[m].arg;
        ea[m].memory = h->mem[m];
    }
    if (r == dnnl_success && p->scratch) {
        scratch = given ? given : h->scratch;
        r = dnnl_memory_set_data_handle(h->mem[n], scratch);
        ea[m].arg = DNNL_ARG_SCRATCHPAD;
        ea[m].memory = h->mem[n];
        m++;
    }
    if (r != dnnl_success) {
        st = dn_error(ctx, r, "memory setup");
        goto done;
    }
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
    if ((r = dnnl_primitive_execute(p->p, h->stream, m, ea)) != dnnl_success) {
        st = dn_error(ctx, r, "execution");
        goto done;
    }
    dnnl_stream_wait(h->stream);
done:
    atomic_flag_clear(&h->busy);
    return st;
}

tdm_status *dn_exec_reorder(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p,
                            const dnnl_memory_desc_t *from, const void *src,
                            const dnnl_memory_desc_t *to, void *dst) {
    if (!p->p) {
        if (dst != src) memcpy(dst, src, dn_md_bytes(to));
        return NULL;
    }
    dn_arg args[2] = {{DNNL_ARG_FROM, from, src}, {DNNL_ARG_TO, to, dst}};
    return dn_exec(ctx, eng, p, 2, args);
}

tdm_status *dn_exec_reorder_held(tdm_kernel_ctx *ctx, dnnl_engine_t eng, const dn_prim *p,
                                 const dnnl_memory_desc_t *from, const void *src,
                                 const dnnl_memory_desc_t *to, void *dst, dn_held *h) {
    if (!p->p) {
        if (dst != src) memcpy(dst, src, dn_md_bytes(to));
        return NULL;
    }
    dn_arg args[2] = {{DNNL_ARG_FROM, from, src}, {DNNL_ARG_TO, to, dst}};
    return dn_exec_held(ctx, eng, p, 2, args, NULL, h);
}

/* ---- activations as post-ops ---- */

bool dn_append_activation(dnnl_post_ops_t po, const char *act, const float *params,
                          size_t n_params) {
    if (!act || !act[0]) return true;
    dnnl_status_t r;
    if (!strcmp(act, "Relu")) {
        r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    } else if (!strcmp(act, "LeakyRelu")) {
        float alpha = n_params >= 1 ? params[0] : 0.01f;
        r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, alpha, 0.0f);
    } else if (!strcmp(act, "Clip")) {
        if (n_params < 2) return false;
        r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip_v2, params[0], params[1]);
    } else if (!strcmp(act, "Sigmoid")) {
        r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_logistic, 0.0f, 0.0f);
    } else if (!strcmp(act, "Tanh")) {
        r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_tanh, 0.0f, 0.0f);
    } else if (!strcmp(act, "HardSigmoid")) { /* max(0, min(1, alpha * x + beta)) */
        float alpha = n_params >= 1 ? params[0] : 0.2f, beta = n_params >= 2 ? params[1] : 0.5f;
        r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, alpha, beta);
        if (r == dnnl_success)
            r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip_v2, 0.0f, 1.0f);
    } else if (!strcmp(act, "HardSwish")) {
        r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_hardswish, 0.0f, 0.0f);
    } else if (!strcmp(act, "Swish")) { /* x * sigmoid(alpha x), alpha 1 */
        r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f);
    } else if (!strcmp(act, "Gelu")) {
        r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_erf, 0.0f, 0.0f);
    } else if (!strcmp(act, "GeluTanh")) {
        r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0.0f, 0.0f);
    } else {
        return false;
    }
    return r == dnnl_success;
}
