/* Operator schemas: contrib family, second part — the com.microsoft attention and
 * dynamic-quantization operators (the rest is ops/contrib.c):
 *   Attention (BERT / GPT-2 style: packed QKV weights, mask_index, unidirectional, past and
 *   present), MultiHeadAttention (separate Q, K, V; key_padding_mask; attention_bias; past
 *   and present), QAttention, EmbedLayerNormalization, MatMulIntegerToFloat,
 *   DynamicQuantizeMatMul, DynamicQuantizeLSTM.
 * The forms ONNX Runtime runs only on GPUs (packed QKV for MultiHeadAttention, shared
 * past/present buffers, rotary embedding inside Attention, the 4-D Megatron mask) are refused
 * at load time, naming the input or attribute. */
#include <string.h>

#include "ops/contrib.h"

#define F32 (1u << TDM_FLOAT)
#define I32 (1u << TDM_INT32)
#define Q8 ((1u << TDM_INT8) | (1u << TDM_UINT8))

static tdm_status *refuse_input(const tdm_infer_ctx *c, int i, const char *name) {
    if (tdm_contrib_has_in(c, i))
        return tdm_node_error(c->node, TDM_ERR_UNSUPPORTED, "input %s is not implemented", name);
    return NULL;
}

static tdm_status *refuse_attr(const tdm_infer_ctx *c, const char *name) {
    int64_t v = tdm_attr_int(c->node, name, 0);
    if (v != 0)
        return tdm_node_error(c->node, TDM_ERR_UNSUPPORTED, "attribute %s=%lld is not implemented", name,
                              (long long)v);
    return NULL;
}

static tdm_status *num_heads(const tdm_infer_ctx *c, int64_t *n) {
    *n = tdm_attr_int(c->node, "num_heads", 0);
    if (*n <= 0)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "num_heads must be positive, got %lld",
                              (long long)*n);
    int64_t u = tdm_attr_int(c->node, "unidirectional", 0);
    if (u != 0 && u != 1) return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "unidirectional must be 0 or 1");
    return NULL;
}

static int64_t dim(const tdm_infer_ctx *c, int i, int d) {
    if (!tdm_contrib_has_in(c, i) || c->in[i].rank <= d) return TDM_DIM_UNKNOWN;
    return c->in[i].dims[d];
}

/* Attention's mask_index: [B], [2B] (end and start positions), [B, T] or [B, S, T]. */
static tdm_status *check_mask_index(const tdm_infer_ctx *c, int i) {
    if (!tdm_contrib_has_in(c, i)) return NULL;
    TDM_TRY(tdm_contrib_need_type(c, i, "mask_index", I32));
    int r = c->in[i].rank;
    if (r == 4)
        return tdm_node_error(c->node, TDM_ERR_UNSUPPORTED,
                              "a 4-D mask_index (Megatron's [B, 1, max, max]) is not implemented");
    if (r >= 0 && (r < 1 || r > 3))
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "mask_index must have rank 1, 2 or 3, has %d", r);
    return NULL;
}

/* attention_bias: [B or 1, N or 1, S, T] */
static tdm_status *check_attn_bias(const tdm_infer_ctx *c, int i, int64_t n) {
    if (!tdm_contrib_has_in(c, i)) return NULL;
    TDM_TRY(tdm_contrib_need_type(c, i, "attention_bias", F32));
    TDM_TRY(tdm_contrib_need_rank(c, i, "attention_bias", 4, 4));
    int64_t h = dim(c, i, 1);
    if (h >= 0 && h != 1 && h != n)
        return tdm_node_error(c->node, TDM_ERR_INVALID_ARGUMENT, "attention_bias has %lld heads; expected 1 or %lld",
                              (long long)h, (long long)n);
    return NULL;
}

/* present: [2, B, N, P + S, H] from past [2, B, N, P, H] */
static void set_present(tdm_infer_ctx *c, int o, int past_in, int64_t b, int64_t n, int64_t s, int64_t h) {
    if (o >= c->n_out || !c->out[o].present) return;
    tdm_contrib_set(&c->out[o], TDM_FLOAT, 5);
    int64_t p = tdm_contrib_has_in(c, past_in) ? dim(c, past_in, 3) : 0;
    int64_t d[5] = {2, b, n, p >= 0 && s >= 0 ? p + s : TDM_DIM_UNKNOWN, h};
    memcpy(c->out[o].dims, d, sizeof d);
}

