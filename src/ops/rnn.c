/* Operator schemas: rnn family (RNN, GRU, LSTM).
 *
 * Shapes (layout 0, the only layout before opset 14):
 *   X [seq, batch, input], W [dirs, G*hidden, input], R [dirs, G*hidden, hidden],
 *   Y [seq, dirs, batch, hidden], Y_h / Y_c [dirs, batch, hidden].
 * Layout 1 puts batch first: X [batch, seq, input], Y [batch, seq, dirs, hidden],
 * Y_h / Y_c [batch, dirs, hidden]. G is 1 (RNN), 3 (GRU) or 4 (LSTM). */
#include <string.h>

#include "ops/op.h"

static tdm_status *rnn_dirs(const tdm_node *node, int *dirs) {
    const char *d = tdm_attr_string(node, "direction", "forward");
    if (!strcmp(d, "forward") || !strcmp(d, "reverse")) {
        *dirs = 1;
    } else if (!strcmp(d, "bidirectional")) {
        *dirs = 2;
    } else {
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "direction must be forward, reverse or bidirectional, got '%s'", d);
    }
    return NULL;
}

/* Checks that a known dim equals an expected known value. */
static tdm_status *check_dim(const tdm_node *node, const char *what, int axis, int64_t got,
                             int64_t want) {
    if (got >= 0 && want >= 0 && got != want)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "%s has %lld in dimension %d, expected %lld", what,
                              (long long)got, axis, (long long)want);
    return NULL;
}

static tdm_status *check_rank(const tdm_node *node, const char *what, const tdm_value_info *v,
                              int rank) {
    if (v->present && v->rank >= 0 && v->rank != rank)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "%s must have rank %d, got %d",
                              what, rank, v->rank);
    return NULL;
}

static tdm_status *infer_recurrent(tdm_infer_ctx *ctx, int gates) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0], *w = &ctx->in[1], *r = &ctx->in[2];
    int dirs = 1;
    TDM_TRY(rnn_dirs(node, &dirs));
    int64_t layout = ctx->opset >= 14 ? tdm_attr_int(node, "layout", 0) : 0;
    if (layout != 0 && layout != 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "layout must be 0 or 1, got %lld",
                              (long long)layout);
    int64_t hidden = tdm_attr_int(node, "hidden_size", TDM_DIM_UNKNOWN);
    if (tdm_node_attr(node, "hidden_size") && hidden <= 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "hidden_size must be positive");
    TDM_TRY(check_rank(node, "X", x, 3));
    TDM_TRY(check_rank(node, "W", w, 3));
    TDM_TRY(check_rank(node, "R", r, 3));
    if (r->present && r->rank == 3) {
        if (hidden < 0) hidden = r->dims[2];
        TDM_TRY(check_dim(node, "R", 2, r->dims[2], hidden));
    }
    if (hidden < 0 && w->present && w->rank == 3 && w->dims[1] >= 0)
        hidden = w->dims[1] / gates;
    int64_t gh = hidden >= 0 ? hidden * gates : TDM_DIM_UNKNOWN;
    if (w->present && w->rank == 3) {
        TDM_TRY(check_dim(node, "W", 0, w->dims[0], dirs));
        TDM_TRY(check_dim(node, "W", 1, w->dims[1], gh));
        if (x->rank == 3) TDM_TRY(check_dim(node, "W", 2, w->dims[2], x->dims[2]));
    }
    if (r->present && r->rank == 3) {
        TDM_TRY(check_dim(node, "R", 0, r->dims[0], dirs));
        TDM_TRY(check_dim(node, "R", 1, r->dims[1], gh));
    }
    if (ctx->n_in > 3 && ctx->in[3].present) {
        const tdm_value_info *b = &ctx->in[3];
        TDM_TRY(check_rank(node, "B", b, 2));
        if (b->rank == 2) {
            TDM_TRY(check_dim(node, "B", 0, b->dims[0], dirs));
            TDM_TRY(check_dim(node, "B", 1, b->dims[1], gh >= 0 ? 2 * gh : -1));
        }
    }
    int64_t seq = TDM_DIM_UNKNOWN, batch = TDM_DIM_UNKNOWN;
    if (x->rank == 3) {
        seq = x->dims[layout ? 1 : 0];
        batch = x->dims[layout ? 0 : 1];
    }
    if (ctx->n_in > 4 && ctx->in[4].present) {
        const tdm_value_info *sl = &ctx->in[4];
        TDM_TRY(check_rank(node, "sequence_lens", sl, 1));
        if (sl->rank == 1) TDM_TRY(check_dim(node, "sequence_lens", 0, sl->dims[0], batch));
    }
    for (int k = 5; k <= 6 && k < ctx->n_in; k++) {
        const tdm_value_info *h = &ctx->in[k];
        if (!h->present) continue;
        const char *what = k == 5 ? "initial_h" : "initial_c";
        TDM_TRY(check_rank(node, what, h, 3));
        if (h->rank == 3) {
            TDM_TRY(check_dim(node, what, layout ? 1 : 0, h->dims[layout ? 1 : 0], dirs));
            TDM_TRY(check_dim(node, what, layout ? 0 : 1, h->dims[layout ? 0 : 1], batch));
            TDM_TRY(check_dim(node, what, 2, h->dims[2], hidden));
        }
    }
    if (ctx->n_in > 7 && ctx->in[7].present) {
        const tdm_value_info *p = &ctx->in[7];
        TDM_TRY(check_rank(node, "P", p, 2));
        if (p->rank == 2) {
            TDM_TRY(check_dim(node, "P", 0, p->dims[0], dirs));
            TDM_TRY(check_dim(node, "P", 1, p->dims[1], hidden >= 0 ? 3 * hidden : -1));
        }
    }
    for (int i = 0; i < ctx->n_out; i++) {
        tdm_value_info *o = &ctx->out[i];
        if (!o->present) continue;
        o->dtype = x->dtype;
        if (i == 0) {
            o->rank = 4;
            if (layout) { /* [batch, seq, dirs, hidden] */
                o->dims[0] = batch;
                o->dims[1] = seq;
                o->dims[2] = dirs;
            } else { /* [seq, dirs, batch, hidden] */
                o->dims[0] = seq;
                o->dims[1] = dirs;
                o->dims[2] = batch;
            }
            o->dims[3] = hidden;
        } else {
            o->rank = 3;
            o->dims[0] = layout ? batch : dirs;
            o->dims[1] = layout ? dirs : batch;
            o->dims[2] = hidden;
        }
    }
    return NULL;
}

static tdm_status *infer_rnn(tdm_infer_ctx *ctx) { return infer_recurrent(ctx, 1); }
static tdm_status *infer_gru(tdm_infer_ctx *ctx) { return infer_recurrent(ctx, 3); }
static tdm_status *infer_lstm(tdm_infer_ctx *ctx) { return infer_recurrent(ctx, 4); }

const tdm_op_schema tdm_ops_rnn[] = {
    {"", "RNN", 1, 3, 6, 0, 2, infer_rnn, 0, 0},
    {"", "GRU", 1, 3, 6, 0, 2, infer_gru, 0, 0},
    {"", "LSTM", 1, 3, 8, 0, 3, infer_lstm, 0, 0},
};
const int tdm_ops_rnn_count = (int)(sizeof tdm_ops_rnn / sizeof tdm_ops_rnn[0]);
