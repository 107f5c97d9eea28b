/* CPU kernels, shape family: data movement (Transpose, Concat, Split, Slice, Pad,
 * DepthToSpace, SpaceToDepth, Expand, Tile). All work on any dtype by element size;
 * STRING tensors move pointers and then copy the strings into the output. */
#include <string.h>

#include "backends/cpu/k_shape.h"
#include "core/alloc.h"

static const tdm_tensor *arg(const tdm_kernel_ctx *ctx, int i) {
    return i < ctx->n_in ? ctx->in[i] : NULL;
}

static tdm_status *shape_mismatch(const tdm_kernel_ctx *ctx) {
    return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output shape does not match the inputs");
}

static int64_t prod(const int64_t *d, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= d[i];
    return n;
}

/* ---- Transpose ------------------------------------------------------------------------ */

tdm_status *tdm_kshape_transpose(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int perm[TDM_MAX_RANK];
    int64_t st[TDM_MAX_RANK], ss[TDM_MAX_RANK];
    TDM_TRY(tdm_shape_transpose_perm(ctx->node, x->rank, perm));
    if (y->rank != x->rank) return shape_mismatch(ctx);
    tdm_strides(x->rank, x->dims, st);
    for (int i = 0; i < x->rank; i++) {
        if (y->dims[i] != x->dims[perm[i]]) return shape_mismatch(ctx);
        ss[i] = st[perm[i]];
    }
    tdm_kshape_strided_copy(ctx->pool, tdm_dtype_elem_size(x->dtype), y->rank, y->dims, x->data,
                            ss, y->data);
    return tdm_kshape_own_strings(y);
}

/* ---- Concat / Split ------------------------------------------------------------------- */

typedef struct cat_job {
    const tdm_kernel_ctx *ctx;
    int axis;
    int64_t inner; /* bytes per unit of the axis */
    size_t row;    /* bytes of one outer row of the joined tensor */
    bool split;
    size_t total, chunk; /* bytes of the whole; of one parallel item (a multiple of the element) */
} cat_job;

/* Bytes [b * chunk, e * chunk) of the whole tensor, wherever they fall: a range of chunks
 * may start inside one part's block of a row and end inside another's, so a Concat on the
 * channels of a single image (outer 1) still runs on every thread. */
static void cat_rows(void *arg_, int64_t b, int64_t e) {
    const cat_job *j = arg_;
    const tdm_kernel_ctx *ctx = j->ctx;
    int n = j->split ? ctx->n_out : ctx->n_in;
    const tdm_tensor *whole = j->split ? ctx->in[0] : ctx->out[0];
    size_t pos = (size_t)b * j->chunk, end = (size_t)e * j->chunk;
    if (end > j->total) end = j->total;
    while (pos < end) {
        size_t o = pos / j->row, r = pos % j->row, off = 0;
        for (int k = 0; k < n && pos < end; k++) {
            const tdm_tensor *part = j->split ? ctx->out[k] : ctx->in[k];
            size_t blk = (size_t)(part->dims[j->axis] * j->inner);
            if (r < off + blk) {
                size_t len = off + blk - r < end - pos ? off + blk - r : end - pos;
                char *w = (char *)whole->data + pos;
                char *p = (char *)part->data + o * blk + (r - off);
                if (j->split) memcpy(p, w, len);
                else memcpy(w, p, len);
                pos += len;
                r += len;
            }
            off += blk;
        }
    }
}