/* ---- Attention: input, weights, bias?, mask_index?, past?, attention_bias?,
 * past_sequence_length? -> output, present? ---- */

static tdm_status *infer_attention(tdm_infer_ctx *c) {
    const tdm_node *node = c->node;
    int64_t n;
    TDM_TRY(num_heads(c, &n));
    TDM_TRY(refuse_attr(c, "do_rotary"));
    TDM_TRY(refuse_attr(c, "past_present_share_buffer"));
    TDM_TRY(refuse_input(c, 6, "past_sequence_length (shared past/present buffers)"));
    static const int fin[] = {0, 1, 2, 4, 5};
    for (int k = 0; k < 5; k++) TDM_TRY(tdm_contrib_need_type(c, fin[k], "input", F32));
    TDM_TRY(tdm_contrib_need_rank(c, 0, "input", 3, 3));
    TDM_TRY(tdm_contrib_need_rank(c, 1, "weights", 2, 2));
    TDM_TRY(tdm_contrib_need_rank(c, 4, "past", 5, 5));
    TDM_TRY(check_mask_index(c, 3));
    TDM_TRY(check_attn_bias(c, 5, n));
    int64_t total = dim(c, 1, 1), hid[3] = {TDM_DIM_UNKNOWN, TDM_DIM_UNKNOWN, TDM_DIM_UNKNOWN};
    size_t nq;
    const int64_t *qkv = tdm_attr_ints(node, "qkv_hidden_sizes", &nq);
    if (qkv && nq != 3)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "qkv_hidden_sizes needs 3 values, has %zu", nq);
    if (qkv) {
        for (int i = 0; i < 3; i++) {
            if (qkv[i] <= 0 || qkv[i] % n)
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "qkv_hidden_sizes must be positive multiples of num_heads (%lld)",
                                      (long long)n);
            hid[i] = qkv[i];
        }
        if (qkv[0] != qkv[1])
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "Q and K hidden sizes differ (%lld, %lld)",
                                  (long long)qkv[0], (long long)qkv[1]);
        if (total >= 0 && qkv[0] + qkv[1] + qkv[2] != total)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "qkv_hidden_sizes add up to %lld, the weights have %lld columns",
                                  (long long)(qkv[0] + qkv[1] + qkv[2]), (long long)total);
    } else if (total >= 0) {
        if (total % 3 || (total / 3) % n)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "the weights' %lld columns must be 3 x num_heads (%lld) x head size",
                                  (long long)total, (long long)n);
        hid[0] = hid[1] = hid[2] = total / 3;
    }
    int64_t in_hidden = dim(c, 0, 2), w_rows = dim(c, 1, 0);
    if (in_hidden >= 0 && w_rows >= 0 && in_hidden != w_rows)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input has %lld features, the weights %lld rows",
                              (long long)in_hidden, (long long)w_rows);
    TDM_TRY(tdm_contrib_need_vec(c, 2, "bias", total));
    if (tdm_contrib_has_in(c, 4) && hid[0] >= 0 && (hid[0] != hid[2]))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "with past, Q, K and V hidden sizes must be equal");
    int64_t b = dim(c, 0, 0), s = dim(c, 0, 1);
    tdm_contrib_set(&c->out[0], TDM_FLOAT, 3);
    c->out[0].dims[0] = b;
    c->out[0].dims[1] = s;
    c->out[0].dims[2] = hid[2];
    set_present(c, 1, 4, b, n, s, hid[1] >= 0 ? hid[1] / n : TDM_DIM_UNKNOWN);
    return NULL;
}

/* ---- QAttention: input, weight, bias, input_scale, weight_scale, mask_index?,
 * input_zero_point?, weight_zero_point?, past? -> output, present? ---- */

