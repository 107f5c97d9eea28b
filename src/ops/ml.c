/* Operator schemas: classic machine learning (domain ai.onnx.ml): tree ensembles, linear
 * models, support vector machines, and the feature transforms scikit-learn pipelines export
 * (Scaler, Normalizer, Binarizer, Imputer, ArrayFeatureExtractor). Attributes are checked
 * here once, so that the kernels can trust them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/half.h"
#include "ops/op.h"

#define ML "ai.onnx.ml"

/* X is [N, F] or [F] (one row) of float, double, int32 or int64. */
static tdm_status *check_features(const tdm_node *node, const tdm_value_info *x) {
    if (x->dtype != TDM_UNDEFINED && x->dtype != TDM_FLOAT && x->dtype != TDM_DOUBLE &&
        x->dtype != TDM_INT32 && x->dtype != TDM_INT64)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "input must be float, double, int32 or int64");
    if (x->rank > 2 || x->rank == 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must be [N, F] or [F]");
    return NULL;
}

static int64_t rows_of(const tdm_value_info *x) {
    return x->rank == 2 ? x->dims[0] : x->rank == 1 ? 1 : TDM_DIM_UNKNOWN;
}

/* Length of a list attribute given either as floats or as a double tensor (`NAME_as_tensor`,
 * opset 3); -1 when neither is there, -2 when both are. */
static int64_t floats_or_tensor_len(const tdm_node *node, const char *name) {
    char tname[96];
    snprintf(tname, sizeof tname, "%s_as_tensor", name);
    size_t n = 0;
    const float *f = tdm_attr_floats(node, name, &n);
    const tdm_tensor *t = tdm_attr_tensor(node, tname);
    if (f && t) return -2;
    if (f) return (int64_t)n;
    if (t) return t->count;
    return -1;
}

static size_t strings_len(const tdm_node *node, const char *name) {
    const tdm_attr *a = tdm_node_attr(node, name);
    return a && a->type == TDM_ATTR_STRINGS ? a->n : 0;
}

/* post_transform is one of the five the ONNX ML operators define. */
static tdm_status *check_post_transform(const tdm_node *node) {
    const char *pt = tdm_attr_string(node, "post_transform", "NONE");
    if (strcmp(pt, "NONE") && strcmp(pt, "SOFTMAX") && strcmp(pt, "LOGISTIC") &&
        strcmp(pt, "SOFTMAX_ZERO") && strcmp(pt, "PROBIT"))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown post_transform '%s'", pt);
    return NULL;
}

/* Checks the nodes_* attributes shared by both tree ensembles. */
static tdm_status *check_tree_nodes(const tdm_node *node) {
    size_t n_tree = 0, n_node = 0, n_feat = 0, n_true = 0, n_false = 0;
    tdm_attr_ints(node, "nodes_treeids", &n_tree);
    tdm_attr_ints(node, "nodes_nodeids", &n_node);
    tdm_attr_ints(node, "nodes_featureids", &n_feat);
    tdm_attr_ints(node, "nodes_truenodeids", &n_true);
    tdm_attr_ints(node, "nodes_falsenodeids", &n_false);
    size_t n_modes = strings_len(node, "nodes_modes");
    int64_t n_vals = floats_or_tensor_len(node, "nodes_values");
    if (n_tree == 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "nodes_treeids is missing or empty");
    if (n_vals == -2)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "nodes_values and nodes_values_as_tensor are both given");
    if (n_node != n_tree || n_feat != n_tree || n_true != n_tree || n_false != n_tree ||
        n_modes != n_tree || n_vals != (int64_t)n_tree)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "the nodes_* attributes must all have %zu entries", n_tree);
    size_t n_miss = 0;
    if (tdm_attr_ints(node, "nodes_missing_value_tracks_true", &n_miss) && n_miss != n_tree)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "nodes_missing_value_tracks_true must have %zu entries", n_tree);
    TDM_TRY(check_post_transform(node));
    return NULL;
}

/* The trees read no feature past the input's last dimension (when it is known). */
static tdm_status *check_tree_features(const tdm_node *node, const tdm_value_info *x) {
    int64_t f = x->rank > 0 ? x->dims[x->rank - 1] : TDM_DIM_UNKNOWN;
    if (f < 0) return NULL;
    size_t n = 0;
    const int64_t *feat = tdm_attr_ints(node, "nodes_featureids", &n);
    const tdm_attr *modes = tdm_node_attr(node, "nodes_modes");
    for (size_t i = 0; i < n; i++)
        if ((feat[i] < 0 || feat[i] >= f) && strcmp(modes->strings[i], "LEAF"))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "node %zu reads feature %lld but the input has %lld", i,
                                  (long long)feat[i], (long long)f);
    return NULL;
}

