/* dnnl family: MatMul, Gemm and FusedMatMul (float32) on oneDNN's matmul primitive.
 *  - MatMul: numpy batching with broadcast batch dims; a 2-D (or 1-D) B makes one
 *    [batch*M, K] x [K, N] product. A constant 2-D B is reordered once into the layout oneDNN
 *    prefers; when that is plain row-major (the gemm-based matmul of AVX2 machines) and N
 *    is a multiple of 128, row-major with rows MM_B_PAD floats longer than N: rows a
 *    multiple of 512 bytes apart fall on at most 8 of the L1 cache's 64 sets per 4 KiB, and
 *    the gemm's reads of a panel of B evict each other (AVX2 EPYC, 1 thread, CPU time per
 *    product with its bias: 60x384 * 384x1536 1.56 -> 1.09 ms, 60x384 * 384x512 0.49 ->
 *    0.37, 128x3072 * 3072x768 11.3 -> 9.5; MiniLM-L6 -15%). The transposed layout [N, K],
 *    the earlier cure for N % 1024 == 0, measured slower than the padded rows (MiniLM:
 *    +2% against row-major, padded -15%); it stays the next choice when oneDNN refuses
 *    padded rows. Other N keep dense row-major B.
 *  - Gemm: transposes as strides, alpha as the output scale, beta * C either as the bias
 *    (C of shape [N] or [1, N], alpha = beta = 1) or as C broadcast into Y plus a sum
 *    post-op with scale beta.
 *  - FusedMatMul: the bias (1-D, N values) and the activation as post-ops.
 * Threads: the outermost dimension of Y above 1 (a batch dimension or the rows) is cut into
 * chunks, one primitive for the full chunks and one for a smaller last chunk. */
#include <string.h>

#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_gemv.h"
#include "core/alloc.h"

enum { MM_MATMUL, MM_GEMM, MM_FUSED };
enum { MM_B_ALIAS = 128, MM_B_PAD = 16 }; /* N % MM_B_ALIAS == 0: B's rows MM_B_PAD longer */
enum { C_NONE, C_BIAS, C_SUM }; /* how Gemm applies C */

typedef struct mm_state {
    dn_state base; /* first */
    int kind;
    bool ta, tb;
    float alpha, beta;
    const char *act;
    tdm_fused_act fact;        /* FusedMatMul's activation, parsed */
    _Atomic(dn_gemv *) gemv;   /* constant B packed for one-row runs (k_gemv.c), made on the first */
} mm_state;

/* One matmul as oneDNN sees it: nd dims each (batch..., rows, cols), with strides. */
typedef struct mm_shape {
    int nd;
    int64_t a[DNNL_MAX_NDIMS], b[DNNL_MAX_NDIMS], y[DNNL_MAX_NDIMS];
    int64_t as[DNNL_MAX_NDIMS], bs[DNNL_MAX_NDIMS], ys[DNNL_MAX_NDIMS];
} mm_shape;

typedef struct mm_part {
    int64_t units; /* extent of the split dimension; 0 = unused */
    dn_prim mm;
    dnnl_memory_desc_t src, wei, dst;
    dn_held held; /* mm's memory objects and stream, kept between runs */
} mm_part;

typedef struct mm_entry {
    dn_entry h; /* first */
    int cmode;
    int64_t M, N;        /* Gemm: Y's shape (for C) */
    int64_t chunk, n_chunks;
    int64_t a_step, b_step, y_step; /* elements per unit of the split dimension */
    mm_part part[2];     /* [0] full chunks, [1] the smaller last chunk */
    dnnl_memory_desc_t usr_wei, bias;
    dn_prim r_wei;       /* constant B: user layout -> part[0].wei */
    void *wbuf;          /* constant B in part[0].wei */
    bool wbuf_shared;    /* wbuf belongs to another entry of the cache */
    bool bf16;           /* precision bf16 (dn_bf16): A and B read in bf16, Y in f32. A is
                            converted per run into a copy with its own strides (r_a); B as
                            the weights are (not when B is cut into chunks: then f32) */
    dnnl_memory_desc_t a_f32, a_bf16; /* A's whole extent, 1-D, for that conversion */
    dn_prim r_a;
} mm_entry;

