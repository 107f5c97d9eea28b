/* The generation loop (include/tandem/generator.h): a session of the folder's model, the KV
 * cache and the sequence, fed through I/O bindings (tandem.h).
 *
 * Every run feeds the tokens not yet in the cache, tokens[n_cached .. n_tokens): the whole
 * prompt at once (prefill), then one token per step. The inputs are headers over buffers sized
 * for max_length and made at creation: input_ids views the token ids at n_cached,
 * attention_mask views max_length ones ([1, total]), position_ids views 0, 1, 2, ... at
 * n_cached. Only the headers' dims and data pointers change between runs. With the shared
 * cache the mask is [1, max_length], ones for the tokens so far and zeros after (unless
 * dynamic_mask): GroupQueryAttention takes the lengths from the mask's sums (seqlens_k), so
 * every decode step has the same input shapes and reuses one memory plan of the executor.
 *
 * KV cache:
 *  - shared (GenAI folders whose model has GroupQueryAttention, past_present_share_buffer):
 *    one tensor per layer and K/V, [1, kv_heads, max_length, head_dim], bound as the past
 *    input and the present output of binding 0 once, at creation; the kernel appends in place.
 *    On a device (options.device) each layer's cache lives where the plan's budget pass put
 *    it (sched/budget.h tdm_kv_plan): a plan state on the device of its attention bound the
 *    same way (no copies per token), in host memory bound the same way when its attention
 *    runs on the CPU, or in host memory fed back as below (uploaded and downloaded each run).
 *  - fed back (optimum, and GenAI folders that say past_present_share_buffer false): two
 *    bindings take turns; the presents the one kept from its run are the pasts of the other's
 *    next run, and stay valid until that binding runs again. The first run gets empty pasts.
 *  - its element type is the model's (float32, or float16 for a folder converted with
 *    --kv-dtype float16), or int8 with options.kv_type "int8" (shared form only): the graph
 *    edit kv_quant_edit makes every past / present int8 [1, kv_heads, length,
 *    TDM_KV_I8_ROW(head_dim)] (ops/kv_int8.h), which GroupQueryAttention takes as its 8-bit
 *    cache; with "int4", uint8 [1, kv_heads, length, TDM_KV_I4_ROW(head_dim)], its 4-bit
 *    cache (head_dim then comes from the edit: the row length does not give it back); the
 *    budget (kv_budget) counts those bytes.
 * Logits: only the last position's are used, so by default (tdm_generator_options.all_logits
 * false) the graph is edited at creation to compute only those (last_logits_only: the lm
 * head gets the last row of its input): every run writes them into a [1, 1, vocab] tensor
 * bound once. With all_logits (or a graph the edit does not recognise) a decode step writes
 * into that tensor and a prefill's [1, n, vocab] is made by the run. The last row is copied
 * out. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/status.h"
#include "sched/budget.h"
#include "core/tensor.h"
#include "api/api_impl.h"
#include "graph/graph.h"
#include "llm/llm_folder.h"
#include "llm/llm_graph.h"
#include "llm/llm_internal.h"
#include "llm/sampler.h"
#include "ops/kv_int8.h"
#include "tandem/generator.h"

enum { PK, PV, OK, OV }; /* the four names of a layer: past key/value, present key/value */

struct tdm_generator {
    tdm_env *env;
    const tdm_allocator *a;
    tdm_session *s;
    tdm_io_binding *bind[2];
    unsigned step;          /* runs so far (the fed-back form takes bindings in turn) */
    bool shared;            /* the shared-buffer KV cache */
    bool on_device;         /* options.device other than the CPU: the logits come back as the
                               run's output, and each layer's cache is where the plan put it
                               (kv_place) */
    unsigned char *kv_place; /* per layer (sched/budget.h tdm_kv_place): DEVICE, a state of the
                               plan on the device bound in place; CPU, a host cache bound in
                               place (shared form); HOST, fed back (the shared form's present,
                               max_length long, downloaded and uploaded as the next past) */
    bool any_fed_back;      /* some layer's cache is fed back: the bindings take turns */
    bool dynamic_mask;      /* shared: attention_mask [1, total] rather than [1, max_length] */
    bool last_only;         /* the graph computes the last position's logits only */
    tdm_llm_folder f;
    int n_layers, kv_heads, head_dim;
    int kv4_head_dim;       /* the 4-bit cache's head_dim (from the graph edit), else 0 */
    int64_t kv_budget_bytes; /* KV cache taken from options.device_memory (0: no budget) */
    tdm_dtype kv_dtype;
    size_t vocab;           /* 0 until the first run (when the model leaves it dynamic) */
    int max_length;
    char (*names)[4][TDM_LLM_NAME]; /* per layer */
    tdm_tensor **cache;     /* shared: [layer * 2 + k/v] */
    void *kv_arena;         /* shared, on the host: one block under all of cache[] (huge pages) */
    size_t kv_mapped;       /* kv_arena's size when tdm_map_huge gave it, else 0 */
    tdm_tensor **empty;     /* fed back: [layer * 2 + k/v] pasts of length 0 */
    bool has_mask, has_pos;
    tdm_dtype ids_dtype, mask_dtype, pos_dtype;
    void *ids_buf, *mask_buf, *pos_buf; /* max_length elements each */
    tdm_tensor ids_t, mask_t, pos_t;    /* headers over them (never freed by a run) */
    tdm_tensor *logits1;    /* [1, 1, vocab] bound for decode steps, once vocab is known */
    float *logits;          /* vocab: the last position's, when they came in another tensor */
    float *cur_logits;      /* the last position's logits: logits1's data after a decode step
                               (sampled where the run wrote them: no copy of the vocabulary
                               per token), else logits */
    bool have_logits;
    int32_t *tokens;        /* max_length */
    size_t n_tokens, n_cached;
    int32_t *gen;           /* max_length: the tokens next() chose since creation or reset */
    size_t n_gen;
    float presence, frequency; /* the options' penalties */
    int32_t *stop;          /* the eos ids (unless ignore_eos) and the stop ids */
    bool ignore_eos;        /* eos ids are never sampled (their logits are set to -inf) */
    size_t n_stop;
    int32_t eos[TDM_LLM_MAX_EOS];
    size_t n_eos;
    tdm_sampling sampling;
    tdm_sampler smp;
    bool smp_ready;
    atomic_int cancelled;
    bool done;
    tdm_generator_stats stats;
    int64_t t_first_append; /* 0 = none yet */
    bool first_token_seen;
};

/* ---- the last position's logits only ---- */

