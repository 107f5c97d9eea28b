/* CPU kernels, binary family: the broadcast engine shared by every elementwise op with
 * 2 or 3 inputs. See k_binary_impl.h for how shapes are reduced to inner loops. */
#include <string.h>

#include "backends/cpu/k_binary_impl.h"
#include "core/threadpool.h"

#define KB_MAX_IN 3

typedef struct kb_plan {
    int rank; /* >= 1 after coalescing */
    int n_in;
    int64_t dims[TDM_MAX_RANK];
    int64_t st[KB_MAX_IN][TDM_MAX_RANK]; /* element strides per input, 0 = repeated */
    unsigned mode;                       /* bit k: input k repeats along the inner dim */
    int64_t total;
} kb_plan;

typedef struct kb_job {
    const kb_plan *p;
    tdm_kb_fn2 fn2;
    tdm_kb_fn3 fn3;
    const char *in[KB_MAX_IN];
    size_t es[KB_MAX_IN];
    char *out;
    size_t oes;
} kb_job;

tdm_kb_operand tdm_kb_operand_of(const tdm_tensor *t) {
    tdm_kb_operand o = {t->data, tdm_dtype_elem_size(t->dtype), t->rank, t->dims};
    return o;
}

tdm_kb_out tdm_kb_out_of(tdm_tensor *t) {
    tdm_kb_out o = {t->data, tdm_dtype_elem_size(t->dtype), t->rank, t->dims};
    return o;
}

/* Builds the plan; returns -1, or the index of an input that does not broadcast to the
 * output shape. */
static int plan_build(kb_plan *p, int n_in, const tdm_kb_operand *in, const tdm_kb_out *out) {
    int64_t full[KB_MAX_IN][TDM_MAX_RANK];
    int orank = out->rank;
    p->n_in = n_in;
    p->total = 1;
    for (int d = 0; d < orank; d++) p->total *= out->dims[d];
    for (int k = 0; k < n_in; k++) {
        if (in[k].rank > orank || in[k].rank < 0) return k;
        int off = orank - in[k].rank;
        for (int d = 0; d < in[k].rank; d++)
            if (in[k].dims[d] != 1 && in[k].dims[d] != out->dims[d + off]) return k;
        tdm_broadcast_strides(in[k].rank, in[k].dims, orank, out->dims, full[k]);
    }
    int r = 0;
    for (int d = 0; d < orank; d++) {
        int64_t n = out->dims[d];
        if (n == 1) continue;
        bool merge = r > 0;
        for (int k = 0; k < n_in && merge; k++)
            if (p->st[k][r - 1] != full[k][d] * n) merge = false;
        if (merge) {
            p->dims[r - 1] *= n;
            for (int k = 0; k < n_in; k++) p->st[k][r - 1] = full[k][d];
        } else {
            p->dims[r] = n;
            for (int k = 0; k < n_in; k++) p->st[k][r] = full[k][d];
            r++;
        }
    }
    if (r == 0) {
        p->dims[0] = 1;
        for (int k = 0; k < n_in; k++) p->st[k][0] = 0;
        r = 1;
    }
    p->rank = r;
    p->mode = 0;
    for (int k = 0; k < n_in; k++)
        if (p->st[k][r - 1] == 0) p->mode |= 1u << k;
    return -1;
}

static void job_range(void *arg, int64_t begin, int64_t end) {
    const kb_job *j = arg;
    const kb_plan *p = j->p;
    const int r = p->rank, n_in = p->n_in;
    const int64_t inner = p->dims[r - 1];
    int64_t idx[TDM_MAX_RANK];
    int64_t off[KB_MAX_IN] = {0, 0, 0};
    int64_t row = begin / inner, pos = begin % inner;
    for (int d = r - 2; d >= 0; d--) {
        idx[d] = row % p->dims[d];
        row /= p->dims[d];
        for (int k = 0; k < n_in; k++) off[k] += idx[d] * p->st[k][d];
    }
    for (int k = 0; k < n_in; k++) off[k] += pos * p->st[k][r - 1];
    int64_t cur = begin;
    for (;;) {
        int64_t len = inner - pos;
        if (len > end - cur) len = end - cur;
        const char *a = j->in[0] + off[0] * (int64_t)j->es[0];
        const char *b = j->in[1] + off[1] * (int64_t)j->es[1];
        char *o = j->out + cur * (int64_t)j->oes;
        if (j->fn2)
            j->fn2(a, b, o, len, p->mode);
        else
            j->fn3(a, b, j->in[2] + off[2] * (int64_t)j->es[2], o, len, p->mode);
        cur += len;
        if (cur >= end) break;
        for (int k = 0; k < n_in; k++) off[k] -= pos * p->st[k][r - 1];
        pos = 0;
        for (int d = r - 2; d >= 0; d--) {
            idx[d]++;
            for (int k = 0; k < n_in; k++) off[k] += p->st[k][d];
            if (idx[d] < p->dims[d]) break;
            for (int k = 0; k < n_in; k++) off[k] -= p->st[k][d] * p->dims[d];
            idx[d] = 0;
        }
    }
}

