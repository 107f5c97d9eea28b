/* dnnl family: QLinearMatMul and tandem's QMatMul (ops/fused.h) on oneDNN's int8 matmul
 * (u8s8s32 / s8s8s32; brgemm with VNNI on AVX-512, gemm kernels on AVX2). The output scales
 * are constants of the primitive (runtime scales would take oneDNN's slower gemm kernel).
 *
 * A [..., M, K] (8-bit) times a constant int8 B [K, N]: the batch dims of A fold into the
 * rows, one [rows, K] x [K, N] product. Requantisation as in k_dnnl_qconv.c: output scales
 * a_scale * b_scale[n] / y_scale (per column when b_scale is), the
 * int32 bias (QMatMul) added to the accumulator, qmin / qmax as a clip post-op, the zero
 * points of A, B and Y as oneDNN zero points. The weights are reordered once into the
 * layout oneDNN picks.
 *
 * MatMulInteger (int32 Y, no scales) runs on the same primitive, its a_zero_point (computed
 * by DynamicQuantizeLinear in dynamically quantized models) as a runtime zero point.
 *
 * The fast path needs constant per-tensor scales and zero points of A and Y, b_scale per
 * tensor or per column, a per-tensor b zero point, an 8-bit A and Y; anything else runs
 * the reference kernel (k_misc_quant.c). Threads: chunks of rows (one primitive for the
 * full chunks, one for a smaller last chunk).
 *
 * Without VNNI, with uint8 A, b zero point 0 and columns whose same-sign weights can pass
 * int16 with large bytes (k_dnnl.h, dn_q8_lim), the node also keeps exact halves: B' =
 * [a; b] (2K rows, w = a + b, |a|, |b| <= 64) and a primitive over A' = [A, A] (2K columns,
 * built per chunk in the scratch); a run whose A has a byte above the limit takes them
 * (with a nonzero b zero point, which B' would count twice, such a run takes the reference
 * loops). int8 A without VNNI runs as uint8 (dn_q8_flip: A ^ 0x80, zero point + 128).
 * MatMulInteger takes the same path (int32 Y: no scales; int8 A without VNNI: the loops). */
#include <string.h>

#include "backends/cpu/k_dnnl.h"
#include "core/alloc.h"

/* k_misc_quant.c */
tdm_status *tdm_misc_qlinear_matmul_run(tdm_kernel_ctx *ctx);

typedef struct qm_state {
    dn_state base; /* first */
    bool integer;  /* MatMulInteger: int32 Y = (A - a_zp) (B - b_zp), no scales */
    bool azp_rt;   /* MatMulInteger's a_zero_point is computed (DynamicQuantizeLinear):
                      a runtime zero point of the primitive */
    int32_t azp, bzp, yzp;
    dnnl_data_type_t yt;
    float *oscale; /* [oscale_n]: one, or per column */
    int64_t oscale_n;
    int32_t *bias; /* [N] or NULL */
    const tdm_tensor *b;
    int64_t K, N;
    bool clip;
    float clo, chi;
    int lim;       /* without VNNI: A's bytes up to lim are exact with B (255: always); a
                      run with larger ones takes the halves, or (b zero point) the loops */
    int8_t *bh;    /* [2K, N]: the halves [a; b] of B (NULL: none) */
    bool novnni;   /* the CPU has no VNNI (dn_has_vnni) */
    bool flip;     /* int8 A runs as uint8 (dn_q8_flip; azp is then A's + 128) */
} qm_state;

typedef struct qm_part {
    int64_t rows;
    dn_prim mm, mm2; /* mm2: the halves' primitive over A' (p NULL: none) */
    dnnl_memory_desc_t src, wei, dst, bias, zp, src2, wei2;
    dn_held held, held2;
} qm_part;

typedef struct qm_entry {
    dn_entry h; /* first */
    int64_t rows, chunk, n_chunks;
    dnnl_data_type_t at;
    qm_part part[2];
    void *wbuf, *wbuf2;
    size_t scratch; /* per item (with halves: then A' of a chunk) */
    bool halves;    /* every part has mm2 */
} qm_entry;

static void qm_clear(dn_state *s, dn_entry *he) {
    qm_entry *e = (qm_entry *)he;
    for (int i = 0; i < 2; i++) {
        dn_held_clear(&e->part[i].held);
        dn_held_clear(&e->part[i].held2);
        dn_prim_clear(&e->part[i].mm);
        dn_prim_clear(&e->part[i].mm2);
    }
    tdm_free(s->alloc, e->wbuf);
    tdm_free(s->alloc, e->wbuf2);
    e->wbuf = e->wbuf2 = NULL;
}