/* Checks a leaf-vote list (PREFIX_treeids, _nodeids, _ids, _weights). */
static tdm_status *check_votes(const tdm_node *node, const char *prefix) {
    char name[64];
    size_t n_tree = 0, n_node = 0, n_ids = 0;
    snprintf(name, sizeof name, "%s_treeids", prefix);
    tdm_attr_ints(node, name, &n_tree);
    snprintf(name, sizeof name, "%s_nodeids", prefix);
    tdm_attr_ints(node, name, &n_node);
    snprintf(name, sizeof name, "%s_ids", prefix);
    tdm_attr_ints(node, name, &n_ids);
    snprintf(name, sizeof name, "%s_weights", prefix);
    int64_t n_w = floats_or_tensor_len(node, name);
    if (n_node != n_tree || n_ids != n_tree || n_w != (int64_t)n_tree)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "the %s_* attributes must all have %zu entries", prefix, n_tree);
    return NULL;
}

static tdm_status *infer_tree_classifier(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    TDM_TRY(check_features(node, &ctx->in[0]));
    TDM_TRY(check_tree_nodes(node));
    TDM_TRY(check_tree_features(node, &ctx->in[0]));
    TDM_TRY(check_votes(node, "class"));
    size_t n_int = 0, n_str = strings_len(node, "classlabels_strings");
    tdm_attr_ints(node, "classlabels_int64s", &n_int);
    if ((n_int > 0) == (n_str > 0))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "exactly one of classlabels_int64s and classlabels_strings is needed");
    int64_t classes = (int64_t)(n_int + n_str);
    int64_t n_base = floats_or_tensor_len(node, "base_values");
    if (n_base == -2 || (n_base > 0 && n_base != classes && n_base != 1))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "base_values must have 1 or %lld entries", (long long)classes);
    size_t n_ids = 0;
    const int64_t *ids = tdm_attr_ints(node, "class_ids", &n_ids);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= classes)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "class_ids[%zu] = %lld is not a class index (0..%lld)", i,
                                  (long long)ids[i], (long long)classes - 1);
    int64_t n = rows_of(&ctx->in[0]);
    ctx->out[0].dtype = n_str ? TDM_STRING : TDM_INT64;
    ctx->out[0].rank = 1;
    ctx->out[0].dims[0] = n;
    if (ctx->n_out > 1 && ctx->out[1].present) {
        ctx->out[1].dtype = TDM_FLOAT;
        ctx->out[1].rank = 2;
        ctx->out[1].dims[0] = n;
        ctx->out[1].dims[1] = classes;
    }
    return NULL;
}

static tdm_status *infer_tree_regressor(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    TDM_TRY(check_features(node, &ctx->in[0]));
    TDM_TRY(check_tree_nodes(node));
    TDM_TRY(check_tree_features(node, &ctx->in[0]));
    TDM_TRY(check_votes(node, "target"));
    int64_t targets = tdm_attr_int(node, "n_targets", 1);
    if (targets < 1 || targets > (1 << 20))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "n_targets must be >= 1");
    const char *agg = tdm_attr_string(node, "aggregate_function", "SUM");
    if (strcmp(agg, "SUM") && strcmp(agg, "AVERAGE") && strcmp(agg, "MIN") && strcmp(agg, "MAX"))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown aggregate_function '%s'",
                              agg);
    int64_t n_base = floats_or_tensor_len(node, "base_values");
    if (n_base == -2 || (n_base > 0 && n_base != targets && n_base != 1))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "base_values must have 1 or %lld entries", (long long)targets);
    size_t n_ids = 0;
    const int64_t *ids = tdm_attr_ints(node, "target_ids", &n_ids);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= targets)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "target_ids[%zu] = %lld is not a target (0..%lld)", i,
                                  (long long)ids[i], (long long)targets - 1);
    ctx->out[0].dtype = TDM_FLOAT;
    ctx->out[0].rank = 2;
    ctx->out[0].dims[0] = rows_of(&ctx->in[0]);
    ctx->out[0].dims[1] = targets;
    return NULL;
}

/* ---- TreeEnsemble (opset 5): interior nodes in nodes_*, leaves in leaf_* ---- */

static int64_t attr_tensor_len(const tdm_node *node, const char *name, tdm_dtype *dt) {
    const tdm_tensor *t = tdm_attr_tensor(node, name);
    if (!t) return -1;
    *dt = t->dtype;
    return t->count;
}

/* Every check the kernel relies on: equal lengths, types matching the input, modes, child and
 * root indices in range, one membership set per BRANCH_MEMBER node. */