static tdm_status *infer_qattention(tdm_infer_ctx *c) {
    const tdm_node *node = c->node;
    int64_t n;
    TDM_TRY(num_heads(c, &n));
    TDM_TRY(refuse_attr(c, "do_rotary"));
    TDM_TRY(refuse_attr(c, "past_present_share_buffer"));
    TDM_TRY(tdm_contrib_need_type(c, 0, "input", Q8));
    TDM_TRY(tdm_contrib_need_type(c, 1, "weight", Q8));
    static const int fin[] = {2, 3, 4, 8};
    for (int k = 0; k < 4; k++) TDM_TRY(tdm_contrib_need_type(c, fin[k], "input", F32));
    for (int k = 0; k < 2; k++)
        if (tdm_contrib_has_in(c, 6 + k) && c->in[6 + k].dtype != TDM_UNDEFINED &&
            c->in[k].dtype != TDM_UNDEFINED && c->in[6 + k].dtype != c->in[k].dtype)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%s zero point has type %s, the %s %s",
                                  k ? "weight's" : "input's", tdm_dtype_name(c->in[6 + k].dtype),
                                  k ? "weight" : "input", tdm_dtype_name(c->in[k].dtype));
    TDM_TRY(tdm_contrib_need_rank(c, 0, "input", 3, 3));
    TDM_TRY(tdm_contrib_need_rank(c, 1, "weight", 2, 2));
    TDM_TRY(tdm_contrib_need_rank(c, 8, "past", 5, 5));
    TDM_TRY(tdm_contrib_need_scalar(c, 3, "input_scale"));
    TDM_TRY(tdm_contrib_need_scalar(c, 6, "input_zero_point"));
    TDM_TRY(check_mask_index(c, 5));
    int64_t total = dim(c, 1, 1), hid = TDM_DIM_UNKNOWN;
    if (total >= 0) {
        if (total % 3 || (total / 3) % n)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "the weight's %lld columns must be 3 x num_heads (%lld) x head size",
                                  (long long)total, (long long)n);
        hid = total / 3;
    }
    TDM_TRY(tdm_contrib_need_vec(c, 2, "bias", total));
    int64_t b = dim(c, 0, 0), s = dim(c, 0, 1);
    tdm_contrib_set(&c->out[0], TDM_FLOAT, 3);
    c->out[0].dims[0] = b;
    c->out[0].dims[1] = s;
    c->out[0].dims[2] = hid;
    set_present(c, 1, 8, b, n, s, hid >= 0 ? hid / n : TDM_DIM_UNKNOWN);
    return NULL;
}

/* ---- MultiHeadAttention: query, key?, value?, bias?, key_padding_mask?, attention_bias?,
 * past_key?, past_value?, past_sequence_length?, cache_indirection? -> output,
 * present_key?, present_value?, qk? ---- */