static void mm_clear(dn_state *s, dn_entry *he) {
    mm_entry *e = (mm_entry *)he;
    dn_held_clear(&e->part[0].held);
    dn_held_clear(&e->part[1].held);
    dn_prim_clear(&e->part[0].mm);
    dn_prim_clear(&e->part[1].mm);
    dn_prim_clear(&e->r_wei);
    dn_prim_clear(&e->r_a);
    if (!e->wbuf_shared) tdm_free(s->alloc, e->wbuf);
    e->wbuf = NULL;
}

tdm_status *dn_matmul_prepare(const tdm_node *node, int opset, int n_in,
                              const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset;
    mm_state *s;
    TDM_TRY(dn_state_new(a, sizeof *s, sizeof(mm_entry), mm_clear, (dn_state **)&s));
    *state = s;
    s->kind = !strcmp(node->op_type, "Gemm")          ? MM_GEMM
              : !strcmp(node->op_type, "FusedMatMul") ? MM_FUSED
                                                      : MM_MATMUL;
    if (n_in < 2) s->base.generic = true;
    if (n_in >= 2 && in[1] && in[1]->dtype == TDM_FLOAT) s->base.wconst = in[1];
    s->alpha = 1.0f;
    s->beta = 1.0f;
    if (s->kind == MM_GEMM) {
        s->ta = tdm_attr_int(node, "transA", 0) != 0;
        s->tb = tdm_attr_int(node, "transB", 0) != 0;
        s->alpha = tdm_attr_float(node, "alpha", 1.0f);
        s->beta = tdm_attr_float(node, "beta", 1.0f);
    }
    if (s->kind == MM_FUSED) {
        s->act = tdm_attr_string(node, "activation", "");
        if (strcmp(s->act, "") && strcmp(s->act, "Relu") && strcmp(s->act, "Gelu") &&
            strcmp(s->act, "GeluTanh"))
            s->base.generic = true;
        else
            TDM_TRY(tdm_fused_parse_act(node, &s->fact));
    }
    return NULL;
}

void dn_matmul_release(void *state, const tdm_allocator *a) {
    mm_state *s = state;
    if (s) dn_gemv_free(s->base.alloc, atomic_load(&s->gemv));
    dn_release(state, a);
}


static void contiguous(int nd, const int64_t *d, int64_t *s) {
    int64_t st = 1;
    for (int i = nd - 1; i >= 0; i--) {
        s[i] = st;
        st *= d[i];
    }
}

/* MatMul / FusedMatMul shapes; false if oneDNN cannot take them. */
static bool matmul_shape(const tdm_tensor *A, const tdm_tensor *B, mm_shape *m) {
    int ra = A->rank, rb = B->rank;
    if (ra < 1 || rb < 1 || ra > DNNL_MAX_NDIMS || rb > DNNL_MAX_NDIMS) return false;
    int64_t K = A->dims[ra - 1];
    int64_t M = ra >= 2 ? A->dims[ra - 2] : 1;
    int64_t N = rb >= 2 ? B->dims[rb - 1] : 1;
    if ((rb >= 2 ? B->dims[rb - 2] : B->dims[0]) != K) return false;
    int na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0;
    if (nb == 0) { /* one product: [batch*M, K] x [K, N] */
        int64_t rows = M;
        for (int i = 0; i < na; i++) rows *= A->dims[i];
        m->nd = 2;
        m->a[0] = rows, m->a[1] = K;
        m->b[0] = K, m->b[1] = N;
        m->y[0] = rows, m->y[1] = N;
    } else {
        int nbat = na > nb ? na : nb;
        if (nbat + 2 > DNNL_MAX_NDIMS) return false;
        m->nd = nbat + 2;
        for (int i = 0; i < nbat; i++) {
            int ia = i - (nbat - na), ib = i - (nbat - nb);
            int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
            if (da != db && da != 1 && db != 1) return false;
            m->a[i] = da;
            m->b[i] = db;
            m->y[i] = da == 1 ? db : da;
        }
        m->a[nbat] = M, m->a[nbat + 1] = K;
        m->b[nbat] = K, m->b[nbat + 1] = N;
        m->y[nbat] = M, m->y[nbat + 1] = N;
    }
    contiguous(m->nd, m->a, m->as);
    contiguous(m->nd, m->b, m->bs);
    contiguous(m->nd, m->y, m->ys);
    return true;
}