void dn_qmatmul_release(void *state, const tdm_allocator *a) {
    qm_state *s = state;
    if (s) {
        tdm_free(s->base.alloc, s->oscale);
        tdm_free(s->base.alloc, s->bias);
        tdm_free(s->base.alloc, s->bh);
    }
    dn_release(state, a);
}


/* A per-column zero point of zeros counts as 0. */
static bool q_zero_or_scalar(const tdm_tensor *t, int32_t *v) {
    if (dn_q8_scalar(t, v)) return true;
    *v = 0;
    return dn_q8_zeros(t);
}


/* Without VNNI: B's limit, and with a symmetric B that can saturate, its exact halves
 * [a; b] (dn_q8_halves); false when out of memory. */
static bool qm_halves(qm_state *s, const tdm_tensor *b) {
    if (!s->novnni) return true;
    s->lim = dn_q8_lim(b->data, s->N, s->K, 1, s->N);
    if (s->lim < 255 && !s->bzp) {
        s->bh = tdm_alloc(s->base.alloc, 2 * (size_t)b->count + 1);
        if (!s->bh) return false;
        dn_q8_halves(b->data, s->bh, s->bh + b->count, b->count);
    }
    return true;
}

static bool qm_setup(qm_state *s, const tdm_node *node, int n_in, const tdm_tensor *const *in) {
    if (n_in < 8) return false;
    for (int i = 1; i < 8; i++)
        if (i != 3 && node->inputs[i] >= 0 && !in[i]) return false; /* not constant */
    const tdm_tensor *b = in[3], *bs = in[4], *bias = n_in > 8 ? in[8] : NULL;
    if (n_in > 8 && node->n_inputs > 8 && node->inputs[8] >= 0 && !bias) return false;
    float as, ys;
    if (!b || b->dtype != TDM_INT8 || b->rank != 2) return false;
    s->K = b->dims[0];
    s->N = b->dims[1];
    if (!dn_f32_scalar(in[1], &as) || !dn_f32_scalar(in[6], &ys) || !dn_q8_scalar(in[2], &s->azp) ||
        !q_zero_or_scalar(in[5], &s->bzp) || !dn_q8_scalar(in[7], &s->yzp))
        return false;
    s->flip = dn_q8_flip(in[2]);
    if (s->flip) s->azp += 128;
    if (!bs || bs->dtype != TDM_FLOAT || (bs->count != 1 && bs->count != s->N)) return false;
    if (bias && (bias->dtype != TDM_INT32 || bias->count != s->N)) return false;
    tdm_dtype yt = in[7] ? in[7]->dtype : TDM_UINT8;
    s->yt = yt == TDM_INT8 ? dnnl_s8 : dnnl_u8;
    s->b = b;
    s->oscale_n = bs->count;
    if (!dn_q8_requant(s->base.alloc, as, bs, ys, bs->count, bias, s->N, &s->oscale, &s->bias))
        return false;
    s->clip = dn_q8_clip(node, yt, s->yzp, &s->clo, &s->chi);
    /* without VNNI (uint8 A, or int8 A flipped to uint8) */
    return qm_halves(s, b);
}

/* MatMulInteger(A, B, a_zero_point?, b_zero_point?): B a constant int8 matrix, b's zero
 * point constant (0 or one value), a's constant or computed (one value). */
static bool qm_setup_integer(qm_state *s, const tdm_node *node, int n_in,
                             const tdm_tensor *const *in) {
    const tdm_tensor *b = n_in > 1 ? in[1] : NULL;
    if (!b || b->dtype != TDM_INT8 || b->rank != 2) return false;
    s->K = b->dims[0];
    s->N = b->dims[1];
    s->b = b;
    s->yt = dnnl_s32;
    bool has_azp = n_in > 2 && node->n_inputs > 2 && node->inputs[2] >= 0;
    if (has_azp && !in[2]) s->azp_rt = true;
    else if (has_azp && !dn_q8_scalar(in[2], &s->azp)) return false;
    bool has_bzp = n_in > 3 && node->n_inputs > 3 && node->inputs[3] >= 0;
    if (has_bzp && (!in[3] || !q_zero_or_scalar(in[3], &s->bzp))) return false;
    /* without VNNI: as QLinearMatMul (int8 A takes the loops) */
    return qm_halves(s, b);
}