/* Checks parts against the whole (rank, off-axis dims, axis sum) and runs the copy. */
static tdm_status *cat_run(tdm_kernel_ctx *ctx, bool split, int64_t axis64) {
    const tdm_tensor *whole = split ? ctx->in[0] : ctx->out[0];
    int n = split ? ctx->n_out : ctx->n_in;
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, axis64, whole->rank, &axis));
    int64_t sum = 0;
    for (int k = 0; k < n; k++) {
        const tdm_tensor *p = split ? ctx->out[k] : ctx->in[k];
        if (!p) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "%s %d is missing",
                                      split ? "output" : "input", k);
        if (p->rank != whole->rank || p->dtype != whole->dtype) return shape_mismatch(ctx);
        for (int d = 0; d < p->rank; d++)
            if (d != axis && p->dims[d] != whole->dims[d]) return shape_mismatch(ctx);
        sum += p->dims[axis];
    }
    if (sum != whole->dims[axis]) return shape_mismatch(ctx);
    size_t es = tdm_dtype_elem_size(whole->dtype);
    cat_job j = {ctx, axis, prod(whole->dims, axis + 1, whole->rank) * (int64_t)es, 0, split, 0,
                 es ? (32768 / es) * es : 32768};
    j.row = (size_t)(whole->dims[axis] * j.inner);
    j.total = j.row * (size_t)prod(whole->dims, 0, axis);
    if (j.total) tdm_parallel_for(ctx->pool, (int64_t)((j.total + j.chunk - 1) / j.chunk), 1, cat_rows, &j);
    if (whole->dtype == TDM_STRING) {
        if (!split) return tdm_kshape_own_strings(ctx->out[0]);
        for (int k = 0; k < n; k++) {
            tdm_status *st = tdm_kshape_own_strings(ctx->out[k]);
            if (st) { /* the later outputs still borrow the input's strings: drop them */
                for (int m = k + 1; m < n; m++) memset(ctx->out[m]->data, 0, ctx->out[m]->nbytes);
                return st;
            }
        }
    }
    return NULL;
}

tdm_status *tdm_kshape_concat(tdm_kernel_ctx *ctx) {
    return cat_run(ctx, false, tdm_attr_int(ctx->node, "axis", 1));
}

tdm_status *tdm_kshape_split(tdm_kernel_ctx *ctx) {
    return cat_run(ctx, true, tdm_attr_int(ctx->node, "axis", 0));
}

/* ---- Slice ---------------------------------------------------------------------------- */

tdm_status *tdm_kshape_slice(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    const tdm_tensor *args[4] = {arg(ctx, 1), arg(ctx, 2), arg(ctx, 3), arg(ctx, 4)};
    int64_t start[TDM_MAX_RANK], step[TDM_MAX_RANK], od[TDM_MAX_RANK], st[TDM_MAX_RANK];
    TDM_TRY(tdm_shape_slice_plan(ctx->node, ctx->opset, args, x->rank, x->dims, start, step, od));
    if (y->rank != x->rank) return shape_mismatch(ctx);
    for (int d = 0; d < x->rank; d++)
        if (od[d] != y->dims[d]) return shape_mismatch(ctx);
    if (y->count == 0) return NULL;
    tdm_strides(x->rank, x->dims, st);
    int64_t off = 0;
    for (int d = 0; d < x->rank; d++) {
        off += start[d] * st[d];
        /* an axis of one output element never steps (its step may be any int64: 50 x INT64_MAX
         * overflowed); on longer axes start + (od - 1) x step lies inside the axis, so the
         * product stays within the input's element count */
        st[d] = od[d] > 1 ? st[d] * step[d] : 0;
    }
    size_t es = tdm_dtype_elem_size(x->dtype);
    tdm_kshape_strided_copy(ctx->pool, es, y->rank, y->dims, (const char *)x->data + off * (int64_t)es,
                            st, y->data);
    return tdm_kshape_own_strings(y);
}

/* ---- Pad ------------------------------------------------------------------------------ */

typedef struct pad_job {
    const tdm_tensor *x;
    tdm_tensor *y;
    int mode;
    size_t es;
    const int64_t *begin;
    int64_t xs[TDM_MAX_RANK];
    unsigned char val[16];
} pad_job;

static int64_t pad_map(int64_t c, int64_t d, int mode) {
    if (c >= 0 && c < d) return c;
    switch (mode) {
    case TDM_PAD_EDGE: return c < 0 ? 0 : d - 1;
    case TDM_PAD_WRAP: return ((c % d) + d) % d;
    default: { /* reflect */
        if (d == 1) return 0;
        int64_t p = 2 * (d - 1), m = ((c % p) + p) % p;
        return m >= d ? p - m : m;
    }
    }
}