static bool gemm_shape(const mm_state *s, const tdm_tensor *A, const tdm_tensor *B, mm_shape *m) {
    if (A->rank != 2 || B->rank != 2) return false;
    int64_t M = A->dims[s->ta ? 1 : 0], K = A->dims[s->ta ? 0 : 1];
    int64_t N = B->dims[s->tb ? 0 : 1];
    if (B->dims[s->tb ? 1 : 0] != K) return false;
    m->nd = 2;
    m->a[0] = M, m->a[1] = K;
    m->b[0] = K, m->b[1] = N;
    m->y[0] = M, m->y[1] = N;
    m->as[0] = s->ta ? 1 : K, m->as[1] = s->ta ? M : 1;
    m->bs[0] = s->tb ? 1 : N, m->bs[1] = s->tb ? K : 1;
    contiguous(2, m->y, m->ys);
    return true;
}

static const tdm_tensor *input(tdm_kernel_ctx *ctx, int i) {
    return ctx->n_in > i ? ctx->in[i] : NULL;
}

/* How Gemm applies C for this run. */
static int gemm_c_mode(const mm_state *s, const tdm_tensor *C, int64_t N) {
    if (!C || s->beta == 0.0f) return C_NONE;
    bool row = (C->rank == 1 && C->dims[0] == N) || (C->rank == 2 && C->dims[0] == 1 && C->dims[1] == N);
    if (row && s->alpha == 1.0f && s->beta == 1.0f) return C_BIAS;
    return C_SUM;
}

/* The primitive for one chunk. wei_fixed: the weights layout to use (NULL: for a constant B
 * try the layout oneDNN prefers, then the transposed one, then B's own). */
static tdm_status *mm_part_build(mm_state *s, mm_entry *e, const mm_shape *m, int sd,
                                 int64_t units, bool constant, const dnnl_memory_desc_t *wei_fixed,
                                 mm_part *p, bool *ok) {
    *ok = false;
    int nd = m->nd;
    int64_t a[DNNL_MAX_NDIMS], b[DNNL_MAX_NDIMS], y[DNNL_MAX_NDIMS];
    memcpy(a, m->a, sizeof a);
    memcpy(b, m->b, sizeof b);
    memcpy(y, m->y, sizeof y);
    if (sd >= 0) {
        y[sd] = units;
        if (sd == nd - 2 || a[sd] != 1) a[sd] = units;
        if (sd < nd - 2 && b[sd] != 1) b[sd] = units;
    }
    p->units = units;
    dn_md_strided(&p->src, nd, a, m->as);
    dn_md_strided(&p->dst, nd, y, m->ys);
    if (e->bf16) p->src.data_type = dnnl_bf16;
    dnnl_memory_desc_t usr_b, trans_b;
    dn_md_strided(&usr_b, nd, b, m->bs);
    int64_t ts[DNNL_MAX_NDIMS];
    contiguous(nd, b, ts);
    ts[nd - 2] = 1;
    ts[nd - 1] = b[nd - 2];
    dn_md_strided(&trans_b, nd, b, ts);
    dnnl_memory_desc_t plain_b, padded_b;
    dn_md_plain(&plain_b, nd, b);
    int64_t ps[DNNL_MAX_NDIMS]; /* row-major, rows MM_B_PAD floats longer */
    ps[nd - 1] = 1;
    ps[nd - 2] = b[nd - 1] + MM_B_PAD;
    for (int i = nd - 3; i >= 0; i--) ps[i] = ps[i + 1] * b[i + 1];
    dn_md_strided(&padded_b, nd, b, ps);
    bool alias = b[nd - 1] % MM_B_ALIAS == 0;

    dnnl_primitive_attr_t attr;
    TDM_TRY(dn_attr_new(&attr));
    dnnl_post_ops_t po = NULL;
    bool good = dnnl_post_ops_create(&po) == dnnl_success;
    if (good && e->cmode == C_SUM) good = dnnl_post_ops_append_sum(po, s->beta) == dnnl_success;
    if (good && s->kind == MM_FUSED) good = dn_append_activation(po, s->act, NULL, 0);
    if (good) good = dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (good && s->alpha != 1.0f)
        good = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &s->alpha) == dnnl_success;
    dnnl_primitive_desc_t pd = NULL;
    /* constant B: 0 oneDNN's choice (not plain row-major when N aliases), 1 padded rows
     * (only when N aliases), 2 [N, K], 3 B's own layout; else 3, or 4 the given layout */
    int first = wei_fixed ? 4 : constant ? 0 : 3;
    for (int attempt = first; good && attempt < 5 && !pd; attempt++) {
        dnnl_memory_desc_t wei;
        if (attempt == 0) {
            if (!dn_md_tag(&wei, nd, b, dnnl_format_tag_any)) continue;
        } else if (attempt == 1 || attempt == 2) {
            if (attempt == 1 && !alias) continue;
            wei = attempt == 1 ? padded_b : trans_b;
        } else if (attempt == 3) {
            wei = usr_b;
        } else {
            if (!wei_fixed) break;
            wei = *wei_fixed;
        }
        if (e->bf16) wei.data_type = dnnl_bf16;
        dnnl_matmul_desc_t md;
        if (dnnl_matmul_desc_init(&md, &p->src, &wei, e->cmode == C_BIAS ? &e->bias : NULL,
                                  &p->dst) != dnnl_success)
            continue;
        if (dnnl_primitive_desc_create(&pd, &md, attr, s->base.eng, NULL) != dnnl_success) {
            pd = NULL;
            continue;
        }
        if (dn_refuse_ref(&s->base, pd)) { /* the next weight layout */
            pd = NULL;
            continue;
        }
        if (attempt == 0 && alias &&
            dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                                   &plain_b)) {
            dnnl_primitive_desc_destroy(pd);
            pd = NULL;
        }
    }
    dnnl_primitive_attr_destroy(attr);
    if (!pd) return NULL;
    dn_query_md(pd, dnnl_query_weights_md, &p->wei);
    if (!wei_fixed) e->usr_wei = usr_b;
    TDM_TRY(dn_prim_from_pd(pd, &p->mm));
    *ok = true;
    return NULL;
}