static tdm_status *check_tree_ensemble5(const tdm_node *node, const tdm_value_info *x,
                                        int64_t *targets) {
    if (x->dtype != TDM_UNDEFINED && x->dtype != TDM_FLOAT && x->dtype != TDM_DOUBLE &&
        x->dtype != TDM_FLOAT16)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "input must be float, double or float16");
    if (x->rank > 2 || x->rank == 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must be [N, F] or [F]");
    size_t n = 0, n_true = 0, n_false = 0, n_tl = 0, n_fl = 0, n_roots = 0, n_leaf = 0;
    const int64_t *feat = tdm_attr_ints(node, "nodes_featureids", &n);
    const int64_t *yes = tdm_attr_ints(node, "nodes_truenodeids", &n_true);
    const int64_t *no = tdm_attr_ints(node, "nodes_falsenodeids", &n_false);
    const int64_t *yl = tdm_attr_ints(node, "nodes_trueleafs", &n_tl);
    const int64_t *nl = tdm_attr_ints(node, "nodes_falseleafs", &n_fl);
    const int64_t *roots = tdm_attr_ints(node, "tree_roots", &n_roots);
    const int64_t *tid = tdm_attr_ints(node, "leaf_targetids", &n_leaf);
    tdm_dtype dt_split = TDM_UNDEFINED, dt_w = TDM_UNDEFINED, dt_mem = TDM_UNDEFINED;
    int64_t n_split = attr_tensor_len(node, "nodes_splits", &dt_split);
    int64_t n_w = attr_tensor_len(node, "leaf_weights", &dt_w);
    const tdm_tensor *modes = tdm_attr_tensor(node, "nodes_modes");
    if (!feat || !n)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "nodes_featureids is missing or empty");
    if (!roots || !n_roots)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "tree_roots is missing or empty");
    if (!modes || modes->dtype != TDM_UINT8)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "nodes_modes must be a uint8 tensor");
    if (n_split < 0 || n_w < 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "nodes_splits and leaf_weights must be tensors");
    if (n_true != n || n_false != n || n_tl != n || n_fl != n || n_split != (int64_t)n ||
        modes->count != (int64_t)n)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "the nodes_* attributes must all have %zu entries", n);
    size_t n_miss = 0;
    if (tdm_attr_ints(node, "nodes_missing_value_tracks_true", &n_miss) && n_miss != n)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "nodes_missing_value_tracks_true must have %zu entries", n);
    if (!tid || !n_leaf || n_w != (int64_t)n_leaf)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "leaf_targetids and leaf_weights must have the same (non-zero) length");
    if (x->dtype != TDM_UNDEFINED && (dt_split != x->dtype || dt_w != x->dtype))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "nodes_splits and leaf_weights must have the input's type (%s)",
                              tdm_dtype_name(x->dtype));
    if (dt_split != TDM_FLOAT && dt_split != TDM_DOUBLE && dt_split != TDM_FLOAT16)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "nodes_splits must be float, double or float16");
    if (dt_w != dt_split)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "leaf_weights must have the type of nodes_splits");
    int64_t agg = tdm_attr_int(node, "aggregate_function", 1);
    if (agg < 0 || agg > 3)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "aggregate_function %lld is not one of 0..3", (long long)agg);
    int64_t post = tdm_attr_int(node, "post_transform", 0);
    if (post < 0 || post > 4)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "post_transform %lld is not one of 0..4", (long long)post);
    int64_t t_max = 0;
    for (size_t i = 0; i < n_leaf; i++) {
        if (tid[i] < 0 || tid[i] > (1 << 20))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "leaf_targetids[%zu] = %lld", i, (long long)tid[i]);
        if (tid[i] + 1 > t_max) t_max = tid[i] + 1;
    }
    const tdm_attr *nt = tdm_node_attr(node, "n_targets");
    *targets = nt ? tdm_attr_int(node, "n_targets", 1) : t_max;
    if (*targets < 1 || *targets > (1 << 20))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "n_targets must be >= 1");
    if (t_max > *targets)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "leaf_targetids has target %lld but n_targets is %lld",
                              (long long)t_max - 1, (long long)*targets);
    int64_t f = x->rank > 0 ? x->dims[x->rank - 1] : TDM_DIM_UNKNOWN;
    const uint8_t *mode = modes->data;
    int64_t members = 0;
    for (size_t i = 0; i < n; i++) {
        if (mode[i] > 6)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "nodes_modes[%zu] = %d is not a mode (0..6)", i, mode[i]);
        members += mode[i] == 6;
        if (feat[i] < 0 || feat[i] > INT32_MAX || (f >= 0 && feat[i] >= f))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "node %zu reads feature %lld but the input has %lld", i,
                                  (long long)feat[i], (long long)f);
        if ((yl[i] != 0 && yl[i] != 1) || (nl[i] != 0 && nl[i] != 1))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "nodes_trueleafs / nodes_falseleafs must be 0 or 1 (node %zu)", i);
        if (yes[i] < 0 || yes[i] >= (int64_t)(yl[i] ? n_leaf : n) || no[i] < 0 ||
            no[i] >= (int64_t)(nl[i] ? n_leaf : n))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "node %zu: a child (%lld or %lld) does not exist", i,
                                  (long long)yes[i], (long long)no[i]);
    }
    for (size_t i = 0; i < n_roots; i++)
        if (roots[i] < 0 || roots[i] >= (int64_t)n)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "tree_roots[%zu] = %lld is not a node", i, (long long)roots[i]);
    int64_t n_mem = attr_tensor_len(node, "membership_values", &dt_mem);
    if (members && n_mem < 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "BRANCH_MEMBER nodes need membership_values");
    if (n_mem >= 0) {
        if (dt_mem != dt_split)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "membership_values must have the type of nodes_splits");
        const tdm_tensor *mv = tdm_attr_tensor(node, "membership_values");
        int64_t sets = 0;
        bool open = false;
        for (int64_t i = 0; i < mv->count; i++) {
            double v = dt_mem == TDM_FLOAT    ? ((const float *)mv->data)[i]
                       : dt_mem == TDM_DOUBLE ? ((const double *)mv->data)[i]
                                              : tdm_f16_to_f32(((const uint16_t *)mv->data)[i]);
            if (isnan(v)) sets++, open = false;
            else open = true;
        }
        sets += open; /* the last set may go without its NaN */
        if (sets != members)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "membership_values has %lld sets for %lld BRANCH_MEMBER nodes",
                                  (long long)sets, (long long)members);
    }
    return NULL;
}

