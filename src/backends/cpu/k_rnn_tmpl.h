/* Template: the RNN / GRU / LSTM recurrence for one compute type. Included by k_rnn_cell.c
 * once per type with these defined:
 *   T                 the compute type (float or double)
 *   SFX               function-name suffix (f32, f64)
 *   RT_EXP, RT_TANH, RT_LOG1P, RT_FABS   math functions of that type
 *   RT_GEMM_NT(ctx, M, N, K, A, lda, B, ldb, beta, C, ldc)
 *                     C[M,N] = A[M,K] * B[N,K]^T + beta * C (beta 0: C not read)
 *
 * Plan per direction: one GEMM projects the whole input sequence (X * W^T for all steps
 * and batch entries at once), then each step adds the biases, runs the recurrent GEMM
 * (H * R^T) for all batch entries and applies the gate equations. Batch entries whose
 * sequence is shorter (sequence_lens) stop updating; their outputs stay zero past their
 * end, and a reverse pass starts from each entry's own last step. */

#define RNN_CAT2_(a, b) a##_##b
#define RNN_CAT_(a, b) RNN_CAT2_(a, b)
#define FN(name) RNN_CAT_(name, SFX)

/* Clips (when asked) and applies an activation to n contiguous values in place. */
static void FN(rnn_act)(const tdm_rnn_act *a, bool has_clip, T clip, T *x, int64_t n) {
    if (has_clip)
        for (int64_t i = 0; i < n; i++) x[i] = x[i] < -clip ? -clip : (x[i] > clip ? clip : x[i]);
    const T al = (T)a->alpha, be = (T)a->beta;
    switch (a->kind) {
    case TDM_RA_RELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0 ? x[i] : 0;
        break;
    case TDM_RA_TANH:
        for (int64_t i = 0; i < n; i++) x[i] = RT_TANH(x[i]);
        break;
    case TDM_RA_SIGMOID:
        for (int64_t i = 0; i < n; i++) x[i] = 1 / (1 + RT_EXP(-x[i]));
        break;
    case TDM_RA_AFFINE:
        for (int64_t i = 0; i < n; i++) x[i] = al * x[i] + be;
        break;
    case TDM_RA_LEAKY_RELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] >= 0 ? x[i] : al * x[i];
        break;
    case TDM_RA_THRESHOLDED_RELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] > al ? x[i] : 0;
        break;
    case TDM_RA_SCALED_TANH:
        for (int64_t i = 0; i < n; i++) x[i] = al * RT_TANH(be * x[i]);
        break;
    case TDM_RA_HARD_SIGMOID:
        for (int64_t i = 0; i < n; i++) {
            T v = al * x[i] + be;
            x[i] = v < 0 ? 0 : (v > 1 ? 1 : v);
        }
        break;
    case TDM_RA_ELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] >= 0 ? x[i] : al * (RT_EXP(x[i]) - 1);
        break;
    case TDM_RA_SOFTSIGN:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] / (1 + RT_FABS(x[i]));
        break;
    case TDM_RA_SOFTPLUS:
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] > 0 ? x[i] + RT_LOG1P(RT_EXP(-x[i])) : RT_LOG1P(RT_EXP(x[i]));
        break;
    default:
        break;
    }
}

/* Scratch of one run (element counts in T). */
typedef struct FN(rnn_work) {
    T *xw;    /* [seq*batch, G*H] input projection of one direction */
    T *gates; /* [batch, G*H] */
    T *aux;   /* GRU: [batch, G*H] recurrent product (lbr) or [batch, H] r (.) H */
    T *h, *c; /* [batch, H] state */
    T *bsum;  /* [G*H] folded biases */
} FN(rnn_work);

