/* CPU kernels: sequences and optionals (ops/seq.c) and Identity of a container. A container
 * (core/tensor.h) owns its items: every kernel puts clones of its inputs' items in the
 * containers it makes, so no item is shared between two values. */
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"

static tdm_status *seq_err(const tdm_kernel_ctx *ctx, const char *what) {
    return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "%s", what);
}

static const tdm_tensor *need_seq(const tdm_kernel_ctx *ctx, int i) {
    const tdm_tensor *s = i < ctx->n_in ? ctx->in[i] : NULL;
    return s && s->dtype == TDM_SEQUENCE ? s : NULL;
}

static tdm_tensor *const *items(const tdm_tensor *c) { return (tdm_tensor *const *)c->data; }

/* Output i: a container of `kind` with n slots, filled by the caller. */
static tdm_status *new_container(tdm_kernel_ctx *ctx, int i, tdm_dtype kind, int64_t n,
                                 tdm_tensor ***slots) {
    TDM_TRY(ctx->alloc_output(ctx, i, kind, 1, &n));
    *slots = (tdm_tensor **)ctx->out[i]->data;
    return NULL;
}

static tdm_status *put(tdm_kernel_ctx *ctx, tdm_tensor **slot, const tdm_tensor *t) {
    if (!t) return seq_err(ctx, "a sequence item or input is missing");
    if (t->device) return seq_err(ctx, "sequence items must be in host memory");
    return tdm_tensor_clone(ctx->alloc, t, slot);
}

/* A position in a sequence of n items (-n..n-1, or -n..n when inserting). */
static tdm_status *position(const tdm_kernel_ctx *ctx, const tdm_tensor *p, int64_t n, bool insert,
                            int64_t *out) {
    if (!p || p->count != 1 || (p->dtype != TDM_INT32 && p->dtype != TDM_INT64))
        return seq_err(ctx, "position must be an int32 or int64 scalar");
    int64_t i = tdm_tensor_get_i64(p, 0);
    int64_t hi = insert ? n : n - 1;
    if (i < -n || i > hi)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "position %lld is outside the sequence of %lld items", (long long)i,
                              (long long)n);
    *out = i < 0 ? i + n : i;
    return NULL;
}

static tdm_status *k_identity(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor **slots;
    TDM_TRY(new_container(ctx, 0, x->dtype, x->count, &slots));
    for (int64_t i = 0; i < x->count; i++)
        if (items(x)[i]) TDM_TRY(tdm_tensor_clone(ctx->alloc, items(x)[i], &slots[i]));
    return NULL;
}

static tdm_status *k_sequence_empty(tdm_kernel_ctx *ctx) {
    tdm_tensor **slots;
    return new_container(ctx, 0, TDM_SEQUENCE, 0, &slots);
}

static tdm_status *k_sequence_construct(tdm_kernel_ctx *ctx) {
    tdm_tensor **slots;
    for (int i = 0; i < ctx->n_in; i++)
        if (!ctx->in[i] || tdm_dtype_is_container(ctx->in[i]->dtype) ||
            ctx->in[i]->dtype != ctx->in[0]->dtype)
            return seq_err(ctx, "inputs must be tensors of one type");
    TDM_TRY(new_container(ctx, 0, TDM_SEQUENCE, ctx->n_in, &slots));
    for (int i = 0; i < ctx->n_in; i++) TDM_TRY(put(ctx, &slots[i], ctx->in[i]));
    return NULL;
}

static tdm_status *k_sequence_insert(tdm_kernel_ctx *ctx) {
    const tdm_tensor *s = need_seq(ctx, 0), *t = ctx->in[1];
    if (!s || !t || tdm_dtype_is_container(t->dtype))
        return seq_err(ctx, "needs a sequence and a tensor");
    int64_t n = s->count, at = n;
    if (n && items(s)[0] && items(s)[0]->dtype != t->dtype)
        return seq_err(ctx, "the tensor's type differs from the sequence's");
    if (ctx->n_in > 2 && ctx->in[2]) TDM_TRY(position(ctx, ctx->in[2], n, true, &at));
    tdm_tensor **slots;
    TDM_TRY(new_container(ctx, 0, TDM_SEQUENCE, n + 1, &slots));
    for (int64_t i = 0, j = 0; i <= n; i++) {
        if (i == at) TDM_TRY(put(ctx, &slots[i], t));
        else TDM_TRY(put(ctx, &slots[i], items(s)[j++]));
    }
    return NULL;
}

