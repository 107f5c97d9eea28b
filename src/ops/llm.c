/* Operator schemas: llm family — the attention, rotary and RMS-normalisation operators of
 * decoder-only language models:
 *   com.microsoft GroupQueryAttention, PagedAttention, RotaryEmbedding, SkipSimplifiedLayerNormalization,
 *   SimplifiedLayerNormalization (ONNX Runtime registers it in the default domain; accepted
 *   in com.microsoft too), and ONNX opset 23 Attention, RotaryEmbedding, RMSNormalization.
 * Semantics follow ONNX Runtime's contrib operator documentation and the ONNX operator
 * specification; the CPU kernels are src/backends/cpu/k_llm_*.c. Inputs and attributes the
 * kernels do not implement are refused here, at load time, naming what is missing. */
#include <string.h>

#include "ops/kv_int8.h"
#include "ops/op.h"

static void set_dims(tdm_value_info *v, tdm_dtype dt, int rank) {
    v->dtype = dt;
    v->rank = rank;
    for (int i = 0; i < rank; i++) v->dims[i] = TDM_DIM_UNKNOWN;
}

static bool has_in(const tdm_infer_ctx *c, int i) { return i < c->n_in && c->in[i].present; }

static tdm_status *need_float(const tdm_infer_ctx *c, int i, const char *what) {
    if (has_in(c, i) && c->in[i].dtype != TDM_UNDEFINED && c->in[i].dtype != TDM_FLOAT)
        return tdm_node_error(c->node, TDM_ERR_UNSUPPORTED, "%s has type %s; only float32 is implemented",
                              what, tdm_dtype_name(c->in[i].dtype));
    return NULL;
}

/* input i has type t (or an unknown type) */
static tdm_status *need_type(const tdm_infer_ctx *c, int i, const char *what, tdm_dtype t) {
    if (has_in(c, i) && c->in[i].dtype != TDM_UNDEFINED && c->in[i].dtype != t)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%s has type %s; expected %s like query",
                              what, tdm_dtype_name(c->in[i].dtype), tdm_dtype_name(t));
    return NULL;
}

static tdm_status *need_rank(const tdm_infer_ctx *c, int i, const char *what, int rank) {
    if (has_in(c, i) && c->in[i].rank >= 0 && c->in[i].rank != rank)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "%s must have rank %d, has %d",
                              what, rank, c->in[i].rank);
    return NULL;
}

/* ---- GroupQueryAttention ---- */

/* Inputs the CPU kernel does not implement, by index. */
static const struct {
    int index;
    const char *name;
} gqa_refused[] = {
    {9, "position_ids"}, {12, "k_scale"}, {13, "v_scale"},
    {14, "q_norm_weight"}, {15, "k_norm_weight"}, {16, "query_seqlens"},
};