tdm_status *dn_qmatmul_prepare(const tdm_node *node, int opset, int n_in,
                               const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset;
    qm_state *s;
    TDM_TRY(dn_state_new(a, sizeof *s, sizeof(qm_entry), qm_clear, (dn_state **)&s));
    *state = s;
    s->integer = strcmp(node->op_type, "MatMulInteger") == 0; /* (also picks the fallback) */
    s->novnni = !dn_has_vnni();
    s->lim = 255;
    bool ok = s->integer ? qm_setup_integer(s, node, n_in, in) : qm_setup(s, node, n_in, in);
    if (!s->base.generic && !ok) s->base.generic = true;
    return NULL;
}

static void md2(dnnl_memory_desc_t *md, int64_t r, int64_t c, dnnl_data_type_t dt,
                dnnl_format_tag_t tag) {
    dnnl_dims_t d = {r, c};
    if (dnnl_memory_desc_init_by_tag(md, 2, d, dt, tag) != dnnl_success) memset(md, 0, sizeof *md);
}

/* The primitive for chunks of `rows` rows; with `two` the halves' one (p->mm2, K doubled). */
static tdm_status *qm_part_build(qm_state *s, qm_entry *e, int64_t rows, bool two, qm_part *p,
                                 bool *ok) {
    *ok = false;
    dnnl_memory_desc_t wei;
    int64_t K = two ? 2 * s->K : s->K;
    md2(two ? &p->src2 : &p->src, rows, K, e->at, dnnl_ab);
    md2(&wei, K, s->N, dnnl_s8, dnnl_format_tag_any);
    md2(&p->dst, rows, s->N, s->yt, dnnl_ab);
    md2(&p->bias, 1, s->N, dnnl_s32, dnnl_ab);
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, two ? &p->src2 : &p->src, &wei, s->bias ? &p->bias : NULL, &p->dst) !=
        dnnl_success)
        return NULL;
    dnnl_primitive_attr_t attr;
    TDM_TRY(dn_attr_new(&attr));
    bool per_col = s->oscale_n > 1, good = true;
    if (!s->integer)
        good = dnnl_primitive_attr_set_output_scales(attr, per_col ? s->N : 1,
                                                     per_col ? 1 << 1 : 0, s->oscale) == dnnl_success;
    int32_t rt = DNNL_RUNTIME_S32_VAL;
    if (good && (s->azp || s->azp_rt))
        good = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0,
                                                   s->azp_rt ? &rt : &s->azp) == dnnl_success;
    dnnl_dims_t one = {1};
    dnnl_memory_desc_init_by_tag(&p->zp, 1, one, dnnl_s32, dnnl_a);
    if (good && s->bzp)
        good = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_WEIGHTS, 1, 0, &s->bzp) ==
               dnnl_success;
    if (good && s->yzp)
        good = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_DST, 1, 0, &s->yzp) == dnnl_success;
    if (good && s->clip) good = dn_attr_clip(attr, s->clo, s->chi);
    dnnl_primitive_desc_t pd = NULL;
    if (good && dnnl_primitive_desc_create(&pd, &md, attr, s->base.eng, NULL) != dnnl_success)
        pd = NULL;
    dnnl_primitive_attr_destroy(attr);
    if (!pd || dn_refuse_ref(&s->base, pd)) return NULL;
    if (two) {
        dn_query_md(pd, dnnl_query_weights_md, &p->wei2);
        if (p != &e->part[0] && !dnnl_memory_desc_equal(&p->wei2, &e->part[0].wei2)) {
            dnnl_primitive_desc_destroy(pd);
            return NULL;
        }
        TDM_TRY(dn_prim_from_pd(pd, &p->mm2));
        dn_note_impl(&s->base, "%s (halves)", dn_prim_impl(&p->mm2));
        *ok = true;
        return NULL;
    }
    dn_query_md(pd, dnnl_query_weights_md, &p->wei);
    if (p != &e->part[0] && !dnnl_memory_desc_equal(&p->wei, &e->part[0].wei)) {
        dnnl_primitive_desc_destroy(pd);
        return NULL;
    }
    p->rows = rows;
    TDM_TRY(dn_prim_from_pd(pd, &p->mm));
    dn_note_impl(&s->base, "%s", dn_prim_impl(&p->mm));
    *ok = true;
    return NULL;
}