static tdm_status *k_sequence_erase(tdm_kernel_ctx *ctx) {
    const tdm_tensor *s = need_seq(ctx, 0);
    if (!s) return seq_err(ctx, "input 0 must be a sequence");
    int64_t n = s->count, at = n - 1;
    if (n == 0) return seq_err(ctx, "cannot erase from an empty sequence");
    if (ctx->n_in > 1 && ctx->in[1]) TDM_TRY(position(ctx, ctx->in[1], n, false, &at));
    tdm_tensor **slots;
    TDM_TRY(new_container(ctx, 0, TDM_SEQUENCE, n - 1, &slots));
    for (int64_t i = 0, j = 0; i < n; i++)
        if (i != at) TDM_TRY(put(ctx, &slots[j++], items(s)[i]));
    return NULL;
}

/* Output 0 := a clone of t (a tensor or a container). */
static tdm_status *out_clone(tdm_kernel_ctx *ctx, const tdm_tensor *t) {
    if (!t) return seq_err(ctx, "a sequence item or input is missing");
    TDM_TRY(ctx->alloc_output(ctx, 0, t->dtype, t->rank, t->dims));
    tdm_tensor *y = ctx->out[0];
    if (tdm_dtype_has_ptrs(t->dtype)) {
        /* replace the fresh output's contents with a deep copy */
        tdm_tensor *c = NULL;
        TDM_TRY(tdm_tensor_clone(ctx->alloc, t, &c));
        void *tmp = y->data;
        y->data = c->data;
        c->data = tmp; /* zeroed slots: destroying c frees nothing but the array */
        tdm_tensor_destroy(c);
        return NULL;
    }
    if (t->nbytes) memcpy(y->data, t->data, t->nbytes);
    return NULL;
}

static tdm_status *k_sequence_at(tdm_kernel_ctx *ctx) {
    const tdm_tensor *s = need_seq(ctx, 0);
    if (!s) return seq_err(ctx, "input 0 must be a sequence");
    int64_t at = 0;
    TDM_TRY(position(ctx, ctx->in[1], s->count, false, &at));
    return out_clone(ctx, items(s)[at]);
}

static tdm_status *k_sequence_length(tdm_kernel_ctx *ctx) {
    const tdm_tensor *s = need_seq(ctx, 0);
    if (!s) return seq_err(ctx, "input 0 must be a sequence");
    TDM_TRY(ctx->alloc_output(ctx, 0, TDM_INT64, 0, NULL));
    *(int64_t *)ctx->out[0]->data = s->count;
    return NULL;
}

/* Copies [start, start+len) along axis of x (outer rows of `d` items of `inner` bytes). */
static void copy_slab(char *dst, const char *src, int64_t outer, int64_t d, int64_t start,
                      int64_t len, size_t inner) {
    for (int64_t o = 0; o < outer; o++)
        memcpy(dst + (size_t)(o * len) * inner, src + (size_t)(o * d + start) * inner,
               (size_t)len * inner);
}