/* Units per chunk: one chunk per thread, rows in multiples of 4. Each chunk's product packs
 * its own copy of B's panels, so fewer, larger chunks run faster (BERT-base at batch 1 on 2
 * threads: chunks of 64 rows 165 ms, of 32 rows 176 ms), and a batch of 8 rows still splits
 * (DLRM-like at batch 8, 2 threads: rows in multiples of 8 0.111 ms, of 4 0.087 ms). With the
 * thread pool's claimed chunks a late thread's chunk is run by the others. */
static int64_t mm_chunk(int64_t units, int64_t align, int threads) {
    if (threads <= 1 || units <= align) return units;
    int64_t c = (units + threads - 1) / threads;
    c = (c + align - 1) / align * align;
    return c < units ? c : units;
}

static tdm_status *mm_build(dn_state *bs, tdm_kernel_ctx *ctx, dn_entry *he) {
    mm_state *s = (mm_state *)bs;
    mm_entry *e = (mm_entry *)he;
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1], *bias = input(ctx, 2);
    mm_shape m;
    atomic_flag_clear(&e->part[0].held.busy);
    atomic_flag_clear(&e->part[1].held.busy);
    if (!(s->kind == MM_GEMM ? gemm_shape(s, A, B, &m) : matmul_shape(A, B, &m))) return NULL;
    int nd = m.nd;
    int64_t N = m.y[nd - 1];
    e->M = m.y[nd - 2];
    e->N = N;
    if (s->kind == MM_GEMM) {
        e->cmode = gemm_c_mode(s, bias, N);
    } else if (bias) {
        if (bias->rank != 1 || bias->dims[0] != N) return NULL;
        e->cmode = C_BIAS;
    }
    int64_t bd[DNNL_MAX_NDIMS];
    for (int i = 0; i < nd; i++) bd[i] = i == nd - 1 ? N : 1;
    dn_md_plain(&e->bias, nd, bd);
    /* the split: the outermost dimension of Y above 1, rows excluded for a Gemm's C */
    int sd = -1;
    for (int i = 0; i <= nd - 2 && sd < 0; i++)
        if (m.y[i] > 1) sd = i;
    double flops = 2.0;
    for (int i = 0; i < nd; i++) flops *= (double)m.y[i];
    flops *= (double)m.a[nd - 1];
    int64_t units = sd >= 0 ? m.y[sd] : 1;
    e->chunk = sd < 0 || flops < 2.0e6 ? units : mm_chunk(units, sd == nd - 2 ? 4 : 1, dn_threads(ctx));
    e->n_chunks = (units + e->chunk - 1) / e->chunk;
    if (e->n_chunks == 1) sd = -1;
    if (sd >= 0) {
        e->a_step = sd == nd - 2 || m.a[sd] != 1 ? m.as[sd] : 0;
        e->b_step = sd < nd - 2 && m.b[sd] != 1 ? m.bs[sd] : 0;
        e->y_step = m.ys[sd];
    }
    /* constant weights are reordered only when every chunk uses all of B */
    bool constant = B == bs->wconst && e->b_step == 0;
    e->bf16 = dn_bf16(ctx) && e->b_step == 0;
    if (e->bf16) { /* A's elements, wherever its strides put them: A is a whole tensor */
        int64_t n = A->count;
        dn_md_plain(&e->a_f32, 1, &n);
        e->a_bf16 = e->a_f32;
        e->a_bf16.data_type = dnnl_bf16;
        TDM_TRY(dn_reorder_new(bs->eng, &e->a_f32, &e->a_bf16, &e->r_a));
    }
    bool ok;
    TDM_TRY(mm_part_build(s, e, &m, sd, e->chunk, constant, NULL, &e->part[0], &ok));
    if (!ok) return NULL;
    int64_t tail = units - (e->n_chunks - 1) * e->chunk;
    if (sd >= 0 && tail != e->chunk) {
        dnnl_memory_desc_t wfix = e->part[0].wei;
        if (e->b_step) { /* B is cut too: the tail's B has its own extent, B's own layout */
            int64_t b[DNNL_MAX_NDIMS];
            memcpy(b, m.b, sizeof b);
            b[sd] = tail;
            dn_md_strided(&wfix, nd, b, m.bs);
        }
        TDM_TRY(mm_part_build(s, e, &m, sd, tail, false, &wfix, &e->part[1], &ok));
        if (!ok) return NULL;
    }
    TDM_TRY(dn_reorder_new(bs->eng, &e->usr_wei, &e->part[0].wei, &e->r_wei));
    for (int i = 0; constant && e->r_wei.p && i < bs->n_entries && !e->wbuf; i++) {
        mm_entry *o = (mm_entry *)bs->entries[i]; /* another shape, same B layout */
        if (o->wbuf && dnnl_memory_desc_equal(&o->part[0].wei, &e->part[0].wei)) {
            e->wbuf = o->wbuf;
            e->wbuf_shared = true;
        }
    }
    if (constant && e->r_wei.p && !e->wbuf) {
        size_t bytes = dn_md_bytes(&e->part[0].wei);
        if (!(e->wbuf = tdm_alloc(bs->alloc, bytes ? bytes : 1))) return dn_oom(ctx);
        memset(e->wbuf, 0, bytes); /* the padding of padded rows too */
        TDM_TRY(dn_exec_reorder(ctx, bs->eng, &e->r_wei, &e->usr_wei, B->data, &e->part[0].wei,
                                e->wbuf));
    }
    dn_note_impl(bs, "%s", dn_prim_impl(&e->part[0].mm));
    if (bs->refused[0])
        dn_log(ctx, TDM_LOG_INFO, "oneDNN offered its reference matmul (%s) for a weight "
               "layout; using another: %s", bs->refused, bs->impl);
    he->generic = false;
    return NULL;
}