static tdm_status *infer_gqa(tdm_infer_ctx *c) {
    const tdm_node *n = c->node;
    int64_t h = tdm_attr_int(n, "num_heads", 0), kvh = tdm_attr_int(n, "kv_num_heads", 0);
    if (h <= 0 || kvh <= 0 || h % kvh != 0)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "num_heads (%lld) and kv_num_heads (%lld) must be positive and "
                              "num_heads a multiple of kv_num_heads",
                              (long long)h, (long long)kvh);
    for (size_t i = 0; i < sizeof gqa_refused / sizeof gqa_refused[0]; i++)
        if (has_in(c, gqa_refused[i].index))
            return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "input %s is not implemented",
                                  gqa_refused[i].name);
    if (c->n_out > 3 && c->out[3].present)
        return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "output output_qk is not implemented");
    static const char *const zero_attrs[] = {"qk_output", "sliding_window_cache",
                                             "kv_cache_bit_width"};
    for (size_t i = 0; i < sizeof zero_attrs / sizeof zero_attrs[0]; i++)
        if (tdm_attr_int(n, zero_attrs[i], 0) != 0)
            return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "attribute %s=%lld is not implemented",
                                  zero_attrs[i], (long long)tdm_attr_int(n, zero_attrs[i], 0));
    static const char *const quant[] = {"k_quant_type", "v_quant_type"};
    for (int i = 0; i < 2; i++) {
        const char *q = tdm_attr_string(n, quant[i], "NONE");
        if (strcmp(q, "NONE") != 0)
            return tdm_node_error(n, TDM_ERR_UNSUPPORTED,
                                  "attribute %s='%s': quantized KV caches are not implemented",
                                  quant[i], q);
    }
    int64_t causal = tdm_attr_int(n, "causal", 1), win = tdm_attr_int(n, "local_window_size", -1);
    if (causal != 0 && causal != 1)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "causal must be 0 or 1");
    if (!causal && win != -1)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "local_window_size must be -1 when causal is 0");
    if (win == 0 || win < -1)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "local_window_size must be -1 (none) or positive, got %lld",
                              (long long)win);
    if (tdm_attr_float(n, "softcap", 0.0f) < 0.0f)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "softcap must not be negative");
    /* min_inputs is 1 because key and value may be omitted (packed QKV) */
    if (!has_in(c, 5) || !has_in(c, 6))
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL,
                              "inputs seqlens_k (5) and total_sequence_length (6) are required");
    bool packed = !has_in(c, 1);
    if (packed != !has_in(c, 2))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "key and value must both be given, or both omitted (packed QKV)");
    if (has_in(c, 3) != has_in(c, 4))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "past_key and past_value must both be given or both omitted");
    bool rotary = tdm_attr_int(n, "do_rotary", 0) != 0;
    if (rotary && (!has_in(c, 7) || !has_in(c, 8)))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "do_rotary=1 needs cos_cache and sin_cache");
    static const char *const names[] = {"query", "key", "value", "past_key", "past_value",
                                        "seqlens_k", "total_sequence_length", "cos_cache",
                                        "sin_cache", "position_ids", "attention_bias", "head_sink"};
    static const int ranks[] = {3, 3, 3, 4, 4, 1, -1, 2, 2, -1, 4, 1};
    for (int i = 0; i < 12; i++)
        if (ranks[i] >= 0) TDM_TRY(need_rank(c, i, names[i], ranks[i]));
    /* T: float32, or float16 (a half-precision KV cache; the kernel refuses attention_bias
     * and head_sink there) */
    tdm_dtype T = c->in[0].dtype == TDM_FLOAT16 ? TDM_FLOAT16 : TDM_FLOAT;
    /* tandem's 8-bit KV cache (the generator's kv_type "int8", k_llm_gqa_i8.c): T float32,
     * past / present int8 [B, kv_num_heads, length, TDM_KV_I8_ROW(head_size)] (each row's
     * codes, then their scales: ops/kv_int8.h) */
    bool i8 = T == TDM_FLOAT && has_in(c, 3) && c->in[3].dtype == TDM_INT8;
    /* ... and the 4-bit one (kv_type "int4"): past / present uint8 [B, kv_num_heads, length,
     * TDM_KV_I4_ROW(head_size)] */
    bool q4 = T == TDM_FLOAT && has_in(c, 3) && c->in[3].dtype == TDM_UINT8;
    for (int i = 0; i < 12; i++) {
        if ((i8 || q4) && (i == 3 || i == 4)) {
            TDM_TRY(need_type(c, i, names[i], q4 ? TDM_UINT8 : TDM_INT8));
        } else if (i == 5 || i == 6) {
            if (has_in(c, i) && c->in[i].dtype != TDM_UNDEFINED && c->in[i].dtype != TDM_INT32)
                return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "%s must be int32", names[i]);
        } else if (T == TDM_FLOAT16) {
            TDM_TRY(need_type(c, i, names[i], T));
        } else {
            TDM_TRY(need_float(c, i, names[i]));
        }
    }
    if (has_in(c, 6) && c->in[6].rank > 1)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "total_sequence_length must be a scalar");
    const tdm_value_info *q = &c->in[0];
    tdm_value_info *y = &c->out[0];
    set_dims(y, T, 3);
    int64_t d = TDM_DIM_UNKNOWN;
    if (q->rank == 3) {
        y->dims[0] = q->dims[0];
        y->dims[1] = q->dims[1];
        int64_t parts = packed ? h + 2 * kvh : h;
        if (q->dims[2] >= 0) {
            if (q->dims[2] % parts != 0)
                return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                                      "query's last dim %lld is not a multiple of %lld heads",
                                      (long long)q->dims[2], (long long)parts);
            d = q->dims[2] / parts;
            y->dims[2] = h * d;
        }
    }
    if (!packed && d >= 0) {
        for (int i = 1; i <= 2; i++) {
            const tdm_value_info *kv = &c->in[i];
            if (kv->rank == 3 && kv->dims[2] >= 0 && kv->dims[2] != kvh * d)
                return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                                      "%s's last dim is %lld, kv_num_heads * head_size is %lld",
                                      names[i], (long long)kv->dims[2], (long long)(kvh * d));
        }
    }
    if (d >= 0 && (d % 2 != 0 && rotary))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "rotary needs an even head size");
    if (has_in(c, 3) && c->in[3].rank == 4 && c->in[3].dims[1] >= 0 && c->in[3].dims[1] != kvh)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "past_key has %lld heads, kv_num_heads is %lld",
                              (long long)c->in[3].dims[1], (long long)kvh);
    int64_t row = d < 0 ? d : q4 ? TDM_KV_I4_ROW(d) : i8 ? TDM_KV_I8_ROW(d) : d; /* the cache's last dim */
    if (has_in(c, 3) && c->in[3].rank == 4 && c->in[3].dims[3] >= 0 && d >= 0 &&
        c->in[3].dims[3] != row)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "past_key's last dim %lld is not %lld",
                              (long long)c->in[3].dims[3], (long long)row);
    if (rotary && has_in(c, 7) && c->in[7].rank == 2 && c->in[7].dims[1] >= 0 && d >= 0 &&
        (2 * c->in[7].dims[1] > d))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "cos_cache's second dim %lld exceeds head_size / 2 (%lld)",
                              (long long)c->in[7].dims[1], (long long)(d / 2));
    /* present: [B, kv_num_heads, max(past length, total_sequence_length), head size] */
    int64_t total = TDM_DIM_UNKNOWN;
    if (has_in(c, 6) && c->in[6].data) {
        const tdm_tensor *t = c->in[6].data;
        if (t->count != 1 || t->dtype != TDM_INT32)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                                  "total_sequence_length must be one int32");
        total = tdm_tensor_get_i64(t, 0);
        if (total < 1)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                                  "total_sequence_length must be positive, got %lld", (long long)total);
    }
    int64_t past = has_in(c, 3) && c->in[3].rank == 4 ? c->in[3].dims[2] : (has_in(c, 3) ? -1 : 0);
    for (int o = 1; o <= 2 && o < c->n_out; o++) {
        if (!c->out[o].present) continue;
        set_dims(&c->out[o], q4 ? TDM_UINT8 : i8 ? TDM_INT8 : T, 4);
        c->out[o].dims[0] = q->rank == 3 ? q->dims[0] : TDM_DIM_UNKNOWN;
        c->out[o].dims[1] = kvh;
        c->out[o].dims[3] = row;
        if (total >= 0 && past >= 0) c->out[o].dims[2] = past > total ? past : total;
    }
    return NULL;
}