static tdm_status *infer_mha(tdm_infer_ctx *c) {
    const tdm_node *node = c->node;
    int64_t n;
    TDM_TRY(num_heads(c, &n));
    TDM_TRY(refuse_input(c, 8, "past_sequence_length"));
    TDM_TRY(refuse_input(c, 9, "cache_indirection"));
    if (c->n_out > 3 && c->out[3].present)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "output qk is not implemented");
    static const int fin[] = {0, 1, 2, 3, 5, 6, 7};
    for (int k = 0; k < 7; k++) TDM_TRY(tdm_contrib_need_type(c, fin[k], "input", F32));
    if (!tdm_contrib_has_in(c, 1) || !tdm_contrib_has_in(c, 2))
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED,
                              "packed QKV / KV (query or key with the others omitted) is not implemented");
    if (c->in[0].rank == 5 || c->in[1].rank == 5)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "packed QKV / KV inputs are not implemented");
    TDM_TRY(tdm_contrib_need_rank(c, 0, "query", 3, 3));
    TDM_TRY(tdm_contrib_need_rank(c, 1, "key", 3, 4));
    TDM_TRY(tdm_contrib_need_rank(c, 2, "value", 3, 4));
    TDM_TRY(tdm_contrib_need_rank(c, 6, "past_key", 4, 4));
    TDM_TRY(tdm_contrib_need_rank(c, 7, "past_value", 4, 4));
    if (c->in[1].rank >= 0 && c->in[2].rank >= 0 && c->in[1].rank != c->in[2].rank)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "key and value must have the same rank");
    bool bnsh = c->in[1].rank == 4;
    if (bnsh && (tdm_contrib_has_in(c, 6) || tdm_contrib_has_in(c, 3)))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "4-D key and value (already projected, [B, N, L, H]) take neither bias nor past");
    if (tdm_contrib_has_in(c, 6) != tdm_contrib_has_in(c, 7))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "past_key and past_value must both be given or both omitted");
    if (tdm_contrib_has_in(c, 4)) {
        TDM_TRY(tdm_contrib_need_type(c, 4, "key_padding_mask", I32));
        TDM_TRY(tdm_contrib_need_rank(c, 4, "key_padding_mask", 1, 3));
    }
    TDM_TRY(check_attn_bias(c, 5, n));
    int64_t hq = dim(c, 0, 2), hk = bnsh ? dim(c, 1, 1) * dim(c, 1, 3) : dim(c, 1, 2);
    int64_t hv = bnsh ? (dim(c, 2, 3) >= 0 ? dim(c, 2, 3) * n : -1) : dim(c, 2, 2);
    if (hq >= 0 && hq % n)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "query's hidden size %lld is not a multiple of num_heads %lld",
                              (long long)hq, (long long)n);
    if (!bnsh && hq >= 0 && hk >= 0 && hq != hk)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "query and key hidden sizes differ (%lld, %lld)",
                              (long long)hq, (long long)hk);
    if (hv >= 0 && hv % n)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "value's hidden size %lld is not a multiple of num_heads",
                              (long long)hv);
    if (bnsh && dim(c, 1, 1) >= 0 && dim(c, 1, 1) != n)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "4-D key has %lld heads, num_heads is %lld",
                              (long long)dim(c, 1, 1), (long long)n);
    if (tdm_contrib_has_in(c, 3) && hq >= 0 && hv >= 0) TDM_TRY(tdm_contrib_need_vec(c, 3, "bias", 2 * hq + hv));
    int64_t b = dim(c, 0, 0), s = dim(c, 0, 1), l = bnsh ? dim(c, 1, 2) : dim(c, 1, 1);
    tdm_contrib_set(&c->out[0], TDM_FLOAT, 3);
    c->out[0].dims[0] = b;
    c->out[0].dims[1] = s;
    c->out[0].dims[2] = hv;
    int64_t p = tdm_contrib_has_in(c, 6) ? dim(c, 6, 2) : 0;
    for (int o = 1; o <= 2 && o < c->n_out; o++) {
        if (!c->out[o].present) continue;
        tdm_contrib_set(&c->out[o], TDM_FLOAT, 4);
        int64_t h = o == 1 ? (hq >= 0 ? hq / n : -1) : (hv >= 0 ? hv / n : -1);
        int64_t d[4] = {b, n, p >= 0 && l >= 0 ? p + l : TDM_DIM_UNKNOWN, h};
        memcpy(c->out[o].dims, d, sizeof d);
    }
    return NULL;
}

/* ---- EmbedLayerNormalization: input_ids, segment_ids?, word_embedding, position_embedding,
 * segment_embedding?, gamma, beta, mask?, position_ids? -> output, mask_index?,
 * embedding_sum? ---- */

static tdm_status *infer_embed_ln(tdm_infer_ctx *c) {
    const tdm_node *node = c->node;
    static const int required[] = {0, 2, 3, 5, 6};
    for (int k = 0; k < 5; k++)
        if (!tdm_contrib_has_in(c, required[k]))
            return tdm_node_error(node, TDM_ERR_INVALID_MODEL, "required input %d is missing", required[k]);
    static const int ids[] = {0, 1, 7, 8};
    for (int k = 0; k < 4; k++) TDM_TRY(tdm_contrib_need_type(c, ids[k], "ids and mask", I32));
    static const int fl[] = {2, 3, 4, 5, 6};
    for (int k = 0; k < 5; k++) TDM_TRY(tdm_contrib_need_type(c, fl[k], "embeddings, gamma and beta", F32));
    if (tdm_contrib_has_in(c, 1) != tdm_contrib_has_in(c, 4))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "segment_ids and segment_embedding must both be given or both omitted");
    TDM_TRY(tdm_contrib_need_rank(c, 0, "input_ids", 2, 2));
    TDM_TRY(tdm_contrib_need_rank(c, 1, "segment_ids", 2, 2));
    TDM_TRY(tdm_contrib_need_rank(c, 7, "mask", 2, 2));
    TDM_TRY(tdm_contrib_need_rank(c, 8, "position_ids", 2, 2));
    for (int i = 2; i < 5; i++) TDM_TRY(tdm_contrib_need_rank(c, i, "an embedding", 2, 2));
    int64_t h = dim(c, 2, 1);
    for (int i = 3; i < 5; i++)
        if (dim(c, i, 1) >= 0 && h >= 0 && dim(c, i, 1) != h)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "the embeddings differ in hidden size (%lld, %lld)", (long long)h,
                                  (long long)dim(c, i, 1));
    TDM_TRY(tdm_contrib_need_vec(c, 5, "gamma", h));
    TDM_TRY(tdm_contrib_need_vec(c, 6, "beta", h));
    int64_t b = dim(c, 0, 0), s = dim(c, 0, 1);
    tdm_contrib_set(&c->out[0], TDM_FLOAT, 3);
    c->out[0].dims[0] = b;
    c->out[0].dims[1] = s;
    c->out[0].dims[2] = h;
    if (c->n_out > 1 && c->out[1].present) {
        tdm_contrib_set(&c->out[1], TDM_INT32, 1);
        c->out[1].dims[0] = b;
    }
    if (c->n_out > 2 && c->out[2].present) c->out[2] = c->out[0], c->out[2].present = true;
    return NULL;
}