static tdm_status *infer_tree_ensemble5(tdm_infer_ctx *ctx) {
    int64_t targets = 1;
    TDM_TRY(check_tree_ensemble5(ctx->node, &ctx->in[0], &targets));
    ctx->out[0].dtype = ctx->in[0].dtype;
    ctx->out[0].rank = 2;
    ctx->out[0].dims[0] = rows_of(&ctx->in[0]);
    ctx->out[0].dims[1] = targets;
    return NULL;
}

/* Y = X * coefficients^T + intercepts, [N, targets]. */
static tdm_status *infer_linear_regressor(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0];
    TDM_TRY(check_features(node, x));
    int64_t targets = tdm_attr_int(node, "targets", 1);
    size_t n_coef = 0, n_int = 0;
    tdm_attr_floats(node, "coefficients", &n_coef);
    const float *ic = tdm_attr_floats(node, "intercepts", &n_int);
    if (targets < 1 || n_coef == 0 || n_coef % (size_t)targets)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "coefficients (%zu) must be a multiple of targets (%lld)", n_coef,
                              (long long)targets);
    if (ic && n_int != (size_t)targets)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "intercepts must have %lld entries",
                              (long long)targets);
    TDM_TRY(check_post_transform(node));
    int64_t f = x->rank > 0 ? x->dims[x->rank - 1] : TDM_DIM_UNKNOWN;
    if (f >= 0 && (size_t)f * (size_t)targets != n_coef)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "%lld features but %zu coefficients for %lld targets", (long long)f,
                              n_coef, (long long)targets);
    ctx->out[0].dtype = TDM_FLOAT;
    ctx->out[0].rank = 2;
    ctx->out[0].dims[0] = rows_of(x);
    ctx->out[0].dims[1] = targets;
    return NULL;
}

/* Scores X * coefficients^T + intercepts for len(intercepts) classes; labels Y [N] (int64 or
 * string), scores Z [N, classes] (2 when one score decides between two labels). */
static tdm_status *infer_linear_classifier(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0];
    TDM_TRY(check_features(node, x));
    size_t n_coef = 0, n_icpt = 0, n_int = 0, n_str = strings_len(node, "classlabels_strings");
    tdm_attr_floats(node, "coefficients", &n_coef);
    tdm_attr_floats(node, "intercepts", &n_icpt);
    tdm_attr_ints(node, "classlabels_ints", &n_int);
    if ((n_int > 0) == (n_str > 0))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "exactly one of classlabels_ints and classlabels_strings is needed");
    if (n_icpt == 0 || n_coef == 0 || n_coef % n_icpt)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "coefficients (%zu) must be a multiple of intercepts (%zu)", n_coef,
                              n_icpt);
    size_t labels = n_int + n_str;
    if (n_icpt > 1 && n_icpt != labels)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "%zu intercepts for %zu class labels", n_icpt, labels);
    TDM_TRY(check_post_transform(node));
    int64_t f = x->rank > 0 ? x->dims[x->rank - 1] : TDM_DIM_UNKNOWN;
    if (f >= 0 && (size_t)f * n_icpt != n_coef)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "%lld features but %zu coefficients for %zu classes", (long long)f,
                              n_coef, n_icpt);
    int64_t n = rows_of(x);
    ctx->out[0].dtype = n_str ? TDM_STRING : TDM_INT64;
    ctx->out[0].rank = 1;
    ctx->out[0].dims[0] = n;
    if (ctx->n_out > 1 && ctx->out[1].present) {
        ctx->out[1].dtype = TDM_FLOAT;
        ctx->out[1].rank = 2;
        ctx->out[1].dims[0] = n;
        ctx->out[1].dims[1] = n_icpt == 1 && labels == 2 ? 2 : (int64_t)n_icpt;
    }
    return NULL;
}

