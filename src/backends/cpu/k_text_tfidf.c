/* CPU kernels, text family: TfIdfVectorizer.
 *
 * The pool of n-grams (attributes) becomes a trie kept in one open-addressing hash table
 * keyed by (parent node, item): walking an n-gram is one lookup per item. Node 0 is the
 * root; a node's id is the 1-based position of the n-gram ending there in the pool (0: a
 * prefix only). Only n-grams with min_gram_length <= n <= max_gram_length are loaded.
 *
 * Counting follows the ONNX definition: for each skip distance 1..max_skip_count+1 and
 * each start position, items start, start+d, start+2d, ... are matched against the trie;
 * unigrams are counted in the first pass only. IDF and TFIDF weights belong to the pool's
 * n-grams (weights[i] scales output column ngram_indexes[i]), as the ONNX spec says. */
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"
#include "core/checked.h"
#include "core/hash.h"

tdm_status *tdm_text_run_tfidf(tdm_kernel_ctx *ctx);

typedef struct trie_slot {
    int64_t parent; /* -1: empty slot */
    int64_t ival;   /* integer item */
    const char *sval; /* string item (pool strings) */
    int64_t child;  /* node index */
} trie_slot;

typedef struct trie {
    const tdm_allocator *alloc;
    bool strings;
    trie_slot *slots;
    size_t mask;      /* capacity - 1 (power of two) */
    int64_t *ids;     /* per node: n-gram id (0 = none) */
    int64_t n_nodes;
} trie;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}


static size_t slot_of(const trie *t, int64_t parent, uint64_t item_hash) {
    return (size_t)(mix64(item_hash ^ mix64((uint64_t)parent + 0x9e3779b97f4a7c15ull)) & t->mask);
}

/* Child of `parent` for the item (ival or sval), or -1. */
static int64_t trie_find(const trie *t, int64_t parent, int64_t ival, const char *sval,
                         uint64_t item_hash) {
    size_t i = slot_of(t, parent, item_hash);
    for (;;) {
        const trie_slot *s = &t->slots[i];
        if (s->parent < 0) return -1;
        if (s->parent == parent &&
            (t->strings ? !strcmp(s->sval, sval) : s->ival == ival))
            return s->child;
        i = (i + 1) & t->mask;
    }
}

/* Child of `parent` for the item, created if needed (capacity is sized beforehand). */
static int64_t trie_add(trie *t, int64_t parent, int64_t ival, const char *sval) {
    uint64_t h = t->strings ? tdm_hash_str(TDM_HASH_INIT, sval) : (uint64_t)ival;
    size_t i = slot_of(t, parent, h);
    for (;;) {
        trie_slot *s = &t->slots[i];
        if (s->parent < 0) {
            s->parent = parent;
            s->ival = ival;
            s->sval = sval;
            s->child = t->n_nodes;
            t->ids[t->n_nodes] = 0;
            return t->n_nodes++;
        }
        if (s->parent == parent && (t->strings ? !strcmp(s->sval, sval) : s->ival == ival))
            return s->child;
        i = (i + 1) & t->mask;
    }
}

static void trie_free(trie *t) {
    tdm_free(t->alloc, t->slots);
    tdm_free(t->alloc, t->ids);
}

typedef struct tfidf_cfg {
    int64_t min_n, max_n, max_skip, width;
    const int64_t *indexes;
    size_t n_indexes;
    int mode; /* 1 TF, 2 IDF, 3 TFIDF */
    const float *weights; /* per n-gram, as in the pool (length n_indexes) */
    size_t n_weights;
    float *col_weight;    /* per output column (weights moved by ngram_indexes), or NULL */
} tfidf_cfg;