/* Y rows [r0, r1) = C broadcast (Gemm's beta * C goes through the sum post-op). */
static void fill_c(const tdm_tensor *C, float *y, int64_t r0, int64_t r1, int64_t N) {
    const float *c = C->data;
    int64_t cd[2] = {1, 1};
    if (C->rank == 1) cd[1] = C->dims[0];
    if (C->rank == 2) cd[0] = C->dims[0], cd[1] = C->dims[1];
    int64_t rs = cd[0] == 1 ? 0 : cd[1], cs = cd[1] == 1 ? 0 : 1;
    for (int64_t i = r0; i < r1; i++)
        for (int64_t j = 0; j < N; j++) y[i * N + j] = c[i * rs + j * cs];
}

static bool c_broadcasts(const tdm_tensor *C, int64_t M, int64_t N) {
    if (C->rank > 2) return false;
    int64_t r = C->rank == 2 ? C->dims[0] : 1, c = C->rank >= 1 ? C->dims[C->rank - 1] : 1;
    return (r == 1 || r == M) && (c == 1 || c == N);
}

typedef struct mm_run {
    mm_state *s;
    mm_entry *e;
    const float *a, *b, *c;
    const uint16_t *a16; /* bf16: A converted */
    const void *wei; /* B (or its reordered copy) for every chunk when not cut */
    float *y;
} mm_run;