/* Element-wise feature transforms: Y is float with X's shape. */
static tdm_status *infer_feature_map(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0];
    if (x->dtype != TDM_UNDEFINED && x->dtype != TDM_FLOAT && x->dtype != TDM_DOUBLE &&
        x->dtype != TDM_INT32 && x->dtype != TDM_INT64)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "input must be float, double, int32 or int64");
    int64_t f = x->rank > 0 ? x->dims[x->rank - 1] : TDM_DIM_UNKNOWN;
    if (!strcmp(node->op_type, "Scaler")) {
        size_t ns = 0, no = 0;
        tdm_attr_floats(node, "scale", &ns);
        tdm_attr_floats(node, "offset", &no);
        if (ns == 0 && no == 0)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "scale or offset is needed");
        for (size_t k = 0; k < 2; k++) {
            size_t n = k ? no : ns;
            if (n > 1 && f >= 0 && (int64_t)n != f)
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "%s has %zu entries for %lld features",
                                      k ? "offset" : "scale", n, (long long)f);
        }
    } else if (!strcmp(node->op_type, "Normalizer")) {
        const char *norm = tdm_attr_string(node, "norm", "MAX");
        if (strcmp(norm, "MAX") && strcmp(norm, "L1") && strcmp(norm, "L2"))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "norm must be MAX, L1 or L2");
        if (x->rank > 2)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must be [N, F] or [F]");
    } else if (!strcmp(node->op_type, "Imputer")) {
        size_t nf = 0;
        const tdm_attr *fi = tdm_node_attr(node, "imputed_value_floats");
        const tdm_attr *ii = tdm_node_attr(node, "imputed_value_int64s");
        if ((fi != NULL) == (ii != NULL))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "exactly one of imputed_value_floats and imputed_value_int64s");
        nf = fi ? fi->n : ii->n;
        if (nf > 1 && f >= 0 && (int64_t)nf != f)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "%zu imputed values for %lld features", nf, (long long)f);
        tdm_infer_copy(&ctx->out[0], x); /* Imputer keeps the input's type */
        return NULL;
    }
    tdm_infer_copy(&ctx->out[0], x);
    if (strcmp(node->op_type, "Binarizer")) ctx->out[0].dtype = TDM_FLOAT;
    return NULL;
}

/* Y = X[..., indices]: the last axis gathered (indices int64, any shape; flattened). */
static tdm_status *infer_array_feature_extractor(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0], *idx = &ctx->in[1];
    if (idx->dtype != TDM_UNDEFINED && idx->dtype != TDM_INT64)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "Y (indices) must be int64");
    ctx->out[0].dtype = x->dtype;
    if (x->rank < 0) return NULL;
    if (x->rank == 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "X must have rank >= 1");
    int64_t k = TDM_DIM_UNKNOWN;
    if (tdm_info_known(idx)) {
        k = 1;
        for (int i = 0; i < idx->rank; i++) k *= idx->dims[i];
    }
    ctx->out[0].rank = x->rank == 1 ? 2 : x->rank;
    if (x->rank == 1) {
        ctx->out[0].dims[0] = 1;
        ctx->out[0].dims[1] = k;
    } else {
        for (int i = 0; i < x->rank - 1; i++) ctx->out[0].dims[i] = x->dims[i];
        ctx->out[0].dims[x->rank - 1] = k;
    }
    return NULL;
}

static const tdm_attr *list_attr(const tdm_node *node, const char *name, tdm_attr_type type) {
    const tdm_attr *a = tdm_node_attr(node, name);
    return a && a->type == type ? a : NULL;
}