/* Builds the trie from the pool attributes. */
static tdm_status *build_trie(const tdm_node *node, const tdm_allocator *a, const tfidf_cfg *c,
                              trie *t) {
    size_t n_counts = 0;
    const int64_t *counts = tdm_attr_ints(node, "ngram_counts", &n_counts);
    const tdm_attr *pi = tdm_node_attr(node, "pool_int64s");
    const tdm_attr *ps = tdm_node_attr(node, "pool_strings");
    memset(t, 0, sizeof *t);
    t->alloc = a;
    t->strings = ps != NULL;
    size_t total = pi ? pi->n : ps ? ps->n : 0;
    if ((pi && pi->type != TDM_ATTR_INTS) || (ps && ps->type != TDM_ATTR_STRINGS))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "pool attribute has the wrong type");
    size_t cap = 16;
    while (cap < 2 * total + 2) cap *= 2;
    t->mask = cap - 1;
    t->slots = tdm_alloc(a, cap * sizeof *t->slots);
    t->ids = tdm_alloc(a, (total + 1) * sizeof *t->ids);
    if (!t->slots || !t->ids) {
        trie_free(t);
        return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < cap; i++) t->slots[i].parent = -1;
    t->ids[0] = 0;
    t->n_nodes = 1;
    int64_t id = 1;
    for (size_t i = 0; i < n_counts; i++) {
        int64_t n = (int64_t)i + 1; /* gram length of this block */
        int64_t start = counts[i];
        int64_t end = i + 1 < n_counts ? counts[i + 1] : (int64_t)total;
        if (start < 0 || end < start || end > (int64_t)total) {
            trie_free(t);
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "ngram_counts does not describe the pool (%zu items)", total);
        }
        int64_t grams = (end - start) / n;
        if (n < c->min_n || n > c->max_n) {
            id += grams;
            continue;
        }
        for (int64_t g = 0; g < grams; g++, id++) {
            if (id - 1 >= (int64_t)c->n_indexes) {
                trie_free(t);
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "ngram_indexes has %zu entries, the pool has more n-grams",
                                      c->n_indexes);
            }
            int64_t cur = 0;
            for (int64_t k = 0; k < n; k++) {
                size_t p = (size_t)(start + g * n + k);
                const char *sv = t->strings ? (ps->strings[p] ? ps->strings[p] : "") : NULL;
                cur = trie_add(t, cur, t->strings ? 0 : pi->ints[p], sv);
            }
            t->ids[cur] = id;
        }
    }
    return NULL;
}

typedef struct tfidf_job {
    const tfidf_cfg *c;
    const trie *t;
    const tdm_tensor *x;
    int64_t cols;
    const uint64_t *hashes; /* per input item: hash of its value */
    float *y;
} tfidf_job;

static int64_t item_i64(const tdm_tensor *x, int64_t i) {
    return x->dtype == TDM_INT32 ? ((const int32_t *)x->data)[i] : ((const int64_t *)x->data)[i];
}

static void tfidf_rows(void *arg, int64_t r0, int64_t r1) {
    const tfidf_job *j = arg;
    const tfidf_cfg *c = j->c;
    const trie *t = j->t;
    const int64_t C = j->cols;
    char *const *strs = t->strings ? j->x->data : NULL;
    for (int64_t row = r0; row < r1; row++) {
        float *y = j->y + row * c->width;
        int64_t base = row * C;
        int64_t first_n = c->min_n;
        if (first_n > C) continue; /* no n-gram of the wanted lengths fits */
        /* Distances of C or more cannot place a second item in the row. */
        int64_t max_d = c->max_skip < C ? c->max_skip + 1 : C;
        for (int64_t d = 1; d <= max_d; d++) {
            for (int64_t start = 0; start < C; start++) {
                /* stop once start + d * (first_n - 1) >= C */
                if (first_n > 1 && (C - start - 1) / (first_n - 1) < d) break;
                int64_t node = 0, item = start;
                for (int64_t n = 1; n <= c->max_n && item < C; n++, item += d) {
                    int64_t p = base + item;
                    const char *sv = strs ? (strs[p] ? strs[p] : "") : NULL;
                    node = trie_find(t, node, strs ? 0 : item_i64(j->x, p), sv, j->hashes[p]);
                    if (node < 0) break;
                    int64_t id = t->ids[node];
                    if (n >= first_n && id > 0) y[c->indexes[id - 1]] += 1.0f;
                }
            }
            if (first_n == 1) {
                first_n = 2;
                if (first_n > c->max_n) break;
            }
        }
        /* Counts into the requested weighting. */
        for (int64_t k = 0; k < c->width; k++) {
            float f = y[k];
            float w = c->col_weight ? c->col_weight[k] : 1.0f;
            if (c->mode == 2) y[k] = f > 0 ? w : 0;
            else if (c->mode == 3) y[k] = f * w;
        }
    }
}