/* the cache's last dim for head_dim d: a row of the 8-bit / 4-bit cache, or d elements */
static int64_t kv_row(tdm_dtype dt, int64_t d) {
    return dt == TDM_INT8 ? TDM_KV_I8_ROW(d) : dt == TDM_UINT8 ? TDM_KV_I4_ROW(d) : d;
}

/* The graph edit of tdm_generator_options.all_logits false: when the logits are a product
 * of rows (MatMulNBits, or MatMul by a constant 2-D matrix: the lm head) of a [batch,
 * sequence, hidden] value, that value is sliced to its last position first,
 *     h_last = Slice(h, starts [-1], ends [INT64_MAX], axes [1]),
 * so the head runs on one row and the logits output is [batch, 1, vocab] in every run (the
 * generator reads only the last position's). Any other form is left as it is. */
typedef struct last_edit {
    const char *logits; /* the output's name */
    bool applied;
    bool last_only;     /* the edit is wanted (not all_logits) */
    /* memory budget (options.device_memory): the budget in bytes, and the text the session
     * reads, rewritten here to the budget less the KV cache once the graph tells its size */
    const tdm_llm_folder *f;
    int max_length;
    int64_t budget, kv_bytes;
    char *budget_text;
    size_t budget_size;
    int kv_bits;        /* options.kv_type "int8" / "int4": the caches become 8-bit / 4-bit
                           (kv_quant_edit); 0: as the model has them */
    int kv_head_dim;    /* set by kv_quant_edit: the float cache's head_dim */
} last_edit;

/* Marks the KV cache for the budget pass (graph/graph.h kv_layer): every layer's pasts and
 * presents, with a past's bytes at max_length; fed back (negative) unless the cache is the
 * shared buffer of GroupQueryAttention. */
static void kv_mark(tdm_graph *g, const last_edit *e) {
    bool gqa = false;
    for (size_t n = 0; n < g->n_nodes && !gqa; n++)
        gqa = !strcmp(g->nodes[n].op_type, "GroupQueryAttention");
    bool shared = e->f->genai && e->f->share_buffer != 0 && gqa;
    for (int l = 0; l < 4096; l++) {
        const char *names[4] = {e->f->past_key, e->f->past_value, e->f->present_key, e->f->present_value};
        int found = 0;
        for (int k = 0; k < 4; k++) {
            char name[TDM_LLM_NAME];
            tdm_llm_layer_name(name, names[k], l);
            int v = tdm_graph_find_value(g, name);
            if (v < 0) continue;
            tdm_value *val = &g->values[v];
            val->kv_layer = shared ? l + 1 : -(l + 1);
            if (k < 2 && val->rank == 4 && val->dims[1] > 0 && val->dims[3] > 0) {
                val->kv_bytes = val->dims[1] * val->dims[3] * (int64_t)e->max_length *
                                (int64_t)tdm_dtype_size(val->dtype);
                found++;
            }
        }
        if (!found) break;
    }
}

/* kv_type "int8": every layer's past and present key / value become int8 [batch, kv_heads,
 * length, TDM_KV_I8_ROW(head_dim)] (ops/kv_int8.h: codes, then one scale per 32), which
 * GroupQueryAttention takes as its 8-bit cache; "int4" (bits 4): uint8 [.., TDM_KV_I4_ROW(
 * head_dim)], its 4-bit cache. Only when each past is float32 and read by GroupQueryAttention
 * nodes alone (as past_key / past_value). */
static tdm_status *kv_quant_edit(tdm_graph *g, last_edit *e) {
    const tdm_llm_folder *f = e->f;
    const char *kt = e->kv_bits == 4 ? "int4" : "int8";
    int layers = 0;
    for (int l = 0; l < 4096; l++) {
        char name[4][TDM_LLM_NAME];
        tdm_llm_layer_name(name[0], f->past_key, l);
        tdm_llm_layer_name(name[1], f->past_value, l);
        tdm_llm_layer_name(name[2], f->present_key, l);
        tdm_llm_layer_name(name[3], f->present_value, l);
        int v[4];
        for (int k = 0; k < 4; k++) v[k] = tdm_graph_find_value(g, name[k]);
        if (v[0] < 0 && v[1] < 0) break;
        for (int k = 0; k < 4; k++) {
            if (v[k] < 0)
                return TDM_ERR(TDM_ERR_UNSUPPORTED, "kv_type %s: the model has no '%s'", kt, name[k]);
            tdm_value *val = &g->values[v[k]];
            if (val->dtype != TDM_FLOAT || val->rank != 4 || val->dims[3] <= 0 ||
                (e->kv_head_dim && val->dims[3] != e->kv_head_dim))
                return TDM_ERR(TDM_ERR_UNSUPPORTED, "kv_type %s needs a float32 [batch, kv_heads, "
                               "length, head_dim] cache, one head_dim for all; '%s' is %s", kt,
                               name[k], tdm_dtype_name(val->dtype));
            e->kv_head_dim = (int)val->dims[3];
        }
        for (size_t n = 0; n < g->n_nodes; n++) {
            const tdm_node *nd = &g->nodes[n];
            bool gqa = !strcmp(nd->op_type, "GroupQueryAttention") && !strcmp(nd->domain, "com.microsoft");
            for (int i = 0; i < nd->n_inputs; i++)
                if ((nd->inputs[i] == v[0] || nd->inputs[i] == v[1]) &&
                    !(gqa && (i == 3 || i == 4)))
                    return TDM_ERR(TDM_ERR_UNSUPPORTED, "kv_type %s: '%s' is read by %s node '%s', "
                                   "not as GroupQueryAttention's past", kt, g->values[nd->inputs[i]].name,
                                   nd->op_type, nd->name ? nd->name : "");
            if (gqa)
                for (int o = 1; o < nd->n_outputs && o <= 2; o++)
                    if (nd->outputs[o] == v[2] || nd->outputs[o] == v[3])
                        if (nd->n_inputs <= o + 2 || nd->inputs[o + 2] != v[o - 1])
                            return TDM_ERR(TDM_ERR_UNSUPPORTED, "kv_type %s: '%s' is not the "
                                           "present of '%s'", kt, name[o + 1], name[o - 1]);
        }
        for (int k = 0; k < 4; k++) {
            tdm_value *val = &g->values[v[k]];
            val->dtype = e->kv_bits == 4 ? TDM_UINT8 : TDM_INT8;
            val->dims[3] = e->kv_bits == 4 ? TDM_KV_I4_ROW(val->dims[3]) : TDM_KV_I8_ROW(val->dims[3]);
            tdm_free(g->alloc, val->dim_params[3]);
            val->dim_params[3] = NULL;
        }
        layers++;
    }
    if (!layers) return TDM_ERR(TDM_ERR_UNSUPPORTED, "kv_type %s: no KV cache inputs found", kt);
    return tdm_graph_finalize(g);
}