/* Y = X's shape + [categories], float. */
static tdm_status *infer_one_hot_encoder(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0];
    const tdm_attr *ci = list_attr(node, "cats_int64s", TDM_ATTR_INTS);
    const tdm_attr *cs = list_attr(node, "cats_strings", TDM_ATTR_STRINGS);
    if ((ci && ci->n) == (cs && cs->n))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "exactly one of cats_int64s and cats_strings is needed");
    if (x->dtype != TDM_UNDEFINED && (x->dtype == TDM_STRING) != (cs != NULL && cs->n > 0))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "string inputs need cats_strings, numbers cats_int64s");
    ctx->out[0].dtype = TDM_FLOAT;
    if (x->rank < 0) return NULL;
    if (x->rank + 1 > TDM_MAX_RANK)
        return tdm_node_error(node, TDM_ERR_LIMIT, "input rank %d is too large", x->rank);
    ctx->out[0].rank = x->rank + 1;
    for (int i = 0; i < x->rank; i++) ctx->out[0].dims[i] = x->dims[i];
    ctx->out[0].dims[x->rank] = (int64_t)(ci && ci->n ? ci->n : cs->n);
    return NULL;
}

/* Y has X's shape and the values' type. Keys and values as lists (opset 2) or tensors (4). */
static tdm_status *infer_label_encoder(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    static const char *const kinds[3] = {"strings", "int64s", "floats"};
    static const tdm_attr_type types[3] = {TDM_ATTR_STRINGS, TDM_ATTR_INTS, TDM_ATTR_FLOATS};
    static const tdm_dtype dts[3] = {TDM_STRING, TDM_INT64, TDM_FLOAT};
    size_t n_keys = 0, n_vals = 0;
    int key_kind = -1, val_kind = -1;
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "keys_%s", kinds[k]);
        const tdm_attr *a = list_attr(node, name, types[k]);
        if (a) key_kind = k, n_keys = a->n;
        snprintf(name, sizeof name, "values_%s", kinds[k]);
        a = list_attr(node, name, types[k]);
        if (a) val_kind = k, n_vals = a->n;
    }
    const tdm_tensor *kt = tdm_attr_tensor(node, "keys_tensor");
    const tdm_tensor *vt = tdm_attr_tensor(node, "values_tensor");
    tdm_dtype val_dt = val_kind >= 0 ? dts[val_kind] : TDM_UNDEFINED;
    if (kt) n_keys = (size_t)kt->count, key_kind = 3;
    if (vt) n_vals = (size_t)vt->count, val_dt = vt->dtype;
    if (key_kind < 0 || val_dt == TDM_UNDEFINED)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "keys and values are needed");
    if (n_keys != n_vals)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%zu keys but %zu values", n_keys,
                              n_vals);
    tdm_infer_copy(&ctx->out[0], &ctx->in[0]);
    ctx->out[0].dtype = val_dt;
    return NULL;
}

/* string -> int64 or int64 -> string through two parallel lists. */
static tdm_status *infer_category_mapper(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_attr *ci = list_attr(node, "cats_int64s", TDM_ATTR_INTS);
    const tdm_attr *cs = list_attr(node, "cats_strings", TDM_ATTR_STRINGS);
    if (!ci || !cs || ci->n != cs->n)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "cats_int64s and cats_strings must have the same length");
    const tdm_value_info *x = &ctx->in[0];
    if (x->dtype != TDM_UNDEFINED && x->dtype != TDM_STRING && x->dtype != TDM_INT64)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must be string or int64");
    tdm_infer_copy(&ctx->out[0], x);
    if (x->dtype != TDM_UNDEFINED) ctx->out[0].dtype = x->dtype == TDM_STRING ? TDM_INT64 : TDM_STRING;
    return NULL;
}

/* Y [N, sum(inputdimensions)] float from inputs [N, C_i] (or [C_i]). */
static tdm_status *infer_feature_vectorizer(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    size_t nd = 0;
    const int64_t *dims = tdm_attr_ints(node, "inputdimensions", &nd);
    if (nd != (size_t)ctx->n_in)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "inputdimensions has %zu entries for %d inputs", nd, ctx->n_in);
    int64_t total = 0, n = TDM_DIM_UNKNOWN;
    for (size_t i = 0; i < nd; i++) {
        if (dims[i] < 0 || dims[i] > (1 << 24))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "inputdimensions[%zu] = %lld",
                                  i, (long long)dims[i]);
        total += dims[i];
        const tdm_value_info *x = &ctx->in[i];
        if (x->rank >= 2 && x->dims[0] >= 0) n = x->dims[0];
        if (x->rank == 1) n = 1;
    }
    ctx->out[0].dtype = TDM_FLOAT;
    ctx->out[0].rank = 2;
    ctx->out[0].dims[0] = n;
    ctx->out[0].dims[1] = total;
    return NULL;
}

/* ---- support vector machines ---- */