tdm_status *tdm_text_run_tfidf(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *yt = ctx->out[0];
    tfidf_cfg c;
    memset(&c, 0, sizeof c);
    const char *mode = tdm_attr_string(node, "mode", "TF");
    c.mode = !strcmp(mode, "TFIDF") ? 3 : !strcmp(mode, "IDF") ? 2 : 1;
    c.min_n = tdm_attr_int(node, "min_gram_length", 0);
    c.max_n = tdm_attr_int(node, "max_gram_length", 0);
    c.max_skip = tdm_attr_int(node, "max_skip_count", 0);
    c.indexes = tdm_attr_ints(node, "ngram_indexes", &c.n_indexes);
    c.weights = tdm_attr_floats(node, "weights", &c.n_weights);
    if (c.n_weights == 0) c.weights = NULL;
    c.width = yt->rank == 2 ? yt->dims[1] : yt->dims[0];
    if (c.min_n < 1 || c.max_n < c.min_n || c.max_skip < 0 || !c.indexes)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "invalid n-gram attributes");
    for (size_t i = 0; i < c.n_indexes; i++)
        if (c.indexes[i] < 0 || c.indexes[i] >= c.width)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "ngram_indexes[%zu] is out of range", i);
    if (c.weights && c.n_weights != c.n_indexes)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "weights has %zu values for %zu n-grams", c.n_weights, c.n_indexes);
    if (x->rank > 2)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must have shape [C] or [N, C]");
    int64_t rows = x->rank == 2 ? x->dims[0] : 1;
    int64_t cols = x->rank == 2 ? x->dims[1] : x->rank == 1 ? x->dims[0] : 1;
    bool str_pool = tdm_node_attr(node, "pool_strings") != NULL;
    if (str_pool != (x->dtype == TDM_STRING))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "a %s input needs pool_%s", tdm_dtype_name(x->dtype),
                              x->dtype == TDM_STRING ? "strings" : "int64s");
    if (yt->count == 0 || x->count == 0) {
        /* Output was zeroed by the executor; IDF/TFIDF of zero counts are zero too. */
        return NULL;
    }
    trie t;
    TDM_TRY(build_trie(node, ctx->alloc, &c, &t));
    uint64_t *hashes = tdm_kscratch(ctx, (size_t)x->count * sizeof *hashes);
    if (!hashes) {
        trie_free(&t);
        return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t i = 0; i < x->count; i++) {
        if (x->dtype == TDM_STRING) {
            const char *s = ((char *const *)x->data)[i];
            hashes[i] = tdm_hash_str(TDM_HASH_INIT, s ? s : "");
        } else {
            hashes[i] = (uint64_t)item_i64(x, i);
        }
    }
    if (c.weights) {
        c.col_weight = tdm_kscratch(ctx, (size_t)c.width * sizeof(float));
        if (!c.col_weight) {
            tdm_free(ctx->alloc, hashes);
            trie_free(&t);
            return tdm_node_error(node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
        }
        for (int64_t k = 0; k < c.width; k++) c.col_weight[k] = 1.0f;
        for (size_t i = 0; i < c.n_indexes; i++) c.col_weight[c.indexes[i]] = c.weights[i];
    }
    memset(yt->data, 0, yt->nbytes);
    tfidf_job job = {&c, &t, x, cols, hashes, yt->data};
    int64_t skips = c.max_skip < cols ? c.max_skip + 1 : cols;
    int64_t lens = c.max_n < cols ? c.max_n : cols;
    int64_t per_row = cols < 65536 && skips < 65536 && lens < 65536 ? cols * skips * lens : 65536;
    tdm_parallel_for(ctx->pool, rows, per_row >= 65536 ? 1 : 65536 / (per_row + 1) + 1, tfidf_rows, &job);
    tdm_free(ctx->alloc, c.col_weight);
    tdm_free(ctx->alloc, hashes);
    trie_free(&t);
    return NULL;
}