static tdm_status *mm_item(void *arg, tdm_kernel_ctx *ctx, int64_t j) {
    mm_run *r = arg;
    mm_entry *e = r->e;
    mm_part *p = j == e->n_chunks - 1 && e->part[1].units ? &e->part[1] : &e->part[0];
    int64_t u0 = j * e->chunk;
    float *y = r->y + u0 * e->y_step;
    if (e->cmode == C_SUM) /* Gemm: 2-D, the split is over rows */
        fill_c(ctx->in[2], r->y, e->n_chunks > 1 ? u0 : 0,
               e->n_chunks > 1 ? u0 + p->units : e->M, e->N);
    const void *a = r->a16 ? (const void *)(r->a16 + u0 * e->a_step) : (const void *)(r->a + u0 * e->a_step);
    dn_arg args[4] = {{DNNL_ARG_SRC, &p->src, a},
                      {DNNL_ARG_WEIGHTS, &p->wei,
                       e->b_step ? (const void *)(r->b + u0 * e->b_step) : r->wei},
                      {DNNL_ARG_DST, &p->dst, y},
                      {DNNL_ARG_BIAS, &e->bias, r->c}};
    return dn_exec_held(ctx, r->s->base.eng, &p->mm, e->cmode == C_BIAS ? 4 : 3, args, NULL,
                        &p->held);
}

static tdm_status *mm_exec(mm_state *s, tdm_kernel_ctx *ctx, mm_entry *e) {
    const tdm_tensor *bias = input(ctx, 2);
    mm_run r = {s, e, ctx->in[0]->data, ctx->in[1]->data, bias ? bias->data : NULL, NULL,
                ctx->in[1]->data, ctx->out[0]->data};
    void *ws = NULL, *a16 = NULL;
    if (e->bf16) {
        size_t n = dn_md_bytes(&e->a_bf16);
        if (!(a16 = tdm_kscratch(ctx, n ? n : 1))) return dn_oom(ctx);
        tdm_status *st = dn_exec_reorder(ctx, s->base.eng, &e->r_a, &e->a_f32, r.a, &e->a_bf16, a16);
        if (st) {
            tdm_free(ctx->alloc, a16);
            return st;
        }
        r.a16 = a16;
    }
    if (e->wbuf) {
        r.wei = e->wbuf;
    } else if (e->r_wei.p) { /* not constant: B into the chosen layout for this run */
        size_t n = dn_md_bytes(&e->part[0].wei);
        if (!(ws = tdm_kscratch(ctx, n ? n : 1))) return dn_oom(ctx);
        tdm_status *st = dn_exec_reorder(ctx, s->base.eng, &e->r_wei, &e->usr_wei, r.b,
                                         &e->part[0].wei, ws);
        if (st) {
            tdm_free(ctx->alloc, ws);
            tdm_free(ctx->alloc, a16);
            return st;
        }
        r.wei = ws;
    }
    tdm_status *st = dn_parallel(ctx, e->n_chunks, mm_item, &r);
    tdm_free(ctx->alloc, ws);
    tdm_free(ctx->alloc, a16);
    return st;
}

/* The few-row path (k_gemv.c): Y is up to DN_GEMV_MAX_ROWS rows of N = x[K] . B with a
 * constant 2-D B, plus a bias over the columns and FusedMatMul's activation; Gemm only as
 * alpha * A.B + C with C a bias ([N] or [1, N], beta 1) and A not transposed. Returns false
 * when it does not apply. */
