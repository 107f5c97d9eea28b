/* Operator schemas: tandem's channel-blocked layout operators (contract in ops/fused.h).
 * Only the blocked-layout pass (src/graph/fuse_blocked.c) creates them. A blocked tensor
 * is an ordinary float tensor whose logical shape spells the layout out:
 * plain [N, C, d1..dk] <-> blocked [N, ceil(C/B), d1..dk, B], channel c at [n, c/B, ..., c%B],
 * the padded channels (c >= C) zero when ToBlocked or a convolution writes them; with block
 * TDM_BLOCK_CHANNELS_LAST, B = C per tensor: [N, 1, d1..dk, C] (channels-last). */
#include <string.h>

#include "ops/fused.h"

/* The block (last dim) of a blocked tensor and the plain info with `channels` channels. */
static void to_plain(const tdm_value_info *b, int64_t channels, tdm_value_info *p) {
    *p = *b;
    p->data = NULL;
    if (b->rank < 0) return;
    p->rank = b->rank - 1;
    p->dims[1] = channels;
}

static int64_t ceil_div(int64_t a, int64_t b) { return a < 0 ? TDM_DIM_UNKNOWN : (a + b - 1) / b; }

/* Blocks of `channels` channels (UNKNOWN when channels-last and the count is unknown). */
static int64_t n_blocks(int64_t channels, int64_t block) {
    return block == TDM_BLOCK_CHANNELS_LAST ? 1 : ceil_div(channels, block);
}

/* The last dim of a blocked tensor of `channels` channels: the block, or (channels-last) C. */
static int64_t block_dim(int64_t channels, int64_t block) {
    return block == TDM_BLOCK_CHANNELS_LAST ? (channels >= 0 ? channels : TDM_DIM_UNKNOWN) : block;
}

/* out = blocked form of plain info p. */
static void to_blocked(const tdm_value_info *p, int64_t block, tdm_value_info *out) {
    out->dtype = p->dtype;
    if (p->rank < 0 || p->rank + 1 > TDM_MAX_RANK) {
        out->rank = -1;
        return;
    }
    out->rank = p->rank + 1;
    for (int d = 0; d < p->rank; d++) out->dims[d] = p->dims[d];
    out->dims[1] = n_blocks(p->dims[1], block);
    out->dims[p->rank] = block_dim(p->dims[1], block);
}

static tdm_status *get_block(const tdm_node *node, int64_t *block) {
    *block = tdm_attr_int(node, "block", 0);
    if ((*block < 1 || *block > 64) && *block != TDM_BLOCK_CHANNELS_LAST)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "block must be in [1, 64] or %d (channels-last), got %lld",
                              TDM_BLOCK_CHANNELS_LAST, (long long)*block);
    return NULL;
}

/* The blocked input `in` must agree with `channels` channels in blocks of `block`. */
static tdm_status *check_blocked(const tdm_node *node, const tdm_value_info *in, int64_t channels,
                                 int64_t block, int min_rank) {
    if (in->rank < 0) return NULL;
    if (in->rank < min_rank || in->rank > TDM_MAX_RANK)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "blocked input has rank %d",
                              in->rank);
    int64_t last = block_dim(channels, block), nb = n_blocks(channels, block);
    if ((in->dims[in->rank - 1] >= 0 && last >= 0 && in->dims[in->rank - 1] != last) ||
        (in->dims[1] >= 0 && nb >= 0 && in->dims[1] != nb))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "blocked input does not hold %lld channels in blocks of %lld",
                              (long long)channels, (long long)block);
    return NULL;
}

tdm_status *tdm_fused_infer_to_blocked(tdm_infer_ctx *ctx) {
    int64_t block;
    TDM_TRY(get_block(ctx->node, &block));
    const tdm_value_info *x = &ctx->in[0];
    if (x->rank >= 0 && (x->rank < 3 || x->rank >= TDM_MAX_RANK))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input has rank %d", x->rank);
    to_blocked(x, block, &ctx->out[0]);
    return NULL;
}

tdm_status *tdm_fused_infer_from_blocked(tdm_infer_ctx *ctx) {
    int64_t block, channels = tdm_attr_int(ctx->node, "channels", 0);
    TDM_TRY(get_block(ctx->node, &block));
    if (channels < 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "channels must be positive");
    TDM_TRY(check_blocked(ctx->node, &ctx->in[0], channels, block, 4));
    to_plain(&ctx->in[0], channels, &ctx->out[0]);
    return NULL;
}