/* ---- PagedAttention ----
 * ONNX Runtime's contrib operator (docs/ContribOperators.md, com.microsoft.PagedAttention):
 * packed tokens of several sequences over a block-based KV cache. tandem differs from the
 * spec in these points (the kernel is src/backends/cpu/k_llm_paged.c):
 *   - T is float32 and the caches float32 or float16 (ONNX Runtime declares T float16 /
 *     bfloat16 only, CUDA, and T_CACHE float16 / bfloat16 / 8-bit); with the BHSD layout
 *     below the caches may also hold tandem's own 8-bit (int8) or 4-bit (uint8) rows, the
 *     generator's kv_type int8 / int4 formats (ops/kv_int8.h): [num_blocks, kv_num_heads,
 *     block_size, TDM_KV_I8_ROW(head_size) or TDM_KV_I4_ROW(head_size)] (ONNX Runtime's own
 *     quantised caches, below, stay refused);
 *   - query / key / value may also be rank 3 [1, num_tokens, hidden] (the output then has
 *     the query's rank), and the caches rank 3 [num_blocks, block_size, kv_num_heads *
 *     head_size] (the same memory as the spec's rank 4 [.., kv_num_heads, head_size]);
 *   - attention_metadata is accepted and ignored (a hint); slot_mapping, q/k norm weights,
 *     quantized caches (k_scale, v_scale, *_quant_type, *_cache_dtype), the LATENT layout,
 *     v_head_size and rotary_offset are refused here at load time (TDM_ERR_UNSUPPORTED);
 *   - local_window_size needs is_causal=1;
 *   - the tandem attribute tandem_kv_layout: "BSHD" (the default, the spec's caches
 *     [num_blocks, block_size, kv_num_heads, head_size]) or "BHSD" (caches [num_blocks,
 *     kv_num_heads, block_size, head_size]: each head's rows of a block together, faster to
 *     read; for runtimes that own the cache, such as tandem's LLM engine). */

