/* The engine's graph edit (engine_impl.h): a GenAI decoder with GroupQueryAttention becomes
 * one that runs a packed batch of sequences on the paged KV cache.
 *
 *  - input_ids [1, tokens]: every sequence's new tokens one after the other (position_ids, if
 *    the model has it, the same way);
 *  - each GroupQueryAttention node becomes com.microsoft PagedAttention (the same node,
 *    rewired): query/key/value as they were, the caches are new inputs kv_cache.N.key /
 *    kv_cache.N.value [n_blocks, kv_heads, block_size, head_dim] (tandem_kv_layout "BHSD": a
 *    head's rows of a block together), bound by the engine to its pool and bound again as
 *    the outputs kv_cache_out.N.* (updated in place), and three new
 *    inputs shared by every layer, cumulative_sequence_length [batch + 1], past_seqlens
 *    [batch] and block_table [batch, max_blocks] (int32); cos/sin caches and the rotary
 *    attributes carry over. past_key_values.N.* and present.N.* go;
 *  - the nodes that only fed the attention from attention_mask (seqlens_k, total length) are
 *    dead and removed, and so is the input;
 *  - the lm head gets the rows of new input logits_rows (int64 [rows]: the packed row of each
 *    sequence's last new token) through a Gather on the sequence axis: logits [1, rows,
 *    vocab]. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "graph/infer.h"
#include "llm/engine_impl.h"
#include "llm/llm_graph.h"
#include "ops/kv_int8.h"

void tdm_engine_cache_name(char *dst, int layer, int value, bool out) {
    const char *pat = out ? (value ? TDM_ENGINE_VALUE_CACHE_OUT : TDM_ENGINE_KEY_CACHE_OUT)
                          : (value ? TDM_ENGINE_VALUE_CACHE : TDM_ENGINE_KEY_CACHE);
    tdm_llm_layer_name(dst, pat, layer);
}

/* A new value named exactly `name`, of `dtype` and `rank` dims (a graph input or output when
 * the flags say so). */
static tdm_status *exact_value(tdm_graph *g, const char *name, tdm_dtype dtype, int rank,
                               const int64_t *dims, int *out) {
    if (tdm_graph_find_value(g, name) >= 0)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "the model already has a value named '%s'", name);
    int idx = -1;
    TDM_TRY(tdm_graph_add_value(g, name, &idx));
    tdm_value *v = &g->values[idx];
    v->dtype = dtype;
    v->rank = rank;
    for (int d = 0; d < rank; d++) v->dims[d] = dims[d];
    *out = idx;
    return NULL;
}

/* g's inputs (or outputs) without the values marked in `drop`, with `add` appended. */
static tdm_status *rewrite_list(tdm_graph *g, int **list, size_t *n, const bool *drop,
                                const int *add, size_t n_add) {
    int *nl = tdm_calloc(g->alloc, *n + n_add + 1, sizeof *nl);
    if (!nl) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory editing the graph");
    size_t w = 0;
    for (size_t i = 0; i < *n; i++)
        if (!drop[(*list)[i]]) nl[w++] = (*list)[i];
    for (size_t i = 0; i < n_add; i++) nl[w++] = add[i];
    tdm_free(g->alloc, *list);
    *list = nl;
    *n = w;
    return NULL;
}

/* The GroupQueryAttention node reading value v as its input `slot`, or -1. */
static int gqa_reading(const tdm_graph *g, int v, int slot) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        if (!n->dead && strcmp(n->op_type, "GroupQueryAttention") == 0 &&
            strcmp(n->domain, "com.microsoft") == 0 && n->n_inputs > slot && n->inputs[slot] == v)
            return (int)i;
    }
    return -1;
}