static void FN(rnn_step_gru)(tdm_kernel_ctx *ctx, const tdm_rnn_desc *d, const tdm_rnn_act *act,
                             FN(rnn_work) *w, const T *rd, const T *rbh, int64_t s) {
    const int64_t B = d->batch, H = d->hidden, GH = 3 * H;
    const T clip = (T)d->clip;
    if (d->linear_before_reset) {
        /* ht = g(Xt*Wh + Wbh + rt (.) (Ht-1*Rh + Rbh)) */
        RT_GEMM_NT(ctx, B, GH, H, w->h, H, rd, H, 0, w->aux, GH);
        for (int64_t b = 0; b < B; b++) {
            if (s >= d->lens[b]) continue;
            T *g = w->gates + b * GH, *rec = w->aux + b * GH, *h = w->h + b * H;
            for (int64_t j = 0; j < 2 * H; j++) g[j] += rec[j];
            FN(rnn_act)(&act[0], d->has_clip, clip, g, 2 * H);
            T *z = g, *r = g + H, *hh = g + 2 * H;
            for (int64_t j = 0; j < H; j++) hh[j] += r[j] * (rec[2 * H + j] + (rbh ? rbh[j] : 0));
            FN(rnn_act)(&act[1], d->has_clip, clip, hh, H);
            for (int64_t j = 0; j < H; j++) h[j] = (1 - z[j]) * hh[j] + z[j] * h[j];
        }
        return;
    }
    /* ht = g(Xt*Wh + Wbh + (rt (.) Ht-1)*Rh + Rbh): z and r first, then the h product. */
    RT_GEMM_NT(ctx, B, 2 * H, H, w->h, H, rd, H, 1, w->gates, GH);
    for (int64_t b = 0; b < B; b++) {
        T *rh = w->aux + b * H;
        if (s >= d->lens[b]) {
            memset(rh, 0, sizeof(T) * (size_t)H);
            continue;
        }
        T *g = w->gates + b * GH, *h = w->h + b * H;
        FN(rnn_act)(&act[0], d->has_clip, clip, g, 2 * H);
        for (int64_t j = 0; j < H; j++) rh[j] = g[H + j] * h[j];
    }
    RT_GEMM_NT(ctx, B, H, H, w->aux, H, rd + 2 * H * H, H, 1, w->gates + 2 * H, GH);
    for (int64_t b = 0; b < B; b++) {
        if (s >= d->lens[b]) continue;
        T *g = w->gates + b * GH, *h = w->h + b * H;
        T *z = g, *hh = g + 2 * H;
        FN(rnn_act)(&act[1], d->has_clip, clip, hh, H);
        for (int64_t j = 0; j < H; j++) h[j] = (1 - z[j]) * hh[j] + z[j] * h[j];
    }
}

static void FN(rnn_step_lstm)(const tdm_rnn_desc *d, const tdm_rnn_act *act, FN(rnn_work) *w,
                              const T *pd, int64_t s) {
    const int64_t B = d->batch, H = d->hidden, GH = 4 * H;
    const T clip = (T)d->clip;
    for (int64_t b = 0; b < B; b++) {
        if (s >= d->lens[b]) continue;
        T *g = w->gates + b * GH, *h = w->h + b * H, *c = w->c + b * H;
        T *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
        if (pd)
            for (int64_t j = 0; j < H; j++) {
                gi[j] += pd[j] * c[j];
                gf[j] += pd[2 * H + j] * c[j];
            }
        FN(rnn_act)(&act[0], d->has_clip, clip, gi, H);
        if (d->input_forget)
            for (int64_t j = 0; j < H; j++) gf[j] = 1 - gi[j];
        else
            FN(rnn_act)(&act[0], d->has_clip, clip, gf, H);
        FN(rnn_act)(&act[1], d->has_clip, clip, gc, H);
        for (int64_t j = 0; j < H; j++) c[j] = gf[j] * c[j] + gi[j] * gc[j];
        if (pd)
            for (int64_t j = 0; j < H; j++) go[j] += pd[H + j] * c[j];
        FN(rnn_act)(&act[0], d->has_clip, clip, go, H);
        memcpy(gc, c, sizeof(T) * (size_t)H); /* gc is free now: h(Ct) goes there */
        FN(rnn_act)(&act[2], false, clip, gc, H);
        for (int64_t j = 0; j < H; j++) h[j] = go[j] * gc[j];
    }
}