/* The KV cache's bytes from the graph's past inputs ([batch, kv_heads, past, head_dim] per
 * layer for K and V, max_length long), taken from the budget the session plans with: the
 * generator holds the cache next to the plan's weights and activations. */
static tdm_status *kv_budget(tdm_graph *g, last_edit *e) {
    int64_t bytes = 0;
    for (int l = 0; l < 4096; l++) {
        char name[2][TDM_LLM_NAME];
        tdm_llm_layer_name(name[0], e->f->past_key, l);
        tdm_llm_layer_name(name[1], e->f->past_value, l);
        int found = 0;
        for (int k = 0; k < 2; k++) {
            int v = tdm_graph_find_value(g, name[k]);
            if (v < 0) continue;
            const tdm_value *val = &g->values[v];
            if (val->rank != 4 || val->dims[1] <= 0 || val->dims[3] <= 0) continue;
            bytes += val->dims[1] * val->dims[3] * (int64_t)e->max_length *
                     (int64_t)tdm_dtype_size(val->dtype);
            found++;
        }
        if (!found) break;
    }
    e->kv_bytes = bytes;
    if (bytes >= e->budget)
        return TDM_ERR(TDM_ERR_LIMIT, "cpu: the KV cache alone (%.1f MiB for max_length %d) does not "
                       "fit in the memory budget of %.1f MiB", (double)bytes / 1048576, e->max_length,
                       (double)e->budget / 1048576);
    snprintf(e->budget_text, e->budget_size, "cpu=%lldB", (long long)(e->budget - bytes));
    return NULL;
}

static tdm_status *last_logits_only(tdm_graph *g, void *user) {
    last_edit *e = user;
    if (e->kv_bits) TDM_TRY(kv_quant_edit(g, e));
    if (e->budget > 0) TDM_TRY(kv_budget(g, e));
    kv_mark(g, e);
    if (!e->last_only) return NULL;
    const char *logits = e->logits;
    int lv = tdm_graph_find_value(g, logits);
    if (lv < 0 || g->values[lv].producer < 0) return NULL;
    tdm_node *head = &g->nodes[g->values[lv].producer];
    bool nbits = strcmp(head->op_type, "MatMulNBits") == 0 &&
                 strcmp(head->domain, "com.microsoft") == 0;
    bool matmul = strcmp(head->op_type, "MatMul") == 0 && head->domain[0] == 0 &&
                  head->n_inputs == 2 && head->inputs[1] >= 0 &&
                  g->values[head->inputs[1]].data && g->values[head->inputs[1]].data->rank == 2;
    if (!(nbits || matmul) || head->n_inputs < 1 || head->inputs[0] < 0 || head->n_outputs < 1 ||
        head->outputs[0] != lv)
        return NULL;
    int hv = head->inputs[0];
    /* the head's input has the rank of the logits (often not recorded in the file) */
    if ((g->values[hv].rank != 3 && g->values[hv].rank != -1) || g->values[lv].rank != 3)
        return NULL;
    int head_index = g->values[lv].producer;
    int starts = -1, ends = -1, axes = -1, out = -1, node = -1;
    TDM_TRY(tdm_llm_i64_const(g, logits, "_last_starts", -1, &starts));
    TDM_TRY(tdm_llm_i64_const(g, logits, "_last_ends", INT64_MAX, &ends));
    TDM_TRY(tdm_llm_i64_const(g, logits, "_last_axes", 1, &axes));
    int64_t dims[3] = {TDM_DIM_UNKNOWN, 1, TDM_DIM_UNKNOWN};
    if (g->values[hv].rank == 3) {
        dims[0] = g->values[hv].dims[0];
        dims[2] = g->values[hv].dims[2];
    }
    TDM_TRY(tdm_llm_new_value(g, g->values[hv].name, "_last", g->values[hv].dtype,
                      g->values[hv].rank == 3 ? 3 : -1, dims, NULL, &out));
    TDM_TRY(tdm_graph_add_node(g, "tandem_generator_last_position", "Slice", "", 4, 1, &node));
    tdm_node *sl = &g->nodes[node];
    sl->inputs[0] = hv;
    sl->inputs[1] = starts;
    sl->inputs[2] = ends;
    sl->inputs[3] = axes;
    sl->outputs[0] = out;
    g->nodes[head_index].inputs[0] = out;
    tdm_value *L = &g->values[lv];
    L->dims[1] = 1;
    tdm_free(g->alloc, L->dim_params[1]);
    L->dim_params[1] = NULL;
    e->applied = true;
    return tdm_graph_finalize(g);
}

/* ---- creation ---- */