/* ---- MatMulIntegerToFloat (A, B, a_scale, b_scale, a_zp?, b_zp?, bias?) and
 * DynamicQuantizeMatMul (A, B, b_scale, b_zp?, bias?): MatMul's shape, float output ---- */

/* the type mask a zero point of input i may have: input i's type, or int8 / uint8 if unknown */
static uint32_t same_q8(const tdm_infer_ctx *c, int i) {
    tdm_dtype t = c->in[i].dtype;
    return t == TDM_INT8 || t == TDM_UINT8 ? 1u << t : Q8;
}

static tdm_status *infer_qmm(tdm_infer_ctx *c) {
    const tdm_node *node = c->node;
    bool dyn = strcmp(node->op_type, "DynamicQuantizeMatMul") == 0;
    TDM_TRY(tdm_contrib_need_type(c, 0, "A", dyn ? F32 : Q8));
    TDM_TRY(tdm_contrib_need_type(c, 1, "B", Q8));
    int bz = dyn ? 3 : 5, bias = dyn ? 4 : 6;
    TDM_TRY(tdm_contrib_need_type(c, bz, "b_zero_point", same_q8(c, 1)));
    if (!dyn) {
        TDM_TRY(tdm_contrib_need_type(c, 4, "a_zero_point", same_q8(c, 0)));
        TDM_TRY(tdm_contrib_need_type(c, 2, "a_scale", F32));
        TDM_TRY(tdm_contrib_need_scalar(c, 2, "a_scale (per-tensor)"));
        TDM_TRY(tdm_contrib_need_scalar(c, 4, "a_zero_point (per-tensor)"));
    }
    TDM_TRY(tdm_contrib_need_type(c, dyn ? 2 : 3, "b_scale", F32));
    TDM_TRY(tdm_contrib_need_type(c, bias, "bias", F32));
    int64_t n = c->in[1].rank >= 1 ? c->in[1].dims[c->in[1].rank - 1] : TDM_DIM_UNKNOWN;
    if (c->in[1].rank == 1) n = TDM_DIM_UNKNOWN;
    TDM_TRY(tdm_contrib_need_vec(c, bias, "bias", n));
    const tdm_op_schema *mm = tdm_op_find("", "MatMul", 13);
    if (!mm || !mm->infer) return tdm_node_error(node, TDM_ERR_INTERNAL, "no MatMul schema");
    tdm_value_info in[2] = {c->in[0], c->in[1]};
    in[0].dtype = in[1].dtype = TDM_FLOAT;
    tdm_infer_ctx sub = *c;
    sub.opset = 13;
    sub.n_in = 2;
    sub.in = in;
    TDM_TRY(mm->infer(&sub));
    c->out[0].dtype = TDM_FLOAT;
    return NULL;
}

/* ---- DynamicQuantizeLSTM: X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?,
 * W_scale, W_zero_point, R_scale, R_zero_point -> Y?, Y_h?, Y_c? ---- */