static tdm_status *qm_build(dn_state *ds, tdm_kernel_ctx *ctx, dn_entry *he) {
    qm_state *s = (qm_state *)ds;
    qm_entry *e = (qm_entry *)he;
    const tdm_tensor *a = ctx->in[0];
    e->at = a->dtype == TDM_INT8 && !s->flip ? dnnl_s8 : dnnl_u8; /* (flip: A ^ 0x80) */
    e->rows = a->count / s->K;
    e->chunk = dn_chunk(e->rows, 8, 1, dn_threads(ctx));
    e->n_chunks = (e->rows + e->chunk - 1) / e->chunk;
    bool ok;
    TDM_TRY(qm_part_build(s, e, e->chunk, false, &e->part[0], &ok));
    int64_t last = e->rows - (e->n_chunks - 1) * e->chunk;
    if (ok && last != e->chunk) TDM_TRY(qm_part_build(s, e, last, false, &e->part[1], &ok));
    if (!ok) return NULL;
    /* the exact halves (both parts or none; without them large bytes saturate as before) */
    e->halves = s->bh && e->at == dnnl_u8;
    if (e->halves) TDM_TRY(qm_part_build(s, e, e->chunk, true, &e->part[0], &e->halves));
    if (e->halves && last != e->chunk)
        TDM_TRY(qm_part_build(s, e, last, true, &e->part[1], &e->halves));
    if (!e->halves)
        for (int i = 0; i < 2; i++) dn_prim_clear(&e->part[i].mm2);
    size_t sc = 0;
    for (int i = 0; i < 2; i++) {
        if (e->part[i].mm.scratch > sc) sc = e->part[i].mm.scratch;
        if (e->part[i].mm2.scratch > sc) sc = e->part[i].mm2.scratch;
    }
    e->scratch = (sc + 63) / 64 * 64;
    if (e->halves) e->scratch += ((size_t)(e->chunk * 2 * s->K) + 63) / 64 * 64;
    dnnl_memory_desc_t usr;
    md2(&usr, s->K, s->N, dnnl_s8, dnnl_ab);
    e->wbuf = tdm_alloc(s->base.alloc, dn_md_bytes(&e->part[0].wei) + 64);
    if (!e->wbuf) return dn_oom(ctx);
    dn_prim r;
    TDM_TRY(dn_reorder_new(s->base.eng, &usr, &e->part[0].wei, &r));
    tdm_status *st = dn_exec_reorder(ctx, s->base.eng, &r, &usr, s->b->data, &e->part[0].wei,
                                     e->wbuf);
    dn_prim_clear(&r);
    TDM_TRY(st);
    if (e->halves) {
        md2(&usr, 2 * s->K, s->N, dnnl_s8, dnnl_ab);
        e->wbuf2 = tdm_alloc(s->base.alloc, dn_md_bytes(&e->part[0].wei2) + 64);
        if (!e->wbuf2) return dn_oom(ctx);
        TDM_TRY(dn_reorder_new(s->base.eng, &usr, &e->part[0].wei2, &r));
        st = dn_exec_reorder(ctx, s->base.eng, &r, &usr, s->bh, &e->part[0].wei2, e->wbuf2);
        dn_prim_clear(&r);
        TDM_TRY(st);
    }
    e->h.generic = false;
    return NULL;
}

typedef struct qm_run {
    qm_state *s;
    qm_entry *e;
    const tdm_tensor *a;
    tdm_tensor *y;
    char *scratch;
    int32_t azp; /* MatMulInteger's computed a_zero_point of this run */
    bool two;    /* A has a byte above s->lim: A' and the halves' primitives */
} qm_run;