/* Inputs, layers, KV shapes from the model; names from the folder. */
static tdm_status *describe(tdm_generator *g) {
    const tdm_model *m = tdm_session_model(g->s);
    tdm_value_desc d;
    if (tdm_llm_find_input(m, g->f.input_ids, &d) < 0)
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no input '%s'", g->f.input_ids);
    if (!tdm_llm_is_index_dtype(d.dtype) || d.rank != 2)
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "input '%s' must be int64 or int32 [batch, sequence]",
                       g->f.input_ids);
    g->ids_dtype = d.dtype;
    g->has_mask = tdm_llm_find_input(m, g->f.attention_mask, &d) >= 0;
    if (g->has_mask && (!tdm_llm_is_index_dtype(d.dtype) || d.rank != 2))
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "input '%s' must be int64 or int32 [batch, total]",
                       g->f.attention_mask);
    g->mask_dtype = g->has_mask ? d.dtype : TDM_INT64;
    g->has_pos = tdm_llm_find_input(m, g->f.position_ids, &d) >= 0;
    if (g->has_pos && (!tdm_llm_is_index_dtype(d.dtype) || d.rank != 2))
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "input '%s' must be int64 or int32 [batch, sequence]",
                       g->f.position_ids);
    g->pos_dtype = g->has_pos ? d.dtype : TDM_INT64;
    if (tdm_llm_find_output(m, g->f.logits, &d) < 0)
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no output '%s'", g->f.logits);
    if (d.dtype != TDM_FLOAT || d.rank != 3)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "output '%s' must be float32 [batch, sequence, vocab]",
                       g->f.logits);
    g->vocab = d.dims[2] > 0 ? (size_t)d.dims[2] : 0;
    char name[TDM_LLM_NAME];
    int L = 0;
    for (;; L++) {
        tdm_llm_layer_name(name, g->f.past_key, L);
        if (tdm_llm_find_input(m, name, NULL) < 0) break;
    }
    if (L == 0) {
        tdm_llm_layer_name(name, g->f.past_key, 0);
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no input '%s': not a decoder with a KV "
                       "cache in the optimum or GenAI form", name);
    }
    g->n_layers = L;
    g->names = tdm_calloc(g->a, (size_t)L, sizeof *g->names);
    if (!g->names) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a generator");
    for (int l = 0; l < L; l++) {
        tdm_llm_layer_name(g->names[l][PK], g->f.past_key, l);
        tdm_llm_layer_name(g->names[l][PV], g->f.past_value, l);
        tdm_llm_layer_name(g->names[l][OK], g->f.present_key, l);
        tdm_llm_layer_name(g->names[l][OV], g->f.present_value, l);
        for (int k = PK; k <= PV; k++) {
            if (tdm_llm_find_input(m, g->names[l][k], &d) < 0)
                return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no input '%s'", g->names[l][k]);
            if (d.rank != 4 || d.dims[1] <= 0 || d.dims[3] <= 0 ||
                (d.dtype != TDM_FLOAT && d.dtype != TDM_FLOAT16 && d.dtype != TDM_INT8 &&
                 d.dtype != TDM_UINT8) ||
                (d.dtype == TDM_INT8 && tdm_kv_i8_head_dim(d.dims[3]) < 1) ||
                (d.dtype == TDM_UINT8 && (g->kv4_head_dim < 1 || d.dims[3] != TDM_KV_I4_ROW(g->kv4_head_dim))))
                return TDM_ERR(TDM_ERR_UNSUPPORTED, "input '%s' must be float32 or float16 [batch, "
                               "kv_heads, past, head_dim] with kv_heads and head_dim fixed",
                               g->names[l][k]);
            if (l == 0 && k == PK) {
                g->kv_heads = (int)d.dims[1];
                g->head_dim = (int)(d.dtype == TDM_INT8    ? tdm_kv_i8_head_dim(d.dims[3])
                                    : d.dtype == TDM_UINT8 ? g->kv4_head_dim
                                                           : d.dims[3]);
                g->kv_dtype = d.dtype;
            } else if (d.dims[1] != g->kv_heads || d.dtype != g->kv_dtype ||
                       d.dims[3] != kv_row(d.dtype, g->head_dim)) {
                return TDM_ERR(TDM_ERR_UNSUPPORTED, "input '%s' differs in shape or type from '%s'",
                               g->names[l][k], g->names[0][PK]);
            }
        }
        for (int k = OK; k <= OV; k++)
            if (tdm_llm_find_output(m, g->names[l][k], NULL) < 0)
                return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no output '%s'", g->names[l][k]);
    }
    g->shared = g->f.genai && g->f.share_buffer != 0 && tdm_llm_has_op(m, "GroupQueryAttention");
    return NULL;
}

/* Where each layer's cache lives: the plan's KV placement (sched/budget.h); a plan without
 * one (a graph the marks missed) feeds every cache back on a device, keeps it in place on
 * the CPU. */
static tdm_status *kv_places(tdm_generator *g) {
    g->kv_place = tdm_calloc(g->a, (size_t)g->n_layers, 1);
    if (!g->kv_place) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a generator");
    const tdm_kv_plan *k = g->s->strategy && g->s->strategy->plan ? g->s->strategy->plan->kv : NULL;
    for (int l = 0; l < g->n_layers; l++) {
        int pl = k && l < k->n_layers ? k->place[l] : g->on_device ? TDM_KV_HOST : TDM_KV_CPU;
        if (!g->shared && pl != TDM_KV_CPU) pl = TDM_KV_HOST; /* fed back */
        g->kv_place[l] = (unsigned char)pl;
        g->any_fed_back |= !g->shared || pl == TDM_KV_HOST;
    }
    return NULL;
}

static tdm_status *alloc_state(tdm_generator *g) {
    size_t ml = (size_t)g->max_length;
    g->ids_buf = tdm_calloc(g->a, ml, tdm_dtype_size(g->ids_dtype));
    g->mask_buf = tdm_calloc(g->a, ml, tdm_dtype_size(g->mask_dtype));
    g->pos_buf = tdm_calloc(g->a, ml, tdm_dtype_size(g->pos_dtype));
    g->tokens = tdm_calloc(g->a, ml, sizeof *g->tokens);
    g->gen = tdm_calloc(g->a, ml, sizeof *g->gen);
    size_t nc = (size_t)g->n_layers * 2;
    g->cache = tdm_calloc(g->a, nc, sizeof *g->cache);
    g->empty = tdm_calloc(g->a, nc, sizeof *g->empty);
    if (!g->ids_buf || !g->mask_buf || !g->pos_buf || !g->tokens || !g->gen || !g->cache || !g->empty)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a generator");
    TDM_TRY(kv_places(g));
    for (size_t i = 0; i < ml; i++) tdm_llm_put_index(g->pos_buf, g->pos_dtype, i, (int64_t)i);
    int64_t dims[4] = {1, g->kv_heads, g->shared ? g->max_length : 0,
                       kv_row(g->kv_dtype, g->head_dim)};
    tdm_plan *plan = g->s->strategy ? g->s->strategy->plan : NULL;
    /* The host caches of the shared form in one block; one of 2 MiB or more on pages of its
     * own, on transparent huge pages where the system gives them (madvise mode): a decode step
     * at depth reads every layer's cache once, and on 4 KiB pages each page of it is a TLB miss
     * after the step's weights went through (SmolLM2 at position 1000: 3,000 pages of cache).
     * Fresh pages: the allocator's memory may come back on pages already faulted in at 4 KiB
     * (after a load), where the hint does nothing. */
    size_t per = (size_t)(dims[1] * dims[2] * dims[3]) * tdm_dtype_size(g->kv_dtype), arena = 0;
    per = (per + 63) & ~(size_t)63;
    for (size_t i = 0; g->shared && i < nc; i++) arena += g->kv_place[i / 2] == TDM_KV_DEVICE ? 0 : per;
    char *base = NULL;
    if (arena > 0) {
        if (arena >= ((size_t)2 << 20) && (g->kv_arena = tdm_map_huge(arena))) g->kv_mapped = arena;
        else g->kv_arena = tdm_alloc(g->a, arena);
        if (!g->kv_arena) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for the KV cache");
        base = g->kv_arena;
        memset(base, 0, arena); /* every page faulted in now, not during the decode steps */
    }
    for (size_t i = 0; i < nc; i++) {
        if (g->kv_place[i / 2] == TDM_KV_DEVICE) { /* on the device of its attention */
            const char *past = g->names[i / 2][PK + (int)(i & 1)];
            int v = plan ? tdm_graph_find_value(plan->graph, past) : -1;
            if (v < 0) return TDM_ERR(TDM_ERR_INTERNAL, "the plan has no '%s'", past);
            TDM_TRY(tdm_plan_state_new(plan, v, g->kv_dtype, 4, dims, &g->cache[i]));
        } else if (base) {
            TDM_TRY(tdm_tensor_wrap(g->env, g->kv_dtype, 4, dims, base, per, &g->cache[i]));
            base += per;
        } else {
            TDM_TRY(tdm_tensor_create(g->env, g->kv_dtype, 4, dims, g->shared ? &g->cache[i] : &g->empty[i]));
        }
    }
    for (int b = 0; b < 2; b++) TDM_TRY(tdm_io_binding_create(g->s, &g->bind[b]));
    /* what every run of a binding reads and writes: the headers (their dims change), and the
     * caches bound in place (shared form, on the CPU or a state on the device) */
    for (int b = 0; b < 2; b++) {
        TDM_TRY(tdm_io_binding_bind_input(g->bind[b], g->f.input_ids, &g->ids_t));
        if (g->has_mask) TDM_TRY(tdm_io_binding_bind_input(g->bind[b], g->f.attention_mask, &g->mask_t));
        if (g->has_pos) TDM_TRY(tdm_io_binding_bind_input(g->bind[b], g->f.position_ids, &g->pos_t));
        for (int l = 0; l < g->n_layers; l++)
            for (int k = 0; k < 2; k++) {
                tdm_tensor *c = g->shared && g->kv_place[l] != TDM_KV_HOST ? g->cache[l * 2 + k] : NULL;
                if (c) TDM_TRY(tdm_io_binding_bind_input(g->bind[b], g->names[l][PK + k], c));
                TDM_TRY(tdm_io_binding_bind_output(g->bind[b], g->names[l][OK + k], c));
            }
    }
    tdm_llm_set_view(&g->ids_t, g->ids_dtype, g->ids_buf, 0, 0);
    tdm_llm_set_view(&g->mask_t, g->mask_dtype, g->mask_buf, 0, 0);
    tdm_llm_set_view(&g->pos_t, g->pos_dtype, g->pos_buf, 0, 0);
    if (g->vocab) {
        int64_t ld[3] = {1, 1, (int64_t)g->vocab};
        TDM_TRY(tdm_tensor_create(g->env, TDM_FLOAT, 3, ld, &g->logits1));
    }
    return NULL;
}