static const struct {
    int index;
    const char *name;
} paged_refused[] = {
    {10, "slot_mapping"}, {12, "q_norm_weight"}, {13, "k_norm_weight"},
    {14, "k_scale"},      {15, "v_scale"},
};

static tdm_status *infer_paged(tdm_infer_ctx *c) {
    const tdm_node *n = c->node;
    int64_t h = tdm_attr_int(n, "num_heads", 0), kvh = tdm_attr_int(n, "kv_num_heads", 0);
    if (h <= 0 || kvh <= 0 || h % kvh != 0)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "num_heads (%lld) and kv_num_heads (%lld) must be positive and "
                              "num_heads a multiple of kv_num_heads",
                              (long long)h, (long long)kvh);
    for (size_t i = 0; i < sizeof paged_refused / sizeof paged_refused[0]; i++)
        if (has_in(c, paged_refused[i].index))
            return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "input %s is not implemented",
                                  paged_refused[i].name);
    static const char *const str_attrs[][2] = {
        {"kv_cache_layout", "SEPARATE"}, {"k_quant_type", "NONE"}, {"v_quant_type", "NONE"},
        {"k_cache_dtype", ""},           {"v_cache_dtype", ""}};
    for (size_t i = 0; i < sizeof str_attrs / sizeof str_attrs[0]; i++) {
        const char *v = tdm_attr_string(n, str_attrs[i][0], str_attrs[i][1]);
        if (strcmp(v, str_attrs[i][1]) != 0)
            return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "attribute %s='%s' is not implemented",
                                  str_attrs[i][0], v);
    }
    const char *layout = tdm_attr_string(n, "tandem_kv_layout", "BSHD");
    bool bhsd = strcmp(layout, "BHSD") == 0;
    if (!bhsd && strcmp(layout, "BSHD") != 0)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "attribute tandem_kv_layout='%s': expected BSHD or BHSD", layout);
    static const char *const zero_attrs[] = {"v_head_size", "rotary_offset"};
    for (size_t i = 0; i < sizeof zero_attrs / sizeof zero_attrs[0]; i++)
        if (tdm_attr_int(n, zero_attrs[i], 0) != 0)
            return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "attribute %s=%lld is not implemented",
                                  zero_attrs[i], (long long)tdm_attr_int(n, zero_attrs[i], 0));
    int64_t causal = tdm_attr_int(n, "is_causal", 1), win = tdm_attr_int(n, "local_window_size", -1);
    if (causal != 0 && causal != 1)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "is_causal must be 0 or 1");
    if (win == 0 || win < -1)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "local_window_size must be -1 (none) or positive, got %lld",
                              (long long)win);
    if (!causal && win != -1)
        return tdm_node_error(n, TDM_ERR_UNSUPPORTED,
                              "local_window_size with is_causal=0 is not implemented");
    if (tdm_attr_float(n, "softcap", 0.0f) < 0.0f)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "softcap must not be negative");
    static const char *const names[] = {"query", "key", "value", "key_cache", "value_cache",
                                        "cumulative_sequence_length", "past_seqlens",
                                        "block_table", "cos_cache", "sin_cache", "slot_mapping",
                                        "head_sink"};
    /* min_inputs is 1 because key and value may be omitted (packed QKV) */
    static const int required[] = {3, 4, 5, 6, 7};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!has_in(c, required[i]))
            return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "input %s (%d) is required",
                                  names[required[i]], required[i]);
    bool packed = !has_in(c, 1);
    if (packed != !has_in(c, 2))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "key and value must both be given, or both omitted (packed QKV)");
    bool rotary = tdm_attr_int(n, "do_rotary", 0) != 0;
    if (rotary && (!has_in(c, 8) || !has_in(c, 9)))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "do_rotary=1 needs cos_cache and sin_cache");
    for (int i = 0; i < 12 && i < c->n_in; i++) {
        if (i >= 5 && i <= 7) {
            if (has_in(c, i) && c->in[i].dtype != TDM_UNDEFINED && c->in[i].dtype != TDM_INT32)
                return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "%s must be int32", names[i]);
        } else if (i == 3 || i == 4) { /* T_CACHE: float32, float16; BHSD also tandem's 8- and 4-bit rows */
            tdm_dtype ct = has_in(c, i) ? c->in[i].dtype : TDM_UNDEFINED;
            bool quant = ct == TDM_INT8 || ct == TDM_UINT8;
            if (ct != TDM_UNDEFINED && ct != TDM_FLOAT && ct != TDM_FLOAT16 && !(quant && bhsd))
                return tdm_node_error(n, TDM_ERR_UNSUPPORTED,
                                      quant ? "%s has type %s: tandem's 8-bit (int8) and 4-bit (uint8) "
                                              "cache rows need tandem_kv_layout BHSD"
                                            : "%s has type %s; float32, float16 and (BHSD) tandem's "
                                              "int8 / uint8 rows are implemented",
                                      names[i], tdm_dtype_name(ct));
        } else if (i != 10) {
            TDM_TRY(need_float(c, i, names[i]));
        }
    }
    if (has_in(c, 3) && has_in(c, 4) && c->in[3].dtype != TDM_UNDEFINED &&
        c->in[4].dtype != TDM_UNDEFINED && c->in[3].dtype != c->in[4].dtype)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "key_cache and value_cache types differ");
    const tdm_value_info *q = &c->in[0];
    if (q->rank >= 0 && q->rank != 2 && q->rank != 3)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "query must have rank 2 [num_tokens, hidden] (or 3 [1, num_tokens, hidden])");
    if (q->rank == 3 && q->dims[0] > 1)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "a rank-3 query must be [1, num_tokens, hidden], has batch %lld",
                              (long long)q->dims[0]);
    for (int i = 1; i <= 2 && !packed; i++)
        if (c->in[i].rank >= 0 && q->rank >= 0 && c->in[i].rank != q->rank)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "%s must have query's rank %d",
                                  names[i], q->rank);
    for (int i = 3; i <= 4; i++)
        if (c->in[i].rank >= 0 && (bhsd ? c->in[i].rank != 4 : c->in[i].rank != 3 && c->in[i].rank != 4))
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                                  bhsd ? "%s must be [num_blocks, kv_num_heads, block_size, head_size] "
                                         "(tandem_kv_layout BHSD)"
                                       : "%s must be [num_blocks, block_size, kv_num_heads, head_size] "
                                         "(or rank 3 [num_blocks, block_size, kv_num_heads * head_size])",
                                  names[i]);
    TDM_TRY(need_rank(c, 5, names[5], 1));
    TDM_TRY(need_rank(c, 6, names[6], 1));
    TDM_TRY(need_rank(c, 7, names[7], 2));
    TDM_TRY(need_rank(c, 8, names[8], 2));
    TDM_TRY(need_rank(c, 9, names[9], 2));
    TDM_TRY(need_rank(c, 11, names[11], 1));
    int64_t d = TDM_DIM_UNKNOWN;
    tdm_value_info *y = &c->out[0];
    set_dims(y, TDM_FLOAT, q->rank); /* rank -1 when unknown */
    if (q->rank >= 2) {
        for (int i = 0; i < q->rank - 1; i++) y->dims[i] = q->dims[i];
        int64_t parts = packed ? h + 2 * kvh : h, last = q->dims[q->rank - 1];
        if (last >= 0) {
            if (last % parts != 0)
                return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                                      "query's last dim %lld is not a multiple of %lld heads",
                                      (long long)last, (long long)parts);
            d = last / parts;
            y->dims[q->rank - 1] = h * d;
        }
    }
    if (!packed && d >= 0)
        for (int i = 1; i <= 2; i++) {
            const tdm_value_info *kv = &c->in[i];
            if (kv->rank >= 2 && kv->dims[kv->rank - 1] >= 0 && kv->dims[kv->rank - 1] != kvh * d)
                return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                                      "%s's last dim is %lld, kv_num_heads * head_size is %lld",
                                      names[i], (long long)kv->dims[kv->rank - 1], (long long)(kvh * d));
        }
    if (d >= 0 && d % 2 != 0 && rotary)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "rotary needs an even head size");
    for (int i = 3; i <= 4 && d >= 0; i++) {
        const tdm_value_info *ci = &c->in[i];
        int hd = bhsd ? 1 : 2; /* the kv heads' dim */
        /* a row's last dim: head_size values, or an 8- / 4-bit row's bytes (ops/kv_int8.h) */
        int64_t rd = ci->dtype == TDM_INT8 ? TDM_KV_I8_ROW(d) : ci->dtype == TDM_UINT8 ? TDM_KV_I4_ROW(d) : d;
        bool bad = (ci->rank == 4 && ((ci->dims[hd] >= 0 && ci->dims[hd] != kvh) ||
                                      (ci->dims[3] >= 0 && ci->dims[3] != rd))) ||
                   (ci->rank == 3 && ci->dims[2] >= 0 && ci->dims[2] != kvh * d);
        if (bad)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                                  "%s's rows do not hold kv_num_heads (%lld) x head_size (%lld)%s",
                                  names[i], (long long)kvh, (long long)d,
                                  rd != d ? " as tandem's quantised rows" : "");
    }
    if (rotary && has_in(c, 8) && c->in[8].rank == 2 && c->in[8].dims[1] >= 0 && d >= 0 &&
        2 * c->in[8].dims[1] > d)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "cos_cache's second dim %lld exceeds head_size / 2 (%lld)",
                              (long long)c->in[8].dims[1], (long long)(d / 2));
    /* key_cache_out / value_cache_out alias the caches: their shapes */
    for (int o = 1; o <= 2 && o < c->n_out; o++)
        if (c->out[o].present) tdm_infer_copy(&c->out[o], &c->in[2 + o]);
    return NULL;
}