static tdm_status *own_strings(tdm_kernel_ctx *ctx, tdm_tensor *t) {
    if (t->dtype != TDM_STRING) return NULL;
    char **s = t->data;
    for (int64_t i = 0; i < t->count; i++) {
        s[i] = tdm_strdup(ctx->alloc, s[i] ? s[i] : "");
        if (!s[i]) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    return NULL;
}

static tdm_status *k_split_to_sequence(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    const tdm_tensor *sp = ctx->n_in > 1 ? ctx->in[1] : NULL;
    if (!x || tdm_dtype_is_container(x->dtype)) return seq_err(ctx, "input must be a tensor");
    if (x->rank < 1) return seq_err(ctx, "input must have rank 1 or more");
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), x->rank, &axis));
    bool keep = tdm_attr_int(ctx->node, "keepdims", 1) != 0;
    int64_t d = x->dims[axis], outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= x->dims[i];
    for (int i = axis + 1; i < x->rank; i++) inner *= x->dims[i];
    size_t es = tdm_dtype_elem_size(x->dtype);
    int64_t n = 0, chunk = 1;
    if (!sp) {
        n = d;
    } else if (sp->rank == 0) {
        chunk = tdm_tensor_get_i64(sp, 0);
        if (chunk <= 0) return seq_err(ctx, "split must be positive");
        n = d / chunk + (d % chunk != 0); /* no d + chunk - 1: chunk may be near INT64_MAX */
        keep = true;
    } else {
        n = sp->count;
        int64_t sum = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = tdm_tensor_get_i64(sp, i);
            if (v < 0) return seq_err(ctx, "split sizes must not be negative");
            if (v > d - sum) return seq_err(ctx, "split sizes do not add up to the axis's length");
            sum += v;
        }
        if (sum != d) return seq_err(ctx, "split sizes do not add up to the axis's length");
        keep = true;
    }
    tdm_tensor **slots;
    TDM_TRY(new_container(ctx, 0, TDM_SEQUENCE, n, &slots));
    for (int64_t k = 0, start = 0; k < n; k++) {
        int64_t len = !sp ? 1 : sp->rank == 0 ? (chunk > d - start ? d - start : chunk)
                                              : tdm_tensor_get_i64(sp, k);
        int64_t dims[TDM_MAX_RANK];
        int r = 0;
        for (int i = 0; i < x->rank; i++) {
            if (i == axis && !keep) continue;
            dims[r++] = i == axis ? len : x->dims[i];
        }
        TDM_TRY(tdm_tensor_new(ctx->alloc, x->dtype, r, dims, &slots[k]));
        copy_slab(slots[k]->data, x->data, outer, d, start, len, (size_t)inner * es);
        TDM_TRY(own_strings(ctx, slots[k]));
        start += len;
    }
    return NULL;
}

static tdm_status *k_concat_from_sequence(tdm_kernel_ctx *ctx) {
    const tdm_tensor *s = need_seq(ctx, 0);
    if (!s) return seq_err(ctx, "input 0 must be a sequence");
    if (s->count == 0) return seq_err(ctx, "cannot concatenate an empty sequence");
    const tdm_tensor *t0 = items(s)[0];
    bool stack = tdm_attr_int(ctx->node, "new_axis", 0) != 0;
    int r = t0->rank, axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), stack ? r + 1 : r, &axis));
    int64_t total = 0, outer = 1;
    for (int64_t k = 0; k < s->count; k++) {
        const tdm_tensor *t = items(s)[k];
        if (t->dtype != t0->dtype || t->rank != r)
            return seq_err(ctx, "items differ in type or rank");
        for (int i = 0; i < r; i++)
            if (i != axis && t->dims[i] != t0->dims[i] && !(stack && i >= axis))
                return seq_err(ctx, "items differ in shape outside the axis");
        if (stack)
            for (int i = 0; i < r; i++)
                if (t->dims[i] != t0->dims[i]) return seq_err(ctx, "stacked items differ in shape");
        total += stack ? 1 : t->dims[axis];
    }
    int64_t dims[TDM_MAX_RANK];
    int ro = stack ? r + 1 : r;
    if (ro > TDM_MAX_RANK) return seq_err(ctx, "result rank too large");
    for (int i = 0, j = 0; i < ro; i++) {
        dims[i] = i == axis ? total : t0->dims[j];
        if (i != axis || !stack) j++;
    }
    for (int i = 0; i < axis; i++) outer *= t0->dims[i];
    TDM_TRY(ctx->alloc_output(ctx, 0, t0->dtype, ro, dims));
    tdm_tensor *y = ctx->out[0];
    size_t es = tdm_dtype_elem_size(t0->dtype);
    char *dst = y->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < s->count; k++) {
            const tdm_tensor *t = items(s)[k];
            size_t row = (size_t)(t->count / outer) * es;
            memcpy(dst, (const char *)t->data + (size_t)o * row, row);
            dst += row;
        }
    return own_strings(ctx, y);
}

static tdm_status *k_optional(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->n_in > 0 ? ctx->in[0] : NULL;
    tdm_tensor **slots;
    TDM_TRY(new_container(ctx, 0, TDM_OPTIONAL, x ? 1 : 0, &slots));
    return x ? tdm_tensor_clone(ctx->alloc, x, &slots[0]) : NULL;
}