/* BlockedConv: X blocked (rank of W + 1) or plain (rank of W); Y blocked. */
tdm_status *tdm_fused_infer_blocked_conv(tdm_infer_ctx *ctx) {
    const tdm_op_schema *fc = tdm_op_find(TDM_FUSED_DOMAIN, "FusedConv", 1);
    if (!fc || !fc->infer)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "no FusedConv schema to infer with");
    int64_t block;
    TDM_TRY(get_block(ctx->node, &block));
    const tdm_value_info *x = &ctx->in[0], *w = &ctx->in[1];
    ctx->out[0].dtype = x->dtype;
    if (x->rank < 0 || w->rank < 0) return NULL;
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    int64_t C = w->dims[1] >= 0 && group >= 1 ? w->dims[1] * group : TDM_DIM_UNKNOWN;
    tdm_value_info in[4], y = ctx->out[0];
    int n = ctx->n_in < 4 ? ctx->n_in : 4;
    for (int i = 0; i < n; i++) in[i] = ctx->in[i];
    if (x->rank == w->rank + 1) {
        TDM_TRY(check_blocked(ctx->node, x, C, block, 4));
        to_plain(x, C, &in[0]);
    } else if (x->rank != w->rank) {
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "X has rank %d, W %d (X must be plain or blocked)", x->rank, w->rank);
    }
    tdm_infer_ctx c = *ctx;
    c.opset = 1;
    c.n_in = n < 3 ? n : 3; /* Z is checked against the blocked Y below */
    c.in = in;
    c.out = &y;
    TDM_TRY(fc->infer(&c));
    to_blocked(&y, block, &ctx->out[0]);
    const tdm_value_info *o = &ctx->out[0];
    if (ctx->n_in > 3 && ctx->in[3].present && ctx->in[3].rank >= 0 && o->rank >= 0) {
        const tdm_value_info *z = &ctx->in[3];
        bool bad = z->rank != o->rank;
        for (int d = 0; !bad && d < o->rank; d++)
            bad = z->dims[d] >= 0 && o->dims[d] >= 0 && z->dims[d] != o->dims[d];
        if (bad)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "Z does not have the blocked output's shape");
    }
    return NULL;
}

/* BlockedPool: attribute `op` names the pooling (MaxPool, AveragePool, GlobalAveragePool,
 * GlobalMaxPool) whose other attributes the node carries, read as of opset `src_opset`. */
tdm_status *tdm_fused_infer_blocked_pool(tdm_infer_ctx *ctx) {
    const char *op = tdm_attr_string(ctx->node, "op", "");
    int64_t opset = tdm_attr_int(ctx->node, "src_opset", 0);
    int64_t block, channels = tdm_attr_int(ctx->node, "channels", 0);
    TDM_TRY(get_block(ctx->node, &block));
    static const char *const ok[] = {"MaxPool", "AveragePool", "GlobalAveragePool",
                                     "GlobalMaxPool"};
    bool known = false;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) known |= strcmp(op, ok[i]) == 0;
    const tdm_op_schema *ps = known && opset > 0 && opset < 1000 ? tdm_op_find("", op, (int)opset)
                                                                 : NULL;
    if (!ps || !ps->infer || channels < 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "bad pooling '%s' (opset %lld, %lld channels)", op, (long long)opset,
                              (long long)channels);
    TDM_TRY(check_blocked(ctx->node, &ctx->in[0], channels, block, 4));
    tdm_value_info in, y = ctx->out[0];
    to_plain(&ctx->in[0], channels, &in);
    tdm_infer_ctx c = *ctx;
    c.opset = (int)opset;
    c.n_in = 1;
    c.in = &in;
    c.n_out = 1;
    c.out = &y;
    TDM_TRY(ps->infer(&c));
    to_blocked(&y, block, &ctx->out[0]);
    return NULL;
}

/* BlockedConcat: inputs blocked with channels[k] channels, the same N and spatial dims; Y holds
 * their sum. */
tdm_status *tdm_fused_infer_blocked_concat(tdm_infer_ctx *ctx) {
    int64_t block;
    TDM_TRY(get_block(ctx->node, &block));
    size_t nc = 0;
    const int64_t *ch = tdm_attr_ints(ctx->node, "channels", &nc);
    if (!ch || nc != (size_t)ctx->n_in)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "channels must give one count per input");
    int64_t total = 0;
    int rank = -1;
    for (int k = 0; k < ctx->n_in; k++) {
        if (ch[k] < 1)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "channels must be positive");
        TDM_TRY(check_blocked(ctx->node, &ctx->in[k], ch[k], block, 4));
        const tdm_value_info *x = &ctx->in[k];
        if (x->dtype != TDM_FLOAT && x->dtype != TDM_UNDEFINED)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inputs must be float");
        if (x->rank >= 0) {
            if (rank >= 0 && x->rank != rank)
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inputs differ in rank");
            rank = x->rank;
        }
        total += ch[k];
    }
    tdm_value_info *y = &ctx->out[0];
    y->dtype = TDM_FLOAT;
    y->rank = rank;
    if (rank < 0) return NULL;
    for (int d = 0; d < rank; d++) {
        y->dims[d] = TDM_DIM_UNKNOWN;
        if (d == 1) continue;
        for (int k = 0; k < ctx->n_in; k++) {
            int64_t v = ctx->in[k].rank == rank ? ctx->in[k].dims[d] : TDM_DIM_UNKNOWN;
            if (v < 0) continue;
            if (y->dims[d] >= 0 && y->dims[d] != v)
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "inputs differ in dim %d", d);
            y->dims[d] = v;
        }
    }
    y->dims[1] = n_blocks(total, block);
    y->dims[rank - 1] = block_dim(total, block);
    return NULL;
}