/* ---- RotaryEmbedding (com.microsoft: input, position_ids, cos, sin; ONNX 23: X, cos, sin,
 * position_ids) ---- */

static tdm_status *infer_rotary(tdm_infer_ctx *c) {
    const tdm_node *n = c->node;
    bool ms = strcmp(n->domain, "com.microsoft") == 0;
    int cos_i = ms ? 2 : 1;
    if (ms && tdm_attr_int(n, "is_packed_batching", 0) != 0)
        return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "is_packed_batching=1 is not implemented");
    if (tdm_attr_int(n, "num_heads", 0) < 0 || tdm_attr_int(n, "rotary_embedding_dim", 0) < 0)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "num_heads and rotary_embedding_dim must not be negative");
    for (int i = 0; i < c->n_in; i++)
        if (i != (ms ? 1 : 3)) TDM_TRY(need_float(c, i, i == 0 ? "input" : "cos/sin cache"));
    const tdm_value_info *x = &c->in[0];
    if (x->rank >= 0 && x->rank != 3 && x->rank != 4)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "input must have rank 3 or 4");
    if (x->rank == 3 && !ms && tdm_attr_int(n, "num_heads", 0) <= 0)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "a 3-D input needs num_heads");
    int pid = ms ? 1 : 3;
    if (has_in(c, pid) && c->in[pid].dtype != TDM_UNDEFINED && c->in[pid].dtype != TDM_INT64)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "position_ids must be int64");
    for (int i = cos_i; i < cos_i + 2; i++)
        if (c->in[i].rank >= 0 && c->in[i].rank != 2 && c->in[i].rank != 3)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "cos/sin cache must have rank 2 or 3");
    tdm_infer_copy(&c->out[0], x);
    return NULL;
}