static tdm_status *set_stops(tdm_generator *g, const tdm_generator_options *o) {
    g->n_eos = (size_t)g->f.n_eos;
    memcpy(g->eos, g->f.eos, g->n_eos * sizeof *g->eos);
    size_t n_user = o ? o->n_stop_ids : 0;
    if (n_user && !o->stop_ids)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_generator_options: n_stop_ids without stop_ids");
    g->stop = tdm_calloc(g->a, g->n_eos + n_user + 1, sizeof *g->stop);
    if (!g->stop) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a generator");
    g->ignore_eos = o && o->ignore_eos;
    if (!g->ignore_eos)
        for (size_t i = 0; i < g->n_eos; i++) g->stop[g->n_stop++] = g->eos[i];
    for (size_t i = 0; i < n_user; i++) g->stop[g->n_stop++] = o->stop_ids[i];
    return NULL;
}

tdm_status *tdm_generator_create(tdm_env *env, const char *dir, const tdm_generator_options *o,
                                 tdm_generator **out) {
    if (!env || !dir || !out)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_generator_create: NULL argument");
    tdm_generator_options opt;
    memset(&opt, 0, sizeof opt);
    if (o) {
        if (o->struct_size < sizeof o->struct_size)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_generator_options.struct_size is %zu; "
                           "set it to sizeof(tdm_generator_options)", o->struct_size);
        memcpy(&opt, o, o->struct_size < sizeof opt ? o->struct_size : sizeof opt);
    }
    if (opt.max_length < 0)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "max_length is %d; it must be >= 0", opt.max_length);
    if (!isfinite(opt.presence_penalty) || !isfinite(opt.frequency_penalty))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "a presence or frequency penalty is not finite");
    /* kv_type: TDM_UNDEFINED = the model's */
    tdm_dtype kv_want = TDM_UNDEFINED;
    TDM_TRY(tdm_llm_parse_kv_type(opt.kv_type, &kv_want));
    /* another device: the decoder's nodes placed on it (those it lacks on the CPU); each
     * layer's KV cache on the device or in host memory as the plan's budget places it (the
     * budget holds weights, activations and the caches kept there) */
    const char *dev = opt.device && strcmp(opt.device, "cpu") != 0 ? opt.device : NULL;
    bool kv_quant = kv_want == TDM_INT8 || kv_want == TDM_UINT8; /* tandem's own caches */
    if (dev && kv_quant)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "kv_type %s runs on the CPU only (device '%s')",
                       opt.kv_type, dev);
    if (dev && (strlen(dev) > 48 || strchr(dev, ',') || strchr(dev, '=')))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "generator device '%s': give one device name", dev);
    const tdm_allocator *a = tdm_env_allocator(env);
    tdm_generator *g = tdm_calloc(a, 1, sizeof *g);
    if (!g) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a generator");
    g->env = env;
    g->a = a;
    g->sampling = opt.sampling;
    g->presence = opt.presence_penalty, g->frequency = opt.frequency_penalty;
    g->dynamic_mask = opt.dynamic_mask;
    atomic_init(&g->cancelled, 0);
    tdm_status *st = tdm_llm_folder_read(dir, &g->f);
    char budget_text[64] = "";
    last_edit e = {g->f.logits, false, !opt.all_logits, &g->f, 0, 0, 0, budget_text, sizeof budget_text,
                   kv_want == TDM_INT8 ? 8 : kv_want == TDM_UINT8 ? 4 : 0, 0};
    char dev_budget[128] = "", devices[64] = "";
    if (dev) snprintf(devices, sizeof devices, "%s,cpu", dev);
    if (!st && dev && opt.device_memory && opt.device_memory[0]) {
        /* "DEV=SIZE" or "DEV=P%" (or a bare SIZE / P%): the session reads it as it is */
        const char *size = opt.device_memory;
        size_t dl = strlen(dev);
        if (!strncmp(size, dev, dl) && size[dl] == '=') size += dl + 1;
        tdm_budget_spec spec;
        st = strchr(size, '=') || strchr(size, ',')
                 ? TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "device memory budget '%s': the generator runs "
                           "on '%s'; give %s=SIZE", opt.device_memory,
                           dev, dev)
                 : tdm_size_parse(size, "device memory budget", &spec);
        if (!st) snprintf(dev_budget, sizeof dev_budget, "%s=%s", dev, size);
    } else if (!st && opt.device_memory && opt.device_memory[0]) {
        /* the generator runs on the CPU: "cpu=SIZE" (or a bare SIZE) */
        const char *size = opt.device_memory;
        if (!strncmp(size, "cpu=", 4)) size += 4;
        tdm_budget_spec spec;
        st = strchr(size, '=') || strchr(size, ',')
                 ? TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "device memory budget '%s': the generator runs "
                           "on the CPU; give cpu=SIZE (or --device DEV with DEV=SIZE)",
                           opt.device_memory)
                 : tdm_size_parse(size, "device memory budget for 'cpu'", &spec);
        if (!st && spec.percent > 0)
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "device memory budget '%s': the generator needs a "
                         "size in bytes (its KV cache counts too), not a share of the weights",
                         opt.device_memory);
        e.budget = st ? 0 : spec.bytes;
    }
    if (!st) {
        g->max_length = opt.max_length > 0 ? opt.max_length : g->f.max_length > 0 ? g->f.max_length : 2048;
        if (g->f.max_length > 0 && g->max_length > g->f.max_length) g->max_length = g->f.max_length;
        e.max_length = g->max_length;
        tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = dev ? devices : "cpu",
                                  .threads = opt.threads, .opt_level = 1,
                                  .mode = TDM_MODE_LATENCY};
        so.placement = dev;
        so.device_memory = dev_budget[0] ? dev_budget
                           : e.budget > 0 ? budget_text : NULL; /* set by the edit (kv_budget) */
        so.residency = opt.residency;
        so.profile = opt.profile;
        st = tdm_session_create_edited(env, g->f.model_path, &so,
                                       last_logits_only, &e,
                                       &g->s);
        if (st && e.kv_bytes > 0 && e.kv_bytes < e.budget && tdm_status_code(st) == TDM_ERR_LIMIT)
            st = tdm_status_wrap(st, "the budget less the KV cache (%.1f MiB for max_length %d): ",
                                 (double)e.kv_bytes / 1048576, g->max_length);
        g->last_only = e.applied;
        g->kv_budget_bytes = e.kv_bytes;
    }
    g->on_device = dev != NULL;
    g->kv4_head_dim = e.kv_bits == 4 ? e.kv_head_dim : 0;
    if (!st) st = describe(g);
    if (!st && kv_want != TDM_UNDEFINED && kv_want != g->kv_dtype)
        st = TDM_ERR(TDM_ERR_UNSUPPORTED, "kv_type %s: the model's KV cache is %s (a float16 cache "
                     "comes from the converter: tools/gguf_to_onnx.py --kv-dtype float16; int8 "
                     "and int4 from a float32 one)", opt.kv_type, tdm_dtype_name(g->kv_dtype));
    if (!st && kv_quant && !g->shared)
        st = TDM_ERR(TDM_ERR_UNSUPPORTED, "kv_type %s needs GroupQueryAttention with the shared "
                     "past/present buffer (a GenAI folder, past_present_share_buffer)", opt.kv_type);
    if (!st) st = alloc_state(g);
    if (!st) st = set_stops(g, &opt);
    if (st) {
        tdm_generator_free(g);
        return tdm_status_wrap(st, "model folder '%s': ", dir);
    }
    *out = g;
    return NULL;
}