static void pad_rows(void *arg_, int64_t b, int64_t e) {
    const pad_job *j = arg_;
    const tdm_tensor *x = j->x;
    int r = x->rank;
    int64_t L = j->y->dims[r - 1], d = x->dims[r - 1], bb = j->begin[r - 1];
    size_t es = j->es;
    const char *src = x->data;
    for (int64_t row = b; row < e; row++) {
        char *dst = (char *)j->y->data + (size_t)(row * L) * es;
        int64_t rem = row, off = 0;
        bool fill = false;
        for (int k = r - 2; k >= 0; k--) {
            int64_t o = rem % j->y->dims[k];
            rem /= j->y->dims[k];
            int64_t c = o - j->begin[k];
            if (c < 0 || c >= x->dims[k]) {
                if (j->mode == TDM_PAD_CONSTANT) {
                    fill = true;
                    break;
                }
                c = pad_map(c, x->dims[k], j->mode);
            }
            off += c * j->xs[k];
        }
        if (fill) {
            tdm_kshape_fill(dst, L, j->val, es);
            continue;
        }
        int64_t j0 = bb < 0 ? 0 : bb > L ? L : bb;
        int64_t j1 = bb + d < 0 ? 0 : bb + d > L ? L : bb + d;
        if (j1 > j0) memcpy(dst + (size_t)j0 * es, src + (size_t)(off + j0 - bb) * es, (size_t)(j1 - j0) * es);
        else j1 = j0;
        for (int64_t t = 0; t < L; t++) {
            if (t == j0) t = j1;
            if (t >= L) break;
            if (j->mode == TDM_PAD_CONSTANT) memcpy(dst + (size_t)t * es, j->val, es);
            else memcpy(dst + (size_t)t * es, src + (size_t)(off + pad_map(t - bb, d, j->mode)) * es, es);
        }
    }
}

tdm_status *tdm_kshape_pad(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int mode, r = x->rank;
    int64_t begin[TDM_MAX_RANK], end[TDM_MAX_RANK];
    TDM_TRY(tdm_shape_pad_mode(ctx->node, &mode));
    TDM_TRY(tdm_shape_pad_plan(ctx->node, ctx->opset, arg(ctx, 1),
                               ctx->opset >= 18 ? arg(ctx, 3) : NULL, r, begin, end));
    if (y->rank != r) return shape_mismatch(ctx);
    for (int d = 0; d < r; d++) {
        if (y->dims[d] != x->dims[d] + begin[d] + end[d]) return shape_mismatch(ctx);
        if (mode != TDM_PAD_CONSTANT && x->dims[d] == 0 && y->dims[d] > 0)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "cannot pad the empty axis %d in this mode", d);
    }
    pad_job j = {.x = x, .y = y, .mode = mode, .es = tdm_dtype_elem_size(x->dtype), .begin = begin};
    if (mode == TDM_PAD_CONSTANT) {
        const tdm_tensor *cv = ctx->opset >= 11 ? arg(ctx, 2) : NULL;
        if (cv && cv->count > 0) {
            if (cv->dtype != x->dtype)
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "constant_value type differs from data");
            memcpy(j.val, cv->data, j.es);
        } else if (ctx->opset < 11 && x->dtype != TDM_STRING) {
            tdm_kshape_store(x->dtype, j.val, tdm_attr_float(ctx->node, "value", 0.0f));
        }
    }
    if (y->count == 0) return NULL;
    if (r == 0) {
        memcpy(y->data, x->data, j.es);
        return tdm_kshape_own_strings(y);
    }
    tdm_strides(r, x->dims, j.xs);
    int64_t L = y->dims[r - 1], rows = y->count / L;
    tdm_parallel_for(ctx->pool, rows, L >= 16384 ? 1 : 16384 / L, pad_rows, &j);
    return tdm_kshape_own_strings(y);
}

/* ---- DepthToSpace / SpaceToDepth ------------------------------------------------------ */

