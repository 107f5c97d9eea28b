/* CPU kernels: rnn family (RNN, GRU, LSTM). This file reads the node (attributes, input
 * shapes, sequence lengths) into a tdm_rnn_desc and hands the data to the float or double
 * recurrence (k_rnn_cell.c); float16 and bfloat16 run through float copies. */
#include <string.h>
#include <strings.h>

#include "backends/cpu/k_rnn_impl.h"
#include "core/alloc.h"
#include "core/checked.h"

typedef struct act_name {
    const char *name;
    int kind;
    bool uses_alpha, uses_beta;
    float alpha, beta; /* defaults when the lists run short */
} act_name;

static const act_name k_acts[] = {
    {"Relu", TDM_RA_RELU, false, false, 0, 0},
    {"Tanh", TDM_RA_TANH, false, false, 0, 0},
    {"Sigmoid", TDM_RA_SIGMOID, false, false, 0, 0},
    {"Affine", TDM_RA_AFFINE, true, true, 1.0f, 0.0f},
    {"LeakyRelu", TDM_RA_LEAKY_RELU, true, false, 0.01f, 0},
    {"ThresholdedRelu", TDM_RA_THRESHOLDED_RELU, true, false, 1.0f, 0},
    {"ScaledTanh", TDM_RA_SCALED_TANH, true, true, 1.0f, 1.0f},
    {"HardSigmoid", TDM_RA_HARD_SIGMOID, true, true, 0.2f, 0.5f},
    {"Elu", TDM_RA_ELU, true, false, 1.0f, 0},
    {"Softsign", TDM_RA_SOFTSIGN, false, false, 0, 0},
    {"Softplus", TDM_RA_SOFTPLUS, false, false, 0, 0},
};

/* Reads activations / activation_alpha / activation_beta into d->act. */
static tdm_status *parse_activations(const tdm_node *node, tdm_rnn_desc *d) {
    static const int defaults[3][3] = {
        {TDM_RA_TANH, 0, 0},
        {TDM_RA_SIGMOID, TDM_RA_TANH, 0},
        {TDM_RA_SIGMOID, TDM_RA_TANH, TDM_RA_TANH},
    };
    int per_dir = d->cell == TDM_RNN_SIMPLE ? 1 : d->cell == TDM_RNN_GRU ? 2 : 3;
    const tdm_attr *names = tdm_node_attr(node, "activations");
    size_t n_alpha = 0, n_beta = 0;
    const float *alphas = tdm_attr_floats(node, "activation_alpha", &n_alpha);
    const float *betas = tdm_attr_floats(node, "activation_beta", &n_beta);
    size_t ia = 0, ib = 0;
    if (!names || names->n == 0) {
        for (int dir = 0; dir < 2; dir++)
            for (int k = 0; k < 3; k++) d->act[dir][k] = (tdm_rnn_act){defaults[d->cell][k], 0, 0};
        return NULL;
    }
    if (names->type != TDM_ATTR_STRINGS)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "activations must be a list of strings");
    size_t want = (size_t)(per_dir * d->dirs);
    /* A bidirectional node may list one direction's functions for both. */
    if (names->n != want && !(d->dirs == 2 && names->n == (size_t)per_dir))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "activations lists %zu functions, expected %zu", names->n, want);
    for (int dir = 0; dir < d->dirs; dir++) {
        for (int k = 0; k < per_dir; k++) {
            size_t idx = names->n == want ? (size_t)(dir * per_dir + k) : (size_t)k;
            const char *s = names->strings[idx];
            const act_name *found = NULL;
            for (size_t j = 0; j < sizeof k_acts / sizeof k_acts[0]; j++)
                if (!strcasecmp(s, k_acts[j].name)) found = &k_acts[j];
            if (!found)
                return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "activation '%s' is not supported", s);
            tdm_rnn_act a = {found->kind, found->alpha, found->beta};
            if (found->uses_alpha && ia < n_alpha) a.alpha = alphas[ia++];
            if (found->uses_beta && ib < n_beta) a.beta = betas[ib++];
            d->act[dir][k] = a;
        }
    }
    if (d->dirs == 1) memcpy(d->act[1], d->act[0], sizeof d->act[0]);
    return NULL;
}

/* Checks a present input's dtype and exact shape. */
static tdm_status *check_input(const tdm_kernel_ctx *ctx, int i, const char *what, int rank,
                               const int64_t *dims) {
    const tdm_tensor *t = ctx->in[i];
    if (t->dtype != ctx->in[0]->dtype)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "%s is %s but X is %s", what,
                              tdm_dtype_name(t->dtype), tdm_dtype_name(ctx->in[0]->dtype));
    bool ok = t->rank == rank;
    for (int k = 0; ok && k < rank; k++) ok = t->dims[k] == dims[k];
    if (!ok) {
        char got[128], want[128];
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "%s has shape %s, expected %s",
                              what, tdm_shape_str(t->rank, t->dims, got, sizeof got),
                              tdm_shape_str(rank, dims, want, sizeof want));
    }
    return NULL;
}