/* Keeps the node's attributes PagedAttention has; refuses others set to non-defaults. */
static tdm_status *keep_paged_attrs(tdm_graph *g, tdm_node *n) {
    static const char *const keep[] = {"num_heads", "kv_num_heads", "scale", "softcap",
                                       "local_window_size", "do_rotary", "rotary_interleaved"};
    int w = 0;
    for (int k = 0; k < n->n_attrs; k++) {
        tdm_attr *at = &n->attrs[k];
        bool kept = false;
        for (size_t j = 0; j < sizeof keep / sizeof keep[0]; j++)
            if (strcmp(at->name, keep[j]) == 0) kept = true;
        if (!kept) {
            bool harmless = at->type == TDM_ATTR_INT &&
                            (at->i == 0 || (strcmp(at->name, "qk_output") == 0 && at->i < 0));
            if (!harmless)
                return TDM_ERR(TDM_ERR_UNSUPPORTED,
                               "GroupQueryAttention '%s' sets attribute '%s', "
                               "which paged attention does not have",
                               n->name, at->name);
            tdm_attr_clear(g->alloc, at);
            continue;
        }
        n->attrs[w++] = *at;
    }
    n->n_attrs = w;
    /* the caches as [blocks, kv heads, block size, head size]: a head's rows of a block
     * together (tandem's layout attribute, k_llm_paged.c) */
    tdm_attr *at = NULL;
    TDM_TRY(tdm_node_append_attr(g->alloc, n, "tandem_kv_layout", &at));
    at->type = TDM_ATTR_STRING;
    if (!(at->s = tdm_strdup(g->alloc, "BHSD")))
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory editing the graph");
    at->s_len = 4;
    return NULL;
}

/* The Gather of the logits rows before the lm head. */
static tdm_status *head_rows(tdm_graph *g, tdm_engine_edit *e, int rows) {
    const char *logits = e->f->logits;
    int lv = tdm_graph_find_value(g, logits);
    if (lv < 0 || !g->values[lv].is_output)
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no output '%s'", logits);
    tdm_value *L = &g->values[lv];
    if (L->dtype != TDM_FLOAT || L->rank != 3)
        return TDM_ERR(TDM_ERR_UNSUPPORTED,
                       "output '%s' must be float32 [batch, "
                       "sequence, vocab]",
                       logits);
    e->vocab = L->dims[2];
    int p = L->producer;
    bool ok = p >= 0;
    if (ok) {
        const tdm_node *head = &g->nodes[p];
        bool nbits =
            strcmp(head->op_type, "MatMulNBits") == 0 && strcmp(head->domain, "com.microsoft") == 0;
        bool matmul = strcmp(head->op_type, "MatMul") == 0 && head->domain[0] == 0 &&
                      head->n_inputs == 2 && head->inputs[1] >= 0 &&
                      g->values[head->inputs[1]].data && g->values[head->inputs[1]].data->rank == 2;
        ok = (nbits || matmul) && head->n_inputs >= 1 && head->inputs[0] >= 0 &&
             head->n_outputs >= 1 && head->outputs[0] == lv;
    }
    if (!ok)
        return TDM_ERR(TDM_ERR_UNSUPPORTED,
                       "the lm head (the node making '%s') is not "
                       "a MatMulNBits or a MatMul by a constant matrix",
                       logits);
    int hv = g->nodes[p].inputs[0];
    int out = -1, node = -1;
    int64_t dims[3] = {1, TDM_DIM_UNKNOWN, TDM_DIM_UNKNOWN};
    if (g->values[hv].rank == 3) dims[2] = g->values[hv].dims[2];
    TDM_TRY(tdm_llm_new_value(g, g->values[hv].name, "_rows", g->values[hv].dtype, 3, dims, NULL,
                              &out));
    TDM_TRY(tdm_graph_add_node(g, "tandem_engine_logits_rows", "Gather", "", 2, 1, &node));
    tdm_node *ga = &g->nodes[node];
    ga->opset = (int)tdm_graph_opset(g, "");
    ga->inputs[0] = hv;
    ga->inputs[1] = rows;
    ga->outputs[0] = out;
    ga->attrs = tdm_calloc(g->alloc, 1, sizeof *ga->attrs);
    if (!ga->attrs) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory editing the graph");
    ga->attrs[0].name = tdm_strdup(g->alloc, "axis");
    ga->attrs[0].type = TDM_ATTR_INT;
    ga->attrs[0].i = 1;
    ga->n_attrs = 1;
    if (!ga->attrs[0].name)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory editing the graph");
    g->nodes[p].inputs[0] = out;
    L = &g->values[lv];
    L->dims[0] = 1;
    L->dims[1] = TDM_DIM_UNKNOWN;
    for (int d = 0; d < 2; d++) {
        tdm_free(g->alloc, L->dim_params[d]);
        L->dim_params[d] = NULL;
    }
    return NULL;
}