static tdm_status *k_optional_has_element(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->n_in > 0 ? ctx->in[0] : NULL;
    TDM_TRY(ctx->alloc_output(ctx, 0, TDM_BOOL, 0, NULL));
    *(uint8_t *)ctx->out[0]->data = x && (x->dtype != TDM_OPTIONAL || x->count == 1);
    return NULL;
}

static tdm_status *k_optional_get_element(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    if (x->dtype != TDM_OPTIONAL) return out_clone(ctx, x);
    if (x->count != 1 || !items(x)[0]) return seq_err(ctx, "the optional input is empty");
    return out_clone(ctx, items(x)[0]);
}

/* SequenceMap: the body runs once per item of the first input; sequence inputs give their
 * item at that position, tensors go in whole; body output j is item i of output j. */
static tdm_status *k_sequence_map(tdm_kernel_ctx *ctx) {
    const tdm_attr *b = tdm_node_attr(ctx->node, "body");
    const tdm_tensor *s = need_seq(ctx, 0);
    if (!s || !b || b->type != TDM_ATTR_GRAPH) return seq_err(ctx, "needs a sequence and a body");
    int64_t n = s->count;
    for (int i = 1; i < ctx->n_in; i++)
        if (ctx->in[i] && ctx->in[i]->dtype == TDM_SEQUENCE && ctx->in[i]->count != n)
            return seq_err(ctx, "input sequences differ in length");
    if (ctx->n_in > 64 || ctx->n_out > 64) return seq_err(ctx, "too many inputs or outputs");
    tdm_tensor **slots[64];
    for (int j = 0; j < ctx->n_out; j++) TDM_TRY(new_container(ctx, j, TDM_SEQUENCE, n, &slots[j]));
    for (int64_t k = 0; k < n; k++) {
        const tdm_tensor *in[64];
        for (int i = 0; i < ctx->n_in; i++) {
            const tdm_tensor *x = ctx->in[i];
            in[i] = x && x->dtype == TDM_SEQUENCE ? items(x)[k] : x;
        }
        tdm_tensor *out[64] = {0};
        tdm_status *st = ctx->run_subgraph(ctx, b->g, ctx->n_in, in, ctx->n_out, out);
        for (int j = 0; j < ctx->n_out; j++) {
            if (!st && !out[j]) st = seq_err(ctx, "the body gave no output");
            if (!st) st = put(ctx, &slots[j][k], out[j]);
            tdm_tensor_destroy(out[j]);
        }
        if (st) return st;
    }
    return NULL;
}

/* ai.onnx.ml ZipMap: rows of a [N, C] float tensor as N maps from the class labels (int64 or
 * string attribute) to the row's values. */
static tdm_status *k_zipmap(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    size_t ni = 0, ns = 0;
    const int64_t *li = tdm_attr_ints(ctx->node, "classlabels_int64s", &ni);
    const tdm_attr *ls = tdm_node_attr(ctx->node, "classlabels_strings");
    if (ls && ls->type == TDM_ATTR_STRINGS) ns = ls->n;
    if ((ni == 0) == (ns == 0))
        return seq_err(ctx, "needs exactly one of classlabels_int64s and classlabels_strings");
    int64_t c = (int64_t)(ni ? ni : ns);
    if (x->dtype != TDM_FLOAT || x->rank < 1 || x->rank > 2 || x->dims[x->rank - 1] != c)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "input must be float [N, %lld]", (long long)c);
    int64_t rows = x->rank == 2 ? x->dims[0] : 1;
    tdm_tensor *keys = NULL;
    TDM_TRY(tdm_tensor_new(ctx->alloc, ni ? TDM_INT64 : TDM_STRING, 1, &c, &keys));
    tdm_status *st = NULL;
    if (ni) memcpy(keys->data, li, (size_t)c * sizeof *li);
    else
        for (int64_t k = 0; k < c && !st; k++) {
            char *v = tdm_strdup(ctx->alloc, ls->strings[k]);
            if (!v) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
            else ((char **)keys->data)[k] = v;
        }
    tdm_tensor **slots = NULL;
    if (!st) st = new_container(ctx, 0, TDM_SEQUENCE, rows, &slots);
    for (int64_t r = 0; r < rows && !st; r++) {
        tdm_tensor **kv;
        if ((st = tdm_container_new(ctx->alloc, TDM_MAP, 2, &slots[r]))) break;
        kv = slots[r]->data;
        if ((st = tdm_tensor_clone(ctx->alloc, keys, &kv[0]))) break;
        if ((st = tdm_tensor_new(ctx->alloc, TDM_FLOAT, 1, &c, &kv[1]))) break;
        memcpy(kv[1]->data, (const float *)x->data + r * c, (size_t)c * sizeof(float));
    }
    tdm_tensor_destroy(keys);
    return st;
}