/* kernel_type and kernel_params ([gamma, coef0, degree] or absent) of an SVM. */
static tdm_status *check_svm_kernel(const tdm_node *node) {
    const char *k = tdm_attr_string(node, "kernel_type", "LINEAR");
    if (strcmp(k, "LINEAR") && strcmp(k, "POLY") && strcmp(k, "RBF") && strcmp(k, "SIGMOID"))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "unknown kernel_type '%s' (LINEAR, POLY, RBF or SIGMOID)", k);
    size_t n = 0;
    tdm_attr_floats(node, "kernel_params", &n);
    if (n != 0 && n != 3)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "kernel_params has %zu entries; it is [gamma, coef0, degree]", n);
    TDM_TRY(check_post_transform(node));
    return NULL;
}

/* The model's feature count against the input's last dimension (when known). */
static tdm_status *check_svm_features(const tdm_node *node, const tdm_value_info *x,
                                      int64_t features) {
    int64_t f = x->rank > 0 ? x->dims[x->rank - 1] : TDM_DIM_UNKNOWN;
    if (f >= 0 && f != features)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "the model has %lld features but the input has %lld",
                              (long long)features, (long long)f);
    return NULL;
}

/* Support vectors: `count` vectors of F features (F > 0). */
static tdm_status *svm_vector_features(const tdm_node *node, int64_t count, int64_t *features) {
    size_t n_sv = 0;
    tdm_attr_floats(node, "support_vectors", &n_sv);
    if (n_sv == 0 || n_sv % (size_t)count)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "support_vectors (%zu values) must be a non-empty multiple of the "
                              "%lld support vectors", n_sv, (long long)count);
    *features = (int64_t)(n_sv / (size_t)count);
    return NULL;
}

/* Two forms, as ONNX Runtime reads them: with support vectors (vectors_per_class sums to
 * V > 0: coefficients [C - 1, V], rho and prob_a/prob_b one per class pair) or linear (no
 * support vectors: coefficients [C, F], rho[0] added to every class). Labels Y [N]; scores Z
 * [N, C] (probabilities, or the linear form), [N, C(C-1)/2] (pair scores, C > 2) or [N, 2]. */
static tdm_status *infer_svm_classifier(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0];
    TDM_TRY(check_features(node, x));
    TDM_TRY(check_svm_kernel(node));
    size_t n_int = 0, n_str = strings_len(node, "classlabels_strings");
    tdm_attr_ints(node, "classlabels_ints", &n_int);
    if ((n_int > 0) == (n_str > 0))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "exactly one of classlabels_ints and classlabels_strings is needed");
    int64_t C = (int64_t)(n_int + n_str);
    if (C >= 65536)
        return tdm_node_error(node, TDM_ERR_LIMIT, "%lld classes (at most 65535)", (long long)C);
    int64_t pairs = C * (C - 1) / 2;
    size_t n_coef = 0, n_rho = 0, n_pa = 0, n_pb = 0, n_vpc = 0, n_sv = 0;
    tdm_attr_floats(node, "coefficients", &n_coef);
    tdm_attr_floats(node, "rho", &n_rho);
    tdm_attr_floats(node, "prob_a", &n_pa);
    tdm_attr_floats(node, "prob_b", &n_pb);
    tdm_attr_floats(node, "support_vectors", &n_sv);
    const int64_t *vpc = tdm_attr_ints(node, "vectors_per_class", &n_vpc);
    if (n_coef == 0 || n_rho == 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "coefficients and rho are needed");
    if (n_pa != n_pb)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "prob_a (%zu) and prob_b (%zu) must have the same length", n_pa,
                              n_pb);
    int64_t V = 0, F = 0;
    for (size_t i = 0; i < n_vpc; i++) {
        if (vpc[i] < 0 || vpc[i] > ((int64_t)1 << 40))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "vectors_per_class[%zu] = %lld",
                                  i, (long long)vpc[i]);
        V += vpc[i];
    }
    bool svc = V > 0;
    if (svc) {
        if ((int64_t)n_vpc != C)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "vectors_per_class has %zu entries for %lld classes", n_vpc,
                                  (long long)C);
        if (C < 2)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "a classifier with support vectors needs 2 or more classes");
        TDM_TRY(svm_vector_features(node, V, &F));
        if ((int64_t)n_coef != (C - 1) * V)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "coefficients has %zu values; %lld classes and %lld support "
                                  "vectors need %lld", n_coef, (long long)C, (long long)V,
                                  (long long)((C - 1) * V));
        if ((int64_t)n_rho != pairs || (n_pa && (int64_t)n_pa != pairs))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "rho (%zu) and prob_a/prob_b (%zu) need one value per class "
                                  "pair (%lld)", n_rho, n_pa, (long long)pairs);
    } else {
        if (n_sv)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "support_vectors without vectors_per_class");
        if (n_coef % (size_t)C)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "coefficients (%zu) must be a multiple of the %lld classes",
                                  n_coef, (long long)C);
        F = (int64_t)(n_coef / (size_t)C);
    }
    TDM_TRY(check_svm_features(node, x, F));
    int64_t n = rows_of(x);
    ctx->out[0].dtype = n_str ? TDM_STRING : TDM_INT64;
    ctx->out[0].rank = 1;
    ctx->out[0].dims[0] = n;
    if (ctx->n_out > 1 && ctx->out[1].present) {
        ctx->out[1].dtype = TDM_FLOAT;
        ctx->out[1].rank = 2;
        ctx->out[1].dims[0] = n;
        ctx->out[1].dims[1] = !svc || n_pa ? C : C > 2 ? pairs : 2;
    }
    return NULL;
}