/* The caches' type: the model's, or for a float32 model float16 (PagedAttention rounds the
 * new rows into the cache and widens what it reads: its math stays float32) or tandem's 8- or
 * 4-bit rows (int8 / uint8, the generator's kv_type int8 / int4: quantised as they enter,
 * integer dot products in decode). Sets cache_row too (head_dim known). */
static tdm_status *cache_dtype(tdm_engine_edit *e) {
    tdm_dtype want = e->want_dtype == TDM_UNDEFINED ? e->kv_dtype : e->want_dtype;
    bool quant = want == TDM_INT8 || want == TDM_UINT8;
    if (quant && e->kv_dtype != TDM_FLOAT)
        return TDM_ERR(TDM_ERR_UNSUPPORTED,
                       "kv_type %s: the model's KV cache is %s (8- and 4-bit pools are made from a "
                       "float32 model)",
                       want == TDM_INT8 ? "int8" : "int4", tdm_dtype_name(e->kv_dtype));
    if (quant && e->head_dim > TDM_KV_I8_MAX_HEAD_DIM)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "kv_type %s: head size %d is over %d",
                       want == TDM_INT8 ? "int8" : "int4", e->head_dim, TDM_KV_I8_MAX_HEAD_DIM);
    if (!quant && want != e->kv_dtype && !(want == TDM_FLOAT16 && e->kv_dtype == TDM_FLOAT))
        return TDM_ERR(TDM_ERR_UNSUPPORTED,
                       "kv_type %s: the model's KV cache is %s (a float16 pool is made from a "
                       "float32 model; a float32 one only from a float32 model)",
                       tdm_dtype_name(want), tdm_dtype_name(e->kv_dtype));
    e->cache_dtype = want;
    e->cache_row = want == TDM_INT8    ? TDM_KV_I8_ROW(e->head_dim)
                   : want == TDM_UINT8 ? TDM_KV_I4_ROW(e->head_dim)
                                       : e->head_dim;
    return NULL;
}