void tdm_generator_free(tdm_generator *g) {
    if (!g) return;
    for (int b = 0; b < 2; b++) tdm_io_binding_free(g->bind[b]);
    tdm_plan *plan = g->s && g->s->strategy ? g->s->strategy->plan : NULL;
    for (int i = 0; g->cache && i < g->n_layers * 2; i++) {
        if (g->kv_place && g->kv_place[i / 2] == TDM_KV_DEVICE) tdm_plan_state_free(plan, g->cache[i]);
        else tdm_tensor_free(g->cache[i]);
    }
    for (int i = 0; g->empty && i < g->n_layers * 2; i++) tdm_tensor_free(g->empty[i]);
    if (g->kv_mapped) tdm_unmap_huge(g->kv_arena, g->kv_mapped);
    else tdm_free(g->a, g->kv_arena);
    tdm_tensor_free(g->logits1);
    tdm_session_free(g->s);
    if (g->smp_ready) tdm_sampler_free(&g->smp);
    tdm_free(g->a, g->cache);
    tdm_free(g->a, g->empty);
    tdm_free(g->a, g->names);
    tdm_free(g->a, g->kv_place);
    tdm_free(g->a, g->ids_buf);
    tdm_free(g->a, g->mask_buf);
    tdm_free(g->a, g->pos_buf);
    tdm_free(g->a, g->tokens);
    tdm_free(g->a, g->gen);
    tdm_free(g->a, g->stop);
    tdm_free(g->a, g->logits);
    tdm_free(g->a, g);
}

/* ---- running ---- */

/* The vocabulary is known (from the first run's logits when the model left it dynamic). */
static tdm_status *vocab_ready(tdm_generator *g, size_t vocab) {
    if (g->smp_ready) {
        if (vocab != g->vocab)
            return TDM_ERR(TDM_ERR_RUNTIME, "the logits changed size (%zu, was %zu)", vocab, g->vocab);
        return NULL;
    }
    g->vocab = vocab;
    g->logits = tdm_calloc(g->a, vocab, sizeof *g->logits);
    if (!g->logits) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for the logits");
    if (!g->logits1) {
        int64_t ld[3] = {1, 1, (int64_t)vocab};
        TDM_TRY(tdm_tensor_create(g->env, TDM_FLOAT, 3, ld, &g->logits1));
    }
    TDM_TRY(tdm_sampler_init(&g->smp, g->a, vocab, &g->sampling));
    g->smp_ready = true;
    TDM_TRY(tdm_sampler_set_penalties(&g->smp, g->presence, g->frequency));
    tdm_sampler_set_exp_row(&g->smp, tdm_sampler_exp_row_for(tdm_env_device_isa(g->env, 0)));
    tdm_sampler_set_max_row(&g->smp, tdm_sampler_max_row_for(tdm_env_device_isa(g->env, 0)));
    tdm_sampler_set_near_row(&g->smp, tdm_sampler_near_row_for(tdm_env_device_isa(g->env, 0)));
    return NULL;
}