/* One direction: dir selects the weight slices and output slots; rev runs backwards. */
static void FN(rnn_direction)(tdm_kernel_ctx *ctx, const tdm_rnn_desc *d, const tdm_rnn_io *io,
                              FN(rnn_work) *w, int dir, bool rev) {
    const int64_t S = d->seq, B = d->batch, I = d->input, H = d->hidden, D = d->dirs;
    const int64_t GH = (int64_t)d->gates * H;
    const T *wd = (const T *)io->w + dir * GH * I;
    const T *rd = (const T *)io->r + dir * GH * H;
    const T *bd = io->bias ? (const T *)io->bias + dir * 2 * GH : NULL;
    const T *pd = io->peep ? (const T *)io->peep + dir * 3 * H : NULL;
    const tdm_rnn_act *act = d->act[dir];
    bool gru = d->cell == TDM_RNN_GRU;

    /* Biases folded once; GRU with linear_before_reset keeps Rbh inside the reset product. */
    for (int64_t j = 0; j < GH; j++) {
        T v = bd ? bd[j] + bd[GH + j] : 0;
        if (gru && d->linear_before_reset && j >= 2 * H && bd) v = bd[j];
        w->bsum[j] = v;
    }
    const T *rbh = gru && bd ? bd + GH + 2 * H : NULL;

    /* Initial state. */
    for (int64_t b = 0; b < B; b++) {
        int64_t off = d->layout ? (b * D + dir) * H : (dir * B + b) * H;
        if (io->h0) memcpy(w->h + b * H, (const T *)io->h0 + off, sizeof(T) * (size_t)H);
        else memset(w->h + b * H, 0, sizeof(T) * (size_t)H);
        if (d->cell == TDM_RNN_LSTM) {
            if (io->c0) memcpy(w->c + b * H, (const T *)io->c0 + off, sizeof(T) * (size_t)H);
            else memset(w->c + b * H, 0, sizeof(T) * (size_t)H);
        }
    }

    /* Input projection of every step at once; rows follow X's layout. */
    RT_GEMM_NT(ctx, S * B, GH, I, (const T *)io->x, I, wd, I, 0, w->xw, GH);

    int64_t max_len = 0;
    for (int64_t b = 0; b < B; b++)
        if (d->lens[b] > max_len) max_len = d->lens[b];

    for (int64_t s = 0; s < max_len; s++) {
        for (int64_t b = 0; b < B; b++) {
            T *g = w->gates + b * GH;
            int64_t len = d->lens[b];
            if (s >= len) {
                memset(g, 0, sizeof(T) * (size_t)GH);
                continue;
            }
            int64_t t = rev ? len - 1 - s : s;
            const T *xr = w->xw + (d->layout ? b * S + t : t * B + b) * GH;
            for (int64_t j = 0; j < GH; j++) g[j] = xr[j] + w->bsum[j];
        }
        if (gru) {
            FN(rnn_step_gru)(ctx, d, act, w, rd, rbh, s);
        } else {
            RT_GEMM_NT(ctx, B, GH, H, w->h, H, rd, H, 1, w->gates, GH);
            if (d->cell == TDM_RNN_LSTM) {
                FN(rnn_step_lstm)(d, act, w, pd, s);
            } else {
                for (int64_t b = 0; b < B; b++) {
                    if (s >= d->lens[b]) continue;
                    T *g = w->gates + b * GH;
                    FN(rnn_act)(&act[0], d->has_clip, (T)d->clip, g, H);
                    memcpy(w->h + b * H, g, sizeof(T) * (size_t)H);
                }
            }
        }
        if (io->y)
            for (int64_t b = 0; b < B; b++) {
                int64_t len = d->lens[b];
                if (s >= len) continue;
                int64_t t = rev ? len - 1 - s : s;
                int64_t off = d->layout ? ((b * S + t) * D + dir) * H : ((t * D + dir) * B + b) * H;
                memcpy((T *)io->y + off, w->h + b * H, sizeof(T) * (size_t)H);
            }
    }

    /* Final state; an empty sequence gives zeros. */
    for (int64_t b = 0; b < B; b++) {
        int64_t off = d->layout ? (b * D + dir) * H : (dir * B + b) * H;
        bool any = d->lens[b] > 0;
        if (io->yh) {
            T *dst = (T *)io->yh + off;
            if (any) memcpy(dst, w->h + b * H, sizeof(T) * (size_t)H);
            else memset(dst, 0, sizeof(T) * (size_t)H);
        }
        if (io->yc) {
            T *dst = (T *)io->yc + off;
            if (any) memcpy(dst, w->c + b * H, sizeof(T) * (size_t)H);
            else memset(dst, 0, sizeof(T) * (size_t)H);
        }
    }
}

tdm_status *FN(tdm_rnn_run)(tdm_kernel_ctx *ctx, const tdm_rnn_desc *d, const tdm_rnn_io *io) {
    const int64_t S = d->seq, B = d->batch, H = d->hidden;
    const int64_t GH = (int64_t)d->gates * H;
    if (B == 0 || H == 0) return NULL;
    /* Element counts: xw S*B*GH, gates B*GH, aux B*GH, h B*H, c B*H, bsum GH. */
    int64_t n_xw, n_bg, n_bh, total;
    if (!tdm_mul_i64(S, B, &n_xw) || !tdm_mul_i64(n_xw, GH, &n_xw) || !tdm_mul_i64(B, GH, &n_bg) ||
        !tdm_mul_i64(B, H, &n_bh) || !tdm_add_i64(n_xw, n_bg, &total) ||
        !tdm_add_i64(total, n_bg, &total) || !tdm_add_i64(total, n_bh, &total) ||
        !tdm_add_i64(total, n_bh, &total) || !tdm_add_i64(total, GH, &total) ||
        total > TDM_MAX_TENSOR_BYTES / (int64_t)sizeof(T))
        return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "scratch memory for the recurrence is too large");
    T *buf = tdm_kscratch(ctx, (size_t)(total > 0 ? total : 1) * sizeof(T));
    if (!buf) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    FN(rnn_work) w;
    w.xw = buf;
    w.gates = w.xw + n_xw;
    w.aux = w.gates + n_bg;
    w.h = w.aux + n_bg;
    w.c = w.h + n_bh;
    w.bsum = w.c + n_bh;
    for (int dir = 0; dir < d->dirs; dir++)
        FN(rnn_direction)(ctx, d, io, &w, dir, d->reverse || dir == 1);
    tdm_free(ctx->alloc, buf);
    return NULL;
}

#undef FN
#undef RNN_CAT_
#undef RNN_CAT2_