static const tdm_tensor *opt_in(const tdm_kernel_ctx *ctx, int i) {
    return i < ctx->n_in ? ctx->in[i] : NULL;
}

static void *opt_out(const tdm_kernel_ctx *ctx, int i) {
    return i < ctx->n_out && ctx->out[i] ? ctx->out[i]->data : NULL;
}

/* Fills the description from attributes and input shapes, validating everything. */
static tdm_status *describe(tdm_kernel_ctx *ctx, int cell, tdm_rnn_desc *d) {
    const tdm_node *node = ctx->node;
    memset(d, 0, sizeof *d);
    d->cell = cell;
    d->gates = cell == TDM_RNN_SIMPLE ? 1 : cell == TDM_RNN_GRU ? 3 : 4;
    const char *dir = tdm_attr_string(node, "direction", "forward");
    if (!strcmp(dir, "forward")) {
        d->dirs = 1;
    } else if (!strcmp(dir, "reverse")) {
        d->dirs = 1;
        d->reverse = true;
    } else if (!strcmp(dir, "bidirectional")) {
        d->dirs = 2;
    } else {
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown direction '%s'", dir);
    }
    int64_t layout = ctx->opset >= 14 ? tdm_attr_int(node, "layout", 0) : 0;
    if (layout != 0 && layout != 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "layout must be 0 or 1");
    d->layout = (int)layout;
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1], *r = ctx->in[2];
    if (x->rank != 3 || w->rank != 3 || r->rank != 3)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "X, W and R must be 3-D");
    d->seq = x->dims[layout ? 1 : 0];
    d->batch = x->dims[layout ? 0 : 1];
    d->input = x->dims[2];
    d->hidden = tdm_attr_int(node, "hidden_size", r->dims[2]);
    if (d->hidden < 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "hidden_size must be positive");
    const int64_t D = d->dirs, H = d->hidden, G = d->gates;
    int64_t GH;
    if (!tdm_mul_i64(G, H, &GH) || GH > TDM_MAX_TENSOR_BYTES)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "hidden_size is too large");
    int64_t wd[3] = {D, GH, d->input}, rdims[3] = {D, GH, H}, bd[2] = {D, 2 * GH};
    int64_t hd[3] = {layout ? d->batch : D, layout ? D : d->batch, H}, pdims[2] = {D, 3 * H};
    TDM_TRY(check_input(ctx, 1, "W", 3, wd));
    TDM_TRY(check_input(ctx, 2, "R", 3, rdims));
    if (opt_in(ctx, 3)) TDM_TRY(check_input(ctx, 3, "B", 2, bd));
    if (opt_in(ctx, 5)) TDM_TRY(check_input(ctx, 5, "initial_h", 3, hd));
    if (cell == TDM_RNN_LSTM) {
        if (opt_in(ctx, 6)) TDM_TRY(check_input(ctx, 6, "initial_c", 3, hd));
        if (opt_in(ctx, 7)) TDM_TRY(check_input(ctx, 7, "P", 2, pdims));
    }
    const tdm_attr *clip = tdm_node_attr(node, "clip");
    if (clip) {
        d->has_clip = true;
        d->clip = clip->f;
        if (!(d->clip > 0))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "clip must be positive");
    }
    d->linear_before_reset = tdm_attr_int(node, "linear_before_reset", 0) != 0;
    d->input_forget = tdm_attr_int(node, "input_forget", 0) != 0;
    return parse_activations(node, d);
}

/* Sequence lengths into `lens` (batch entries), each checked against seq. */
static tdm_status *read_lens(tdm_kernel_ctx *ctx, const tdm_rnn_desc *d, int64_t *lens) {
    const tdm_tensor *sl = opt_in(ctx, 4);
    if (!sl) {
        for (int64_t b = 0; b < d->batch; b++) lens[b] = d->seq;
        return NULL;
    }
    if ((sl->dtype != TDM_INT32 && sl->dtype != TDM_INT64) || sl->rank != 1 ||
        sl->dims[0] != d->batch)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "sequence_lens must be an int32 vector of batch_size (%lld) values",
                              (long long)d->batch);
    for (int64_t b = 0; b < d->batch; b++) {
        int64_t v = sl->dtype == TDM_INT32 ? ((const int32_t *)sl->data)[b]
                                           : ((const int64_t *)sl->data)[b];
        if (v < 0 || v > d->seq)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "sequence_lens[%lld] = %lld is outside [0, %lld]", (long long)b,
                                  (long long)v, (long long)d->seq);
        lens[b] = v;
    }
    return NULL;
}