/* ---- normalisations ---- */

static tdm_status *norm_axis(const tdm_infer_ctx *c, int *axis) {
    *axis = -1;
    if (c->in[0].rank < 0) return NULL;
    return tdm_norm_axis(c->node, tdm_attr_int(c->node, "axis", -1), c->in[0].rank, axis);
}

/* SimplifiedLayerNormalization: Y, inv_std_var ([.., 1, ..1] over the normalised axes). */
static tdm_status *infer_simplified_ln(tdm_infer_ctx *c) {
    TDM_TRY(need_float(c, 0, "X"));
    TDM_TRY(need_float(c, 1, "scale"));
    int axis;
    TDM_TRY(norm_axis(c, &axis));
    tdm_infer_copy(&c->out[0], &c->in[0]);
    if (c->n_out > 1 && c->out[1].present) {
        tdm_infer_copy(&c->out[1], &c->in[0]);
        for (int d = axis; d >= 0 && d < c->in[0].rank; d++) c->out[1].dims[d] = 1;
    }
    return NULL;
}

static tdm_status *infer_rms_norm(tdm_infer_ctx *c) {
    TDM_TRY(need_float(c, 0, "X"));
    TDM_TRY(need_float(c, 1, "scale"));
    int axis;
    TDM_TRY(norm_axis(c, &axis));
    if (tdm_attr_int(c->node, "stash_type", 1) != 1)
        return tdm_node_error(c->node, TDM_ERR_UNSUPPORTED, "stash_type other than 1 is not implemented");
    tdm_infer_copy(&c->out[0], &c->in[0]);
    return NULL;
}

