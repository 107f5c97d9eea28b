/* Operator schemas: text family (StringNormalizer, TfIdfVectorizer). */
#include <string.h>

#include "core/checked.h"
#include "ops/op.h"

/* X: string [C] or [1, C]. Y has the same rank; how many strings survive the stopword
 * filter is only known when it runs (an empty result is [""] / [[""]]). */
static tdm_status *infer_string_normalizer(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0];
    tdm_value_info *y = &ctx->out[0];
    const char *act = tdm_attr_string(node, "case_change_action", "NONE");
    if (strcmp(act, "NONE") && strcmp(act, "LOWER") && strcmp(act, "UPPER"))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "case_change_action must be NONE, LOWER or UPPER, got '%s'", act);
    if (x->dtype != TDM_UNDEFINED && x->dtype != TDM_STRING)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must be a string tensor");
    y->dtype = TDM_STRING;
    if (x->rank < 0) return NULL;
    if (x->rank != 1 && x->rank != 2)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must have shape [C] or [1, C]");
    if (x->rank == 2 && x->dims[0] >= 0 && x->dims[0] != 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "a 2-D input must have shape [1, C], got %lld rows",
                              (long long)x->dims[0]);
    y->rank = x->rank;
    if (x->rank == 2) y->dims[0] = 1;
    y->dims[x->rank - 1] = TDM_DIM_UNKNOWN;
    return NULL;
}

/* Checks the TfIdfVectorizer attributes and returns the output width
 * (max(ngram_indexes) + 1). */
static tdm_status *tfidf_width(const tdm_node *node, int64_t *width) {
    const char *mode = tdm_attr_string(node, "mode", NULL);
    if (!mode || (strcmp(mode, "TF") && strcmp(mode, "IDF") && strcmp(mode, "TFIDF")))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "mode must be TF, IDF or TFIDF");
    int64_t mn = tdm_attr_int(node, "min_gram_length", 0);
    int64_t mx = tdm_attr_int(node, "max_gram_length", 0);
    if (mn < 1 || mx < mn)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "need 1 <= min_gram_length <= max_gram_length, got %lld and %lld",
                              (long long)mn, (long long)mx);
    if (tdm_attr_int(node, "max_skip_count", 0) < 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "max_skip_count must be >= 0");
    size_t n_idx = 0, n_counts = 0;
    const int64_t *idx = tdm_attr_ints(node, "ngram_indexes", &n_idx);
    tdm_attr_ints(node, "ngram_counts", &n_counts);
    if (!idx || n_idx == 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "ngram_indexes is required");
    if (n_counts == 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "ngram_counts is required");
    const tdm_attr *pi = tdm_node_attr(node, "pool_int64s");
    const tdm_attr *ps = tdm_node_attr(node, "pool_strings");
    if ((pi != NULL) == (ps != NULL))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "exactly one of pool_int64s and pool_strings is required");
    int64_t m = -1;
    for (size_t i = 0; i < n_idx; i++) {
        if (idx[i] < 0 || idx[i] >= TDM_MAX_TENSOR_BYTES)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "ngram_indexes[%zu] = %lld is invalid",
                                  i, (long long)idx[i]);
        if (idx[i] > m) m = idx[i];
    }
    *width = m + 1;
    return NULL;
}

static tdm_status *infer_tfidf(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_value_info *y = &ctx->out[0];
    int64_t width = 0;
    TDM_TRY(tfidf_width(ctx->node, &width));
    if (x->dtype != TDM_UNDEFINED && x->dtype != TDM_STRING && x->dtype != TDM_INT32 &&
        x->dtype != TDM_INT64)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "input must be string, int32 or int64");
    y->dtype = TDM_FLOAT;
    if (x->rank < 0) return NULL;
    if (x->rank > 2)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input must have shape [C] or [N, C]");
    if (x->rank == 2) {
        y->rank = 2;
        y->dims[0] = x->dims[0];
        y->dims[1] = width;
    } else {
        y->rank = 1;
        y->dims[0] = width;
    }
    return NULL;
}

const tdm_op_schema tdm_ops_text[] = {
    {"", "StringNormalizer", 10, 1, 1, 1, 1, infer_string_normalizer, TDM_OP_DATA_DEPENDENT, 0},
    {"", "TfIdfVectorizer", 9, 1, 1, 1, 1, infer_tfidf, 0, 0},
};
const int tdm_ops_text_count = (int)(sizeof tdm_ops_text / sizeof tdm_ops_text[0]);
