/* Operator schemas: control flow (If, Loop, Scan). Their output shapes depend on which
 * branch runs and how often, so the kernels create their outputs themselves. */
#include "ops/op.h"

static tdm_status *infer_if(tdm_infer_ctx *ctx) {
    const tdm_value_info *c = &ctx->in[0];
    if (c->dtype != TDM_UNDEFINED && c->dtype != TDM_BOOL)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "cond must be bool, got %s",
                              tdm_dtype_name(c->dtype));
    const tdm_attr *t = tdm_node_attr(ctx->node, "then_branch");
    const tdm_attr *e = tdm_node_attr(ctx->node, "else_branch");
    if (!t || t->type != TDM_ATTR_GRAPH || !e || e->type != TDM_ATTR_GRAPH)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "needs graph attributes then_branch and else_branch");
    if (t->g->n_outputs != (size_t)ctx->n_out || e->g->n_outputs != (size_t)ctx->n_out)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "branches have %zu and %zu outputs, the node %d", t->g->n_outputs,
                              e->g->n_outputs, ctx->n_out);
    return NULL;
}

static tdm_status *infer_loop(tdm_infer_ctx *ctx) {
    const tdm_attr *b = tdm_node_attr(ctx->node, "body");
    if (!b || b->type != TDM_ATTR_GRAPH)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "needs a graph attribute 'body'");
    int n_carried = ctx->n_in - 2;
    if (n_carried < 0 || b->g->n_inputs != (size_t)n_carried + 2 ||
        b->g->n_outputs < (size_t)n_carried + 1 || (int)b->g->n_outputs - 1 != ctx->n_out)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "body has %zu inputs and %zu outputs; the node %d inputs and %d outputs",
                              b->g->n_inputs, b->g->n_outputs, ctx->n_in, ctx->n_out);
    return NULL;
}

static tdm_status *infer_scan(tdm_infer_ctx *ctx) {
    const tdm_attr *b = tdm_node_attr(ctx->node, "body");
    if (!b || b->type != TDM_ATTR_GRAPH)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "needs a graph attribute 'body'");
    int64_t m = tdm_attr_int(ctx->node, "num_scan_inputs", -1);
    int first = ctx->opset < 9 ? 1 : 0;
    if (m < 1 || m > ctx->n_in - first)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "num_scan_inputs %lld is invalid",
                              (long long)m);
    if (b->g->n_inputs != (size_t)(ctx->n_in - first) || b->g->n_outputs != (size_t)ctx->n_out)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "body inputs/outputs do not match the node's");
    return NULL;
}

const tdm_op_schema tdm_ops_control[] = {
    {"", "If", 1, 1, 1, 0, 4096, infer_if, TDM_OP_DATA_DEPENDENT, 0},
    {"", "Loop", 1, 2, 4096, 0, 4096, infer_loop, TDM_OP_DATA_DEPENDENT | TDM_OP_OPTIONAL_SLOTS, 0},
    {"", "Scan", 8, 0, 4096, 1, 4096, infer_scan, TDM_OP_DATA_DEPENDENT, 0}, /* Scan-8: input 0 optional */
};
const int tdm_ops_control_count = (int)(sizeof tdm_ops_control / sizeof tdm_ops_control[0]);