/* SkipSimplifiedLayerNormalization: output, mean (zeros), inv_std_var ([.., 1]),
 * input_skip_bias_sum. */
static tdm_status *infer_skip_simplified_ln(tdm_infer_ctx *c) {
    for (int i = 0; i < c->n_in; i++) TDM_TRY(need_float(c, i, "input"));
    const tdm_value_info *x = &c->in[0];
    if (x->rank >= 0 && x->rank != 2 && x->rank != 3)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "input must have rank 2 or 3");
    TDM_TRY(need_rank(c, 2, "gamma", 1));
    TDM_TRY(need_rank(c, 3, "bias", 1));
    int64_t hidden = x->rank > 0 ? x->dims[x->rank - 1] : TDM_DIM_UNKNOWN;
    for (int i = 2; i < 4 && i < c->n_in; i++)
        if (has_in(c, i) && c->in[i].rank == 1 && hidden >= 0 && c->in[i].dims[0] >= 0 &&
            c->in[i].dims[0] != hidden)
            return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT,
                                  "%s has %lld values, the hidden size is %lld",
                                  i == 2 ? "gamma" : "bias", (long long)c->in[i].dims[0],
                                  (long long)hidden);
    tdm_infer_copy(&c->out[0], x);
    for (int o = 1; o < 3 && o < c->n_out; o++) {
        if (!c->out[o].present) continue;
        tdm_infer_copy(&c->out[o], x);
        if (x->rank > 0) c->out[o].dims[x->rank - 1] = 1;
    }
    if (c->n_out > 3 && c->out[3].present) tdm_infer_copy(&c->out[3], x);
    return NULL;
}

/* ---- Attention (ONNX 23) ---- */