/* With n_supports V > 0: coefficients [V] over the kernel values, support vectors [V, F];
 * else linear: coefficients [F]. rho[0] is added; one_class maps the score to +1 / -1.
 * Y [N, 1]. */
static tdm_status *infer_svm_regressor(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0];
    TDM_TRY(check_features(node, x));
    TDM_TRY(check_svm_kernel(node));
    int64_t V = tdm_attr_int(node, "n_supports", 0), F = 0;
    size_t n_coef = 0, n_rho = 0, n_sv = 0;
    tdm_attr_floats(node, "coefficients", &n_coef);
    tdm_attr_floats(node, "rho", &n_rho);
    tdm_attr_floats(node, "support_vectors", &n_sv);
    if (n_coef == 0 || n_rho == 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "coefficients and rho are needed");
    if (n_rho != 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "rho has %zu values (1 target)",
                              n_rho);
    if (V < 0 || V > ((int64_t)1 << 40))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "n_supports = %lld",
                              (long long)V);
    int64_t one = tdm_attr_int(node, "one_class", 0);
    if (one != 0 && one != 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "one_class must be 0 or 1");
    if (V > 0) {
        TDM_TRY(svm_vector_features(node, V, &F));
        if ((int64_t)n_coef != V)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "coefficients has %zu values for %lld support vectors", n_coef,
                                  (long long)V);
    } else {
        if (n_sv)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "support_vectors without n_supports");
        F = (int64_t)n_coef;
    }
    TDM_TRY(check_svm_features(node, x, F));
    ctx->out[0].dtype = TDM_FLOAT;
    ctx->out[0].rank = 2;
    ctx->out[0].dims[0] = rows_of(x);
    ctx->out[0].dims[1] = 1;
    return NULL;
}

const tdm_op_schema tdm_ops_ml[] = {
    {ML, "TreeEnsembleClassifier", 1, 1, 1, 1, 2, infer_tree_classifier, 0, 0},
    {ML, "TreeEnsembleRegressor", 1, 1, 1, 1, 1, infer_tree_regressor, 0, 0},
    {ML, "TreeEnsemble", 5, 1, 1, 1, 1, infer_tree_ensemble5, 0, 0},
    {ML, "LinearRegressor", 1, 1, 1, 1, 1, infer_linear_regressor, 0, 0},
    {ML, "LinearClassifier", 1, 1, 1, 1, 2, infer_linear_classifier, 0, 0},
    {ML, "Scaler", 1, 1, 1, 1, 1, infer_feature_map, 0, 0},
    {ML, "Normalizer", 1, 1, 1, 1, 1, infer_feature_map, 0, 0},
    {ML, "Binarizer", 1, 1, 1, 1, 1, infer_feature_map, 0, 0},
    {ML, "Imputer", 1, 1, 1, 1, 1, infer_feature_map, 0, 0},
    {ML, "ArrayFeatureExtractor", 1, 2, 2, 1, 1, infer_array_feature_extractor, 0, 0},
    {ML, "OneHotEncoder", 1, 1, 1, 1, 1, infer_one_hot_encoder, 0, 0},
    {ML, "LabelEncoder", 1, 1, 1, 1, 1, infer_label_encoder, 0, 0},
    {ML, "CategoryMapper", 1, 1, 1, 1, 1, infer_category_mapper, 0, 0},
    {ML, "FeatureVectorizer", 1, 1, 64, 1, 1, infer_feature_vectorizer, 0, 0},
    {ML, "SVMClassifier", 1, 1, 1, 1, 2, infer_svm_classifier, 0, 0},
    {ML, "SVMRegressor", 1, 1, 1, 1, 1, infer_svm_regressor, 0, 0},
};
const int tdm_ops_ml_count = (int)(sizeof tdm_ops_ml / sizeof tdm_ops_ml[0]);