tdm_status *tdm_engine_edit_graph(tdm_graph *g, void *user) {
    tdm_engine_edit *e = user;
    const tdm_llm_folder *f = e->f;
    int ids = tdm_graph_find_value(g, f->input_ids);
    if (ids < 0 || !g->values[ids].is_input)
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no input '%s'", f->input_ids);
    tdm_value *iv = &g->values[ids];
    if (!tdm_llm_is_index_dtype(iv->dtype) || iv->rank != 2)
        return TDM_ERR(TDM_ERR_INVALID_MODEL,
                       "input '%s' must be int64 or int32 "
                       "[batch, sequence]",
                       f->input_ids);
    e->ids_dtype = iv->dtype;
    int pos = tdm_graph_find_value(g, f->position_ids);
    e->has_pos = pos >= 0 && g->values[pos].is_input;
    if (e->has_pos) {
        if (!tdm_llm_is_index_dtype(g->values[pos].dtype) || g->values[pos].rank != 2)
            return TDM_ERR(TDM_ERR_INVALID_MODEL,
                           "input '%s' must be int64 or int32 "
                           "[batch, sequence]",
                           f->position_ids);
        e->pos_dtype = g->values[pos].dtype;
    }
    /* layers: past_key_values.N.* read by a GroupQueryAttention as its past */
    int L = 0;
    char name[TDM_LLM_NAME];
    for (;; L++) {
        tdm_llm_layer_name(name, f->past_key, L);
        int v = tdm_graph_find_value(g, name);
        if (v < 0 || !g->values[v].is_input) break;
    }
    if (L == 0) {
        tdm_llm_layer_name(name, f->past_key, 0);
        return TDM_ERR(TDM_ERR_UNSUPPORTED,
                       "the model has no input '%s': not a "
                       "decoder with a KV cache in the GenAI form",
                       name);
    }
    e->n_layers = L;
    bool *drop = tdm_calloc(g->alloc, g->n_values + 1, sizeof *drop);
    if (!drop) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory editing the graph");
    tdm_status *st = NULL;
    int cu = -1, past = -1, table = -1, rows = -1;
    int64_t d1[1] = {TDM_DIM_UNKNOWN}, d2[2] = {TDM_DIM_UNKNOWN, TDM_DIM_UNKNOWN};
    st = exact_value(g, TDM_ENGINE_CU_SEQLENS, TDM_INT32, 1, d1, &cu);
    if (!st) st = exact_value(g, TDM_ENGINE_PAST_SEQLENS, TDM_INT32, 1, d1, &past);
    if (!st) st = exact_value(g, TDM_ENGINE_BLOCK_TABLE, TDM_INT32, 2, d2, &table);
    if (!st) st = exact_value(g, TDM_ENGINE_LOGITS_ROWS, TDM_INT64, 1, d1, &rows);
    int n_new_in = 0, n_new_out = 0;
    int *new_in = tdm_calloc(g->alloc, (size_t)L * 2 + 8, sizeof *new_in);
    int *new_out = tdm_calloc(g->alloc, (size_t)L * 2 + 1, sizeof *new_out);
    if (!st && (!new_in || !new_out))
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory editing the graph");
    if (!st) {
        new_in[n_new_in++] = cu;
        new_in[n_new_in++] = past;
        new_in[n_new_in++] = table;
        new_in[n_new_in++] = rows;
    }
    for (int l = 0; l < L && !st; l++) {
        char pk[TDM_LLM_NAME], pv[TDM_LLM_NAME];
        tdm_llm_layer_name(pk, f->past_key, l);
        tdm_llm_layer_name(pv, f->past_value, l);
        int vk = tdm_graph_find_value(g, pk), vv = tdm_graph_find_value(g, pv);
        int node = vk >= 0 ? gqa_reading(g, vk, 3) : -1;
        if (node < 0 || vv < 0 || g->nodes[node].n_inputs < 7 || g->nodes[node].inputs[4] != vv ||
            g->nodes[node].n_outputs < 3) {
            st = TDM_ERR(TDM_ERR_UNSUPPORTED,
                         "input '%s' is not the past key of a "
                         "GroupQueryAttention node (the engine pages that attention "
                         "only)",
                         pk);
            break;
        }
        const tdm_value *k = &g->values[vk];
        if (k->rank != 4 || k->dims[1] <= 0 || k->dims[3] <= 0 ||
            (k->dtype != TDM_FLOAT && k->dtype != TDM_FLOAT16)) {
            st = TDM_ERR(TDM_ERR_UNSUPPORTED,
                         "input '%s' must be float32 or float16 "
                         "[batch, kv_heads, past, head_dim] with kv_heads and head_dim "
                         "fixed",
                         pk);
            break;
        }
        if (l == 0) {
            e->kv_heads = (int)k->dims[1];
            e->head_dim = (int)k->dims[3];
            e->kv_dtype = k->dtype;
            e->num_heads = (int)tdm_attr_int(&g->nodes[node], "num_heads", 0);
            st = cache_dtype(e);
            if (st) break;
        } else if (k->dims[1] != e->kv_heads || k->dims[3] != e->head_dim ||
                   k->dtype != e->kv_dtype) {
            st = TDM_ERR(TDM_ERR_UNSUPPORTED,
                         "input '%s' differs in shape or type "
                         "from layer 0's",
                         pk);
            break;
        }
        tdm_dtype kvt = e->cache_dtype;
        int64_t cd[4] = {e->n_blocks, e->kv_heads, e->block_size, e->cache_row};
        int caches[4];
        for (int j = 0; j < 4 && !st; j++) {
            tdm_engine_cache_name(name, l, j & 1, j >= 2);
            st = exact_value(g, name, kvt, 4, cd, &caches[j]);
        }
        if (st) break;
        tdm_node *n = &g->nodes[node];
        drop[vk] = drop[vv] = true;
        if (n->outputs[1] >= 0) drop[n->outputs[1]] = true;
        if (n->outputs[2] >= 0) drop[n->outputs[2]] = true;
        int *in = tdm_calloc(g->alloc, 10, sizeof *in);
        int *out = tdm_calloc(g->alloc, 3, sizeof *out);
        char *op = tdm_strdup(g->alloc, "PagedAttention");
        if (!in || !out || !op) {
            tdm_free(g->alloc, in);
            tdm_free(g->alloc, out);
            tdm_free(g->alloc, op);
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory editing the graph");
            break;
        }
        in[0] = n->inputs[0];
        in[1] = n->inputs[1];
        in[2] = n->inputs[2];
        in[3] = caches[0];
        in[4] = caches[1];
        in[5] = cu;
        in[6] = past;
        in[7] = table;
        in[8] = n->n_inputs > 7 ? n->inputs[7] : -1;
        in[9] = n->n_inputs > 8 ? n->inputs[8] : -1;
        out[0] = n->outputs[0];
        out[1] = caches[2];
        out[2] = caches[3];
        /* the old present outputs are no graph outputs any more */
        for (int j = 1; j < 3; j++)
            if (n->outputs[j] >= 0) g->values[n->outputs[j]].is_output = false;
        g->values[vk].is_input = g->values[vv].is_input = false;
        tdm_free(g->alloc, n->inputs);
        tdm_free(g->alloc, n->outputs);
        tdm_free(g->alloc, n->op_type);
        n->inputs = in;
        n->outputs = out;
        n->op_type = op;
        n->n_inputs = 10;
        n->n_outputs = 3;
        st = keep_paged_attrs(g, n);
        new_in[n_new_in++] = caches[0];
        new_in[n_new_in++] = caches[1];
        new_out[n_new_out++] = caches[2];
        new_out[n_new_out++] = caches[3];
    }
    /* any GroupQueryAttention left reads no past of the folder's names */
    for (size_t i = 0; i < g->n_nodes && !st; i++)
        if (!g->nodes[i].dead && strcmp(g->nodes[i].op_type, "GroupQueryAttention") == 0)
            st = TDM_ERR(TDM_ERR_UNSUPPORTED,
                         "GroupQueryAttention '%s' reads no "
                         "past_key_values input of the folder's names",
                         g->nodes[i].name);
    /* drop[] covers the values that existed when it was made: the lists' old entries */
    if (!st) st = rewrite_list(g, &g->inputs, &g->n_inputs, drop, new_in, (size_t)n_new_in);
    if (!st) st = rewrite_list(g, &g->outputs, &g->n_outputs, drop, new_out, (size_t)n_new_out);
    for (int i = 0; !st && i < n_new_in; i++) g->values[new_in[i]].is_input = true;
    for (int i = 0; !st && i < n_new_out; i++) g->values[new_out[i]].is_output = true;
    tdm_free(g->alloc, new_in);
    tdm_free(g->alloc, new_out);
    tdm_free(g->alloc, drop);
    if (!st) st = head_rows(g, e, rows);
    int removed = 0;
    if (!st) st = tdm_graph_finalize(g);
    if (!st) st = tdm_graph_remove_dead(g, &removed);
    if (!st) st = tdm_graph_compact(g);
    /* the attention mask fed only the attention's lengths */
    int mask = st ? -1 : tdm_graph_find_value(g, f->attention_mask);
    if (mask >= 0 && g->values[mask].is_input) {
        if (g->values[mask].n_consumers > 0)
            return TDM_ERR(TDM_ERR_UNSUPPORTED,
                           "input '%s' feeds nodes besides the "
                           "attention's sequence lengths",
                           f->attention_mask);
        bool *d = tdm_calloc(g->alloc, g->n_values + 1, sizeof *d);
        if (!d) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory editing the graph");
        d[mask] = true;
        st = rewrite_list(g, &g->inputs, &g->n_inputs, d, NULL, 0);
        tdm_free(g->alloc, d);
        g->values[mask].is_input = false;
        if (!st) st = tdm_graph_finalize(g);
    }
    return st;
}