static tdm_status *infer_attention23(tdm_infer_ctx *c) {
    const tdm_node *n = c->node;
    const tdm_value_info *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    for (int i = 0; i < 6; i++)
        if (i != 3) TDM_TRY(need_float(c, i, "Q/K/V/past"));
    if (has_in(c, 3) && c->in[3].dtype != TDM_UNDEFINED && c->in[3].dtype != TDM_FLOAT &&
        c->in[3].dtype != TDM_BOOL)
        return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "attn_mask must be bool or float32");
    if (c->n_out > 3 && c->out[3].present)
        return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "output qk_matmul_output is not implemented");
    if (has_in(c, 4) != has_in(c, 5))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "past_key and past_value must both be given or both omitted");
    if (tdm_attr_float(n, "softcap", 0.0f) < 0.0f)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "softcap must not be negative");
    int64_t causal = tdm_attr_int(n, "is_causal", 0);
    if (causal != 0 && causal != 1)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "is_causal must be 0 or 1");
    int rank = q->rank;
    if (rank >= 0 && rank != 3 && rank != 4)
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "Q must have rank 3 or 4");
    for (int i = 1; i < 3; i++)
        if (rank >= 0 && c->in[i].rank >= 0 && c->in[i].rank != rank)
            return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT, "Q, K and V must have the same rank");
    int64_t qh = tdm_attr_int(n, "q_num_heads", 0), kh = tdm_attr_int(n, "kv_num_heads", 0);
    if (rank == 3 && (qh <= 0 || kh <= 0 || qh % kh != 0))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "3-D inputs need q_num_heads and kv_num_heads (positive, q_num_heads a "
                              "multiple of kv_num_heads)");
    if (rank == 4 && q->dims[1] >= 0 && k->dims[1] >= 0 &&
        (k->dims[1] <= 0 || q->dims[1] % k->dims[1] != 0))
        return tdm_node_error(n, TDM_ERR_INVALID_ARGUMENT,
                              "Q's heads (%lld) must be a multiple of K's (%lld)",
                              (long long)q->dims[1], (long long)k->dims[1]);
    if (rank < 0 || v->rank < 0) {
        set_dims(&c->out[0], TDM_FLOAT, rank);
    } else {
        set_dims(&c->out[0], TDM_FLOAT, rank);
        c->out[0].dims[0] = q->dims[0];
        if (rank == 4) {
            c->out[0].dims[1] = q->dims[1];
            c->out[0].dims[2] = q->dims[2];
            c->out[0].dims[3] = v->dims[3];
        } else {
            c->out[0].dims[1] = q->dims[1];
            if (v->dims[2] >= 0) c->out[0].dims[2] = qh * (v->dims[2] / kh);
        }
    }
    /* present_key / present_value: [B, kv heads, past + kv length, head size] */
    for (int o = 1; o <= 2 && o < c->n_out; o++) {
        if (!c->out[o].present) continue;
        const tdm_value_info *src = o == 1 ? k : v, *pst = has_in(c, 3 + o) ? &c->in[3 + o] : NULL;
        set_dims(&c->out[o], TDM_FLOAT, 4);
        if (src->rank < 0) continue;
        c->out[o].dims[0] = src->dims[0];
        int64_t kvlen = rank == 4 ? src->dims[2] : src->dims[1];
        c->out[o].dims[1] = rank == 4 ? src->dims[1] : kh;
        c->out[o].dims[3] = rank == 4 ? src->dims[3] : (src->dims[2] >= 0 ? src->dims[2] / kh : -1);
        int64_t pl = pst ? (pst->rank == 4 ? pst->dims[2] : -1) : 0;
        c->out[o].dims[2] = pl >= 0 && kvlen >= 0 ? pl + kvlen : TDM_DIM_UNKNOWN;
    }
    return NULL;
}

const tdm_op_schema tdm_ops_llm[] = {
    {"com.microsoft", "GroupQueryAttention", 1, 1, 17, 1, 4, infer_gqa, 0, 1u << 6},
    {"com.microsoft", "PagedAttention", 1, 1, 17, 1, 3, infer_paged, 0, 0},
    {"com.microsoft", "RotaryEmbedding", 1, 4, 4, 1, 1, infer_rotary, 0, 0},
    {"", "RotaryEmbedding", 23, 3, 4, 1, 1, infer_rotary, 0, 0},
    {"", "SimplifiedLayerNormalization", 1, 2, 2, 1, 2, infer_simplified_ln, 0, 0},
    {"com.microsoft", "SimplifiedLayerNormalization", 1, 2, 2, 1, 2, infer_simplified_ln, 0, 0},
    {"com.microsoft", "SkipSimplifiedLayerNormalization", 1, 3, 4, 1, 4, infer_skip_simplified_ln, 0, 0},
    {"", "RMSNormalization", 23, 2, 2, 1, 1, infer_rms_norm, 0, 0},
    {"", "Attention", 23, 3, 6, 1, 4, infer_attention23, 0, 0},
};
const int tdm_ops_llm_count = (int)(sizeof tdm_ops_llm / sizeof tdm_ops_llm[0]);