/* ai.onnx.ml DictVectorizer: a map's values at the positions of their keys in the vocabulary
 * (int64_vocabulary or string_vocabulary), zero elsewhere; shape [1, vocabulary size] as ONNX
 * Runtime gives it. Keys not in the vocabulary are ignored. */
static tdm_status *k_dict_vectorizer(tdm_kernel_ctx *ctx) {
    const tdm_tensor *m = ctx->in[0];
    if (m->dtype != TDM_MAP || m->count != 2) return seq_err(ctx, "input must be a map");
    const tdm_tensor *keys = items(m)[0], *vals = items(m)[1];
    size_t ni = 0;
    const int64_t *vi = tdm_attr_ints(ctx->node, "int64_vocabulary", &ni);
    const tdm_attr *vs = tdm_node_attr(ctx->node, "string_vocabulary");
    size_t ns = vs && vs->type == TDM_ATTR_STRINGS ? vs->n : 0;
    if ((ni == 0) == (ns == 0))
        return seq_err(ctx, "needs exactly one of int64_vocabulary and string_vocabulary");
    if ((ni && keys->dtype != TDM_INT64) || (ns && keys->dtype != TDM_STRING))
        return seq_err(ctx, "the map's key type differs from the vocabulary's");
    if (tdm_dtype_has_ptrs(vals->dtype) || vals->count != keys->count)
        return seq_err(ctx, "the map's values must be numbers, one per key");
    int64_t dims[2] = {1, (int64_t)(ni ? ni : ns)};
    TDM_TRY(ctx->alloc_output(ctx, 0, vals->dtype, 2, dims));
    size_t es = tdm_dtype_elem_size(vals->dtype);
    char *y = ctx->out[0]->data;
    for (int64_t k = 0; k < keys->count; k++) {
        int64_t at = -1;
        for (int64_t j = 0; j < dims[1] && at < 0; j++)
            if (ni ? vi[j] == ((const int64_t *)keys->data)[k]
                   : !strcmp(vs->strings[j], ((char *const *)keys->data)[k]))
                at = j;
        if (at >= 0) memcpy(y + (size_t)at * es, (const char *)vals->data + (size_t)k * es, es);
    }
    return NULL;
}

#define CONT TDM_T_CONTAINERS
const tdm_kernel_def tdm_cpu_kernels_seq[] = {
    {"", "Identity", 1, 0, 0, CONT, k_identity},
    {"", "SequenceEmpty", 11, 0, -1, 0, k_sequence_empty},
    {"", "SequenceConstruct", 11, 0, -1, 0, k_sequence_construct},
    {"", "SequenceInsert", 11, 0, -1, 0, k_sequence_insert},
    {"", "SequenceErase", 11, 0, -1, 0, k_sequence_erase},
    {"", "SequenceAt", 11, 0, -1, 0, k_sequence_at},
    {"", "SequenceLength", 11, 0, -1, 0, k_sequence_length},
    {"", "SplitToSequence", 11, 0, -1, 0, k_split_to_sequence},
    {"", "ConcatFromSequence", 11, 0, -1, 0, k_concat_from_sequence},
    {"", "SequenceMap", 17, 0, -1, 0, k_sequence_map},
    {"", "Optional", 15, 0, -1, 0, k_optional},
    {"ai.onnx.ml", "ZipMap", 1, 0, 0, TDM_T(TDM_FLOAT), k_zipmap},
    {"ai.onnx.ml", "DictVectorizer", 1, 0, 0, TDM_T_MAP, k_dict_vectorizer},
    {"", "OptionalHasElement", 15, 0, -1, 0, k_optional_has_element},
    {"", "OptionalGetElement", 15, 0, -1, 0, k_optional_get_element},
};
const int tdm_cpu_kernels_seq_count =
    (int)(sizeof tdm_cpu_kernels_seq / sizeof tdm_cpu_kernels_seq[0]);