/* Short inner rows with one input repeated along the dim above them ([1, C, H, W, 16] times
 * [1, C, 1, 1, 16]: a squeeze-excitation product on channel-blocked tensors): the
 * inner-row loop above would call the element loop once per 16 elements. Instead the
 * repeated input's row is laid out KB_TILE bytes at a time (once per outer index) and the
 * element loop runs over whole tiles. Items: (outer index, tile of middle rows). */
#define KB_TILE 16384

typedef struct kb_tile {
    int rep;          /* the repeated input (0 or 1) */
    int64_t inner;    /* elements per row */
    int64_t mid;      /* rows in the middle dim */
    int64_t rows;     /* rows per tile */
    int64_t tiles;    /* tiles per outer index */
} kb_tile;

/* Does the plan have that shape (two inputs; the other input contiguous over the last two
 * dims)? */
static bool tile_plan(const kb_plan *p, const size_t *es, kb_tile *t) {
    const int r = p->rank;
    if (p->n_in != 2 || r < 2 || p->mode != 0) return false;
    const int64_t inner = p->dims[r - 1], mid = p->dims[r - 2];
    if (inner > 256 || mid < 2) return false;
    int rep = -1;
    for (int k = 0; k < 2; k++)
        if (p->st[k][r - 2] == 0 && p->st[k][r - 1] == 1) rep = k;
    if (rep < 0) return false;
    int o = 1 - rep;
    if (p->st[o][r - 1] != 1 || p->st[o][r - 2] != inner) return false;
    int64_t rows = KB_TILE / (inner * (int64_t)es[rep]);
    if (rows < 4) return false;
    t->rep = rep;
    t->inner = inner;
    t->mid = mid;
    t->rows = rows < mid ? rows : mid;
    t->tiles = (mid + t->rows - 1) / t->rows;
    return true;
}

typedef struct kb_tile_job {
    const kb_job *j;
    kb_tile t;
} kb_tile_job;

static void job_tiles(void *arg, int64_t begin, int64_t end) {
    const kb_tile_job *tj = arg;
    const kb_job *j = tj->j;
    const kb_plan *p = j->p;
    const kb_tile *t = &tj->t;
    const int r = p->rank, rep = t->rep, oth = 1 - rep;
    _Alignas(64) char row[KB_TILE];
    int64_t filled = -1; /* the outer index whose row is laid out in `row` */
    for (int64_t it = begin; it < end; it++) {
        int64_t q = it / t->tiles, m0 = (it % t->tiles) * t->rows;
        int64_t n = t->mid - m0 < t->rows ? t->mid - m0 : t->rows;
        int64_t off[2] = {0, 0}, rest = q;
        for (int d = r - 3; d >= 0; d--) {
            int64_t i = rest % p->dims[d];
            rest /= p->dims[d];
            off[0] += i * p->st[0][d];
            off[1] += i * p->st[1][d];
        }
        size_t rb = (size_t)t->inner * j->es[rep];
        if (filled != q) {
            const char *src = j->in[rep] + off[rep] * (int64_t)j->es[rep];
            for (int64_t m = 0; m < t->rows; m++) memcpy(row + (size_t)m * rb, src, rb);
            filled = q;
        }
        const char *x = j->in[oth] + (off[oth] + m0 * t->inner) * (int64_t)j->es[oth];
        char *o = j->out + (q * t->mid + m0) * t->inner * (int64_t)j->oes;
        if (rep == 1)
            j->fn2(x, row, o, n * t->inner, 0);
        else
            j->fn2(row, x, o, n * t->inner, 0);
    }
}

tdm_status *tdm_kb_run(tdm_kernel_ctx *ctx, int n_in, const tdm_kb_operand *in, tdm_kb_fn2 fn2,
                       tdm_kb_fn3 fn3, const tdm_kb_out *out, int64_t grain) {
    if (n_in < 2 || n_in > KB_MAX_IN || (n_in == 2 && !fn2) || (n_in == 3 && !fn3))
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "bad elementwise kernel setup");
    kb_plan p;
    int k = plan_build(&p, n_in, in, out);
    if (k >= 0) {
        char a[128], b[128];
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "input shape %s does not broadcast to the output shape %s",
                              tdm_shape_str(in[k].rank, in[k].dims, a, sizeof a),
                              tdm_shape_str(out->rank, out->dims, b, sizeof b));
    }
    if (p.total == 0) return NULL;
    kb_job j = {.p = &p, .fn2 = n_in == 2 ? fn2 : NULL, .fn3 = n_in == 3 ? fn3 : NULL,
                .out = out->data, .oes = out->esize};
    for (k = 0; k < KB_MAX_IN; k++) {
        j.in[k] = k < n_in ? in[k].data : NULL;
        j.es[k] = k < n_in ? in[k].esize : 0;
    }
    kb_tile_job tj = {.j = &j};
    if (tile_plan(&p, j.es, &tj.t)) {
        int64_t per = tj.t.rows * tj.t.inner, items = p.total / (tj.t.mid * tj.t.inner) * tj.t.tiles;
        tdm_parallel_for(ctx->pool, items, grain > per ? grain / per : 1, job_tiles, &tj);
        return NULL;
    }
    tdm_parallel_for(ctx->pool, p.total, grain, job_range, &j);
    return NULL;
}