/* One run feeding tokens[n_cached .. n_tokens). */
static tdm_status *feed(tdm_generator *g) {
    size_t n = g->n_tokens - g->n_cached;
    if (n == 0) return NULL;
    bool fed_back = g->any_fed_back;
    tdm_io_binding *b = !fed_back ? g->bind[0] : g->bind[g->step & 1];
    tdm_io_binding *prev = g->bind[(g->step & 1) ^ 1];
    tdm_llm_set_view(&g->ids_t, g->ids_dtype, g->ids_buf, g->n_cached, n);
    for (size_t i = g->n_cached; i < g->n_tokens; i++)
        tdm_llm_put_index(g->mask_buf, g->mask_dtype, i, 1);
    tdm_llm_set_view(&g->mask_t, g->mask_dtype, g->mask_buf, 0,
             g->shared && !g->dynamic_mask ? (size_t)g->max_length : g->n_tokens);
    tdm_llm_set_view(&g->pos_t, g->pos_dtype, g->pos_buf, g->n_cached, n);
    size_t rows = g->last_only ? 1 : n; /* of the logits */
    TDM_TRY(tdm_io_binding_bind_output(b, g->f.logits, rows == 1 && !g->on_device ? g->logits1 : NULL));
    if (fed_back)
        for (int l = 0; l < g->n_layers; l++)
            for (int k = 0; k < 2 && (!g->shared || g->kv_place[l] == TDM_KV_HOST); k++) {
                const tdm_tensor *past = g->n_cached == 0 ? (g->shared ? g->cache[l * 2 + k]
                                                                       : g->empty[l * 2 + k])
                                                          : tdm_io_binding_output(prev, g->names[l][OK + k]);
                if (!past)
                    return TDM_ERR(TDM_ERR_INTERNAL, "the cache of '%s' is missing", g->names[l][PK + k]);
                TDM_TRY(tdm_io_binding_bind_input(b, g->names[l][PK + k], past));
            }
    tdm_status *st = tdm_session_run_bound(g->s, b, NULL);
    g->have_logits = false;
    if (st) {
        /* the cache may hold part of this run: start again from an empty one */
        g->n_cached = 0;
        memset(g->mask_buf, 0, (size_t)g->max_length * tdm_dtype_size(g->mask_dtype));
        return st;
    }
    g->step++;
    g->n_cached = g->n_tokens;
    const tdm_tensor *lg = tdm_io_binding_output(b, g->f.logits);
    if (!lg || lg->dtype != TDM_FLOAT || lg->rank != 3 || lg->dims[0] != 1 ||
        lg->dims[1] != (int64_t)rows || lg->dims[2] <= 0)
        return TDM_ERR(TDM_ERR_RUNTIME, "output '%s' is not float32 [1, %zu, vocab]", g->f.logits,
                       rows);
    TDM_TRY(vocab_ready(g, (size_t)lg->dims[2]));
    float *row = (float *)lg->data + (rows - 1) * g->vocab;
    if (lg == g->logits1) { /* bound: the next run writes it again */
        g->cur_logits = row;
    } else {
        memcpy(g->logits, row, g->vocab * sizeof *g->logits);
        g->cur_logits = g->logits;
    }
    g->have_logits = true;
    return NULL;
}

static tdm_status *check_cancel(tdm_generator *g) {
    if (atomic_load(&g->cancelled)) {
        g->done = true;
        return TDM_ERR(TDM_ERR_CANCELLED, "generation was cancelled");
    }
    return NULL;
}

tdm_status *tdm_generator_append(tdm_generator *g, const int32_t *ids, size_t n) {
    if (!g || (n && !ids)) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_generator_append: NULL argument");
    TDM_TRY(check_cancel(g));
    if (n > (size_t)g->max_length - g->n_tokens)
        return TDM_ERR(TDM_ERR_LIMIT, "%zu tokens do not fit: %zu of max_length %d are used", n,
                       g->n_tokens, g->max_length);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (g->vocab && (size_t)ids[i] >= g->vocab))
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "token %zu is %d, outside the vocabulary (%zu)",
                           i, ids[i], g->vocab);
    if (n == 0) return NULL;
    int64_t t0 = tdm_now_ns();
    if (!g->t_first_append) g->t_first_append = t0;
    for (size_t i = 0; i < n; i++) {
        g->tokens[g->n_tokens + i] = ids[i];
        tdm_llm_put_index(g->ids_buf, g->ids_dtype, g->n_tokens + i, ids[i]);
    }
    size_t before = g->n_tokens;
    g->n_tokens += n;
    tdm_status *st = feed(g);
    if (st) {
        g->n_tokens = before;
        if (g->n_cached > before) g->n_cached = before;
        return st;
    }
    g->done = false;
    g->stats.prompt_tokens += (int64_t)n;
    g->stats.prefill_ms += (double)(tdm_now_ns() - t0) / 1e6;
    return check_cancel(g);
}

bool tdm_generator_is_stop_token(const tdm_generator *g, int32_t token) {
    if (!g) return false;
    for (size_t i = 0; i < g->n_stop; i++)
        if (g->stop[i] == token) return true;
    return false;
}

/* feed() for the decode path (next, logits): counted in the decode figures. */
static tdm_status *feed_decode(tdm_generator *g) {
    size_t n = g->n_tokens - g->n_cached;
    if (n == 0) return NULL;
    int64_t t0 = tdm_now_ns();
    TDM_TRY(feed(g));
    g->stats.decode_tokens += (int64_t)n;
    g->stats.decode_ms += (double)(tdm_now_ns() - t0) / 1e6;
    return NULL;
}

tdm_status *tdm_generator_next(tdm_generator *g, int32_t *token) {
    if (!g || !token) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_generator_next: NULL argument");
    TDM_TRY(check_cancel(g));
    if (g->n_tokens == 0)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_generator_next: append the prompt first");
    if (g->done || g->n_tokens >= (size_t)g->max_length) {
        g->done = true;
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_generator_next: generation is done (a stop "
                       "token or max_length %d)", g->max_length);
    }
    TDM_TRY(feed_decode(g));
    TDM_TRY(check_cancel(g));
    int64_t t0 = tdm_now_ns();
    if (!g->have_logits) return TDM_ERR(TDM_ERR_INTERNAL, "no logits to sample from");
    if (g->ignore_eos)
        for (size_t i = 0; i < g->n_eos; i++)
            if (g->eos[i] >= 0 && (size_t)g->eos[i] < g->vocab) g->cur_logits[g->eos[i]] = -INFINITY;
    int32_t t = tdm_sampler_pick(&g->smp, g->cur_logits, g->tokens, g->n_tokens, g->gen, g->n_gen);
    g->gen[g->n_gen++] = t;
    g->tokens[g->n_tokens] = t;
    tdm_llm_put_index(g->ids_buf, g->ids_dtype, g->n_tokens, t);
    g->n_tokens++;
    if (tdm_generator_is_stop_token(g, t) || g->n_tokens >= (size_t)g->max_length) g->done = true;
    int64_t t1 = tdm_now_ns();
    g->stats.decode_ms += (double)(t1 - t0) / 1e6; /* sampling */
    if (!g->first_token_seen) {
        g->first_token_seen = true;
        g->stats.ttft_ms = (double)(t1 - g->t_first_append) / 1e6;
    }
    *token = t;
    return NULL;
}