tdm_status *tdm_kshape_depthtospace(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int64_t b = tdm_attr_int(ctx->node, "blocksize", 0);
    bool crd = ctx->opset >= 11 && !strcmp(tdm_attr_string(ctx->node, "mode", "DCR"), "CRD");
    if (x->rank != 4 || y->rank != 4 || b <= 0 || x->dims[1] % (b * b) ||
        y->dims[1] != x->dims[1] / (b * b) || y->dims[2] != x->dims[2] * b ||
        y->dims[3] != x->dims[3] * b || y->dims[0] != x->dims[0])
        return shape_mismatch(ctx);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], Co = C / (b * b);
    int64_t dims[6] = {N, Co, H, b, W, b};
    int64_t ss[6];
    ss[0] = C * H * W;
    ss[2] = W;
    ss[4] = 1;
    if (crd) {
        ss[1] = b * b * H * W;
        ss[3] = b * H * W;
        ss[5] = H * W;
    } else {
        ss[1] = H * W;
        ss[3] = b * Co * H * W;
        ss[5] = Co * H * W;
    }
    tdm_kshape_strided_copy(ctx->pool, tdm_dtype_elem_size(x->dtype), 6, dims, x->data, ss, y->data);
    return tdm_kshape_own_strings(y);
}

tdm_status *tdm_kshape_spacetodepth(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int64_t b = tdm_attr_int(ctx->node, "blocksize", 0);
    if (x->rank != 4 || y->rank != 4 || b <= 0 || x->dims[2] % b || x->dims[3] % b ||
        y->dims[1] != x->dims[1] * b * b || y->dims[0] != x->dims[0])
        return shape_mismatch(ctx);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t dims[6] = {N, b, b, C, H / b, W / b};
    int64_t ss[6] = {C * H * W, W, 1, H * W, b * W, b};
    tdm_kshape_strided_copy(ctx->pool, tdm_dtype_elem_size(x->dtype), 6, dims, x->data, ss, y->data);
    return tdm_kshape_own_strings(y);
}

/* ---- Expand / Tile -------------------------------------------------------------------- */

tdm_status *tdm_kshape_expand(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int64_t ss[TDM_MAX_RANK];
    if (y->rank < x->rank) return shape_mismatch(ctx);
    for (int i = 0; i < x->rank; i++) {
        int64_t o = y->dims[y->rank - x->rank + i];
        if (x->dims[i] != 1 && x->dims[i] != o) return shape_mismatch(ctx);
    }
    tdm_broadcast_strides(x->rank, x->dims, y->rank, y->dims, ss);
    tdm_kshape_strided_copy(ctx->pool, tdm_dtype_elem_size(x->dtype), y->rank, y->dims, x->data, ss,
                            y->data);
    return tdm_kshape_own_strings(y);
}

typedef struct tile_job {
    const tdm_tensor *x;
    tdm_tensor *y;
    size_t es;
    int64_t xs[TDM_MAX_RANK];
} tile_job;

static void tile_rows(void *arg_, int64_t b, int64_t e) {
    const tile_job *j = arg_;
    int r = j->x->rank;
    int64_t L = j->x->dims[r - 1], Lo = j->y->dims[r - 1];
    size_t es = j->es;
    for (int64_t row = b; row < e; row++) {
        int64_t rem = row, off = 0;
        for (int k = r - 2; k >= 0; k--) {
            off += (rem % j->y->dims[k]) % j->x->dims[k] * j->xs[k];
            rem /= j->y->dims[k];
        }
        const char *src = (const char *)j->x->data + (size_t)off * es;
        char *dst = (char *)j->y->data + (size_t)(row * Lo) * es;
        if (L == 1) {
            tdm_kshape_fill(dst, Lo, src, es);
            continue;
        }
        for (int64_t t = 0; t < Lo; t += L) memcpy(dst + (size_t)t * es, src, (size_t)L * es);
    }
}

tdm_status *tdm_kshape_tile(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int r = x->rank;
    if (y->rank != r) return shape_mismatch(ctx);
    for (int d = 0; d < r; d++)
        if (x->dims[d] ? y->dims[d] % x->dims[d] : y->dims[d]) return shape_mismatch(ctx);
    if (y->count == 0) return NULL;
    tile_job j = {.x = x, .y = y, .es = tdm_dtype_elem_size(x->dtype)};
    if (r == 0) {
        memcpy(y->data, x->data, j.es);
        return tdm_kshape_own_strings(y);
    }
    tdm_strides(r, x->dims, j.xs);
    int64_t Lo = y->dims[r - 1], rows = y->count / Lo;
    tdm_parallel_for(ctx->pool, rows, Lo >= 16384 ? 1 : 16384 / Lo, tile_rows, &j);
    return tdm_kshape_own_strings(y);
}