static bool gemv_try(mm_state *s, tdm_kernel_ctx *ctx, tdm_status **st) {
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1], *C = input(ctx, 2);
    const tdm_tensor *Y = ctx->out[0];
    if (B != s->base.wconst || B->rank != 2 || A->rank < 1 || Y->rank < 1) return false;
    bool nk = s->kind == MM_GEMM && s->tb;
    int64_t K = B->dims[nk ? 1 : 0], N = B->dims[nk ? 0 : 1];
    if (K < 1 || N < 1 || A->dims[A->rank - 1] != K || A->count % K || Y->dims[Y->rank - 1] != N)
        return false;
    int64_t rows = A->count / K;
    if (rows > DN_GEMV_MAX_ROWS || Y->count != rows * N) return false;
    /* several rows: only for a B that does not stay in the cache from run to run (oneDNN
     * reuses each loaded weight for several rows, which wins when B comes from the cache: the
     * DLRM-like MLPs at batch 8, 0.110 ms with oneDNN, 0.148 ms here) */
    if (rows > 1 && (double)K * (double)N * sizeof(float) < DN_GEMV_COLD_BYTES) return false;
    if (s->kind == MM_GEMM) {
        if (s->ta || A->rank != 2 || (C && s->beta != 1.0f)) return false;
        if (C && !((C->rank == 1 && C->dims[0] == N) || (C->rank == 2 && C->dims[0] == 1 && C->dims[1] == N)))
            return false;
    } else if (C && (s->kind != MM_FUSED || C->rank != 1 || C->dims[0] != N)) {
        return false;
    }
    dn_gemv *g = atomic_load_explicit(&s->gemv, memory_order_acquire);
    if (!g) {
        if ((*st = dn_gemv_pack(s->base.alloc, B->data, K, N, nk, &g))) return true;
        dn_gemv *none = NULL;
        if (!atomic_compare_exchange_strong(&s->gemv, &none, g)) { /* another run packed it */
            dn_gemv_free(s->base.alloc, g);
            g = none;
        }
    }
    if (dn_gemv_k(g) != K || dn_gemv_n(g) != N) return false;
    dn_gemv_run(ctx, g, rows, A->data, C ? C->data : NULL,
                s->kind == MM_GEMM ? s->alpha : 1.0f, s->kind == MM_FUSED ? &s->fact : NULL,
                Y->data);
    *st = NULL;
    return true;
}

tdm_status *dn_matmul_run(tdm_kernel_ctx *ctx) {
    mm_state *s = ctx->state;
    if (!s || s->base.generic || ctx->n_in < 2 || !ctx->in[0] || !ctx->in[1] || !ctx->out[0])
        return dn_fallback(ctx);
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1], *C = input(ctx, 2);
    const tdm_tensor *Y = ctx->out[0];
    if (A->dtype != TDM_FLOAT || B->dtype != TDM_FLOAT || (C && C->dtype != TDM_FLOAT) ||
        A->count == 0 || B->count == 0 || Y->count == 0 || A->rank > DNNL_MAX_NDIMS ||
        B->rank > DNNL_MAX_NDIMS || (C && C->rank > DNNL_MAX_NDIMS))
        return dn_fallback(ctx);
    if (s->kind == MM_GEMM && C && (Y->rank != 2 || !c_broadcasts(C, Y->dims[0], Y->dims[1])))
        return dn_fallback(ctx);
    tdm_status *gst = NULL;
    bool bf16 = dn_bf16(ctx); /* (the few-row path is f32 code: bf16 runs oneDNN's) */
    if (!bf16 && gemv_try(s, ctx, &gst)) return gst;
    int64_t key[DN_KEY];
    int nk = 0;
    key[nk++] = dn_threads(ctx);
    key[nk++] = (C ? 1 : 0) | (B == s->base.wconst ? 2 : 0) | (bf16 ? 4 : 0);
    const tdm_tensor *parts[3] = {A, B, C};
    for (int t = 0; t < 3; t++) {
        if (!parts[t]) continue;
        if (nk + 1 + parts[t]->rank > DN_KEY) return dn_fallback(ctx);
        key[nk++] = parts[t]->rank;
        for (int i = 0; i < parts[t]->rank; i++) key[nk++] = parts[t]->dims[i];
    }
    int omp = dn_omp_begin();
    dn_entry *e;
    tdm_status *st = dn_cache_get(&s->base, ctx, key, nk, mm_build, &e);
    if (!st) st = e->generic ? dn_fallback(ctx) : mm_exec(s, ctx, (mm_entry *)e);
    dn_entry_done(&s->base, e);
    dn_omp_end(omp);
    return st;
}