tdm_status *tdm_generator_generate(tdm_generator *g, size_t max_new, tdm_token_fn on_token,
                                   void *user) {
    if (!g) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_generator_generate: NULL generator");
    for (size_t i = 0; (max_new == 0 || i < max_new) && !tdm_generator_is_done(g); i++) {
        int32_t t;
        TDM_TRY(tdm_generator_next(g, &t));
        if (tdm_generator_is_stop_token(g, t)) break;
        if (on_token && !on_token(user, t)) break;
    }
    return check_cancel(g);
}

tdm_status *tdm_generator_logits(tdm_generator *g, const float **logits, size_t *vocab) {
    if (!g || !logits || !vocab)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_generator_logits: NULL argument");
    if (g->n_tokens == 0)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_generator_logits: append tokens first");
    if (g->n_cached < g->n_tokens) {
        if (g->n_tokens > (size_t)g->max_length)
            return TDM_ERR(TDM_ERR_LIMIT, "the sequence is at max_length");
        TDM_TRY(feed_decode(g));
    }
    if (!g->have_logits) return TDM_ERR(TDM_ERR_INTERNAL, "no logits");
    *logits = g->cur_logits;
    *vocab = g->vocab;
    return NULL;
}

bool tdm_generator_is_done(const tdm_generator *g) {
    return !g || g->done || atomic_load(&((tdm_generator *)g)->cancelled) ||
           g->n_tokens >= (size_t)g->max_length;
}

void tdm_generator_reset(tdm_generator *g) {
    if (!g) return;
    g->n_tokens = g->n_cached = g->n_gen = 0;
    memset(g->mask_buf, 0, (size_t)g->max_length * tdm_dtype_size(g->mask_dtype));
    g->done = false;
    g->have_logits = false;
    atomic_store(&g->cancelled, 0);
    memset(&g->stats, 0, sizeof g->stats);
    g->t_first_append = 0;
    g->first_token_seen = false;
    if (g->smp_ready) tdm_sampler_reseed(&g->smp);
}

void tdm_generator_cancel(tdm_generator *g) {
    if (g) atomic_store(&g->cancelled, 1);
}

void tdm_generator_set_sampling(tdm_generator *g, const tdm_sampling *s) {
    if (!g || !s) return;
    g->sampling = *s;
    if (g->smp_ready) {
        uint64_t rng[4];
        memcpy(rng, g->smp.rng, sizeof rng);
        g->smp.cfg = *s;
        memcpy(g->smp.rng, rng, sizeof rng); /* the random numbers continue */
    }
}

const int32_t *tdm_generator_tokens(const tdm_generator *g, size_t *n) {
    if (n) *n = g ? g->n_tokens : 0;
    return g ? g->tokens : NULL;
}

size_t tdm_generator_vocab_size(const tdm_generator *g) { return g ? g->vocab : 0; }

int tdm_generator_max_length(const tdm_generator *g) { return g ? g->max_length : 0; }

const int32_t *tdm_generator_eos_ids(const tdm_generator *g, size_t *n) {
    if (n) *n = g ? g->n_eos : 0;
    return g ? g->eos : NULL;
}

const char *tdm_generator_form(const tdm_generator *g) {
    return !g ? NULL : g->shared ? "genai" : "optimum";
}

const char *tdm_generator_kv_type(const tdm_generator *g) {
    return !g                          ? NULL
           : g->kv_dtype == TDM_INT8    ? "int8"
           : g->kv_dtype == TDM_UINT8   ? "int4"
           : g->kv_dtype == TDM_FLOAT16 ? "f16"
                                         : "f32";
}

tdm_session *tdm_generator_session(tdm_generator *g) { return g ? g->s : NULL; }

/* Whether input k of n is a table that a decode step reads one row of (per token): the
 * embedding (Gather, GatherBlockQuantized on axis 0) and the rotary cos / sin caches. */
static bool row_table(const tdm_node *n, int k) {
    bool ms = !strcmp(n->domain, "com.microsoft"), onnx = !n->domain[0];
    if (!strcmp(n->op_type, "Gather") && onnx) return k == 0 && tdm_attr_int(n, "axis", 0) == 0;
    if (!strcmp(n->op_type, "GatherBlockQuantized") && ms)
        return (k == 0 || k == 2 || k == 3) && tdm_attr_int(n, "gather_axis", 0) == 0;
    if (!strcmp(n->op_type, "GroupQueryAttention") && ms) return k == 7 || k == 8;
    if (!strcmp(n->op_type, "RotaryEmbedding")) return ms ? k == 2 || k == 3 : k == 1 || k == 2;
    return false;
}

int64_t tdm_generator_weight_bytes_per_token(const tdm_generator *g) {
    const tdm_graph *gr = g && g->s ? tdm_session_graph(g->s) : NULL;
    if (!gr) return 0;
    int64_t *read = tdm_calloc(g->a, gr->n_values + 1, sizeof *read);
    if (!read) return -1;
    for (size_t i = 0; i < gr->n_nodes; i++) {
        const tdm_node *n = &gr->nodes[i];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            const tdm_tensor *t = v >= 0 ? gr->values[v].data : NULL;
            if (!t) continue; /* (held on a device too: that device reads it each step) */
            int64_t b = (int64_t)t->nbytes;
            if (row_table(n, k) && t->rank >= 1 && t->dims[0] > 0) b /= t->dims[0];
            if (b > read[v]) read[v] = b;
        }
    }
    int64_t sum = 0;
    for (size_t v = 0; v < gr->n_values; v++) sum += read[v];
    tdm_free(g->a, read);
    return sum;
}

int64_t tdm_generator_kv_bytes_per_position(const tdm_generator *g) {
    if (!g) return 0;
    return (int64_t)g->n_layers * 2 * g->kv_heads * kv_row(g->kv_dtype, g->head_dim) *
           (int64_t)tdm_dtype_size(g->kv_dtype);
}

void tdm_generator_get_stats(const tdm_generator *g, tdm_generator_stats *out) {
    if (!out) return;
    if (!g) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = g->stats;
}