static tdm_status *qm_item(void *arg, tdm_kernel_ctx *ctx, int64_t i) {
    qm_run *r = arg;
    qm_state *s = r->s;
    qm_entry *e = r->e;
    qm_part *p = &e->part[i == e->n_chunks - 1 && e->part[1].rows ? 1 : 0];
    int64_t r0 = i * e->chunk;
    dn_arg args[5];
    int n = 0;
    size_t ys = s->integer ? sizeof(int32_t) : 1;
    char *scratch = r->scratch + (size_t)i * e->scratch;
    if (r->two) { /* A' = [A, A]: each row twice, after the primitive's scratchpad */
        uint8_t *a2 = (uint8_t *)scratch + (p->mm2.scratch + 63) / 64 * 64;
        /* rows are A's channels-last pixels of K bytes */
        dn_x2_u8((const uint8_t *)r->a->data + r0 * s->K, true, s->K, 1, p->rows, 0, a2);
        args[n++] = (dn_arg){DNNL_ARG_SRC, &p->src2, a2};
        args[n++] = (dn_arg){DNNL_ARG_WEIGHTS, &p->wei2, e->wbuf2};
    } else {
        args[n++] = (dn_arg){DNNL_ARG_SRC, &p->src, (const char *)r->a->data + r0 * s->K};
        args[n++] = (dn_arg){DNNL_ARG_WEIGHTS, &p->wei, e->wbuf};
    }
    args[n++] = (dn_arg){DNNL_ARG_DST, &p->dst, (char *)r->y->data + (size_t)(r0 * s->N) * ys};
    if (s->azp_rt) args[n++] = (dn_arg){DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, &p->zp, &r->azp};
    if (s->bias) args[n++] = (dn_arg){DNNL_ARG_BIAS, &p->bias, s->bias};
    const dn_prim *mm = r->two ? &p->mm2 : &p->mm;
    return dn_exec_held(ctx, s->base.eng, mm, n, args, mm->scratch ? scratch : NULL,
                        r->two ? &p->held2 : &p->held);
}

static tdm_status *qm_generic(tdm_kernel_ctx *ctx, const qm_state *s) {
    /* MatMulInteger: the nn family's kernel (dn_fallback), which ran it before */
    return s && s->integer ? dn_fallback(ctx) : tdm_misc_qlinear_matmul_run(ctx);
}

tdm_status *dn_qmatmul_run(tdm_kernel_ctx *ctx) {
    qm_state *s = ctx->state;
    const tdm_tensor *a = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    const tdm_tensor *azp = ctx->n_in > 2 ? ctx->in[2] : NULL;
    if (!s || s->base.generic || (a->dtype != TDM_UINT8 && a->dtype != TDM_INT8) || a->rank < 1 ||
        a->dims[a->rank - 1] != s->K || y->count == 0 || (azp && azp->dtype != a->dtype) ||
        (s->azp_rt && (!azp || azp->count != 1)) ||
        (a->dtype == TDM_INT8 && s->novnni && !s->flip)) /* (int8 A without a zero point) */
        return qm_generic(ctx, s);
    bool flip = s->flip && a->dtype == TDM_INT8;
    int32_t azp_v = 0;
    if (s->azp_rt) dn_q8_scalar(azp, &azp_v);
    int64_t key[3] = {dn_threads(ctx), a->dtype, a->count / s->K};
    dn_entry *he;
    /* oneDNN plans a primitive for the thread count at its creation: 1, as it runs */
    int prev = dn_omp_begin();
    tdm_status *st = dn_cache_get(&s->base, ctx, key, 3, qm_build, &he);
    if (st) {
        dn_omp_end(prev);
        return st;
    }
    qm_entry *e = (qm_entry *)he;
    if (e->h.generic) {
        dn_entry_done(&s->base, he);
        dn_omp_end(prev);
        return qm_generic(ctx, s);
    }
    size_t fb = flip ? ((size_t)a->count + 63) / 64 * 64 : 0; /* A ^ 0x80 first */
    size_t need = fb + (size_t)e->n_chunks * e->scratch;
    bool own = false, ref = false;
    char *buf = dn_scratch_get(&s->base, ctx, need, &own);
    tdm_tensor av;
    if (need && !buf) {
        st = dn_oom(ctx);
    } else {
        if (flip) st = dn_q8_flip_x(ctx, a, (uint8_t *)buf, &av);
        if (flip) a = &av;
        bool big = !st && dn_q8_halves_use(s->lim, ctx, a, s->azp_rt ? azp_v : s->azp);
        /* large bytes without halves (a b zero point, or no halves' primitive): the loops */
        ref = big && !e->halves;
        qm_run r = {s, e, a, y, buf + fb, azp_v, big && !ref};
        if (!st && !ref) st = dn_parallel(ctx, e->n_chunks, qm_item, &r);
    }
    dn_scratch_put(&s->base, ctx, buf, own);
    dn_entry_done(&s->base, he);
    dn_omp_end(prev);
    return ref ? qm_generic(ctx, s) : st;
}