static tdm_status *infer_dq_lstm(tdm_infer_ctx *c) {
    const tdm_node *node = c->node;
    int64_t h = tdm_attr_int(node, "hidden_size", 0);
    if (h <= 0) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "hidden_size must be positive");
    const char *dir = tdm_attr_string(node, "direction", "forward");
    int nd = !strcmp(dir, "bidirectional") ? 2 : (!strcmp(dir, "forward") || !strcmp(dir, "reverse")) ? 1 : 0;
    if (!nd) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "direction '%s' is not forward, reverse or bidirectional", dir);
    if (tdm_node_attr(node, "activations") || tdm_node_attr(node, "clip") ||
        tdm_attr_int(node, "input_forget", 0) != 0)
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED,
                              "activations, clip and input_forget other than the defaults are not implemented");
    static const int required[] = {0, 1, 2, 8, 9, 10, 11}; /* X, W, R, the scales and zero points */
    for (int k = 0; k < 7; k++)
        if (!tdm_contrib_has_in(c, required[k]))
            return tdm_node_error(node, TDM_ERR_INVALID_MODEL, "required input %d (X, W, R, a scale or "
                                  "zero point) is missing", required[k]);
    static const int fin[] = {0, 3, 5, 6, 7, 8, 10};
    for (int k = 0; k < 7; k++) TDM_TRY(tdm_contrib_need_type(c, fin[k], "input", F32));
    static const int q8in[] = {1, 2, 9, 11};
    for (int k = 0; k < 4; k++) TDM_TRY(tdm_contrib_need_type(c, q8in[k], "a weight or zero point", Q8));
    TDM_TRY(tdm_contrib_need_type(c, 4, "sequence_lens", I32));
    TDM_TRY(tdm_contrib_need_rank(c, 0, "X", 3, 3));
    TDM_TRY(tdm_contrib_need_rank(c, 1, "W", 3, 3));
    TDM_TRY(tdm_contrib_need_rank(c, 2, "R", 3, 3));
    int64_t in = dim(c, 0, 2);
    if (dim(c, 1, 0) >= 0 && dim(c, 1, 0) != nd)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "W has %lld directions, expected %d", (long long)dim(c, 1, 0), nd);
    if ((dim(c, 1, 1) >= 0 && in >= 0 && dim(c, 1, 1) != in) || (dim(c, 1, 2) >= 0 && dim(c, 1, 2) != 4 * h))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "W must be [%d, input_size, 4 x hidden_size]", nd);
    if ((dim(c, 2, 1) >= 0 && dim(c, 2, 1) != h) || (dim(c, 2, 2) >= 0 && dim(c, 2, 2) != 4 * h))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "R must be [%d, hidden_size, 4 x hidden_size]", nd);
    int64_t s = dim(c, 0, 0), b = dim(c, 0, 1);
    if (c->n_out > 0 && c->out[0].present) {
        tdm_contrib_set(&c->out[0], TDM_FLOAT, 4);
        int64_t d[4] = {s, nd, b, h};
        memcpy(c->out[0].dims, d, sizeof d);
    }
    for (int o = 1; o < 3 && o < c->n_out; o++) {
        if (!c->out[o].present) continue;
        tdm_contrib_set(&c->out[o], TDM_FLOAT, 3);
        int64_t d[3] = {nd, b, h};
        memcpy(c->out[o].dims, d, sizeof d);
    }
    return NULL;
}

#define MS "com.microsoft"
const tdm_op_schema tdm_ops_contrib_attn[] = {
    {MS, "Attention", 1, 2, 7, 1, 2, infer_attention, 0, 0},
    {MS, "QAttention", 1, 5, 9, 1, 2, infer_qattention, 0, 0},
    {MS, "MultiHeadAttention", 1, 1, 10, 1, 4, infer_mha, 0, 0},
    {MS, "EmbedLayerNormalization", 1, 7, 9, 1, 3, infer_embed_ln, TDM_OP_OPTIONAL_SLOTS, 0},
    {MS, "MatMulIntegerToFloat", 1, 4, 7, 1, 1, infer_qmm, 0, 0},
    {MS, "DynamicQuantizeMatMul", 1, 3, 5, 1, 1, infer_qmm, 0, 0},
    {MS, "DynamicQuantizeLSTM", 1, 12, 12, 0, 3, infer_dq_lstm, TDM_OP_OPTIONAL_SLOTS, 0},
};
const int tdm_ops_contrib_attn_count = (int)(sizeof tdm_ops_contrib_attn / sizeof tdm_ops_contrib_attn[0]);