/* float16 / bfloat16: converts inputs to float, runs, converts the outputs back. */
static tdm_status *run_half(tdm_kernel_ctx *ctx, const tdm_rnn_desc *d) {
    static const int in_idx[7] = {0, 1, 2, 3, 5, 6, 7};
    const tdm_tensor *ins[7] = {0};
    void *outs[3] = {0};
    int64_t in_off[8] = {0}, out_off[4] = {0};
    int64_t total = 0;
    bool bf = ctx->in[0]->dtype == TDM_BFLOAT16;
    for (int k = 0; k < 7; k++) {
        ins[k] = opt_in(ctx, in_idx[k]);
        if (d->cell != TDM_RNN_LSTM && k >= 5) ins[k] = NULL;
        in_off[k] = total;
        if (ins[k]) total += ins[k]->count;
    }
    in_off[7] = total;
    for (int k = 0; k < 3; k++) {
        out_off[k] = total;
        outs[k] = opt_out(ctx, k);
        if (outs[k]) total += ctx->out[k]->count;
    }
    float *buf = tdm_kscratch(ctx, (size_t)(total > 0 ? total : 1) * sizeof(float));
    if (!buf) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    for (int k = 0; k < 7; k++) {
        if (!ins[k]) continue;
        const uint16_t *src = ins[k]->data;
        float *dst = buf + in_off[k];
        for (int64_t i = 0; i < ins[k]->count; i++)
            dst[i] = bf ? tdm_bf16_to_f32(src[i]) : tdm_f16_to_f32(src[i]);
    }
    for (int k = 0; k < 3; k++)
        if (outs[k]) memset(buf + out_off[k], 0, sizeof(float) * (size_t)ctx->out[k]->count);
    tdm_rnn_io io = {
        buf + in_off[0], buf + in_off[1], buf + in_off[2],
        ins[3] ? buf + in_off[3] : NULL, ins[4] ? buf + in_off[4] : NULL,
        ins[5] ? buf + in_off[5] : NULL, ins[6] ? buf + in_off[6] : NULL,
        outs[0] ? buf + out_off[0] : NULL, outs[1] ? buf + out_off[1] : NULL,
        outs[2] ? buf + out_off[2] : NULL,
    };
    tdm_status *st = tdm_rnn_run_f32(ctx, d, &io);
    if (!st)
        for (int k = 0; k < 3; k++) {
            if (!outs[k]) continue;
            uint16_t *dst = outs[k];
            const float *src = buf + out_off[k];
            for (int64_t i = 0; i < ctx->out[k]->count; i++)
                dst[i] = bf ? tdm_f32_to_bf16(src[i]) : tdm_f32_to_f16(src[i]);
        }
    tdm_free(ctx->alloc, buf);
    return st;
}

static tdm_status *run_cell(tdm_kernel_ctx *ctx, int cell) {
    tdm_rnn_desc d;
    TDM_TRY(describe(ctx, cell, &d));
    if (cell != TDM_RNN_LSTM && ctx->n_out > 2 && ctx->out[2])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "too many outputs");
    int64_t *lens = tdm_kscratch(ctx, sizeof(int64_t) * (size_t)(d.batch > 0 ? d.batch : 1));
    if (!lens) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    tdm_status *st = read_lens(ctx, &d, lens);
    d.lens = lens;
    if (!st) {
        tdm_dtype dt = ctx->in[0]->dtype;
        if (dt == TDM_FLOAT16 || dt == TDM_BFLOAT16) {
            st = run_half(ctx, &d);
        } else {
            const tdm_tensor *b = opt_in(ctx, 3), *h0 = opt_in(ctx, 5);
            const tdm_tensor *c0 = cell == TDM_RNN_LSTM ? opt_in(ctx, 6) : NULL;
            const tdm_tensor *p = cell == TDM_RNN_LSTM ? opt_in(ctx, 7) : NULL;
            tdm_rnn_io io = {
                ctx->in[0]->data, ctx->in[1]->data, ctx->in[2]->data,
                b ? b->data : NULL, h0 ? h0->data : NULL, c0 ? c0->data : NULL,
                p ? p->data : NULL, opt_out(ctx, 0), opt_out(ctx, 1),
                cell == TDM_RNN_LSTM ? opt_out(ctx, 2) : NULL,
            };
            st = dt == TDM_DOUBLE ? tdm_rnn_run_f64(ctx, &d, &io) : tdm_rnn_run_f32(ctx, &d, &io);
        }
    }
    tdm_free(ctx->alloc, lens);
    return st;
}

static tdm_status *run_rnn(tdm_kernel_ctx *ctx) { return run_cell(ctx, TDM_RNN_SIMPLE); }
static tdm_status *run_gru(tdm_kernel_ctx *ctx) { return run_cell(ctx, TDM_RNN_GRU); }
static tdm_status *run_lstm(tdm_kernel_ctx *ctx) { return run_cell(ctx, TDM_RNN_LSTM); }

const tdm_kernel_def tdm_cpu_kernels_rnn[] = {
    {"", "RNN", 1, 0, 0, TDM_T_FLOATS, run_rnn, NULL, NULL},
    {"", "GRU", 1, 0, 0, TDM_T_FLOATS, run_gru, NULL, NULL},
    {"", "LSTM", 1, 0, 0, TDM_T_FLOATS, run_lstm, NULL, NULL},
};
const int tdm_cpu_kernels_rnn_count = (int)(sizeof tdm_cpu_kernels_rnn / sizeof tdm_cpu_kernels_rnn[0]);
