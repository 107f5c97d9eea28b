/* Operator schemas: sequences and optionals (SequenceEmpty .. ConcatFromSequence, SequenceMap,
 * Optional*). Their values are containers (core/tensor.h) whose item counts and item shapes
 * are known only at run time, so every kernel creates its outputs itself. */
#include "ops/op.h"

static void set_kind(tdm_value_info *o, tdm_dtype kind) {
    o->dtype = kind;
    o->rank = 1;
    o->dims[0] = TDM_DIM_UNKNOWN;
}

static tdm_status *need_kind(const tdm_infer_ctx *ctx, int i, tdm_dtype kind) {
    const tdm_value_info *v = &ctx->in[i];
    if (!v->present || v->dtype == TDM_UNDEFINED || v->dtype == kind) return NULL;
    return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input %d must be a %s, got %s", i,
                          tdm_dtype_name(kind), tdm_dtype_name(v->dtype));
}

static tdm_status *infer_to_seq(tdm_infer_ctx *ctx) {
    set_kind(&ctx->out[0], TDM_SEQUENCE);
    return NULL;
}

static tdm_status *infer_seq_to_seq(tdm_infer_ctx *ctx) {
    TDM_TRY(need_kind(ctx, 0, TDM_SEQUENCE));
    set_kind(&ctx->out[0], TDM_SEQUENCE);
    return NULL;
}

/* SequenceAt, ConcatFromSequence: a tensor whose type is the items' (unknown before run time). */
static tdm_status *infer_seq_to_tensor(tdm_infer_ctx *ctx) { return need_kind(ctx, 0, TDM_SEQUENCE); }

static tdm_status *infer_seq_length(tdm_infer_ctx *ctx) {
    TDM_TRY(need_kind(ctx, 0, TDM_SEQUENCE));
    ctx->out[0].dtype = TDM_INT64;
    ctx->out[0].rank = 0;
    return NULL;
}

static tdm_status *infer_optional(tdm_infer_ctx *ctx) {
    set_kind(&ctx->out[0], TDM_OPTIONAL);
    return NULL;
}

static tdm_status *infer_has_element(tdm_infer_ctx *ctx) {
    ctx->out[0].dtype = TDM_BOOL;
    ctx->out[0].rank = 0;
    return NULL;
}

/* OptionalGetElement: the element (a tensor or a sequence); a non-optional input passes. */
static tdm_status *infer_get_element(tdm_infer_ctx *ctx) {
    const tdm_value_info *v = &ctx->in[0];
    if (v->dtype == TDM_SEQUENCE) set_kind(&ctx->out[0], TDM_SEQUENCE);
    return NULL;
}

static tdm_status *infer_sequence_map(tdm_infer_ctx *ctx) {
    const tdm_attr *b = tdm_node_attr(ctx->node, "body");
    if (!b || b->type != TDM_ATTR_GRAPH)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "needs a graph attribute 'body'");
    if (b->g->n_inputs != (size_t)ctx->n_in || b->g->n_outputs != (size_t)ctx->n_out)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "body has %zu inputs and %zu outputs; the node %d and %d",
                              b->g->n_inputs, b->g->n_outputs, ctx->n_in, ctx->n_out);
    TDM_TRY(need_kind(ctx, 0, TDM_SEQUENCE));
    for (int i = 0; i < ctx->n_out; i++) set_kind(&ctx->out[i], TDM_SEQUENCE);
    return NULL;
}

static tdm_status *infer_dict_vectorizer(tdm_infer_ctx *ctx) { return need_kind(ctx, 0, TDM_MAP); }

#define DD TDM_OP_DATA_DEPENDENT
const tdm_op_schema tdm_ops_seq[] = {
    {"", "SequenceEmpty", 11, 0, 0, 1, 1, infer_to_seq, DD, 0},
    {"", "SequenceConstruct", 11, 1, 4096, 1, 1, infer_to_seq, DD, 0},
    {"", "SequenceInsert", 11, 2, 3, 1, 1, infer_seq_to_seq, DD, 0},
    {"", "SequenceErase", 11, 1, 2, 1, 1, infer_seq_to_seq, DD, 0},
    {"", "SequenceAt", 11, 2, 2, 1, 1, infer_seq_to_tensor, DD, 0},
    {"", "SequenceLength", 11, 1, 1, 1, 1, infer_seq_length, DD, 0},
    {"", "SplitToSequence", 11, 1, 2, 1, 1, infer_to_seq, DD, 0},
    {"", "ConcatFromSequence", 11, 1, 1, 1, 1, infer_seq_to_tensor, DD, 0},
    {"", "SequenceMap", 17, 1, 4096, 1, 4096, infer_sequence_map, DD, 0},
    {"", "Optional", 15, 0, 1, 1, 1, infer_optional, DD, 0},
    {"ai.onnx.ml", "ZipMap", 1, 1, 1, 1, 1, infer_to_seq, DD, 0},
    {"ai.onnx.ml", "DictVectorizer", 1, 1, 1, 1, 1, infer_dict_vectorizer, DD, 0},
    {"", "OptionalHasElement", 15, 0, 1, 1, 1, infer_has_element, DD, 0},
    {"", "OptionalGetElement", 15, 1, 1, 1, 1, infer_get_element, DD, 0},
};
const int tdm_ops_seq_count = (int)(sizeof tdm_ops_seq / sizeof tdm_ops_seq[0]);
